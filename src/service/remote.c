/* SPDX-License-Identifier: MIT */
/*
 * The client of cepd, compiled into libcep (not into cepd): the attached
 * CM context. cep_cm_attach() gives a context this file's table of
 * operations (cmr_ops, src/cm/cm_ops.h), so every cep_cm_* call on it is
 * a request to cepd over one Unix SOCK_SEQPACKET connection in the
 * protocol of proto.h, after the checks the public function makes for
 * both kinds. It lives beside the service it speaks to; it uses the
 * engine's channels, context list and leads (cm/cm_internal.h,
 * cm/lead.h), an arrow down.
 *
 * Guarantees (the local context's contracts, cep/cm.h):
 * - Each call is one request and its reply; any number of threads may
 *   have calls in flight (the reply names its request's sequence number).
 *   A call returns the engine's answer, or -ECONNRESET once the service has
 *   gone (socket closed: cepd exited, was killed, restarted): never a hang.
 * - The drop-in's requests whose answer it does not need now (cm_internal.h:
 *   cm_*_nowait - a QP's register and destroy, a destroy, a disconnect, and
 *   an accept in REQ_RCVD and an RTU in REP_RCVD as far as this side
 *   knows) leave CEPD_F_QUIET and return at once: cepd answers only a
 *   failure, which quiet_failed turns into what the caller would have
 *   learnt (a refused accept: its id's REP_ERROR). Its connect of an id
 *   not made yet returns at once too: the answer that names the id is
 *   taken by whoever reads next (a detached call), a refusal is the id's
 *   REQ_ERROR, and a request on the id meanwhile waits for its handle.
 * - Who reads the socket (issue 27, "one wake-up per MAD"): the socket is
 *   the context's lead (cm->lead, cm/lead.h), read by a thread that waits,
 *   which handles every message waiting there on its own thread: a thread
 *   that waits for its call's reply, a thread in cep_cm_channel_wait or the
 *   drop-in's rdma_get_cm_event, the callback thread while it waits for
 *   work (while the context has ids with handlers: their events are then
 *   read where they run). Waiting threads take turns (followers): a reply
 *   read by its caller wakes nobody, one read by another waiting thread
 *   wakes its caller; a channel event goes to its channel, which wakes its
 *   waiter unless that thread read it; a handler id's event is queued for
 *   its callback. When none waits, the reader thread is the backstop, as a
 *   CM worker is for the local engine: it takes the socket after the lease
 *   and lets go at once when a waiting thread wants it.
 * - Callbacks run one at a time per context, in the order the service sent
 *   them, and never inside an application's own call that waits for a
 *   reply (it may hold a lock the callback takes): on the callback thread;
 *   or, for a context of the librdmacm drop-in (cmr_callbacks_inline: its
 *   handler only pushes to its own channels), on the thread that read them
 *   (a thread in rdma_get_cm_event, at the end of its drain, or the
 *   backstop), so that an event reaches the waiting thread with no other
 *   thread running. Such a thread first steps aside from the socket
 *   (cep_lead_step_aside): a callback that waits for a lock never keeps a
 *   caller's reply unread. A callback may make a call: its wait reads
 *   replies, and the events it reads wait for the outer level. Events read
 *   by a call's wait are signalled to whoever reads next (the lead's fd is
 *   an epoll set of the socket and an eventfd) when the call returns - the
 *   caller leads meanwhile, so a signal before would wake only itself -
 *   never lost.
 * - After cep_cm_destroy_id() no event of the id but DESTROYED reaches the
 *   user; from a thread that is not running the context's callbacks it
 *   first waits for a running callback of the id. DESTROYED is an id's
 *   last event; the id's memory stays until DESTROYED was handled (or
 *   acked) and no queued event and no call in flight names it.
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
 *   (a callback already running finishes first; a call a callback makes
 *   meanwhile fails with -ECONNRESET), threads waiting on the context let
 *   go of it (cep_lead_close), and the memory is freed. Of racing calls on
 *   one context exactly one does it; the others get -EINVAL (not live), as
 *   on a local context.
 * - Requests leave in the order they were given, across threads as far as
 *   the threads' own order goes: a quiet request (a destroy, a
 *   disconnect) given within OUT_BURST_MS of the last waits in the
 *   outgoing queue, which leaves in one system call at OUT_BATCH, before
 *   any later request, or OUT_BURST_MS after it began (the reader's
 *   timer); a request that finds the socket full waits in it too, and
 *   its caller reads meanwhile (the queue leaves as room comes). So a
 *   burst of destroys wakes cepd once per batch, not once per request.
 * - cep_cm_attach() waits at most its timeout (default 10 s) for the
 *   service: its connect (a full accept backlog) and the HELLO's answer.
 *   The HELLO tells cepd who we are by credentials it cannot be fooled by
 *   and a pidfd that cannot be recycled (cmr_hello_send, proto.h).
 *
 * Locks: r->lk (calls, the handle map, the pending-event queue and who
 * runs it, each rid's delivering/done/phase) nests outside a channel's
 * mutex; no lead's mutex is taken under it (cm/lead.h takes its own, and
 * a drain takes r->lk with none of them held); id.lock is taken only by
 * cm_event.c's ack (cm_channel_leave), the context getters and, briefly,
 * under r->lk to read an id's context.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cep/sa.h>

#include "cm/cm_internal.h"
#include "cm/lead.h"
#include "core/clock.h"
#include "service/proto.h"
#include "service/remote.h"

/* Coarse course of a connection, as far as this side saw it: what error
 * event the service's death gives the id. */
enum {
	PH_IDLE, PH_LISTEN, PH_REQ_SENT, PH_REQ_RCVD, PH_REP_SENT, PH_REP_RCVD,
	PH_EST, PH_SIDR_SENT, PH_SIDR_RCVD,
};

/* A drain reads at most CMR_BATCH messages per system call (recvmmsg),
 * and at most CMR_ROUNDS such calls: bounded, so a service that keeps
 * sending cannot hold a waiting thread for ever. */
#define CMR_BATCH 8
#define CMR_ROUNDS 4

/* Quiet requests in a burst (issue 27: rdma_destroy_qp, rdma_destroy_id and
 * rdma_disconnect of many connections, each waking cepd's thread for the
 * client): one that comes within OUT_BURST_MS of the last waits in the
 * outgoing queue, and the queue leaves in one system call (sendmmsg) when
 * it holds OUT_BATCH, when any other request is sent, or OUT_BURST_MS
 * after it began at the latest (the reader thread's timer), so cepd reads
 * them in one wake-up. One after a quiet spell leaves at once. */
#define OUT_BATCH 64
#define OUT_BURST_MS 2

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
	uint8_t delivering;      /* r->lk: a thread runs its callback */
	uint8_t done;            /* r->lk: DESTROYED handled (destroy_id_sync) */
	uint8_t hidden;          /* r->lk: never the user's (a child of a listener
				    destroyed before its REQ came) */
	uint8_t gone;            /* r->lk: cep_cm_destroy_id called */
	uint8_t creating;        /* r->lk: a request that makes it is in flight */
	uint8_t counted;         /* r->lk: in r->nhandler (a handler, no channel) */
	uint32_t qpn;            /* r->lk: the QP its unanswered CONNECT or
				    quiet ACCEPT named (cm_*_nowait), for its
				    refusal */
	_Atomic int detached;    /* set under r->lk: the request that makes it
				    is a CONNECT nobody waits for
				    (cmr_connect_nowait); cleared (release)
				    when its answer is taken */
	struct rid *all_next, *all_prev; /* r->lk: every id of r until freed */
};

/* An event waiting for its callback. */
struct pev {
	struct pev *next;
	struct cep_cm_event ev;
};

/* A call in flight: on its caller's stack, in r->calls until it returns;
 * or a detached one (cmr_connect_nowait), on the heap, until its answer is
 * taken (detached_done). */
struct call {
	struct call *next;
	struct rid *made;        /* a CEPD_F_CREATE request's id */
	int detached;            /* nobody waits: its answer's reader ends it */
	uint64_t seq;
	struct cep_lead_waiter *w; /* its thread's (cm/lead.h): woken by the
				      reader of its reply; NULL: it looks every
				      millisecond */
	/* set under r->lk; release: ret and the payload are written before
	 * the caller, which reads it without the lock, sees it */
	_Atomic int done;
	int ret;
	void *out;
	size_t outlen;
};

