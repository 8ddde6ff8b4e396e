/* SPDX-License-Identifier: MIT */
/*
 * MAD dispatcher: N worker threads, each with a bounded lock-free MPSC
 * receive ring (a full ring is a counted drop, never unbounded memory), an
 * unbounded intrusive work stack (each work item is queued at most once at
 * a time, so it is bounded by the objects that embed it) and a timer wheel.
 * Everything posted to worker w runs as worker w, in order per producer for
 * MADs: on its thread, or on a guest thread that took its run lock while
 * it slept (cep_dispatch_enter, run-to-completion); one at a time either
 * way. A producer that may wait (cep_dispatch_post_mad_wait) waits for
 * room in a full ring instead of dropping. A sleeping worker polls its
 * eventfd (posts, stop and guests wake it there) and, as the backstop of
 * the transport's receive queue (attr.lead), that queue's fd.
 */
#ifndef CEP_DISPATCH_H
#define CEP_DISPATCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cep/transport.h>

#include "core/clock.h"
#include "timer.h"

struct cep_dispatch;

/* Intrusive work node: embed, set fn, post with cep_dispatch_post_work().
 * The poster must keep the object alive until fn has run. */
struct cep_work {
	struct cep_work *_Atomic next;
	void (*fn)(struct cep_work *w);
};

struct cep_dispatch_ops {
	/* A MAD posted to @worker; the bytes are valid during the call. */
	void (*mad)(void *ctx, unsigned worker, const uint8_t *mad, size_t len,
		    const struct cep_mad_addr *from);
	/* Called on each worker thread once at start (may be NULL). */
	void (*thread_start)(void *ctx, unsigned worker);
};

struct cep_dispatch_attr {
	unsigned workers;      /* >= 1 */
	unsigned queue_depth;  /* power of 2 >= 2 */
	struct cep_dispatch_ops ops;
	void *ctx;
	/* Time of the wheels (NULL: CLOCK_MONOTONIC). A virtual clock's
	 * advance posts a tick to every worker, which runs its wheel at the
	 * new time inside that item, so quiesce covers the timers it fires. */
	struct cep_clock *clock;
	/* A receive queue the workers read when no application thread does
	 * (lead.h: a sleeping worker is the backstop), or NULL. Outlives the
	 * dispatcher. */
	struct cep_lead *lead;
};

int cep_dispatch_create(const struct cep_dispatch_attr *attr, struct cep_dispatch **out);
/* Stop the workers (each drains its ring and work stack first) and join
 * them. Timers still armed are handed to @drain (may be NULL) on the
 * caller's thread after the join. Not from a worker. */
void cep_dispatch_stop(struct cep_dispatch *d,
		       void (*drain)(struct cep_timer *t, void *ctx), void *ctx);
void cep_dispatch_destroy(struct cep_dispatch *d);

unsigned cep_dispatch_workers(const struct cep_dispatch *d);

/* Copy a MAD into worker @w's ring. 0 or -ENOBUFS (ring full: counted).
 * Lock-free; any thread, including transport receive threads. */
int cep_dispatch_post_mad(struct cep_dispatch *d, unsigned w, const uint8_t *mad,
			  size_t len, const struct cep_mad_addr *from);
/* The same from a thread that may wait (a transport's own receive thread,
 * never a worker of any dispatcher nor a sender's thread): a full ring
 * makes it wait for room, woken by the worker, instead of dropping, so a
 * burst stays in the kernel's receive queue rather than costing the peer a
 * retry timeout. Gives up (-ENOBUFS, counted as full) when *@abort (may be
 * NULL) becomes nonzero, the dispatcher stops, or after @max_ms. From a
 * worker of @d it does not wait (it would wait for itself). */
int cep_dispatch_post_mad_wait(struct cep_dispatch *d, unsigned w, const uint8_t *mad,
			       size_t len, const struct cep_mad_addr *from,
			       const _Atomic int *abort, unsigned max_ms);
/* Queue @work on worker @w. Never fails. Lock-free; any thread. */
void cep_dispatch_post_work(struct cep_dispatch *d, unsigned w, struct cep_work *work);
/* The same for an item that may wait up to @max_delay_ms: a sleeping
 * worker is not woken now but its timerfd set to wake it by then (one
 * system call, no context switch), so such items posted close together
 * share one wake-up; a guest acting as the worker meanwhile (a MAD the
 * lead reads) runs it sooner. For items nobody waits for (an id's last
 * events when no thread waits for them). Lock-free; any thread. */
void cep_dispatch_post_work_lazy(struct cep_dispatch *d, unsigned w, struct cep_work *work,
				 unsigned max_delay_ms);
