/* SPDX-License-Identifier: MIT */
/*
 * CM engine: ids. Allocation (a CEP in the context's table, a comm ID, an
 * owning worker), the last release (an RCU callback after the last
 * reference), the id API (create, getters, listen) and destruction: what
 * the state asks of a destroy (the kernel's cm_destroy_id), DESTROYED as
 * the last event, and the waits of cep_cm_destroy_id() and
 * cep_cm_destroy_id_sync(). See docs/cm.md, "Destroying an id".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_internal.h"
#include "core/table_internal.h"

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
	id->work.fn = cm_id_work_fn;
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
void cm_id_release(struct cep *cep, void *ctx)
{
	struct cep_cm *cm = ctx;
	struct cep_cm_id *id = cep_context(cep);

	(void)cm;
	if (!id)
		return;
	struct cm_idlist *l = &id->cm->idl[id->worker];

	/* Off the context's list before anything of the id is read: a
	 * cep_cm_destroy walking the list (release_ids, under l->mtx) still
	 * locks and writes an id whose last reference went before it ran,
	 * and with the grace period (and its batch, up to a second) still
	 * to come such an id is there to be found. Taking l->mtx first puts
	 * the walk's writes before our reads, or keeps the walk from finding
	 * the id (TSan: the flags read by cm_uncount against release_ids'
	 * write, cepd's shutdown in service-attack-timewait). */
	pthread_mutex_lock(&l->mtx);
	if (id->all_prev)
		id->all_prev->all_next = id->all_next;
	else
		l->head = id->all_next;
	if (id->all_next)
		id->all_next->all_prev = id->all_prev;
	pthread_mutex_unlock(&l->mtx);
	atomic_fetch_sub_explicit(&id->cm->ws[id->worker].states[id->state], 1,
				  memory_order_relaxed);
	cm_uncount(id);
	free(id->retry);
	free(id->resend_pd);
	free(id->paths);
	pthread_mutex_destroy(&id->lock);
	free(id);
}

/* ---- ids: API --------------------------------------------------------- */

/* The caller's flags: 0 for a struct of libcep 0.2, which ends
 * at context (its size does not reach the field). */
static uint64_t id_attr_flags(const struct cep_cm_id_attr *a)
{
	return a->size >= offsetof(struct cep_cm_id_attr, flags) + sizeof(a->flags) ? a->flags : 0;
}

int cep_cm_create_id(struct cep_cm *cm, const struct cep_cm_id_attr *attr,
		     struct cep_cm_id **out)
{
	uint64_t flags;

	if (!cm || !attr || !out || attr->size < offsetof(struct cep_cm_id_attr, flags) ||
	    !!attr->handler == !!attr->channel)
		return -EINVAL;
	flags = id_attr_flags(attr);
	if (flags & ~CEP_CM_ID_LINGER)
		return -EINVAL;
	return cm->ops->create_id(cm, attr, flags, out);
}

int cm_local_create_id(struct cep_cm *cm, const struct cep_cm_id_attr *attr, uint64_t flags,
		       struct cep_cm_id **out)
{
	struct cep_cm_id *id;
	unsigned w;
	int ret;

	if (atomic_load_explicit(&cm->stopping, memory_order_relaxed))
		return -ESHUTDOWN;
	w = atomic_fetch_add_explicit(&cm->next_worker, 1, memory_order_relaxed) % cm->nworkers;
	ret = cm_alloc_id(cm, w, attr->handler, attr->channel, attr->context, &id);
	if (ret)
		return ret;
	/* Before the user has the id: nothing else reads it yet but a MAD
	 * with a guessed comm ID, which takes this lock too. */
	pthread_mutex_lock(&id->lock);
	if (flags & CEP_CM_ID_LINGER)
		id->flags |= F_LINGER;
	if (attr->size >= offsetof(struct cep_cm_id_attr, pace_group) + sizeof(attr->pace_group))
		id->pace_group = attr->pace_group;
	pthread_mutex_unlock(&id->lock);
	*out = id;
	return 0;
}

uint32_t cep_cm_id_local_comm_id(const struct cep_cm_id *id)
{
	return id ? id->cm->ops->id_local_comm_id(id) : 0;
}

uint32_t cm_local_id_local_comm_id(const struct cep_cm_id *id)
{
	return cep_local_comm_id(id->cep);
}

uint32_t cep_cm_id_remote_comm_id(struct cep_cm_id *id)
{
	return id ? id->cm->ops->id_remote_comm_id(id) : 0;
}

uint32_t cm_local_id_remote_comm_id(struct cep_cm_id *id)
{
	uint32_t r;

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
	return id ? id->cm->ops->id_state(id) : CEP_CM_IDLE;
}

