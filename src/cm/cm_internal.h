/* SPDX-License-Identifier: MIT */
/*
 * Private layout of the CM engine (src/cm/cm*.c). Concurrency rule per
 * field: "const" (set before the id is reachable), "lock" (the id's mutex),
 * "owner" (only the owning worker thread), "atomic".
 */
#ifndef CEP_CM_INTERNAL_H
#define CEP_CM_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <cep/cm.h>
#include <cep/qp.h>

#include "cm_ops.h"
#include "dispatch.h"
#include "core/table_keys.h"
#include "timer.h"
#include "core/yield.h"

/* Per-worker counters: relaxed atomics (any thread may add to the owning
 * worker's row; readers sum the rows). */
struct cm_wstats {
	_Atomic uint64_t sent[CEP_MSG_COUNT];
	_Atomic uint64_t received[CEP_MSG_COUNT];
	_Atomic uint64_t retries, timeouts, duplicates, send_errors;
	_Atomic uint64_t half_open_expired, half_open_limited;
	_Atomic uint64_t drops[CEP_CM_DROP_COUNT];
	_Atomic uint64_t rej_sent[CEP_REJ_REASON_MAX + 1];
	_Atomic uint64_t rej_received[CEP_REJ_REASON_MAX + 1];
	_Atomic uint64_t events[CEP_CM_EVENT_COUNT];
	_Atomic int64_t states[CEP_CM_STATE_COUNT];
} __attribute__((aligned(64)));

/* Every id of a worker, from cm_alloc_id to its free (id_release), so
 * cep_cm_destroy() finds the ids the application still holds even when
 * their CEP has left the table (destroyed QP, timewait over). */
struct cm_idlist {
	pthread_mutex_t mtx;
	struct cep_cm_id *head;        /* mtx */
} __attribute__((aligned(64)));

struct cm_dest;                  /* a peer's REQ window (cm_pace.c) */
#define CM_PACE_BUCKETS 64

struct cep_cm {
	const struct cm_ops *ops;      /* const: its kind's table (cm_ops.h) */
	struct cep_transport *tp;      /* const (NULL: attached, no engine here) */
	struct cep_table *table;       /* const */
	struct cep_dispatch *d;        /* const */
	struct cep_clock *clock;       /* const: NULL = CLOCK_MONOTONIC */
	unsigned nworkers;             /* const */
	uint64_t ca_guid;              /* const, host order */
	struct cep_port_info port;     /* const */
	uint8_t mra_timeout;           /* const */
	uint8_t auto_mra;              /* const */
	/* Set before the first id (the librdmacm drop-in: rcm_port_cm):
	 * QP_DESTROYED, and DESTROYED that no thread waits for, may reach
	 * the user this many ms late, for no wake-up of a sleeping worker
	 * each (cm_post_bits_lazy); 0: at once, as every other item. */
	unsigned lazy_ms;
	unsigned backlog;              /* const: default listener backlog */
	uint32_t half_open_ms;         /* const: longest half-open wait (cm_set_expiry) */
	uint64_t route_key[2];         /* const: secret key of the REQ routing */
	_Atomic int stopping;          /* set once by cep_cm_destroy */
	_Atomic uint32_t taken;        /* events of this context's ids taken from
					  a channel and not acked, | CM_CLOSED once
					  cep_cm_destroy committed (cm_event_take) */
	_Atomic unsigned next_worker;  /* round robin for active ids */
	_Atomic uint32_t rtu_fx;       /* how fast this context's applications
					  answer REPs (auto_mra): a moving
					  average of the ms per REP (x 1024)
					  each RTU's REP waited over the REPs
					  awaiting theirs when it came
					  (req_ahead); 0 until the first RTU.
					  Relaxed, as lis.svc_fx (sampled in
					  cm_set_state, read by cm_rep_mra_due) */
	_Atomic int64_t ids;           /* ids allocated and not yet freed */
	_Atomic uint32_t next_tid;     /* low halves of request TIDs */
	struct cm_wstats *ws;          /* [nworkers] */
	struct cm_idlist *idl;         /* [nworkers] */
	struct cep_cm *live_next;      /* the live contexts' list (cm.c) */
	/* const: the receive queue its waiting threads read (cm/lead.h), or
	 * NULL (a transport that delivers on its own threads) */
	struct cep_lead *lead;
	/* Requester pacing (cm_pace.c): a window of REQs per destination. */
	struct {
		pthread_mutex_t mtx;
		struct cm_dest *tab[CM_PACE_BUCKETS]; /* mtx: chains by address */
	} pace;
};

#define CM_CLOSED (1u << 31)

/* The receive queue a thread that waits for @cm's events reads meanwhile
 * (cm/lead.h), or NULL. */
static inline struct cep_lead *cm_lead(const struct cep_cm *cm)
{
	return cm->lead;
}

/* The port a context serves, as its transport's query_port gave it (or
 * cepd's answer, attached). Const after create or attach. */
static inline const struct cep_port_info *cm_port(const struct cep_cm *cm)
{
	return &cm->port;
}

