/* SPDX-License-Identifier: MIT */
/*
 * CM engine: contexts. A context is one port's CM: its table, its workers
 * (each with a receive ring and a timer wheel, dispatch.c), its transport.
 * Create, destroy (refused while an event is taken and not acked), the
 * getters, QP registration, quiesce and statistics; the live contexts of
 * both kinds; the engine's table of operations (cm_local_ops, cm_ops.h),
 * which cep_cm_create gives a context and the public functions call
 * through after their common checks. The rest of the engine,
 * by concern: cm_id.c (ids and their destruction), cm_timer.c (work items
 * and timers), cm_send.c, cm_recv.c (the receive path), cm_state.c (shared
 * transitions and lookups), cm_event.c (channels and the one delivery
 * path), cm_util.c (names, helpers); the message handlers: cm_conn.c,
 * cm_lap.c, cm_sidr.c.
 *
 * Each id is owned by worker (local comm ID % N): its MADs, timers and
 * events run there; its protocol fields are guarded by its mutex, which API
 * calls from other threads take too. Events are delivered only on the
 * owning worker, with no lock held. See docs/cm.md.
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
#include "cm/lead.h"
#include "core/table_internal.h"
#include "transport/source.h"

#ifdef CEP_TEST_HOOKS
void (*cm_test_hook)(enum cm_hook_point p, struct cep_cm_id *id, const struct cep_cm_event *ev);
#endif


/* ---- context ------------------------------------------------------------- */

/* Contexts not yet destroyed, local and attached (cm_internal.h).
 * Touched only by create, attach and destroy, which are rare. */
static pthread_mutex_t live_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct cep_cm *live_head;  /* live_mtx */

void cm_live_add(struct cep_cm *cm)
{
	pthread_mutex_lock(&live_mtx);
	cm->live_next = live_head;
	live_head = cm;
	pthread_mutex_unlock(&live_mtx);
}

/* The table of @cm if it is live, else NULL; @cm is read only if it is
 * (a pointer compare first: it need not be valid memory). The table is
 * static, so it outlives a racing destroy of @cm. */
static const struct cm_ops *live_ops(const struct cep_cm *cm)
{
	const struct cm_ops *ops = NULL;

	pthread_mutex_lock(&live_mtx);
	for (struct cep_cm *c = live_head; c && !ops; c = c->live_next)
		if (c == cm)
			ops = c->ops;
	pthread_mutex_unlock(&live_mtx);
	return ops;
}

