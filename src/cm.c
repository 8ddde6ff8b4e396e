/* SPDX-License-Identifier: MIT */
/*
 * CM engine core: contexts, ids, timers, sending, events, the receive path
 * and destruction (message handlers: cm_conn.c, cm_lap.c, cm_sidr.c; event
 * channels: cm_event.c). Each id is owned by worker (local comm ID % N):
 * its MADs, timers and events run there; its protocol fields are guarded
 * by its mutex, which API calls from other threads take too. Events are
 * delivered only on the owning worker, with no lock held. See docs/cm.md.
 *
 * Handler template: look the id up (reference), lock, check the state and
 * the identifiers, transition, send under the lock (so one id's MADs leave
 * in state order), unlock, deliver the event, drop the reference.
 * References: the user's (from create, dropped after DESTROYED), the
 * table's (dropped by cep_destroy), one per armed wheel timer, one per
 * queued work item, one per lookup, one per queued channel event.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_internal.h"
#include "table_internal.h"

/* ---- names ---------------------------------------------------------------- */

static const char *const state_names[] = {
#define X_(n) #n,
	CEP_CM_STATE_MAP(X_)
#undef X_
};
static const char *const lap_names[] = {
#define X_(n) #n,
	CEP_CM_LAP_STATE_MAP(X_)
#undef X_
};
static const char *const event_names[] = {
#define X_(n, s) #n,
	CEP_CM_EVENT_MAP(X_)
#undef X_
};
static const char *const event_strs[] = {
#define X_(n, s) s,
	CEP_CM_EVENT_MAP(X_)
#undef X_
};
static const char *const drop_names[] = {
#define X_(n, s) #n,
	CEP_CM_DROP_MAP(X_)
#undef X_
};

const char *cep_cm_state_name(unsigned s)
{
	return s < CEP_CM_STATE_COUNT ? state_names[s] : "?";
}
const char *cep_cm_lap_state_name(unsigned s)
{
	return s < CEP_CM_LAP_STATE_COUNT ? lap_names[s] : "?";
}
const char *cep_cm_event_name(unsigned t)
{
	return t < CEP_CM_EVENT_COUNT ? event_names[t] : "?";
}
const char *cep_cm_event_str(unsigned t)
{
	return t < CEP_CM_EVENT_COUNT ? event_strs[t] : "unknown event";
}
const char *cep_cm_drop_name(unsigned w)
{
	return w < CEP_CM_DROP_COUNT ? drop_names[w] : "?";
}

/* ---- small helpers ----------------------------------------------------------- */

uint64_t cep_cm_time_us(unsigned t)
{
	if (t > 31)
		t = 31;
	/* 4.096 us * 2^t = 4096 ns << t */
	return ((uint64_t)4096 << t) / 1000u;
}