/* Contexts not yet destroyed, of both kinds (cm.c): cep_cm_destroy() of
 * anything else (a second call, a stray pointer) is -EINVAL, never a use
 * after free. cm_live_add: @cm is complete (ops set). cm_live_close:
 * cep_cm_destroy's decision, one step under the list's lock, so a second,
 * racing call finds @cm either live and unchanged or gone, and nothing of
 * @cm is read unless it is live: -EINVAL (not live), -EDEADLK (on its
 * callback thread), -EBUSY (an event of its ids is taken and not acked),
 * all changing nothing; or 0: @cm is no longer live and no event of it
 * can be taken any more (CM_CLOSED). */
void cm_live_add(struct cep_cm *cm);
int cm_live_close(struct cep_cm *cm);

/* A timeout a peer supplies (5-bit IBTA exponent: REQ response timeouts
 * and local ACK timeout, REP target ACK delay, LAP response timeout, MRA
 * service timeout) counts at most as this: 4.096 us x 2^24 = 68.7 s, so a
 * peer cannot hold a QP for hours per retry or timewait, while Linux
 * rdma_cm's MRA (service timeout 24, CMA_CM_MRA_SETTING) counts whole.
 * docs/protocol.md. */
#define CM_PEER_TIMEOUT_MAX 24
static inline unsigned cm_peer_t(unsigned t)
{
	return t > CM_PEER_TIMEOUT_MAX ? CM_PEER_TIMEOUT_MAX : t;
}

/* One end of a path: where a connection's messages may come from, and
 * how they are addressed to the peer by it once the connection migrated
 * there (cep_cm_migrate). */
struct cm_addr {
	uint8_t gid[16];               /* network order */
	uint16_t lid;                  /* 0: routed by GID (RoCE) */
	uint8_t grh;                   /* compare GIDs when the MAD has a GRH */
	uint8_t valid;
	uint8_t sl, hop_limit, traffic_class; /* the path's, for sending */
	uint32_t flow_label;
};

/* An id's alternate path ends (allocated only when it has one: few do). */
struct cm_paths {
	struct cm_addr alt;            /* the REQ's, or a LAP's answered with success */
	struct cm_addr lap;            /* a LAP's in flight, until its APR */
	struct cm_addr old;            /* the primary before cep_cm_migrate: the
					  peer's messages may still come by it
					  (its QP migrates on its own time) */
	uint8_t migrated;              /* id->peer is alt's (no LAP since) */
};

/* id->work_bits */
enum {
	W_TIMER = 1u << 0,     /* re-sync the wheel with id->deadline */
	W_DESTROYED = 1u << 1, /* deliver DESTROYED, drop the user's reference */
	W_QP_GONE = 1u << 2,   /* deliver QP_DESTROYED */
	W_ESTABLISHED = 1u << 3, /* deliver ESTABLISHED (cep_cm_notify_established) */
	W_PACE = 1u << 4,      /* send the REQ its window let out (cm_pace.c) */
	W_LAZY = 1u << 5,      /* queued lazily (cm_post_bits_lazy): an urgent
				  bit added to it wakes the worker */
};

/* id->flags (lock) */
enum {
	F_USER_GONE = 1u << 0,   /* cep_cm_destroy_id called: no event but DESTROYED */
	F_QP_GONE = 1u << 1,     /* the bound QP is being destroyed */
	F_MANUAL_RTU = 1u << 2,
	F_MANUAL_DREP = 1u << 3,
	F_CHANNEL_USER = 1u << 4, /* counted in channel->users */
	F_DESTROYED_POSTED = 1u << 5, /* W_DESTROYED queued (once) */
	F_UNCOUNTED = 1u << 6,   /* no longer in cm->ids: destroyed */
	F_EXPIRE_LIMITED = 1u << 7, /* the armed expiry is the half-open limit's */
	F_DESTROY_DONE = 1u << 8, /* the destroy did what the state asks: from
				     here DESTROYED may be posted */
	F_TAKEN = 1u << 9,       /* an unanswered child the application has
				     taken (cm_request_taken): out of its
				     listener's lis.untaken */
	F_MRA_WAIT = 1u << 10,   /* an MRA extended the wait for our last
				     try (REQ, REP or LAP): another one before
				     the next try is a duplicate */
	F_MRA_AUTO = 1u << 11,   /* our last MRA was the engine's (auto_mra):
				     the application's cep_cm_mra replaces it */
	F_LINGER = 1u << 12,     /* CEP_CM_ID_LINGER: DESTROYED waits for the
				     core CEP's destruction too */
	F_REQ_WIRE = 1u << 13,   /* our REQ has been sent (not only queued by
				     its window): the peer may know the id */
	F_XRC = 1u << 14,        /* an XRC connection (extended transport 1):
				     set by its connect or its REQ; the REP
				     names the target QP in the local EECN */
};

/* id->timer_kind (lock) */
enum {
	TK_RETRY = 1, TK_AUTO_MRA = 2, TK_TIMEWAIT = 3,
	TK_EXPIRE = 4,  /* a half-open passive id whose requester has given up */
	TK_PACE = 5,    /* a REQ waiting for its window has spent its tries */
};

struct cm_waiter {
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	int done;                      /* mtx */
	_Atomic int refs;              /* waiter + DESTROYED work */
	uint64_t linger_ms;            /* the id's lock, then the waiter's own:
					  how long an F_LINGER id's protocol may
					  still take after its destroy */
};

