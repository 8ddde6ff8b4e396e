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
 * in state order), cm_emit() the event (the one delivery path: it drops
 * the lock only while a callback runs), unlock, drop the reference.
 * References: the user's (from create, dropped after DESTROYED), the
 * table's (dropped by cep_destroy), one per armed wheel timer, one per
 * queued work item, one per lookup, one per queued or taken channel event,
 * cep_cm_destroy_id's own across the call. A channel event taken and not
 * acked also holds its context (cm->taken): cep_cm_destroy refuses.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cm_internal.h"
#include "core/table_internal.h"

#ifdef CEP_TEST_HOOKS
void (*cm_test_hook)(enum cm_hook_point p, struct cep_cm_id *id, const struct cep_cm_event *ev);
#endif

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

/* SipHash-2-4 (Aumasson, Bernstein) of the 12-byte message (id, guid)
 * under the context's secret key: the worker of a REQ / SIDR_REQ. Without
 * the key a sender cannot choose the worker its flood lands on, e.g. the
 * worker that owns a connection it wants to starve. */
#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND(v0, v1, v2, v3) do { \
	v0 += v1; v1 = ROTL64(v1, 13); v1 ^= v0; v0 = ROTL64(v0, 32); \
	v2 += v3; v3 = ROTL64(v3, 16); v3 ^= v2; \
	v0 += v3; v3 = ROTL64(v3, 21); v3 ^= v0; \
	v2 += v1; v1 = ROTL64(v1, 17); v1 ^= v2; v2 = ROTL64(v2, 32); \
} while (0)