#ifdef CEP_TEST_HOOKS
/* Tests (the hooked copy of the library): called in soon() between the
 * CAS that made @ns the earliest wake-up asked for and its timerfd arm. */
extern void (*cep_dispatch_soon_hook)(uint64_t ns);
#endif
/* Wake worker @w now if it sleeps (an item queued lazily became urgent).
 * Any thread. */
void cep_dispatch_wake(struct cep_dispatch *d, unsigned w);

/* Run-to-completion. A thread that is no worker may act as worker @w while
 * that worker sleeps: cep_dispatch_enter takes w's run lock without ever
 * waiting (-EBUSY: the worker is awake, a guest is in, the dispatcher
 * stops, or urcu-qsbr is the flavour) and counts as an item quiesce waits
 * for. Between enter and leave the caller may use w's wheel and
 * cep_dispatch_now(d, w) as w's thread would, and must not run items
 * (it may hold an id lock). Leave wakes the worker only if a timer it
 * armed is due before the worker's own wake-up. */
int cep_dispatch_enter(struct cep_dispatch *d, unsigned w);
/* @armed_ms: the earliest expiry (clock ms) the guest armed on w's wheel,
 * UINT64_MAX for none, CEP_DISPATCH_ARMED_UNKNOWN to have the wheel
 * scanned. */
#define CEP_DISPATCH_ARMED_UNKNOWN 0
void cep_dispatch_leave(struct cep_dispatch *d, unsigned w, uint64_t armed_ms);
/* Enter, run what is queued for @w (its MADs stay in order), then @mad as
 * worker @w would (cep_dispatch_self says @w meanwhile, so the MAD's
 * events and callbacks run on this thread), then what it queued for @w,
 * and leave. Of the timers due it fires at most as many as the worker
 * per turn (64) and posts the rest to the worker (a work item, which
 * wakes it and which quiesce waits for), so this returns as soon as the
 * worker's own loop would be back at its ring. 0, or -EBUSY as
 * cep_dispatch_enter (then post it). Only from
 * a thread that holds no lock of the dispatcher's user: a transport's own
 * receive thread. */
int cep_dispatch_run_mad(struct cep_dispatch *d, unsigned w, const uint8_t *mad,
			 size_t len, const struct cep_mad_addr *from);

/* The calling thread's worker index in @d, or -1. */
int cep_dispatch_self(const struct cep_dispatch *d);
/* Worker @w's timer wheel: only from worker @w's thread (or a guest
 * between cep_dispatch_enter and leave). */
struct cep_wheel *cep_dispatch_wheel(struct cep_dispatch *d, unsigned w);
/* Current tick of worker @w (its thread only). */
uint64_t cep_dispatch_now(struct cep_dispatch *d, unsigned w);
/* The dispatcher's clock in milliseconds (any thread). */
uint64_t cep_dispatch_clock_ms(const struct cep_dispatch *d);

/* Wait until every ring and work stack is empty and no worker is in the
 * middle of an item or of firing timers; -ETIMEDOUT after @timeout_ms.
 * Timers armed for later do not count. With a virtual clock, every timer
 * due at the clock's time when this is called has fired when it returns 0
 * (the advance's tick is an item). Not from a worker. */
int cep_dispatch_quiesce(struct cep_dispatch *d, unsigned timeout_ms);

struct cep_dispatch_stats {
	uint64_t mads;      /* MADs processed */
	uint64_t works;     /* work items run */
	uint64_t full;      /* MADs dropped: ring full */
	uint64_t waits;     /* posts that waited for room (post_mad_wait) */
	uint64_t inline_mads; /* of mads, run by a guest (run_mad) */
	uint64_t timers;    /* timers fired */
	uint64_t sleeps;    /* times a worker went to sleep */
	uint64_t timeouts;  /* of those, ended by their own timeout (a timer
			       due, the bound, a lease): not woken */
	uint64_t yields;    /* sched_yield calls of idle workers */
	uint64_t armed;     /* timers armed now (each worker's last pass) */
	/* sleeping workers woken now, by cause: a MAD posted, a work item
	 * posted, the lead's backstop asked to let go */
	uint64_t kick_mad, kick_work, kick_lead;
	uint64_t early_timer; /* guests that armed a timer due before the
				 worker's wake-up (cep_dispatch_leave): its
				 timerfd set, no wake-up now */
	uint64_t lazy;      /* lazy work items that found their worker asleep */
	uint64_t soon;      /* worker timerfds armed (an earlier wake-up, no
			       wake-up now: early_timer and lazy) */
};
void cep_dispatch_stats(struct cep_dispatch *d, struct cep_dispatch_stats *st);

#endif /* CEP_DISPATCH_H */
