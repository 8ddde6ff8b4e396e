/* SPDX-License-Identifier: MIT */
/*
 * CM engine, service ID resolution: SIDR_REQ and SIDR_REP handlers and API
 * (UD QPs: one request, one reply, retried on timeout). Same template and
 * locking rules as cm.c describes.
 */
#include <errno.h>
#include <string.h>

#include "cm_internal.h"

/* A SIDR_REP for a SIDR_REQ no id takes: @status, its request ID, service
 * ID and TID echoed, to where it came from. Stateless, worker @w. */
static void sidr_refuse(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
			const struct cep_mad_addr *from, unsigned status)
{
	struct cep_mad_addr to = cm_reply_addr(from);
	struct cep_msg r;

	cep_msg_init(&r, CEP_MSG_SIDR_REP, m->hdr.tid);
	r.u.sidr_rep.request_id = m->u.sidr_req.request_id;
	r.u.sidr_rep.status = (uint8_t)status;
	r.u.sidr_rep.service_id = m->u.sidr_req.service_id;
	cm_send_raw(cm, w, &r, &to, NULL);
}

void cm_handle_sidr_req(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
			    const struct cep_mad_addr *from)
{
	const struct cep_sidr_req *sq = &m->u.sidr_req;
	struct cep_cm_id *id, *lid;
	struct cep *existing = NULL, *lcep;
	struct cep_cm_event ev;
	int ret;

	if (cm_alloc_id(cm, w, NULL, NULL, NULL, &id)) {
		cm_drop(cm, w, CEP_CM_DROP_NO_MEMORY);
		return;
	}
	ret = cep_insert_remote_id(id->cep, sq->request_id, cm_sidr_source(from), &existing);
	if (ret) {
		if (ret == -EEXIST)
			STAT_ADD(cm, w, duplicates); /* being answered */
		else
			cm_drop(cm, w, CEP_CM_DROP_NO_MEMORY);
		if (existing)
			cep_put(existing);
		cm_discard_id(id);
		return;
	}
	ret = cep_lookup_listener(cm->table, sq->service_id, &lcep);
	lid = ret ? NULL : cep_context(lcep);
	if (lid)
		ret = cm_listener_hold(lid, id);
	if (ret == -ENOBUFS) {
		/* Backlog full: refused, not dropped. Past ucma's backlog the
		 * kernel's rdma_cm handler fails (ucma_connect_event_handler:
		 * -ENOMEM) and ib_cm destroys the new id, which in
		 * SIDR_REQ_RCVD answers status 2 "reject" whatever the error
		 * (cm_destroy_id); only a REQ is left unanswered there. */
		cm_drop(cm, w, CEP_CM_DROP_BACKLOG);
		sidr_refuse(cm, w, m, from, CEP_SIDR_REJECT);
		cm_discard_id(id);
		cep_put(lcep);
		return;
	}
	if (ret) {
		/* no listener, or one being destroyed: as ib_cm, which finds
		 * none (cm_sidr_req_handler: status 1) */
		sidr_refuse(cm, w, m, from, CEP_SIDR_UNSUPPORTED);
		cm_discard_id(id);
		if (lid)
			cep_put(lcep);
		return;
	}
	pthread_mutex_lock(&id->lock);
	id->remote_id = sq->request_id;
	id->service_id = sq->service_id;
	id->tid = m->hdr.tid;
	id->peer = cm_reply_addr(from);
	cm_set_state(id, CEP_CM_SIDR_REQ_RCVD);
	/* a SIDR_REQ says nothing of its requester's patience: unanswered,
	 * it expires after the longest timeout a peer may ask for, or at the
	 * half-open limit if that is shorter */
	id->half_open_until = cep_clock_ms(cm->clock) + cm->half_open_ms;
	cm_set_expiry(id, cm_ms(CM_PEER_TIMEOUT_MAX), 0);
	cm_ev_init(&ev, id, CEP_CM_EV_SIDR_REQ_RECEIVED);
	ev.listen_id = lid;
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
	pthread_mutex_unlock(&id->lock);
	cm_listener_release(lid);
	cep_put(lcep);
}

