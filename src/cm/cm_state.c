/* SPDX-License-Identifier: MIT */
/*
 * CM engine: state changes shared by the message handlers, the timers and
 * the API (every function here runs with the id's lock held unless it
 * says otherwise): the state counters and a listener's backlog, timewait,
 * the return to IDLE, the start of a DREQ; and the lookups that turn a
 * MAD's identifiers into an id (a reference each) and check its sender.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_internal.h"
#include "core/table_internal.h"

/* A passive id counts against its listener while its request waits for
 * the application's answer: once accepted (REP_SENT on) it waits only for
 * its peer, and its REP retries bound it (issue 21). Of those, the backlog
 * bounds the ones the application has not taken yet (lis.untaken), as
 * ucma's backlog counts the CONNECT_REQUESTs not yet fetched: a server
 * that fetches at once and answers later (cmtime: a queue to its request
 * thread) is not refused while it works through the queue, and its
 * requesters wait on our MRA instead of retrying REQs we drop (10,000
 * connections, issue 21). */
int cm_unanswered(unsigned s)
{
	return s == CEP_CM_REQ_RCVD || s == CEP_CM_MRA_REQ_SENT || s == CEP_CM_SIDR_REQ_RCVD;
}

/* Lock held: a child stops counting against its listener's backlog. The
 * counts are atomics, never the listener's lock: never two id locks. */
void cm_half_open_end(struct cep_cm_id *id)
{
	struct cep_cm_id *l = id->listener;

	id->listener = NULL;
	atomic_fetch_sub_explicit(&l->lis.half_open, 1, memory_order_relaxed);
	if (!(id->flags & F_TAKEN))
		atomic_fetch_sub_explicit(&l->lis.untaken, 1, memory_order_relaxed);
	cep_put(l->cep);
}

/* A pace (lis.svc_fx, cm->rtu_fx) takes one more sample: a message that
 * came at @at (ms) and was answered now, with @ahead awaiting their
 * answer when it came (itself included). Relaxed: a number for an
 * estimate, ordering nothing; a sample that races another's store is
 * lost (the fields' comments). Never 0: 0 says "none yet". */
static void pace_sample(_Atomic uint32_t *fx, struct cep_cm *cm, uint64_t at, uint32_t ahead)
{
	uint64_t now = cep_clock_ms(cm->clock);
	uint64_t per = ((now > at ? now - at : 0) << 10) / (ahead ? ahead : 1);
	uint32_t old = atomic_load_explicit(fx, memory_order_relaxed);
	uint64_t avg = old ? old - old / 8 + per / 8 : per; /* weight 1/8 */

	atomic_store_explicit(fx, avg > UINT32_MAX ? UINT32_MAX : avg ? (uint32_t)avg : 1,
			      memory_order_relaxed);
}

/* Locked, before cm_half_open_end when the application accepts: the
 * request's wait goes into its listener's svc_fx (cm_conn.c's
 * cm_mra_now reads it). */
static void cm_mra_sample(struct cep_cm_id *id)
{
	/* its arrival: half_open_until counts from it */
	pace_sample(&id->listener->lis.svc_fx, id->cm, id->half_open_until - id->cm->half_open_ms,
		    id->req_ahead);
}

/* REPs of the context awaiting their RTU (REP_RCVD, MRA_REP_SENT): the
 * workers' state counts, relaxed (an estimate). */
static uint32_t reps_waiting(struct cep_cm *cm)
{
	int64_t n = 0;

	for (unsigned w = 0; w < cm->nworkers; w++)
		n += atomic_load_explicit(&cm->ws[w].states[CEP_CM_REP_RCVD], memory_order_relaxed) +
		     atomic_load_explicit(&cm->ws[w].states[CEP_CM_MRA_REP_SENT],
					  memory_order_relaxed);
	return n > 0 ? (uint32_t)n : 1;
}

int cm_rep_mra_due(struct cep_cm_id *id)
{
	struct cep_cm *cm = id->cm;
	uint64_t fx = atomic_load_explicit(&cm->rtu_fx, memory_order_relaxed);

	id->rep_at = cep_clock_ms(cm->clock);
	id->req_ahead = reps_waiting(cm);
	return fx && ((uint64_t)id->req_ahead * fx >> 10) >= id->peer_timeout_ms;
}

void cm_request_taken(struct cep_cm_id *id)
{
	if (id)
		id->cm->ops->request_taken(id);
}

