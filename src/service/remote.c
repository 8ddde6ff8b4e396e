/* SPDX-License-Identifier: MIT */
/*
 * The client of cepd, compiled into libcep (not into cepd): the attached
 * CM context. cep_cm_attach() gives a context this file's table of
 * operations (cmr_ops, src/cm/cm_ops.h), so every cep_cm_* call on it is
 * a request to cepd over one Unix SOCK_SEQPACKET connection in the
 * protocol of proto.h, after the checks the public function makes for
 * both kinds. It lives beside the service it speaks to; it uses the
 * engine's channels and context list (cm/cm_internal.h), an arrow down.
 *
 * Guarantees (the local context's contracts, cep/cm.h):
 * - Each call is one request and its reply; any number of threads may
 *   have calls in flight (the reply names its request's sequence number).
 *   A call returns the engine's answer, or -ECONNRESET once the service has
 *   gone (socket closed: cepd exited, was killed, restarted): never a hang.
 * - Events: one library thread (the reader) receives every message: it
 *   wakes the call a reply answers, puts channel ids' events on their
 *   channel (fd readable, get/ack as local) and queues handler ids' events
 *   for a second thread (the callback thread), which runs the callbacks one
 *   at a time in the order the service sent them. The reader takes no
 *   application lock, so a reply always gets through: a callback may call
 *   any function, and wait for a lock an application thread holds across a
 *   call, as on a local context.
 * - After cep_cm_destroy_id() no event of the id but DESTROYED reaches the
 *   user; from a thread that is not the callback thread it first waits for a running
 *   callback of the id. DESTROYED is an id's last event; the id's memory
 *   stays until DESTROYED was handled (or acked) and no queued event and no
 *   call in flight names it.
 * - When the service goes: every call then fails with -ECONNRESET, every
 *   id in a connection's course gets its error event with status
 *   -ECONNRESET (REQ_ERROR before a REP of ours, REP_ERROR after it,
 *   DREQ_ERROR once established, SIDR_REQ_ERROR), every id the user
 *   destroyed whose DESTROYED had not come gets it (made here), and
 *   cep_cm_destroy_id() still works (0 and a DESTROYED made here): each
 *   id's DESTROYED exactly once, so an application that waits for events
 *   wakes up and can clean up (and its channels can be destroyed).
 * - cep_cm_destroy() closes the connection: the service ends this
 *   client's ids as it does a dead client's (REJ, DREQ, listeners gone)
 *   and frees its QPs; no event reaches the user once it has decided
 *   (a callback already running finishes first), and the memory is
 *   freed. Of racing calls on one context exactly one does it; the
 *   others get -EINVAL (not live), as on a local context.
 * - cep_cm_attach() waits at most its timeout (default 10 s) for the
 *   service: its connect (a full accept backlog) and the HELLO's answer.
 *   The HELLO tells cepd who we are by credentials it cannot be fooled by
 *   and a pidfd that cannot be recycled (cmr_hello_send, proto.h).
 *
 * Locks: r->lk (calls, the handle map, the pending-event queue, each rid's
 * delivering/done/phase) nests outside a channel's mutex; id.lock is taken
 * only by cm_event.c's ack (cm_channel_leave) and the context getters.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cm/cm_internal.h"
#include "service/proto.h"
#include "service/remote.h"

/* Coarse course of a connection, as far as this side saw it: what error
 * event the service's death gives the id. */
enum {
	PH_IDLE, PH_LISTEN, PH_REQ_SENT, PH_REQ_RCVD, PH_REP_SENT, PH_REP_RCVD,
	PH_EST, PH_SIDR_SENT, PH_SIDR_RCVD,
};

struct cmr;

struct rid {
	struct cep_cm_id id;     /* first: a cep_cm_id * is a rid * (id.cep NULL) */
	struct cmr *r;
	uint32_t handle;         /* r->lk: 0 until cepd made the id (its first
				    request carries CEPD_F_CREATE), then const */
	uint32_t local_comm_id;  /* as handle */
	_Atomic int refs;        /* user + queued events + calls in flight */
	uint8_t phase;           /* r->lk */
	uint8_t destroyed;       /* r->lk: DESTROYED received or made */
	uint8_t delivering;      /* r->lk: the callback thread runs its callback */
	uint8_t done;            /* r->lk: DESTROYED handled (destroy_id_sync) */
	uint8_t hidden;          /* r->lk: never the user's (a child of a listener
				    destroyed before its REQ came) */
	uint8_t gone;            /* r->lk: cep_cm_destroy_id called */
	uint8_t creating;        /* r->lk: a request that makes it is in flight */
	struct rid *all_next, *all_prev; /* r->lk: every id of r until freed */
};

/* An event waiting for the callback thread to run its callback. */
struct pev {
	struct pev *next;
	struct cep_cm_event ev;
};

struct call {
	struct call *next;
	struct rid *made;        /* a CEPD_F_CREATE request's id */
	uint64_t seq;
	pthread_cond_t cv;
	int done, ret;
	void *out;
	size_t outlen;
};

struct cmr {
	struct cep_cm cm;        /* first: cm.ops &cmr_ops, cm.tp NULL; nworkers,
				    ca_guid, port, taken, live_next */
	int fd;
	pthread_t reader;        /* receives: replies, events (never blocks on
				    the application: callbacks are not its) */
	pthread_t deliverer;     /* runs handler callbacks, in order */
	pthread_mutex_t lk;
	pthread_cond_t cv;       /* lk: delivering ends, DESTROYED done, local work */
	struct call *calls;      /* lk */
	uint64_t seq;            /* lk */
	struct rid **map;        /* lk: by handle index (proto: low 20 bits) */
	struct rid *all;         /* lk: every rid not yet freed */
	uint32_t mapcap;         /* lk */
	struct pev *qhead, *qtail; /* lk */
	struct park *parked;     /* lk: events for a handle not known yet (an id
				    whose creating request's reply is on its
				    way), newest first */
	unsigned creating;       /* lk: such requests in flight */
	int dead;                /* lk: the service has gone */
	int closing;             /* lk: cep_cm_destroy has decided: no event
				    reaches the user any more, the callback
				    thread ends */
	uint8_t *rbuf;           /* the reader's buffer */
};

#define HIDX(h) ((h) & 0xfffffu)

/* The context whose callback thread this is (its callbacks run here). */
static _Thread_local struct cmr *cb_self;

#ifdef CEP_TEST_HOOKS
void (*cmr_test_hook)(enum cmr_hook_point p, struct cep_cm *cm);
#endif

static struct cmr *R(struct cep_cm *cm)
{
	return (struct cmr *)cm;
}

static struct rid *RID(struct cep_cm_id *id)
{
	return (struct rid *)id;
}

static void cmr_id_get(struct cep_cm_id *id)
{
	atomic_fetch_add_explicit(&RID(id)->refs, 1, memory_order_relaxed);
}

/* r->lk held; the last reference is gone. */
static void rid_free_locked(struct rid *d)
{
	if (d->all_prev)
		d->all_prev->all_next = d->all_next;
	else
		d->r->all = d->all_next;
	if (d->all_next)
		d->all_next->all_prev = d->all_prev;
	pthread_mutex_destroy(&d->id.lock);
	free(d);
}

/* r->lk held. */
static void rid_put_locked(struct rid *d)
{
	if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1)
		rid_free_locked(d);
}

/* r->lk not held. */
static void cmr_id_put(struct cep_cm_id *id)
{
	struct rid *d = RID(id);
	struct cmr *r = d->r;

	/* acq_rel: every use by a dropper happens before the free */
	if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_mutex_lock(&r->lk);
	rid_free_locked(d);
	pthread_mutex_unlock(&r->lk);
}

/* Whether the user has destroyed @id (its calls are then -EINVAL). */
static int id_gone(struct cep_cm_id *id)
{
	struct cmr *r = RID(id)->r;
	int g;

	pthread_mutex_lock(&r->lk);
	g = RID(id)->gone;
	pthread_mutex_unlock(&r->lk);
	return g;
}

