/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, event channels: rdma_create/destroy_event_channel,
 * rdma_get_cm_event, rdma_ack_cm_event, rdma_event_str, and the queueing
 * the CM side uses. Semantics are librdmacm's over the kernel's ucma: an
 * event belongs to one id (a CONNECT_REQUEST to its listener) until acked;
 * rdma_destroy_id discards the id's undelivered events and waits for the
 * delivered ones to be acked; rdma_get_cm_event blocks unless the
 * application made the channel's fd non-blocking (then EAGAIN).
 *
 * Guarantees: a channel's queue and its eventfd change together under the
 * channel mutex, so the fd is readable exactly while events wait. An
 * event that arrives while a thread is blocked in rdma_get_cm_event on the
 * empty channel is handed to that thread (oldest first, a futex wake) and
 * never queued: no eventfd write and read, no poll, and the fd stays
 * unreadable, exact for poll() users, as the queue stays empty. A signal
 * interrupts the wait as it interrupts a read of the ucma fd; the getter
 * then looks at O_NONBLOCK again (and keeps waiting without it). Every
 * queued event holds a reference on its owner id. A channel destroyed
 * while another thread is inside rdma_get_cm_event on it (rping's CM
 * thread, back from acking the last event, while main destroys the
 * channel) stays allocated, fd open, until that call returns: the getter
 * then blocks on an fd no event will reach, as a read() on librdmacm's
 * closed ucma fd does, instead of failing with EBADF or touching freed
 * memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rdmacm.h"
#include "cm/cm_internal.h" /* cm_request_taken */
#include "cm/lead.h"

struct rcm_channel *rcm_channel_new(void)
{
	struct rcm_channel *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	/* Blocking, as librdmacm's fd: the application may set O_NONBLOCK. */
	c->ch.fd = eventfd(0, EFD_CLOEXEC);
	if (c->ch.fd < 0) {
		free(c);
		return NULL;
	}
	pthread_mutex_init(&c->mtx, NULL);
	c->waiting_tail = &c->waiting;
	return c;
}

static void channel_release(struct rcm_channel *c)
{
	struct rcm_event *e, *next;

	/* librdmacm requires ids destroyed and events acked first; whatever
	 * is still queued goes with the channel. */
	for (e = rcm_evq_take(&c->q); e; e = next) {
		next = e->next;
		rcm_event_drop(e);
	}
	close(c->ch.fd);
	pthread_mutex_destroy(&c->mtx);
	free(c);
}

/* Any thread, once per channel. Frees now, or leaves it to the last
 * getter still inside rdma_get_cm_event (seq_cst RMWs on one word: of
 * this call and that getter's exit, exactly one sees the other). */
void rcm_channel_free(struct rcm_channel *c)
{
	if (c && atomic_fetch_or(&c->getters, RCM_CHANNEL_DEAD) == 0)
		channel_release(c);
}

/* A getter leaves: the last one out of a destroyed channel frees it. */
static void getter_leave(struct rcm_channel *c)
{
	if (atomic_fetch_sub(&c->getters, 1) == (RCM_CHANNEL_DEAD | 1u))
		channel_release(c);
}

RCM_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct rcm_channel *c;
	int ret = rcm_init();

	if (ret) {
		errno = -ret;
		return NULL;
	}
	c = rcm_channel_new();
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	return &c->ch;
}

RCM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (channel)
		rcm_channel_free(rcm_channel_of(channel));
}

struct rcm_event *rcm_event_new(struct rcm_id *owner, enum rdma_cm_event_type type,
				int status)
{
	struct rcm_event *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->owner = owner;
	rcm_id_get(owner);
	e->ev.id = &owner->id;
	e->ev.event = type;
	e->ev.status = status;
	return e;
}

void rcm_event_drop(struct rcm_event *e)
{
	/* a multicast event never given out: no waiter to wake (only the
	 * leave that drops it, or the id's teardown) */
	if (e->mc)
		atomic_fetch_sub_explicit(&e->mc->pending, 1, memory_order_release);
	if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->ev.id != &e->owner->id)
		rcm_id_abandon(rcm_id_of(e->ev.id));
	rcm_id_put(e->owner);
	free(e);
}

/* Whom chan_append's hand-off must wake, read under the channel mutex
 * while the getter is still waiting (its struct is thread-local: after
 * it returned, only these copies are used). */
struct getter_wake {
	_Atomic uint32_t *futex;       /* the getter waits on this word */
	struct cep_lead_waiter *w;     /* or on its thread's eventfd */
};

