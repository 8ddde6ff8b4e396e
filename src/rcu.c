/* SPDX-License-Identifier: MIT */
/*
 * Lazy urcu-memb thread registration and call_rcu wrappers.
 * Guarantee: a thread is registered at most once by libcep, before its
 * first read-side section, and unregistered when it exits (pthread key
 * destructor) - so applications need not know libcep uses RCU.
 */
#include <pthread.h>
#include <stdbool.h>

#include <cep/table.h>

#include "rcu.h"

char cep_tsan_grace_period;
char cep_tsan_callbacks_done;

static pthread_key_t rcu_key;
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;
/* Per thread, only read and written by its own thread: no race. */
static __thread bool rcu_registered;

static void rcu_thread_exit(void *arg)
{
	(void)arg;
	if (rcu_registered) {
		rcu_registered = false;
		urcu_memb_unregister_thread();
	}
}

static void rcu_key_init(void)
{
	(void)pthread_key_create(&rcu_key, rcu_thread_exit);
}

void cep_rcu_thread_ensure(void)
{
	if (__builtin_expect(rcu_registered, 1))
		return;
	pthread_once(&rcu_once, rcu_key_init);
	urcu_memb_register_thread();
	rcu_registered = true;
	/* Non-NULL value so the destructor runs at thread exit. */
	(void)pthread_setspecific(rcu_key, &rcu_registered);
}

CEP_EXPORT void cep_thread_register(void)
{
	cep_rcu_thread_ensure();
}

CEP_EXPORT void cep_thread_unregister(void)
{
	rcu_thread_exit(NULL);
	pthread_once(&rcu_once, rcu_key_init);
	(void)pthread_setspecific(rcu_key, NULL);
}

void cep_call_rcu(struct rcu_head *head, void *obj, void (*fn)(struct rcu_head *))
{
	cep_rcu_thread_ensure();
	/* Pairs with cep_rcu_callback_begin(): our writes before the free. */
	cep_tsan_release(obj);
	urcu_memb_call_rcu(head, fn);
}

void cep_rcu_barrier(void)
{
	cep_rcu_thread_ensure();
	urcu_memb_barrier();
	cep_tsan_acquire(&cep_tsan_callbacks_done);
}

const struct rcu_flavor_struct *cep_rcu_flavor(void)
{
	return &urcu_memb_flavor;
}
