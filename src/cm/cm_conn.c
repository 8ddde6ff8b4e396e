/* SPDX-License-Identifier: MIT */
/*
 * CM engine, connections: REQ, REP, RTU, MRA, REJ, DREQ, DREP handlers,
 * QP teardown, and the connection API (connect, accept, RTU, reject, MRA,
 * disconnect, DREP). Same template and locking rules as cm.c describes.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cm_internal.h"
#include "core/table_internal.h"

static int path_has_alt(const struct cep_path *p)
{
	static const struct cep_path zero;

	return memcmp(p, &zero, sizeof(zero)) != 0;
}

/* Release an established connection found stale by a new REQ/REP. */
/* Release an established connection found stale by a new REQ/REP from
 * @from - only if it comes from that connection's peer: the QPN and CA
 * GUID are easy to claim, and a stranger must not end a live connection
 * with them (stricter than the kernel; counted ADDRESS). */
static void release_stale(struct cep_cm_id *old, unsigned w, const struct cep_mad_addr *from)
{
	pthread_mutex_lock(&old->lock);
	if (cm_from_peer(old, w, from))
		cm_start_dreq(old, NULL, 0);
	pthread_mutex_unlock(&old->lock);
}

/* A REQ whose (comm ID, CA GUID) @cur holds: a repeat of the request
 * @cur answers (worker, no lock held, a reference on @cur held). While
 * the request is unanswered each repeat spends one of the tries its REQ
 * declared (Max CM Retries, id->retries_left); in MRA_REQ_SENT a repeat
 * within them gets our MRA again (kernel cm_dup_req_handler) and renews
 * the request's expiry (cm_req_expire_after_mra). A repeat beyond them
 * comes from a peer that lies about its retries (or is a copy the
 * network made): nothing is sent and nothing renewed, so the request
 * still expires (the kernel answers every repeat, and its REQ_RCVD never
 * expires). Elsewhere the answer is on its way or retried. A timewait id
 * holds no remote key (cm_enter_timewait): one that entered timewait
 * since the lookup sends nothing, and the requester's retry is a new
 * request. */
static void dup_req(struct cep_cm *cm, unsigned w, struct cep_cm_id *cur,
		    const struct cep_mad_addr *from)
{
	pthread_mutex_lock(&cur->lock);
	if (!cm_from_peer(cur, w, from)) { /* not its requester: no answer */
		pthread_mutex_unlock(&cur->lock);
		return;
	}
	STAT_ADD(cm, w, duplicates);
	if (cur->state == CEP_CM_REQ_RCVD || cur->state == CEP_CM_MRA_REQ_SENT) {
		if (cur->retries_left == 0) { /* more tries than its REQ declared */
			pthread_mutex_unlock(&cur->lock);
			return;
		}
		cur->retries_left--;
	}
	if (cur->state == CEP_CM_MRA_REQ_SENT) {
		cm_send_mra(cur, CEP_MSG_CODE_REQ, cur->mra_timeout, cur->resend_pd,
			    cur->resend_len);
		/* the requester still waits: so may the request, at least
		 * until its next try */
		cm_req_expire_after_mra(cur);
	}
	pthread_mutex_unlock(&cur->lock);
}

/* The listener @lid of a new passive @id (REQ or SIDR_REQ, worker, no lock
 * held, a reference on @lid's CEP held): if it still listens, pin it until
 * cm_listener_release() and give @id its delivery (handler or channel,
 * context). While pinned the listener's DESTROYED waits, and so does a
 * cep_cm_destroy_id() of it from outside the workers: its context and
 * channel outlive the child's REQ_RECEIVED / SIDR_REQ_RECEIVED, as the
 * kernel's cm_req_handler holds the listen id across cm_process_work.
 * -ENOENT if it no longer listens. */
int cm_listener_hold(struct cep_cm_id *lid, struct cep_cm_id *id)
{
	int ret = 0;
	uint16_t linger;
	void *ctx;

	pthread_mutex_lock(&lid->lock);
	if (lid->state != CEP_CM_LISTEN || (lid->flags & F_USER_GONE)) {
		ret = -ENOENT;
	} else if (atomic_load_explicit(&lid->lis.untaken, memory_order_relaxed) >= lid->lis.backlog) {
		/* Increments happen only here, under this lock: the count
		 * cannot pass the backlog; decrements may race (a slot frees). */
		ret = -ENOBUFS;
	} else {
		atomic_fetch_add_explicit(&lid->lis.half_open, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&lid->lis.untaken, 1, memory_order_relaxed);
		cep_get(lid->cep); /* the child's, until its half-open state ends */
		lid->lis.req_inflight++;
		if (lid->channel) /* the listener's own count keeps it alive here */
			atomic_fetch_add(&lid->channel->users, 1);
	}
	ctx = lid->context;
	linger = lid->flags & F_LINGER; /* a child inherits CEP_CM_ID_LINGER */
	pthread_mutex_unlock(&lid->lock);
	CM_HOOK(CM_HOOK_REQ_LISTENER, lid, NULL);
	if (ret)
		return ret;
	/* handler and channel are const once set; the listener is pinned */
	pthread_mutex_lock(&id->lock);
	id->listener = lid;
	id->handler = lid->handler;
	id->channel = lid->channel;
	id->context = ctx;
	id->flags |= linger;
	if (id->channel)
		id->flags |= F_CHANNEL_USER;
	pthread_mutex_unlock(&id->lock);
	return 0;
}

/* The child's request event is delivered: unpin the listener. */
void cm_listener_release(struct cep_cm_id *lid)
{
	pthread_mutex_lock(&lid->lock);
	lid->lis.req_inflight--;
	cm_maybe_post_destroyed(lid);
	pthread_mutex_unlock(&lid->lock);
}

/* The automatic MRA's choice for a request that arrives with @ahead of its
 * listener's requests unanswered (itself included): MRA it at once when it
 * will likely wait longer than half its requester's timeout (@peer_ms),
 * the point where its timer would MRA it anyway - @ahead requests at the
 * listener's measured pace (lis.svc_fx). Before the listener has accepted
 * any request there is no pace: then any request behind another is MRAed
 * at once (an application that never answers, or a burst's first few).
 * Alone, never: the timer covers it. Any thread; an estimate, relaxed. */
static int cm_mra_now(struct cep_cm_id *lid, uint32_t ahead, uint32_t peer_ms)
{
	uint64_t fx = atomic_load_explicit(&lid->lis.svc_fx, memory_order_relaxed);

	if (ahead <= 1)
		return 0;
	return !fx || ((uint64_t)ahead * fx >> 10) >= peer_ms / 2;
}

/* The REQ's primary path must lead to this port, as the kernel's
 * cm_init_av_by_path requires: its P_Key ours (the port's P_Key at index
 * 0, membership bit aside: libcep serves one partition per port), its
 * remote port LID (IB, subnet local) and GID (RoCE) ours, its MTU at most
 * ours. Else REJ with the acceptable value in the ARI (IBTA table 109): 12
 * our GID for the P_Key (as the kernel) and the GID (the one this CM sends
 * from: one GID per port), 13 our LID, 26 our active MTU in the high
 * nibble. Like every REJ of a REQ that leaves no id behind, it names no
 * local comm ID (0, as the kernel's cm_issue_rej). 1 if rejected. */