/* r->lk held. */
static struct rid *map_get(struct cmr *r, uint32_t h)
{
	struct rid *d;

	if (!h || HIDX(h) >= r->mapcap)
		return NULL;
	d = r->map[HIDX(h)];
	return d && d->handle == h ? d : NULL;
}

/* r->lk held. 0 or -ENOMEM. */
static int map_put(struct cmr *r, struct rid *d)
{
	uint32_t i = HIDX(d->handle);

	if (i >= r->mapcap) {
		uint32_t ncap = r->mapcap ? r->mapcap : 64;
		struct rid **nm;

		while (ncap <= i)
			ncap *= 2;
		nm = realloc(r->map, ncap * sizeof(*nm));
		if (!nm)
			return -ENOMEM;
		memset(nm + r->mapcap, 0, (ncap - r->mapcap) * sizeof(*nm));
		r->map = nm;
		r->mapcap = ncap;
	}
	r->map[i] = d;
	return 0;
}

/* r->lk held. */
static struct rid *rid_new(struct cmr *r, uint32_t handle, uint32_t lcid, cep_cm_handler h,
			   struct cep_cm_channel *ch, void *ctx)
{
	struct rid *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	pthread_mutex_init(&d->id.lock, NULL);
	d->id.cm = &r->cm;
	d->id.handler = h;
	d->id.channel = ch;
	d->id.context = ctx;
	d->r = r;
	d->handle = handle;
	d->local_comm_id = lcid;
	atomic_init(&d->refs, 1);
	d->all_next = r->all;
	if (r->all)
		r->all->all_prev = d;
	r->all = d;
	if (ch) {
		d->id.flags |= F_CHANNEL_USER;
		atomic_fetch_add(&ch->users, 1);
	}
	return d;
}

/* ---- receiving ---------------------------------------------------------- */

static void set_phase(struct rid *d, unsigned type)
{
	switch (type) {
	case CEP_CM_EV_REQ_RECEIVED: d->phase = PH_REQ_RCVD; break;
	case CEP_CM_EV_SIDR_REQ_RECEIVED: d->phase = PH_SIDR_RCVD; break;
	case CEP_CM_EV_REP_RECEIVED: d->phase = PH_REP_RCVD; break;
	case CEP_CM_EV_RTU_RECEIVED: case CEP_CM_EV_ESTABLISHED:
	case CEP_CM_EV_DREQ_RECEIVED:
		d->phase = PH_EST;
		break;
	case CEP_CM_EV_REQ_ERROR: case CEP_CM_EV_REP_ERROR: case CEP_CM_EV_REJ_RECEIVED:
	case CEP_CM_EV_DREQ_ERROR: case CEP_CM_EV_DREP_RECEIVED: case CEP_CM_EV_TIMEWAIT_EXIT:
	case CEP_CM_EV_SIDR_REQ_ERROR: case CEP_CM_EV_SIDR_REP_RECEIVED:
	case CEP_CM_EV_QP_DESTROYED: case CEP_CM_EV_DESTROYED:
		d->phase = PH_IDLE;
		break;
	default:
		break;
	}
}

/* r->lk held. Hand @ev (about d) on: to its channel, or to the queue the
 * callback thread delivers from. A reference on d (and the listener) goes
 * with it.
 * Events of an id the user destroyed are dropped, DESTROYED excepted. */
static void route_event(struct cmr *r, struct rid *d, const struct cep_cm_event *ev)
{
	struct pev *p;

	if (ev->type == CEP_CM_EV_DESTROYED)
		d->destroyed = 1;
	else
		set_phase(d, ev->type);
	if (r->closing)
		return; /* cep_cm_destroy has decided: nothing more for the user;
			   it frees every id itself */
	if (d->hidden) {
		if (ev->type == CEP_CM_EV_DESTROYED) { /* the user never had it */
			r->map[HIDX(d->handle)] = NULL;
			rid_put_locked(d);
		}
		return;
	}
	if (d->gone && ev->type != CEP_CM_EV_DESTROYED)
		return;
	if (ev->type == CEP_CM_EV_DESTROYED && d->handle && r->map &&
	    HIDX(d->handle) < r->mapcap && r->map[HIDX(d->handle)] == d)
		r->map[HIDX(d->handle)] = NULL;
	if (d->id.channel) {
		if (cm_channel_push(d->id.channel, ev))
			fprintf(stderr, "libcep: remote CM: out of memory: %s of an id lost\n",
				cep_cm_event_name(ev->type));
		return;
	}
	p = malloc(sizeof(*p));
	if (!p) {
		fprintf(stderr, "libcep: remote CM: out of memory: %s of an id lost\n",
			cep_cm_event_name(ev->type));
		return;
	}
	p->next = NULL;
	p->ev = *ev;
	if (ev->private_data)
		p->ev.private_data = (const uint8_t *)&p->ev.msg +
			(ev->private_data - (const uint8_t *)&ev->msg);
	cmr_id_get(ev->id);
	if (ev->listen_id)
		cmr_id_get(ev->listen_id);
	if (r->qtail)
		r->qtail->next = p;
	else
		r->qhead = p;
	r->qtail = p;
	pthread_cond_broadcast(&r->cv); /* the callback thread waits on it */
}

