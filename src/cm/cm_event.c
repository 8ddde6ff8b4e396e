/* SPDX-License-Identifier: MIT */
/*
 * CM events: the one delivery path of every event but DESTROYED (cm_emit:
 * a callback on the owning worker, or a copy queued on the id's channel),
 * the event builders, DESTROYED's posting; and the event channels: a
 * mutex-protected FIFO of event copies and an eventfd
 * that is readable exactly while the FIFO is not empty (both changed under
 * the channel mutex). Each queued event holds its id (a reference on its
 * CEP, or on an attached context's id: the table's event_hold, cm_ops.h),
 * dropped by cep_cm_ack_event(), so the id outlives every event about it;
 * an event taken and not acked is counted in its context (cm->taken), so
 * the context outlives it too (cep_cm_destroy refuses meanwhile).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cm_internal.h"
#include "cm/lead.h"
#include "core/table_internal.h"

struct chan_ev {
	struct cep_cm_event ev;   /* first: cep_cm_ack_event casts back */
	struct chan_ev *next;
	struct cep_cm_channel *ch;
	struct cep_cm *cm;        /* ev.id's context: alive while the event is
				     queued (its destroy purges it) or taken */
};

int cep_cm_channel_create(struct cep_cm_channel **out)
{
	struct cep_cm_channel *ch;

	if (!out)
		return -EINVAL;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	ch->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ch->efd < 0) {
		int e = -errno;

		free(ch);
		return e;
	}
	pthread_mutex_init(&ch->mtx, NULL);
	*out = ch;
	return 0;
}

int cep_cm_channel_destroy(struct cep_cm_channel *ch)
{
	int busy;

	if (!ch)
		return -EINVAL;
	pthread_mutex_lock(&ch->mtx);
	busy = ch->queued != 0 || atomic_load(&ch->users) != 0;
	pthread_mutex_unlock(&ch->mtx);
	if (busy)
		return -EBUSY;
	close(ch->efd);
	pthread_mutex_destroy(&ch->mtx);
	free(ch);
	return 0;
}

int cep_cm_channel_fd(const struct cep_cm_channel *ch)
{
	return ch ? ch->efd : -EINVAL;
}

int cm_channel_push(struct cep_cm_channel *ch, const struct cep_cm_event *ev)
{
	struct chan_ev *e = malloc(sizeof(*e));

	if (!e)
		return -ENOMEM;
	e->ev = *ev;
	if (ev->private_data) /* re-point into the copy */
		e->ev.private_data = (const uint8_t *)&e->ev.msg +
			(ev->private_data - (const uint8_t *)&ev->msg);
	e->next = NULL;
	e->ch = ch;
	e->cm = ev->id->cm;
	e->cm->ops->event_hold(ev->id, ev->listen_id);
	pthread_mutex_lock(&ch->mtx);
	if (ch->tail)
		ch->tail->next = e;
	else
		ch->head = e;
	ch->tail = e;
	if (ch->queued++ == 0) {
		uint64_t one = 1;

		if (write(ch->efd, &one, sizeof(one)) < 0) {
			/* cannot overflow from 0: nothing to do */
		}
	}
	pthread_mutex_unlock(&ch->mtx);
	return 0;
}

void cm_local_event_hold(struct cep_cm_id *id, struct cep_cm_id *lid)
{
	cep_get(id->cep);
	if (lid)
		cep_get(lid->cep);
}

/* The user's reference went when the worker queued DESTROYED
 * (cm_id_work_fn): an ack drops the event's alone. */
void cm_local_event_release(struct cep_cm_id *id, struct cep_cm_id *lid, int destroyed_acked)
{
	(void)destroyed_acked;
	cep_put(id->cep);
	if (lid)
		cep_put(lid->cep);
}

/* Drop the references a queued event holds (no channel lock held; its
 * context is alive: the event is queued or taken). */
static void event_free(struct chan_ev *e, int destroyed_acked)
{
	const struct cm_ops *ops = e->cm->ops;
	struct cep_cm_id *id = e->ev.id, *lid = e->ev.listen_id;

	free(e);
	ops->event_release(id, lid, destroyed_acked);
}

void cm_channel_purge(struct cep_cm_channel *ch, struct cep_cm_id *id, int all)
{
	struct chan_ev *gone = NULL, **pp, *e;

	pthread_mutex_lock(&ch->mtx);
	for (pp = &ch->head, ch->tail = NULL; (e = *pp) != NULL;) {
		if (e->ev.id == id && (all || e->ev.type != CEP_CM_EV_DESTROYED)) {
			*pp = e->next;
			e->next = gone;
			gone = e;
			ch->queued--;
			continue;
		}
		ch->tail = e;
		pp = &e->next;
	}
	if (gone && ch->queued == 0) {
		uint64_t v;

		if (read(ch->efd, &v, sizeof(v)) < 0) {
			/* already 0: nothing to do */
		}
	}
	pthread_mutex_unlock(&ch->mtx);
	while (gone) {
		e = gone;
		gone = e->next;
		event_free(e, 0);
	}
}

