/* SPDX-License-Identifier: MIT */
/*
 * urcu-qsbr entry points for rcu.c (rcu_qsbr.c): one flavour per unit.
 * Each is the liburcu-qsbr call of the same name, with its contract.
 */
#ifndef CEP_RCU_QSBR_H
#define CEP_RCU_QSBR_H

struct rcu_head;
struct rcu_flavor_struct;

void cep_qsbr_register(void);
void cep_qsbr_unregister(void);
void cep_qsbr_online(void);
void cep_qsbr_offline(void);
void cep_qsbr_quiescent(void);
void cep_qsbr_call_rcu(struct rcu_head *head, void (*fn)(struct rcu_head *));
void cep_qsbr_barrier(void);
const struct rcu_flavor_struct *cep_qsbr_flavor(void);

#endif /* CEP_RCU_QSBR_H */