struct cep_cm_id {
	struct cep *cep;               /* const once cm_alloc_id unlocks (context = this) */
	struct cep_cm *cm;             /* const */
	unsigned worker;               /* const: local comm ID % nworkers */
	pthread_mutex_t lock;
	struct cep_timer timer;        /* owner: wheel node, holds a reference */
	struct cep_work work;          /* queued at most once (work_bits) */
	_Atomic uint32_t work_bits;    /* atomic: pending W_* */
	cep_cm_handler handler;        /* const */
	struct cep_cm_channel *channel;/* const */
	void *context;                 /* lock */
	struct cm_waiter *waiter;      /* lock: cep_cm_destroy_id_sync */
	uint64_t deadline;             /* lock: ms, 0 = no timer wanted */
	uint64_t half_open_until;      /* lock: ms; a half-open passive id expires
					  by then at the latest (its request's
					  arrival + cm->half_open_ms) */
	uint64_t tid;                  /* lock */
	uint64_t remote_ca_guid;       /* lock */
	uint64_t service_id;           /* lock */
	uint32_t remote_id;            /* lock: remote comm ID (0 unknown) */
	uint32_t local_qpn;            /* lock */
	uint32_t remote_qpn;           /* lock */
	uint32_t timeout_ms;           /* lock: retry period (REQ, REP, DREQ) */
	uint32_t lap_timeout_ms;       /* lock: a LAP's retry period (cep_cm_lap's
					  response timeout: the LAP's alone) */
	uint32_t peer_timeout_ms;      /* lock: peer's wait for us (auto MRA) */
	uint8_t state;                 /* lock: enum cep_cm_state */
	uint8_t lap_state;             /* lock: enum cep_cm_lap_state */
	uint8_t retries_left;          /* lock */
	uint8_t max_retries;           /* lock */
	uint8_t timer_kind;            /* lock */
	uint8_t mra_timeout;           /* lock: service timeout of our last MRA */
	uint8_t pkt_life;              /* lock: the path's packet life time (5 bits) */
	uint8_t path_timeout;          /* lock: the path's ACK timeout (5 bits): MRA
					  extensions, timewait (kernel av.timeout) */
	uint8_t resend_len;            /* lock: bytes at resend_pd */
	uint16_t flags;                /* lock */
	uint8_t delivering;            /* lock: a callback of this id is running */
	uint8_t *resend_pd;            /* lock: private data of our last MRA, RTU
					  or DREP, sent again with it */
	struct {                       /* a listener's count of its children */
		uint32_t req_inflight; /* lock: REQ/SIDR_REQ events of its children
					  being delivered (they use its context
					  and channel) */
		uint32_t backlog;      /* lock: most untaken children */
		_Atomic uint32_t half_open; /* children whose request awaits the
					  application's answer now (REQ_RCVD,
					  MRA_REQ_SENT, SIDR_REQ_RCVD; incremented
					  under its lock, decremented by each child) */
		_Atomic uint32_t svc_fx; /* how fast its application answers:
					  a moving average of the ms per
					  request (x 1024) its accepted
					  requests waited, each request's wait
					  over the requests unanswered when it
					  came (req_ahead); 0 until one is
					  accepted. Relaxed load and store by
					  whichever child's worker samples: two
					  racing samples lose one, an estimate
					  (cm_mra_sample) */
		_Atomic uint32_t untaken; /* those of them the application has
					  not taken yet (cm_request_taken): what
					  the backlog bounds, as ucma's counts the
					  CONNECT_REQUESTs not yet fetched (same
					  increments and decrements, and one at
					  the take) */
	} lis;
	uint32_t req_ahead;            /* lock: a passive id: its listener's
					  unanswered requests when its REQ came,
					  itself included (cm_mra_sample); an
					  active one: its context's REPs awaiting
					  their RTU when its REP came, itself
					  included (cm_rep_mra_due) */
	uint64_t rep_at;               /* lock: an active id (auto_mra): ms its
					  REP came (cm_rep_mra_due; rtu_fx's
					  sample at its RTU) */
	struct cep_cm_id *listener;    /* lock: an unanswered child: the listener
					  it counts against (a CEP reference held) */
	uint8_t *retry;                /* lock: encoded MAD being retried */
	struct cm_paths *paths;        /* lock: alternate path ends, or NULL */
	struct cep_mad_addr peer;      /* lock: where the peer's CM listens; its
					  messages must come from there (or alt) */
	struct cep_qp_params qpp;      /* lock: QP attributes negotiated so far */
	struct cep_cm_id *all_next, *all_prev; /* cm->idl[worker].mtx */
	/* Requester pacing (cm_pace.c), from connect until the REQ is
	 * answered or given up: */
	struct cm_dest *dest;          /* lock: its destination's window, or NULL */
	uint32_t pace_group;           /* const after create: whose window (cm_pace.c) */
	struct cep_cm_id *pace_next, *pace_prev; /* dest->mtx: its queue */
	uint8_t pace_st, pace_q;       /* dest->mtx: waiting, sending, in flight */
	uint32_t pace_allow;           /* lock: ms the try in flight may wait */
	uint32_t pace_done;            /* lock: REQ periods of its wait charged */
	uint32_t pace_alive;           /* lock: of those, while its peer answered,
					  not yet a whole try */
	uint64_t pace_sent, pace_since; /* lock: ms the try left / began to wait */
	uint64_t pace_seq;             /* dest->mtx: its send's number (cut) */
};