static void send_async_destroy(struct cmr *r, uint32_t handle)
{
	struct cepd_req q;

	memset(&q, 0, sizeof(q));
	q.h.op = CEPD_DESTROY_ID;
	q.h.len = sizeof(q);
	q.h.seq = 0; /* its reply matches no call and is dropped */
	q.handle = handle;
	(void)send(r->fd, &q, sizeof(q), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* An event record kept until the id it names is known (see take_one). */
struct park {
	struct park *next;
	uint32_t key;            /* the handle it waits for */
	struct cepd_ev e;
	struct cep_msg msg;
};

static void unpark(struct cmr *r, uint32_t handle);

/* r->lk held. Keep @e for when @key is known, if a creating request is on
 * its way (the id it makes may be the one); else it names nothing of ours. */
static void park(struct cmr *r, uint32_t key, const struct cepd_ev *e, const struct cep_msg *msg)
{
	struct park *p;

	if (!r->creating)
		return;
	p = malloc(sizeof(*p));
	if (!p) {
		fprintf(stderr, "libcep: remote CM: out of memory: an event lost\n");
		return;
	}
	p->key = key;
	p->e = *e;
	p->msg = *msg;
	p->next = r->parked;
	r->parked = p;
}

/* r->lk held. One checked event record: to its id, or (a REQ) a new id
 * under its listener. An id made by a request whose reply has not come yet
 * is not known here yet (cepd sends events from its CM workers, the reply
 * from the client's thread): its events, and REQs to such a listener, are
 * parked until the reply names it. */
static void take_one(struct cmr *r, const struct cepd_ev *e, const struct cep_msg *msg)
{
	struct cep_cm_event ev;
	struct rid *d, *l = NULL;

	memset(&ev, 0, sizeof(ev));
	ev.msg = *msg;
	ev.type = e->type;
	ev.status = e->status;
	ev.from = e->from;
	if (!e->has_msg)
		ev.msg.type = CEP_MSG_INVALID;
	if (e->has_pd) {
		ev.private_data = (const uint8_t *)&ev.msg + e->pd_off;
		ev.private_data_len = e->pd_len;
	}
	if (e->type == CEP_CM_EV_REQ_RECEIVED || e->type == CEP_CM_EV_SIDR_REQ_RECEIVED) {
		l = map_get(r, e->listen_handle);
		if (!l) {
			park(r, e->listen_handle, e, msg);
			return;
		}
		if (map_get(r, e->handle))
			return;
		d = rid_new(r, e->handle, e->local_comm_id, l->id.handler, l->id.channel,
			    l->id.context);
		if (d && map_put(r, d)) {
			if (d->id.flags & F_CHANNEL_USER)
				atomic_fetch_sub(&d->id.channel->users, 1);
			rid_put_locked(d);
			d = NULL;
		}
		if (!d) {
			send_async_destroy(r, e->handle);
			return;
		}
		if (l->gone || l->hidden) {
			/* its listener is gone: end it unseen */
			d->hidden = 1;
			if (d->id.flags & F_CHANNEL_USER) {
				d->id.flags &= (uint16_t)~F_CHANNEL_USER;
				atomic_fetch_sub(&d->id.channel->users, 1);
			}
			send_async_destroy(r, e->handle);
			unpark(r, d->handle);
			return;
		}
		ev.listen_id = &l->id;
	} else {
		d = map_get(r, e->handle);
		if (!d) {
			park(r, e->handle, e, msg);
			return;
		}
	}
	ev.id = &d->id;
	pthread_mutex_lock(&d->id.lock);
	ev.context = d->id.context;
	pthread_mutex_unlock(&d->id.lock);
	route_event(r, d, &ev);
	if (l) /* the new id's own events that were waiting for it */
		unpark(r, d->handle);
}

/* r->lk held: @handle is known now; the records that waited for it go on,
 * oldest first (later ones find it themselves). With no creating request
 * left, what is still parked named nothing of ours. */
static void unpark(struct cmr *r, uint32_t handle)
{
	struct park *mine = NULL, **pp = &r->parked, *p;

	while ((p = *pp) != NULL) {
		if (p->key == handle) {
			*pp = p->next;
			p->next = mine; /* reverses: oldest first */
			mine = p;
		} else {
			pp = &p->next;
		}
	}
	while ((p = mine) != NULL) {
		mine = p->next;
		take_one(r, &p->e, &p->msg);
		free(p);
	}
	if (!r->creating)
		while ((p = r->parked) != NULL) {
			r->parked = p->next;
			free(p);
		}
}

/* One EVENTS message from the service (trusted, but checked: a record
 * that does not fit, names no id of ours or a bad type is skipped). */
static void take_events(struct cmr *r, const uint8_t *buf, size_t len)
{
	const struct cepd_events *m = (const struct cepd_events *)buf;
	size_t off = sizeof(*m);

	if (len < sizeof(*m))
		return;
	pthread_mutex_lock(&r->lk);
	for (uint32_t i = 0; i < m->count; i++) {
		struct cepd_ev e;
		struct cep_msg msg;

		if (len - off < sizeof(e))
			break;
		memcpy(&e, buf + off, sizeof(e));
		if (e.len < sizeof(e) || e.len > len - off ||
		    (e.has_msg && e.len < sizeof(e) + sizeof(struct cep_msg)))
			break;
		memset(&msg, 0, sizeof(msg));
		if (e.has_msg)
			memcpy(&msg, buf + off + sizeof(e), sizeof(msg));
		off += e.len;
		if (e.type >= CEP_CM_EVENT_COUNT || (e.has_msg && msg.type >= CEP_MSG_COUNT) ||
		    (e.has_pd && (!e.has_msg || (size_t)e.pd_off + e.pd_len > sizeof(msg))))
			continue;
		take_one(r, &e, &msg);
	}
	pthread_mutex_unlock(&r->lk);
}

/* r->lk held. The answer to a call; a creating request's names its id. */
static void take_reply(struct cmr *r, const uint8_t *buf, size_t len)
{
	const struct cepd_rep *m = (const struct cepd_rep *)buf;

	if (len < sizeof(*m) || !m->h.seq)
		return;
	for (struct call *c = r->calls; c; c = c->next)
		if (c->seq == m->h.seq && !c->done) {
			size_t n = len - sizeof(*m);

			if (c->made) {
				struct cepd_id_rep idr;

				r->creating--;
				if (n == sizeof(idr) && !c->made->handle) {
					memcpy(&idr, buf + sizeof(*m), sizeof(idr));
					c->made->handle = idr.handle;
					c->made->local_comm_id = idr.local_comm_id;
					if (map_put(r, c->made)) {
						send_async_destroy(r, idr.handle);
						c->made->handle = 0;
					}
				}
				/* 0 (not made): only drops what nobody waits for */
				unpark(r, c->made->handle);
				n = 0;
			} else if (c->out) {
				memcpy(c->out, buf + sizeof(*m), n < c->outlen ? n : c->outlen);
			}
			c->outlen = n;
			c->ret = m->ret;
			c->done = 1;
			pthread_cond_signal(&c->cv);
			return;
		}
}

static void destroyed_here(struct cmr *r, struct rid *d);
static int cmr_destroy_id(struct cep_cm_id *id);

/* r->lk held: the service has gone. Fail every call; give each id in a
 * connection's course its error event, and each id the user destroyed
 * (or a hidden one) the DESTROYED the service will no longer send. */
static void die_locked(struct cmr *r)
{
	if (r->dead)
		return;
	r->dead = 1;
	for (struct call *c = r->calls; c; c = c->next)
		if (!c->done) {
			c->done = 1;
			c->ret = CMR_GONE;
			if (c->made)
				r->creating--;
			pthread_cond_signal(&c->cv);
		}
	for (uint32_t i = 0; i < r->mapcap; i++) {
		struct rid *d = r->map[i];
		struct cep_cm_event ev;

		if (!d || d->destroyed || d->hidden || d->gone)
			continue;
		memset(&ev, 0, sizeof(ev));
		ev.msg.type = CEP_MSG_INVALID;
		ev.status = CMR_GONE;
		ev.id = &d->id;
		ev.context = d->id.context;
		switch (d->phase) {
		case PH_REQ_SENT: case PH_REQ_RCVD: case PH_REP_RCVD:
			ev.type = CEP_CM_EV_REQ_ERROR;
			break;
		case PH_REP_SENT:
			ev.type = CEP_CM_EV_REP_ERROR;
			break;
		case PH_EST:
			ev.type = CEP_CM_EV_DREQ_ERROR;
			break;
		case PH_SIDR_SENT: case PH_SIDR_RCVD:
			ev.type = CEP_CM_EV_SIDR_REQ_ERROR;
			break;
		default:
			continue;
		}
		route_event(r, d, &ev);
	}
	/* After a DESTROY_ID's reply its DESTROYED is the service's to send:
	 * it never will now. Made here, once (destroyed_here skips an id that
	 * has had it; cmr_destroy_id's own, for a call the death failed,
	 * finds it had). A hidden id's frees it: the next is read first. */
	for (struct rid *d = r->all, *next; d; d = next) {
		next = d->all_next;
		if (d->gone || d->hidden)
			destroyed_here(r, d);
	}
	pthread_cond_broadcast(&r->cv);
}

/* Receive and take one message. Only the reader thread receives. 0, or -1 when the socket has ended. */
static int pump(struct cmr *r)
{
	ssize_t n;

	do
		n = recv(r->fd, r->rbuf, CEPD_MSG_MAX, 0);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		pthread_mutex_lock(&r->lk);
		die_locked(r);
		pthread_mutex_unlock(&r->lk);
		return -1;
	}
	if ((size_t)n < sizeof(struct cepd_hdr))
		return 0;
	switch (((struct cepd_hdr *)r->rbuf)->op) {
	case CEPD_REPLY:
		pthread_mutex_lock(&r->lk);
		take_reply(r, r->rbuf, (size_t)n);
		pthread_mutex_unlock(&r->lk);
		break;
	case CEPD_EVENTS:
		take_events(r, r->rbuf, (size_t)n);
		break;
	default:
		break;
	}
	return 0;
}

/* The callback thread: run the callbacks of queued events, one at a time,
 * in order. */
static void deliver(struct cmr *r)
{
	for (;;) {
		struct pev *p;
		struct rid *d, *l;
		int verdict, gone, closing;

		pthread_mutex_lock(&r->lk);
		p = r->qhead;
		if (!p || r->closing) { /* closing: cmr_destroy drops the rest */
			pthread_mutex_unlock(&r->lk);
			return;
		}
		r->qhead = p->next;
		if (!r->qhead)
			r->qtail = NULL;
		d = RID(p->ev.id);
		l = p->ev.listen_id ? RID(p->ev.listen_id) : NULL;
		gone = d->gone && p->ev.type != CEP_CM_EV_DESTROYED;
		if (!gone)
			d->delivering = 1;
		pthread_mutex_unlock(&r->lk);
		verdict = gone ? 0 : d->id.handler(&d->id, &p->ev);
		pthread_mutex_lock(&r->lk);
		d->delivering = 0;
		if (p->ev.type == CEP_CM_EV_DESTROYED && !gone)
			d->done = 1;
		closing = r->closing;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->lk);
		if (p->ev.type == CEP_CM_EV_DESTROYED)
			cmr_id_put(&d->id); /* the user's reference: dead now */
		else if (verdict && !gone && !closing) /* closing: the context ends it */
			(void)cmr_destroy_id(&d->id);
		cmr_id_put(&d->id);
		if (l)
			cmr_id_put(&l->id);
		free(p);
	}
}