uint32_t cm_ms(unsigned t)
{
	uint64_t us = cep_cm_time_us(t);
	uint64_t ms = (us + 999) / 1000;

	return ms ? (uint32_t)ms : 1;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t cm_be64(const uint8_t *p)
{
	return (uint64_t)be32(p) << 32 | be32(p + 4);
}

void cm_put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static unsigned route_hash(uint32_t id, uint64_t guid, unsigned n)
{
	uint64_t h = ((uint64_t)id << 32 | id) ^ guid;

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return (unsigned)(h % n);
}

/* Pseudo GUID naming a SIDR requester (SIDR_REQ carries no CA GUID). */
uint64_t cm_sidr_source(const struct cep_mad_addr *from)
{
	uint64_t h = 0xcbf29ce484222325ull ^ from->lid;

	for (int i = 0; i < 16; i++)
		h = (h ^ from->gid[i]) * 0x100000001b3ull;
	return h | 1;
}

void cm_set_state(struct cep_cm_id *id, unsigned s)
{
	struct cm_wstats *w = &id->cm->ws[id->worker];

	atomic_fetch_sub_explicit(&w->states[id->state], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&w->states[s], 1, memory_order_relaxed);
	id->state = (uint8_t)s;
}

void cm_free_retry(struct cep_cm_id *id)
{
	free(id->retry);
	id->retry = NULL;
}

/* ---- work items and timers -------------------------------------------- */

static void id_work_fn(struct cep_work *w);
static void id_timer_fn(struct cep_timer *t);

/* Queue W_* bits for the owning worker. Any thread; lock may be held. */
void cm_post_bits(struct cep_cm_id *id, uint32_t bits)
{
	uint32_t old = atomic_fetch_or_explicit(&id->work_bits, bits, memory_order_acq_rel);

	if (old == 0) {
		cep_get(id->cep); /* the queued work's reference */
		cep_dispatch_post_work(id->cm->d, id->worker, &id->work);
	}
}

/* Owner worker, lock held, and the caller holds a reference of its own
 * (lookup, work, timer or the user's), so the put below is never the last:
 * make the wheel fire no later than deadline, or cancel it. */
static void timer_sync_locked(struct cep_cm_id *id)
{
	struct cep_wheel *wh = cep_dispatch_wheel(id->cm->d, id->worker);

	if (!id->deadline) {
		if (cep_timer_cancel(wh, &id->timer))
			cep_put(id->cep); /* the armed timer's reference */
		return;
	}
	if (atomic_load_explicit(&id->cm->stopping, memory_order_relaxed))
		return;
	if (cep_timer_armed(&id->timer)) {
		if (id->timer.expires > id->deadline)
			cep_timer_arm(wh, &id->timer, id->deadline, id_timer_fn);
		return;
	}
	cep_get(id->cep); /* the armed timer's reference */
	cep_timer_arm(wh, &id->timer, id->deadline, id_timer_fn);
}

/* Lock held: want a timer of @kind in @ms. */
void cm_set_timer(struct cep_cm_id *id, unsigned kind, uint32_t ms)
{
	id->deadline = cep_clock_ms(id->cm->clock) + ms;
	id->timer_kind = (uint8_t)kind;
	if (cep_dispatch_self(id->cm->d) == (int)id->worker)
		timer_sync_locked(id);
	else
		cm_post_bits(id, W_TIMER);
}

void cm_clear_timer(struct cep_cm_id *id)
{
	id->deadline = 0;
	if (cep_dispatch_self(id->cm->d) == (int)id->worker)
		timer_sync_locked(id);
	else
		cm_post_bits(id, W_TIMER);
}

/* ---- sending -------------------------------------------------------------- */

int cm_send_raw(struct cep_cm *cm, unsigned w, struct cep_msg *m,
		    const struct cep_mad_addr *to, uint8_t *keep)
{
	uint8_t buf[CEP_MAD_SIZE];
	int ret = cep_msg_encode(m, buf);

	if (ret)
		return ret;
	if (keep)
		memcpy(keep, buf, CEP_MAD_SIZE);
	STAT_ADD(cm, w, sent[m->type]);
	if (m->type == CEP_MSG_REJ && m->u.rej.reason <= CEP_REJ_REASON_MAX)
		STAT_ADD(cm, w, rej_sent[m->u.rej.reason]);
	ret = cm->tp->ops->send(cm->tp, buf, CEP_MAD_SIZE, to);
	if (ret)
		STAT_ADD(cm, w, send_errors);
	return 0; /* a failed send is a lost MAD: retries cover it */
}

/* Lock held. @retain: keep the encoded MAD for retries. */
int cm_send_msg(struct cep_cm_id *id, struct cep_msg *m, int retain)
{
	if (retain) {
		if (!id->retry) {
			id->retry = malloc(CEP_MAD_SIZE);
			if (!id->retry)
				return -ENOMEM;
		}
		return cm_send_raw(id->cm, id->worker, m, &id->peer, id->retry);
	}
	return cm_send_raw(id->cm, id->worker, m, &id->peer, NULL);
}

static void resend_retry(struct cep_cm_id *id)
{
	struct cep_cm *cm = id->cm;
	enum cep_msg_type t;

	if (!id->retry)
		return;
	if (cep_mad_peek(id->retry, CEP_MAD_SIZE, &t, NULL) == 0)
		STAT_ADD(cm, id->worker, sent[t]);
	STAT_ADD(cm, id->worker, retries);
	if (cm->tp->ops->send(cm->tp, id->retry, CEP_MAD_SIZE, &id->peer))
		STAT_ADD(cm, id->worker, send_errors);
}

void cm_copy_pdata(uint8_t *dst, const void *src, size_t len)
{
	if (len)
		memcpy(dst, src, len);
}

/* Lock held: REJ from this id. */
void cm_send_rej(struct cep_cm_id *id, unsigned reason, unsigned msg_code,
		     const void *ari, size_t ari_len, const void *pdata, size_t len)
{
	struct cep_msg m;

	cep_msg_init(&m, CEP_MSG_REJ, id->tid);
	m.u.rej.local_comm_id = cep_local_comm_id(id->cep);
	m.u.rej.remote_comm_id = id->remote_id;
	m.u.rej.message_rejected = (uint8_t)msg_code;
	m.u.rej.reason = (uint16_t)reason;
	if (reason == CEP_REJ_TIMEOUT && !ari) {
		cm_put_be64(m.u.rej.ari, id->cm->ca_guid);
		m.u.rej.reject_info_length = 8;
	} else if (ari_len) {
		memcpy(m.u.rej.ari, ari, ari_len);
		m.u.rej.reject_info_length = (uint8_t)ari_len;
	}
	cm_copy_pdata(m.u.rej.private_data, pdata, len);
	cm_send_msg(id, &m, 0);
}

void cm_send_mra(struct cep_cm_id *id, unsigned msg_code, uint8_t service_timeout,
		     const void *pdata, size_t len)
{
	struct cep_msg m;

	cep_msg_init(&m, CEP_MSG_MRA, id->tid);
	m.u.mra.local_comm_id = cep_local_comm_id(id->cep);
	m.u.mra.remote_comm_id = id->remote_id;
	m.u.mra.message_mraed = (uint8_t)msg_code;
	m.u.mra.service_timeout = service_timeout & 31;
	cm_copy_pdata(m.u.mra.private_data, pdata, len);
	id->mra_timeout = service_timeout & 31;
	cm_send_msg(id, &m, 0);
}

void cm_send_simple(struct cep_cm_id *id, enum cep_msg_type t, const void *pdata,
			size_t len, int retain)
{
	struct cep_msg m;

	cep_msg_init(&m, t, id->tid);
	switch (t) {
	case CEP_MSG_RTU:
		m.u.rtu.local_comm_id = cep_local_comm_id(id->cep);
		m.u.rtu.remote_comm_id = id->remote_id;
		cm_copy_pdata(m.u.rtu.private_data, pdata, len);
		break;
	case CEP_MSG_DREQ:
		m.u.dreq.local_comm_id = cep_local_comm_id(id->cep);
		m.u.dreq.remote_comm_id = id->remote_id;
		m.u.dreq.remote_qpn_eecn = id->remote_qpn;
		cm_copy_pdata(m.u.dreq.private_data, pdata, len);
		break;
	case CEP_MSG_DREP:
		m.u.drep.local_comm_id = cep_local_comm_id(id->cep);
		m.u.drep.remote_comm_id = id->remote_id;
		cm_copy_pdata(m.u.drep.private_data, pdata, len);
		break;
	default:
		return;
	}
	cm_send_msg(id, &m, retain);
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
	if ((id->flags & (F_USER_GONE | F_QP_GONE)) && !cep_is_destroyed(id->cep))
		cep_destroy(id->cep);
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

void cm_enter_timewait(struct cep_cm_id *id)
{
	cm_set_state(id, CEP_CM_TIMEWAIT);
	id->lap_state = CEP_CM_LAP_IDLE;
	cm_free_retry(id);
	cm_set_timer(id, TK_TIMEWAIT, id->timewait_ms);
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

/* ---- events -------------------------------------------------------------- */

void cm_ev_init(struct cep_cm_event *ev, struct cep_cm_id *id, enum cep_cm_event_type t)
{
	ev->type = t;
	ev->id = id;
	ev->listen_id = NULL;
	ev->context = id->context;
	ev->status = 0;
	ev->msg.type = CEP_MSG_INVALID;
	ev->private_data = NULL;
	ev->private_data_len = 0;
	memset(&ev->from, 0, sizeof(ev->from));
}

void cm_ev_msg(struct cep_cm_event *ev, const struct cep_msg *m,
		   const struct cep_mad_addr *from)
{
	const uint8_t *base = (const uint8_t *)m;
	const uint8_t *pd = NULL;

	ev->msg = *m;
	ev->from = *from;
	switch (m->type) {
	case CEP_MSG_REQ: pd = m->u.req.private_data; break;
	case CEP_MSG_MRA: pd = m->u.mra.private_data; break;
	case CEP_MSG_REJ: pd = m->u.rej.private_data; break;
	case CEP_MSG_REP: pd = m->u.rep.private_data; break;
	case CEP_MSG_RTU: pd = m->u.rtu.private_data; break;
	case CEP_MSG_DREQ: pd = m->u.dreq.private_data; break;
	case CEP_MSG_DREP: pd = m->u.drep.private_data; break;
	case CEP_MSG_LAP: pd = m->u.lap.private_data; break;
	case CEP_MSG_APR: pd = m->u.apr.private_data; break;
	case CEP_MSG_SIDR_REQ: pd = m->u.sidr_req.private_data; break;
	case CEP_MSG_SIDR_REP: pd = m->u.sidr_rep.private_data; break;
	default: return;
	}
	ev->private_data = (const uint8_t *)&ev->msg + (pd - base);
	ev->private_data_len = cep_msg_private_data_size(m->type);
}

/* Owning worker, no lock held. Returns the handler's verdict. */
int cm_deliver(struct cep_cm_id *id, struct cep_cm_event *ev)
{
	STAT_ADD(id->cm, id->worker, events[ev->type]);
	if (id->channel) {
		if (cm_channel_push(id->channel, ev))
			STAT_ADD(id->cm, id->worker, drops[CEP_CM_DROP_NO_MEMORY]);
		return 0;
	}
	return id->handler ? id->handler(id, ev) : 0;
}

/* Deliver; a non-zero verdict destroys the id (kernel ib_cm rule). */
void cm_deliver_and_maybe_destroy(struct cep_cm_id *id, struct cep_cm_event *ev)
{
	if (cm_deliver(id, ev))
		cep_cm_destroy_id(id);
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

/* ---- id allocation ---------------------------------------------------------- */

int cm_alloc_id(struct cep_cm *cm, unsigned worker, cep_cm_handler handler,
		    struct cep_cm_channel *ch, void *context, struct cep_cm_id **out)
{
	struct cep_create_attr ca = { .size = sizeof(ca) };
	struct cep_cm_id *id = calloc(1, sizeof(*id));
	struct cep *cep;
	int ret;

	if (!id)
		return -ENOMEM;
	id->cm = cm;
	id->worker = worker;
	id->handler = handler;
	id->channel = ch;
	id->context = context;
	id->work.fn = id_work_fn;
	id->state = CEP_CM_IDLE;
	pthread_mutex_init(&id->lock, NULL);
	ca.comm_id_mod = cm->nworkers;
	ca.comm_id_rem = worker;
	ca.context = id;
	/* cep_create publishes the CEP before it returns it: a MAD with a
	 * guessed comm ID may find the id at once. Hold the id's lock across
	 * it, so such a reader waits until id->cep and the rest are set. */
	pthread_mutex_lock(&id->lock);
	ret = cep_create(cm->table, &ca, &cep);
	if (ret) {
		pthread_mutex_unlock(&id->lock);
		pthread_mutex_destroy(&id->lock);
		free(id);
		return ret;
	}
	id->cep = cep;
	atomic_fetch_add_explicit(&cm->ids, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&cm->ws[worker].states[CEP_CM_IDLE], 1, memory_order_relaxed);
	if (ch) {
		atomic_fetch_add(&ch->users, 1);
		id->flags |= F_CHANNEL_USER;
	}
	pthread_mutex_unlock(&id->lock);
	*out = id;
	return 0;
}

/* An id the user never saw: remove and drop the creation reference. */
void cm_discard_id(struct cep_cm_id *id)
{
	pthread_mutex_lock(&id->lock);
	id->flags |= F_USER_GONE;
	if (id->flags & F_CHANNEL_USER) {
		id->flags &= (uint8_t)~F_CHANNEL_USER;
		atomic_fetch_sub(&id->channel->users, 1);
	}
	cep_destroy(id->cep);
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

/* Table release callback: RCU callback after the last put. */
static void id_release(struct cep *cep, void *ctx)
{
	struct cep_cm *cm = ctx;
	struct cep_cm_id *id = cep_context(cep);

	(void)cm;
	if (!id)
		return;
	atomic_fetch_sub_explicit(&id->cm->ws[id->worker].states[id->state], 1,
				  memory_order_relaxed);
	atomic_fetch_sub_explicit(&id->cm->ids, 1, memory_order_relaxed);
	free(id->retry);
	pthread_mutex_destroy(&id->lock);
	free(id);
}

/* ---- timers ---------------------------------------------------------------- */

static void on_timeout(struct cep_cm_id *id, struct cep_cm_event *ev, int *have_ev)
{
	struct cep_cm *cm = id->cm;
	int user = !(id->flags & F_USER_GONE);

	if (id->timer_kind == TK_TIMEWAIT) {
		if (id->state != CEP_CM_TIMEWAIT)
			return;
		cm_set_state(id, CEP_CM_IDLE);
		cm_drop_remote_keys(id);
		cep_unbind(id->cep);
		cm_maybe_table_destroy(id);
		if (user) {
			cm_ev_init(ev, id, CEP_CM_EV_TIMEWAIT_EXIT);
			*have_ev = 1;
		}
		return;
	}
	if (id->timer_kind == TK_AUTO_MRA) {
		if (id->state == CEP_CM_REQ_RCVD) {
			cm_send_mra(id, CEP_MSG_CODE_REQ, cm->mra_timeout, NULL, 0);
			cm_set_state(id, CEP_CM_MRA_REQ_SENT);
		} else if (id->state == CEP_CM_REP_RCVD) {
			cm_send_mra(id, CEP_MSG_CODE_REP, cm->mra_timeout, NULL, 0);
			cm_set_state(id, CEP_CM_MRA_REP_SENT);
		} else if (id->state == CEP_CM_ESTABLISHED && id->lap_state == CEP_CM_LAP_RCVD) {
			cm_send_mra(id, CEP_MSG_CODE_OTHER, cm->mra_timeout, NULL, 0);
			id->lap_state = CEP_CM_MRA_LAP_SENT;
		}
		return;
	}
	/* TK_RETRY */
	int waiting = id->state == CEP_CM_REQ_SENT || id->state == CEP_CM_MRA_REQ_RCVD ||
		      id->state == CEP_CM_REP_SENT || id->state == CEP_CM_MRA_REP_RCVD ||
		      id->state == CEP_CM_DREQ_SENT || id->state == CEP_CM_SIDR_REQ_SENT ||
		      (id->state == CEP_CM_ESTABLISHED &&
		       (id->lap_state == CEP_CM_LAP_SENT || id->lap_state == CEP_CM_MRA_LAP_RCVD));
	if (!waiting)
		return;
	if (id->retries_left > 0) {
		id->retries_left--;
		resend_retry(id);
		cm_set_timer(id, TK_RETRY, id->timeout_ms);
		return;
	}
	STAT_ADD(cm, id->worker, timeouts);
	cm_ev_init(ev, id, CEP_CM_EV_REQ_ERROR);
	ev->status = -ETIMEDOUT;
	switch (id->state) {
	case CEP_CM_REQ_SENT:
	case CEP_CM_MRA_REQ_RCVD:
		cm_send_rej(id, CEP_REJ_TIMEOUT, CEP_MSG_CODE_REP, NULL, 0, NULL, 0);
		cm_reset_to_idle(id);
		break;
	case CEP_CM_REP_SENT:
	case CEP_CM_MRA_REP_RCVD:
		ev->type = CEP_CM_EV_REP_ERROR;
		cm_send_rej(id, CEP_REJ_TIMEOUT, CEP_MSG_CODE_OTHER, NULL, 0, NULL, 0);
		cm_reset_to_idle(id);
		break;
	case CEP_CM_DREQ_SENT:
		ev->type = CEP_CM_EV_DREQ_ERROR;
		cm_enter_timewait(id);
		break;
	case CEP_CM_SIDR_REQ_SENT:
		ev->type = CEP_CM_EV_SIDR_REQ_ERROR;
		cm_set_state(id, CEP_CM_IDLE);
		cm_free_retry(id);
		cm_maybe_table_destroy(id);
		break;
	default: /* LAP */
		ev->type = CEP_CM_EV_LAP_ERROR;
		id->lap_state = CEP_CM_LAP_IDLE;
		cm_free_retry(id);
		break;
	}
	*have_ev = user;
}

static void id_timer_fn(struct cep_timer *t)
{
	struct cep_cm_id *id = (struct cep_cm_id *)((char *)t - offsetof(struct cep_cm_id, timer));
	struct cep_cm_event ev;
	int have_ev = 0;

	pthread_mutex_lock(&id->lock);
	if (id->deadline && !atomic_load_explicit(&id->cm->stopping, memory_order_relaxed)) {
		uint64_t now = cep_clock_ms(id->cm->clock);

		if (id->deadline > now) {
			/* pushed later: keep the timer (and its reference) */
			cep_timer_arm(cep_dispatch_wheel(id->cm->d, id->worker), &id->timer,
				      id->deadline, id_timer_fn);
			pthread_mutex_unlock(&id->lock);
			return;
		}
		id->deadline = 0;
		on_timeout(id, &ev, &have_ev);
	}
	pthread_mutex_unlock(&id->lock);
	if (have_ev)
		cm_deliver_and_maybe_destroy(id, &ev);
	cm_id_put(id); /* the timer's reference */
}

static void waiter_put(struct cm_waiter *wt)
{
	if (atomic_fetch_sub_explicit(&wt->refs, 1, memory_order_acq_rel) == 1) {
		pthread_mutex_destroy(&wt->mtx);
		pthread_cond_destroy(&wt->cv);
		free(wt);
	}
}

static void id_work_fn(struct cep_work *w)
{
	struct cep_cm_id *id = (struct cep_cm_id *)((char *)w - offsetof(struct cep_cm_id, work));
	uint32_t bits = atomic_exchange_explicit(&id->work_bits, 0, memory_order_acq_rel);
	int stopping = atomic_load_explicit(&id->cm->stopping, memory_order_relaxed);

	if (bits & W_TIMER) {
		pthread_mutex_lock(&id->lock);
		if (!stopping && cep_dispatch_self(id->cm->d) == (int)id->worker)
			timer_sync_locked(id);
		pthread_mutex_unlock(&id->lock);
	}
	if (bits & W_QP_GONE) {
		struct cep_cm_event ev;
		int user;

		pthread_mutex_lock(&id->lock);
		user = !(id->flags & F_USER_GONE);
		cm_ev_init(&ev, id, CEP_CM_EV_QP_DESTROYED);
		pthread_mutex_unlock(&id->lock);
		if (user)
			cm_deliver_and_maybe_destroy(id, &ev);
	}
	if (bits & W_DESTROYED) {
		struct cep_cm_event ev;
		struct cm_waiter *wt;

		pthread_mutex_lock(&id->lock);
		cm_ev_init(&ev, id, CEP_CM_EV_DESTROYED);
		wt = id->waiter;
		id->waiter = NULL;
		pthread_mutex_unlock(&id->lock);
		cm_deliver(id, &ev);
		if (wt) {
			pthread_mutex_lock(&wt->mtx);
			wt->done = 1;
			pthread_cond_broadcast(&wt->cv);
			pthread_mutex_unlock(&wt->mtx);
			waiter_put(wt);
		}
		cm_id_put(id); /* the user's reference */
	}
	cm_id_put(id); /* the work's reference */
}

static void drain_timer(struct cep_timer *t, void *ctx)
{
	struct cep_cm_id *id = (struct cep_cm_id *)((char *)t - offsetof(struct cep_cm_id, timer));

	(void)ctx;
	cm_id_put(id);
}

/* ---- receive path ------------------------------------------------------- */

/* Transport thread: route by the comm ID addressed to us (REQ: by the
 * remote (comm ID, CA GUID)); never blocks, never takes an id lock. */
static void cm_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	struct cep_cm *cm = ctx;
	enum cep_msg_type t;
	unsigned w = 0;

	if (atomic_load_explicit(&cm->stopping, memory_order_relaxed)) {
		cm_drop(cm, 0, CEP_CM_DROP_STOPPED);
		return;
	}
	if (cep_mad_peek(mad, len, &t, NULL)) {
		cm_drop(cm, 0, CEP_CM_DROP_DECODE);
		return;
	}
	const uint8_t *p = mad + CEP_MAD_HDR_SIZE;

	switch (t) {
	case CEP_MSG_REQ:
		w = route_hash(be32(p), cm_be64(p + 16), cm->nworkers);
		break;
	case CEP_MSG_SIDR_REQ:
		w = route_hash(be32(p), cm_sidr_source(from), cm->nworkers);
		break;
	case CEP_MSG_SIDR_REP:
		w = be32(p) % cm->nworkers;
		break;
	case CEP_MSG_REJ:
		if (be32(p + 4) == 0 && (((unsigned)p[10] << 8) | p[11]) == CEP_REJ_TIMEOUT)
			w = route_hash(be32(p), cm_be64(p + 12), cm->nworkers);
		else
			w = be32(p + 4) % cm->nworkers;
		break;
	default:
		w = be32(p + 4) % cm->nworkers;
		break;
	}
	if (cep_dispatch_post_mad(cm->d, w, mad, len, from))
		cm_drop(cm, w, CEP_CM_DROP_QUEUE_FULL);
}

/* Worker thread: one MAD of this worker's ring. */
static void cm_mad(void *ctx, unsigned w, const uint8_t *mad, size_t len,
		   const struct cep_mad_addr *from)
{
	struct cep_cm *cm = ctx;
	struct cep_msg m;

	if (atomic_load_explicit(&cm->stopping, memory_order_relaxed)) {
		cm_drop(cm, w, CEP_CM_DROP_STOPPED);
		return;
	}
	if (cep_msg_decode(mad, len, &m, NULL)) {
		cm_drop(cm, w, CEP_CM_DROP_DECODE);
		return;
	}
	/* Comm ID 0 names nobody: a REQ or REP offering it cannot be answered
	 * or matched later, so it is refused like a malformed MAD. */
	if ((m.type == CEP_MSG_REQ && m.u.req.local_comm_id == 0) ||
	    (m.type == CEP_MSG_REP && m.u.rep.local_comm_id == 0)) {
		cm_drop(cm, w, CEP_CM_DROP_DECODE);
		return;
	}
	STAT_ADD(cm, w, received[m.type]);
	switch (m.type) {
	case CEP_MSG_REQ: cm_handle_req(cm, w, &m, from); break;
	case CEP_MSG_REP: cm_handle_rep(cm, w, &m, from); break;
	case CEP_MSG_RTU: cm_handle_rtu(cm, w, &m, from); break;
	case CEP_MSG_MRA: cm_handle_mra(cm, w, &m, from); break;
	case CEP_MSG_REJ: cm_handle_rej(cm, w, &m, from); break;
	case CEP_MSG_DREQ: cm_handle_dreq(cm, w, &m, from); break;
	case CEP_MSG_DREP: cm_handle_drep(cm, w, &m, from); break;
	case CEP_MSG_LAP: cm_handle_lap(cm, w, &m, from); break;
	case CEP_MSG_APR: cm_handle_apr(cm, w, &m, from); break;
	case CEP_MSG_SIDR_REQ: cm_handle_sidr_req(cm, w, &m, from); break;
	case CEP_MSG_SIDR_REP: cm_handle_sidr_rep(cm, w, &m, from); break;
	default: cm_drop(cm, w, CEP_CM_DROP_UNSUPPORTED); break;
	}
}

/* ---- QP teardown (table callback, caller's thread) ---------------------- */

/* ---- context ------------------------------------------------------------- */

/* Does the caller's attr (of its ->size) reach @field? */
#define CM_ATTR_HAS(a, field) \
	((a)->size >= offsetof(struct cep_cm_attr, field) + sizeof((a)->field))

int cep_cm_create(const struct cep_cm_attr *attr, struct cep_cm **out)
{
	struct cep_table_attr ta = { .size = sizeof(ta) };
	struct cep_dispatch_attr da = { 0 };
	struct cep_cm *cm;
	long ncpu;
	int ret;

	if (!attr || !out || attr->size < offsetof(struct cep_cm_attr, clock) || !attr->transport ||
	    !attr->transport->ops || attr->workers > 1024 || attr->mra_service_timeout > 31 ||
	    (attr->queue_depth & (attr->queue_depth - 1)))
		return -EINVAL;
	cm = calloc(1, sizeof(*cm));
	if (!cm)
		return -ENOMEM;
	cm->tp = attr->transport;
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cm->nworkers = attr->workers ? attr->workers : (unsigned)(ncpu > 0 ? ncpu : 1);
	cm->mra_timeout = attr->mra_service_timeout ? attr->mra_service_timeout : 20;
	cm->auto_mra = attr->auto_mra;
	if (CM_ATTR_HAS(attr, clock))
		cm->clock = attr->clock;
	ret = cm->tp->ops->query_port(cm->tp, &cm->port);
	if (ret)
		goto fail;
	cm->ca_guid = cm_be64((const uint8_t *)&cm->port.ca_guid_net);
	if (posix_memalign((void **)&cm->ws, 64, sizeof(*cm->ws) * cm->nworkers)) {
		ret = -ENOMEM;
		goto fail;
	}
	memset(cm->ws, 0, sizeof(*cm->ws) * cm->nworkers);
	ta.initial_size = attr->table_size;
	ta.teardown = cm_id_teardown;
	ta.release = id_release;
	ta.ctx = cm;
	ret = cep_table_create(&ta, &cm->table);
	if (ret)
		goto fail;
	da.workers = cm->nworkers;
	da.queue_depth = attr->queue_depth ? attr->queue_depth : 4096;
	da.ops.mad = cm_mad;
	da.ctx = cm;
	da.clock = cm->clock;
	ret = cep_dispatch_create(&da, &cm->d);
	if (ret)
		goto fail_table;
	ret = cm->tp->ops->start(cm->tp, cm_recv, cm);
	if (ret)
		goto fail_dispatch;
	*out = cm;
	return 0;
fail_dispatch:
	cep_dispatch_destroy(cm->d);
fail_table:
	cep_table_destroy(cm->table);
fail:
	free(cm->ws);
	free(cm);
	return ret;
}

/* cep_cm_destroy, workers stopped: the id's user reference goes, as if
 * the user had destroyed it (no event: the context is going away). */
static void drop_user_ref(struct cep *cep, void *ctx)
{
	struct cep_cm_id *id = cep_context(cep);
	int user;

	(void)ctx;
	if (!id)
		return;
	pthread_mutex_lock(&id->lock);
	user = !(id->flags & F_USER_GONE);
	id->flags |= F_USER_GONE;
	/* No DESTROYED will be acked: the id stops using its channel now, or
	 * the channel stays busy (-EBUSY) forever. */
	if (user && (id->flags & F_CHANNEL_USER)) {
		id->flags &= (uint8_t)~F_CHANNEL_USER;
		atomic_fetch_sub(&id->channel->users, 1);
	}
	pthread_mutex_unlock(&id->lock);
	if (user)
		cm_id_put(id);
}

int cep_cm_destroy(struct cep_cm *cm)
{
	if (!cm)
		return -EINVAL;
	if (cep_dispatch_self(cm->d) >= 0)
		return -EDEADLK;
	cm->tp->ops->stop(cm->tp);
	if (cep_dispatch_quiesce(cm->d, 5000))
		fprintf(stderr, "libcep: cep_cm_destroy: workers still busy after 5 s "
			"(a callback blocking?); stopping them anyway\n");
	atomic_store(&cm->stopping, 1);
	cep_dispatch_stop(cm->d, drain_timer, cm);
	/* Workers are joined: drop the user's reference of every id the
	 * application did not destroy, so the table can free them all. */
	cep_table_for_each(cm->table, drop_user_ref, NULL);
	int ret = cep_table_destroy(cm->table);

	cep_dispatch_destroy(cm->d);
	free(cm->ws);
	free(cm);
	return ret;
}

struct cep_table *cep_cm_table(struct cep_cm *cm)
{
	return cm->table;
}

unsigned cep_cm_workers(const struct cep_cm *cm)
{
	return cm->nworkers;
}

uint64_t cep_cm_ca_guid(const struct cep_cm *cm)
{
	return cm->ca_guid;
}

int cep_cm_qp_register(struct cep_cm *cm, uint32_t qpn)
{
	if (!cm)
		return -EINVAL;
	return cep_qp_register(cm->table, qpn);
}

int cep_cm_qp_destroy(struct cep_cm *cm, uint32_t qpn)
{
	int ret;

	if (!cm)
		return -EINVAL;
	ret = cep_qp_destroy_begin(cm->table, qpn, NULL);
	if (ret)
		return ret;
	return cep_qp_unregister(cm->table, qpn);
}

int cep_cm_quiesce(struct cep_cm *cm, unsigned timeout_ms)
{
	if (!cm)
		return -EINVAL;
	if (cep_dispatch_self(cm->d) >= 0)
		return -EDEADLK;
	return cep_dispatch_quiesce(cm->d, timeout_ms);
}

int cep_cm_get_stats(struct cep_cm *cm, struct cep_cm_stats *st)
{
	if (!cm || !st || st->size < sizeof(*st))
		return -EINVAL;
	size_t size = st->size;

	memset(st, 0, sizeof(*st));
	st->size = size;
#define SUM_(f) st->f += atomic_load_explicit(&w->f, memory_order_relaxed)
	for (unsigned i = 0; i < cm->nworkers; i++) {
		struct cm_wstats *w = &cm->ws[i];

		for (int t = 0; t < CEP_MSG_COUNT; t++) {
			SUM_(sent[t]);
			SUM_(received[t]);
		}
		SUM_(retries);
		SUM_(timeouts);
		SUM_(duplicates);
		SUM_(send_errors);
		for (int d = 0; d < CEP_CM_DROP_COUNT; d++)
			SUM_(drops[d]);
		for (int r = 0; r <= CEP_REJ_REASON_MAX; r++) {
			SUM_(rej_sent[r]);
			SUM_(rej_received[r]);
		}
		for (int e = 0; e < CEP_CM_EVENT_COUNT; e++)
			SUM_(events[e]);
		for (int s = 0; s < CEP_CM_STATE_COUNT; s++)
			SUM_(states[s]);
	}
#undef SUM_
	st->ids = (uint64_t)atomic_load_explicit(&cm->ids, memory_order_relaxed);
	return 0;
}

/* ---- ids: API --------------------------------------------------------- */

int cep_cm_create_id(struct cep_cm *cm, const struct cep_cm_id_attr *attr,
		     struct cep_cm_id **out)
{
	unsigned w;

	if (!cm || !attr || !out || attr->size < sizeof(*attr) ||
	    !!attr->handler == !!attr->channel)
		return -EINVAL;
	if (atomic_load_explicit(&cm->stopping, memory_order_relaxed))
		return -ESHUTDOWN;
	w = atomic_fetch_add_explicit(&cm->next_worker, 1, memory_order_relaxed) % cm->nworkers;
	return cm_alloc_id(cm, w, attr->handler, attr->channel, attr->context, out);
}

uint32_t cep_cm_id_local_comm_id(const struct cep_cm_id *id)
{
	return id ? cep_local_comm_id(id->cep) : 0;
}

uint32_t cep_cm_id_remote_comm_id(struct cep_cm_id *id)
{
	uint32_t r;

	if (!id)
		return 0;
	pthread_mutex_lock(&id->lock);
	r = id->remote_id;
	pthread_mutex_unlock(&id->lock);
	return r;
}

void *cep_cm_id_context(struct cep_cm_id *id)
{
	void *c;

	if (!id)
		return NULL;
	pthread_mutex_lock(&id->lock);
	c = id->context;
	pthread_mutex_unlock(&id->lock);
	return c;
}

void cep_cm_id_set_context(struct cep_cm_id *id, void *context)
{
	if (!id)
		return;
	pthread_mutex_lock(&id->lock);
	id->context = context;
	pthread_mutex_unlock(&id->lock);
}

enum cep_cm_state cep_cm_id_state(struct cep_cm_id *id)
{
	enum cep_cm_state s;

	if (!id)
		return CEP_CM_IDLE;
	pthread_mutex_lock(&id->lock);
	s = (enum cep_cm_state)id->state;
	pthread_mutex_unlock(&id->lock);
	return s;
}

enum cep_cm_lap_state cep_cm_id_lap_state(struct cep_cm_id *id)
{
	enum cep_cm_lap_state s;

	if (!id)
		return CEP_CM_LAP_IDLE;
	pthread_mutex_lock(&id->lock);
	s = (enum cep_cm_lap_state)id->lap_state;
	pthread_mutex_unlock(&id->lock);
	return s;
}

struct cep *cep_cm_id_cep(const struct cep_cm_id *id)
{
	return id ? id->cep : NULL;
}

int cep_cm_listen(struct cep_cm_id *id, uint64_t service_id, uint64_t mask)
{
	struct cep *existing = NULL;
	int ret;

	if (!id || mask == 0)
		return -EINVAL;
	pthread_mutex_lock(&id->lock);
	if (id->state != CEP_CM_IDLE || (id->flags & F_USER_GONE) || cep_is_destroyed(id->cep)) {
		ret = -EINVAL;
	} else {
		ret = cep_insert_listener(id->cep, service_id, mask, &existing);
		if (ret == 0) {
			id->service_id = service_id;
			cm_set_state(id, CEP_CM_LISTEN);
		} else if (ret == -EEXIST) {
			ret = -EADDRINUSE;
		}
	}
	pthread_mutex_unlock(&id->lock);
	if (existing)
		cep_put(existing);
	return ret;
}

int cep_cm_destroy_id(struct cep_cm_id *id)
{
	if (!id)
		return -EINVAL;
	pthread_mutex_lock(&id->lock);
	if (id->flags & F_USER_GONE) {
		pthread_mutex_unlock(&id->lock);
		return -EALREADY;
	}
	id->flags |= F_USER_GONE;
	switch (id->state) {
	case CEP_CM_LISTEN:
		cep_remove_listener(id->cep);
		cm_set_state(id, CEP_CM_IDLE);
		break;
	case CEP_CM_SIDR_REQ_SENT:
		cm_set_state(id, CEP_CM_IDLE);
		cm_free_retry(id);
		cm_clear_timer(id);
		break;
	case CEP_CM_SIDR_REQ_RCVD:
		cm_do_sidr_rep(id, CEP_SIDR_REJECT, 0, 0, NULL, 0);
		break;
	case CEP_CM_REQ_SENT:
	case CEP_CM_MRA_REQ_RCVD:
		cm_send_rej(id, CEP_REJ_TIMEOUT, CEP_MSG_CODE_OTHER, NULL, 0, NULL, 0);
		cm_reset_to_idle(id);
		break;
	case CEP_CM_REQ_RCVD:
	case CEP_CM_MRA_REQ_SENT:
	case CEP_CM_REP_RCVD:
	case CEP_CM_MRA_REP_SENT:
	case CEP_CM_REP_SENT:
	case CEP_CM_MRA_REP_RCVD:
		cm_do_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
		break;
	case CEP_CM_ESTABLISHED:
		cm_start_dreq(id, NULL, 0);
		break;
	case CEP_CM_DREQ_RCVD:
		cm_send_simple(id, CEP_MSG_DREP, NULL, 0, 0);
		cm_enter_timewait(id);
		break;
	default: /* DREQ_SENT, TIMEWAIT: timewait ends it; IDLE: now */
		break;
	}
	if (id->state == CEP_CM_IDLE && !cep_is_destroyed(id->cep)) {
		cm_drop_remote_keys(id);
		cep_unbind(id->cep);
		cep_destroy(id->cep);
	}
	pthread_mutex_unlock(&id->lock);
	cm_post_bits(id, W_DESTROYED);
	return 0;
}

int cep_cm_destroy_id_sync(struct cep_cm_id *id)
{
	struct cm_waiter *wt;
	struct timespec ts;
	int ret = 0;

	if (!id)
		return -EINVAL;
	if (cep_dispatch_self(id->cm->d) >= 0)
		return -EDEADLK;
	if (id->channel)
		return -EINVAL;
	wt = malloc(sizeof(*wt));
	if (!wt)
		return -ENOMEM;
	pthread_mutex_init(&wt->mtx, NULL);
	pthread_cond_init(&wt->cv, NULL);
	wt->done = 0;
	atomic_init(&wt->refs, 2); /* ours and the DESTROYED work's */
	pthread_mutex_lock(&id->lock);
	if ((id->flags & F_USER_GONE) || id->waiter) {
		pthread_mutex_unlock(&id->lock);
		atomic_store(&wt->refs, 1);
		waiter_put(wt);
		return -EALREADY;
	}
	id->waiter = wt;
	pthread_mutex_unlock(&id->lock);
	/* From here the id may be freed once wt->done is set: do not touch it. */
	cep_cm_destroy_id(id);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&wt->mtx);
	while (!wt->done && ret == 0)
		ret = -pthread_cond_timedwait(&wt->cv, &wt->mtx, &ts);
	pthread_mutex_unlock(&wt->mtx);
	if (ret) {
		fprintf(stderr, "libcep: cep_cm_destroy_id_sync: DESTROYED not handled "
			"after 10 s (a worker stalled in a callback?)\n");
		ret = -ETIMEDOUT;
	}
	waiter_put(wt); /* the worker frees it if it comes later */
	return ret;
}