static int req_path_bad(struct cep_cm *cm, unsigned w, const struct cep_req *rq,
			const struct cep_mad_addr *from, uint64_t tid)
{
	const struct cep_port_info *port = &cm->port;
	const struct cep_path *pp = &rq->primary;
	struct cep_mad_addr to = cm_reply_addr(from);
	struct cep_msg r;

	cep_msg_init(&r, CEP_MSG_REJ, tid);
	if (port->pkey && ((rq->partition_key ^ port->pkey) & 0x7fff)) {
		/* not our partition: the kernel's P_Key lookup in
		 * cm_init_av_by_path fails and it rejects with 12 too */
		r.u.rej.reason = CEP_REJ_INVALID_GID;
		memcpy(r.u.rej.ari, port->gid, 16);
		r.u.rej.reject_info_length = 16;
	} else if (port->link_layer == 1 && pp->subnet_local && pp->remote_lid != port->lid &&
	    pp->remote_lid != 0xffff) { /* permissive: routed, the kernel's workaround */
		r.u.rej.reason = CEP_REJ_INVALID_LID;
		r.u.rej.ari[0] = (uint8_t)(port->lid >> 8);
		r.u.rej.ari[1] = (uint8_t)port->lid;
		r.u.rej.reject_info_length = 2;
	} else if (port->link_layer == 2 && memcmp(pp->remote_gid, port->gid, 16) &&
		   !(from->grh_present && from->gid_index != port->gid_index)) {
		/* A RoCE port has a GID per IP address. A REQ that arrived on
		 * another of them (umad reports the local GID index a MAD was
		 * addressed to) passed the NIC's address filter, and this CM
		 * knows the value of its own GID only: it is checked against
		 * that one alone (the kernel's cm_init_av_by_path accepts any
		 * GID of the port; librdmacm on libcep serves IPv4 and IPv6). */
		r.u.rej.reason = CEP_REJ_INVALID_GID;
		memcpy(r.u.rej.ari, port->gid, 16);
		r.u.rej.reject_info_length = 16;
	} else if (port->active_mtu >= 1 && port->active_mtu <= 5 &&
		   rq->path_mtu > port->active_mtu) {
		r.u.rej.reason = CEP_REJ_INVALID_MTU;
		r.u.rej.ari[0] = (uint8_t)(port->active_mtu << 4);
		r.u.rej.reject_info_length = 1;
	} else {
		return 0;
	}
	r.u.rej.remote_comm_id = rq->local_comm_id;
	r.u.rej.message_rejected = CEP_MSG_CODE_REQ;
	cm_send_raw(cm, w, &r, &to, NULL);
	return 1;
}

void cm_handle_req(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
		       const struct cep_mad_addr *from)
{
	const struct cep_req *rq = &m->u.req;
	struct cep_cm_id *id, *lid;
	struct cep *existing = NULL, *lcep;
	struct cep_cm_event ev;
	int ret;

	if (rq->transport_service_type == CEP_TS_RD) {
		/* no RD (EE contexts) in this CM: refuse, keep nothing */
		cm_reply_rej(cm, w, from, m->hdr.tid, 0, rq->local_comm_id,
			     CEP_REJ_INVALID_TRANSPORT_TYPE, CEP_MSG_CODE_REQ);
		return;
	}
	if (cm_alloc_id(cm, w, NULL, NULL, NULL, &id)) {
		cm_drop(cm, w, CEP_CM_DROP_NO_MEMORY);
		return;
	}
	ret = cep_insert_remote_id(id->cep, rq->local_comm_id, rq->local_ca_guid, &existing);
	if (ret == -EEXIST) {
		if (existing) {
			dup_req(cm, w, cep_context(existing), from);
			cep_put(existing);
		}
		cm_discard_id(id);
		return;
	}
	if (ret) {
		cm_drop(cm, w, CEP_CM_DROP_NO_MEMORY);
		cm_discard_id(id);
		return;
	}
	/* The kernel's cm_match_req order: duplicate (above), stale, then
	 * the listener - a stale REQ releases the old connection even when
	 * nobody listens for its service any more. */
	ret = cep_insert_remote_qpn(id->cep, rq->local_qpn, rq->local_ca_guid, &existing);
	if (ret) {
		cm_reply_rej(cm, w, from, m->hdr.tid, 0, rq->local_comm_id,
			  ret == -EEXIST ? CEP_REJ_STALE_CONN : CEP_REJ_NO_RESOURCES,
			  CEP_MSG_CODE_REQ);
		cm_discard_id(id);
		if (existing) {
			release_stale(cep_context(existing), w, from);
			cep_put(existing);
		}
		return;
	}
	if (cep_lookup_listener(cm->table, rq->service_id, &lcep)) {
		cm_reply_rej(cm, w, from, m->hdr.tid, 0, rq->local_comm_id,
			  CEP_REJ_INVALID_SERVICE_ID, CEP_MSG_CODE_REQ);
		cm_discard_id(id);
		return;
	}
	lid = cep_context(lcep);
	if (req_path_bad(cm, w, rq, from, m->hdr.tid)) {
		cm_discard_id(id);
		cep_put(lcep);
		return;
	}
	ret = cm_listener_hold(lid, id);
	if (ret == -ENOBUFS) {
		/* Backlog full: drop, as the kernel does for a REQ its handler
		 * refuses with -ENOMEM, so the peer retries later. */
		cm_drop(cm, w, CEP_CM_DROP_BACKLOG);
		cm_discard_id(id);
		cep_put(lcep);
		return;
	}
	if (ret) {
		cm_reply_rej(cm, w, from, m->hdr.tid, 0, rq->local_comm_id,
			  CEP_REJ_INVALID_SERVICE_ID, CEP_MSG_CODE_REQ);
		cm_discard_id(id);
		cep_put(lcep);
		return;
	}
	pthread_mutex_lock(&id->lock);
	if (rq->transport_service_type == CEP_TS_EXTENDED) /* XRC (the codec's rule) */
		id->flags |= F_XRC;
	id->remote_id = rq->local_comm_id;
	id->remote_qpn = rq->local_qpn;
	id->remote_ca_guid = rq->local_ca_guid;
	id->service_id = rq->service_id;
	id->tid = m->hdr.tid;
	id->peer = cm_reply_addr(from);
	if (path_has_alt(&rq->alternate) && cm_paths(id)) /* its alternate port may speak too */
		id->paths->alt = cm_path_addr(&rq->alternate, 0);
	/* the peer's timeouts, clamped (CM_PEER_TIMEOUT_MAX) */
	id->timeout_ms = cm_ms(cm_peer_t(rq->local_cm_response_timeout));
	id->peer_timeout_ms = cm_ms(cm_peer_t(rq->remote_cm_response_timeout));
	/* the tries the requester has left: each repeat spends one (dup_req) */
	id->max_retries = id->retries_left = rq->max_cm_retries;
	/* The requester computed the path's ACK timeout (2 x packet life +
	 * its ACK delay); its packet life is one less (kernel
	 * cm_format_paths_from_req). */
	id->path_timeout = (uint8_t)cm_peer_t(rq->primary.local_ack_timeout);
	id->pkt_life = (uint8_t)(id->path_timeout - (id->path_timeout > 0));
	/* QP attributes (cep_cm_init_qp_attr): the REQ's half. A REQ the
	 * glue cannot use (e.g. RD) leaves them unset: -ENODATA later. */
	(void)cep_qp_params_passive(&id->qpp, &cm->port, rq);
	cm_set_state(id, CEP_CM_REQ_RCVD);
	/* The requester gives up after 1 + Max CM Retries tries of 2 x packet
	 * life + our response timeout: then this half-open id expires, or
	 * at the half-open limit if that comes first (cm_set_expiry). */
	id->half_open_until = cep_clock_ms(cm->clock) + cm->half_open_ms;
	/* relaxed: a count for an estimate; ours is in it (cm_listener_hold) */
	id->req_ahead = atomic_load_explicit(&lid->lis.half_open, memory_order_relaxed);
	if (cm->auto_mra && cm_mra_now(lid, id->req_ahead, id->peer_timeout_ms)) {
		/* The listener is behind: this request waits behind the
		 * others for longer than the half of the requester's timeout
		 * at which the timer below would MRA it, so MRA it now, when
		 * a burst's MRAs would otherwise all leave together, late,
		 * behind the requester's REQ timer (issue 21: 1,612 REQ
		 * retries for cmtime's 1,000 connections). libcep's choice:
		 * the kernel's rdma_cm MRAs a request only when its REQ comes
		 * again (CMA_CM_MRA_SETTING carries IB_CM_MRA_FLAG_DELAY), and
		 * a 6.1 requester waits the MRA's time for each try it has
		 * left (docs/protocol.md, "MRA"). A listener that keeps up
		 * sends none. */
		cm_send_auto_mra(id, CEP_MSG_CODE_REQ);
		cm_set_state(id, CEP_CM_MRA_REQ_SENT);
		cm_req_expire_after_mra(id);
	} else if (cm->auto_mra && id->peer_timeout_ms / 2 + 1 < cm->half_open_ms)
		cm_set_timer(id, TK_AUTO_MRA, id->peer_timeout_ms / 2 + 1);
	else
		cm_set_expiry(id, (1u + id->max_retries) *
				  (2 * cm_ms(id->pkt_life) + id->peer_timeout_ms), 0);
	cm_ev_init(&ev, id, CEP_CM_EV_REQ_RECEIVED);
	ev.listen_id = lid;
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
	pthread_mutex_unlock(&id->lock);
	cm_listener_release(lid);
	cep_put(lcep);
}

