/* SPDX-License-Identifier: MIT */
/*
 * Per-worker hashed timer wheel (1 ms ticks): O(1) arm and cancel of
 * intrusive timers, bulk expiry per tick. A wheel and its timers belong to
 * one thread (a dispatcher worker); nothing here is thread-safe.
 */
#ifndef CEP_TIMER_H
#define CEP_TIMER_H

#include <stddef.h>
#include <stdint.h>

#define CEP_WHEEL_SLOTS 1024u /* power of 2: ~1 s per revolution */

struct cep_timer;
typedef void (*cep_timer_fn)(struct cep_timer *t);

/* Intrusive: embed in the object that times out. Zero-initialised = idle. */
struct cep_timer {
	struct cep_timer *next, *prev; /* NULL when not armed */
	uint64_t expires;              /* absolute tick (ms) */
	cep_timer_fn fn;
};

struct cep_wheel {
	struct cep_timer slot[CEP_WHEEL_SLOTS]; /* list heads (sentinels) */
	uint64_t last;                          /* last tick processed */
	uint64_t resume;                        /* 0, or the first tick whose slot
						   may still hold due timers: a
						   budgeted run stopped there */
	size_t armed;
};

void cep_wheel_init(struct cep_wheel *w, uint64_t now_ms);
/* Arm (or move) @t to fire at @expires_ms (clamped to the next tick). */
void cep_timer_arm(struct cep_wheel *w, struct cep_timer *t, uint64_t expires_ms,
		   cep_timer_fn fn);
/* Cancel: 1 if it was armed, 0 if not. */
int cep_timer_cancel(struct cep_wheel *w, struct cep_timer *t);
static inline int cep_timer_armed(const struct cep_timer *t) { return t->next != NULL; }
/* Fire every timer due at or before @now_ms, each unlinked before its fn
 * runs (fn may re-arm it or arm others). Returns the number fired. */
size_t cep_wheel_run(struct cep_wheel *w, uint64_t now_ms);
/* As cep_wheel_run, firing at most @max (> 0): what is left due stays due
 * (cep_wheel_pending) and fires first in the next run, in tick order. */
size_t cep_wheel_run_max(struct cep_wheel *w, uint64_t now_ms, size_t max);
/* A budgeted run left timers due. */
static inline int cep_wheel_pending(const struct cep_wheel *w) { return w->resume != 0; }
/* The earliest tick in (last, last + @within] at which a timer is due, or
 * last + @within if none is (@within <= CEP_WHEEL_SLOTS); last while a
 * budgeted run left timers due. Never later than
 * the true next expiry; earlier when a crowded slot would cost more than a
 * bounded walk (the caller then merely wakes early). For a sleep's bound. */
uint64_t cep_wheel_next(const struct cep_wheel *w, uint64_t within);
/* Unlink every armed timer and call @fn on each (bulk cancel). */
void cep_wheel_drain(struct cep_wheel *w, void (*fn)(struct cep_timer *t, void *ctx),
		     void *ctx);

#endif /* CEP_TIMER_H */
