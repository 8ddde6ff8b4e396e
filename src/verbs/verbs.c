/* SPDX-License-Identifier: MIT */
/*
 * libibverbs glue (cep/verbs.h): QP attributes for INIT/RTR/RTS from the
 * negotiated connection, with the kernel CM's mapping of every field, and
 * the transitions on an ibv_qp. Pure functions on caller-owned values, plus
 * verbs calls in cep_verbs_modify_qp(); no shared state, no locks. And
 * cep_cm_init_qp_attr / cep_cm_qp_event on a CM context, through its
 * table, with the engine's two entries of it (an id's attributes read
 * under its lock; COMM_EST by the QP's binding word).
 */
#include <errno.h>
#include <string.h>

#include <cep/verbs.h>

#include "cm/cm_internal.h"

#define LINK_IB  1
#define LINK_ETH 2

/* cep/qp.h spells the access flags without libibverbs: same values. */
_Static_assert((int)CEP_QP_ACCESS_LOCAL_WRITE == (int)IBV_ACCESS_LOCAL_WRITE, "access flag");
_Static_assert((int)CEP_QP_ACCESS_REMOTE_WRITE == (int)IBV_ACCESS_REMOTE_WRITE, "access flag");
_Static_assert((int)CEP_QP_ACCESS_REMOTE_READ == (int)IBV_ACCESS_REMOTE_READ, "access flag");
_Static_assert((int)CEP_QP_ACCESS_REMOTE_ATOMIC == (int)IBV_ACCESS_REMOTE_ATOMIC, "access flag");

static void ah_from_path(struct ibv_ah_attr *ah, const struct cep_qp_path *q)
{
	memset(ah, 0, sizeof(*ah));
	ah->dlid = q->dlid;
	ah->sl = q->sl;
	ah->src_path_bits = q->src_path_bits;
	ah->static_rate = q->static_rate;
	ah->is_global = q->is_global;
	ah->port_num = q->port_num;
	if (q->is_global) {
		memcpy(ah->grh.dgid.raw, q->dgid, 16);
		ah->grh.flow_label = q->flow_label;
		ah->grh.sgid_index = q->sgid_index;
		ah->grh.hop_limit = q->hop_limit;
		ah->grh.traffic_class = q->traffic_class;
	}
}

int cep_qp_params_init_attr(const struct cep_qp_params *p, enum ibv_qp_state state,
			    struct ibv_qp_attr *attr, int *mask)
{
	int m;

	if (!p || !attr || !mask || p->size < sizeof(*p) ||
	    (p->role != CEP_QP_ROLE_ACTIVE && p->role != CEP_QP_ROLE_PASSIVE))
		return -EINVAL;
	switch (state) {
	case IBV_QPS_INIT:
		if (!(p->have & CEP_QP_HAVE_INIT))
			return -ENODATA;
		memset(attr, 0, sizeof(*attr));
		m = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		attr->qp_access_flags = p->access_flags;
		attr->pkey_index = p->pkey_index;
		attr->port_num = p->port_num;
		break;
	case IBV_QPS_RTR:
		if (!(p->have & CEP_QP_HAVE_RTR))
			return -ENODATA;
		memset(attr, 0, sizeof(*attr));
		m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		ah_from_path(&attr->ah_attr, &p->primary);
		attr->path_mtu = (enum ibv_mtu)p->path_mtu;
		attr->dest_qp_num = p->dest_qpn;
		attr->rq_psn = p->rq_psn;
		/* a responder's limits: RC, and XRC's target (the passive
		 * side), as the kernel's cm_init_qp_rtr_attr */
		if (p->transport == CEP_TS_RC ||
		    (p->transport == CEP_TS_EXTENDED && p->role == CEP_QP_ROLE_PASSIVE)) {
			m |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
			attr->max_dest_rd_atomic = p->max_dest_rd_atomic;
			attr->min_rnr_timer = p->min_rnr_timer;
		}
		if (p->has_alternate) {
			m |= IBV_QP_ALT_PATH;
			ah_from_path(&attr->alt_ah_attr, &p->alternate);
			attr->alt_port_num = p->alternate.port_num;
			attr->alt_pkey_index = p->alternate.pkey_index;
			attr->alt_timeout = p->alternate.timeout;
		}
		break;
	case IBV_QPS_RTS:
		if (!(p->have & CEP_QP_HAVE_RTS))
			return -ENODATA;
		memset(attr, 0, sizeof(*attr));
		m = IBV_QP_STATE | IBV_QP_SQ_PSN;
		attr->sq_psn = p->sq_psn;
		/* as the kernel's cm_init_qp_rts_attr: a requester's retries
		 * and depth for RC and XRC's initiator (the active side), the
		 * ACK timeout alone for XRC's target */
		if (p->transport == CEP_TS_RC ||
		    (p->transport == CEP_TS_EXTENDED && p->role == CEP_QP_ROLE_ACTIVE)) {
			m |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_MAX_QP_RD_ATOMIC;
			attr->timeout = p->primary.timeout;
			attr->retry_cnt = p->retry_count;
			attr->rnr_retry = p->rnr_retry;
			attr->max_rd_atomic = p->max_rd_atomic;
		} else if (p->transport == CEP_TS_EXTENDED) {
			m |= IBV_QP_TIMEOUT;
			attr->timeout = p->primary.timeout;
		}
		if (p->has_alternate) {
			m |= IBV_QP_PATH_MIG_STATE;
			attr->path_mig_state = IBV_MIG_REARM;
		}
		break;
	default:
		return -EINVAL;
	}
	attr->qp_state = state;
	*mask = m;
	return 0;
}