/* The reader: every message from the service, until the socket ends.
 * It takes no lock but r->lk (and a channel's, in it), never the
 * application's, so a call's reply always gets through, whatever a
 * callback waits for. */
static void *reader_main(void *arg)
{
	struct cmr *r = arg;

	while (pump(r) == 0)
		;
	return NULL;
}

/* The callback thread: the queued events' callbacks, one at a time, in the
 * order they came; after the service has gone, the events made here. */
static void *deliverer_main(void *arg)
{
	struct cmr *r = arg;

	cb_self = r;
	for (;;) {
		deliver(r);
		pthread_mutex_lock(&r->lk);
		if (r->closing) {
			pthread_mutex_unlock(&r->lk);
			break;
		}
		if (!r->qhead)
			pthread_cond_wait(&r->cv, &r->lk);
		pthread_mutex_unlock(&r->lk);
	}
	return NULL;
}

/* ---- calls --------------------------------------------------------------- */

/* Send @q (h.len set) and wait for its reply: the service's answer, or
 * -ECONNRESET. @out receives up to @outlen bytes of the reply's payload. */
static int call_len(struct cmr *r, struct cepd_req *q, void *out, size_t outlen, size_t *got,
		    struct rid *made)
{
	struct call c = { .out = out, .outlen = outlen, .made = made };
	ssize_t n;

	pthread_mutex_lock(&r->lk);
	if (r->dead) {
		pthread_mutex_unlock(&r->lk);
		return CMR_GONE;
	}
	c.seq = ++r->seq;
	q->h.seq = c.seq;
	if (made)
		r->creating++; /* its reply's take_reply counts it down */
	pthread_cond_init(&c.cv, NULL);
	c.next = r->calls;
	r->calls = &c;
	pthread_mutex_unlock(&r->lk);
	do
		n = send(r->fd, q, q->h.len, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	pthread_mutex_lock(&r->lk);
	if (n < 0 && !c.done) {
		c.done = 1;
		c.ret = errno == EMSGSIZE ? -EMSGSIZE : CMR_GONE;
		if (made)
			r->creating--;
	}
	/* the reader signals (or die_locked fails) it; from a callback too:
	 * the reader is another thread */
	while (!c.done)
		pthread_cond_wait(&c.cv, &r->lk);
	for (struct call **pp = &r->calls; *pp; pp = &(*pp)->next)
		if (*pp == &c) {
			*pp = c.next;
			break;
		}
	pthread_mutex_unlock(&r->lk);
	pthread_cond_destroy(&c.cv);
	if (got)
		*got = c.done && c.ret != CMR_GONE ? c.outlen : 0;
	return c.ret;
}

static int call(struct cmr *r, struct cepd_req *q, void *out, size_t outlen)
{
	return call_len(r, q, out, outlen, NULL, NULL);
}

/* Build a request with private data (and aux bytes) after a fixed part
 * in @buf (room for the largest). -EMSGSIZE, -EINVAL or 0. */
static int build(uint8_t *buf, uint32_t op, uint32_t handle, uint32_t a, uint32_t b,
		 uint32_t c3, uint64_t x, uint64_t y, const void *param, size_t plen,
		 const void *pd, size_t pdlen, const void *aux, size_t auxlen)
{
	struct cepd_req *q = (struct cepd_req *)buf;

	if (pdlen > CEPD_PD_MAX || auxlen > CEPD_AUX_MAX)
		return -EMSGSIZE;
	if ((pdlen && !pd) || (auxlen && !aux) || plen > 512)
		return -EINVAL;
	memset(q, 0, sizeof(*q));
	q->h.op = op;
	q->h.len = (uint32_t)(sizeof(*q) + plen + pdlen + auxlen);
	q->handle = handle;
	q->a = a;
	q->b = b;
	q->c = c3;
	q->x = x;
	q->y = y;
	q->pd_len = (uint32_t)pdlen;
	q->aux_len = (uint32_t)auxlen;
	if (plen)
		memcpy(buf + sizeof(*q), param, plen);
	if (pdlen)
		memcpy(buf + sizeof(*q) + plen, pd, pdlen);
	if (auxlen)
		memcpy(buf + sizeof(*q) + plen + pdlen, aux, auxlen);
	return 0;
}

#define REQ_BUF (sizeof(struct cepd_req) + 512 + CEPD_PD_MAX + CEPD_AUX_MAX)

static int call_pd(struct cmr *r, uint32_t op, uint32_t handle, uint32_t a, uint32_t b,
		   uint32_t c3, uint64_t x, uint64_t y, const void *param, size_t plen,
		   const void *pd, size_t pdlen, const void *aux, size_t auxlen)
{
	_Alignas(8) uint8_t buf[REQ_BUF];
	int ret = build(buf, op, handle, a, b, c3, x, y, param, plen, pd, pdlen, aux, auxlen);

	return ret ? ret : call(r, (struct cepd_req *)buf, NULL, 0);
}

/* r->lk held: wait while another request is making @d. */
static void wait_created(struct cmr *r, struct rid *d)
{
	while (d->creating)
		pthread_cond_wait(&r->cv, &r->lk); /* its call ends, also on death */
}

/* A request @q on @id (its reply payload, if any, into @out): the id's
 * first request makes it in cepd (CEPD_F_CREATE) and learns its handle. */
static int id_send(struct cep_cm_id *id, struct cepd_req *q, void *out, size_t outlen)
{
	struct rid *d = RID(id);
	struct cmr *r = d->r;
	int ret;

	pthread_mutex_lock(&r->lk);
	wait_created(r, d);
	if (d->handle) {
		q->handle = d->handle;
		pthread_mutex_unlock(&r->lk);
		return call(r, q, out, outlen);
	}
	d->creating = 1;
	pthread_mutex_unlock(&r->lk);
	q->flags |= CEPD_F_CREATE;
	q->handle = 0;
	/* its reply names d (take_reply), and events that came first follow */
	ret = call_len(r, q, out, outlen, NULL, d);
	pthread_mutex_lock(&r->lk);
	if (!d->handle && !ret)
		ret = -ENOMEM; /* made there, but not nameable here */
	d->creating = 0;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->lk);
	return ret;
}

static int id_req(struct cep_cm_id *id, uint32_t op, uint32_t a, uint32_t b, uint32_t c3,
		  uint64_t x, uint64_t y, const void *param, size_t plen, const void *pd,
		  size_t pdlen, const void *aux, size_t auxlen)
{
	_Alignas(8) uint8_t buf[REQ_BUF];
	int ret = build(buf, op, 0, a, b, c3, x, y, param, plen, pd, pdlen, aux, auxlen);

	return ret ? ret : id_send(id, (struct cepd_req *)buf, NULL, 0);
}

/* Make @id in cepd now if it is not yet (a request that needs its comm
 * ID or state from there). 0 or the create's error. */
