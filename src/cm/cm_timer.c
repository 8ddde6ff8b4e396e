/* SPDX-License-Identifier: MIT */
/*
 * CM engine: an id's work items and its timer. Both run on the id's
 * owning worker: W_* bits posted by any thread (cm_post_bits) become one
 * work item per id; one wheel timer per id, re-armed under the id's lock
 * to the earliest of its deadlines (retry, MRA extension, timewait,
 * half-open expiry, a paced REQ's give-up). Each armed timer and queued work item holds a
 * reference on the id's CEP.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_internal.h"
#include "core/table_internal.h"

/* ---- work items and timers -------------------------------------------- */

static void id_timer_fn(struct cep_timer *t);

/* Queue W_* bits for the owning worker: at once, or (@lazy_ms > 0) as an
 * item that may wait that long. Bits added to an item already queued
 * lazily wake the worker unless they may wait too. */
static void queue_bits(struct cep_cm_id *id, uint32_t bits, unsigned lazy_ms)
{
	uint32_t old = atomic_fetch_or_explicit(&id->work_bits, bits | (lazy_ms ? W_LAZY : 0),
						memory_order_acq_rel);

	if (old == 0) {
		cep_get(id->cep); /* the queued work's reference */
		if (lazy_ms)
			cep_dispatch_post_work_lazy(id->cm->d, id->worker, &id->work, lazy_ms);
		else
			cep_dispatch_post_work(id->cm->d, id->worker, &id->work);
	} else if ((old & W_LAZY) && !lazy_ms) {
		cep_dispatch_wake(id->cm->d, id->worker);
	}
}

/* Queue W_* bits for the owning worker. Any thread; lock may be held. */
void cm_post_bits(struct cep_cm_id *id, uint32_t bits)
{
	queue_bits(id, bits, 0);
}

void cm_post_bits_lazy(struct cep_cm_id *id, uint32_t bits)
{
	queue_bits(id, bits, id->waiter ? 0 : id->cm->lazy_ms);
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

/* Lock held: bring the wheel to id->deadline as the owning worker - on
 * its thread, or as a guest while it sleeps (cep_dispatch_enter: an API
 * thread arming a connection's timer then costs the worker no work item
 * and no wake-up) - or leave it to a W_TIMER work item when the worker is
 * busy. The guest runs no item, so holding the id lock is fine. */
static void timer_sync_or_post(struct cep_cm_id *id)
{
	struct cep_dispatch *d = id->cm->d;

	if (cep_dispatch_self(d) == (int)id->worker) {
		timer_sync_locked(id);
	} else if (cep_dispatch_enter(d, id->worker) == 0) {
		timer_sync_locked(id);
		/* the one timer we may have armed: the worker compares it with
		 * its wake-up, no wheel scan on this API thread */
		cep_dispatch_leave(d, id->worker, id->deadline ? id->deadline : UINT64_MAX);
	} else {
		cm_post_bits(id, W_TIMER);
	}
}

uint64_t cm_coarse_deadline(uint64_t now_ms, uint32_t ms)
{
	uint64_t g = ms / 8, at = now_ms + ms;

	if (g > CM_TIMER_GRID_MAX_MS)
		g = CM_TIMER_GRID_MAX_MS;
	if (g < 2)
		return at;
	/* the largest power of two not above it: a grid all timers of about
	 * this length share */
	while (g & (g - 1))
		g &= g - 1;
	return (at + g - 1) & ~(g - 1);
}

/* Lock held: want a timer of @kind in @ms. In real time the deadline is
 * coarse (cm_coarse_deadline); a virtual clock's tests see exact times. */
void cm_set_timer(struct cep_cm_id *id, unsigned kind, uint32_t ms)
{
	uint64_t now = cep_clock_ms(id->cm->clock);

	id->deadline = cep_clock_is_virtual(id->cm->clock) ? now + ms
							   : cm_coarse_deadline(now, ms);
	id->timer_kind = (uint8_t)kind;
	timer_sync_or_post(id);
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
	timer_sync_or_post(id);
}

/* ---- timers ---------------------------------------------------------------- */

void cm_req_give_up(struct cep_cm_id *id)
{
	struct cep_cm_event ev;

	STAT_ADD(id->cm, id->worker, timeouts);
	cm_ev_init(&ev, id, CEP_CM_EV_REQ_ERROR);
	ev.status = -ETIMEDOUT;
	cm_send_rej(id, CEP_REJ_TIMEOUT, CEP_MSG_CODE_REP, NULL, 0, NULL, 0);
	cm_reset_to_idle(id);
	cm_emit(id, &ev);
}

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
	if (id->timer_kind == TK_PACE) {
		cm_pace_expire(id);
		return;
	}
	if (id->timer_kind == TK_AUTO_MRA) {
		if (id->state == CEP_CM_REQ_RCVD) {
			cm_send_auto_mra(id, CEP_MSG_CODE_REQ);
			cm_set_state(id, CEP_CM_MRA_REQ_SENT);
			cm_req_expire_after_mra(id);
		} else if (id->state == CEP_CM_REP_RCVD) {
			cm_send_auto_mra(id, CEP_MSG_CODE_REP);
			cm_set_state(id, CEP_CM_MRA_REP_SENT);
		} else if (id->state == CEP_CM_ESTABLISHED && id->lap_state == CEP_CM_LAP_RCVD) {
			cm_send_auto_mra(id, CEP_MSG_CODE_OTHER);
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
	int req = id->state == CEP_CM_REQ_SENT || id->state == CEP_CM_MRA_REQ_RCVD;

	if (id->retries_left > 0) {
		id->retries_left--;
		id->flags &= (uint16_t)~F_MRA_WAIT; /* a new try: an MRA may extend it */
		/* a REQ's retry waits for its window when that is full */
		if (req && id->dest && cm_pace_retry(id))
			return;
		cm_resend_retry(id);
		if (req && id->dest)
			cm_pace_sent(id);
		/* ESTABLISHED retries only a LAP, at the LAP's own period */
		cm_set_timer(id, TK_RETRY, id->state == CEP_CM_ESTABLISHED ? id->lap_timeout_ms
									   : id->timeout_ms);
		return;
	}
	if (req) {
		if (id->dest)
			cm_pace_timeout(id);
		cm_req_give_up(id);
		return;
	}
	STAT_ADD(cm, id->worker, timeouts);
	cm_ev_init(&ev, id, CEP_CM_EV_REQ_ERROR);
	ev.status = -ETIMEDOUT;
	switch (id->state) {
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

void cm_waiter_put(struct cm_waiter *wt)
{
	if (atomic_fetch_sub_explicit(&wt->refs, 1, memory_order_acq_rel) == 1) {
		pthread_mutex_destroy(&wt->mtx);
		pthread_cond_destroy(&wt->cv);
		free(wt);
	}
}

void cm_id_work_fn(struct cep_work *w)
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
	if (bits & W_PACE) {
		pthread_mutex_lock(&id->lock);
		if (!stopping)
			cm_pace_go(id);
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
			cm_waiter_put(wt);
		}
		cm_id_put(id); /* the user's reference */
	}
	cm_id_put(id); /* the work's reference */
}

void cm_drain_timer(struct cep_timer *t, void *ctx)
{
	struct cep_cm_id *id = (struct cep_cm_id *)((char *)t - offsetof(struct cep_cm_id, timer));

	(void)ctx;
	cm_id_put(id);
}