enum cep_cm_state cm_local_id_state(struct cep_cm_id *id)
{
	enum cep_cm_state s;

	pthread_mutex_lock(&id->lock);
	s = (enum cep_cm_state)id->state;
	pthread_mutex_unlock(&id->lock);
	return s;
}

enum cep_cm_lap_state cep_cm_id_lap_state(struct cep_cm_id *id)
{
	return id ? id->cm->ops->id_lap_state(id) : CEP_CM_LAP_IDLE;
}

enum cep_cm_lap_state cm_local_id_lap_state(struct cep_cm_id *id)
{
	enum cep_cm_lap_state s;

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
	if (!id)
		return -EINVAL;
	return id->cm->ops->listen(id, service_id, mask, backlog);
}

int cm_local_listen(struct cep_cm_id *id, uint64_t service_id, uint64_t mask, unsigned backlog)
{
	struct cep *existing = NULL;
	int ret;

	if (mask == 0)
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
			atomic_store_explicit(&id->lis.untaken, 0, memory_order_relaxed);
			atomic_store_explicit(&id->lis.svc_fx, 0, memory_order_relaxed);
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
void cm_destroy_act(struct cep_cm_id *id)
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

/* Lock held, F_LINGER, the destroy's act done: the longest, in ms of the
 * context's clock, that what it started may still hold the core CEP - the
 * timer armed now (a DREQ retry, timewait), the DREQ's retries left and
 * the timewait after them. A bound, not a forecast: a DREP ends it
 * sooner. 0 when the CEP is already gone. */
static uint64_t linger_bound_ms(struct cep_cm_id *id)
{
	uint64_t now = cep_clock_ms(id->cm->clock), ms = 0;

	if (cep_is_destroyed(id->cep))
		return 0;
	if (id->deadline > now)
		ms = id->deadline - now;
	if (id->state == CEP_CM_DREQ_SENT)
		ms += (uint64_t)id->retries_left * id->timeout_ms + cm_ms(id->path_timeout);
	return ms;
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
int cm_local_destroy_id(struct cep_cm_id *id)
{
	struct cep_cm_channel *ch;

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
	cm_destroy_act(id);
	if (id->waiter && (id->flags & F_LINGER)) /* cep_cm_destroy_id_sync's */
		id->waiter->linger_ms = linger_bound_ms(id);
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

int cep_cm_destroy_id(struct cep_cm_id *id)
{
	if (!id)
		return -EINVAL;
	return id->cm->ops->destroy_id(id);
}

/* Not on a thread that delivers the context's callbacks (it would wait
 * for itself), and not for a channel's id (its DESTROYED is the user's
 * to take). */
int cep_cm_destroy_id_sync(struct cep_cm_id *id)
{
	if (!id)
		return -EINVAL;
	if (id->cm->ops->on_callback_thread(id->cm))
		return -EDEADLK;
	if (id->channel)
		return -EINVAL;
	return id->cm->ops->destroy_id_sync(id);
}

int cm_local_destroy_id_sync(struct cep_cm_id *id)
{
	struct cm_waiter *wt;
	struct timespec ts;
	uint64_t wait_s;
	int ret = 0;

	wt = malloc(sizeof(*wt));
	if (!wt)
		return -ENOMEM;
	pthread_mutex_init(&wt->mtx, NULL);
	pthread_cond_init(&wt->cv, NULL);
	wt->done = 0;
	wt->linger_ms = 0;
	atomic_init(&wt->refs, 2); /* ours and the DESTROYED work's */
	pthread_mutex_lock(&id->lock);
	if ((id->flags & F_USER_GONE) || id->waiter) {
		pthread_mutex_unlock(&id->lock);
		atomic_store(&wt->refs, 1);
		cm_waiter_put(wt);
		return -EALREADY;
	}
	id->waiter = wt;
	pthread_mutex_unlock(&id->lock);
	/* From here the id may be freed once wt->done is set: do not touch it.
	 * linger_ms was written under the id's lock inside the call, on this
	 * thread. */
	cm_local_destroy_id(id);
	wait_s = 10 + wt->linger_ms / 1000 + (wt->linger_ms % 1000 != 0);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)wait_s;
	pthread_mutex_lock(&wt->mtx);
	while (!wt->done && ret == 0)
		ret = -pthread_cond_timedwait(&wt->cv, &wt->mtx, &ts);
	pthread_mutex_unlock(&wt->mtx);
	if (ret) {
		fprintf(stderr, "libcep: cep_cm_destroy_id_sync: DESTROYED not handled "
			"after %llu s (a worker stalled in a callback?)\n",
			(unsigned long long)wait_s);
		ret = -ETIMEDOUT;
	}
	cm_waiter_put(wt); /* the worker frees it if it comes later */
	return ret;
}