static int ensure_made(struct cep_cm_id *id)
{
	struct rid *d = RID(id);
	struct cmr *r = d->r;
	struct cepd_req q;
	struct cepd_id_rep idr;
	size_t got = 0;
	int ret = 0;

	pthread_mutex_lock(&r->lk);
	wait_created(r, d);
	if (d->handle) {
		pthread_mutex_unlock(&r->lk);
		return 0;
	}
	d->creating = 1;
	pthread_mutex_unlock(&r->lk);
	memset(&q, 0, sizeof(q));
	q.h.op = CEPD_CREATE_ID;
	q.h.len = sizeof(q);
	ret = call_len(r, &q, &idr, sizeof(idr), &got, NULL);
	pthread_mutex_lock(&r->lk);
	if (!ret && got == sizeof(idr)) {
		d->handle = idr.handle;
		d->local_comm_id = idr.local_comm_id;
		if (map_put(r, d)) {
			send_async_destroy(r, idr.handle);
			d->handle = 0;
			ret = -ENOMEM;
		}
	} else if (!ret) {
		ret = -EPROTO;
	}
	d->creating = 0;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->lk);
	return ret;
}

static int id_call(struct cep_cm_id *id, uint32_t op, uint32_t a, const void *pd, size_t len)
{
	if (id_gone(id))
		return -EINVAL;
	return id_req(id, op, a, 0, 0, 0, 0, NULL, 0, pd, len, NULL, 0);
}

int cmr_id_call_out(struct cep_cm_id *id, uint32_t op, uint32_t a, void *out, size_t outlen)
{
	struct cepd_req q;
	int ret;

	if (id_gone(id))
		return -EINVAL;
	ret = ensure_made(id); /* the engine's answer is about its id */
	if (ret)
		return ret;
	memset(&q, 0, sizeof(q));
	q.h.op = op;
	q.h.len = sizeof(q);
	q.a = a;
	return id_send(id, &q, out, outlen);
}

int cmr_cm_call(struct cep_cm *cm, uint32_t op, uint32_t a, uint32_t b)
{
	return call_pd(R(cm), op, 0, a, b, 0, 0, 0, NULL, 0, NULL, 0, NULL, 0);
}

/* ---- the context ------------------------------------------------------------ */

/* The HELLO @h on @fd, with who we are for the service (proto.h): the
 * control messages SCM_CREDENTIALS (this process's pid, effective uid and
 * gid: what the kernel lets an unprivileged sender claim, and what
 * SO_PEERCRED says) and SCM_RIGHTS with one fd, a pidfd of this process,
 * closed here once sent; without SCM_RIGHTS where pidfd_open(2) is ENOSYS.
 * Blocks as sendmsg(2) does on @fd (SO_SNDTIMEO bounds it). 0, -EAGAIN
 * (SO_SNDTIMEO passed), an error of pidfd_open(2) (-EMFILE, -ENFILE,
 * -ENOMEM) or of sendmsg(2). Any thread; tests that speak the protocol
 * raw send their HELLO with it too. */
int cmr_hello_send(int fd, const struct cepd_hello *h)
{
	union {
		struct cmsghdr align;
		uint8_t b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int))];
	} ctl;
	struct ucred cr = { .pid = getpid(), .uid = geteuid(), .gid = getegid() };
	struct iovec iov = { .iov_base = (void *)h, .iov_len = sizeof(*h) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b };
	struct cmsghdr *c;
	ssize_t n;
	int pidfd, ret;

#ifdef SYS_pidfd_open
	pidfd = (int)syscall(SYS_pidfd_open, cr.pid, 0);
#else
	pidfd = -1;
	errno = ENOSYS;
#endif
	if (pidfd < 0 && errno != ENOSYS)
		return -errno;
	memset(&ctl, 0, sizeof(ctl));
	m.msg_controllen = CMSG_SPACE(sizeof(cr)) + (pidfd >= 0 ? CMSG_SPACE(sizeof(int)) : 0);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_CREDENTIALS;
	c->cmsg_len = CMSG_LEN(sizeof(cr));
	memcpy(CMSG_DATA(c), &cr, sizeof(cr));
	if (pidfd >= 0) {
		c = CMSG_NXTHDR(&m, c);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pidfd, sizeof(int));
	}
	do
		n = sendmsg(fd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR); /* a packet goes whole or not at all */
	if (n < 0 && errno == EINVAL) {
		/* a process of a user namespace whose gid (or uid) has no
		 * mapping cannot name it: send no SCM_CREDENTIALS, the kernel
		 * attaches the sender's own (cepd reads them with SO_PASSCRED) */
		size_t off = CMSG_SPACE(sizeof(cr));

		if (pidfd >= 0)
			memmove(ctl.b, ctl.b + off, CMSG_SPACE(sizeof(int)));
		m.msg_controllen = pidfd >= 0 ? CMSG_SPACE(sizeof(int)) : 0;
		if (!m.msg_controllen)
			m.msg_control = NULL;
		do
			n = sendmsg(fd, &m, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
	}
	ret = n < 0 ? -errno : 0;
	if (pidfd >= 0)
		close(pidfd); /* the service holds its own copy now */
	return ret;
}

/* Microseconds left until @dl (CLOCK_MONOTONIC); <= 0 once passed. */
static long long us_left(const struct timespec *dl)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (long long)(dl->tv_sec - now.tv_sec) * 1000000 +
	       (dl->tv_nsec - now.tv_nsec) / 1000;
}

/* Bound @fd's blocking connect and sends by @us (> 0; 0 = for ever). */
static void send_timeout(int fd, long long us)
{
	struct timeval tv = { .tv_sec = (time_t)(us / 1000000),
			      .tv_usec = (suseconds_t)(us % 1000000) };

	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Connect @fd to @sa, send the HELLO @h and receive its answer into @buf,
 * all before @dl: the answer's length, or -ETIMEDOUT, -ECONNREFUSED
 * (closed on us: not a cepd, or stopping) or connect's error. A full
 * accept backlog makes a Unix socket's connect wait (SO_SNDTIMEO bounds
 * it, then EAGAIN); a service that takes the connection and never answers
 * is bounded by the poll. */
static ssize_t hello(int fd, const struct sockaddr_un *sa, const struct cepd_hello *h,
		     void *buf, size_t len, const struct timespec *dl, const char **step)
{
	long long us;
	ssize_t n;
	int ret;

	*step = "not connected: the service's accept backlog stayed full";
	for (;;) {
		if ((us = us_left(dl)) <= 0)
			return -ETIMEDOUT;
		send_timeout(fd, us);
		if (!connect(fd, (const struct sockaddr *)sa, sizeof(*sa)))
			break;
		if (errno != EINTR) /* a Unix connect is still undone after EINTR */
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
	}
	*step = "the HELLO could not be sent";
	if ((us = us_left(dl)) <= 0)
		return -ETIMEDOUT;
	send_timeout(fd, us);
	ret = cmr_hello_send(fd, h);
	if (ret == -EAGAIN)
		return -ETIMEDOUT;
	if (ret == -EPIPE || ret == -ECONNRESET || ret == -ECONNREFUSED) {
		/* a service that refuses a connection at once (too many of
		 * this user's, cepd(8) LIMITS) answers and closes before our
		 * HELLO: its answer waits, behind the reset our unread HELLO
		 * reported */
		n = recv(fd, buf, len, MSG_DONTWAIT);
		if (n < 0 && errno == ECONNRESET)
			n = recv(fd, buf, len, MSG_DONTWAIT);
		return n >= (ssize_t)sizeof(struct cepd_rep) ? n : -ECONNREFUSED;
	}
	if (ret)
		return ret;
	*step = "the HELLO was not answered";
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int ms;

		if ((us = us_left(dl)) <= 0)
			return -ETIMEDOUT;
		ms = us / 1000 + 1 > 1000000 ? 1000000 : (int)(us / 1000 + 1);
		ret = poll(&pf, 1, ms);
		if (ret < 0 && errno != EINTR)
			return -errno;
		if (ret <= 0)
			continue;
		n = recv(fd, buf, len, MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0 && errno == ECONNRESET) /* an answer may wait behind it */
			n = recv(fd, buf, len, MSG_DONTWAIT);
		send_timeout(fd, 0); /* calls' sends block as before */
		return n < 0 ? -ECONNREFUSED : n;
	}
}