/* Wake a getter chan_append handed an event to; after the channel mutex
 * is released, so the woken thread does not wait for it. The getter may
 * have seen the event and left already: a late wake is at most a
 * spurious one for that thread's next wait (the waiter is never freed,
 * lead.h; the futex word is thread-local), which rechecks. A getter that
 * is the calling thread itself (it leads, and its own MAD brought the
 * event) is not woken at all: cep_lead_wake knows its own. */
static void getter_wake(const struct getter_wake *k)
{
	if (k->w)
		cep_lead_wake(k->w);
	else if (k->futex)
		syscall(SYS_futex, k->futex, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Caller holds c->mtx. Fills *@k with the getter to wake (getter_wake)
 * if the event went to one, else clears it. */
static void chan_append(struct rcm_channel *c, struct rcm_event *e, struct getter_wake *k)
{
	struct rcm_getter *g = c->waiting;

	k->futex = NULL;
	k->w = NULL;
	if (g) {
		/* A getter waits, so the queue is empty: the event is its,
		 * reported now as a pop would (rdma_destroy_id then waits for
		 * its ack instead of taking it back). */
		c->waiting = g->next;
		if (!c->waiting)
			c->waiting_tail = &c->waiting;
		g->e = e;
		atomic_fetch_add_explicit(&e->owner->events_reported, 1,
					  memory_order_relaxed);
		k->w = g->w;
		k->futex = &g->handed;
		/* release: g->e before the getter's acquire of handed. */
		atomic_store_explicit(&g->handed, 1, memory_order_release);
		return;
	}
	rcm_evq_push(&c->q, e);
	e->owner->queued++;
	if (!c->signaled) {
		uint64_t one = 1;

		/* From 0 to 1: cannot block or overflow. */
		if (write(c->ch.fd, &one, sizeof(one)) == sizeof(one))
			c->signaled = 1;
	}
}

/* Caller holds c->mtx: the queue went empty, the fd stops being readable. */
static void chan_unsignal(struct rcm_channel *c)
{
	uint64_t v;

	/* The counter is 1: read returns at once even on a blocking fd. */
	if (c->signaled && read(c->ch.fd, &v, sizeof(v)) == sizeof(v))
		c->signaled = 0;
}

void rcm_push_locked(struct rcm_event *e)
{
	struct rcm_id *o = e->owner;
	struct getter_wake k;
	struct rcm_channel *c;

	if (o->destroying) {
		rcm_event_drop(e);
		return;
	}
	if (o->cr_pending) {
		/* The application must see the request before anything else
		 * about the new id. */
		rcm_evq_push(&o->held, e);
		return;
	}
	c = rcm_channel_of(o->id.channel);
	pthread_mutex_lock(&c->mtx);
	chan_append(c, e, &k);
	pthread_mutex_unlock(&c->mtx);
	getter_wake(&k);
}

void rcm_push_request(struct rcm_event *e)
{
	struct rcm_id *l = e->owner;

	pthread_mutex_lock(&l->mtx);
	if (!l->destroying && (l->cr_queued >= l->backlog || l->deferred.head)) {
		/* ucma refuses a request past the backlog and the peer's CM
		 * retries it; here it waits, unanswered, until the application
		 * has taken one (the peer's REQ timer and our MRA cover it). */
		rcm_evq_push(&l->deferred, e);
	} else {
		if (!l->destroying)
			l->cr_queued++;
		rcm_push_locked(e);
	}
	pthread_mutex_unlock(&l->mtx);
}

/* A CONNECT_REQUEST was taken: the new id's held events follow it, and
 * there is room in the backlog for a deferred request. */
static void request_taken(struct rcm_id *l, struct rcm_id *c)
{
	struct rcm_event *e, *held;

	/* First, with none of our locks held (the engine emits events under
	 * its id lock, and our push takes l->mtx under it): the engine stops
	 * counting it against the listener's backlog, as ucma counts only the
	 * requests not yet fetched. */
	cm_request_taken(c->cep);

	pthread_mutex_lock(&c->mtx);
	c->cr_pending = 0;
	held = rcm_evq_take(&c->held);
	while (held) {
		e = held;
		held = e->next;
		rcm_push_locked(e);
	}
	pthread_mutex_unlock(&c->mtx);

	pthread_mutex_lock(&l->mtx);
	if (l->cr_queued > 0)
		l->cr_queued--;
	e = l->destroying ? NULL : rcm_evq_pop(&l->deferred);
	if (e) {
		l->cr_queued++;
		rcm_push_locked(e);
	}
	pthread_mutex_unlock(&l->mtx);
}

struct rcm_event *rcm_channel_take(struct rcm_channel *c, struct rcm_id *owner)
{
	struct rcm_evq taken = { 0 }, kept = { 0 };
	struct rcm_event *e;

	pthread_mutex_lock(&c->mtx);
	/* Most ids have nothing queued when destroyed: no walk then. */
	while (owner->queued && (e = rcm_evq_pop(&c->q))) {
		if (e->owner == owner) {
			owner->queued--;
			rcm_evq_push(&taken, e);
		} else {
			rcm_evq_push(&kept, e);
		}
	}
	if (kept.head) {
		kept.tail->next = c->q.head;
		if (!c->q.head)
			c->q.tail = kept.tail;
		c->q.head = kept.head;
	}
	if (!c->q.head)
		chan_unsignal(c);
	pthread_mutex_unlock(&c->mtx);
	return taken.head;
}

void rcm_channel_put(struct rcm_channel *c, struct rcm_event *list)
{
	pthread_mutex_lock(&c->mtx);
	while (list) {
		struct rcm_event *next = list->next;
		struct getter_wake k;

		chan_append(c, list, &k);
		getter_wake(&k); /* rare: id migration */
		list = next;
	}
	pthread_mutex_unlock(&c->mtx);
}

/* After a CONNECT_ERROR librdmacm drops the connection's later REJECTED
 * and DISCONNECTED (the application already knows it failed). */
static int superseded(struct rcm_event *e)
{
	int drop;

	if (e->ev.event != RDMA_CM_EVENT_REJECTED && e->ev.event != RDMA_CM_EVENT_DISCONNECTED)
		return 0;
	pthread_mutex_lock(&e->owner->mtx);
	drop = e->owner->connect_error;
	pthread_mutex_unlock(&e->owner->mtx);
	return drop;
}

/* Caller holds c->mtx: the oldest queued event, reported, or NULL. */
static struct rcm_event *channel_pop_locked(struct rcm_channel *c)
{
	struct rcm_event *e = rcm_evq_pop(&c->q);

	if (e) {
		e->owner->queued--;
		if (!c->q.head)
			chan_unsignal(c);
		/* Counted under the channel lock: rdma_destroy_id takes its
		 * undelivered events under the same lock. */
		atomic_fetch_add_explicit(&e->owner->events_reported, 1,
					  memory_order_relaxed);
	}
	return e;
}

static struct rcm_event *channel_pop(struct rcm_channel *c)
{
	struct rcm_event *e;

	pthread_mutex_lock(&c->mtx);
	e = channel_pop_locked(c);
	pthread_mutex_unlock(&c->mtx);
	return e;
}

static int handed(void *arg)
{
	struct rcm_getter *g = arg;

	/* acquire: pairs with the hand-off's release (g->e is set). */
	return atomic_load_explicit(&g->handed, memory_order_acquire) != 0;
}

/* Wait for the next event: queued already, or handed to us by
 * chan_append. Meanwhile this thread reads the ports' receive queues
 * itself when it can (cm/lead.h): the MAD that brings our event is
 * handled here, and the event handed to us without waking anyone. A
 * signal interrupts the wait as it interrupts a read of the ucma fd.
 * NULL after a signal, with nothing taken. */
static struct rcm_event *channel_wait(struct rcm_channel *c)
{
	/* Thread-local, not on the stack: a hand-off's wake may come after
	 * we took the event and left (getter_wake). One per thread: a thread
	 * is in one rdma_get_cm_event at a time. */
	static _Thread_local struct rcm_getter g;
	struct cep_lead *leads[RCM_LEADS_MAX];
	struct rcm_event *e;
	int ret = 0;

	pthread_mutex_lock(&c->mtx);
	e = channel_pop_locked(c);
	if (e) {
		pthread_mutex_unlock(&c->mtx);
		return e;
	}
	g.next = NULL;
	g.e = NULL;
	g.w = cep_lead_self();
	atomic_store_explicit(&g.handed, 0, memory_order_relaxed);
	*c->waiting_tail = &g;
	c->waiting_tail = &g.next;
	pthread_mutex_unlock(&c->mtx);
	if (g.w) {
		ret = cep_lead_wait(leads, rcm_leads(leads, RCM_LEADS_MAX), -1, handed, &g, -1);
	} else {
		while (!handed(&g))
			if (syscall(SYS_futex, &g.handed, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0) < 0 &&
			    errno == EINTR) {
				ret = -EINTR;
				break;
			}
	}
	if (ret == 0)
		return g.e;
	{
		struct rcm_getter **pp = &c->waiting;

		pthread_mutex_lock(&c->mtx);
		if (g.e) { /* handed meanwhile: ours */
			pthread_mutex_unlock(&c->mtx);
			return g.e;
		}
		while (*pp != &g)
			pp = &(*pp)->next;
		*pp = g.next;
		if (c->waiting_tail == &g.next)
			c->waiting_tail = pp;
		pthread_mutex_unlock(&c->mtx);
	}
	return NULL;
}

RCM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel,
				 struct rdma_cm_event **event)
{
	struct rcm_channel *c;
	struct rcm_event *e;

	if (!channel || !event)
		return rcm_err(EINVAL);
	c = rcm_channel_of(channel);
	atomic_fetch_add(&c->getters, 1); /* the channel stays while we are in */
	for (;;) {
		int fl;

		e = channel_pop(c);
		if (!e) {
			/* Empty: honour O_NONBLOCK as a read of the ucma fd
			 * would, then wait for the next event, handed over. */
			fl = fcntl(c->ch.fd, F_GETFL);
			if (fl < 0 || (fl & O_NONBLOCK)) {
				int err = fl < 0 ? errno : EAGAIN;

				getter_leave(c);
				return rcm_err(err);
			}
			e = channel_wait(c);
			if (!e)
				continue; /* a signal: O_NONBLOCK may be set now */
		}
		if (superseded(e)) {
			rdma_ack_cm_event(&e->ev);
			continue;
		}
		break;
	}
	getter_leave(c); /* the event holds its owner, not the channel */
	if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST)
		request_taken(e->owner, rcm_id_of(e->ev.id));
	if (e->work != RCM_WORK_NONE)
		rcm_event_taken(e);
	*event = &e->ev;
	return 0;
}