void cm_handle_sidr_rep(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
			    const struct cep_mad_addr *from)
{
	struct cep_cm_id *id = cm_find_id(cm, m->u.sidr_rep.request_id);
	struct cep_cm_event ev;

	if (!id) {
		cm_drop(cm, w, CEP_CM_DROP_NO_CEP);
		return;
	}
	pthread_mutex_lock(&id->lock);
	if (id->state == CEP_CM_SIDR_REQ_SENT && !cm_from_peer(id, w, from)) {
		pthread_mutex_unlock(&id->lock);
		cm_id_put(id);
		return;
	}
	if (id->state != CEP_CM_SIDR_REQ_SENT) {
		STAT_ADD(cm, w, duplicates);
		pthread_mutex_unlock(&id->lock);
		cm_id_put(id);
		return;
	}
	cm_set_state(id, CEP_CM_IDLE);
	cm_free_retry(id);
	cm_clear_timer(id);
	cm_maybe_table_destroy(id);
	cm_ev_init(&ev, id, CEP_CM_EV_SIDR_REP_RECEIVED);
	ev.status = m->u.sidr_rep.status;
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

/* The public functions: the checks both kinds make alike, then the
 * context's table (cm_ops.h). */
int cep_cm_sidr_req(struct cep_cm_id *id, const struct cep_cm_sidr_param *p)
{
	if (!id || !p || p->size < sizeof(*p) || !p->peer ||
	    (p->private_data_len && !p->private_data))
		return -EINVAL;
	return id->cm->ops->sidr_req(id, p);
}

int cep_cm_sidr_rep(struct cep_cm_id *id, unsigned status, uint32_t qpn, uint32_t qkey,
		    const void *pdata, size_t len)
{
	return id ? id->cm->ops->sidr_rep(id, status, qpn, qkey, pdata, len) : -EINVAL;
}

int cm_local_sidr_req(struct cep_cm_id *id, const struct cep_cm_sidr_param *p)
{
	struct cep_msg m;
	int ret;

	if (p->timeout > 31 || p->max_cm_retries > 15)
		return -EINVAL;
	if (p->private_data_len > CEP_SIDR_REQ_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	pthread_mutex_lock(&id->lock);
	if (id->state != CEP_CM_IDLE || (id->flags & F_USER_GONE) || cep_is_destroyed(id->cep)) {
		ret = -EINVAL;
		goto out;
	}
	cep_msg_init(&m, CEP_MSG_SIDR_REQ, cm_next_tid(id));
	m.u.sidr_req.request_id = cep_local_comm_id(id->cep);
	m.u.sidr_req.partition_key = p->pkey ? p->pkey : CEP_DEFAULT_PKEY;
	m.u.sidr_req.service_id = p->service_id;
	cm_copy_pdata(m.u.sidr_req.private_data, p->private_data, p->private_data_len);
	id->peer = *p->peer;
	id->peer.qpn = 1;
	id->peer.qkey = CEP_QP1_QKEY;
	id->service_id = p->service_id;
	ret = cm_send_msg(id, &m, 1);
	if (ret)
		goto out;
	/* zero: librdmacm's defaults (cm.h) */
	id->timeout_ms = cm_ms(p->timeout ? p->timeout : CEP_CM_DEFAULT_RESPONSE_TIMEOUT);
	id->max_retries = id->retries_left = p->max_cm_retries ? p->max_cm_retries
							      : CEP_CM_DEFAULT_MAX_RETRIES;
	cm_set_state(id, CEP_CM_SIDR_REQ_SENT);
	cm_set_timer(id, TK_RETRY, id->timeout_ms);
out:
	pthread_mutex_unlock(&id->lock);
	return ret;
}

/* Lock held: SIDR_REQ_RCVD -> IDLE with a SIDR_REP. */
void cm_do_sidr_rep(struct cep_cm_id *id, unsigned status, uint32_t qpn, uint32_t qkey,
			const void *pdata, size_t len)
{
	struct cep_msg m;

	cep_msg_init(&m, CEP_MSG_SIDR_REP, id->tid);
	m.u.sidr_rep.request_id = id->remote_id;
	m.u.sidr_rep.status = (uint8_t)status;
	m.u.sidr_rep.qpn = qpn;
	m.u.sidr_rep.qkey = qkey;
	m.u.sidr_rep.service_id = id->service_id;
	cm_copy_pdata(m.u.sidr_rep.private_data, pdata, len);
	cm_send_msg(id, &m, 0);
	/* a retried SIDR_REQ after this is a new request */
	cep_remove_remote_id(id->cep);
	cm_clear_timer(id); /* the half-open expiry (it holds a reference) */
	cm_set_state(id, CEP_CM_IDLE);
	cm_maybe_table_destroy(id);
}

int cm_local_sidr_rep(struct cep_cm_id *id, unsigned status, uint32_t qpn, uint32_t qkey,
		      const void *pdata, size_t len)
{
	int ret = 0;

	if (status > CEP_SIDR_STATUS_MAX || qpn > 0xffffff || (len && !pdata))
		return -EINVAL;
	if (len > CEP_SIDR_REP_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	if (id->state == CEP_CM_SIDR_REQ_RCVD)
		cm_do_sidr_rep(id, status, qpn, qkey, pdata, len);
	else
		ret = -EINVAL;
	pthread_mutex_unlock(&id->lock);
	return ret;
}