int cep_cm_attach(const struct cep_cm_attach_attr *attr, struct cep_cm **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path, *step;
	struct cepd_hello h;
	struct cepd_hello_rep rep;
	_Alignas(8) uint8_t buf[sizeof(struct cepd_rep) + sizeof(rep)];
	struct timespec dl;
	uint64_t timeout_ms = 0;
	struct cmr *r;
	ssize_t n;
	int ret;

	/* a caller built before timeout_ms ends its struct there */
	if (!attr || !out || attr->size < offsetof(struct cep_cm_attach_attr, timeout_ms) ||
	    (attr->device && strlen(attr->device) >= CEPD_DEVICE_MAX))
		return -EINVAL;
	if (attr->size >= offsetof(struct cep_cm_attach_attr, timeout_ms) + sizeof(attr->timeout_ms))
		timeout_ms = attr->timeout_ms;
	if (!timeout_ms)
		timeout_ms = CMR_ATTACH_TIMEOUT_MS;
	if (timeout_ms > UINT64_C(1) << 40)
		timeout_ms = UINT64_C(1) << 40; /* 34 years: no time_t overflow */
	path = attr->socket;
	if (!path) {
		path = getenv("CEP_SERVICE");
		if (path && !strcmp(path, "none"))
			return -ENOENT;
		if (!path || !*path)
			path = CEPD_DEFAULT_SOCKET;
	}
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)(timeout_ms / 1000);
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->rbuf = malloc(CEPD_MSG_MAX);
	r->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (!r->rbuf || r->fd < 0) {
		ret = r->fd < 0 ? -errno : -ENOMEM;
		goto fail;
	}
	cepd_hello_init(&h, 0, attr->port_num);
	if (attr->device)
		memcpy(h.device, attr->device, strlen(attr->device) + 1);
	n = hello(r->fd, &sa, &h, buf, sizeof(buf), &dl, &step);
	if (n == -ETIMEDOUT)
		fprintf(stderr, "libcep: cep_cm_attach: %s: %s in %llu ms\n", path, step,
			(unsigned long long)timeout_ms);
	if (n < 0) {
		ret = (int)n;
		goto fail;
	}
	if (n < (ssize_t)sizeof(struct cepd_rep)) {
		ret = -ECONNREFUSED; /* closed on us: not a cepd, or stopping */
		goto fail;
	}
	ret = ((struct cepd_rep *)buf)->ret;
	if (!ret && n != (ssize_t)sizeof(buf))
		ret = -EPROTONOSUPPORT; /* not an answer of our protocol */
	if (ret)
		goto fail;
	memcpy(&rep, buf + sizeof(struct cepd_rep), sizeof(rep));
	r->cm.ops = &cmr_ops;
	r->cm.tp = NULL;
	r->cm.nworkers = rep.workers;
	r->cm.ca_guid = rep.ca_guid;
	r->cm.port = rep.port;
	atomic_init(&r->cm.taken, 0);
	pthread_mutex_init(&r->lk, NULL);
	pthread_cond_init(&r->cv, NULL);
	ret = -pthread_create(&r->deliverer, NULL, deliverer_main, r);
	if (!ret) {
		ret = -pthread_create(&r->reader, NULL, reader_main, r);
		if (ret) {
			pthread_mutex_lock(&r->lk);
			r->closing = 1;
			pthread_cond_broadcast(&r->cv);
			pthread_mutex_unlock(&r->lk);
			pthread_join(r->deliverer, NULL);
		}
	}
	if (ret) {
		pthread_mutex_destroy(&r->lk);
		pthread_cond_destroy(&r->cv);
		goto fail;
	}
	cm_live_add(&r->cm);
	*out = &r->cm;
	return 0;
fail:
	if (r->fd >= 0)
		close(r->fd);
	free(r->rbuf);
	free(r);
	return ret;
}

/* 1 on the callback thread of @cm (its callbacks run there). */
static int cmr_on_callback_thread(const struct cep_cm *cm)
{
	return cb_self == (const struct cmr *)cm;
}

/* cep_cm_destroy of a context cm.c found live: it may have been destroyed
 * since by a racing call, so nothing of it is read before cm_live_close
 * says it is ours (-EDEADLK on its callback thread, -EBUSY while an
 * event is taken and not acked). */
static int cmr_destroy(struct cep_cm *cm)
{
	struct cmr *r = R(cm);
	int ret;

	CMR_HOOK(CMR_HOOK_DESTROY, cm);
	ret = cm_live_close(cm);
	if (ret)
		return ret;
	/* Before the socket ends: the reader's death events (die_locked) and
	 * whatever is queued reach nobody; a callback running now finishes. */
	pthread_mutex_lock(&r->lk);
	r->closing = 1;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->lk);
	/* the service sees EOF and ends our ids; the reader sees it too */
	shutdown(r->fd, SHUT_RDWR);
	pthread_join(r->reader, NULL); /* it ends on the shut socket */
	pthread_join(r->deliverer, NULL);
	/* nothing delivers now: drop what is queued and free every id (an
	 * extra reference on each keeps them while their channel events go) */
	while (r->qhead) {
		struct pev *p = r->qhead;

		r->qhead = p->next;
		cmr_id_put(p->ev.id);
		if (p->ev.listen_id)
			cmr_id_put(p->ev.listen_id);
		free(p);
	}
	pthread_mutex_lock(&r->lk);
	for (struct rid *d = r->all; d; d = d->all_next)
		cmr_id_get(&d->id);
	pthread_mutex_unlock(&r->lk);
	for (struct rid *d = r->all; d; d = d->all_next)
		if (d->id.channel) {
			cm_channel_purge(d->id.channel, &d->id, 1);
			pthread_mutex_lock(&d->id.lock);
			cm_channel_leave(&d->id);
			pthread_mutex_unlock(&d->id.lock);
		}
	while (r->all)
		rid_free_locked(r->all);
	while (r->parked) {
		struct park *p = r->parked;

		r->parked = p->next;
		free(p);
	}
	free(r->map);
	close(r->fd);
	free(r->rbuf);
	pthread_mutex_destroy(&r->lk);
	pthread_cond_destroy(&r->cv);
	free(r);
	return 0;
}

static int cmr_qp_register(struct cep_cm *cm, uint32_t qpn)
{
	return call_pd(R(cm), CEPD_QP_REGISTER, 0, qpn, 0, 0, 0, 0, NULL, 0, NULL, 0, NULL, 0);
}

static int cmr_qp_destroy(struct cep_cm *cm, uint32_t qpn)
{
	/* Also from a callback, as the local one: the reader thread takes
	 * the answer, and cepd's teardown waits for no callback of ours. */
	return call_pd(R(cm), CEPD_QP_DESTROY, 0, qpn, 0, 0, 0, 0, NULL, 0, NULL, 0, NULL, 0);
}

static int cmr_quiesce(struct cep_cm *cm, unsigned timeout_ms)
{
	return call_pd(R(cm), CEPD_QUIESCE, 0, timeout_ms, 0, 0, 0, 0, NULL, 0, NULL, 0, NULL, 0);
}

static int cmr_get_stats(struct cep_cm *cm, struct cep_cm_stats *st)
{
	struct cepd_req q;
	struct cep_cm_stats all;
	size_t size;
	int ret;

	size = st->size < sizeof(all) ? st->size : sizeof(all);
	memset(&q, 0, sizeof(q));
	q.h.op = CEPD_CM_STATS;
	q.h.len = sizeof(q);
	memset(&all, 0, sizeof(all));
	ret = call(R(cm), &q, &all, sizeof(all));
	if (ret)
		return ret;
	memcpy((uint8_t *)st + sizeof(st->size), (uint8_t *)&all + sizeof(all.size),
	       size - sizeof(st->size));
	return 0;
}