RCM_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct rcm_event *e;
	struct rcm_id *o;

	if (!event)
		return rcm_err(EINVAL);
	e = RCM_CONTAINER(event, struct rcm_event, ev);
	o = e->owner;
	pthread_mutex_lock(&o->mtx);
	o->events_completed++;
	/* under o->mtx, before the broadcast: a leave waiting for the join's
	 * events (mcast.c) cannot miss it; e->mc is not touched after */
	if (e->mc)
		atomic_fetch_sub_explicit(&e->mc->pending, 1, memory_order_release);
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->mtx);
	rcm_id_put(o); /* the event's reference: o stays valid until here */
	free(e);
	return 0;
}

void rcm_wait_acked(struct rcm_id *r)
{
	pthread_mutex_lock(&r->mtx);
	while (r->events_completed <
	       atomic_load_explicit(&r->events_reported, memory_order_relaxed))
		pthread_cond_wait(&r->cond, &r->mtx);
	pthread_mutex_unlock(&r->mtx);
}

int rcm_complete(struct rcm_id *r)
{
	struct rdma_cm_event *ev;
	int ret;

	if (!r->sync)
		return 0;
	if (r->id.event) {
		rdma_ack_cm_event(r->id.event);
		r->id.event = NULL;
	}
	ret = rdma_get_cm_event(r->id.channel, &ev);
	if (ret)
		return ret;
	r->id.event = ev;
	if (ev->status) {
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			return rcm_err(ECONNREFUSED);
		return rcm_err(ev->status < 0 ? -ev->status : ev->status);
	}
	return 0;
}

static const char *const event_names[] = {
#define EV_(n) [RDMA_CM_EVENT_##n] = "RDMA_CM_EVENT_" #n
	EV_(ADDR_RESOLVED), EV_(ADDR_ERROR), EV_(ROUTE_RESOLVED), EV_(ROUTE_ERROR),
	EV_(CONNECT_REQUEST), EV_(CONNECT_RESPONSE), EV_(CONNECT_ERROR),
	EV_(UNREACHABLE), EV_(REJECTED), EV_(ESTABLISHED), EV_(DISCONNECTED),
	EV_(DEVICE_REMOVAL), EV_(MULTICAST_JOIN), EV_(MULTICAST_ERROR),
	EV_(ADDR_CHANGE), EV_(TIMEWAIT_EXIT),
#undef EV_
};

RCM_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	unsigned i = (unsigned)event;

	if (i < sizeof(event_names) / sizeof(event_names[0]) && event_names[i])
		return event_names[i];
	return "UNKNOWN EVENT";
}
