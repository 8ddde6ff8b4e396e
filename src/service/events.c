/* SPDX-License-Identifier: MIT */
/*
 * cepd's events: the engine's callback for every client id (sid_handler,
 * on the CM workers) and the queue of EVENTS messages to each client.
 *
 * Guarantees: events go out from the CM worker that delivers them, never
 * blocking it: appended to the client's queue, sent by whichever worker
 * finds no flush running (so events that wait while one is sent go out
 * together, one EVENTS message); a client that does not read has its
 * queue grow to its limit or its uid's (acct.h, event bytes) and is
 * then dropped. Queued events that no worker is about to send (one held
 * for the event that should follow it, a full socket) put their client
 * on the pending list, which the main thread looks at every PEND_LOOK_MS
 * while it is not empty (pend_look): no thread wakes for a client that
 * has nothing queued.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "service/cepd.h"


/* ---- events out ---------------------------------------------------------- */

/* c->lk held, c->flushing ours. Send queued chunks; with the lock dropped
 * around each send. A full socket leaves the rest queued (c->blocked) for
 * the client's thread to send when it drains. */
void flush_locked(struct client *c)
{
	struct chunk *k;

	while ((k = c->qhead) != NULL) {
		ssize_t n;

		c->qhead = k->next;
		if (!c->qhead)
			c->qtail = NULL;
		pthread_mutex_unlock(&c->lk);
		((struct cepd_events *)k->buf)->h.len = (uint32_t)k->len;
		((struct cepd_events *)k->buf)->count = k->count;
		do
			n = send(c->fd, k->buf, k->len, MSG_DONTWAIT | MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		pthread_mutex_lock(&c->lk);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			k->next = c->qhead;
			c->qhead = k;
			if (!c->qtail)
				c->qtail = k;
			c->blocked = 1;
			client_pend(c);
			return;
		}
		if (n < 0) /* the client is going: its thread sees it */
			atomic_fetch_add_explicit(&c->events_dropped, k->count,
						  memory_order_relaxed);
		free(k);
		c->qbytes -= sizeof(*k);
		acct_uncharge(c->acct, ACCT_EVENT_BYTES, sizeof(*k));
	}
}

void flush_now(struct client *c)
{
	c->flushing = 1;
	flush_locked(c);
	c->flushing = 0;
}

/* ---- the pending list ------------------------------------------------------ */

/* Set on the main thread while pend_look sends: what it puts back on the
 * list waits for its next look, without a kick to itself. */
static _Thread_local int tl_looking;

void client_pend(struct client *c)
{
	int kick = 0;

	/* Already on the list (the usual case while events are held under
	 * load): nothing to do. Relaxed is enough under c->lk: pend_look
	 * clears the mark before it takes c->lk to send, so either that
	 * clear happened before our lock (its unlock orders it: we read 0)
	 * or its send comes after our unlock and takes what we queued. */
	if (atomic_load_explicit(&c->pending, memory_order_relaxed))
		return;
	pthread_mutex_lock(&svc.pend_lk);
	if (!atomic_load_explicit(&c->pending, memory_order_relaxed) && !svc.pend_closed) {
		atomic_store_explicit(&c->pending, 1, memory_order_relaxed);
		/* relaxed: the caller holds a reference (a sid's, the client
		 * thread's, or the list's own in pend_look) */
		atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
		kick = !svc.pend && !tl_looking;
		c->pend_next = svc.pend;
		svc.pend = c;
	}
	pthread_mutex_unlock(&svc.pend_lk);
	/* once per empty -> not empty: the main thread starts its timeout */
	if (kick)
		(void)eventfd_write(svc.pend_efd, 1);
}

/* Detach the list: its clients stay marked pending (their links ours)
 * until next_of takes each. */
static struct client *pend_take_all(int close)
{
	struct client *list;

	pthread_mutex_lock(&svc.pend_lk);
	list = svc.pend;
	svc.pend = NULL;
	if (close)
		svc.pend_closed = 1;
	pthread_mutex_unlock(&svc.pend_lk);
	return list;
}

/* @c of a detached list: its successor, read before its pending flag is
 * cleared (from then on client_pend may link it anew). */
