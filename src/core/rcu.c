/* SPDX-License-Identifier: MIT */
/*
 * Lazy liburcu thread registration, the flavour switch and call_rcu
 * wrappers. Guarantee: a thread is registered at most once by libcep, before
 * its first read-side section, and unregistered when it exits (pthread key
 * destructor) - so applications need not know libcep uses RCU. In QSBR mode
 * a thread that is not a dispatcher worker is offline except inside
 * libcep's read sections, so it never holds up a grace period.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cep/table.h>

#include "rcu.h"
#include "rcu_qsbr.h"

char cep_tsan_grace_period;
char cep_tsan_callbacks_done;

bool cep_rcu_qsbr;
__thread unsigned cep_rcu_nesting;

static pthread_key_t rcu_key;
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;
__thread bool cep_rcu_registered;
static __thread bool rcu_worker;   /* QSBR: a dispatcher worker, online for good */

static void rcu_thread_exit(void *arg)
{
	(void)arg;
	if (!cep_rcu_registered)
		return;
	cep_rcu_registered = false;
	if (!cep_rcu_qsbr) {
		urcu_memb_unregister_thread();
		return;
	}
	/* liburcu-qsbr unregisters an online thread only: be online. */
	if (!rcu_worker)
		cep_qsbr_online();
	cep_qsbr_unregister();
	rcu_worker = false;
}

/* Once per process, before any registration: the flavour. */
static void rcu_init(void)
{
	const char *env = getenv("CEP_RCU");

	cep_rcu_qsbr = env && !strcmp(env, "qsbr");
	(void)pthread_key_create(&rcu_key, rcu_thread_exit);
}

void cep_rcu_thread_register_slow(void)
{
	pthread_once(&rcu_once, rcu_init);
	if (cep_rcu_qsbr) {
		cep_qsbr_register(); /* registers online */
		if (!rcu_worker)
			cep_qsbr_offline(); /* online only in read sections */
	} else {
		urcu_memb_register_thread();
	}
	cep_rcu_registered = true;
	/* Non-NULL value so the destructor runs at thread exit. */
	(void)pthread_setspecific(rcu_key, &cep_rcu_registered);
}

void cep_rcu_qsbr_enter(void)
{
	if (!rcu_worker)
		cep_qsbr_online();
}

void cep_rcu_qsbr_leave(void)
{
	if (!rcu_worker)
		cep_qsbr_offline();
}

CEP_EXPORT void cep_thread_register(void)
{
	cep_rcu_thread_ensure();
}

CEP_EXPORT void cep_thread_unregister(void)
{
	rcu_thread_exit(NULL);
	pthread_once(&rcu_once, rcu_init);
	(void)pthread_setspecific(rcu_key, NULL);
}

void cep_call_rcu(struct rcu_head *head, void *obj, void (*fn)(struct rcu_head *))
{
	cep_rcu_thread_ensure();
	/* Pairs with cep_rcu_callback_begin(): our writes before the free. */
	cep_tsan_release(obj);
	if (cep_rcu_qsbr)
		cep_qsbr_call_rcu(head, fn);
	else
		urcu_memb_call_rcu(head, fn);
}

void cep_rcu_barrier(void)
{
	cep_rcu_thread_ensure();
	/* qsbr: liburcu puts an online caller offline for the wait. */
	if (cep_rcu_qsbr)
		cep_qsbr_barrier();
	else
		urcu_memb_barrier();
	cep_tsan_acquire(&cep_tsan_callbacks_done);
}

const struct rcu_flavor_struct *cep_rcu_flavor(void)
{
	pthread_once(&rcu_once, rcu_init);
	return cep_rcu_qsbr ? cep_qsbr_flavor() : &urcu_memb_flavor;
}

void cep_rcu_worker_begin(void)
{
	pthread_once(&rcu_once, rcu_init);
	if (!cep_rcu_qsbr)
		return;
	if (cep_rcu_registered && !rcu_worker)
		cep_qsbr_online(); /* registered earlier, offline */
	rcu_worker = true;
	cep_rcu_thread_ensure();
}

void cep_rcu_worker_quiescent(void)
{
	if (rcu_worker) {
		/* Our reads before this point happen before any callback of a
		 * grace period this ends (the memb flavour's unlock does it). */
		cep_tsan_release(&cep_tsan_grace_period);
		cep_qsbr_quiescent();
	}
}

void cep_rcu_worker_idle_begin(void)
{
	if (rcu_worker) {
		cep_tsan_release(&cep_tsan_grace_period);
		cep_qsbr_offline();
	}
}

void cep_rcu_worker_idle_end(void)
{
	if (rcu_worker)
		cep_qsbr_online();
}

void cep_rcu_worker_end(void)
{
	if (rcu_worker) {
		cep_tsan_release(&cep_tsan_grace_period);
		cep_qsbr_offline();
		rcu_worker = false;
	}
}
