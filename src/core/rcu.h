/* SPDX-License-Identifier: MIT */
/*
 * libcep's use of liburcu: lazy thread registration, the read side,
 * call_rcu, all with the TSan edges of tsan.h. Every libcep entry point
 * that touches an index goes through these.
 *
 * Flavour, process-wide, chosen once at the first use: urcu-memb (default)
 * or, with CEP_RCU=qsbr, urcu-qsbr. In QSBR mode dispatcher workers stay
 * online and announce quiescent states between MADs (cep_rcu_worker_*:
 * their read sides cost nothing), while every other thread is online only
 * inside libcep's read sections, so an application never has to announce
 * anything. docs/concurrency.md compares the two.
 */
#ifndef CEP_RCU_H
#define CEP_RCU_H

#include <stdbool.h>
#include <stdint.h>

#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

#include "tsan.h"

/* Set once before any thread registers (pthread_once), const after. */
extern bool cep_rcu_qsbr;
/* Per thread: libcep read sections entered and not left (both flavours). */
extern __thread unsigned cep_rcu_nesting;

/* Per thread, only read and written by its own thread. */
extern __thread bool cep_rcu_registered;
void cep_rcu_thread_register_slow(void);

/* Register the calling thread with the flavour if it is not yet (cheap
 * thread-local test); it is unregistered at thread exit. */
static inline void cep_rcu_thread_ensure(void)
{
	if (__builtin_expect(!cep_rcu_registered, 0))
		cep_rcu_thread_register_slow();
}

/* QSBR, outside dispatcher workers: online for the outermost section. */
void cep_rcu_qsbr_enter(void);
void cep_rcu_qsbr_leave(void);

static inline void cep_rcu_read_lock(void)
{
	cep_rcu_thread_ensure();
	if (!cep_rcu_qsbr)
		urcu_memb_read_lock();
	else if (cep_rcu_nesting == 0)
		cep_rcu_qsbr_enter();
	cep_rcu_nesting++;
}

static inline void cep_rcu_read_unlock(void)
{
	/* Reads in this section happen before any callback freeing their targets. */
	cep_tsan_release(&cep_tsan_grace_period);
	cep_rcu_nesting--;
	if (!cep_rcu_qsbr)
		urcu_memb_read_unlock();
	else if (cep_rcu_nesting == 0)
		cep_rcu_qsbr_leave();
}

/* Whether the calling thread is inside a libcep read section (then it must
 * not wait for a grace period). A QSBR worker between MADs is online but
 * not inside one: it may wait (liburcu puts it offline meanwhile). */
static inline int cep_rcu_read_ongoing(void)
{
	/* memb: also an application's own read side (cep_thread_register) */
	return cep_rcu_nesting != 0 || (!cep_rcu_qsbr && urcu_memb_read_ongoing());
}

/* Free @obj (whose rcu_head is @head) with @fn after a grace period, as
 * call_rcu, in a batch (rcu.c): @fn runs on liburcu's call_rcu thread
 * after a grace period that begins after this call, and before any
 * cep_rcu_barrier() called after this call returns. Any registered or
 * unregistered thread, inside or outside a read side, with locks held
 * (never waits for a grace period; may take rcu.c's own mutex and call
 * call_rcu). Nothing may find @obj any more (removed from every index, or
 * its count at zero), and each object is given once. @obj's last writes
 * (and the caller's) happen before the callback, which must begin with
 * cep_rcu_callback_begin(obj). */
void cep_call_rcu(struct rcu_head *head, void *obj, void (*fn)(struct rcu_head *));

/* A quiescent point of the calling thread for the batches of
 * cep_call_rcu: hands every thread's batch to liburcu if the oldest
 * object waited long enough. Cheap (a load, and a clock read while any
 * object waits). Any thread; dispatcher workers call it between batches
 * and before they sleep (cep_rcu_worker_*), a thread that waits for an
 * event may call it before it sleeps. */
void cep_rcu_quiescent(void);

/* Counts of the batches since the process started (tests, benchmarks):
 * objects given to cep_call_rcu, call_rcu calls libcep made, objects whose
 * callback ran in a batch, and hand-offs by cause: a thread's list full,
 * the oldest object's age, cep_rcu_barrier, a thread leaving. */
struct cep_rcu_stats {
	uint64_t deferred, call_rcu, freed;
	uint64_t full, aged, barrier, exited;
};
void cep_rcu_get_stats(struct cep_rcu_stats *st);

static inline void cep_rcu_callback_begin(void *obj)
{
	cep_tsan_acquire(&cep_tsan_grace_period);
	cep_tsan_acquire(obj);
}

/* Ends every RCU callback: what it did happens before cep_rcu_barrier()
 * returns (e.g. before the table the callback read is freed). */
static inline void cep_rcu_callback_end(void)
{
	cep_tsan_release(&cep_tsan_callbacks_done);
}

/* Wait for all pending RCU callbacks, those of every object given to
 * cep_call_rcu before this call included (not from a read side or
 * callback). */
void cep_rcu_barrier(void);

/* The liburcu flavour libcep's indexes use (rculfhash needs it). */
const struct rcu_flavor_struct *cep_rcu_flavor(void);

/*
 * Dispatcher workers (dispatch.c), both flavours. begin: on the worker
 * thread before its loop (registers; QSBR: online for good). quiescent:
 * between MADs, holding no pointer found under RCU without a reference.
 * idle_begin/idle_end: around a sleep (QSBR: offline, so grace periods do
 * not wait for a sleeping worker). end: before exit, hands its batch of
 * frees over. quiescent and idle_begin are cep_rcu_quiescent() too; the
 * rest is a no-op with urcu-memb.
 */
void cep_rcu_worker_begin(void);
void cep_rcu_worker_quiescent(void);
void cep_rcu_worker_idle_begin(void);
void cep_rcu_worker_idle_end(void);
void cep_rcu_worker_end(void);

#endif /* CEP_RCU_H */