static struct client *next_of(struct client *c)
{
	struct client *next;

	pthread_mutex_lock(&svc.pend_lk);
	next = c->pend_next;
	atomic_store_explicit(&c->pending, 0, memory_order_relaxed);
	pthread_mutex_unlock(&svc.pend_lk);
	return next;
}

int pend_look(void)
{
	struct client *c = pend_take_all(0), *next;
	int more;

	tl_looking = 1;
	for (; c; c = next) {
		next = next_of(c);
		pthread_mutex_lock(&c->lk);
		if (!c->dead && !c->flushing && (c->blocked || c->qhead)) {
			c->blocked = 0;
			flush_now(c); /* a socket still full: back on the list */
		}
		pthread_mutex_unlock(&c->lk);
		client_put(c);
	}
	tl_looking = 0;
	pthread_mutex_lock(&svc.pend_lk);
	more = svc.pend != NULL;
	pthread_mutex_unlock(&svc.pend_lk);
	return more ? PEND_LOOK_MS : -1;
}

void pend_close(void)
{
	struct client *c = pend_take_all(1), *next;

	for (; c; c = next) {
		next = next_of(c);
		client_put(c);
	}
}

/* c->lk held. Append one event record; start a new chunk when the last
 * is full. -ENOMEM, or -ENOBUFS when the client does not read (its
 * socket is full) and its queue or its uid's queues are at their limit
 * (the caller drops the client). A chunk's bytes are charged while it
 * waits. */
static int queue_event(struct client *c, const struct cepd_ev *e, const struct cep_msg *msg)
{
	size_t rec = sizeof(*e) + (e->has_msg ? sizeof(*msg) : 0);
	struct chunk *k = c->qtail;

	rec = (rec + 7) & ~(size_t)7;
	if (c->blocked && c->qbytes > cepd_limits.event_bytes_per_client)
		return -ENOBUFS; /* over already (a block taken while it read) */
	if (!k || k->len + rec > CEPD_MSG_MAX) {
		/* Only a client that does not read (its socket full) is held
		 * to the limits: events wait a moment for any client while
		 * another worker's send runs (or an ESTABLISHED is held back to
		 * go with its REP_RECEIVED), and that costs a block too. */
		if (!c->blocked)
			acct_add(c->acct, ACCT_EVENT_BYTES, sizeof(*k));
		else if (c->qbytes + sizeof(*k) > cepd_limits.event_bytes_per_client ||
			 acct_charge(c->acct, ACCT_EVENT_BYTES, sizeof(*k)))
			return -ENOBUFS;
		k = malloc(sizeof(*k));
		if (!k) {
			acct_uncharge(c->acct, ACCT_EVENT_BYTES, sizeof(*k));
			return -ENOMEM;
		}
		c->qbytes += sizeof(*k);
		k->next = NULL;
		k->count = 0;
		k->len = sizeof(struct cepd_events);
		memset(k->buf, 0, sizeof(struct cepd_events));
		((struct cepd_events *)k->buf)->h.op = CEPD_EVENTS;
		if (c->qtail)
			c->qtail->next = k;
		else
			c->qhead = k;
		c->qtail = k;
	}
	memset(k->buf + k->len, 0, rec);
	memcpy(k->buf + k->len, e, sizeof(*e));
	((struct cepd_ev *)(k->buf + k->len))->len = (uint32_t)rec;
	if (e->has_msg && msg) /* has_msg implies msg; the test is for the compiler */
		memcpy(k->buf + k->len + sizeof(*e), msg, sizeof(*msg));
	k->len += rec;
	k->count++;
	return 0;
}


/* c->lk held. Queue @e and send what is queued unless a flush runs, or
 * @hold: another event follows at once on this worker (it sends both). */