/* Any thread. The oldest event whose context is not being destroyed: a
 * context's events stay queued, skipped, from the moment its destroy
 * commits until that destroy drops them (under this mutex too), so the
 * context read through e->cm here is alive. */
int cep_cm_get_event(struct cep_cm_channel *ch, struct cep_cm_event **out)
{
	struct chan_ev *e, **pp, *prev = NULL;

	if (!ch || !out)
		return -EINVAL;
	pthread_mutex_lock(&ch->mtx);
	for (pp = &ch->head; (e = *pp) != NULL; prev = e, pp = &e->next)
		if (cm_event_take(e->cm))
			break;
	if (e) {
		*pp = e->next;
		if (ch->tail == e)
			ch->tail = prev;
		if (--ch->queued == 0) {
			uint64_t v;

			if (read(ch->efd, &v, sizeof(v)) < 0) {
				/* already 0: nothing to do */
			}
		}
	}
	pthread_mutex_unlock(&ch->mtx);
	if (!e)
		return -EAGAIN;
	*out = &e->ev;
	return 0;
}

static int channel_ready(void *arg)
{
	struct cep_cm_channel *ch = arg;
	int ready;

	pthread_mutex_lock(&ch->mtx);
	ready = ch->queued != 0;
	pthread_mutex_unlock(&ch->mtx);
	return ready;
}

int cep_cm_channel_wait(struct cep_cm_channel *ch, struct cep_cm *const *cms, unsigned n,
			int timeout_ms)
{
	struct cep_lead *leads[8];
	unsigned nl = 0;

	if (!ch || (n && !cms) || n > 8)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		if (!cms[i])
			return -EINVAL;
		/* a callback (or a worker) of a context would wait for itself */
		if (cms[i]->ops->on_callback_thread(cms[i]))
			return -EDEADLK;
		if (cm_lead(cms[i]))
			leads[nl++] = cm_lead(cms[i]);
	}
	/* the channel's eventfd is readable while an event waits: another
	 * thread's push wakes us there (ours needs no wake-up) */
	return cep_lead_wait(leads, nl, ch->efd, channel_ready, ch, timeout_ms);
}

/* Any thread, no libcep lock held. The event's reference keeps its id
 * (locked below) and cm->taken keeps the context until cm_event_done. */
void cep_cm_ack_event(struct cep_cm_event *ev)
{
	struct chan_ev *e = (struct chan_ev *)ev;
	struct cep_cm *cm;

	if (!ev)
		return;
	cm = e->cm;
	if (ev->type == CEP_CM_EV_DESTROYED) {
		/* the id's last event: it no longer uses the channel */
		pthread_mutex_lock(&ev->id->lock);
		cm_channel_leave(ev->id);
		pthread_mutex_unlock(&ev->id->lock);
	}
	event_free(e, ev->type == CEP_CM_EV_DESTROYED);
	cm_event_done(cm);
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
		cm_destroy_act(id);
		id->flags |= F_DESTROY_DONE;
		cm_maybe_post_destroyed(id);
	}
	return 1;
}

/* cep_cm_stats.ids counts an id until it is destroyed, not until its
 * memory goes a grace period later. Lock held, or the last reference. */
void cm_uncount(struct cep_cm_id *id)
{
	if (!(id->flags & F_UNCOUNTED)) {
		id->flags |= F_UNCOUNTED;
		atomic_fetch_sub_explicit(&id->cm->ids, 1, memory_order_relaxed);
	}
}

/* Not on F_USER_GONE alone: a listener's destroy sets it, then waits with
 * the lock dropped for its children's request events, and the last child
 * to unpin it (cm_listener_release) calls this. DESTROYED posted there
 * would be delivered, and drop the user's reference, before destroy_act.
 * An F_LINGER id (CEP_CM_ID_LINGER) also waits for its core CEP to be
 * destroyed, at the end of its REJ/DREQ exchange and timewait: the one
 * place that happens to a user-gone id, cm_maybe_table_destroy (or
 * destroy_act itself), calls this again. cep_is_destroyed is read under
 * the lock that every cep_destroy of the id's CEP is called under (a
 * bind that loses to a QP's destruction too: connect and accept bind
 * under it), so the two cannot miss each other. */
void cm_maybe_post_destroyed(struct cep_cm_id *id)
{
	if ((id->flags & (F_USER_GONE | F_DESTROY_DONE | F_DESTROYED_POSTED)) ==
	    (F_USER_GONE | F_DESTROY_DONE) && id->lis.req_inflight == 0 &&
	    (!(id->flags & F_LINGER) || cep_is_destroyed(id->cep))) {
		id->flags |= F_DESTROYED_POSTED;
		cm_uncount(id);
		cm_post_bits_lazy(id, W_DESTROYED);
	}
}