/* Event channel (cm_event.c). */
struct cep_cm_channel {
	pthread_mutex_t mtx;
	struct chan_ev *head, *tail;   /* mtx */
	size_t queued;                 /* mtx */
	_Atomic int users;             /* ids with F_CHANNEL_USER: a channel
					  with users is not destroyed */
	int efd;                       /* eventfd: readable iff queued > 0 */
};

/* Lock held: the TID of a new request (REQ, DREQ, LAP, SIDR_REQ) from
 * @id. The low 32 bits come from one counter per CM, so no two requests
 * in flight share them, as the kernel's umad requires (it refuses a
 * request MAD whose TID is still being sent, and rewrites the upper 32 bits
 * itself) - also not an id's DREQ and the RTU just before it. The upper
 * half counts the id's transactions. Retries resend the same TID; answers
 * echo the peer's. */
static inline uint64_t cm_next_tid(struct cep_cm_id *id)
{
	/* Relaxed: only uniqueness matters, no ordering. */
	uint32_t low = atomic_fetch_add_explicit(&id->cm->next_tid, 1, memory_order_relaxed);

	id->tid = (((id->tid >> 32) + 1) << 32) | low;
	return id->tid;
}

/* Test hooks: compiled only into the tests' copy of the library
 * (-DCEP_TEST_HOOKS, tests/cm/meson.build), never into libcep itself. A
 * test widens a race window by blocking in the hook (bounded). */
enum cm_hook_point {
	CM_HOOK_DELIVER,      /* an event is about to reach the user */
	CM_HOOK_REQ_LISTENER, /* REQ/SIDR_REQ: listener checked, not yet used */
	CM_HOOK_DESTROY_WAIT, /* cep_cm_destroy_id waits for a delivery, lock dropped */
};
/* The same points are random yields in cep-stress's copy of the library
 * (CEP_YIELD, yield.h): the windows a hook holds open, widened at random. */
#ifdef CEP_TEST_HOOKS
extern void (*cm_test_hook)(enum cm_hook_point p, struct cep_cm_id *id,
			    const struct cep_cm_event *ev);
#define CM_HOOK(p, id, ev) do { if (cm_test_hook) cm_test_hook((p), (id), (ev)); } while (0)
#else
#define CM_HOOK(p, id, ev) CEP_YIELD()
#endif

/* Queue a copy of @ev (the id reference it carries is taken here). */
int cm_channel_push(struct cep_cm_channel *ch, const struct cep_cm_event *ev);
/* Drop every queued, not yet taken event of @id but DESTROYED (@all: and
 * DESTROYED). The channel's mutex nests inside @id's lock, which the caller
 * may hold; the references the events held are dropped here, so a caller
 * holding the lock must keep @id's memory otherwise (cep_cm_destroy: the
 * id list's mutex). After cep_cm_destroy_id() the channel yields none of
 * them. */
void cm_channel_purge(struct cep_cm_channel *ch, struct cep_cm_id *id, int all);

/* Locked: @id stops counting in its channel's users (once). The channel
 * may be destroyed at any moment after: id->channel is not touched again. */
static inline void cm_channel_leave(struct cep_cm_id *id)
{
	if (id->flags & F_CHANNEL_USER) {
		id->flags &= (uint16_t)~F_CHANNEL_USER;
		/* last touch: cep_cm_channel_destroy may free it once 0 */
		atomic_fetch_sub(&id->channel->users, 1);
	}
}

/* A channel event of @cm leaving its queue (cep_cm_get_event, under the
 * channel's mutex): 1 if counted in cm->taken, which makes cep_cm_destroy
 * refuse (-EBUSY) until cm_event_done(); 0 if cep_cm_destroy has committed
 * (CM_CLOSED): the event stays queued and the destroy drops it. */
int cm_event_take(struct cep_cm *cm);
/* The ack of an event cm_event_take() counted: its last touch of @cm,
 * after it dropped the event's references. Any thread, no lock. */
void cm_event_done(struct cep_cm *cm);

#define STAT_ADD(cm, w, field) \
	atomic_fetch_add_explicit(&(cm)->ws[(w)].field, 1, memory_order_relaxed)

/* ---- shared by the engine's files (cm*.c) --------------------
 * "locked": the caller holds id->lock. "worker": the owning worker only.
 * "no lock": must not hold any id lock. Every caller holds a reference. */

/* Pure helpers. */
uint32_t cm_ms(unsigned t);                    /* 4.096 us x 2^t, ms, >= 1 */
uint64_t cm_be64(const uint8_t *p);
void cm_put_be64(uint8_t *p, uint64_t v);
uint64_t cm_sidr_source(const struct cep_mad_addr *from);
void cm_copy_pdata(uint8_t *dst, const void *src, size_t len);
struct cep_mad_addr cm_reply_addr(const struct cep_mad_addr *from);

/* API entry on an id: take its lock unless the user destroyed it
 * (cep_cm_destroy_id): then -EINVAL and no lock. */