int cm_live_close(struct cep_cm *cm)
{
	int ret = -EINVAL;

	pthread_mutex_lock(&live_mtx);
	for (struct cep_cm **pp = &live_head; *pp; pp = &(*pp)->live_next) {
		uint32_t none = 0;

		if (*pp != cm)
			continue;
		if (cm->ops->on_callback_thread(cm))
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
	cm->ops = &cm_local_ops;
	cm->tp = attr->transport;
	cm_pace_init(cm);
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
	ta.release = cm_id_release;
	ta.ctx = cm;
	ret = cep_table_create(&ta, &cm->table);
	if (ret)
		goto fail;
	{
		struct cep_transport_source src;

		/* A transport whose queue waiting threads may read (libibumad's):
		 * it runs no receive thread of its own; whoever leads reads it
		 * (lead.h: an application thread in a wait, else a sleeping
		 * worker), so a MAD is handled where it is read. */
		if (cep_transport_drive(cm->tp, &src) == 0) {
			struct cep_lead_source ls = { .fd = src.fd, .drain = src.drain,
						      .ctx = src.ctx };

			ret = cep_lead_create(&ls, &cm->lead);
			if (ret)
				goto fail_table;
		}
	}
	da.workers = cm->nworkers;
	da.queue_depth = attr->queue_depth ? attr->queue_depth : 4096;
	da.ops.mad = cm_mad;
	da.ctx = cm;
	da.clock = cm->clock;
	da.lead = cm->lead;
	ret = cep_dispatch_create(&da, &cm->d);
	if (ret)
		goto fail_lead;
	ret = cm->tp->ops->start(cm->tp, cm_recv, cm);
	if (ret)
		goto fail_dispatch;
	cm_live_add(cm);
	*out = cm;
	return 0;
fail_dispatch:
	cep_dispatch_destroy(cm->d);
fail_lead:
	cep_lead_destroy(cm->lead);
fail_table:
	cep_table_destroy(cm->table);
fail:
	cm_pace_fini(cm);
	free(cm->idl);
	free(cm->ws);
	free(cm);
	return ret;
}

/* cep_cm_destroy, workers stopped and joined, CM_CLOSED (no event of ours
 * is taken, none can be): the user's reference of every id the application
 * did not destroy goes, as if it had (no event: the context is going
 * away), and so does that of every CEP_CM_ID_LINGER id it destroyed whose
 * DESTROYED still waited for its protocol (a cep_cm_destroy_id_sync
 * waiting for it returns); every event of ours still queued on a channel
 * is dropped - never taken, so never seen; DESTROYED of ids the
 * application destroyed too. Every DESTROYED posted before the stop has
 * run (cep_dispatch_stop drains the work items after the join), so the
 * user's reference is held by the ids the application did not destroy and
 * by those it destroyed (F_DESTROY_DONE) whose DESTROYED was not posted:
 * lingering ones. (An id discarded before the user saw it is user-gone
 * without F_DESTROY_DONE, and its reference is gone already.) The list holds ids whose CEP already left the table too. Puts here
 * may end in call_rcu; its release (cm_id_release) takes l->mtx, so every id
 * on the list stays in memory while we hold it. */
static void release_ids(struct cep_cm *cm)
{
	for (unsigned w = 0; w < cm->nworkers; w++) {
		struct cm_idlist *l = &cm->idl[w];

		pthread_mutex_lock(&l->mtx);
		for (struct cep_cm_id *id = l->head; id; id = id->all_next) {
			struct cm_waiter *wt;
			int user;

			pthread_mutex_lock(&id->lock);
			user = !(id->flags & F_USER_GONE) ||
			       (id->flags & (F_DESTROY_DONE | F_DESTROYED_POSTED)) == F_DESTROY_DONE;
			id->flags |= F_USER_GONE | F_DESTROYED_POSTED;
			wt = id->waiter; /* a lingering id's cep_cm_destroy_id_sync */
			id->waiter = NULL;
			if (id->listener)
				cm_half_open_end(id);
			/* Its events are on id->channel only, which lives while
			 * the id counts in its users: empty it, then leave it
			 * (no DESTROYED will be acked, or the channel would stay
			 * -EBUSY for ever). */
			if (id->flags & F_CHANNEL_USER) {
				cm_channel_purge(id->channel, id, 1);
				cm_channel_leave(id);
			}
			pthread_mutex_unlock(&id->lock);
			if (wt) {
				pthread_mutex_lock(&wt->mtx);
				wt->done = 1;
				pthread_cond_broadcast(&wt->cv);
				pthread_mutex_unlock(&wt->mtx);
				cm_waiter_put(wt); /* the DESTROYED work's, which never runs */
			}
			if (user)
				cm_id_put(id);
		}
		pthread_mutex_unlock(&l->mtx);
	}
}

/* Refuse while an event is taken and not acked, rather than wait (a thread
 * that acks after destroy would hang) or free what it points to (the ack's
 * put would run cm_id_release on a freed context): cm.h, docs/cm.md. */
static int cm_local_destroy(struct cep_cm *cm)
{
	int ret;

	/* Found first: a destroyed context's memory is not read. The check
	 * and the removal are one step, so two racing calls get one 0. */
	ret = cm_live_close(cm);
	if (ret)
		return ret;
	/* No application thread reads the queue from here (one waiting in
	 * it lets it go); the workers stop reading it with their stop. */
	if (cm->lead)
		cep_lead_close(cm->lead);
	cm->tp->ops->stop(cm->tp);
	if (cep_dispatch_quiesce(cm->d, 5000))
		fprintf(stderr, "libcep: cep_cm_destroy: workers still busy after 5 s "
			"(a callback blocking?); stopping them anyway\n");
	atomic_store(&cm->stopping, 1);
	cep_dispatch_stop(cm->d, cm_drain_timer, cm);
	/* Workers are joined: drop the user's reference of every id the
	 * application did not destroy and every queued event, so the table
	 * can free them all. */
	release_ids(cm);
	ret = cep_table_destroy(cm->table);
	cep_dispatch_destroy(cm->d);
	cep_lead_destroy(cm->lead);
	cm->lead = NULL;
	if (ret) {
		/* A core CEP still referenced: only the application can hold
		 * one (cep_lookup_* on cep_cm_table() not put). The table is
		 * kept, and so is what its release (cm_id_release) touches. */
		fprintf(stderr, "libcep: cep_cm_destroy: a CEP of the context's table is still "
			"referenced (cep_lookup_* without cep_put?): leaking the context\n");
		return -ENOTEMPTY;
	}
	for (unsigned i = 0; i < cm->nworkers; i++)
		pthread_mutex_destroy(&cm->idl[i].mtx);
	cm_pace_fini(cm); /* the windows of REQs its ids left waiting */
	free(cm->idl);
	free(cm->ws);
	free(cm);
	return 0;
}

/* Found live first, of either kind: a stray pointer's memory is not
 * read, and its table says how it is destroyed. */
int cep_cm_destroy(struct cep_cm *cm)
{
	const struct cm_ops *ops = live_ops(cm);

	return ops ? ops->destroy(cm) : -EINVAL;
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

static int cm_local_on_callback_thread(const struct cep_cm *cm)
{
	return cep_dispatch_self(cm->d) >= 0;
}

static int cm_local_qp_register(struct cep_cm *cm, uint32_t qpn)
{
	return cep_qp_register(cm->table, qpn);
}

static int cm_local_qp_destroy(struct cep_cm *cm, uint32_t qpn)
{
	int ret = cep_qp_destroy_begin(cm->table, qpn, NULL);

	if (ret)
		return ret;
	return cep_qp_unregister(cm->table, qpn);
}

static int cm_local_quiesce(struct cep_cm *cm, unsigned timeout_ms)
{
	return cep_dispatch_quiesce(cm->d, timeout_ms);
}

static int cm_local_get_stats(struct cep_cm *cm, struct cep_cm_stats *st)
{
	struct cep_cm_stats all;
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

/* ---- the public functions of the context: common checks, then the table */

int cep_cm_qp_register(struct cep_cm *cm, uint32_t qpn)
{
	if (!cm || qpn > 0xffffff)
		return -EINVAL;
	return cm->ops->qp_register(cm, qpn);
}

int cep_cm_qp_destroy(struct cep_cm *cm, uint32_t qpn)
{
	if (!cm)
		return -EINVAL;
	return cm->ops->qp_destroy(cm, qpn);
}

int cm_qp_register_nowait(struct cep_cm *cm, uint32_t qpn)
{
	if (!cm || qpn > 0xffffff)
		return -EINVAL;
	return cm->ops->qp_register_nowait(cm, qpn);
}

int cm_qp_destroy_nowait(struct cep_cm *cm, uint32_t qpn)
{
	if (!cm)
		return -EINVAL;
	return cm->ops->qp_destroy_nowait(cm, qpn);
}

int cep_cm_quiesce(struct cep_cm *cm, unsigned timeout_ms)
{
	if (!cm)
		return -EINVAL;
	if (cm->ops->on_callback_thread(cm))
		return -EDEADLK;
	return cm->ops->quiesce(cm, timeout_ms);
}

int cep_cm_get_stats(struct cep_cm *cm, struct cep_cm_stats *st)
{
	/* libcep 0.2's struct ended with ids: fill what the caller has */
	if (!cm || !st || st->size < offsetof(struct cep_cm_stats, half_open_expired))
		return -EINVAL;
	return cm->ops->get_stats(cm, st);
}

/* ---- the engine's table ------------------------------------------------- */

const struct cm_ops cm_local_ops = {
	.destroy = cm_local_destroy,
	.on_callback_thread = cm_local_on_callback_thread,
	.qp_register = cm_local_qp_register,
	.qp_register_nowait = cm_local_qp_register, /* done when it returns */
	.qp_destroy = cm_local_qp_destroy,
	.qp_destroy_nowait = cm_local_qp_destroy, /* done when it returns */
	.quiesce = cm_local_quiesce,
	.get_stats = cm_local_get_stats,
	.create_id = cm_local_create_id,
	.destroy_id = cm_local_destroy_id,
	.destroy_id_sync = cm_local_destroy_id_sync,
	.id_local_comm_id = cm_local_id_local_comm_id,
	.id_remote_comm_id = cm_local_id_remote_comm_id,
	.id_state = cm_local_id_state,
	.id_lap_state = cm_local_id_lap_state,
	.listen = cm_local_listen,
	.connect = cm_local_connect,
	.connect_nowait = cm_local_connect, /* answered at once anyway */
	.accept = cm_local_accept,
	.accept_nowait = cm_local_accept, /* answered at once anyway */
	.rtu = cm_local_rtu,
	.rtu_nowait = cm_local_rtu_nowait,
	.notify_established = cm_local_notify_established,
	.reject = cm_local_reject,
	.mra = cm_local_mra,
	.disconnect = cm_local_disconnect,
	.disconnect_nowait = cm_local_disconnect_nowait,
	.drep = cm_local_drep,
	.lap = cm_local_lap,
	.apr = cm_local_apr,
	.migrate = cm_local_migrate,
	.sidr_req = cm_local_sidr_req,
	.sidr_rep = cm_local_sidr_rep,
	.request_taken = cm_local_request_taken,
	.request_drop = cm_local_request_drop,
	.event_hold = cm_local_event_hold,
	.event_release = cm_local_event_release,
#ifdef CEP_HAVE_VERBS /* src/verbs/verbs.c, built with libibverbs */
	.init_qp_attr = cm_local_init_qp_attr,
	.qp_event = cm_local_qp_event,
#endif
};