static uint64_t siphash_12(const uint64_t k[2], uint32_t id, uint64_t guid)
{
	uint64_t v0 = k[0] ^ 0x736f6d6570736575ull, v1 = k[1] ^ 0x646f72616e646f6dull;
	uint64_t v2 = k[0] ^ 0x6c7967656e657261ull, v3 = k[1] ^ 0x7465646279746573ull;
	/* little-endian words of the bytes id(4) guid(8), then the length */
	uint64_t m0 = (uint64_t)id | guid << 32;
	uint64_t m1 = guid >> 32 | (uint64_t)12 << 56;

	v3 ^= m0;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m0;
	v3 ^= m1;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m1;
	v2 ^= 0xff;
	for (int i = 0; i < 4; i++)
		SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

static unsigned route_hash(const struct cep_cm *cm, uint32_t id, uint64_t guid)
{
	return (unsigned)(siphash_12(cm->route_key, id, guid) % cm->nworkers);
}

/* Pseudo GUID naming a SIDR requester (SIDR_REQ carries no CA GUID). */
uint64_t cm_sidr_source(const struct cep_mad_addr *from)
{
	uint64_t h = 0xcbf29ce484222325ull ^ from->lid;

	for (int i = 0; i < 16; i++)
		h = (h ^ from->gid[i]) * 0x100000001b3ull;
	return h | 1;
}

/* A passive id counts against its listener's backlog while its request
 * waits for the application's answer, as ucma's backlog counts the
 * CONNECT_REQUESTs not yet taken: once accepted (REP_SENT on) it waits
 * only for its peer, and its REP retries bound it (issue 21). */
static int unanswered(unsigned s)
{
	return s == CEP_CM_REQ_RCVD || s == CEP_CM_MRA_REQ_SENT || s == CEP_CM_SIDR_REQ_RCVD;
}

/* Lock held: a child stops counting against its listener's backlog. */
static void half_open_end(struct cep_cm_id *id)
{
	struct cep_cm_id *l = id->listener;

	id->listener = NULL;
	atomic_fetch_sub_explicit(&l->lis.half_open, 1, memory_order_relaxed);
	cep_put(l->cep); /* not the listener's lock: never two id locks */
}

void cm_set_state(struct cep_cm_id *id, unsigned s)
{
	struct cm_wstats *w = &id->cm->ws[id->worker];

	if (id->listener && !unanswered(s))
		half_open_end(id);

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

/* The half-open limit (cep_cm_attr.half_open_timeout_ms): without it the
 * requester's own timeouts (15 retries of 31, clamped to 24) kept a forged
 * REQ's backlog slot for most of an hour. */
void cm_set_expiry(struct cep_cm_id *id, uint32_t give_up_ms, uint32_t floor_ms)
{
	uint64_t now = cep_clock_ms(id->cm->clock);
	uint64_t lim = id->half_open_until > now ? id->half_open_until - now : 0;

	if (lim < floor_ms)
		lim = floor_ms;
	if (give_up_ms > lim) {
		give_up_ms = (uint32_t)lim;
		id->flags |= F_EXPIRE_LIMITED;
	} else {
		id->flags &= (uint16_t)~F_EXPIRE_LIMITED;
	}
	cm_set_timer(id, TK_EXPIRE, give_up_ms);
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

/* Lock held: REJ from this id. Before the peer's comm ID is known (our
 * REQ unanswered: REQ_SENT, MRA_REQ_RCVD) the peer can match only a REJ
 * "timeout" carrying our CA GUID in the ARI (remote comm ID 0: it finds
 * its id by our (comm ID, GUID)), which is what the kernel's destroy
 * sends: every REJ from those states takes that form, whatever reason
 * the caller gave; its private data is kept. */
void cm_send_rej(struct cep_cm_id *id, unsigned reason, unsigned msg_code,
		     const void *ari, size_t ari_len, const void *pdata, size_t len)
{
	struct cep_msg m;

	if (id->state == CEP_CM_REQ_SENT || id->state == CEP_CM_MRA_REQ_RCVD) {
		reason = CEP_REJ_TIMEOUT;
		msg_code = CEP_MSG_CODE_OTHER;
		ari = NULL;
		ari_len = 0;
	}
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

void cm_keep_pdata(struct cep_cm_id *id, const void *pdata, size_t len)
{
	free(id->resend_pd);
	id->resend_pd = NULL;
	id->resend_len = 0;
	if (len && (id->resend_pd = malloc(len)) != NULL) { /* none: resent without */
		memcpy(id->resend_pd, pdata, len);
		id->resend_len = (uint8_t)len;
	}
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
	/* The wire field has no length. RTU, DREQ and DREP usually carry
	 * none, and a peer that sent none sent zeros: an all-zero field is
	 * "none" (NULL), as cm.h says. The others always give the whole field
	 * (zeros there can be data: a connection index 0, a CMA header). */
	size_t n = cep_msg_private_data_size(m->type);
	int none = m->type == CEP_MSG_RTU || m->type == CEP_MSG_DREQ || m->type == CEP_MSG_DREP;

	for (size_t i = 0; none && i < n; i++)
		none = pd[i] == 0;
	if (!none) {
		ev->private_data = (const uint8_t *)&ev->msg + (pd - base);
		ev->private_data_len = n;
	}
}

static void destroy_act(struct cep_cm_id *id);

/* The one path of every event but DESTROYED (MAD handlers, timers, work
 * items), on the owning worker, @id's lock held on entry and on return.
 *
 * Ordered against destroy by that lock: cep_cm_destroy_id() sets
 * F_USER_GONE under it, so an event checked here after it is not
 * delivered. A channel event is queued under the lock (destroy purges
 * what was queued before); a callback runs with the lock dropped and
 * `delivering` set, which cep_cm_destroy_id() from a thread that is not a
 * worker waits for. So once cep_cm_destroy_id() has returned, no event but
 * DESTROYED reaches the user. A callback's non-zero verdict destroys the
 * id (the kernel's ib_cm rule). The caller re-checks the state after it:
 * a callback may have changed it. Returns 1 if the event was delivered. */
int cm_emit(struct cep_cm_id *id, struct cep_cm_event *ev)
{
	int verdict;

	if (id->flags & F_USER_GONE)
		return 0;
	STAT_ADD(id->cm, id->worker, events[ev->type]);
	if (id->channel) {
		CM_HOOK(CM_HOOK_DELIVER, id, ev);
		if (cm_channel_push(id->channel, ev))
			STAT_ADD(id->cm, id->worker, drops[CEP_CM_DROP_NO_MEMORY]);
		return 1;
	}
	if (!id->handler)
		return 0;
	id->delivering = 1;
	pthread_mutex_unlock(&id->lock);
	CM_HOOK(CM_HOOK_DELIVER, id, ev);
	verdict = id->handler(id, ev);
	pthread_mutex_lock(&id->lock);
	id->delivering = 0;
	if (verdict && !(id->flags & F_USER_GONE)) {
		id->flags |= F_USER_GONE;
		destroy_act(id);
		id->flags |= F_DESTROY_DONE;
		cm_maybe_post_destroyed(id);
	}
	return 1;
}

/* cep_cm_stats.ids counts an id until it is destroyed, not until its
 * memory goes a grace period later. Lock held, or the last reference. */
static void cm_uncount(struct cep_cm_id *id)
{
	if (!(id->flags & F_UNCOUNTED)) {
		id->flags |= F_UNCOUNTED;
		atomic_fetch_sub_explicit(&id->cm->ids, 1, memory_order_relaxed);
	}
}

/* Not on F_USER_GONE alone: a listener's destroy sets it, then waits with
 * the lock dropped for its children's request events, and the last child
 * to unpin it (cm_listener_release) calls this. DESTROYED posted there
 * would be delivered, and drop the user's reference, before destroy_act. */
void cm_maybe_post_destroyed(struct cep_cm_id *id)
{
	if ((id->flags & (F_USER_GONE | F_DESTROY_DONE | F_DESTROYED_POSTED)) ==
	    (F_USER_GONE | F_DESTROY_DONE) && id->lis.req_inflight == 0) {
		id->flags |= F_DESTROYED_POSTED;
		cm_uncount(id);
		cm_post_bits(id, W_DESTROYED);
	}
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
	return a;
}

/* Stricter than the kernel (which never looks at the source): a stranger
 * who learnt a connection's IDs cannot end, reset, stall or complete it.
 * docs/protocol.md. */
int cm_from_peer(struct cep_cm_id *id, unsigned w, const struct cep_mad_addr *from)
{
	if (addr_match(&id->peer, from))
		return 1;
	if (id->paths && id->paths->alt.valid) {
		const struct cm_addr *a = &id->paths->alt;
		struct cep_mad_addr alt = { .lid = a->lid, .grh_present = a->grh };

		memcpy(alt.gid, a->gid, 16);
		if (addr_match(&alt, from))
			return 1;
	}
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
	/* After the id's lock: cep_cm_destroy takes the list, then id locks. */
	pthread_mutex_lock(&cm->idl[worker].mtx);
	id->all_next = cm->idl[worker].head;
	if (id->all_next)
		id->all_next->all_prev = id;
	cm->idl[worker].head = id;
	pthread_mutex_unlock(&cm->idl[worker].mtx);
	*out = id;
	return 0;
}

/* An id the user never saw: remove and drop the creation reference. */
void cm_discard_id(struct cep_cm_id *id)
{
	pthread_mutex_lock(&id->lock);
	id->flags |= F_USER_GONE;
	cm_channel_leave(id);
	cep_destroy(id->cep);
	cm_uncount(id);
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
	cm_uncount(id);
	struct cm_idlist *l = &id->cm->idl[id->worker];

	pthread_mutex_lock(&l->mtx);
	if (id->all_prev)
		id->all_prev->all_next = id->all_next;
	else
		l->head = id->all_next;
	if (id->all_next)
		id->all_next->all_prev = id->all_prev;
	pthread_mutex_unlock(&l->mtx);
	free(id->retry);
	free(id->resend_pd);
	free(id->paths);
	pthread_mutex_destroy(&id->lock);
	free(id);
}

/* ---- timers ---------------------------------------------------------------- */

/* Worker, lock held: the id's timer is due. */
static void on_timeout(struct cep_cm_id *id)
{
	struct cep_cm *cm = id->cm;
	struct cep_cm_event ev;

	if (id->timer_kind == TK_TIMEWAIT) {
		if (id->state != CEP_CM_TIMEWAIT)
			return;
		cm_set_state(id, CEP_CM_IDLE);
		cm_drop_remote_keys(id);
		cep_unbind(id->cep);
		cm_maybe_table_destroy(id);
		cm_ev_init(&ev, id, CEP_CM_EV_TIMEWAIT_EXIT);
		cm_emit(id, &ev);
		return;
	}
	if (id->timer_kind == TK_EXPIRE) {
		ev.type = CEP_CM_EVENT_COUNT;
		if (id->state == CEP_CM_REQ_RCVD || id->state == CEP_CM_MRA_REQ_SENT) {
			cm_reset_to_idle(id);
			cm_ev_init(&ev, id, CEP_CM_EV_REQ_ERROR);
		} else if (id->state == CEP_CM_SIDR_REQ_RCVD) {
			cep_remove_remote_id(id->cep);
			cm_set_state(id, CEP_CM_IDLE);
			cm_maybe_table_destroy(id);
			cm_ev_init(&ev, id, CEP_CM_EV_SIDR_REQ_ERROR);
		}
		if (ev.type != CEP_CM_EVENT_COUNT) {
			/* the requester gave up long ago (or is too slow for
			 * our limit): nothing to send */
			STAT_ADD(cm, id->worker, timeouts);
			STAT_ADD(cm, id->worker, half_open_expired);
			if (id->flags & F_EXPIRE_LIMITED)
				STAT_ADD(cm, id->worker, half_open_limited);
			ev.status = -ETIMEDOUT;
			cm_emit(id, &ev);
		}
		return;
	}
	if (id->timer_kind == TK_AUTO_MRA) {
		if (id->state == CEP_CM_REQ_RCVD) {
			cm_send_mra(id, CEP_MSG_CODE_REQ, cm->mra_timeout, NULL, 0);
			cm_keep_pdata(id, NULL, 0);
			cm_set_state(id, CEP_CM_MRA_REQ_SENT);
			cm_req_expire_after_mra(id);
		} else if (id->state == CEP_CM_REP_RCVD) {
			cm_send_mra(id, CEP_MSG_CODE_REP, cm->mra_timeout, NULL, 0);
			cm_keep_pdata(id, NULL, 0);
			cm_set_state(id, CEP_CM_MRA_REP_SENT);
		} else if (id->state == CEP_CM_ESTABLISHED && id->lap_state == CEP_CM_LAP_RCVD) {
			cm_send_mra(id, CEP_MSG_CODE_OTHER, cm->mra_timeout, NULL, 0);
			cm_keep_pdata(id, NULL, 0);
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
		/* ESTABLISHED retries only a LAP, at the LAP's own period */
		cm_set_timer(id, TK_RETRY, id->state == CEP_CM_ESTABLISHED ? id->lap_timeout_ms
									   : id->timeout_ms);
		return;
	}
	STAT_ADD(cm, id->worker, timeouts);
	cm_ev_init(&ev, id, CEP_CM_EV_REQ_ERROR);
	ev.status = -ETIMEDOUT;
	switch (id->state) {
	case CEP_CM_REQ_SENT:
	case CEP_CM_MRA_REQ_RCVD:
		cm_send_rej(id, CEP_REJ_TIMEOUT, CEP_MSG_CODE_REP, NULL, 0, NULL, 0);
		cm_reset_to_idle(id);
		break;
	case CEP_CM_REP_SENT:
	case CEP_CM_MRA_REP_RCVD:
		ev.type = CEP_CM_EV_REP_ERROR;
		cm_send_rej(id, CEP_REJ_TIMEOUT, CEP_MSG_CODE_OTHER, NULL, 0, NULL, 0);
		cm_reset_to_idle(id);
		break;
	case CEP_CM_DREQ_SENT:
		ev.type = CEP_CM_EV_DREQ_ERROR;
		cm_enter_timewait(id);
		break;
	case CEP_CM_SIDR_REQ_SENT:
		ev.type = CEP_CM_EV_SIDR_REQ_ERROR;
		cm_set_state(id, CEP_CM_IDLE);
		cm_free_retry(id);
		cm_maybe_table_destroy(id);
		break;
	default: /* LAP */
		ev.type = CEP_CM_EV_LAP_ERROR;
		id->lap_state = CEP_CM_LAP_IDLE;
		cm_free_retry(id);
		break;
	}
	cm_emit(id, &ev);
}

static void id_timer_fn(struct cep_timer *t)
{
	struct cep_cm_id *id = (struct cep_cm_id *)((char *)t - offsetof(struct cep_cm_id, timer));

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
		on_timeout(id);
	}
	pthread_mutex_unlock(&id->lock);
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

		pthread_mutex_lock(&id->lock);
		cm_ev_init(&ev, id, CEP_CM_EV_QP_DESTROYED);
		cm_emit(id, &ev);
		pthread_mutex_unlock(&id->lock);
	}
	if (bits & W_ESTABLISHED) {
		struct cep_cm_event ev;

		pthread_mutex_lock(&id->lock);
		if (id->state == CEP_CM_ESTABLISHED) { /* not already torn down */
			cm_ev_init(&ev, id, CEP_CM_EV_ESTABLISHED);
			cm_emit(id, &ev);
		}
		pthread_mutex_unlock(&id->lock);
	}
	if (bits & W_DESTROYED) {
		/* The id's last event: past every other work item, MAD and
		 * timer of the id (all on this worker) and, for a listener,
		 * past its children's request events (req_inflight was 0). */
		struct cep_cm_event ev;
		struct cm_waiter *wt;

		pthread_mutex_lock(&id->lock);
		cm_ev_init(&ev, id, CEP_CM_EV_DESTROYED);
		wt = id->waiter;
		id->waiter = NULL;
		STAT_ADD(id->cm, id->worker, events[ev.type]);
		if (id->channel && cm_channel_push(id->channel, &ev)) {
			/* never acked: release the channel here */
			STAT_ADD(id->cm, id->worker, drops[CEP_CM_DROP_NO_MEMORY]);
			cm_channel_leave(id);
		}
		pthread_mutex_unlock(&id->lock);
		if (!id->channel && id->handler)
			(void)id->handler(id, &ev); /* its verdict: nothing left to destroy */
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

/* A REQ of a class version we do not support (cep_mad_peek checked the
 * length, base version and class): REJ 31 "unsupported class version"
 * with the highest we support in the ARI, as IBTA table 109 and
 * docs/protocol.md say. Other messages of that version are only dropped.
 * Stateless; any thread. */
static void reject_class_version(struct cep_cm *cm, const uint8_t *mad,
				 const struct cep_mad_addr *from)
{
	const uint8_t *p = mad + CEP_MAD_HDR_SIZE;
	struct cep_mad_addr to = cm_reply_addr(from);
	struct cep_msg r;

	if (mad[3] != 0x03 || ((unsigned)mad[16] << 8 | mad[17]) != 0x0010) /* Send, REQ */
		return;
	cep_msg_init(&r, CEP_MSG_REJ, cm_be64(mad + 8));
	r.u.rej.remote_comm_id = be32(p); /* the REQ's local comm ID, offset 0 */
	r.u.rej.message_rejected = CEP_MSG_CODE_REQ;
	r.u.rej.reason = CEP_REJ_INVALID_CLASS_VERSION;
	r.u.rej.ari[0] = 2; /* the only class version this CM speaks */
	r.u.rej.reject_info_length = 1;
	cm_send_raw(cm, 0, &r, &to, NULL);
}

/* Transport thread: route by the comm ID addressed to us (REQ: by the
 * remote (comm ID, CA GUID)); never blocks, never takes an id lock. */
static void cm_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	struct cep_cm *cm = ctx;
	enum cep_wire_error why;
	enum cep_msg_type t;
	unsigned w = 0;

	if (atomic_load_explicit(&cm->stopping, memory_order_relaxed)) {
		cm_drop(cm, 0, CEP_CM_DROP_STOPPED);
		return;
	}
	if (cep_mad_peek(mad, len, &t, &why)) {
		if (why == CEP_WIRE_ERR_CLASS_VERSION)
			reject_class_version(cm, mad, from);
		cm_drop(cm, 0, CEP_CM_DROP_DECODE);
		return;
	}
	const uint8_t *p = mad + CEP_MAD_HDR_SIZE;

	switch (t) {
	case CEP_MSG_REQ:
		w = route_hash(cm, be32(p), cm_be64(p + 16));
		break;
	case CEP_MSG_SIDR_REQ:
		w = route_hash(cm, be32(p), cm_sidr_source(from));
		break;
	case CEP_MSG_SIDR_REP:
		w = be32(p) % cm->nworkers;
		break;
	case CEP_MSG_REJ:
		if (be32(p + 4) == 0 && (((unsigned)p[10] << 8) | p[11]) == CEP_REJ_TIMEOUT)
			w = route_hash(cm, be32(p), cm_be64(p + 12));
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

/* Contexts not yet destroyed: cep_cm_destroy() of anything else (a second
 * call, a stray pointer) is -EINVAL instead of a use after free. Touched
 * only by create and destroy, which are rare. */
static pthread_mutex_t live_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct cep_cm *live_head;  /* live_mtx */

static void live_add(struct cep_cm *cm)
{
	pthread_mutex_lock(&live_mtx);
	cm->live_next = live_head;
	live_head = cm;
	pthread_mutex_unlock(&live_mtx);
}

/* cep_cm_destroy's decision, one step under live_mtx (so a second,
 * racing call finds @cm either live and unchanged or gone): -EINVAL (not
 * live), -EDEADLK (called on one of its workers), -EBUSY (an event of its
 * ids is taken and not acked), all changing nothing; or 0: @cm is no
 * longer live and no event of it can be taken any more (CM_CLOSED). */
static int live_close(struct cep_cm *cm)
{
	int ret = -EINVAL;

	pthread_mutex_lock(&live_mtx);
	for (struct cep_cm **pp = &live_head; *pp; pp = &(*pp)->live_next) {
		uint32_t none = 0;

		if (*pp != cm)
			continue;
		if (cep_dispatch_self(cm->d) >= 0)
			ret = -EDEADLK;
		/* One RMW against cm_event_take's: either an event is taken
		 * first and we refuse, or we close first and it is not taken.
		 * acq_rel: the acks' puts (and their call_rcu) happen before
		 * the teardown below and its RCU barrier. */
		else if (!atomic_compare_exchange_strong_explicit(&cm->taken, &none, CM_CLOSED,
								  memory_order_acq_rel,
								  memory_order_relaxed))
			ret = -EBUSY;
		else {
			*pp = cm->live_next;
			ret = 0;
		}
		break;
	}
	pthread_mutex_unlock(&live_mtx);
	return ret;
}

int cm_event_take(struct cep_cm *cm)
{
	uint32_t v = atomic_load_explicit(&cm->taken, memory_order_relaxed);

	/* Relaxed: the exclusion against live_close is the RMW order on this
	 * word; what the event points to was published by the channel mutex. */
	do {
		if (v & CM_CLOSED)
			return 0;
	} while (!atomic_compare_exchange_weak_explicit(&cm->taken, &v, v + 1,
							 memory_order_relaxed,
							 memory_order_relaxed));
	return 1;
}

void cm_event_done(struct cep_cm *cm)
{
	/* Release: the ack's puts happen before a destroy that sees 0. */
	atomic_fetch_sub_explicit(&cm->taken, 1, memory_order_release);
}

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
	cm->backlog = CM_ATTR_HAS(attr, listen_backlog) && attr->listen_backlog ?
		      attr->listen_backlog : 1024;
	cm->half_open_ms = !CM_ATTR_HAS(attr, half_open_timeout_ms) || !attr->half_open_timeout_ms ?
			   60000 : attr->half_open_timeout_ms > UINT32_MAX ?
			   UINT32_MAX : (uint32_t)attr->half_open_timeout_ms;
	if (getrandom(cm->route_key, sizeof(cm->route_key), 0) != sizeof(cm->route_key)) {
		ret = -EIO; /* the kernel CSPRNG is ready on any Linux >= 3.17 */
		goto fail;
	}
	ret = cm->tp->ops->query_port(cm->tp, &cm->port);
	if (ret)
		goto fail;
	cm->ca_guid = cm_be64((const uint8_t *)&cm->port.ca_guid_net);
	if (posix_memalign((void **)&cm->ws, 64, sizeof(*cm->ws) * cm->nworkers)) {
		ret = -ENOMEM;
		goto fail;
	}
	memset(cm->ws, 0, sizeof(*cm->ws) * cm->nworkers);
	if (posix_memalign((void **)&cm->idl, 64, sizeof(*cm->idl) * cm->nworkers)) {
		ret = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < cm->nworkers; i++) {
		pthread_mutex_init(&cm->idl[i].mtx, NULL);
		cm->idl[i].head = NULL;
	}
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
	live_add(cm);
	*out = cm;
	return 0;
fail_dispatch:
	cep_dispatch_destroy(cm->d);
fail_table:
	cep_table_destroy(cm->table);
fail:
	free(cm->idl);
	free(cm->ws);
	free(cm);
	return ret;
}

/* cep_cm_destroy, workers stopped and joined, CM_CLOSED (no event of ours
 * is taken, none can be): the user's reference of every id the application
 * did not destroy goes, as if it had (no event: the context is going
 * away), and every event of ours still queued on a channel is dropped -
 * never taken, so never seen; DESTROYED of ids the application destroyed
 * too. The list holds ids whose CEP already left the table too. Puts here
 * may end in call_rcu; its release (id_release) takes l->mtx, so every id
 * on the list stays in memory while we hold it. */
static void release_ids(struct cep_cm *cm)
{
	for (unsigned w = 0; w < cm->nworkers; w++) {
		struct cm_idlist *l = &cm->idl[w];

		pthread_mutex_lock(&l->mtx);
		for (struct cep_cm_id *id = l->head; id; id = id->all_next) {
			int user;

			pthread_mutex_lock(&id->lock);
			user = !(id->flags & F_USER_GONE);
			id->flags |= F_USER_GONE;
			if (id->listener)
				half_open_end(id);
			/* Its events are on id->channel only, which lives while
			 * the id counts in its users: empty it, then leave it
			 * (no DESTROYED will be acked, or the channel would stay
			 * -EBUSY for ever). */
			if (id->flags & F_CHANNEL_USER) {
				cm_channel_purge(id->channel, id, 1);
				cm_channel_leave(id);
			}
			pthread_mutex_unlock(&id->lock);
			if (user)
				cm_id_put(id);
		}
		pthread_mutex_unlock(&l->mtx);
	}
}

/* Refuse while an event is taken and not acked, rather than wait (a thread
 * that acks after destroy would hang) or free what it points to (the ack's
 * put would run id_release on a freed context): cm.h, docs/cm.md. */
int cep_cm_destroy(struct cep_cm *cm)
{
	int ret;

	if (!cm)
		return -EINVAL;
	/* Found first: a destroyed context's memory is not read. The check
	 * and the removal are one step, so two racing calls get one 0. */
	ret = live_close(cm);
	if (ret)
		return ret;
	cm->tp->ops->stop(cm->tp);
	if (cep_dispatch_quiesce(cm->d, 5000))
		fprintf(stderr, "libcep: cep_cm_destroy: workers still busy after 5 s "
			"(a callback blocking?); stopping them anyway\n");
	atomic_store(&cm->stopping, 1);
	cep_dispatch_stop(cm->d, drain_timer, cm);
	/* Workers are joined: drop the user's reference of every id the
	 * application did not destroy and every queued event, so the table
	 * can free them all. */
	release_ids(cm);
	ret = cep_table_destroy(cm->table);
	cep_dispatch_destroy(cm->d);
	if (ret) {
		/* A core CEP still referenced: only the application can hold
		 * one (cep_lookup_* on cep_cm_table() not put). The table is
		 * kept, and so is what its release (id_release) touches. */
		fprintf(stderr, "libcep: cep_cm_destroy: a CEP of the context's table is still "
			"referenced (cep_lookup_* without cep_put?): leaking the context\n");
		return -ENOTEMPTY;
	}
	for (unsigned i = 0; i < cm->nworkers; i++)
		pthread_mutex_destroy(&cm->idl[i].mtx);
	free(cm->idl);
	free(cm->ws);
	free(cm);
	return 0;
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
	struct cep_cm_stats all;

	/* libcep 0.2's struct ended with ids: fill what the caller has */
	if (!cm || !st || st->size < offsetof(struct cep_cm_stats, half_open_expired))
		return -EINVAL;
	size_t size = st->size;

	memset(&all, 0, sizeof(all));
#define SUM_(f) all.f += atomic_load_explicit(&w->f, memory_order_relaxed)
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
		SUM_(half_open_expired);
		SUM_(half_open_limited);
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
	all.ids = (uint64_t)atomic_load_explicit(&cm->ids, memory_order_relaxed);
	all.size = size;
	memcpy(st, &all, size < sizeof(all) ? size : sizeof(all));
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
	return cep_cm_listen_backlog(id, service_id, mask, 0);
}

int cep_cm_listen_backlog(struct cep_cm_id *id, uint64_t service_id, uint64_t mask,
			  unsigned backlog)
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
			id->lis.backlog = backlog ? backlog : id->cm->backlog;
			id->lis.req_inflight = 0;
			atomic_store_explicit(&id->lis.half_open, 0, memory_order_relaxed);
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

/* Lock held, F_USER_GONE just set: what the state asks of a destroy
 * (the kernel's cm_destroy_id). The caller then posts DESTROYED. */
static void destroy_act(struct cep_cm_id *id)
{
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
		cm_keep_pdata(id, NULL, 0);
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
}

/* Lock held, not on a worker: wait until no callback of @id runs and, for
 * a listener, no child's request event is being delivered (bounded, so a
 * callback stuck for good is reported instead of hanging the caller). */
static void wait_deliveries(struct cep_cm_id *id)
{
	for (unsigned i = 0; id->delivering || id->lis.req_inflight; i++) {
		struct timespec ts = { 0, 100000 };

		if (i == 100000) /* 10 s */
			fprintf(stderr, "libcep: cep_cm_destroy_id: a callback of id %#x still "
				"running after 10 s; not waiting for it\n",
				cep_local_comm_id(id->cep));
		if (i >= 100000)
			break;
		pthread_mutex_unlock(&id->lock);
		CM_HOOK(CM_HOOK_DESTROY_WAIT, id, NULL);
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&id->lock);
	}
}

/* Any thread, also a callback; the caller holds the user's reference
 * (DESTROYED not yet posted). DESTROYED is posted here, at the end, or by
 * the last child unpinning a listener after that (F_DESTROY_DONE): never
 * while the lock is dropped in wait_deliveries or for the purge. */
int cep_cm_destroy_id(struct cep_cm_id *id)
{
	struct cep_cm_channel *ch;

	if (!id)
		return -EINVAL;
	pthread_mutex_lock(&id->lock);
	if (id->flags & F_USER_GONE) {
		pthread_mutex_unlock(&id->lock);
		return -EALREADY;
	}
	/* From here cm_emit delivers nothing more to the user. */
	id->flags |= F_USER_GONE;
	/* Ours until the last unlock: once DESTROYED is posted the worker may
	 * drop the user's reference, and destroy_act the table's, before we
	 * are done with the id. */
	cep_get(id->cep);
	/* A callback already running finishes first. Not from a worker: a
	 * callback of another worker's id may be destroying one of ours. */
	if (cep_dispatch_self(id->cm->d) < 0)
		wait_deliveries(id);
	destroy_act(id);
	ch = id->channel;
	pthread_mutex_unlock(&id->lock);
	/* Before DESTROYED is posted: once it is acked, the channel may go. */
	if (ch)
		cm_channel_purge(ch, id, 0);
	pthread_mutex_lock(&id->lock);
	id->flags |= F_DESTROY_DONE;
	cm_maybe_post_destroyed(id);
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
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