static inline int cm_lock_live(struct cep_cm_id *id)
{
	pthread_mutex_lock(&id->lock);
	if (id->flags & F_USER_GONE) {
		pthread_mutex_unlock(&id->lock);
		return -EINVAL;
	}
	return 0;
}

/* A timer's deadline @ms from @now_ms in real time, rounded up to a grid
 * of the largest power of two not above an eighth of @ms (at most
 * CM_TIMER_GRID_MAX_MS; none under 16 ms): never early, at most an eighth
 * late, and timers of about one length armed close together - a storm's
 * timewaits, its REP timers that RTUs cancel - come due at the same tick,
 * so the worker wakes once for them, not once each (each wake-up is a
 * context switch there and back on a one-CPU guest). CM timers are
 * seconds; the spec asks for no finer precision. Pure. */
#define CM_TIMER_GRID_MAX_MS 64
uint64_t cm_coarse_deadline(uint64_t now_ms, uint32_t ms);

/* Queue W_* bits for the owning worker (any thread, lock may be held). */
void cm_post_bits(struct cep_cm_id *id, uint32_t bits);
/* The same for W_QP_GONE / W_DESTROYED, lock held: with cm->lazy_ms and
 * no thread waiting for the id's DESTROYED (id->waiter), queued without
 * waking a sleeping worker (cep_dispatch_post_work_lazy). */
void cm_post_bits_lazy(struct cep_cm_id *id, uint32_t bits);

/* What each file of the engine gives the others (cm.c: contexts; cm_id.c:
 * ids and destruction; cm_timer.c: work items and timers; cm_send.c;
 * cm_recv.c; cm_state.c: shared transitions and lookups; cm_event.c:
 * channels and the one delivery path; cm_util.c: names and helpers). */
uint32_t cm_be32(const uint8_t *p);
/* A passive id in state @s waits for the application's answer (counts
 * against its listener's backlog). */
int cm_unanswered(unsigned s);
/* Locked: a child stops counting against its listener's backlog. */
void cm_half_open_end(struct cep_cm_id *id);
/* Locked, an active id that has just entered REP_RCVD (auto_mra): note
 * its REP's arrival and the REPs ahead of it for the RTU pace (cm->rtu_fx,
 * sampled when it is answered) and say whether its RTU will likely come
 * after the responder repeats the REP - the REPs awaiting theirs, itself
 * included, at the context's pace reach the responder's timeout - so that
 * the automatic MRA should go at half that timeout, before the repeat. */
int cm_rep_mra_due(struct cep_cm_id *id);
/* Any thread, no engine lock held (takes @id's): the application has
 * taken @id's request (librdmacm: rdma_get_cm_event returned its
 * CONNECT_REQUEST), so it no longer counts against its listener's backlog,
 * though it stays unanswered (half_open: the automatic MRA's measure). A
 * no-op for an id of cepd's, or one already answered or taken. */
void cm_request_taken(struct cep_cm_id *id);
/* Any thread, no engine lock held (takes @id's): drop an unanswered
 * request the application cannot take, nothing sent, for its requester
 * to retry (the kernel's answer to -ENOMEM). 0, or -EINVAL (answered, or
 * an id of cepd's). */
int cm_request_drop(struct cep_cm_id *id);
/* cep_cm_qp_destroy() for a caller that has no use for its answer (the
 * librdmacm drop-in's rdma_destroy_qp): in a context of this process the
 * same call; in an attached one the request leaves for cepd and the call
 * returns without its reply - cepd answers only a failure (proto.h:
 * CEPD_F_QUIET) - so no round trip, and no thread is woken. cepd
 * serves a client's requests in the order sent, so a later register of
 * the number (the kernel reuses QPNs) comes after it. 0, -EINVAL (NULL),
 * -ENOENT (a local context: not registered), -ECONNRESET (cepd gone: it
 * has destroyed the client's QPs already). Any thread, as
 * cep_cm_qp_destroy(). */
int cm_qp_destroy_nowait(struct cep_cm *cm, uint32_t qpn);
/* cep_cm_qp_register() for the librdmacm drop-in's rdma_create_qp, whose
 * kernel counterpart asks no CM: in a context of this process the same
 * call; in an attached one the request leaves quiet (CEPD_F_QUIET, in the
 * outgoing queue with a burst's others) and the call returns 0 without
 * the ownership check's answer. A refusal (cepd's -EPERM, -EMFILE, ...)
 * comes back as a failure answer and is kept: the next cep_cm_connect or
 * cep_cm_accept naming that QP, which cepd refuses because the QP is not
 * the client's, returns the register's error instead of its own. cepd
 * serves the requests in order, so a connect sent after it finds it
 * registered. 0, or as cep_cm_qp_register(). Any thread. */
int cm_qp_register_nowait(struct cep_cm *cm, uint32_t qpn);
/* cep_cm_disconnect(@id, NULL, 0) for a caller that ignores its answer (the
 * drop-in's rdma_disconnect, which returns 0 whatever the DREQ or DREP
 * did, as the kernel's): local, the same call; attached, sent
 * CEPD_F_QUIET - no round trip; a refusal (an id not connected) is
 * answered and dropped. 0, -EINVAL (NULL; a local refusal; an id
 * destroyed), -ECONNRESET. Any thread, as cep_cm_disconnect(). */