struct cmr {
	struct cep_cm cm;        /* first: cm.ops &cmr_ops, cm.tp NULL, cm.lead the
				    socket's; nworkers, ca_guid, port, taken,
				    live_next */
	int fd;
	int epfd;                /* the lead's fd: epoll of fd and pend_efd */
	int pend_efd;            /* readable: queued callbacks nobody is about
				    to run (drop-in contexts) */
	int bs_efd;              /* the reader thread's wake-up: its kick, stop */
	int bs_tfd;              /* its timer (CLOCK_MONOTONIC): the lease's end
				    after an application leader left, armed
				    by bs_remind under the lead's mutex */
	_Atomic int stop;        /* the reader thread ends (cmr_destroy) */
	_Atomic int inline_cb;   /* set once under lk (cmr_callbacks_inline):
				    callbacks run on the thread that reads */
	_Atomic int pend_set;    /* changed under lk: pend_efd is written; read
				    without it as a hint (a stale 0 only delays
				    the read that clears it) */
	pthread_t reader;        /* the backstop */
	pthread_t deliverer;     /* the callback thread (ordinary contexts) */
	int deliverer_live;      /* lk: not yet joined */
	struct cep_lead_waiter *cb_w; /* lk: the callback thread's waiter */
	int cb_due;              /* lk: wake the callback thread at unlock */
	int cb_running;          /* lk: a thread runs the queue's callbacks */
	unsigned nhandler;       /* lk: ids with a handler (the callback thread
				    leads while there are some) */
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
	struct omsg *ohead, *otail; /* lk: the outgoing queue (out_push): requests
				    not sent yet, in the order they must leave
				    (a burst's quiet ones, what a full socket
				    refused, a call behind them) */
	unsigned on;             /* lk: how many */
	int out_armed;           /* lk: out_tfd is set (out_arm) */
	int out_tfd;             /* the reader's timer for the queue (out_arm) */
	uint64_t quiet_last_ms;  /* lk: when the last quiet request was given */
	struct {                 /* lk: the latest quiet QP_REGISTERs, one per
				    number (reg_track): cepd's refusal of one
				    (quiet_failed) waits here for the next
				    connect or accept naming the QP
				    (refused_take); a later register or
				    destroy of the number drops it */
		uint32_t qpn;    /* 0: a free slot (cepd refuses 0 anyway) */
		uint32_t tag;    /* its request's QUIET_TAG */
		int err;         /* 0 until refused */
	} regs[32];
	unsigned regs_next;      /* lk: the slot a new number takes */
	uint32_t reg_tag;        /* lk: the last tag given */
	uint64_t out_msgs, out_sends; /* lk: requests sent from the queue, and
				    the sendmmsg calls that sent them
				    (cmr_out_counts) */
	int dead;                /* lk: the service has gone */
	int closing;             /* lk: cep_cm_destroy has decided: no event
				    reaches the user any more, the callback
				    thread ends */
	uint8_t *rbuf;           /* the lead's buffers: CMR_BATCH messages */
};

#define HIDX(h) ((h) & 0xfffffu)

/* The context whose callbacks this thread runs now (its callback thread's
 * for life; an inline runner's while it runs them): it must not wait for
 * it (cep_cm_destroy, a channel wait: -EDEADLK). */
static _Thread_local struct cmr *cb_self;
/* Calls of this thread waiting for their replies (nested: from a
 * callback): while > 0 its drains run no callback. */
static _Thread_local unsigned tl_calls;
/* The context whose queued callbacks this thread runs when its drain (or
 * the backstop's put) is over: nothing to signal for them. */
static _Thread_local struct cmr *tl_will_run;
/* The context whose reader thread (backstop) this is. */
static _Thread_local struct cmr *tl_backstop;

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

/* Unlock r->lk, then wake the callback thread if an event or a new id
 * asked for it (a woken thread wants r->lk at once). */
static void r_unlock(struct cmr *r)
{
	struct cep_lead_waiter *w = NULL;

	if (r->cb_due) {
		r->cb_due = 0;
		w = r->cb_w;
	}
	pthread_mutex_unlock(&r->lk);
	cep_lead_wake(w); /* none for NULL, nor for the calling thread */
}

/* r->lk held: queued callbacks wait for a runner: the next thread that
 * reads the socket finds its fd readable (pend_efd) and runs them, or
 * passes the signal on. Once until a drain clears it. */
static void pend_signal_locked(struct cmr *r)
{
	uint64_t one = 1;

	if (atomic_load_explicit(&r->pend_set, memory_order_relaxed))
		return;
	atomic_store_explicit(&r->pend_set, 1, memory_order_relaxed);
	/* only fails when the counter would overflow: readable already */
	(void)!write(r->pend_efd, &one, sizeof(one));
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
	if (d->counted)
		d->r->nhandler--;
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

/* r->lk held (r_unlock: it may wake the callback thread). */
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
	} else if (h) {
		/* its events are callbacks: the callback thread waits on the
		 * socket from now (r_unlock wakes it to take it) */
		d->counted = 1;
		if (r->nhandler++ == 0 && !atomic_load_explicit(&r->inline_cb, memory_order_relaxed))
			r->cb_due = 1;
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

/* r->lk held (r_unlock after). Hand @ev (about d) on: to its channel, or
 * to the queue of callbacks, whose runner is told when it was idle (the
 * callback thread woken at unlock; a drop-in context's pend_efd signalled,
 * unless this thread runs them next). A reference on d (and the listener)
 * goes with it.
 * Events of an id the user destroyed are dropped, DESTROYED excepted. */
static void route_event(struct cmr *r, struct rid *d, const struct cep_cm_event *ev)
{
	struct pev *p;
	int idle;

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
	/* a runner that is running finds it when it looks for the next */
	idle = !r->qhead && !r->cb_running;
	if (r->qtail)
		r->qtail->next = p;
	else
		r->qhead = p;
	r->qtail = p;
	if (!idle)
		return;
	if (!atomic_load_explicit(&r->inline_cb, memory_order_relaxed))
		r->cb_due = 1;
	else if (tl_will_run != r && !tl_calls)
		/* (A thread in a call reads for its reply and holds the lead,
		 * so it alone would see the signal: its poll woke at once, read
		 * the eventfd and found the socket empty - four system calls
		 * an event. Its call's end signals what it read instead.) */
		pend_signal_locked(r);
}

/* Requests sent CEPD_F_QUIET (send_quiet) are numbered SEQ_QUIET | a
 * 15-bit tag << 48 (a register's generation, reg_track) | their op << 32
 * | their key: the handle they name, or for a request on a QP (no handle)
 * its number: no call waits for them, and cepd answers only a failure,
 * which says what failed. Calls' numbers count up from 1 and never reach
 * bit 48. */
#define SEQ_QUIET (1ull << 63)
#define QUIET_SEQ(op, key) (SEQ_QUIET | (uint64_t)(op) << 32 | (key))
#define QUIET_TAG(seq) ((uint32_t)((seq) >> 48) & 0x7fffu)
#define QUIET_OP(seq) ((uint32_t)((seq) >> 32) & 0xffffu)

/* A quiet request: @op on id @handle (0: none) with a = @a. */
static void quiet_req(struct cepd_req *q, uint32_t op, uint32_t handle, uint32_t a)
{
	memset(q, 0, sizeof(*q));
	q->h.op = op;
	q->h.len = sizeof(*q);
	q->h.seq = QUIET_SEQ(op, handle ? handle : a);
	q->flags = CEPD_F_QUIET;
	q->handle = handle;
	q->a = a;
}

/* ---- the outgoing queue --------------------------------------------------- */

/* One request waiting to leave, whole. */
struct omsg {
	struct omsg *next;
	size_t len;
	_Alignas(8) uint8_t buf[];
};

/* r->lk held. Wake the reader OUT_BURST_MS from now to send the queue, if
 * it is not set to already. */
static void out_arm(struct cmr *r)
{
	struct itimerspec its = { .it_value = { .tv_nsec = OUT_BURST_MS * 1000000L } };

	if (r->out_armed)
		return;
	if (!timerfd_settime(r->out_tfd, 0, &its, NULL))
		r->out_armed = 1;
}

/* r->lk held. Send what the queue holds, in order, never blocking: until
 * it is empty or the socket is full (the rest waits for the next flush:
 * every request sent, every message read, the reader's timer, which stays
 * set while anything waits). A socket that has ended drops the queue: cepd
 * ends every id and QP of ours with it, and the reader finds the end. */
static void out_flush(struct cmr *r)
{
	while (r->ohead) {
		struct mmsghdr mm[OUT_BATCH];
		struct iovec iov[OUT_BATCH];
		struct omsg *m = r->ohead;
		unsigned k = 0;
		int n;

		for (; m && k < OUT_BATCH; m = m->next, k++) {
			iov[k].iov_base = m->buf;
			iov[k].iov_len = m->len;
			memset(&mm[k], 0, sizeof(mm[k]));
			mm[k].msg_hdr.msg_iov = &iov[k];
			mm[k].msg_hdr.msg_iovlen = 1;
		}
		do
			n = sendmmsg(r->fd, mm, k, MSG_DONTWAIT | MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS))
			break;
		if (n >= 0) {
			r->out_sends++;
			r->out_msgs += (unsigned)n;
		} else {
			n = (int)r->on; /* gone: nothing of it would be read */
		}
		for (int i = 0; i < n && r->ohead; i++) {
			m = r->ohead;
			r->ohead = m->next;
			r->on--;
			free(m);
		}
		if (!r->ohead)
			r->otail = NULL;
	}
	if (r->ohead)
		out_arm(r);
}

