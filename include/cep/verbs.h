/* SPDX-License-Identifier: MIT */
/*
 * libcep libibverbs glue: the QP attributes of a connection for INIT, RTR
 * and RTS, computed from what the CM exchanged (the REQ sent or received,
 * the REP received or the accept parameters), as the kernel's
 * ib_cm_init_qp_attr() gives them to its users, and a helper that moves an
 * ibv_qp through those states.
 *
 * Guarantees: every function here is pure apart from cep_verbs_modify_qp()
 * (which calls ibv_query_qp/ibv_modify_qp); a struct cep_qp_params is a plain
 * value owned by the caller, safe to copy, and needs no locking of its own.
 * Bad input returns -EINVAL and changes nothing. See docs/real-rdma.md.
 */
#ifndef CEP_VERBS_H
#define CEP_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include <cep/cm.h>
#include <cep/qp.h>
#include <cep/export.h>
#include <cep/transport.h>
#include <cep/wire.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The attributes and mask for @state (IBV_QPS_INIT, RTR or RTS), as
 * ib_cm_init_qp_attr() gives them: *attr is zeroed then filled, *mask set.
 * -EINVAL for any other state or NULL arguments; -ENODATA when @p does not
 * hold that state's half yet (e.g. RTR on the active side before the REP).
 */
CEP_EXPORT int cep_qp_params_init_attr(const struct cep_qp_params *p,
				       enum ibv_qp_state state,
				       struct ibv_qp_attr *attr, int *mask);

/*
 * Which QP states a connection in CM state @cm_state may move its QP to:
 * 0 if allowed, -EINVAL otherwise. Same table as the kernel CM: INIT from
 * REQ_SENT onwards (while connecting or ESTABLISHED), RTR and RTS once the
 * peer's REQ or REP is known (REQ_RCVD, MRA_REQ_SENT, REP_RCVD,
 * MRA_REP_SENT, REP_SENT, MRA_REP_RCVD, ESTABLISHED).
 */
CEP_EXPORT int cep_qp_state_allowed(enum cep_cm_state cm_state,
				    enum ibv_qp_state state);

/*
 * Move @qp from its current state (ibv_query_qp) through RESET -> INIT ->
 * RTR -> RTS up to @target (INIT, RTR or RTS), one ibv_modify_qp per
 * step, with the attributes of cep_qp_params_init_attr(). A QP already at
 * or past @target is left alone (0). Returns 0, -EINVAL / -ENODATA as
 * init_attr, -EINVAL when the QP is in ERR/SQD/SQE, -EIO (ibv_query_qp
 * failed without an errno), or the negated errno of the failing verbs
 * call (the QP stays in the last state reached).
 * Any thread, including CM callbacks (it is a few system calls).
 */
CEP_EXPORT int cep_verbs_modify_qp(struct ibv_qp *qp, const struct cep_qp_params *p,
				   enum ibv_qp_state target);

/* The attributes for moving the QP bound to @id to @state (INIT, RTR or
 * RTS), as ib_cm_init_qp_attr() gives them: from the parameters the CM
 * stored for the id (the REQ sent or received, the REP received, the
 * accept). 0; -EINVAL (bad arguments, or the id's CM state does not allow
 * that QP state yet: cep_qp_state_allowed); -ENODATA (not negotiated yet).
 * Any thread, also from a CM callback (takes the id's lock). */
CEP_EXPORT int cep_cm_init_qp_attr(struct cep_cm_id *id, enum ibv_qp_state state,
				   struct ibv_qp_attr *attr, int *mask);

/* Hand a QP's asynchronous event (as ibv_get_async_event() returned it)
 * to the CM context whose ids bind that QP, as the kernel's ULPs call
 * ib_cm_notify(). IBV_EVENT_COMM_EST: the QP received its first packet,
 * so its connection is up even if every RTU was lost:
 * cep_cm_notify_established() on the id bound to the QP.
 * IBV_EVENT_PATH_MIG: the QP migrated to its alternate path, and so do
 * the CM's messages: cep_cm_migrate(). 0; -ENOENT (no id of @cm bound to
 * that QP); -ESHUTDOWN (the QP is being destroyed); -EOPNOTSUPP (an event
 * the CM has no use for); -EINVAL (NULL); or the error of the call it
 * makes (-EISCONN: the RTU came first; -EINVAL: no alternate path).
 * The caller still acks the event (ibv_ack_async_event). Any thread. */
CEP_EXPORT int cep_cm_qp_event(struct cep_cm *cm, const struct ibv_async_event *ev);

#ifdef __cplusplus
}
#endif

#endif /* CEP_VERBS_H */