int cm_disconnect_nowait(struct cep_cm_id *id);
/* cep_cm_connect() for the librdmacm drop-in's rdma_connect (issue 27: no
 * round trip on the active side's path): local, the same call; attached,
 * for an id cepd has not made yet (the drop-in's always: a new one per
 * connect) the CONNECT that makes it leaves at once and the call returns 0
 * without waiting for cepd's answer, which whoever reads the socket next
 * takes: it names the id (a request on the id meanwhile waits for it,
 * reading the socket itself), and a refusal (the QP not the client's: the
 * error of its refused register, as cep_cm_connect returns it; a source
 * address or P_Key the client may not use; no memory; cepd gone:
 * -ECONNRESET) becomes the id's REQ_ERROR with that status - nothing
 * was sent to the peer. Any other id: cep_cm_connect's call. 0, or as
 * cep_cm_connect(). Any thread, as cep_cm_connect(). */
int cm_connect_nowait(struct cep_cm_id *id, const struct cep_cm_conn_param *p);
/* cep_cm_accept() for the librdmacm drop-in's rdma_accept (issue 27: no
 * round trip on the passive side's path): local, the same call; attached,
 * when the id is known to be in REQ_RCVD and the parameters pass the
 * engine's own checks, the ACCEPT leaves CEPD_F_QUIET and the call returns
 * 0 without cepd's answer (any other case is cep_cm_accept's call, with its
 * answer). cepd's refusal then comes back and is told by the id's events:
 * -EINVAL (the request left REQ_RCVD) says nothing new, since that took an
 * event of its own (REQ_ERROR, REJ_RECEIVED, QP_DESTROYED) or the caller's
 * own call; any other refusal (the QP is not the client's: the error of
 * its refused register, as cep_cm_accept returns it; no memory) gives the
 * id REP_ERROR with that status, and cepd rejects the request (REJ
 * "consumer defined"), so that the requester hears of it at once and
 * nothing more comes of the connection. 0, or as cep_cm_accept(). Any
 * thread, as cep_cm_accept(). */
int cm_accept_nowait(struct cep_cm_id *id, const struct cep_cm_accept_param *p);
/* What the engine refuses in an accept's parameters whatever the id's
 * state: -EINVAL (QPN, PSN, failover), -EMSGSIZE (private data), or 0.
 * Pure. */
int cm_accept_param_check(const struct cep_cm_accept_param *p);
/* cep_cm_rtu(@id, NULL, 0) for the librdmacm drop-in's RTU (rdma_establish,
 * and rdma_get_cm_event's for an id with a QP): local, the same call;
 * attached, when the id is known to be in REP_RCVD the RTU leaves
 * CEPD_F_QUIET and the call returns 0 without cepd's answer (else
 * cep_cm_rtu's call). The engine refuses an RTU only when the connection
 * has left REP_RCVD, which an event of the id reports (REJ_RECEIVED,
 * QP_DESTROYED, DESTROYED) or the caller did: the refusal is dropped. 0,
 * or as cep_cm_rtu(). Any thread, as cep_cm_rtu(). */
int cm_rtu_nowait(struct cep_cm_id *id);
/* The engine's operations of cm_local_ops (cm_ops.h), each behind its
 * public function's common checks (cm.c's own are static there). */
int cm_local_create_id(struct cep_cm *cm, const struct cep_cm_id_attr *attr, uint64_t flags,
		       struct cep_cm_id **out);
int cm_local_destroy_id(struct cep_cm_id *id);
int cm_local_destroy_id_sync(struct cep_cm_id *id);
uint32_t cm_local_id_local_comm_id(const struct cep_cm_id *id);
uint32_t cm_local_id_remote_comm_id(struct cep_cm_id *id);
enum cep_cm_state cm_local_id_state(struct cep_cm_id *id);
enum cep_cm_lap_state cm_local_id_lap_state(struct cep_cm_id *id);
int cm_local_listen(struct cep_cm_id *id, uint64_t service_id, uint64_t mask, unsigned backlog);
int cm_local_connect(struct cep_cm_id *id, const struct cep_cm_conn_param *p);
int cm_local_accept(struct cep_cm_id *id, const struct cep_cm_accept_param *p);
int cm_local_rtu(struct cep_cm_id *id, const void *pdata, size_t len);
int cm_local_notify_established(struct cep_cm_id *id);
int cm_local_reject(struct cep_cm_id *id, unsigned reason, const void *ari, size_t ari_len,
		    const void *pdata, size_t len);
int cm_local_mra(struct cep_cm_id *id, uint8_t service_timeout, const void *pdata, size_t len);
int cm_local_disconnect(struct cep_cm_id *id, const void *pdata, size_t len);
int cm_local_disconnect_nowait(struct cep_cm_id *id);
int cm_local_rtu_nowait(struct cep_cm_id *id);
int cm_local_drep(struct cep_cm_id *id, const void *pdata, size_t len);
int cm_local_lap(struct cep_cm_id *id, const struct cep_path *alt, uint8_t timeout,
		 const void *pdata, size_t len);
int cm_local_apr(struct cep_cm_id *id, unsigned status, const void *info, size_t info_len,
		 const void *pdata, size_t len);