static void post_event(struct client *c, const struct cepd_ev *e, const struct cep_msg *msg,
		       int hold)
{
	int ret;

	if (c->dead) {
		atomic_fetch_add_explicit(&c->events_dropped, 1, memory_order_relaxed);
		return;
	}
	ret = queue_event(c, e, msg);
	if (ret) {
		atomic_fetch_add_explicit(&c->events_dropped, 1, memory_order_relaxed);
		client_kill_locked(c, ret == -ENOBUFS ? "does not read its events: dropped"
						      : "out of memory for its events: dropped");
		return;
	}
	atomic_fetch_add_explicit(&c->events, 1, memory_order_relaxed);
	if (c->flushing || c->blocked) /* the flusher sends it; a full
					* socket: pending already */
		return;
	if (hold) {
		/* the event that follows sends both; should it never come,
		 * the main thread's look does */
		client_pend(c);
		return;
	}
	flush_now(c);
}

void post_simple_event(struct client *c, uint32_t type, uint32_t h, uint32_t local_comm_id)
{
	struct cepd_ev r;

	memset(&r, 0, sizeof(r));
	r.type = type;
	r.handle = h;
	r.local_comm_id = local_comm_id;
	post_event(c, &r, NULL, 0);
}

/* ---- the engine's callback ---------------------------------------------- */

static void fill_event(struct cepd_ev *r, const struct cep_cm_event *ev, struct cep_cm_id *id)
{
	memset(r, 0, sizeof(*r));
	r->type = ev->type;
	r->status = ev->status;
	r->local_comm_id = cep_cm_id_local_comm_id(id);
	r->from = ev->from;
	if (ev->msg.type != CEP_MSG_INVALID) {
		r->has_msg = 1;
		if (ev->private_data) {
			r->has_pd = 1;
			r->pd_off = (uint16_t)(ev->private_data - (const uint8_t *)&ev->msg);
			r->pd_len = (uint16_t)ev->private_data_len;
		}
	}
}

/* On a CM worker of the client's port, no libcep lock held (cep/cm.h). A
 * new passive id gets a sid of its own at once (so its DESTROYED, which
 * names that sid, never frees the listener's); one whose client is gone
 * stays an orphan and is destroyed by the return value (REJ). */
int sid_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct sid *s = ev->context;
	struct client *c = s->c;
	struct cepd_ev r;
	int destroy = 0;

	fill_event(&r, ev, id);
	if (ev->type == CEP_CM_EV_REQ_RECEIVED || ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED) {
		struct sid *ls = s;
		struct sid *ns;

		/* under c->lk: a live client's account exists (its thread drops
		 * its count only after marking it dead under this lock) */
		pthread_mutex_lock(&c->lk);
		ns = c->dead || ls->gone ? NULL : sid_new(c, id);
		if (!ns) {
			/* the engine rejects (the client is gone, or its uid is
			 * at its limit, or no memory); the child's DESTROYED
			 * names the listener's sid: see below */
			pthread_mutex_unlock(&c->lk);
			return 1;
		}
		cep_cm_id_set_context(id, ns);
		if (handle_add(c, ns)) {
			ns->handle = 0;
			destroy = 1;
		} else {
			r.handle = ns->handle;
			r.listen_handle = ls->handle;
			post_event(c, &r, &ev->msg, 0);
		}
		pthread_mutex_unlock(&c->lk);
		return destroy;
	}
	if (ev->type == CEP_CM_EV_DESTROYED && s->id != id)
		return 0; /* a child refused for want of memory: never had a sid */
	pthread_mutex_lock(&c->lk);
	if (ev->type == CEP_CM_EV_DESTROYED) {
		/* the engine holds nothing more of the id. A client's
		 * DESTROY_ID sent the client its DESTROYED and dropped the
		 * handle already (s->requested); otherwise (its client died)
		 * the handle goes now */
		if (s->handle && !s->requested) {
			r.handle = s->handle;
			post_event(c, &r, &ev->msg, 0);
			handle_del(c, s->handle);
			s->handle = 0;
		}
		pthread_mutex_unlock(&c->lk);
		sid_free(s);
		return 0;
	}
	if (s->handle && !s->gone) {
		r.handle = s->handle;
		/* REP_RECEIVED of an automatic RTU: ESTABLISHED follows on this
		 * worker before anything else of the id; one message for both */
		post_event(c, &r, &ev->msg, ev->type == CEP_CM_EV_REP_RECEIVED && s->auto_rtu);
	}
	pthread_mutex_unlock(&c->lk);
	return 0;
}
