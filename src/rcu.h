/* SPDX-License-Identifier: MIT */
/*
 * libcep's use of liburcu (urcu-memb flavour): lazy thread registration, the
 * read side, call_rcu, all with the TSan edges of tsan.h. Every libcep entry
 * point that touches an index goes through these.
 */
#ifndef CEP_RCU_H
#define CEP_RCU_H

#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

#include "tsan.h"

/* Register the calling thread with urcu-memb if it is not yet (cheap
 * thread-local test); it is unregistered at thread exit. */
void cep_rcu_thread_ensure(void);

static inline void cep_rcu_read_lock(void)
{
	cep_rcu_thread_ensure();
	urcu_memb_read_lock();
}

static inline void cep_rcu_read_unlock(void)
{
	/* Reads in this section happen before any callback freeing their targets. */
	cep_tsan_release(&cep_tsan_grace_period);
	urcu_memb_read_unlock();
}

/* Whether the calling thread is inside a read-side section (then it must
 * not wait for a grace period). */
static inline int cep_rcu_read_ongoing(void)
{
	return urcu_memb_read_ongoing();
}

/* call_rcu with the TSan edge to the callback: @obj's last writes (and
 * the caller's) happen before the callback, which must begin with
 * cep_rcu_callback_begin(obj). */
void cep_call_rcu(struct rcu_head *head, void *obj, void (*fn)(struct rcu_head *));

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

/* Wait for all pending RCU callbacks (not from a read side or callback). */
void cep_rcu_barrier(void);

/* The liburcu flavour libcep's indexes use (rculfhash needs it). */
const struct rcu_flavor_struct *cep_rcu_flavor(void);

#endif /* CEP_RCU_H */