int cm_local_migrate(struct cep_cm_id *id);
int cm_local_sidr_req(struct cep_cm_id *id, const struct cep_cm_sidr_param *p);
int cm_local_sidr_rep(struct cep_cm_id *id, unsigned status, uint32_t qpn, uint32_t qkey,
		      const void *pdata, size_t len);
void cm_local_request_taken(struct cep_cm_id *id);
int cm_local_request_drop(struct cep_cm_id *id);
void cm_local_event_hold(struct cep_cm_id *id, struct cep_cm_id *lid);
void cm_local_event_release(struct cep_cm_id *id, struct cep_cm_id *lid, int destroyed_acked);
/* src/verbs/verbs.c (with libibverbs): @state an enum ibv_qp_state. */
int cm_local_init_qp_attr(struct cep_cm_id *id, int state, struct ibv_qp_attr *attr, int *mask);
int cm_local_qp_event(struct cep_cm *cm, const struct ibv_async_event *ev);
/* Worker: an id's work item (W_* bits), and a pending cm_waiter's release. */
void cm_id_work_fn(struct cep_work *w);
void cm_waiter_put(struct cm_waiter *wt);
/* Worker, locked: resend the kept MAD of a retry. */
void cm_resend_retry(struct cep_cm_id *id);
/* Timer wheel drain callback of cep_cm_destroy (no worker runs). */
void cm_drain_timer(struct cep_timer *t, void *ctx);
/* Locked, F_USER_GONE just set: what the state asks of a destroy. */
void cm_destroy_act(struct cep_cm_id *id);
/* An id leaves its context's counts (last release or discard). */
void cm_uncount(struct cep_cm_id *id);
/* Table release callback: RCU callback after the id's last put. */
void cm_id_release(struct cep *cep, void *ctx);
/* The transport's receive callback (any transport thread) and the
 * worker's handler of a posted MAD. */
void cm_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from);
void cm_mad(void *ctx, unsigned w, const uint8_t *mad, size_t len,
	    const struct cep_mad_addr *from);

/* State and timers (locked). */
void cm_set_state(struct cep_cm_id *id, unsigned s);
void cm_free_retry(struct cep_cm_id *id);
void cm_set_timer(struct cep_cm_id *id, unsigned kind, uint32_t ms);
void cm_clear_timer(struct cep_cm_id *id);

/* Sending (locked, except cm_send_raw / cm_reply_rej: any). */
int cm_send_raw(struct cep_cm *cm, unsigned w, struct cep_msg *m,
		const struct cep_mad_addr *to, uint8_t *keep);
int cm_send_msg(struct cep_cm_id *id, struct cep_msg *m, int retain);
int cm_keep_msg(struct cep_cm_id *id, struct cep_msg *m);
void cm_send_rej(struct cep_cm_id *id, unsigned reason, unsigned msg_code,
		 const void *ari, size_t ari_len, const void *pdata, size_t len);
void cm_send_mra(struct cep_cm_id *id, unsigned msg_code, uint8_t service_timeout,
		 const void *pdata, size_t len);
/* The engine's own MRA (auto_mra): the context's service timeout, no
 * private data, marked F_MRA_AUTO. */
void cm_send_auto_mra(struct cep_cm_id *id, unsigned msg_code);
/* Keep @pdata as what a resent MRA / RTU / DREP carries (NULL: none). */
void cm_keep_pdata(struct cep_cm_id *id, const void *pdata, size_t len);
void cm_send_simple(struct cep_cm_id *id, enum cep_msg_type t, const void *pdata,
		    size_t len, int retain);
void cm_reply_rej(struct cep_cm *cm, unsigned w, const struct cep_mad_addr *from,
		  uint64_t tid, uint32_t local, uint32_t remote, unsigned reason,
		  unsigned msg_code);

/* Transitions (locked). */
/* A half-open passive id (REQ_RCVD, MRA_REQ_SENT, SIDR_REQ_RCVD) expires
 * @give_up_ms from now, when its requester has given up, but no later
 * than id->half_open_until - or @floor_ms from now if that is later (the
 * service timeout of an MRA we just sent: we asked the requester to wait
 * that long). */
void cm_set_expiry(struct cep_cm_id *id, uint32_t give_up_ms, uint32_t floor_ms);
void cm_req_expire_after_mra(struct cep_cm_id *id);
void cm_drop_remote_keys(struct cep_cm_id *id);
void cm_maybe_table_destroy(struct cep_cm_id *id);
void cm_reset_to_idle(struct cep_cm_id *id);
void cm_enter_timewait(struct cep_cm_id *id);
int cm_start_dreq(struct cep_cm_id *id, const void *pdata, size_t len);
int cm_do_reject(struct cep_cm_id *id, unsigned reason, const void *ari, size_t ari_len,
		 const void *pdata, size_t len);
void cm_do_sidr_rep(struct cep_cm_id *id, unsigned status, uint32_t qpn, uint32_t qkey,
		    const void *pdata, size_t len);

/* Events: build (locked), then cm_emit (worker, locked): the one path by
 * which every event but DESTROYED reaches the user. */
void cm_ev_init(struct cep_cm_event *ev, struct cep_cm_id *id, enum cep_cm_event_type t);
void cm_ev_msg(struct cep_cm_event *ev, const struct cep_msg *m,
	       const struct cep_mad_addr *from);