/* r->lk held. Queue @len bytes of request at the end. 0 or -ENOMEM. */
static int out_push(struct cmr *r, const void *req, size_t len)
{
	struct omsg *m = malloc(sizeof(*m) + len);

	if (!m)
		return -ENOMEM;
	m->next = NULL;
	m->len = len;
	memcpy(m->buf, req, len);
	if (r->otail)
		r->otail->next = m;
	else
		r->ohead = m;
	r->otail = m;
	r->on++;
	return 0;
}

/* r->lk held. A quiet request (@q->h.len bytes) sent or queued, never
 * blocking: at once when nothing waits before it and no burst is on
 * (@burst 0), else queued behind the others, to leave with them. 0;
 * -ENOMEM when it could be neither sent (the socket full) nor queued. A
 * broken socket counts as sent: cepd then ends everything of ours
 * itself. */
static int out_quiet(struct cmr *r, const struct cepd_req *q, int burst)
{
	int ret;

	if (!r->ohead && !burst) {
		ssize_t n;

		do
			n = send(r->fd, q, q->h.len, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS))
			return 0;
	}
	ret = out_push(r, q, q->h.len);
	if (ret)
		return ret;
	if (r->on >= OUT_BATCH)
		out_flush(r);
	else
		out_arm(r);
	return 0;
}

/* r->lk held. @q sent now, never blocking: at once, or behind the
 * outgoing queue's burst, which then leaves with it (what the socket
 * refuses waits there for the next flush). 0, or -ENOMEM (neither sent nor
 * queued: nothing changed). */
static int out_now(struct cmr *r, const struct cepd_req *q)
{
	int ret = out_quiet(r, q, 0);

	if (!ret && r->ohead)
		out_flush(r);
	return ret;
}

/* r->lk held. Ask cepd to end an id it made for us that names nothing of
 * ours (a REQ's whose listener is gone, or one we could not take): quiet
 * (no answer unless it fails, and that one finds no id of ours in
 * quiet_failed), never blocking, under the lock, through the outgoing
 * queue (nothing else names such an id, and cepd cannot give its handle
 * to another before it ends, so a wait there changes nothing but when it
 * ends); only if it can be neither sent nor queued is it lost, and the id
 * stays in cepd until this client's socket ends (said on stderr). */
static void send_async_destroy(struct cmr *r, uint32_t handle)
{
	struct cepd_req q;

	quiet_req(&q, CEPD_DESTROY_ID, handle, 0);
	if (out_quiet(r, &q, 0))
		fprintf(stderr, "libcep: remote CM: out of memory: an id of cepd's "
			"left until this process's connection ends\n");
}

void cmr_out_counts(struct cep_cm *cm, uint64_t *msgs, uint64_t *sends, unsigned *queued)
{
	struct cmr *r = R(cm);

	pthread_mutex_lock(&r->lk);
	*msgs = r->out_msgs;
	*sends = r->out_sends;
	*queued = r->on;
	pthread_mutex_unlock(&r->lk);
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

/* r->lk held. One EVENTS message from the service (trusted, but checked:
 * a record that does not fit, names no id of ours or a bad type is
 * skipped). */
static void take_events(struct cmr *r, const uint8_t *buf, size_t len)
{
	const struct cepd_events *m = (const struct cepd_events *)buf;
	size_t off = sizeof(*m);

	if (len < sizeof(*m))
		return;
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
}

/* Callers to wake once r->lk is dropped (their replies came). */
struct wakes {
	struct cep_lead_waiter *w[CMR_BATCH];
	unsigned n;
};

static void wakes_add(struct wakes *k, struct cep_lead_waiter *w)
{
	if (!w)
		return;
	for (unsigned i = 0; i < k->n; i++)
		if (k->w[i] == w)
			return;
	if (k->n < CMR_BATCH)
		k->w[k->n++] = w;
	else
		cep_lead_wake(w); /* never: one reply per message */
}

static void wakes_flush(struct wakes *k)
{
	for (unsigned i = 0; i < k->n; i++)
		cep_lead_wake(k->w[i]); /* none for the calling thread's own */
	k->n = 0;
}

static void destroyed_here(struct cmr *r, struct rid *d);

static int refused_take(struct cmr *r, uint32_t qpn, int ret);

/* r->lk held (r_unlock after): @d's error event of @type with @status,
 * made here (no message: cepd refused a request nobody waited for, or has
 * gone), routed as one from cepd. */
static void error_event(struct cmr *r, struct rid *d, unsigned type, int status)
{
	struct cep_cm_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.type = type;
	ev.msg.type = CEP_MSG_INVALID;
	ev.status = status;
	ev.id = &d->id;
	pthread_mutex_lock(&d->id.lock);
	ev.context = d->id.context;
	pthread_mutex_unlock(&d->id.lock);
	route_event(r, d, &ev);
}

/* r->lk held (r_unlock after): cepd refused @d's quiet ACCEPT with @ret
 * (cm_accept_nowait). -EINVAL: the request had left REQ_RCVD, which its
 * own event tells (or the caller did it). Else, while nothing else has
 * moved the id on, REP_ERROR with the refusal's status - the error of a
 * refused register of the QP, if one is kept, as cmr_accept returns it -
 * where cep_cm_accept would have returned it; cepd has rejected the
 * request already (request.c), so no other event of the connection
 * follows. */
static void accept_refused(struct cmr *r, struct rid *d, int ret)
{
	if (ret == -EINVAL || d->gone || d->hidden || d->phase != PH_REP_SENT)
		return;
	/* PH_IDLE after it: this refusal is told once */
	error_event(r, d, CEP_CM_EV_REP_ERROR, refused_take(r, d->qpn, ret));
}

/* r->lk held (r_unlock after): cepd refused a quiet request (@op, @ret).
 * A DESTROY_ID's id (@handle) then gets no DESTROYED from cepd: it ends
 * here, as when the service is gone, so that nothing waits for it. A
 * QP_REGISTER's refusal (@handle: the QP's number, @tag: its request's) is
 * kept for the connect or accept that will name the QP
 * (cm_qp_register_nowait), if that register is still one of the latest 32
 * tracked (reg_track). An ACCEPT's is its id's event (accept_refused).
 * The others change nothing a refusal could leave half done: a
 * QP_DESTROY's number was not cepd's to forget (-ENOENT); a DISCONNECT's
 * id was not connected (-EINVAL), as the caller's cm_disconnect_nowait
 * allows; an RTU's connection had left REP_RCVD (-EINVAL, the engine's
 * only refusal of an RTU), as an event of the id tells (cm_rtu_nowait). */
static void quiet_failed(struct cmr *r, uint32_t op, uint32_t handle, uint32_t tag, int ret)
{
	struct rid *d;

	if (ret == 0)
		return;
	if (op == CEPD_QP_REGISTER) { /* @handle: the QP's number */
		for (unsigned i = 0; i < sizeof(r->regs) / sizeof(r->regs[0]); i++)
			if (handle && r->regs[i].qpn == handle && r->regs[i].tag == tag)
				r->regs[i].err = ret; /* else superseded: dropped */
		return;
	}
	d = map_get(r, handle);
	if (!d)
		return;
	if (op == CEPD_ACCEPT)
		accept_refused(r, d, ret);
	else if (op == CEPD_DESTROY_ID && d->gone)
		destroyed_here(r, d);
}

/* r->lk held. A connect or accept naming @qpn failed with @ret: the
 * error of the latest quiet register of @qpn if cepd refused it (its
 * answer came before this call's: cepd answers in order), which is then
 * forgotten; else @ret. */
static int refused_take(struct cmr *r, uint32_t qpn, int ret)
{
	for (unsigned i = 0; i < sizeof(r->regs) / sizeof(r->regs[0]); i++)
		if (qpn && r->regs[i].qpn == qpn && r->regs[i].err) {
			r->regs[i].qpn = 0;
			return r->regs[i].err;
		}
	return ret;
}

/* r->lk held. A request on QP @qpn is about to leave: any earlier quiet
 * register of it is superseded (a refusal of it that comes later finds no
 * slot of its tag). With @quiet_reg, the quiet register of @qpn: it takes
 * a slot (the oldest's when all are taken: a refusal lost that way leaves
 * the connect with cepd's own answer) and returns its tag. */
static uint32_t reg_track(struct cmr *r, uint32_t qpn, int quiet_reg)
{
	const unsigned n = sizeof(r->regs) / sizeof(r->regs[0]);
	unsigned slot = n;

	for (unsigned i = 0; i < n; i++)
		if (r->regs[i].qpn == qpn) {
			r->regs[i].qpn = 0;
			slot = i;
		}
	if (!quiet_reg)
		return 0;
	if (slot == n)
		slot = r->regs_next++ % n;
	r->reg_tag = (r->reg_tag + 1) & 0x7fffu;
	r->regs[slot].qpn = qpn;
	r->regs[slot].tag = r->reg_tag;
	r->regs[slot].err = 0;
	return r->reg_tag;
}

/* r->lk held (r_unlock after): the answer to a detached CONNECT
 * (cmr_connect_nowait) has been taken - the id named, or not made - or
 * the service has gone (@ret CMR_GONE; r->creating counted down by the
 * caller in both cases). The id's requests waiting for its handle go on;
 * a refusal, while nothing else has moved the id on, is its REQ_ERROR with
 * that status (a refused register's error if one is kept for the QP, as
 * cmr_connect returns it): cepd sent no REQ. The call ends here. */
static void detached_done(struct cmr *r, struct call *c, int ret)
{
	struct rid *d = c->made;

	for (struct call **pp = &r->calls; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	if (!ret && !d->handle)
		ret = -ENOMEM; /* made there, but not nameable here */
	d->creating = 0;
	/* release: the handle (or its absence) before a waiter's acquire */
	atomic_store_explicit(&d->detached, 0, memory_order_release);
	pthread_cond_broadcast(&r->cv);
	if (ret && !d->gone && !d->hidden && d->phase == PH_REQ_SENT) /* PH_IDLE after */
		error_event(r, d, CEP_CM_EV_REQ_ERROR,
			    ret == CMR_GONE ? ret : refused_take(r, d->qpn, ret));
	rid_put_locked(d); /* the call's */
	free(c);
}

/* r->lk held. The answer to a call; a creating request's names its id.
 * Its caller is woken through @k, after the lock. A quiet request's
 * failure goes to quiet_failed. */
static void take_reply(struct cmr *r, const uint8_t *buf, size_t len, struct wakes *k)
{
	const struct cepd_rep *m = (const struct cepd_rep *)buf;

	if (len < sizeof(*m) || !m->h.seq)
		return;
	if (m->h.seq & SEQ_QUIET) {
		quiet_failed(r, QUIET_OP(m->h.seq), (uint32_t)m->h.seq, QUIET_TAG(m->h.seq),
			     m->ret);
		return;
	}
	for (struct call *c = r->calls; c; c = c->next)
		if (c->seq == m->h.seq && !atomic_load_explicit(&c->done, memory_order_relaxed)) {
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
				if (c->detached) {
					detached_done(r, c, m->ret);
					return;
				}
			} else if (c->out) {
				memcpy(c->out, buf + sizeof(*m), n < c->outlen ? n : c->outlen);
			}
			c->outlen = n;
			c->ret = m->ret;
			/* the call stays in r->calls (its caller unlinks it under
			 * r->lk, after this unlock), so c->w is read safely; the
			 * waiter outlives it (lead.h) */
			wakes_add(k, c->w);
			/* release: ret, outlen, the payload before the caller's
			 * acquire in call_ready */
			atomic_store_explicit(&c->done, 1, memory_order_release);
			return;
		}
}

static int cmr_destroy_id(struct cep_cm_id *id);

/* r->lk held (r_unlock after): the service has gone. Fail every call;
 * give each id in a connection's course its error event, and each id the
 * user destroyed (or a hidden one) the DESTROYED the service will no
 * longer send. The socket leaves the lead's fd: a closed socket would keep
 * it readable. */
static void die_locked(struct cmr *r)
{
	if (r->dead)
		return;
	r->dead = 1;
	(void)epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->fd, NULL);
	for (struct call *c = r->calls, *next; c; c = next) {
		next = c->next;
		if (c->detached) { /* nobody waits: it ends here */
			r->creating--;
			detached_done(r, c, CMR_GONE);
		}
	}
	for (struct call *c = r->calls; c; c = c->next)
		if (!atomic_load_explicit(&c->done, memory_order_relaxed)) {
			c->ret = CMR_GONE;
			if (c->made)
				r->creating--;
			/* release: ret before the caller sees done */
			atomic_store_explicit(&c->done, 1, memory_order_release);
			cep_lead_wake(c->w); /* rare: under the lock */
		}
	for (uint32_t i = 0; i < r->mapcap; i++) {
		struct rid *d = r->map[i];
		unsigned type;

		if (!d || d->destroyed || d->hidden || d->gone)
			continue;
		switch (d->phase) {
		case PH_REQ_SENT: case PH_REQ_RCVD: case PH_REP_RCVD:
			type = CEP_CM_EV_REQ_ERROR;
			break;
		case PH_REP_SENT:
			type = CEP_CM_EV_REP_ERROR;
			break;
		case PH_EST:
			type = CEP_CM_EV_DREQ_ERROR;
			break;
		case PH_SIDR_SENT: case PH_SIDR_RCVD:
			type = CEP_CM_EV_SIDR_REQ_ERROR;
			break;
		default:
			continue;
		}
		error_event(r, d, type, CMR_GONE);
	}
	/* After a DESTROY_ID (sent quiet: no reply) its DESTROYED is the
	 * service's to send: it never will now. Made here, once
	 * (destroyed_here skips an id that has had it; cmr_destroy_id's own,
	 * for a send the death failed, or quiet_failed's, finds it had). A
	 * hidden id's frees it: the next is read first. */
	for (struct rid *d = r->all, *next; d; d = next) {
		next = d->all_next;
		if (d->gone || d->hidden)
			destroyed_here(r, d);
	}
	pthread_cond_broadcast(&r->cv);
}