/* ---- ids ----------------------------------------------------------------------- */

/* Nothing is asked of cepd here: the id is made there by its first
 * request (CEPD_F_CREATE), or by cep_cm_id_local_comm_id(), so a connect
 * costs one round trip, not two. An error of the engine's create
 * (-ENOMEM, -EAGAIN, -ESHUTDOWN) is that first call's. */
static int cmr_create_id(struct cep_cm *cm, const struct cep_cm_id_attr *attr, uint64_t flags,
			 struct cep_cm_id **out)
{
	struct cmr *r = R(cm);
	struct rid *d;

	if (flags)
		return -EOPNOTSUPP; /* CEP_CM_ID_LINGER: not in the protocol */
	pthread_mutex_lock(&r->lk);
	if (r->dead) {
		pthread_mutex_unlock(&r->lk);
		return CMR_GONE;
	}
	d = rid_new(r, 0, 0, attr->handler, attr->channel, attr->context);
	pthread_mutex_unlock(&r->lk);
	if (!d)
		return -ENOMEM;
	*out = &d->id;
	return 0;
}

/* r->lk held: @d ends here (the service has gone, or it was never made
 * there): its DESTROYED is made here, delivered by the callback thread. */
static void destroyed_here(struct cmr *r, struct rid *d)
{
	struct cep_cm_event ev;

	if (d->destroyed)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.type = CEP_CM_EV_DESTROYED;
	ev.msg.type = CEP_MSG_INVALID;
	ev.id = &d->id;
	ev.context = d->id.context;
	route_event(r, d, &ev);
	pthread_cond_broadcast(&r->cv);
}

static int cmr_destroy_id(struct cep_cm_id *id)
{
	struct rid *d = RID(id);
	struct cmr *r = d->r;
	int ret, unmade;

	pthread_mutex_lock(&r->lk);
	if (d->gone) {
		pthread_mutex_unlock(&r->lk);
		return -EALREADY;
	}
	d->gone = 1;
	cmr_id_get(id); /* the call's: DESTROYED may come before its reply */
	/* not from a callback: wait for one of this id running */
	while (cb_self != r && d->delivering)
		pthread_cond_wait(&r->cv, &r->lk);
	wait_created(r, d);
	unmade = !d->handle;
	pthread_mutex_unlock(&r->lk);
	if (id->channel)
		cm_channel_purge(id->channel, id, 0);
	if (unmade) {
		/* never made in cepd: it ends here (DESTROYED made here) */
		pthread_mutex_lock(&r->lk);
		destroyed_here(r, d);
		pthread_mutex_unlock(&r->lk);
		ret = 0;
	} else {
		ret = id_req(id, CEPD_DESTROY_ID, 0, 0, 0, 0, 0, NULL, 0, NULL, 0, NULL, 0);
	}
	if (ret == CMR_GONE) {
		/* the service is gone: the id ends here, DESTROYED made here */
		pthread_mutex_lock(&r->lk);
		destroyed_here(r, d);
		pthread_mutex_unlock(&r->lk);
		ret = 0;
	}
	cmr_id_put(id);
	return ret;
}

static int cmr_destroy_id_sync(struct cep_cm_id *id)
{
	struct rid *d = RID(id);
	struct cmr *r = d->r;
	struct timespec ts;
	int ret;

	cmr_id_get(id);
	ret = cmr_destroy_id(id);
	if (ret) {
		cmr_id_put(id);
		return ret;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&r->lk);
	while (!d->done && ret == 0)
		ret = -pthread_cond_timedwait(&r->cv, &r->lk, &ts);
	pthread_mutex_unlock(&r->lk);
	cmr_id_put(id);
	if (ret) {
		fprintf(stderr, "libcep: cep_cm_destroy_id_sync: DESTROYED not handled "
			"after 10 s (the service stalled?)\n");
		return -ETIMEDOUT;
	}
	return 0;
}

/* An id not yet made in cepd is made now: its comm ID is the engine's.
 * 0 when that fails (as for a dead handle). */
static uint32_t cmr_id_local_comm_id(const struct cep_cm_id *cid)
{
	struct cep_cm_id *id = (struct cep_cm_id *)cid; /* made on demand */
	struct rid *d = RID(id);
	uint32_t v;

	if (ensure_made(id))
		return 0;
	pthread_mutex_lock(&d->r->lk);
	v = d->local_comm_id;
	pthread_mutex_unlock(&d->r->lk);
	return v;
}

/* An id not yet made is IDLE, with no remote comm ID: nothing to ask. */
static int query(struct cep_cm_id *id, struct cepd_query_rep *out)
{
	struct rid *d = RID(id);
	struct cepd_req q;
	int made;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&d->r->lk);
	wait_created(d->r, d);
	made = d->handle != 0;
	pthread_mutex_unlock(&d->r->lk);
	if (!made)
		return 0;
	memset(&q, 0, sizeof(q));
	q.h.op = CEPD_ID_QUERY;
	q.h.len = sizeof(q);
	return id_send(id, &q, out, sizeof(*out));
}

static uint32_t cmr_id_remote_comm_id(struct cep_cm_id *id)
{
	struct cepd_query_rep q;

	return query(id, &q) ? 0 : q.remote_comm_id;
}

static enum cep_cm_state cmr_id_state(struct cep_cm_id *id)
{
	struct cepd_query_rep q;

	return query(id, &q) || q.state >= CEP_CM_STATE_COUNT ? CEP_CM_IDLE
							      : (enum cep_cm_state)q.state;
}

static enum cep_cm_lap_state cmr_id_lap_state(struct cep_cm_id *id)
{
	struct cepd_query_rep q;

	return query(id, &q) || q.lap_state >= CEP_CM_LAP_STATE_COUNT
	       ? CEP_CM_LAP_IDLE : (enum cep_cm_lap_state)q.lap_state;
}

/* r->lk: a call's success moves the coarse phase (for the death events). */
static void phase_after(struct cep_cm_id *id, int ret, unsigned ph)
{
	struct rid *d = RID(id);

	if (ret)
		return;
	pthread_mutex_lock(&d->r->lk);
	d->phase = (uint8_t)ph;
	pthread_mutex_unlock(&d->r->lk);
}

static int cmr_listen(struct cep_cm_id *id, uint64_t service_id, uint64_t mask, unsigned backlog)
{
	int ret;

	if (id_gone(id))
		return -EINVAL;
	ret = id_req(id, CEPD_LISTEN, backlog, 0, 0, service_id, mask,
		      NULL, 0, NULL, 0, NULL, 0);
	phase_after(id, ret, PH_LISTEN);
	return ret;
}

#define COVERS(p, f) ((p)->size >= offsetof(__typeof__(*(p)), f) + sizeof((p)->f))

static int cmr_connect(struct cep_cm_id *id, const struct cep_cm_conn_param *p)
{
	struct cepd_conn w;
	int ret;

	if (id_gone(id))
		return -EINVAL;
	memset(&w, 0, sizeof(w));
	w.service_id = p->service_id;
	w.primary = p->primary;
	w.alternate = p->alternate;
	if (p->peer) {
		w.peer = *p->peer;
		w.has_peer = 1;
	}
	w.qpn = p->qpn;
	w.starting_psn = p->starting_psn;
	w.qkey = p->qkey;
	w.pkey = p->pkey;
	w.responder_resources = p->responder_resources;
	w.initiator_depth = p->initiator_depth;
	w.remote_cm_response_timeout = p->remote_cm_response_timeout;
	w.local_cm_response_timeout = p->local_cm_response_timeout;
	w.max_cm_retries = p->max_cm_retries;
	w.packet_life_time = p->packet_life_time;
	w.retry_count = p->retry_count;
	w.rnr_retry_count = p->rnr_retry_count;
	w.path_mtu = p->path_mtu;
	w.transport_service_type = p->transport_service_type;
	w.srq = p->srq;
	w.manual_rtu = p->manual_rtu;
	w.flow_control = COVERS(p, flow_control) ? p->flow_control : 1;
	w.manual_drep = COVERS(p, manual_drep) ? p->manual_drep : 0;
	w.ece_vendor_id = COVERS(p, ece_vendor_id) ? p->ece_vendor_id : 0;
	w.ece_options = COVERS(p, ece_options) ? p->ece_options : 0;
	ret = id_req(id, CEPD_CONNECT, 0, 0, 0, 0, 0, &w, sizeof(w),
		      p->private_data, p->private_data_len, NULL, 0);
	phase_after(id, ret, PH_REQ_SENT);
	return ret;
}