int cm_emit(struct cep_cm_id *id, struct cep_cm_event *ev);
/* Locked: DESTROYED is queued once the destroy has done what the state
 * asks (F_DESTROY_DONE, not merely F_USER_GONE), no child's REQ/SIDR_REQ
 * delivery still uses this (listener) id and, for an F_LINGER id, its
 * core CEP is destroyed (cm_maybe_table_destroy calls it again then). */
void cm_maybe_post_destroyed(struct cep_cm_id *id);

/* Ids and lookups (no lock). cm_find_id returns a reference (cm_id_put);
 * cm_find_peer also checks the peer's comm ID and address and returns the
 * id locked. */
struct cep_cm_id *cm_find_id(struct cep_cm *cm, uint32_t comm_id);
struct cep_cm_id *cm_find_peer(struct cep_cm *cm, unsigned w, uint32_t ours, uint32_t theirs,
			       const struct cep_mad_addr *from);
/* Locked: the id's alternate path ends, allocated on first use (NULL:
 * no memory; the alternate then counts as absent). */
struct cm_paths *cm_paths(struct cep_cm_id *id);
/* Locked: @from is the id's peer (primary or installed alternate path,
 * or after a migration the primary it left);
 * counts a drop (ADDRESS) and returns 0 when it is not. */
int cm_from_peer(struct cep_cm_id *id, unsigned w, const struct cep_mad_addr *from);
/* The far end of a CM path as an address (remote = 1: the path's remote
 * port, as the active side sees it; 0: its local port, as the passive). */
struct cm_addr cm_path_addr(const struct cep_path *p, int remote);
void cm_id_put(struct cep_cm_id *id);
void cm_drop(struct cep_cm *cm, unsigned w, enum cep_cm_drop why);
int cm_alloc_id(struct cep_cm *cm, unsigned worker, cep_cm_handler handler,
		struct cep_cm_channel *ch, void *context, struct cep_cm_id **out);
void cm_discard_id(struct cep_cm_id *id);

/* Listeners (worker, no lock): pin across a child's request event and
 * count the child against the backlog (-ENOBUFS: full, -ENOENT: gone). */
int cm_listener_hold(struct cep_cm_id *lid, struct cep_cm_id *id);
void cm_listener_release(struct cep_cm_id *lid);

/* MAD handlers (worker w, no lock). */
#define CM_HANDLER_(n) void cm_handle_##n(struct cep_cm *cm, unsigned w, \
	const struct cep_msg *m, const struct cep_mad_addr *from)
CM_HANDLER_(req); CM_HANDLER_(rep); CM_HANDLER_(rtu); CM_HANDLER_(mra);
CM_HANDLER_(rej); CM_HANDLER_(dreq); CM_HANDLER_(drep); CM_HANDLER_(lap);
CM_HANDLER_(apr); CM_HANDLER_(sidr_req); CM_HANDLER_(sidr_rep);
#undef CM_HANDLER_

/* The table's teardown callback (QP destruction; caller's thread). */
void cm_id_teardown(struct cep *cep, void *ctx);

/* Requester pacing (cm_pace.c; docs/protocol.md, "Requester pacing").
 * All locked (@id's lock held), a paced id (id->dest set) unless said. */
void cm_pace_init(struct cep_cm *cm);
void cm_pace_fini(struct cep_cm *cm); /* cep_cm_destroy, ids gone */
/* Connect, the REQ kept in id->retry, id->peer set: join the window of
 * its destination. 1: send it now (a slot taken; also when there is no
 * memory for a window: not paced); 0: it waits (TK_PACE armed). */
int cm_pace_join(struct cep_cm_id *id);
/* The REQ of @id has just been sent (a first try or a retry). */
void cm_pace_sent(struct cep_cm_id *id);
/* The REQ was answered: an MRA extending the try by @ext ms, or the REP
 * or REJ that ends it (the state change that follows leaves the window). */
void cm_pace_mra(struct cep_cm_id *id, uint32_t ext);
void cm_pace_answer(struct cep_cm_id *id);
/* TK_RETRY of the REQ, a try left (retries_left spent): 0, resend now;
 * 1, it waits for the window (TK_PACE armed). */
int cm_pace_retry(struct cep_cm_id *id);
/* TK_RETRY of the REQ's last try: the give-up follows. */
void cm_pace_timeout(struct cep_cm_id *id);
/* cm_set_state: the id leaves REQ_SENT / MRA_REQ_RCVD. */
void cm_pace_leave(struct cep_cm_id *id);
/* Worker: W_PACE (send the REQ the window let out, or give up if its
 * tries were spent waiting); TK_PACE (give up if it still waits). Any id. */
void cm_pace_go(struct cep_cm_id *id);
void cm_pace_expire(struct cep_cm_id *id);
/* Locked: send the REQ kept in id->retry (a retry if it went out before)
 * and arm its timer. */
void cm_send_req(struct cep_cm_id *id);
/* Worker, locked, REQ_SENT / MRA_REQ_RCVD: the requester gives up: REJ
 * "timeout" if the REQ ever left, IDLE, REQ_ERROR (-ETIMEDOUT). */
void cm_req_give_up(struct cep_cm_id *id);

#endif /* CEP_CM_INTERNAL_H */