int cep_qp_state_allowed(enum cep_cm_state cm_state, enum ibv_qp_state state)
{
	switch (cm_state) {
	case CEP_CM_REQ_SENT:
	case CEP_CM_MRA_REQ_RCVD:
		/* Nothing from the peer yet: only the local half. */
		return state == IBV_QPS_INIT ? 0 : -EINVAL;
	case CEP_CM_REQ_RCVD:
	case CEP_CM_MRA_REQ_SENT:
	case CEP_CM_REP_RCVD:
	case CEP_CM_MRA_REP_SENT:
	case CEP_CM_REP_SENT:
	case CEP_CM_MRA_REP_RCVD:
	case CEP_CM_ESTABLISHED:
		return (state == IBV_QPS_INIT || state == IBV_QPS_RTR ||
			state == IBV_QPS_RTS) ? 0 : -EINVAL;
	default:
		return -EINVAL;
	}
}

int cep_verbs_modify_qp(struct ibv_qp *qp, const struct cep_qp_params *p,
			enum ibv_qp_state target)
{
	static const enum ibv_qp_state order[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr attr;
	int mask, ret, cur, want = -1;

	if (!qp || !p)
		return -EINVAL;
	for (int i = 0; i < 3; i++)
		if (order[i] == target)
			want = i;
	if (want < 0)
		return -EINVAL;
	/* Check every step's attributes before touching the QP. */
	for (int i = 0; i <= want; i++) {
		ret = cep_qp_params_init_attr(p, order[i], &attr, &mask);
		if (ret)
			return ret;
	}
	ret = ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
	if (ret)
		return ret > 0 ? -ret : -EIO;
	switch (attr.qp_state) {
	case IBV_QPS_RESET: cur = -1; break;
	case IBV_QPS_INIT:  cur = 0; break;
	case IBV_QPS_RTR:   cur = 1; break;
	case IBV_QPS_RTS:   cur = 2; break;
	default:            return -EINVAL; /* ERR, SQD, SQE: not ours to undo */
	}
	for (int i = cur + 1; i <= want; i++) {
		ret = cep_qp_params_init_attr(p, order[i], &attr, &mask);
		if (ret)
			return ret;
		ret = ibv_modify_qp(qp, &attr, mask);
		if (ret)
			return ret > 0 ? -ret : -EIO;
	}
	return 0;
}

/* The public functions of a CM context's QPs: the checks both kinds make
 * alike, then the context's table (cm/cm_ops.h); the engine's entries
 * (cm_local_ops) are the two after them. */
int cep_cm_qp_event(struct cep_cm *cm, const struct ibv_async_event *ev)
{
	if (!cm || !ev)
		return -EINVAL;
	if (ev->event_type != IBV_EVENT_COMM_EST && ev->event_type != IBV_EVENT_PATH_MIG)
		return -EOPNOTSUPP;
	if (!ev->element.qp)
		return -EINVAL;
	return cm->ops->qp_event(cm, ev);
}

int cep_cm_init_qp_attr(struct cep_cm_id *id, enum ibv_qp_state state,
			struct ibv_qp_attr *attr, int *mask)
{
	if (!id || !attr || !mask)
		return -EINVAL;
	return id->cm->ops->init_qp_attr(id, (int)state, attr, mask);
}

int cm_local_qp_event(struct cep_cm *cm, const struct ibv_async_event *ev)
{
	struct cep *cep;
	int ret;

	/* The binding word names the id of the QP; the lookup's reference
	 * keeps the id's memory alive across the call. */
	ret = cep_lookup_qpn(cep_cm_table(cm), ev->element.qp->qp_num, &cep);
	if (ret)
		return ret == -ESHUTDOWN ? -ENOENT : ret;
	ret = ev->event_type == IBV_EVENT_PATH_MIG ? cep_cm_migrate(cep_context(cep)) :
						      cep_cm_notify_established(cep_context(cep));
	cep_put(cep);
	return ret;
}

int cm_local_init_qp_attr(struct cep_cm_id *id, int state, struct ibv_qp_attr *attr, int *mask)
{
	int ret;

	/* The id's lock: state and parameters change together under it. */
	pthread_mutex_lock(&id->lock);
	ret = cep_qp_state_allowed((enum cep_cm_state)id->state, (enum ibv_qp_state)state);
	if (!ret)
		ret = cep_qp_params_init_attr(&id->qpp, (enum ibv_qp_state)state, attr, mask);
	pthread_mutex_unlock(&id->lock);
	return ret;
}