/* r->lk held. One message from the service. */
static void take_msg(struct cmr *r, const uint8_t *buf, size_t len, struct wakes *k)
{
	if (len < sizeof(struct cepd_hdr))
		return;
	switch (((const struct cepd_hdr *)buf)->op) {
	case CEPD_REPLY:
		take_reply(r, buf, len, k);
		break;
	case CEPD_EVENTS:
		take_events(r, buf, len);
		break;
	default:
		break;
	}
	if (r->ohead) /* cepd reads ours: room again, likely */
		out_flush(r);
}

/* ---- callbacks ------------------------------------------------------------ */

/* Run the queue's callbacks, one at a time, in order, until it is empty
 * or the context closes; the caller has set r->cb_running (it is the
 * runner, and clears it here under the same lock that finds the queue
 * empty, so an event queued meanwhile is either run here or finds no
 * runner and signals one). Any thread without an application's lock
 * (the callback thread, an inline runner); cb_self is @r meanwhile. */
static void deliver(struct cmr *r)
{
	struct cmr *outer = cb_self;

	cb_self = r;
	for (;;) {
		struct pev *p;
		struct rid *d, *l;
		int verdict, gone, closing;

		pthread_mutex_lock(&r->lk);
		p = r->qhead;
		if (!p || r->closing) { /* closing: cmr_destroy drops the rest */
			r->cb_running = 0;
			pthread_mutex_unlock(&r->lk);
			break;
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
	cb_self = outer;
}

/* A drop-in context's callbacks on this thread, unless another thread
 * runs them now (it takes ours too, in order). @aside: this thread leads
 * the socket in cep_lead_wait (it gives it up first, cm/lead.h: the
 * handler takes the drop-in's locks, whose holder may wait for a reply). */
static void run_inline(struct cmr *r, int aside)
{
	pthread_mutex_lock(&r->lk);
	if (!r->qhead || r->cb_running || r->closing) {
		pthread_mutex_unlock(&r->lk);
		return;
	}
	r->cb_running = 1;
	pthread_mutex_unlock(&r->lk);
	if (aside)
		cep_lead_step_aside();
	deliver(r);
}

/* ---- the lead: the socket, read by whoever waits ---------------------------- */

/* The lead's drain (cm/lead.h): on whichever thread leads - a caller
 * waiting for its reply, a thread in a channel wait or rdma_get_cm_event,
 * the callback thread waiting for work, the backstop - with none of the
 * lead's locks held. Reads what waits on the socket, at most
 * CMR_BATCH x CMR_ROUNDS messages, without blocking, and takes each:
 * replies wake their callers (none if the caller is this thread), channel
 * events go to their channels, callbacks to the queue. A drop-in context's
 * callbacks then run here, unless this thread is in a call (they wait for
 * the outer level, or for the next reader: the call's end signals them)
 * or is the backstop (it runs them once it has let go of the socket).
 * > 0 if a message was read. */
static int cmr_drain(void *arg)
{
	struct cmr *r = arg;
	struct mmsghdr mm[CMR_BATCH];
	struct iovec iov[CMR_BATCH];
	struct wakes k = { .n = 0 };
	struct cmr *outer = tl_will_run;
	int will_run = atomic_load_explicit(&r->inline_cb, memory_order_relaxed) && !tl_calls;
	int got = 0, dead = 0, died = 0;

	if (atomic_load_explicit(&r->pend_set, memory_order_relaxed)) {
		uint64_t v;

		/* the signal is ours now: we run them, or our call's end
		 * signals them again */
		pthread_mutex_lock(&r->lk);
		if (atomic_load_explicit(&r->pend_set, memory_order_relaxed))
			(void)!read(r->pend_efd, &v, sizeof(v));
		atomic_store_explicit(&r->pend_set, 0, memory_order_relaxed);
		pthread_mutex_unlock(&r->lk);
	}
	if (will_run)
		tl_will_run = r;
	for (unsigned round = 0; round < CMR_ROUNDS && !dead; round++) {
		int n;

		for (unsigned i = 0; i < CMR_BATCH; i++) {
			iov[i].iov_base = r->rbuf + (size_t)i * CEPD_MSG_MAX;
			iov[i].iov_len = CEPD_MSG_MAX;
			memset(&mm[i], 0, sizeof(mm[i]));
			mm[i].msg_hdr.msg_iov = &iov[i];
			mm[i].msg_hdr.msg_iovlen = 1;
		}
		n = recvmmsg(r->fd, mm, CMR_BATCH, MSG_DONTWAIT, NULL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			/* EAGAIN: all read; ENOMEM, ENOBUFS: the next reader
			 * tries again; anything else is the socket's end */
			dead = errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOMEM &&
			       errno != ENOBUFS;
			break;
		}
		pthread_mutex_lock(&r->lk);
		for (int i = 0; i < n; i++) {
			if (!mm[i].msg_len) { /* SOCK_SEQPACKET: end of the stream */
				dead = 1;
				break;
			}
			take_msg(r, r->rbuf + (size_t)i * CEPD_MSG_MAX, mm[i].msg_len, &k);
			got++;
		}
		if (dead) {
			die_locked(r);
			died = 1;
		}
		r_unlock(r);
		wakes_flush(&k);
		if (n < CMR_BATCH)
			break;
	}
	if (dead && !died) {
		pthread_mutex_lock(&r->lk);
		die_locked(r);
		r_unlock(r);
	}
	tl_will_run = outer;
	if (will_run && tl_backstop != r)
		run_inline(r, 1);
	return got > 0 || dead;
}

/* The backstop's kick (cm/lead.h): a waiting thread wants the socket. */
static void bs_kick(void *arg)
{
	struct cmr *r = arg;
	uint64_t one = 1;

	(void)!write(r->bs_efd, &one, sizeof(one)); /* fails only when woken already */
}

/* The backstop's remind (cm/lead.h): the application leader left with no
 * follower; be awake by @at_ms to take the lead when the lease ends. Under
 * the lead's mutex: a timerfd armed, no wake-up now. Only while the lead
 * is open (lead_shut closes the timer after destroying the lead). */
static void bs_remind(void *arg, uint64_t at_ms)
{
	struct cmr *r = arg;
	struct itimerspec its = { .it_value = { .tv_sec = (time_t)(at_ms / 1000),
						.tv_nsec = (long)(at_ms % 1000) * 1000000 } };

	if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
		its.it_value.tv_nsec = 1; /* 0 would disarm it */
	(void)timerfd_settime(r->bs_tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* The reader thread: the backstop. Sleeps on its eventfd, its timer and,
 * while it holds the lead (no thread waits, the lease is over), on the
 * socket; drains it, lets go, then runs a drop-in context's callbacks
 * (without the socket: a callback may wait for a thread that wants it).
 * While an application thread leads it sleeps until that one leaves
 * (bs_remind), not a look every lease: an idle program waiting in
 * rdma_get_cm_event woke it 50 times a second. Until cmr_destroy stops
 * it. */
static void *reader_main(void *arg)
{
	struct cmr *r = arg;
	struct cep_lead *l = r->cm.lead;

	tl_backstop = r;
	while (!atomic_load_explicit(&r->stop, memory_order_acquire)) {
		struct pollfd pf[4] = { { .fd = r->bs_efd, .events = POLLIN },
					{ .fd = r->bs_tfd, .events = POLLIN },
					{ .fd = r->out_tfd, .events = POLLIN },
					{ .fd = r->epfd, .events = POLLIN } };
		int ms = -1, leading, n;

		leading = cep_lead_backstop_take(l, &ms, bs_kick, bs_remind, r);
		n = poll(pf, leading ? 4 : 3, ms);
		if (n > 0) {
			uint64_t v;

			if (pf[0].revents & POLLIN)
				(void)!read(r->bs_efd, &v, sizeof(v));
			if (pf[1].revents & POLLIN) /* fired: read, or it stays ready */
				(void)!read(r->bs_tfd, &v, sizeof(v));
			if (pf[2].revents & POLLIN) { /* the queue's time is up */
				(void)!read(r->out_tfd, &v, sizeof(v));
				pthread_mutex_lock(&r->lk);
				r->out_armed = 0;
				if (!r->dead)
					out_flush(r); /* sets it again if some stay */
				pthread_mutex_unlock(&r->lk);
			}
		}
		if (leading) {
			if (n > 0 && (pf[3].revents & (POLLIN | POLLERR | POLLHUP)))
				(void)cep_lead_backstop_drain(l);
			cep_lead_backstop_put(l);
		}
		if (atomic_load_explicit(&r->inline_cb, memory_order_relaxed))
			run_inline(r, 0);
	}
	return NULL;
}

/* What the callback thread waits for: callbacks to run, the context's end
 * or its becoming a drop-in one, or a change of whether it should lead. */
struct cb_wait {
	struct cmr *r;
	int leads;               /* it waits leading the socket */
};

static int cb_ready(void *arg)
{
	struct cb_wait *w = arg;
	struct cmr *r = w->r;
	int ready;

	pthread_mutex_lock(&r->lk);
	ready = r->closing || atomic_load_explicit(&r->inline_cb, memory_order_relaxed) ||
		(r->qhead && !r->cb_running) || w->leads != (r->nhandler > 0);
	pthread_mutex_unlock(&r->lk);
	return ready;
}

/* The callback thread of an ordinary context: the queued callbacks, one at
 * a time, in the order they came; after the service has gone, the events
 * made here. It waits for them on the socket while the context has ids
 * with handlers (it reads their events itself: no hop from another
 * thread), else on its eventfd. Ends with the context, or when it becomes
 * a drop-in one (cmr_callbacks_inline). */
static void *deliverer_main(void *arg)
{
	struct cb_wait w = { .r = arg };
	struct cmr *r = w.r;
	struct cep_lead *l = r->cm.lead;
	struct cep_lead_waiter *me = cep_lead_self();

	cb_self = r;
	pthread_mutex_lock(&r->lk);
	r->cb_w = me;
	pthread_mutex_unlock(&r->lk);
	for (;;) {
		pthread_mutex_lock(&r->lk);
		if (r->closing || atomic_load_explicit(&r->inline_cb, memory_order_relaxed)) {
			pthread_mutex_unlock(&r->lk);
			break;
		}
		if (r->qhead && !r->cb_running) {
			r->cb_running = 1;
			pthread_mutex_unlock(&r->lk);
			deliver(r);
			continue;
		}
		w.leads = r->nhandler > 0;
		pthread_mutex_unlock(&r->lk);
		(void)cep_lead_wait(&l, w.leads ? 1 : 0, -1, cb_ready, &w, -1);
	}
	cb_self = NULL;
	return NULL;
}

/* ---- calls --------------------------------------------------------------- */

/* r->lk held: a wait as a call's (tl_calls) has ended; callbacks it read
 * and could not run go to whoever reads next (route_event did not signal
 * them: this thread led meanwhile). */
static void waited_locked(struct cmr *r)
{
	if (r->qhead && !r->cb_running && !r->closing &&
	    atomic_load_explicit(&r->inline_cb, memory_order_relaxed))
		pend_signal_locked(r);
}

static int call_ready(void *arg)
{
	struct call *c = arg;

	/* acquire: pairs with the reader's release (ret, payload) */
	return atomic_load_explicit(&c->done, memory_order_acquire);
}

/* Send @q (h.len set) and wait for its reply: the service's answer, or
 * -ECONNRESET. @out receives up to @outlen bytes of the reply's payload.
 * The calling thread leads the socket while it waits (it reads its reply
 * itself, and whatever else comes meanwhile), or follows whoever leads it
 * and is woken by its reply's reader. Any thread, from a callback too. */
static int call_len(struct cmr *r, struct cepd_req *q, void *out, size_t outlen, size_t *got,
		    struct rid *made)
{
	struct call c = { .out = out, .outlen = outlen, .made = made };
	struct cep_lead *l = r->cm.lead;
	int queued = 0;
	ssize_t n;

	c.w = cep_lead_self();
	pthread_mutex_lock(&r->lk);
	if (r->dead) {
		pthread_mutex_unlock(&r->lk);
		return CMR_GONE;
	}
	c.seq = ++r->seq;
	q->h.seq = c.seq;
	if (r->ohead) /* before ours: they were given first */
		out_flush(r);
	if (r->ohead) { /* the socket is full: ours waits behind them */
		queued = 1;
		if (out_push(r, q, q->h.len)) {
			pthread_mutex_unlock(&r->lk);
			return -ENOMEM; /* nothing sent */
		}
	}
	if (made)
		r->creating++; /* its reply's take_reply counts it down */
	c.next = r->calls;
	r->calls = &c;
	pthread_mutex_unlock(&r->lk);
	n = 0;
	if (!queued)
		do
			n = send(r->fd, q, q->h.len, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
	if (n < 0) {
		int e = errno;

		pthread_mutex_lock(&r->lk);
		if (!atomic_load_explicit(&c.done, memory_order_relaxed)) {
			c.ret = e == EMSGSIZE ? -EMSGSIZE : CMR_GONE;
			if (made)
				r->creating--;
			atomic_store_explicit(&c.done, 1, memory_order_relaxed);
		}
		pthread_mutex_unlock(&r->lk);
	}
	/* Reads what comes, its reply among it; a callback's call too (its
	 * events wait for the outer level: tl_calls). A signal does not end
	 * the wait: the call has been sent. */
	tl_calls++;
	while (cep_lead_wait(&l, 1, -1, call_ready, &c, -1) == -EINTR)
		;
	tl_calls--;
	pthread_mutex_lock(&r->lk);
	for (struct call **pp = &r->calls; *pp; pp = &(*pp)->next)
		if (*pp == &c) {
			*pp = c.next;
			break;
		}
	waited_locked(r);
	pthread_mutex_unlock(&r->lk);
	if (got)
		*got = c.ret != CMR_GONE ? c.outlen : 0;
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

static int made_ready(void *arg)
{
	struct rid *d = arg;

	/* acquire: pairs with detached_done's release */
	return !atomic_load_explicit(&d->detached, memory_order_acquire);
}

/* r->lk held (dropped and taken again while it waits): wait while another
 * request is making @d. */
static void wait_created(struct cmr *r, struct rid *d)
{
	while (d->creating) {
		struct cep_lead *l = r->cm.lead;

		if (!atomic_load_explicit(&d->detached, memory_order_relaxed)) {
			pthread_cond_wait(&r->cv, &r->lk); /* its call ends, also on death */
			continue;
		}
		/* A CONNECT nobody waits for makes it (cmr_connect_nowait):
		 * its answer may need this thread to read it. Lead while
		 * waiting, as a call does (its events wait for the outer
		 * level); as a follower, look again every millisecond
		 * (nobody wakes this thread for another's answer). */
		pthread_mutex_unlock(&r->lk);
		tl_calls++;
		(void)cep_lead_wait(&l, 1, -1, made_ready, d, 1);
		tl_calls--;
		pthread_mutex_lock(&r->lk);
		waited_locked(r);
	}
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

int cmr_mc(struct cep_cm *cm, uint32_t op, const struct cepd_mc *m, struct cepd_mc_rep *rep)
{
	_Alignas(8) uint8_t buf[REQ_BUF];
	size_t got = 0;
	int ret;

	if (!cm || cm->ops != &cmr_ops || !m ||
	    (op != CEPD_MC_JOIN && op != CEPD_MC_LEAVE && op != CEPD_MC_BCAST) ||
	    (op != CEPD_MC_LEAVE && !rep))
		return -EINVAL;
	ret = build(buf, op, 0, 0, 0, 0, 0, 0, m, sizeof(*m), NULL, 0, NULL, 0);
	if (ret)
		return ret;
	ret = call_len(R(cm), (struct cepd_req *)buf, rep, rep ? sizeof(*rep) : 0, &got, NULL);
	if (!ret && rep && got != sizeof(*rep))
		ret = -EPROTO; /* answered without the SA's answer */
	return ret;
}

int cmr_path_query(struct cep_cm *cm, uint64_t comp_mask, uint32_t flags,
		   const struct cep_sa_path *query, struct cep_sa_path *out)
{
	_Alignas(8) uint8_t buf[REQ_BUF];
	uint8_t rec[CEP_SA_PATH_REC_SIZE];
	struct cepd_path_q w;
	size_t got = 0;
	int ret;

	if (!cm || cm->ops != &cmr_ops || !query || !out)
		return -EINVAL;
	memset(&w, 0, sizeof(w));
	w.comp_mask = comp_mask;
	w.flags = flags;
	ret = cep_sa_path_encode(query, w.rec);
	if (!ret)
		ret = build(buf, CEPD_PATH_QUERY, 0, 0, 0, 0, 0, 0, &w, sizeof(w), NULL, 0, NULL, 0);
	if (ret)
		return ret;
	ret = call_len(R(cm), (struct cepd_req *)buf, rec, sizeof(rec), &got, NULL);
	if (!ret && got != sizeof(rec))
		ret = -EPROTO; /* answered without the record */
	if (!ret)
		cep_sa_path_decode(rec, out);
	return ret;
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
/* The socket as the context's lead (cm->lead, cm/lead.h): the lead's fd
 * is an epoll set of the socket and pend_efd (queued callbacks that wait
 * for a runner: a reader finds them as it finds a message), its drain
 * cmr_drain; and the backstop's eventfd. 0 or -errno. */
static int lead_open(struct cmr *r)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct cep_lead_source src = { .drain = cmr_drain, .ctx = r };

	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (r->epfd < 0)
		return -errno;
	r->pend_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->pend_efd < 0)
		return -errno;
	r->bs_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->bs_efd < 0)
		return -errno;
	r->bs_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (r->bs_tfd < 0)
		return -errno;
	r->out_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (r->out_tfd < 0)
		return -errno;
	ev.data.fd = r->fd;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->fd, &ev))
		return -errno;
	ev.data.fd = r->pend_efd;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->pend_efd, &ev))
		return -errno;
	src.fd = r->epfd;
	return cep_lead_create(&src, &r->cm.lead);
}

/* The lead and its descriptors, once no thread can touch them (or none
 * was started). */
static void lead_shut(struct cmr *r)
{
	cep_lead_destroy(r->cm.lead);
	r->cm.lead = NULL;
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->pend_efd >= 0)
		close(r->pend_efd);
	if (r->bs_efd >= 0)
		close(r->bs_efd);
	if (r->bs_tfd >= 0)
		close(r->bs_tfd);
	if (r->out_tfd >= 0)
		close(r->out_tfd);
	r->epfd = r->pend_efd = r->bs_efd = r->bs_tfd = r->out_tfd = -1;
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
	r->epfd = r->pend_efd = r->bs_efd = r->bs_tfd = r->out_tfd = -1;
	r->rbuf = malloc((size_t)CMR_BATCH * CEPD_MSG_MAX);
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
	ret = lead_open(r);
	if (ret)
		goto fail;
	pthread_mutex_init(&r->lk, NULL);
	pthread_cond_init(&r->cv, NULL);
	ret = -pthread_create(&r->deliverer, NULL, deliverer_main, r);
	if (!ret) {
		r->deliverer_live = 1;
		ret = -pthread_create(&r->reader, NULL, reader_main, r);
		if (ret) {
			pthread_mutex_lock(&r->lk);
			r->closing = 1;
			pthread_mutex_unlock(&r->lk);
			cep_lead_close(r->cm.lead); /* the callback thread lets go */
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
	lead_shut(r);
	if (r->fd >= 0)
		close(r->fd);
	free(r->rbuf);
	free(r);
	return ret;
}

int cmr_callbacks_inline(struct cep_cm *cm)
{
	struct cmr *r;
	struct cep_lead_waiter *w;
	int join;

	if (!cm || cm->ops != &cmr_ops)
		return -EINVAL;
	r = R(cm);
	pthread_mutex_lock(&r->lk);
	if (atomic_load_explicit(&r->inline_cb, memory_order_relaxed)) {
		pthread_mutex_unlock(&r->lk);
		return 0;
	}
	atomic_store_explicit(&r->inline_cb, 1, memory_order_relaxed);
	w = r->cb_w;
	join = r->deliverer_live;
	r->deliverer_live = 0;
	pthread_mutex_unlock(&r->lk);
	/* the callback thread sees it (cb_ready) and ends: no thread idles
	 * for a context whose callbacks run where they are read */
	cep_lead_wake(w);
	if (join)
		pthread_join(r->deliverer, NULL);
	pthread_mutex_lock(&r->lk);
	if (r->qhead && !r->cb_running) /* queued before: the next reader's */
		pend_signal_locked(r);
	pthread_mutex_unlock(&r->lk);
	return 0;
}

/* 1 on a thread that runs @cm's callbacks now (its callback thread, a
 * reader running a drop-in context's): it must not wait for @cm. */
static int cmr_on_callback_thread(const struct cep_cm *cm)
{
	return cb_self == (const struct cmr *)cm;
}

/* cep_cm_destroy of a context cm.c found live: it may have been destroyed
 * since by a racing call, so nothing of it is read before cm_live_close
 * says it is ours (-EDEADLK on a thread running its callbacks, -EBUSY
 * while an event is taken and not acked). */
static int cmr_destroy(struct cep_cm *cm)
{
	struct cmr *r = R(cm);
	struct cep_lead_waiter *w;
	int ret, join;

	CMR_HOOK(CMR_HOOK_DESTROY, cm);
	ret = cm_live_close(cm);
	if (ret)
		return ret;
	/* Decided: whatever is queued, or comes, reaches nobody (route_event
	 * drops it, a runner stops at its next event); a call in flight - a
	 * running callback's - fails now (nobody may read its reply), as one
	 * made from here on. A callback running now finishes. */
	pthread_mutex_lock(&r->lk);
	r->closing = 1;
	die_locked(r);
	w = r->cb_w;
	join = r->deliverer_live;
	r->deliverer_live = 0;
	pthread_mutex_unlock(&r->lk);
	/* the service sees EOF and ends our ids */
	shutdown(r->fd, SHUT_RDWR);
	/* threads waiting on the socket let go of it (a drain in progress,
	 * with the callbacks it runs, ends first) */
	cep_lead_close(r->cm.lead);
	atomic_store_explicit(&r->stop, 1, memory_order_release);
	bs_kick(r);
	pthread_join(r->reader, NULL);
	cep_lead_wake(w);
	if (join)
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
	while (r->ohead) { /* cepd ends what they name with the socket */
		struct omsg *m = r->ohead;

		r->ohead = m->next;
		free(m);
	}
	free(r->map);
	lead_shut(r);
	close(r->fd);
	free(r->rbuf);
	pthread_mutex_destroy(&r->lk);
	pthread_cond_destroy(&r->cv);
	free(r);
	return 0;
}

static int send_quiet(struct cmr *r, uint32_t op, uint32_t handle, uint32_t a);

/* A request on QP @qpn other than a quiet register: an earlier quiet
 * register's refusal no longer says anything (reg_track). */
static void reg_supersede(struct cmr *r, uint32_t qpn)
{
	pthread_mutex_lock(&r->lk);
	(void)reg_track(r, qpn, 0);
	pthread_mutex_unlock(&r->lk);
}

static int cmr_qp_register(struct cep_cm *cm, uint32_t qpn)
{
	reg_supersede(R(cm), qpn);
	return call_pd(R(cm), CEPD_QP_REGISTER, 0, qpn, 0, 0, 0, 0, NULL, 0, NULL, 0, NULL, 0);
}

/* cm_qp_register_nowait: quiet (send_quiet), tagged (reg_track): cepd's
 * refusal comes back with the number and the tag and waits in r->regs
 * for the connect or accept that names the QP (refused_take). */
static int cmr_qp_register_nowait(struct cep_cm *cm, uint32_t qpn)
{
	return send_quiet(R(cm), CEPD_QP_REGISTER, 0, qpn);
}

static int cmr_qp_destroy(struct cep_cm *cm, uint32_t qpn)
{
	/* Also from a callback, as the local one: the calling thread reads
	 * its answer (or whoever leads the socket does), and cepd's teardown
	 * waits for no callback of ours. */
	reg_supersede(R(cm), qpn);
	return call_pd(R(cm), CEPD_QP_DESTROY, 0, qpn, 0, 0, 0, 0, NULL, 0, NULL, 0, NULL, 0);
}

/* @op on id @handle (0: none) with a = @a, sent CEPD_F_QUIET: cepd does it
 * and answers only a failure (proto.h; take_reply gives that to
 * quiet_failed), so the calling thread sends and goes on, and no thread of
 * ours is woken for a success. It leaves at once, or, in a burst or
 * behind a full socket, from the outgoing queue (out_quiet), never
 * blocking the caller. cepd serves our requests in the order they leave,
 * and whatever any thread asks after this call returns leaves after it
 * (a call sends the queue first, or waits in it). 0, or CMR_GONE when the
 * socket has ended (cepd then ends all of ours itself). Any thread, no
 * lock of ours held. */
static int send_quiet(struct cmr *r, uint32_t op, uint32_t handle, uint32_t a)
{
	struct cepd_req q;
	uint64_t now = cep_clock_ms(NULL); /* CLOCK_MONOTONIC */
	int ret;

	quiet_req(&q, op, handle, a);
	pthread_mutex_lock(&r->lk);
	if (r->dead) {
		pthread_mutex_unlock(&r->lk);
		return CMR_GONE;
	}
	if (op == CEPD_QP_REGISTER) /* its refusal is kept, by tag */
		q.h.seq |= (uint64_t)reg_track(r, a, 1) << 48;
	ret = out_quiet(r, &q, now - r->quiet_last_ms < OUT_BURST_MS);
	r->quiet_last_ms = now;
	pthread_mutex_unlock(&r->lk);
	while (ret == -ENOMEM) {
		/* No memory to queue it: it leaves by itself, blocking, once
		 * the queue before it has gone (others read meanwhile). */
		struct pollfd pf = { .fd = r->fd, .events = POLLOUT };
		ssize_t n;

		pthread_mutex_lock(&r->lk);
		out_flush(r);
		ret = r->dead ? CMR_GONE : r->ohead ? -ENOMEM : 0;
		pthread_mutex_unlock(&r->lk);
		if (ret == -ENOMEM) {
			(void)poll(&pf, 1, 1);
			continue;
		}
		if (ret)
			break;
		do
			n = send(r->fd, &q, sizeof(q), MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		ret = n < 0 ? CMR_GONE : 0;
	}
	return ret;
}

/* No round trip: the drop-in's rdma_destroy_qp (cm_internal.h). A register
 * of the number that follows comes after it (send_quiet). */
static int cmr_qp_destroy_nowait(struct cep_cm *cm, uint32_t qpn)
{
	reg_supersede(R(cm), qpn);
	return send_quiet(R(cm), CEPD_QP_DESTROY, 0, qpn);
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
	r_unlock(r);
	if (!d)
		return -ENOMEM;
	*out = &d->id;
	return 0;
}

/* r->lk held (r_unlock after): @d ends here (the service has gone, or it
 * was never made there): its DESTROYED is made here, delivered as one from
 * the service (its channel, or the queue of callbacks). */
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
	uint32_t handle;
	int ret;

	pthread_mutex_lock(&r->lk);
	if (d->gone) {
		pthread_mutex_unlock(&r->lk);
		return -EALREADY;
	}
	d->gone = 1;
	cmr_id_get(id); /* the call's: DESTROYED may come before it returns */
	/* not from the context's callbacks: wait for one of this id running
	 * (on the callback thread or an inline runner) */
	while (cb_self != r && d->delivering)
		pthread_cond_wait(&r->cv, &r->lk);
	wait_created(r, d);
	handle = d->handle; /* stable once made (wait_created) */
	pthread_mutex_unlock(&r->lk);
	if (id->channel)
		cm_channel_purge(id->channel, id, 0);
	if (!handle) {
		/* never made in cepd: it ends here (DESTROYED made here) */
		pthread_mutex_lock(&r->lk);
		destroyed_here(r, d);
		r_unlock(r);
		ret = 0;
	} else {
		/* No round trip (the destroy is asynchronous: DESTROYED
		 * follows): sent quiet; a failure - nothing a live id of ours
		 * meets - ends the id here (quiet_failed). */
		ret = send_quiet(r, CEPD_DESTROY_ID, handle, 0);
	}
	if (ret == CMR_GONE) {
		/* the service is gone: the id ends here, DESTROYED made here */
		pthread_mutex_lock(&r->lk);
		destroyed_here(r, d);
		r_unlock(r);
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

/* A connect or accept naming @qpn failed with @ret: the error of a quiet
 * register of @qpn cepd refused, if one is kept (its failure answer came
 * before this call's: cepd answers in order), else @ret. */
static int qp_refused(struct cmr *r, uint32_t qpn, int ret)
{
	pthread_mutex_lock(&r->lk);
	ret = refused_take(r, qpn, ret);
	pthread_mutex_unlock(&r->lk);
	return ret;
}

/* CONNECT's fixed part from @p. */
static void conn_wire(struct cepd_conn *w, const struct cep_cm_conn_param *p)
{
	memset(w, 0, sizeof(*w));
	w->service_id = p->service_id;
	w->primary = p->primary;
	w->alternate = p->alternate;
	if (p->peer) {
		w->peer = *p->peer;
		w->has_peer = 1;
	}
	w->qpn = p->qpn;
	w->starting_psn = p->starting_psn;
	w->qkey = p->qkey;
	w->pkey = p->pkey;
	w->responder_resources = p->responder_resources;
	w->initiator_depth = p->initiator_depth;
	w->remote_cm_response_timeout = p->remote_cm_response_timeout;
	w->local_cm_response_timeout = p->local_cm_response_timeout;
	w->max_cm_retries = p->max_cm_retries;
	w->packet_life_time = p->packet_life_time;
	w->retry_count = p->retry_count;
	w->rnr_retry_count = p->rnr_retry_count;
	w->path_mtu = p->path_mtu;
	w->transport_service_type = p->transport_service_type;
	w->srq = p->srq;
	w->manual_rtu = p->manual_rtu;
	w->flow_control = COVERS(p, flow_control) ? p->flow_control : 1;
	w->manual_drep = COVERS(p, manual_drep) ? p->manual_drep : 0;
	w->ece_vendor_id = COVERS(p, ece_vendor_id) ? p->ece_vendor_id : 0;
	w->ece_options = COVERS(p, ece_options) ? p->ece_options : 0;
}

static int cmr_connect(struct cep_cm_id *id, const struct cep_cm_conn_param *p)
{
	struct cepd_conn w;
	int ret;

	if (id_gone(id))
		return -EINVAL;
	conn_wire(&w, p);
	ret = id_req(id, CEPD_CONNECT, 0, 0, 0, 0, 0, &w, sizeof(w),
		      p->private_data, p->private_data_len, NULL, 0);
	if (ret && ret != CMR_GONE)
		ret = qp_refused(RID(id)->r, p->qpn, ret);
	phase_after(id, ret, PH_REQ_SENT);
	return ret;
}

/* cm_connect_nowait: an id cepd has not made yet is made by a CONNECT
 * nobody waits for - a detached call, whose answer the next reader takes
 * (take_reply: detached_done) - sent as out_now sends. Any other id,
 * and a call that cannot be set up (no memory), asks by a call. */
static int cmr_connect_nowait(struct cep_cm_id *id, const struct cep_cm_conn_param *p)
{
	_Alignas(8) uint8_t buf[REQ_BUF];
	struct cepd_req *q = (struct cepd_req *)buf;
	struct rid *d = RID(id);
	struct cmr *r = d->r;
	struct cepd_conn w;
	struct call *c;
	int ret;

	if (id_gone(id))
		return -EINVAL;
	conn_wire(&w, p);
	ret = build(buf, CEPD_CONNECT, 0, 0, 0, 0, 0, 0, &w, sizeof(w), p->private_data,
		    p->private_data_len, NULL, 0);
	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c)
		return cmr_connect(id, p);
	pthread_mutex_lock(&r->lk);
	wait_created(r, d);
	if (r->dead || d->handle || d->gone) {
		pthread_mutex_unlock(&r->lk);
		free(c);
		return cmr_connect(id, p);
	}
	c->made = d;
	c->detached = 1;
	c->seq = ++r->seq;
	q->h.seq = c->seq;
	q->flags |= CEPD_F_CREATE;
	ret = out_now(r, q); /* not quiet, but sent the same way */
	if (ret) { /* neither sent nor queued: nothing changed */
		pthread_mutex_unlock(&r->lk);
		free(c);
		return ret;
	}
	d->creating = 1;
	atomic_store_explicit(&d->detached, 1, memory_order_relaxed);
	d->phase = PH_REQ_SENT;
	d->qpn = p->qpn;
	r->creating++; /* its answer's take_reply counts it down */
	cmr_id_get(id); /* the call's */
	c->next = r->calls;
	r->calls = c;
	pthread_mutex_unlock(&r->lk);
	return 0;
}

/* ACCEPT's fixed part from @p. */
static void accept_wire(struct cepd_accept *w, const struct cep_cm_accept_param *p)
{
	memset(w, 0, sizeof(*w));
	w->qpn = p->qpn;
	w->starting_psn = p->starting_psn;
	w->qkey = p->qkey;
	w->responder_resources = p->responder_resources;
	w->initiator_depth = p->initiator_depth;
	w->target_ack_delay = p->target_ack_delay;
	w->failover_accepted = p->failover_accepted;
	w->rnr_retry_count = p->rnr_retry_count;
	w->srq = p->srq;
	w->manual_drep = p->manual_drep;
	w->flow_control = COVERS(p, flow_control) ? p->flow_control : 1;
	w->ece_vendor_id = COVERS(p, ece_vendor_id) ? p->ece_vendor_id : 0;
	w->ece_options = COVERS(p, ece_options) ? p->ece_options : 0;
}

static int cmr_accept(struct cep_cm_id *id, const struct cep_cm_accept_param *p)
{
	struct cepd_accept w;
	int ret;

	if (id_gone(id))
		return -EINVAL;
	accept_wire(&w, p);
	ret = id_req(id, CEPD_ACCEPT, 0, 0, 0, 0, 0, &w, sizeof(w),
		      p->private_data, p->private_data_len, NULL, 0);
	if (ret && ret != CMR_GONE)
		ret = qp_refused(RID(id)->r, p->qpn, ret);
	phase_after(id, ret, PH_REP_SENT);
	return ret;
}

/* Send @q (built, no handle) on @d CEPD_F_QUIET if @d is in @phase as far
 * as this side knows (its events, its own requests), which it then leaves
 * for @next (out_now). 0, -ENOMEM (neither sent nor queued: nothing
 * changed), or 1: not sent - the id not made in cepd, destroyed, in
 * another phase, or the service gone - the caller asks by a call, whose
 * answer is the engine's. No lock of ours held. */
static int id_send_quiet(struct rid *d, struct cepd_req *q, unsigned phase, unsigned next)
{
	struct cmr *r = d->r;
	int ret = 1;

	pthread_mutex_lock(&r->lk);
	wait_created(r, d);
	if (!r->dead && d->handle && !d->gone && d->phase == phase) {
		q->handle = d->handle;
		q->flags |= CEPD_F_QUIET;
		q->h.seq = QUIET_SEQ(q->h.op, d->handle);
		ret = out_now(r, q);
		if (!ret)
			d->phase = (uint8_t)next;
	}
	pthread_mutex_unlock(&r->lk);
	return ret;
}

/* cm_accept_nowait: quiet in REQ_RCVD (id_send_quiet); cepd's refusal is
 * accept_refused's. Parameters the engine refuses whatever the state are
 * asked by a call, whose answer says so in cepd's order (its access checks
 * first). */
static int cmr_accept_nowait(struct cep_cm_id *id, const struct cep_cm_accept_param *p)
{
	_Alignas(8) uint8_t buf[REQ_BUF];
	struct cepd_accept w;
	struct rid *d = RID(id);
	int ret;

	if (id_gone(id))
		return -EINVAL;
	if (cm_accept_param_check(p))
		return cmr_accept(id, p);
	accept_wire(&w, p);
	ret = build(buf, CEPD_ACCEPT, 0, 0, 0, 0, 0, 0, &w, sizeof(w), p->private_data,
		    p->private_data_len, NULL, 0);
	if (ret)
		return ret;
	pthread_mutex_lock(&d->r->lk);
	d->qpn = p->qpn;
	pthread_mutex_unlock(&d->r->lk);
	ret = id_send_quiet(d, (struct cepd_req *)buf, PH_REQ_RCVD, PH_REP_SENT);
	return ret == 1 ? cmr_accept(id, p) : ret;
}

static int cmr_rtu(struct cep_cm_id *id, const void *pdata, size_t len)
{
	int ret = id_call(id, CEPD_RTU, 0, pdata, len);

	phase_after(id, ret, PH_EST);
	return ret;
}

/* cm_rtu_nowait: quiet in REP_RCVD (id_send_quiet); a refusal is dropped
 * (quiet_failed). */
static int cmr_rtu_nowait(struct cep_cm_id *id)
{
	struct cepd_req q;
	int ret;

	if (id_gone(id))
		return -EINVAL;
	memset(&q, 0, sizeof(q));
	q.h.op = CEPD_RTU;
	q.h.len = sizeof(q);
	ret = id_send_quiet(RID(id), &q, PH_REP_RCVD, PH_EST);
	return ret == 1 ? cmr_rtu(id, NULL, 0) : ret;
}

static int cmr_notify_established(struct cep_cm_id *id)
{
	int ret = id_call(id, CEPD_NOTIFY_EST, 0, NULL, 0);

	phase_after(id, ret, PH_EST);
	return ret;
}

static int cmr_migrate(struct cep_cm_id *id)
{
	return id_call(id, CEPD_MIGRATE, 0, NULL, 0);
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

/* cm_disconnect_nowait: quiet (send_quiet). An id never made in cepd has
 * no connection: -EINVAL, as cepd would answer, without asking. */
static int cmr_disconnect_nowait(struct cep_cm_id *id)
{
	struct rid *d = RID(id);
	struct cmr *r = d->r;
	uint32_t handle;
	int gone;

	pthread_mutex_lock(&r->lk);
	wait_created(r, d);
	gone = d->gone;
	handle = d->handle; /* stable once made (wait_created) */
	pthread_mutex_unlock(&r->lk);
	if (gone || !handle)
		return -EINVAL;
	return send_quiet(r, CEPD_DISCONNECT, handle, 0);
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
	.qp_destroy_nowait = cmr_qp_destroy_nowait,
	.qp_register_nowait = cmr_qp_register_nowait,
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
	.connect_nowait = cmr_connect_nowait,
	.accept = cmr_accept,
	.accept_nowait = cmr_accept_nowait,
	.rtu = cmr_rtu,
	.rtu_nowait = cmr_rtu_nowait,
	.notify_established = cmr_notify_established,
	.reject = cmr_reject,
	.mra = cmr_mra,
	.disconnect = cmr_disconnect,
	.disconnect_nowait = cmr_disconnect_nowait,
	.drep = cmr_drep,
	.lap = cmr_lap,
	.apr = cmr_apr,
	.migrate = cmr_migrate,
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