static int cmr_accept(struct cep_cm_id *id, const struct cep_cm_accept_param *p)
{
	struct cepd_accept w;
	int ret;

	if (id_gone(id))
		return -EINVAL;
	memset(&w, 0, sizeof(w));
	w.qpn = p->qpn;
	w.starting_psn = p->starting_psn;
	w.qkey = p->qkey;
	w.responder_resources = p->responder_resources;
	w.initiator_depth = p->initiator_depth;
	w.target_ack_delay = p->target_ack_delay;
	w.failover_accepted = p->failover_accepted;
	w.rnr_retry_count = p->rnr_retry_count;
	w.srq = p->srq;
	w.manual_drep = p->manual_drep;
	w.flow_control = COVERS(p, flow_control) ? p->flow_control : 1;
	w.ece_vendor_id = COVERS(p, ece_vendor_id) ? p->ece_vendor_id : 0;
	w.ece_options = COVERS(p, ece_options) ? p->ece_options : 0;
	ret = id_req(id, CEPD_ACCEPT, 0, 0, 0, 0, 0, &w, sizeof(w),
		      p->private_data, p->private_data_len, NULL, 0);
	phase_after(id, ret, PH_REP_SENT);
	return ret;
}

static int cmr_rtu(struct cep_cm_id *id, const void *pdata, size_t len)
{
	int ret = id_call(id, CEPD_RTU, 0, pdata, len);

	phase_after(id, ret, PH_EST);
	return ret;
}

static int cmr_notify_established(struct cep_cm_id *id)
{
	int ret = id_call(id, CEPD_NOTIFY_EST, 0, NULL, 0);

	phase_after(id, ret, PH_EST);
	return ret;
}

static int cmr_reject(struct cep_cm_id *id, unsigned reason, const void *ari, size_t ari_len,
		      const void *pdata, size_t len)
{
	int ret;

	if (id_gone(id))
		return -EINVAL;
	ret = id_req(id, CEPD_REJECT, reason, 0, 0, 0, 0, NULL, 0,
		      pdata, len, ari, ari_len);
	phase_after(id, ret, PH_IDLE);
	return ret;
}

static int cmr_mra(struct cep_cm_id *id, uint8_t service_timeout, const void *pdata, size_t len)
{
	return id_call(id, CEPD_MRA, service_timeout, pdata, len);
}

static int cmr_disconnect(struct cep_cm_id *id, const void *pdata, size_t len)
{
	return id_call(id, CEPD_DISCONNECT, 0, pdata, len);
}

static int cmr_drep(struct cep_cm_id *id, const void *pdata, size_t len)
{
	return id_call(id, CEPD_DREP, 0, pdata, len);
}

static int cmr_lap(struct cep_cm_id *id, const struct cep_path *alt, uint8_t timeout,
		   const void *pdata, size_t len)
{
	if (id_gone(id))
		return -EINVAL;
	return id_req(id, CEPD_LAP, timeout, 0, 0, 0, 0, alt,
		       sizeof(*alt), pdata, len, NULL, 0);
}

static int cmr_apr(struct cep_cm_id *id, unsigned status, const void *info, size_t info_len,
		   const void *pdata, size_t len)
{
	if (id_gone(id))
		return -EINVAL;
	return id_req(id, CEPD_APR, status, 0, 0, 0, 0, NULL, 0,
		       pdata, len, info, info_len);
}

static int cmr_sidr_req(struct cep_cm_id *id, const struct cep_cm_sidr_param *p)
{
	struct cepd_sidr w;
	int ret;

	if (id_gone(id))
		return -EINVAL;
	memset(&w, 0, sizeof(w));
	w.service_id = p->service_id;
	w.peer = *p->peer;
	w.pkey = p->pkey;
	w.timeout = p->timeout;
	w.max_cm_retries = p->max_cm_retries;
	ret = id_req(id, CEPD_SIDR_REQ, 0, 0, 0, 0, 0, &w, sizeof(w),
		      p->private_data, p->private_data_len, NULL, 0);
	phase_after(id, ret, PH_SIDR_SENT);
	return ret;
}

static int cmr_sidr_rep(struct cep_cm_id *id, unsigned status, uint32_t qpn, uint32_t qkey,
		 const void *pdata, size_t len)
{
	int ret;

	if (id_gone(id))
		return -EINVAL;
	ret = id_req(id, CEPD_SIDR_REP, status, qpn, qkey, 0, 0, NULL,
		      0, pdata, len, NULL, 0);
	phase_after(id, ret, PH_IDLE);
	return ret;
}

/* ---- the librdmacm drop-in's backlog, channel events ------------------------ */

/* cepd's listener counts the requests its client has not answered: taking
 * one changes nothing here. */
static void cmr_request_taken(struct cep_cm_id *id)
{
	(void)id;
}

/* The protocol has no silent drop: a request is answered (cm_internal.h). */
static int cmr_request_drop(struct cep_cm_id *id)
{
	(void)id;
	return -EINVAL;
}

static void cmr_event_hold(struct cep_cm_id *id, struct cep_cm_id *lid)
{
	cmr_id_get(id);
	if (lid)
		cmr_id_get(lid);
}

/* An acked DESTROYED ends the user's reference too: the id's memory goes
 * with the last of them. */
static void cmr_event_release(struct cep_cm_id *id, struct cep_cm_id *lid, int destroyed_acked)
{
	if (destroyed_acked)
		cmr_id_put(id);
	cmr_id_put(id);
	if (lid)
		cmr_id_put(lid);
}

/* ---- the table ------------------------------------------------------------------ */

const struct cm_ops cmr_ops = {
	.destroy = cmr_destroy,
	.on_callback_thread = cmr_on_callback_thread,
	.qp_register = cmr_qp_register,
	.qp_destroy = cmr_qp_destroy,
	.quiesce = cmr_quiesce,
	.get_stats = cmr_get_stats,
	.create_id = cmr_create_id,
	.destroy_id = cmr_destroy_id,
	.destroy_id_sync = cmr_destroy_id_sync,
	.id_local_comm_id = cmr_id_local_comm_id,
	.id_remote_comm_id = cmr_id_remote_comm_id,
	.id_state = cmr_id_state,
	.id_lap_state = cmr_id_lap_state,
	.listen = cmr_listen,
	.connect = cmr_connect,
	.accept = cmr_accept,
	.rtu = cmr_rtu,
	.notify_established = cmr_notify_established,
	.reject = cmr_reject,
	.mra = cmr_mra,
	.disconnect = cmr_disconnect,
	.drep = cmr_drep,
	.lap = cmr_lap,
	.apr = cmr_apr,
	.sidr_req = cmr_sidr_req,
	.sidr_rep = cmr_sidr_rep,
	.request_taken = cmr_request_taken,
	.request_drop = cmr_request_drop,
	.event_hold = cmr_event_hold,
	.event_release = cmr_event_release,
#ifdef CEP_HAVE_VERBS /* remote_verbs.c, built with libibverbs */
	.init_qp_attr = cmr_init_qp_attr,
	.qp_event = cmr_qp_event,
#endif
};
