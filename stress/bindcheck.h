/* SPDX-License-Identifier: MIT */
/*
 * The bind-vs-destroy binder's check, apart so a test can replay the
 * interleavings it must judge. A binder may call a foreign value in the
 * word a violation only if the record it read is the record it bound: no
 * unregister of that QPN began after its snapshot, and none was already in
 * progress when it took it (a destroyer can stall between its destroy_begin
 * and its unregister, then unregister a record registered and bound later).
 */
#ifndef CEP_STRESS_BINDCHECK_H
#define CEP_STRESS_BINDCHECK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Per QPN, shared by all threads; every access seq_cst (the proof below
 * orders the two counters and the library's operations in one total order). */
struct bind_watch {
	_Atomic uint32_t gen;  /* replacements begun */
	_Atomic uint32_t busy; /* replacements begun and not ended */
};

struct bind_snap {
	uint32_t gen, busy;
};

/* Destroyer: around each unregister + re-register of the QPN. */
static inline void bind_watch_replace_begin(struct bind_watch *w)
{
	atomic_fetch_add(&w->busy, 1); /* before gen: a snapshot between sees busy */
	atomic_fetch_add(&w->gen, 1);
}

static inline void bind_watch_replace_end(struct bind_watch *w)
{
	atomic_fetch_sub(&w->busy, 1);
}

/* Binder: before its bind. gen first, then busy. */
static inline struct bind_snap bind_watch_snapshot(struct bind_watch *w)
{
	struct bind_snap s;

	s.gen = atomic_load(&w->gen);
	s.busy = atomic_load(&w->busy);
	return s;
}

/*
 * Binder, after reading the word: true if the record read is the one bound.
 * Proof: let an unregister U fall between the bind and the read. Its
 * replace_begin preceded U. Had it followed the snapshot's gen load, gen
 * differs now. Otherwise its busy increment preceded the snapshot's busy
 * load and its decrement follows U, so the snapshot saw busy > 0.
 */
static inline bool bind_watch_same_record(struct bind_watch *w, struct bind_snap s)
{
	return s.busy == 0 && atomic_load(&w->gen) == s.gen;
}

#endif /* CEP_STRESS_BINDCHECK_H */
