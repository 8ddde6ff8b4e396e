/* SPDX-License-Identifier: MIT */
/*
 * The urcu-qsbr calls of rcu.c, in a unit of their own: liburcu's flavour
 * headers map the same generic names, so one unit includes one flavour.
 * Contracts are liburcu-qsbr's; rcu.c decides when each is called.
 */
#include <urcu/urcu-qsbr.h>

#include "rcu_qsbr.h"

void cep_qsbr_register(void)
{
	urcu_qsbr_register_thread();
}

void cep_qsbr_unregister(void)
{
	urcu_qsbr_unregister_thread();
}

void cep_qsbr_online(void)
{
	urcu_qsbr_thread_online();
}

void cep_qsbr_offline(void)
{
	urcu_qsbr_thread_offline();
}

void cep_qsbr_quiescent(void)
{
	urcu_qsbr_quiescent_state();
}

void cep_qsbr_call_rcu(struct rcu_head *head, void (*fn)(struct rcu_head *))
{
	urcu_qsbr_call_rcu(head, fn);
}

void cep_qsbr_barrier(void)
{
	urcu_qsbr_barrier();
}

const struct rcu_flavor_struct *cep_qsbr_flavor(void)
{
	return &urcu_qsbr_flavor;
}