/* Lock held, REP_RCVD: send RTU and become ESTABLISHED. */
static void do_rtu(struct cep_cm_id *id, const void *pdata, size_t len)
{
	cm_send_simple(id, CEP_MSG_RTU, pdata, len, 0);
	cm_keep_pdata(id, pdata, len); /* for the RTU a repeated REP gets */
	cm_clear_timer(id);
	cm_set_state(id, CEP_CM_ESTABLISHED);
}

void cm_handle_rep(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
		       const struct cep_mad_addr *from)
{
	const struct cep_rep *rp = &m->u.rep;
	struct cep_cm_id *id = cm_find_id(cm, rp->remote_comm_id);
	struct cep *existing = NULL;
	struct cep_cm_event ev;
	uint32_t rqpn;
	int ret;

	if (!id) {
		cm_drop(cm, w, CEP_CM_DROP_NO_CEP);
		cm_reply_rej(cm, w, from, m->hdr.tid, rp->remote_comm_id, rp->local_comm_id,
			  CEP_REJ_INVALID_COMM_ID, CEP_MSG_CODE_REP);
		return;
	}
	pthread_mutex_lock(&id->lock);
	if (!cm_from_peer(id, w, from)) /* e.g. a REP naming a stranger's QP */
		goto out;
	switch (id->state) {
	case CEP_CM_REQ_SENT:
	case CEP_CM_MRA_REQ_RCVD:
		break;
	case CEP_CM_ESTABLISHED:
	case CEP_CM_MRA_REP_SENT:
	case CEP_CM_REP_RCVD:
		/* A repeat of the REP we took (the kernel's cm_dup_rep_handler
		 * looks the id up by both comm IDs): answer it again with the
		 * original private data. Any other REP is not this peer's. */
		if (id->remote_id != rp->local_comm_id) {
			cm_drop(cm, w, CEP_CM_DROP_MISMATCH);
			goto out;
		}
		STAT_ADD(cm, w, duplicates);
		if (id->state == CEP_CM_ESTABLISHED) { /* our RTU was lost */
			cm_send_simple(id, CEP_MSG_RTU, id->resend_pd, id->resend_len, 0);
		} else if (id->state == CEP_CM_MRA_REP_SENT) {
			cm_send_mra(id, CEP_MSG_CODE_REP, id->mra_timeout, id->resend_pd,
				    id->resend_len);
		} else if (cm->auto_mra) {
			/* REP_RCVD: the responder's REP timer ran out before
			 * our application's RTU. The automatic MRA of a REP
			 * goes now, as rdma_cm's delayed one does
			 * (CMA_CM_MRA_SETTING with IB_CM_MRA_FLAG_DELAY, sent
			 * by cm_dup_rep_handler): a REP answered before its
			 * responder's first retry costs no MAD more. */
			cm_send_auto_mra(id, CEP_MSG_CODE_REP);
			cm_set_state(id, CEP_CM_MRA_REP_SENT);
		}
		goto out;
	default:
		cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		goto out;
	}
	/* The peer's QP: an XRC target names it in the local EECN (local
	 * QPN 0, the codec's rule), any other responder in the local QPN.
	 * The kernel's cm_rep_handler reads the field of the id's type
	 * whatever the REP says; here a REP of the other form names no QP
	 * of this connection and changes nothing (stricter). */
	if (id->flags & F_XRC) {
		if (rp->local_qpn != 0) {
			cm_drop(cm, w, CEP_CM_DROP_MISMATCH);
			goto out;
		}
		rqpn = rp->local_eecn;
	} else {
		if (rp->local_qpn == 0) {
			cm_drop(cm, w, CEP_CM_DROP_MISMATCH);
			goto out;
		}
		rqpn = rp->local_qpn;
	}
	/* Another connection holds this (remote comm ID, CA GUID): a
	 * duplicate to drop, as the kernel's cm_rep_handler does - never a
	 * reason to touch that connection. */
	if (cep_lookup_remote_id(cm->table, rp->local_comm_id, rp->local_ca_guid, &existing) == 0) {
		cep_put(existing);
		STAT_ADD(cm, w, duplicates);
		goto out;
	}
	/* Stale if another connection holds (remote QPN, CA GUID). Looked up
	 * before any insert, so this id's keys stay free for a right REP. */
	ret = cep_lookup_remote_qpn(cm->table, rqpn, rp->local_ca_guid, &existing)
		      ? 0 : -EEXIST;
	if (ret == 0) {
		existing = NULL;
		ret = cep_insert_remote_id(id->cep, rp->local_comm_id, rp->local_ca_guid, &existing);
		if (ret) { /* lost a race for the key: a duplicate after all */
			if (existing)
				cep_put(existing);
			STAT_ADD(cm, w, duplicates);
			goto out;
		}
		ret = cep_insert_remote_qpn(id->cep, rqpn, rp->local_ca_guid, &existing);
		if (ret)
			cm_drop_remote_keys(id);
	}
	if (ret) {
		/* Stale: refuse this REP, release the old connection; this id
		 * keeps waiting (and times out) as the kernel's CM does. */
		struct cep_mad_addr to = cm_reply_addr(from);
		struct cep_msg r;

		cep_msg_init(&r, CEP_MSG_REJ, m->hdr.tid);
		r.u.rej.local_comm_id = cep_local_comm_id(id->cep);
		r.u.rej.remote_comm_id = rp->local_comm_id;
		r.u.rej.reason = CEP_REJ_STALE_CONN;
		r.u.rej.message_rejected = CEP_MSG_CODE_REP;
		cm_send_raw(cm, w, &r, &to, NULL);
		pthread_mutex_unlock(&id->lock);
		if (existing) {
			struct cep_cm_id *old = cep_context(existing);

			if (old != id)
				release_stale(old, w, from);
			cep_put(existing);
		}
		cm_id_put(id);
		return;
	}
	if (id->dest) /* the REQ's answer: its window learns how soon */
		cm_pace_answer(id);
	id->remote_id = rp->local_comm_id;
	id->remote_qpn = rqpn;
	id->remote_ca_guid = rp->local_ca_guid;
	/* The path's ACK timeout now includes the peer's ACK delay (kernel
	 * cm_rep_handler): timewait lasts one of it. */
	id->path_timeout = cep_qp_ack_timeout((uint8_t)cm_peer_t(rp->target_ack_delay),
					      id->pkt_life);
	cm_free_retry(id);
	cm_clear_timer(id);
	(void)cep_qp_params_active_rep(&id->qpp, rp); /* the REP's half */
	cm_set_state(id, CEP_CM_REP_RCVD);
	/* auto_mra: an MRA at half the responder's timeout only for a REP
	 * whose RTU will likely come after the responder repeats it (at the
	 * pace the application has answered REPs); any other gets one only
	 * if the responder does repeat it (above). Issue 27: through cepd
	 * cmtime's client RTUed 430-1,000 of 1,000 REPs after that half and
	 * before any repeat, an MRA each way for nothing; at 10,000 its REPs
	 * wait past the repeat, and the MRA spares each its repeat. */
	if (cm->auto_mra && cm_rep_mra_due(id))
		cm_set_timer(id, TK_AUTO_MRA, id->peer_timeout_ms / 2 + 1);
	if (id->flags & F_USER_GONE) {
		/* destroyed while connecting: the REP is refused */
		cm_send_rej(id, CEP_REJ_CONSUMER_DEFINED, CEP_MSG_CODE_REP, NULL, 0, NULL, 0);
		cm_enter_timewait(id);
		goto out;
	}
	cm_ev_init(&ev, id, CEP_CM_EV_REP_RECEIVED);
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
	/* the callback may have sent RTU, MRA or REJ, or destroyed the id */
	if (!(id->flags & F_MANUAL_RTU) && id->state == CEP_CM_REP_RCVD) {
		do_rtu(id, NULL, 0);
		cm_ev_init(&ev, id, CEP_CM_EV_ESTABLISHED);
		cm_emit(id, &ev);
	}
out:
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

/* Look up the id addressed by @remote_comm_id (our local) whose peer is
 * @local_comm_id; on mismatch count and return NULL. Lock NOT held. */
struct cep_cm_id *cm_find_peer(struct cep_cm *cm, unsigned w, uint32_t ours,
				   uint32_t theirs, const struct cep_mad_addr *from)
{
	struct cep_cm_id *id = cm_find_id(cm, ours);

	if (!id) {
		cm_drop(cm, w, CEP_CM_DROP_NO_CEP);
		return NULL;
	}
	pthread_mutex_lock(&id->lock);
	if (id->remote_id != theirs) {
		pthread_mutex_unlock(&id->lock);
		cm_drop(cm, w, CEP_CM_DROP_MISMATCH);
		cm_id_put(id);
		return NULL;
	}
	if (!cm_from_peer(id, w, from)) {
		pthread_mutex_unlock(&id->lock);
		cm_id_put(id);
		return NULL;
	}
	return id; /* locked */
}

void cm_handle_rtu(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
		       const struct cep_mad_addr *from)
{
	struct cep_cm_id *id = cm_find_peer(cm, w, m->u.rtu.remote_comm_id, m->u.rtu.local_comm_id,
					    from);
	struct cep_cm_event ev;

	if (!id)
		return;
	if (id->state != CEP_CM_REP_SENT && id->state != CEP_CM_MRA_REP_RCVD) {
		if (id->state == CEP_CM_ESTABLISHED)
			STAT_ADD(cm, w, duplicates);
		else
			cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		pthread_mutex_unlock(&id->lock);
		cm_id_put(id);
		return;
	}
	cm_free_retry(id);
	cm_clear_timer(id);
	cm_set_state(id, CEP_CM_ESTABLISHED);
	if (id->flags & F_USER_GONE) /* destroyed while accepting: release at once */
		cm_start_dreq(id, NULL, 0);
	cm_ev_init(&ev, id, CEP_CM_EV_RTU_RECEIVED);
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

void cm_handle_mra(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
		       const struct cep_mad_addr *from)
{
	const struct cep_mra *ma = &m->u.mra;
	struct cep_cm_id *id = cm_find_id(cm, ma->remote_comm_id);
	struct cep_cm_event ev;
	int ok = 0;

	if (!id) {
		cm_drop(cm, w, CEP_CM_DROP_NO_CEP);
		return;
	}
	pthread_mutex_lock(&id->lock);
	if (id->remote_id && id->remote_id != ma->local_comm_id) {
		cm_drop(cm, w, CEP_CM_DROP_MISMATCH);
		goto out;
	}
	if (!cm_from_peer(id, w, from)) /* a stranger cannot stall us */
		goto out;
	/* The service timeout (clamped: 68.7 s) plus the path's ACK timeout
	 * (kernel cm_mra_handler: service timeout + av.timeout) for the wait
	 * in progress, as the kernel since 6.14; then the retries come at the
	 * normal period - unless the peer MRAs a retry again: one extension
	 * per try of ours, so a peer still busy holds back each retry (a 6.1
	 * kernel stretches every later retry after one MRA; 6.14 none after
	 * the first), and a lying peer still ends after Max CM Retries tries
	 * (docs/protocol.md, "MRA"). */
	uint32_t ext = cm_ms(cm_peer_t(ma->service_timeout)) + cm_ms(id->path_timeout);
	int again = 0; /* a later try MRAed: extend, no second event */

	switch (ma->message_mraed) {
	case CEP_MSG_CODE_REQ:
		if (id->state == CEP_CM_REQ_SENT) {
			cm_set_state(id, CEP_CM_MRA_REQ_RCVD);
			ok = 1;
		} else if (id->state == CEP_CM_MRA_REQ_RCVD) {
			again = 1;
		} else {
			cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		}
		break;
	case CEP_MSG_CODE_REP:
		if (id->state == CEP_CM_REP_SENT) {
			cm_set_state(id, CEP_CM_MRA_REP_RCVD);
			ok = 1;
		} else if (id->state == CEP_CM_MRA_REP_RCVD) {
			again = 1;
		} else {
			cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		}
		break;
	default:
		if (id->state == CEP_CM_ESTABLISHED && id->lap_state == CEP_CM_LAP_SENT) {
			id->lap_state = CEP_CM_MRA_LAP_RCVD;
			ok = 1;
		} else if (id->lap_state == CEP_CM_MRA_LAP_RCVD) {
			again = 1;
		} else {
			cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		}
		break;
	}
	if (again && (id->flags & F_MRA_WAIT)) {
		STAT_ADD(cm, w, duplicates); /* this try is extended already */
		again = 0;
	}
	if (ok || again) {
		if (id->dest && ma->message_mraed == CEP_MSG_CODE_REQ)
			cm_pace_mra(id, ext);
		id->flags |= F_MRA_WAIT;
		cm_set_timer(id, TK_RETRY, ext);
	}
	if (ok) {
		cm_ev_init(&ev, id, CEP_CM_EV_MRA_RECEIVED);
		cm_ev_msg(&ev, m, from);
		cm_emit(id, &ev);
	}
out:
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

void cm_handle_rej(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
		       const struct cep_mad_addr *from)
{
	const struct cep_rej *rj = &m->u.rej;
	struct cep_cm_id *id = NULL;
	struct cep_cm_event ev;
	struct cep *cep;
	int by_guid = rj->remote_comm_id == 0 && rj->reason == CEP_REJ_TIMEOUT;

	if (rj->reason <= CEP_REJ_REASON_MAX)
		STAT_ADD(cm, w, rej_received[rj->reason]);
	if (by_guid) {
		/* The active side gave up before learning our comm ID. */
		if (cep_lookup_remote_id(cm->table, rj->local_comm_id, cm_be64(rj->ari), &cep) == 0)
			id = cep_context(cep);
	} else {
		id = cm_find_id(cm, rj->remote_comm_id);
	}
	if (!id) {
		cm_drop(cm, w, CEP_CM_DROP_NO_CEP);
		return;
	}
	pthread_mutex_lock(&id->lock);
	if (id->remote_id && id->remote_id != rj->local_comm_id) {
		cm_drop(cm, w, CEP_CM_DROP_MISMATCH);
		goto drop_out;
	}
	if (!cm_from_peer(id, w, from))
		goto drop_out;
	/* Before the peer's comm ID is known only a REJ of our REQ can be
	 * meant for us (the kernel's cm_acquire_rejected_id drops the
	 * "other" code there: it does not match remote comm ID 0). */
	if ((id->state == CEP_CM_REQ_SENT || id->state == CEP_CM_MRA_REQ_RCVD) &&
	    rj->message_rejected != CEP_MSG_CODE_REQ) {
		cm_drop(cm, w, CEP_CM_DROP_MISMATCH);
		goto drop_out;
	}
	/* Found by (comm ID, CA GUID) alone, which anyone who saw them can
	 * forge: a real one comes only from an active side that gave up
	 * before our REP was answered, i.e. to a passive id before RTU.
	 * Stricter than the kernel (docs/protocol.md). */
	if (by_guid && id->state != CEP_CM_REQ_RCVD && id->state != CEP_CM_MRA_REQ_SENT &&
	    id->state != CEP_CM_REP_SENT && id->state != CEP_CM_MRA_REP_RCVD) {
		cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		goto drop_out;
	}
	switch (id->state) {
	case CEP_CM_REQ_SENT:
	case CEP_CM_MRA_REQ_RCVD:
		if (id->dest) /* an answer to the REQ, as a REP */
			cm_pace_answer(id);
		/* fall through */
	case CEP_CM_REP_SENT:
	case CEP_CM_MRA_REP_RCVD:
	case CEP_CM_REQ_RCVD:
	case CEP_CM_MRA_REQ_SENT:
		if (rj->reason == CEP_REJ_STALE_CONN)
			cm_enter_timewait(id);
		else
			cm_reset_to_idle(id);
		break;
	case CEP_CM_REP_RCVD:
	case CEP_CM_MRA_REP_SENT:
	case CEP_CM_DREQ_SENT:
		cm_enter_timewait(id);
		break;
	case CEP_CM_ESTABLISHED:
		if (id->lap_state == CEP_CM_LAP_IDLE || id->lap_state == CEP_CM_LAP_SENT) {
			cm_enter_timewait(id);
			break;
		}
		/* fall through */
	default:
		cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		goto drop_out;
	}
	cm_ev_init(&ev, id, CEP_CM_EV_REJ_RECEIVED);
	ev.status = rj->reason;
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
drop_out:
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

/* The DREP for a DREQ that no connection takes (unknown comm ID, or an id
 * whose connection and timewait are over): the DREQ's comm IDs swapped
 * and its TID echoed, no private data, to where it came from - what the
 * kernel's cm_issue_drep sends. Stateless, worker @w, no lock needed. */
static void reply_drep(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
		       const struct cep_mad_addr *from)
{
	struct cep_mad_addr to = cm_reply_addr(from);
	struct cep_msg r;

	cep_msg_init(&r, CEP_MSG_DREP, m->hdr.tid);
	r.u.drep.local_comm_id = m->u.dreq.remote_comm_id;
	r.u.drep.remote_comm_id = m->u.dreq.local_comm_id;
	cm_send_raw(cm, w, &r, &to, NULL);
}

void cm_handle_dreq(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
			const struct cep_mad_addr *from)
{
	const struct cep_dreq *dq = &m->u.dreq;
	struct cep_cm_id *id = cm_find_id(cm, dq->remote_comm_id);
	struct cep_cm_event ev;

	if (!id) {
		/* Unknown connection: answer so the peer can finish (12.9.7). */
		cm_drop(cm, w, CEP_CM_DROP_NO_CEP);
		reply_drep(cm, w, m, from);
		return;
	}
	pthread_mutex_lock(&id->lock);
	if (id->remote_id != dq->local_comm_id || id->local_qpn != dq->remote_qpn_eecn) {
		cm_drop(cm, w, CEP_CM_DROP_MISMATCH); /* forged or stale: change nothing */
		goto out;
	}
	if (!cm_from_peer(id, w, from)) /* a stranger would leave the peer half-open */
		goto out;
	switch (id->state) {
	case CEP_CM_REP_SENT:
	case CEP_CM_MRA_REP_RCVD:
	case CEP_CM_DREQ_SENT:
	case CEP_CM_ESTABLISHED:
		break;
	case CEP_CM_TIMEWAIT:
		STAT_ADD(cm, w, duplicates);
		id->tid = m->hdr.tid; /* the DREP echoes the DREQ it answers */
		cm_send_simple(id, CEP_MSG_DREP, id->resend_pd, id->resend_len, 0);
		goto out;
	case CEP_CM_DREQ_RCVD:
		STAT_ADD(cm, w, duplicates);
		goto out;
	case CEP_CM_IDLE:
		/* The connection is over and its timewait too; the application
		 * still holds the id (docs/quickstart.md's teardown order). A
		 * retry whose DREP was lost gets one as for an unknown comm
		 * ID, or the requester ends in DREQ_ERROR (issue 17; the
		 * kernel's cm_dreq_handler drops it). The id is not touched. */
		STAT_ADD(cm, w, duplicates);
		reply_drep(cm, w, m, from);
		goto out;
	default: /* dropped: changes nothing, not even the TID */
		cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		goto out;
	}
	/* our DREP (now, or later by the application) echoes this request's
	 * TID, as the kernel's cm_dreq_handler records it once it takes it */
	id->tid = m->hdr.tid;
	cm_free_retry(id);
	cm_clear_timer(id);
	id->lap_state = CEP_CM_LAP_IDLE;
	cm_set_state(id, CEP_CM_DREQ_RCVD);
	if (id->flags & (F_USER_GONE | F_QP_GONE)) {
		cm_send_simple(id, CEP_MSG_DREP, NULL, 0, 0);
		cm_keep_pdata(id, NULL, 0);
		cm_enter_timewait(id);
	}
	cm_ev_init(&ev, id, CEP_CM_EV_DREQ_RECEIVED);
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
	/* the callback may have sent the DREP or destroyed the id (which
	 * sends it) */
	if (!(id->flags & F_MANUAL_DREP) && id->state == CEP_CM_DREQ_RCVD) {
		cm_send_simple(id, CEP_MSG_DREP, NULL, 0, 0);
		cm_keep_pdata(id, NULL, 0);
		cm_enter_timewait(id);
	}
out:
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

void cm_handle_drep(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
			const struct cep_mad_addr *from)
{
	struct cep_cm_id *id = cm_find_peer(cm, w, m->u.drep.remote_comm_id, m->u.drep.local_comm_id,
					    from);
	struct cep_cm_event ev;

	if (!id)
		return;
	if (id->state != CEP_CM_DREQ_SENT && id->state != CEP_CM_DREQ_RCVD) {
		if (id->state == CEP_CM_TIMEWAIT)
			STAT_ADD(cm, w, duplicates);
		else
			cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		pthread_mutex_unlock(&id->lock);
		cm_id_put(id);
		return;
	}
	cm_enter_timewait(id);
	cm_ev_init(&ev, id, CEP_CM_EV_DREP_RECEIVED);
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

void cm_id_teardown(struct cep *cep, void *ctx)
{
	struct cep_cm_id *id = cep_context(cep);

	(void)ctx;
	pthread_mutex_lock(&id->lock);
	id->flags |= F_QP_GONE;
	cm_post_bits_lazy(id, W_QP_GONE);
	switch (id->state) {
	case CEP_CM_ESTABLISHED:
		cm_start_dreq(id, NULL, 0);
		break;
	case CEP_CM_DREQ_RCVD:
		cm_send_simple(id, CEP_MSG_DREP, NULL, 0, 0);
		cm_keep_pdata(id, NULL, 0);
		cm_enter_timewait(id);
		break;
	case CEP_CM_DREQ_SENT:
	case CEP_CM_TIMEWAIT:
		break; /* timewait ends it */
	case CEP_CM_REQ_SENT:
	case CEP_CM_MRA_REQ_RCVD:
	case CEP_CM_REP_SENT:
	case CEP_CM_MRA_REP_RCVD:
	case CEP_CM_REQ_RCVD:
	case CEP_CM_MRA_REQ_SENT:
		cm_send_rej(id, CEP_REJ_NO_QP, CEP_MSG_CODE_OTHER, NULL, 0, NULL, 0);
		cm_reset_to_idle(id);
		break;
	case CEP_CM_REP_RCVD:
	case CEP_CM_MRA_REP_SENT:
		cm_send_rej(id, CEP_REJ_NO_QP, CEP_MSG_CODE_REP, NULL, 0, NULL, 0);
		cm_enter_timewait(id);
		break;
	default:
		cm_maybe_table_destroy(id);
		break;
	}
	pthread_mutex_unlock(&id->lock);
}

/* The caller's parameters (of its ->size) with the defaults of cm.h for
 * zero CM timing fields, librdmacm's (its kernel's CMA_CM_RESPONSE_TIMEOUT,
 * CMA_MAX_CM_RETRIES, CMA_IBOE_PACKET_LIFETIME), in @q. 0, -EINVAL,
 * -EMSGSIZE. */
static int cm_conn_param_defaults(const struct cep_cm_conn_param *p, struct cep_cm_conn_param *q)
{
	memset(q, 0, sizeof(*q));
	memcpy(q, p, p->size < sizeof(*q) ? p->size : sizeof(*q));
	q->size = sizeof(*q);
	if (p->size <= offsetof(struct cep_cm_conn_param, flow_control))
		q->flow_control = 1; /* a caller built before the field: as it always was */
	if (q->qpn > 0xffffff || q->qpn < 2 || q->max_cm_retries > 15 ||
	    q->remote_cm_response_timeout > 31 || q->local_cm_response_timeout > 31 ||
	    q->packet_life_time > 31 || q->path_mtu > 5 ||
	    q->transport_service_type == CEP_TS_RD || q->transport_service_type > CEP_TS_EXTENDED ||
	    q->starting_psn > 0xffffff ||
	    (q->private_data_len && !q->private_data))
		return -EINVAL;
	if (q->private_data_len > CEP_REQ_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	if (!q->remote_cm_response_timeout)
		q->remote_cm_response_timeout = CEP_CM_DEFAULT_RESPONSE_TIMEOUT;
	if (!q->local_cm_response_timeout)
		q->local_cm_response_timeout = CEP_CM_DEFAULT_RESPONSE_TIMEOUT;
	if (!q->max_cm_retries)
		q->max_cm_retries = CEP_CM_DEFAULT_MAX_RETRIES;
	if (!q->packet_life_time)
		q->packet_life_time = CEP_CM_DEFAULT_PACKET_LIFE_TIME;
	return 0;
}

/* The public functions of a connection: the checks both kinds make alike,
 * then the context's table (cm_ops.h). */

/* cep_cm_connect's checks of its arguments, common to both kinds. */
static int connect_args_ok(const struct cep_cm_id *id, const struct cep_cm_conn_param *p)
{
	return id && p && p->size >= offsetof(struct cep_cm_conn_param, flow_control) &&
	       (!p->private_data_len || p->private_data);
}

int cep_cm_connect(struct cep_cm_id *id, const struct cep_cm_conn_param *p)
{
	return connect_args_ok(id, p) ? id->cm->ops->connect(id, p) : -EINVAL;
}

int cm_connect_nowait(struct cep_cm_id *id, const struct cep_cm_conn_param *p)
{
	return connect_args_ok(id, p) ? id->cm->ops->connect_nowait(id, p) : -EINVAL;
}

/* cep_cm_accept's checks of its arguments, common to both kinds. */
static int accept_args_ok(const struct cep_cm_id *id, const struct cep_cm_accept_param *p)
{
	return id && p && p->size >= offsetof(struct cep_cm_accept_param, flow_control) &&
	       (!p->private_data_len || p->private_data);
}

int cep_cm_accept(struct cep_cm_id *id, const struct cep_cm_accept_param *p)
{
	return accept_args_ok(id, p) ? id->cm->ops->accept(id, p) : -EINVAL;
}

int cm_accept_nowait(struct cep_cm_id *id, const struct cep_cm_accept_param *p)
{
	return accept_args_ok(id, p) ? id->cm->ops->accept_nowait(id, p) : -EINVAL;
}

int cep_cm_notify_established(struct cep_cm_id *id)
{
	return id ? id->cm->ops->notify_established(id) : -EINVAL;
}

int cep_cm_rtu(struct cep_cm_id *id, const void *pdata, size_t len)
{
	return id ? id->cm->ops->rtu(id, pdata, len) : -EINVAL;
}

int cm_rtu_nowait(struct cep_cm_id *id)
{
	return id ? id->cm->ops->rtu_nowait(id) : -EINVAL;
}

/* cm_local_ops' rtu_nowait: the engine answers at once anyway. */
int cm_local_rtu_nowait(struct cep_cm_id *id)
{
	return cm_local_rtu(id, NULL, 0);
}

int cep_cm_reject(struct cep_cm_id *id, unsigned reason, const void *ari, size_t ari_len,
		  const void *pdata, size_t len)
{
	return id ? id->cm->ops->reject(id, reason, ari, ari_len, pdata, len) : -EINVAL;
}

int cep_cm_mra(struct cep_cm_id *id, uint8_t service_timeout, const void *pdata, size_t len)
{
	return id ? id->cm->ops->mra(id, service_timeout, pdata, len) : -EINVAL;
}

int cep_cm_disconnect(struct cep_cm_id *id, const void *pdata, size_t len)
{
	return id ? id->cm->ops->disconnect(id, pdata, len) : -EINVAL;
}

int cm_disconnect_nowait(struct cep_cm_id *id)
{
	return id ? id->cm->ops->disconnect_nowait(id) : -EINVAL;
}

/* cm_local_ops' disconnect_nowait: the engine answers at once anyway. */
int cm_local_disconnect_nowait(struct cep_cm_id *id)
{
	return cm_local_disconnect(id, NULL, 0);
}

int cep_cm_drep(struct cep_cm_id *id, const void *pdata, size_t len)
{
	return id ? id->cm->ops->drep(id, pdata, len) : -EINVAL;
}

/* ---- the engine's (cm_local_ops) ---------------------------------------- */

int cm_local_connect(struct cep_cm_id *id, const struct cep_cm_conn_param *user)
{
	struct cep_cm_conn_param q, *p = &q;
	struct cep_msg m;
	struct cep_req *rq = &m.u.req;
	int ret;

	ret = cm_conn_param_defaults(user, &q);
	if (ret)
		return ret;
	cep_msg_init(&m, CEP_MSG_REQ, 0);
	pthread_mutex_lock(&id->lock);
	if (id->state != CEP_CM_IDLE || (id->flags & F_USER_GONE) || cep_is_destroyed(id->cep)) {
		ret = -EINVAL;
		goto out;
	}
	ret = cep_bind(id->cep, p->qpn);
	if (ret)
		goto out;
	(void)cep_qp_params_active(&id->qpp, &id->cm->port, p); /* our half, defaults applied */
	m.hdr.tid = cm_next_tid(id);
	rq->local_comm_id = cep_local_comm_id(id->cep);
	rq->vendor_id = p->ece_vendor_id & 0xffffff; /* ECE: as cm_format_req */
	m.hdr.attr_mod = p->ece_options;
	rq->service_id = p->service_id;
	rq->local_ca_guid = id->cm->ca_guid;
	rq->local_qkey = p->qkey;
	rq->local_qpn = p->qpn;
	rq->responder_resources = p->responder_resources;
	rq->initiator_depth = p->initiator_depth;
	rq->remote_cm_response_timeout = p->remote_cm_response_timeout;
	rq->transport_service_type = p->transport_service_type;
	/* the caller's (the kernel's ib_cm_req_param.flow_control) */
	rq->end_to_end_flow_control = p->flow_control ? 1 : 0;
	rq->starting_psn = p->starting_psn;
	rq->local_cm_response_timeout = p->local_cm_response_timeout;
	rq->retry_count = p->retry_count & 7;
	rq->partition_key = p->pkey ? p->pkey : CEP_DEFAULT_PKEY;
	rq->path_mtu = p->path_mtu ? p->path_mtu
				   : (id->cm->port.active_mtu ? id->cm->port.active_mtu : 5);
	rq->rnr_retry_count = p->rnr_retry_count & 7;
	rq->max_cm_retries = p->max_cm_retries;
	rq->srq = p->srq ? 1 : 0;
	if (p->transport_service_type == CEP_TS_EXTENDED) {
		/* An XRC initiator's REQ, as the kernel's cm_format_req for
		 * IB_QPT_XRC_INI: extended transport XRC; no responder
		 * resources, retry counts or SRQ (the initiator has no
		 * receive side; its QP's retry counts stay ours, cep/qp.h) */
		rq->extended_transport_type = CEP_EXT_TRANSPORT_XRC;
		rq->responder_resources = 0;
		rq->retry_count = 0;
		rq->rnr_retry_count = 0;
		rq->srq = 0;
	}
	rq->primary = p->primary;
	/* The ACK timeout of the path: 2 x its packet life time + our CA's
	 * ACK delay, as the kernel's cm_format_req computes it. */
	rq->primary.local_ack_timeout = cep_qp_ack_timeout(id->cm->port.ca_ack_delay,
							   p->packet_life_time);
	if (path_has_alt(&p->alternate)) {
		rq->alternate = p->alternate;
		rq->alternate.local_ack_timeout = rq->primary.local_ack_timeout;
	}
	cm_copy_pdata(rq->private_data, p->private_data, p->private_data_len);
	if (p->peer) {
		id->peer = *p->peer;
	} else {
		memset(&id->peer, 0, sizeof(id->peer));
		id->peer.lid = p->primary.remote_lid;
		id->peer.sl = p->primary.sl;
		id->peer.hop_limit = p->primary.hop_limit;
		id->peer.traffic_class = p->primary.traffic_class;
		id->peer.flow_label = p->primary.flow_label;
		memcpy(id->peer.gid, p->primary.remote_gid, 16);
		id->peer.grh_present = p->primary.remote_lid == 0 || !p->primary.subnet_local;
	}
	id->peer.qpn = 1;
	id->peer.qkey = CEP_QP1_QKEY;
	if (id->paths) /* nothing of a previous connection's paths */
		memset(id->paths, 0, sizeof(*id->paths));
	if (path_has_alt(&p->alternate) && cm_paths(id))
		id->paths->alt = cm_path_addr(&p->alternate, 1);
	id->local_qpn = p->qpn;
	/* a new connection: nothing of the previous peer's */
	id->remote_id = 0;
	id->remote_qpn = 0;
	id->remote_ca_guid = 0;
	id->service_id = p->service_id;
	id->pkt_life = p->packet_life_time;
	id->timeout_ms = 2 * cm_ms(id->pkt_life) + cm_ms(p->remote_cm_response_timeout);
	id->peer_timeout_ms = cm_ms(p->local_cm_response_timeout); /* its REP's retry */
	/* until a REP tells the peer's ACK delay: the path's (kernel: the
	 * address vector's timeout is packet life + 1) */
	id->path_timeout = (uint8_t)(p->packet_life_time + 1u > 31 ? 31 : p->packet_life_time + 1u);
	id->max_retries = id->retries_left = p->max_cm_retries;
	id->flags = (uint16_t)((id->flags & ~(F_MANUAL_RTU | F_MANUAL_DREP | F_REQ_WIRE | F_XRC)) |
			      (p->manual_rtu ? F_MANUAL_RTU : 0) |
			      (p->manual_drep ? F_MANUAL_DREP : 0) |
			      (p->transport_service_type == CEP_TS_EXTENDED ? F_XRC : 0));
	ret = cm_keep_msg(id, &m);
	if (ret) {
		cep_unbind(id->cep);
		goto out;
	}
	cm_set_state(id, CEP_CM_REQ_SENT);
	/* Its destination's window decides when it leaves (cm_pace.c): now,
	 * or once earlier REQs to that peer are answered; its timer starts
	 * then. */
	if (cm_pace_join(id))
		cm_send_req(id);
out:
	pthread_mutex_unlock(&id->lock);
	return ret;
}

int cm_accept_param_check(const struct cep_cm_accept_param *p)
{
	if (p->qpn > 0xffffff || p->qpn < 2 || p->starting_psn > 0xffffff ||
	    p->failover_accepted > 2)
		return -EINVAL;
	return p->private_data_len > CEP_REP_PRIVATE_DATA_SIZE ? -EMSGSIZE : 0;
}

int cm_local_accept(struct cep_cm_id *id, const struct cep_cm_accept_param *p)
{
	struct cep_msg m;
	struct cep_rep *rp = &m.u.rep;
	int ret;

	ret = cm_accept_param_check(p);
	if (ret)
		return ret;
	pthread_mutex_lock(&id->lock);
	if ((id->state != CEP_CM_REQ_RCVD && id->state != CEP_CM_MRA_REQ_SENT) ||
	    (id->flags & F_USER_GONE) || cep_is_destroyed(id->cep)) {
		ret = -EINVAL;
		goto out;
	}
	ret = cep_bind(id->cep, p->qpn);
	if (ret)
		goto out;
	(void)cep_qp_params_passive_accept(&id->qpp, p); /* our half */
	cep_msg_init(&m, CEP_MSG_REP, id->tid);
	rp->local_comm_id = cep_local_comm_id(id->cep);
	rp->remote_comm_id = id->remote_id;
	rp->local_qkey = p->qkey;
	rp->local_qpn = p->qpn;
	rp->starting_psn = p->starting_psn;
	rp->responder_resources = p->responder_resources;
	rp->initiator_depth = p->initiator_depth;
	/* never less than this CA's own ACK delay, which the kernel always
	 * sends (cm_format_rep) */
	rp->target_ack_delay = (uint8_t)((p->target_ack_delay & 31) > id->cm->port.ca_ack_delay ?
					 (p->target_ack_delay & 31) : id->cm->port.ca_ack_delay);
	rp->failover_accepted = p->failover_accepted;
	rp->end_to_end_flow_control = p->size > offsetof(struct cep_cm_accept_param, flow_control) ?
				      (p->flow_control ? 1 : 0) : 1;
	rp->rnr_retry_count = p->rnr_retry_count & 7;
	rp->srq = p->srq ? 1 : 0;
	if (id->flags & F_XRC) {
		/* An XRC target's REP, as the kernel's cm_format_rep for
		 * IB_QPT_XRC_TGT: the QP in the local EECN, local QPN 0,
		 * SRQ set; no initiator depth or flow control (a target
		 * initiates nothing) */
		rp->local_qpn = 0;
		rp->local_eecn = p->qpn;
		rp->srq = 1;
		rp->initiator_depth = 0;
		rp->end_to_end_flow_control = 0;
	}
	rp->local_ca_guid = id->cm->ca_guid;
	if (p->size >= offsetof(struct cep_cm_accept_param, ece_options) + sizeof(p->ece_options)) {
		/* ECE: as the kernel's cm_format_rep */
		rp->vendor_id_h = (uint8_t)(p->ece_vendor_id >> 16);
		rp->vendor_id_m = (uint8_t)(p->ece_vendor_id >> 8);
		rp->vendor_id_l = (uint8_t)p->ece_vendor_id;
		m.hdr.attr_mod = p->ece_options;
	}
	cm_copy_pdata(rp->private_data, p->private_data, p->private_data_len);
	id->local_qpn = p->qpn;
	id->flags = (uint16_t)((id->flags & ~F_MANUAL_DREP) | (p->manual_drep ? F_MANUAL_DREP : 0));
	ret = cm_send_msg(id, &m, 1);
	if (ret) {
		cep_unbind(id->cep);
		goto out;
	}
	cm_set_state(id, CEP_CM_REP_SENT);
	id->retries_left = id->max_retries;
	cm_set_timer(id, TK_RETRY, id->timeout_ms);
out:
	pthread_mutex_unlock(&id->lock);
	return ret;
}

int cm_local_notify_established(struct cep_cm_id *id)
{
	int ret = 0;

	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	switch (id->state) {
	case CEP_CM_REP_SENT:
	case CEP_CM_MRA_REP_RCVD:
		/* the kernel's cm_establish: no more REP retries */
		cm_free_retry(id);
		cm_clear_timer(id);
		cm_set_state(id, CEP_CM_ESTABLISHED);
		cm_post_bits(id, W_ESTABLISHED); /* the event, on the worker */
		break;
	case CEP_CM_ESTABLISHED:
		ret = -EISCONN;
		break;
	default:
		ret = -EINVAL;
		break;
	}
	pthread_mutex_unlock(&id->lock);
	return ret;
}

int cm_local_rtu(struct cep_cm_id *id, const void *pdata, size_t len)
{
	int ret = 0;

	if (len && !pdata)
		return -EINVAL;
	if (len > CEP_RTU_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	if (id->state == CEP_CM_REP_RCVD || id->state == CEP_CM_MRA_REP_SENT)
		do_rtu(id, pdata, len);
	else
		ret = -EINVAL;
	pthread_mutex_unlock(&id->lock);
	return ret;
}

/* Lock held: reject in the current state (see cep_cm_reject). */
int cm_do_reject(struct cep_cm_id *id, unsigned reason, const void *ari, size_t ari_len,
		     const void *pdata, size_t len)
{
	switch (id->state) {
	case CEP_CM_REQ_RCVD:
	case CEP_CM_MRA_REQ_SENT:
		cm_send_rej(id, reason, CEP_MSG_CODE_REQ, ari, ari_len, pdata, len);
		cm_reset_to_idle(id);
		return 0;
	case CEP_CM_REQ_SENT:
	case CEP_CM_MRA_REQ_RCVD:
		cm_send_rej(id, reason, CEP_MSG_CODE_OTHER, ari, ari_len, pdata, len);
		cm_reset_to_idle(id);
		return 0;
	case CEP_CM_REP_SENT:
	case CEP_CM_MRA_REP_RCVD:
		/* The peer has our QPN (the REP): keep the QP bound until
		 * timewait ends, as the kernel's ib_send_cm_rej does. */
		cm_send_rej(id, reason, CEP_MSG_CODE_OTHER, ari, ari_len, pdata, len);
		cm_enter_timewait(id); /* replaces the REP retry timer */
		return 0;
	case CEP_CM_REP_RCVD:
	case CEP_CM_MRA_REP_SENT:
		cm_send_rej(id, reason, CEP_MSG_CODE_REP, ari, ari_len, pdata, len);
		cm_enter_timewait(id);
		return 0;
	default:
		return -EINVAL;
	}
}

int cm_local_reject(struct cep_cm_id *id, unsigned reason, const void *ari, size_t ari_len,
		    const void *pdata, size_t len)
{
	int ret;

	if (reason == 0 ||
	    (reason > CEP_REJ_REASON_MAX && reason != CEP_REJ_VENDOR_OPTION_NOT_SUPPORTED) ||
	    (ari_len && !ari) || (len && !pdata))
		return -EINVAL;
	if (ari_len > CEP_REJ_ARI_SIZE || len > CEP_REJ_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	ret = cm_do_reject(id, reason, ari, ari_len, pdata, len);
	pthread_mutex_unlock(&id->lock);
	return ret;
}

int cm_local_mra(struct cep_cm_id *id, uint8_t service_timeout, const void *pdata, size_t len)
{
	int ret = 0;

	if (service_timeout > 31 || (len && !pdata))
		return -EINVAL;
	if (len > CEP_MRA_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	/* One MRA per request, as the kernel's ib_send_cm_mra (-EINVAL in the
	 * MRA_*_SENT states) - but the engine's automatic one (auto_mra) is
	 * not the application's: the application's replaces it (sent now,
	 * and to every repeat of the request), else whether this call
	 * worked would depend on how late it came. */
	int again = (id->flags & F_MRA_AUTO) != 0;

	if (id->state == CEP_CM_REQ_RCVD || (again && id->state == CEP_CM_MRA_REQ_SENT)) {
		cm_send_mra(id, CEP_MSG_CODE_REQ, service_timeout, pdata, len);
		cm_set_state(id, CEP_CM_MRA_REQ_SENT);
	} else if (id->state == CEP_CM_REP_RCVD || (again && id->state == CEP_CM_MRA_REP_SENT)) {
		cm_send_mra(id, CEP_MSG_CODE_REP, service_timeout, pdata, len);
		cm_set_state(id, CEP_CM_MRA_REP_SENT);
	} else if (id->state == CEP_CM_ESTABLISHED && (id->lap_state == CEP_CM_LAP_RCVD ||
		   (again && id->lap_state == CEP_CM_MRA_LAP_SENT))) {
		cm_send_mra(id, CEP_MSG_CODE_OTHER, service_timeout, pdata, len);
		id->lap_state = CEP_CM_MRA_LAP_SENT;
	} else {
		ret = -EINVAL;
	}
	if (ret == 0) { /* a repeated request gets the same MRA */
		cm_keep_pdata(id, pdata, len);
		id->flags &= (uint16_t)~F_MRA_AUTO;
	}
	if (ret == 0) {
		if (id->state == CEP_CM_MRA_REQ_SENT)
			cm_req_expire_after_mra(id); /* instead of an automatic MRA */
		else
			cm_clear_timer(id); /* no automatic MRA any more */
	}
	pthread_mutex_unlock(&id->lock);
	return ret;
}

/* Lock held, MRA_REQ_SENT: expire once the requester has given up. MRA
 * semantics (docs/protocol.md, "MRA"): our MRA extends the requester's
 * current wait to our service timeout + the path's ACK timeout
 * (cm_mra_handler); the tries it has left (retries_left: its REQ's Max CM
 * Retries less the repeats seen, dup_req) come at the normal period (2 x
 * packet life + our response timeout) unless an MRA answers them too,
 * which dup_req sends for each repeat and which renews this. (A 6.1
 * kernel waits the extended time for every try after our MRA; the MRA
 * each repeat gets covers that too.) Bounded by the half-open limit, but
 * never before the requester's next try after our MRA, if it has one. */
void cm_req_expire_after_mra(struct cep_cm_id *id)
{
	/* The floor is the requester's next try after our MRA: it waits our
	 * service timeout plus its path's ACK timeout (kernel cm_mra_handler),
	 * then repeats the REQ; one of its response timeouts more covers the
	 * two flights and a busy host. While it keeps trying, each repeat
	 * renews this (dup_req): a request the application holds does not
	 * expire under it while the requester waits, as the kernel's REQ_RCVD
	 * never does (cmtime's server dereferences NULL on an error event for
	 * a request it holds: issue 21, 10,000 connections). A requester with
	 * no try left gives up after the extended wait: the floor, larger,
	 * does not apply (cm_set_expiry takes the smaller). */
	uint32_t extended = cm_ms(id->mra_timeout) + cm_ms(id->path_timeout);

	cm_set_expiry(id, extended + id->retries_left * (2 * cm_ms(id->pkt_life) + id->peer_timeout_ms),
		      extended + id->peer_timeout_ms);
}

int cm_local_disconnect(struct cep_cm_id *id, const void *pdata, size_t len)
{
	int ret;

	if (len && !pdata)
		return -EINVAL;
	if (len > CEP_DREQ_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	switch (id->state) {
	case CEP_CM_ESTABLISHED:
		ret = cm_start_dreq(id, pdata, len);
		break;
	case CEP_CM_DREQ_RCVD:
		/* The peer's DREQ crossed ours: answer it, as librdmacm's
		 * rdma_disconnect does when it cannot send a DREQ. */
		cm_send_simple(id, CEP_MSG_DREP, pdata, len, 0);
		cm_keep_pdata(id, pdata, len);
		cm_enter_timewait(id);
		ret = 0;
		break;
	case CEP_CM_DREQ_SENT:
	case CEP_CM_TIMEWAIT:
		ret = 0; /* already disconnecting: nothing more to send */
		break;
	default:
		ret = -EINVAL;
		break;
	}
	pthread_mutex_unlock(&id->lock);
	return ret;
}

int cm_local_drep(struct cep_cm_id *id, const void *pdata, size_t len)
{
	int ret = 0;

	if (len && !pdata)
		return -EINVAL;
	if (len > CEP_DREP_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	if (id->state == CEP_CM_DREQ_RCVD) {
		cm_send_simple(id, CEP_MSG_DREP, pdata, len, 0);
		cm_keep_pdata(id, pdata, len); /* for a repeated DREQ */
		cm_enter_timewait(id);
	} else {
		ret = -EINVAL;
	}
	pthread_mutex_unlock(&id->lock);
	return ret;
}