void cm_local_request_taken(struct cep_cm_id *id)
{
	pthread_mutex_lock(&id->lock);
	/* id->listener is set under this lock before the request's event is
	 * emitted and cleared under it when the request is answered: taken
	 * after the answer (or twice), nothing moves. */
	if (id->listener && !(id->flags & F_TAKEN)) {
		id->flags |= F_TAKEN;
		atomic_fetch_sub_explicit(&id->listener->lis.untaken, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&id->lock);
}

/* A request its application cannot take (no memory for it): back to IDLE,
 * nothing sent, keys dropped, so the requester's CM retries it, as the
 * kernel's cm_destroy_id does in REQ_RCVD for -ENOMEM ("do not reject to
 * allow future retries"). Also after an automatic MRA (MRA_REQ_SENT: the
 * requester then retries when that wait ends; the kernel MRAs only a
 * request its application took). 0, or -EINVAL in any other state (and
 * on a cepd context, whose protocol has no silent drop). Any thread, also
 * the request's callback; takes the id's lock. */
int cm_request_drop(struct cep_cm_id *id)
{
	return id ? id->cm->ops->request_drop(id) : -EINVAL;
}

int cm_local_request_drop(struct cep_cm_id *id)
{
	int ret = -EINVAL;

	pthread_mutex_lock(&id->lock);
	if ((id->state == CEP_CM_REQ_RCVD || id->state == CEP_CM_MRA_REQ_SENT) &&
	    !(id->flags & F_USER_GONE)) {
		cm_reset_to_idle(id);
		ret = 0;
	}
	pthread_mutex_unlock(&id->lock);
	return ret;
}

void cm_set_state(struct cep_cm_id *id, unsigned s)
{
	struct cm_wstats *w = &id->cm->ws[id->worker];

	if (id->listener && !cm_unanswered(s)) {
		if (s == CEP_CM_REP_SENT)
			cm_mra_sample(id);
		cm_half_open_end(id);
	}
	/* a REQ answered, given up or abandoned leaves its window */
	if (id->dest && s != CEP_CM_REQ_SENT && s != CEP_CM_MRA_REQ_RCVD)
		cm_pace_leave(id);
	/* a REP answered with its RTU: its wait goes into rtu_fx
	 * (cm_rep_mra_due reads it) */
	if (s == CEP_CM_ESTABLISHED && id->cm->auto_mra &&
	    (id->state == CEP_CM_REP_RCVD || id->state == CEP_CM_MRA_REP_SENT))
		pace_sample(&id->cm->rtu_fx, id->cm, id->rep_at, id->req_ahead);

	atomic_fetch_sub_explicit(&w->states[id->state], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&w->states[s], 1, memory_order_relaxed);
	id->state = (uint8_t)s;
}

void cm_free_retry(struct cep_cm_id *id)
{
	free(id->retry);
	id->retry = NULL;
}

/* ---- transitions shared by handlers, timers and API (lock held) -------- */

void cm_drop_remote_keys(struct cep_cm_id *id)
{
	cep_remove_remote_id(id->cep);
	cep_remove_remote_qpn(id->cep);
}

/* The end of an id's protocol life while the user is gone (or its QP is):
 * remove it from the table. The user's handle (if any) stays valid. */
void cm_maybe_table_destroy(struct cep_cm_id *id)
{
	if ((id->flags & (F_USER_GONE | F_QP_GONE)) && !cep_is_destroyed(id->cep)) {
		cep_destroy(id->cep);
		/* the end an F_LINGER id's DESTROYED waits for */
		cm_maybe_post_destroyed(id);
	}
}

void cm_reset_to_idle(struct cep_cm_id *id)
{
	cm_set_state(id, CEP_CM_IDLE);
	id->lap_state = CEP_CM_LAP_IDLE;
	cm_clear_timer(id);
	cm_free_retry(id);
	cm_drop_remote_keys(id);
	cep_unbind(id->cep);
	cm_maybe_table_destroy(id);
}

/* Timewait keeps only the local comm ID (a stale or repeated message for
 * it is still recognised) and the QP binding; the remote keys go now, as
 * the kernel's cm_enter_timewait -> cm_remove_remote does, so the peer
 * may connect again at once, on the same comm ID or a new one from the
 * same QP, and is not refused as stale (DESIGN.md, "Lifetimes"). */
void cm_enter_timewait(struct cep_cm_id *id)
{
	cm_set_state(id, CEP_CM_TIMEWAIT);
	id->lap_state = CEP_CM_LAP_IDLE;
	cm_free_retry(id);
	cm_drop_remote_keys(id);
	/* The path's ACK timeout (2 x packet life + the peer's ACK delay,
	 * clamped): every packet of the connection has died by then. The
	 * kernel's cm_enter_timewait waits the same (av.timeout). */
	cm_set_timer(id, TK_TIMEWAIT, cm_ms(id->path_timeout));
}

/* Lock held: ESTABLISHED -> DREQ_SENT. */
int cm_start_dreq(struct cep_cm_id *id, const void *pdata, size_t len)
{
	if (id->state != CEP_CM_ESTABLISHED)
		return -EINVAL;
	id->lap_state = CEP_CM_LAP_IDLE;
	cm_next_tid(id);
	cm_send_simple(id, CEP_MSG_DREQ, pdata, len, 1);
	cm_set_state(id, CEP_CM_DREQ_SENT);
	id->retries_left = id->max_retries;
	cm_set_timer(id, TK_RETRY, id->timeout_ms);
	return 0;
}

/* ---- lookups ------------------------------------------------------------ */

struct cep_cm_id *cm_find_id(struct cep_cm *cm, uint32_t comm_id)
{
	struct cep *cep;

	if (comm_id == 0 || cep_lookup_comm_id(cm->table, comm_id, &cep))
		return NULL;
	return cep_context(cep);
}

void cm_id_put(struct cep_cm_id *id)
{
	cep_put(id->cep);
}

void cm_drop(struct cep_cm *cm, unsigned w, enum cep_cm_drop why)
{
	STAT_ADD(cm, w, drops[why]);
}

/* By GID when both carry one (and ours is known), else by LID; RoCE
 * (no LID) always by GID. */
static int addr_match(const struct cep_mad_addr *a, const struct cep_mad_addr *from)
{
	static const uint8_t zero[16];

	if (a->grh_present && from->grh_present && memcmp(a->gid, zero, 16))
		return !memcmp(a->gid, from->gid, 16);
	if (a->lid)
		return a->lid == from->lid;
	return from->grh_present && !memcmp(a->gid, from->gid, 16);
}

struct cm_paths *cm_paths(struct cep_cm_id *id)
{
	if (!id->paths)
		id->paths = calloc(1, sizeof(*id->paths));
	return id->paths;
}

struct cm_addr cm_path_addr(const struct cep_path *p, int remote)
{
	struct cm_addr a;

	memcpy(a.gid, remote ? p->remote_gid : p->local_gid, 16);
	a.lid = remote ? p->remote_lid : p->local_lid;
	a.grh = a.lid == 0 || !p->subnet_local;
	a.valid = 1;
	a.sl = p->sl;
	a.hop_limit = p->hop_limit;
	a.traffic_class = p->traffic_class;
	a.flow_label = p->flow_label;
	return a;
}

/* Whether @from is the end @a of one of the id's paths. */
static int from_end(const struct cm_addr *a, const struct cep_mad_addr *from)
{
	struct cep_mad_addr e = { .lid = a->lid, .grh_present = a->grh };

	memcpy(e.gid, a->gid, 16);
	return a->valid && addr_match(&e, from);
}

/* Stricter than the kernel (which never looks at the source): a stranger
 * who learnt a connection's IDs cannot end, reset, stall or complete it.
 * docs/protocol.md. */
int cm_from_peer(struct cep_cm_id *id, unsigned w, const struct cep_mad_addr *from)
{
	if (addr_match(&id->peer, from))
		return 1;
	if (id->paths && (from_end(&id->paths->alt, from) || from_end(&id->paths->old, from)))
		return 1;
	cm_drop(id->cm, w, CEP_CM_DROP_ADDRESS);
	return 0;
}

/* Answers without an id (unknown comm IDs, stale REQs). */
void cm_reply_rej(struct cep_cm *cm, unsigned w, const struct cep_mad_addr *from,
		      uint64_t tid, uint32_t local, uint32_t remote, unsigned reason,
		      unsigned msg_code)
{
	struct cep_msg m;
	struct cep_mad_addr to = *from;

	cep_msg_init(&m, CEP_MSG_REJ, tid);
	m.u.rej.local_comm_id = local;
	m.u.rej.remote_comm_id = remote;
	m.u.rej.reason = (uint16_t)reason;
	m.u.rej.message_rejected = (uint8_t)msg_code;
	to.qpn = 1;
	to.qkey = CEP_QP1_QKEY;
	cm_send_raw(cm, w, &m, &to, NULL);
}

struct cep_mad_addr cm_reply_addr(const struct cep_mad_addr *from)
{
	struct cep_mad_addr to = *from;

	to.qpn = 1;
	to.qkey = CEP_QP1_QKEY;
	return to;
}
