/* SPDX-License-Identifier: MIT */
/*
 * libcep connection manager: the IBTA vol. 1 chapter 12 protocol engine
 * (REQ/MRA/REJ/REP/RTU, DREQ/DREP, LAP/APR, SIDR) over one transport port,
 * driven by a multi-threaded MAD dispatcher.
 *
 * Guarantees: each connection (struct cep_cm_id) is owned by one worker
 * thread, chosen by its local comm ID; its received MADs, timers and events
 * are processed there, in order. Protocol state is guarded by a per-id lock
 * taken by the worker and by API calls from any thread, so API calls are
 * safe against concurrent MAD processing for the same id. No global lock is
 * taken on the MAD path. A QP's connection is recorded only in the core
 * table's binding word (cep/table.h). See docs/cm.md.
 *
 * When a handle is dead (libuv's close contract):
 * - struct cep_cm: from cep_cm_create() until cep_cm_destroy() returns 0
 *   (or -ENOTEMPTY); its -EDEADLK and -EBUSY change nothing.
 *   cep_cm_destroy() of a context that is not live (already destroyed,
 *   never created) is -EINVAL.
 * - struct cep_cm_id: from cep_cm_create_id(), or the REQ_RECEIVED /
 *   SIDR_REQ_RECEIVED event that hands it over, until its DESTROYED event
 *   has returned (callback) or been acked (channel), or until
 *   cep_cm_destroy_id_sync() or cep_cm_destroy() has returned. After
 *   cep_cm_destroy_id() and before then, the handle is valid but no longer
 *   the caller's to drive: the getters answer, a second destroy is
 *   -EALREADY, every other call is -EINVAL, and no event but DESTROYED
 *   reaches the caller. Any call once it is dead is a use after free
 *   libcep cannot detect (the memory may hold a new id): free what your
 *   callbacks use in DESTROYED, not before.
 * - struct cep_cm_event taken from a channel: until cep_cm_ack_event(),
 *   and its id and context with it (cep_cm_destroy() refuses meanwhile).
 * - struct cep_cm_channel: until cep_cm_channel_destroy() returns 0.
 *
 * Errors: each function's comment lists every negative errno it returns,
 * and its man page the same list (tests/api/check_errors.py). A call the
 * id's state does not allow (connect on an id that is not IDLE, accept on
 * one that holds no REQ, listen twice) is -EINVAL, as the kernel's ib_cm
 * (ib_send_cm_req, ib_send_cm_rep) and rdma_cm (rdma_connect, rdma_accept,
 * rdma_listen) answer it: the same code as a NULL or out-of-range
 * argument; cep_cm_id_state() tells the two apart. Where the kernel has a
 * code of its own, so does libcep: -EISCONN from
 * cep_cm_notify_established() on an ESTABLISHED id (ib_cm_notify), and,
 * from connect and accept, the binding's -EISCONN (the QP is connected
 * already) and -ESHUTDOWN (the QP is being destroyed); -EALREADY for a
 * second destroy.
 */
#ifndef CEP_CM_H
#define CEP_CM_H

#include <stddef.h>
#include <stdint.h>

#include <cep/clock.h>
#include <cep/export.h>
#include <cep/table.h>
#include <cep/transport.h>
#include <cep/wire.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cep_cm;         /* a CM context: one transport port, N workers */
struct cep_cm_id;      /* one connection, listener or SIDR endpoint */
struct cep_cm_channel; /* an event channel (fd readable while events wait) */

/* ---- states, events and drop reasons (names from tables) -------------- */

#define CEP_CM_STATE_MAP(X) \
	X(IDLE) X(LISTEN) X(REQ_SENT) X(REQ_RCVD) X(MRA_REQ_SENT) \
	X(MRA_REQ_RCVD) X(REP_SENT) X(REP_RCVD) X(MRA_REP_SENT) \
	X(MRA_REP_RCVD) X(ESTABLISHED) X(DREQ_SENT) X(DREQ_RCVD) \
	X(TIMEWAIT) X(SIDR_REQ_SENT) X(SIDR_REQ_RCVD)

enum cep_cm_state {
#define CEP_CM_STATE_ENUM_(n) CEP_CM_##n,
	CEP_CM_STATE_MAP(CEP_CM_STATE_ENUM_)
#undef CEP_CM_STATE_ENUM_
	CEP_CM_STATE_COUNT
};

/* Alternate-path (LAP) sub-state of an ESTABLISHED connection. */
#define CEP_CM_LAP_STATE_MAP(X) \
	X(LAP_IDLE) X(LAP_SENT) X(LAP_RCVD) X(MRA_LAP_SENT) X(MRA_LAP_RCVD)

enum cep_cm_lap_state {
#define CEP_CM_LAP_ENUM_(n) CEP_CM_##n,
	CEP_CM_LAP_STATE_MAP(CEP_CM_LAP_ENUM_)
#undef CEP_CM_LAP_ENUM_
	CEP_CM_LAP_STATE_COUNT
};

/* X(name, description) */
#define CEP_CM_EVENT_MAP(X) \
	X(REQ_RECEIVED,      "REQ received (new passive id; accept, reject or MRA)") \
	X(REQ_ERROR,         "REQ retries exhausted: REJ timeout sent; passive: the REQ expired unanswered") \
	X(REP_RECEIVED,      "REP received (RTU sent unless manual_rtu)") \
	X(REP_ERROR,         "REP retries exhausted: REJ timeout sent") \
	X(RTU_RECEIVED,      "RTU received: passive side established") \
	X(ESTABLISHED,       "established: RTU sent (active), or cep_cm_notify_established (passive)") \
	X(REJ_RECEIVED,      "REJ received (see status = reason)") \
	X(MRA_RECEIVED,      "MRA received: peer's timer extended") \
	X(DREQ_RECEIVED,     "DREQ received (DREP sent unless manual_drep)") \
	X(DREQ_ERROR,        "DREQ retries exhausted: timewait entered") \
	X(DREP_RECEIVED,     "DREP received: timewait entered") \
	X(TIMEWAIT_EXIT,     "timewait over: the QP released, the id IDLE") \
	X(LAP_RECEIVED,      "LAP received (answer with cep_cm_apr)") \
	X(LAP_ERROR,         "LAP retries exhausted") \
	X(APR_RECEIVED,      "APR received (status = AP status)") \
	X(SIDR_REQ_RECEIVED, "SIDR_REQ received (new id; answer with cep_cm_sidr_rep)") \
	X(SIDR_REQ_ERROR,    "SIDR_REQ retries exhausted; passive: the SIDR_REQ expired unanswered") \
	X(SIDR_REP_RECEIVED, "SIDR_REP received (status = SIDR status)") \
	X(QP_DESTROYED,      "the bound QP is being destroyed: REJ or DREQ sent, the id ends") \
	X(DESTROYED,         "asynchronous destroy complete: last event of the id")

enum cep_cm_event_type {
#define CEP_CM_EVENT_ENUM_(n, s) CEP_CM_EV_##n,
	CEP_CM_EVENT_MAP(CEP_CM_EVENT_ENUM_)
#undef CEP_CM_EVENT_ENUM_
	CEP_CM_EVENT_COUNT
};

/* Why a received MAD changed nothing. X(name, description) */
#define CEP_CM_DROP_MAP(X) \
	X(DECODE,       "MAD failed validation (cep/wire.h)") \
	X(QUEUE_FULL,   "owning worker's receive queue full") \
	X(NO_CEP,       "no CEP with the addressed comm ID") \
	X(MISMATCH,     "comm ID found but remote comm ID / QPN / GUID differ") \
	X(BAD_STATE,    "message not allowed in the CEP's state") \
	X(UNSUPPORTED,  "message type not handled (ClassPortInfo...)") \
	X(NO_MEMORY,    "allocation failed while handling") \
	X(STOPPED,      "CM context being destroyed") \
	X(BACKLOG,      "listener's backlog of unanswered requests full") \
	X(ADDRESS,      "message for a connection from an address not its peer's")

enum cep_cm_drop {
#define CEP_CM_DROP_ENUM_(n, s) CEP_CM_DROP_##n,
	CEP_CM_DROP_MAP(CEP_CM_DROP_ENUM_)
#undef CEP_CM_DROP_ENUM_
	CEP_CM_DROP_COUNT
};

CEP_EXPORT const char *cep_cm_state_name(unsigned state);     /* "REQ_SENT" */
CEP_EXPORT const char *cep_cm_lap_state_name(unsigned state); /* "LAP_SENT" */
CEP_EXPORT const char *cep_cm_event_name(unsigned type);      /* "REP_RECEIVED" */
CEP_EXPORT const char *cep_cm_event_str(unsigned type);       /* sentence */
CEP_EXPORT const char *cep_cm_drop_name(unsigned why);        /* "NO_CEP" */

/* ---- events ------------------------------------------------------------ */

struct cep_cm_event {
	enum cep_cm_event_type type;
	struct cep_cm_id *id;        /* the id the event is for */
	struct cep_cm_id *listen_id; /* REQ/SIDR_REQ_RECEIVED: the listener */
	void *context;               /* id's context at delivery */
	/* REJ_RECEIVED: reject reason; APR: AP status; SIDR_REP: status;
	 * *_ERROR: -ETIMEDOUT; 0 otherwise. */
	int status;
	/* The received message (decoded), or type CEP_MSG_INVALID when the
	 * event has none (timeouts, ESTABLISHED, TIMEWAIT_EXIT, DESTROYED). */
	struct cep_msg msg;
	/* Into msg: the message's whole private-data field (the wire carries
	 * no length). For RTU, DREQ and DREP, which usually carry none, NULL
	 * (length 0) when the field is all zero: that is how "the peer sent
	 * none" is told (a peer that sent only zero bytes looks the same).
	 * The other messages always give the field, zeros included (they can
	 * be data). NULL for events without a message. */
	const uint8_t *private_data;
	size_t private_data_len;
	struct cep_mad_addr from;    /* sender of msg */
};

/* Callback on the owning worker's thread, with no libcep lock held. @ev is
 * valid during the call only. It may call any cep_cm_* function, on its
 * own id too (cep_cm_qp_destroy() included), except the three that wait
 * for the context's workers, which would wait for this callback: on its
 * own context cep_cm_destroy(), cep_cm_quiesce() and
 * cep_cm_destroy_id_sync() return -EDEADLK and change nothing (and so
 * does cep_clock_quiesce(), cep/clock.h). Returning non-zero asks for @id
 * to be destroyed after the call (as cep_cm_destroy_id). It must not
 * block for long: it stalls every CEP of its worker. */
typedef int (*cep_cm_handler)(struct cep_cm_id *id, const struct cep_cm_event *ev);

/* ---- CM context ---------------------------------------------------------- */

struct cep_cm_attr {
	size_t size;                  /* sizeof(struct cep_cm_attr) */
	struct cep_transport *transport; /* the port; the CM calls start/stop,
					    the caller keeps ownership */
	unsigned workers;             /* 0 = online CPUs */
	unsigned queue_depth;         /* per worker receive ring, power of 2;
					 0 = 4096 */
	size_t table_size;            /* initial buckets per index; 0 = default */
	uint8_t mra_service_timeout;  /* advertised in automatic MRAs (5 bits);
					 0 = 20 (~4 s) */
	uint8_t auto_mra;             /* send MRA when the application takes more
					 than half the peer's response timeout
					 (REQ, LAP; a REP: when the responder
					 repeats it, as rdma_cm, or at half
					 when it will likely wait past that at
					 the pace REPs are answered), and at
					 once for a REQ that would wait
					 that long behind its listener's
					 others at the pace the listener has
					 answered (libcep's own:
					 the kernel's rdma_cm MRAs only a
					 repeated REQ); cep_cm_mra() replaces
					 it */
	/* Time of every timer of this context (retries, MRA extensions,
	 * timewait, half-open expiry) and of its workers' sleep. NULL:
	 * CLOCK_MONOTONIC. A virtual clock (cep/clock.h) must outlive the
	 * context; its advance wakes the workers, and cep_cm_quiesce() after
	 * it returns only when every timer due by then has fired. Fields
	 * from here on are read only when @size covers them. */
	struct cep_clock *clock;
	/* Default backlog of a listener: how many of its passive ids may
	 * wait for the application's answer at once (REQ_RCVD, MRA_REQ_SENT,
	 * SIDR_REQ_RCVD; an accepted id waiting for its RTU does not count,
	 * as ucma's backlog counts only unfetched requests; librdmacm on
	 * libcep also stops counting one when rdma_get_cm_event returns its
	 * CONNECT_REQUEST); a request beyond it is dropped unanswered and
	 * counted (CEP_CM_DROP_BACKLOG) and the peer retries. 0 = 1024
	 * (librdmacm's default). */
	unsigned listen_backlog;
	/* The longest a passive id may stay half-open unanswered (REQ_RCVD,
	 * MRA_REQ_SENT, SIDR_REQ_RCVD), in ms from its request, whatever
	 * timeouts the requester gave: then it expires as when the requester
	 * gives up (REQ_ERROR / SIDR_REQ_ERROR, -ETIMEDOUT; counted in
	 * cep_cm_stats.half_open_limited). An MRA of ours lets the id wait
	 * at least for the requester's next try after it (our service
	 * timeout + its ACK timeout + its response timeout), and each repeat
	 * of the REQ renews that wait, as many as the REQ's Max CM Retries
	 * allow (more are a lie: ignored), so a request the application holds
	 * does not expire while its requester still tries (as the kernel's
	 * REQ_RCVD never does). 0 = 60000 (60 s); at
	 * most 2^32 - 1 counts. With a backlog of B, forged requests must
	 * come faster than B per limit to keep a listener full. (64 bits:
	 * the struct grows, so @size tells a libcep 0.2 caller apart.) */
	uint64_t half_open_timeout_ms;
};

/* Create a CM context on @attr->transport and start its workers.
 * 0, -EINVAL (NULL, bad attr), -ENOMEM, -EIO (no random seed for the comm
 * IDs), or the error of the transport's query_port() or start(). */
CEP_EXPORT int cep_cm_create(const struct cep_cm_attr *attr, struct cep_cm **out);

/* Stop the transport and the workers, destroy every id left (without
 * sending anything or delivering DESTROYED), also ids whose connection
 * already ended (QP destroyed, timewait over) and CEP_CM_ID_LINGER ids
 * destroyed whose protocol is not over, drop every event of the
 * context's ids still queued on a channel (never taken, so never seen:
 * DESTROYED included; the channels are then free of the context), and
 * free the context: 0. Callers must have stopped using its ids.
 *
 * An event taken from a channel and not yet acked is the application's:
 * then nothing is done and it returns -EBUSY. The context, its ids and the
 * event stay valid and working; ack the event and call again. (librdmacm's
 * rdma_destroy_id() waits for such acks instead; a wait here would hang
 * the thread that is to ack, and freeing would leave the event pointing at
 * freed memory.) While a destroy that did not refuse runs,
 * cep_cm_get_event() hands out no event of its ids.
 *
 * 0 as above. -EINVAL: not a live context. -EDEADLK: from one of its CM callbacks,
 * nothing done. -ENOTEMPTY: the application still holds a reference on a
 * CEP of cep_cm_table() (a lookup not put): the context is dead, but its
 * table and memory are leaked (logged), not freed under that reference. */
CEP_EXPORT int cep_cm_destroy(struct cep_cm *cm);

/* ---- a context served by cepd ------------------------------------------ */

/* A CM context on a port owned by the node's CM service, cepd(8): every
 * cep_cm_* call on it and on its ids and their events works as on a
 * context of cep_cm_create(), with the same contracts and errors, and
 * these differences:
 * - the engine runs in cepd: handler callbacks run on one library thread
 *   of this context, in the order cepd delivered them (another thread
 *   receives the service's answers, so a callback may call what it may on
 *   a local context, with the same -EDEADLK refusals, and wait for the
 *   application's locks);
 * - QPNs are this process's: cep_cm_qp_register() of a QPN another
 *   client registered fails with EEXIST; on an RDMA port, of a QP the
 *   kernel does not show as this process's, EPERM; connect/accept on a
 *   QPN this process did not register, ENOENT;
 * - a listen on a service ID another process listens on: EADDRINUSE;
 * - cep_cm_create_id() asks nothing of cepd: the id is made there by its
 *   first call, which returns the create's errors (ENOMEM, EAGAIN, and
 *   EMFILE beyond the service's per-process budget, cepd --max-ids);
 * - cep_cm_table() and cep_cm_id_cep() return NULL (the table is cepd's);
 *   cep_cm_id_state(), cep_cm_id_lap_state() and
 *   cep_cm_id_remote_comm_id() ask cepd (IDLE / LAP_IDLE / 0 once it has
 *   gone);
 * - once the service has gone (exited, killed, restarting) every call
 *   fails with ECONNRESET; each id in a connection's course gets its
 *   error event (REQ_ERROR, REP_ERROR, DREQ_ERROR or SIDR_REQ_ERROR) with
 *   status ECONNRESET (negated), an id destroyed whose DESTROYED had not
 *   come gets it, and cep_cm_destroy_id() still ends ids (0, then
 *   DESTROYED): each id's DESTROYED exactly once, so nothing waits for
 *   ever;
 * - cep_cm_destroy() closes the connection: cepd ends the context's ids
 *   as when a client dies (REJ for pending requests, DREQ for established
 *   connections, listeners gone) and destroys its QPs; no event is
 *   delivered here once it is called (a running callback finishes
 *   first). Of calls racing on one context one destroys it, the others
 *   return -EINVAL. */
struct cep_cm_attach_attr {
	size_t size;           /* sizeof(struct cep_cm_attach_attr) */
	/* The service's socket. NULL: the environment's CEP_SERVICE (a path;
	 * "none" refuses with ENOENT), else /run/cep/cepd.sock. */
	const char *socket;
	/* The port: an RDMA device name ("mlx5_0", "rxe0") and its port
	 * number (1-based), or, with @device NULL, @port_num is the index of
	 * the port in the service's list (cepd --fabric N: 0..N-1). */
	const char *device;
	unsigned port_num;
	/* Fields from here on are read only when @size covers them. The
	 * longest cep_cm_attach() waits for the service, in ms: for its
	 * connect (a service whose accept backlog is full) and its answer
	 * to the HELLO together; then -ETIMEDOUT. 0 = 10000 (10 s), also
	 * for a caller built before the field (whose struct ends at
	 * @port_num). (64 bits: the struct grows, so @size tells such a
	 * caller apart.) */
	uint64_t timeout_ms;
};

/* Attach to cepd's CM of one port (see above). 0; -EINVAL (NULL, bad
 * attr); -ENOENT (no socket at the path, or CEP_SERVICE=none);
 * -ECONNREFUSED (nothing answers there); -ETIMEDOUT (no connection or no
 * answer within @attr->timeout_ms); -ENODEV (the service has no such
 * port); -EPROTONOSUPPORT (a cepd of another protocol version or libcep
 * ABI); -EUSERS (the service serves as many connections of this uid, or
 * in all, as it allows: cepd(8) LIMITS); -EPERM (the service could not
 * tell who attaches: no pidfd on a kernel without SO_PEERPIDFD, or
 * credentials of another uid than the connection's); -EACCES;
 * -ENAMETOOLONG; -ENOMEM; -EAGAIN (no thread); or another error of
 * socket(2), connect(2) or pidfd_open(2). Any thread. The
 * service learns who attaches from the HELLO's credentials and a pidfd
 * of the process (cepd(8)). */
CEP_EXPORT int cep_cm_attach(const struct cep_cm_attach_attr *attr, struct cep_cm **out);

/* The core table of this context (for cep_table_check/stats). */
CEP_EXPORT struct cep_table *cep_cm_table(struct cep_cm *cm);
CEP_EXPORT unsigned cep_cm_workers(const struct cep_cm *cm);
/* The port's CA GUID (host order) as queried at create. */
CEP_EXPORT uint64_t cep_cm_ca_guid(const struct cep_cm *cm);

/* Register an application QP (its binding word, INVALID). 0, -EINVAL
 * (NULL, @qpn > 0xffffff), -EEXIST (registered already), -ENOMEM. Any
 * thread. */
CEP_EXPORT int cep_cm_qp_register(struct cep_cm *cm, uint32_t qpn);
/* Destroy an application QP: reserves the binding; a connection bound to
 * it is torn down (DREQ if established, then timewait), then the QPN is
 * forgotten. 0, -EINVAL (NULL), -ENOENT (not registered). Any thread,
 * also a CM callback, on its own id's QP too (the teardown takes only the
 * bound id's lock, which no callback holds; QP_DESTROYED follows). */
CEP_EXPORT int cep_cm_qp_destroy(struct cep_cm *cm, uint32_t qpn);

/* Block until no MAD is queued, no work is pending and no timer is firing
 * on any worker, or @timeout_ms (real time) passes (-ETIMEDOUT). Timers
 * armed for later may still fire afterwards. With a virtual clock: every
 * timer due at the clock's time when this is called has fired, and what
 * it did on this context (MADs sent, events delivered) is done; MADs it
 * sent to another context are that context's (see cep_clock_quiesce()).
 * Before cep_table_check() on cep_cm_table(): a running CM holds
 * references for work in flight, which the check would report as leaks.
 * 0, -EINVAL (NULL), -ETIMEDOUT, -EDEADLK (from one of this context's
 * callbacks, which would wait for itself: nothing done). */
CEP_EXPORT int cep_cm_quiesce(struct cep_cm *cm, unsigned timeout_ms);

/* ---- event channels ---------------------------------------------------- */

/* 0, -EINVAL (NULL), -ENOMEM, -EMFILE or -ENFILE (eventfd(2): too many
 * open files). */
CEP_EXPORT int cep_cm_channel_create(struct cep_cm_channel **out);
/* 0, -EINVAL (NULL), -EBUSY while events are queued or ids still use the
 * channel (an id stops at its DESTROYED's ack, or when cep_cm_destroy()
 * ends it). */
CEP_EXPORT int cep_cm_channel_destroy(struct cep_cm_channel *ch);
/* The file descriptor, readable (EPOLLIN) while at least one event
 * waits, or -EINVAL (NULL). */
CEP_EXPORT int cep_cm_channel_fd(const struct cep_cm_channel *ch);
/* Take the oldest event: 0, -EINVAL (NULL), -EAGAIN (none). The event, its
 * id and its context stay valid until cep_cm_ack_event() (cep_cm_destroy()
 * of that context refuses meanwhile). Events of a context whose destroy is
 * running are skipped: that destroy drops them. Any thread. */
CEP_EXPORT int cep_cm_get_event(struct cep_cm_channel *ch, struct cep_cm_event **out);
/* Release a taken event (dead after it; after DESTROYED's, so is its id).
 * Any thread, also a callback. */
CEP_EXPORT void cep_cm_ack_event(struct cep_cm_event *ev);
/* Wait until @ch has an event (cep_cm_get_event() then takes it), at
 * most @timeout_ms (< 0: no limit). Meanwhile the calling thread reads the
 * receive queues of the @n contexts @cms (at most 8; those whose
 * transport lets it: libibumad's) itself whenever no other thread does,
 * and handles what it reads there, as a worker would: the MAD that brings
 * the channel's event wakes only this thread, and its answer goes out
 * from here. So callbacks of those contexts' ids may run on this thread
 * during the call (do not hold a lock they take). 0, -ETIMEDOUT, -EINTR
 * (a signal), -EINVAL (NULL, @n > 8), -EDEADLK (from a CM callback: it
 * would wait for itself). Any other thread; the contexts must not be
 * destroyed meanwhile. */
CEP_EXPORT int cep_cm_channel_wait(struct cep_cm_channel *ch, struct cep_cm *const *cms,
				   unsigned n, int timeout_ms);

/* ---- ids -------------------------------------------------------------- */

/* cep_cm_id_attr.flags */
/* DESTROYED waits for the protocol: it is delivered only once the engine
 * holds no more state for the id - what cep_cm_destroy_id() started (a
 * REJ, a DREQ and its DREP or retries) and the timewait after it are over
 * and the id's core CEP has left the table (its comm ID free, its QP
 * unbound) - instead of as soon as the destroy has done what the state
 * asks. Everything else about DESTROYED holds: it is the id's last event,
 * no other event comes after cep_cm_destroy_id(), the owning worker
 * delivers it. How long that is: at once for an id that is idle,
 * listening or still connecting as the active side (the REJ ends it); the
 * rest of the DREQ's retries (Max CM Retries of the connection's DREQ
 * period) and then timewait (the path's ACK timeout) for a connection;
 * timewait alone after a REJ of a REP or a DREP. Every timeout a peer
 * supplies counts at most 68.7 s (exponent 24), so only the timeouts the
 * application gave itself in cep_cm_connect() can make it longer. A
 * passive id inherits its listener's flag. cep_cm_destroy() still ends
 * such ids at once (without DESTROYED, as every id it ends). Meant for a
 * service that accounts a client's connection state until it is gone
 * (cepd); on a context of cep_cm_attach(): -EOPNOTSUPP. */
#define CEP_CM_ID_LINGER 0x1ull

struct cep_cm_id_attr {
	size_t size;                    /* sizeof(struct cep_cm_id_attr) */
	cep_cm_handler handler;         /* exactly one of handler / channel */
	struct cep_cm_channel *channel;
	void *context;
	/* Read only when @size covers it: a caller built before it (whose
	 * struct ends at @context) gets 0. CEP_CM_ID_* bits; any other bit
	 * is -EINVAL. */
	uint64_t flags;
	/* Requester pacing (docs/protocol.md): the REQs a context has sent to
	 * one peer and not yet had answered are bounded by a window shared by
	 * the ids of one pace group; ids of different groups never share one,
	 * so one group's unanswered REQs cannot hold back another's. 0 (and a
	 * caller whose @size ends before it) for all of an application's
	 * ids; a service acting for several users gives each its own (cepd:
	 * one per client). Ignored on a context of cep_cm_attach(). */
	uint32_t pace_group;
};

/* Create an IDLE id. 0, -EINVAL (NULL, bad attr, not exactly one of
 * handler and channel, an unknown flag), -EOPNOTSUPP (CEP_CM_ID_LINGER on
 * a context of cep_cm_attach()), -ESHUTDOWN (the context is being
 * destroyed), -ENOMEM, -EAGAIN (no free comm ID found: cep_create()). Any
 * thread. */
CEP_EXPORT int cep_cm_create_id(struct cep_cm *cm, const struct cep_cm_id_attr *attr,
				struct cep_cm_id **out);

/* Destroy asynchronously: does what the state asks (REJ while connecting,
 * DREQ when established, DREP when a DREQ waits; timewait continues
 * without the user), then delivers DESTROYED as the id's last event; the
 * pointer is dead after that event returns (callback) or is acked
 * (channel). 0, -EINVAL (NULL), -EALREADY (destroy called before). Any
 * thread, also from a callback.
 *
 * Once it has returned, no event of @id but DESTROYED reaches the user:
 * events still queued on a channel are dropped, and, called from a thread
 * that is not one of this context's workers, it first waits (bounded,
 * logged after 10 s) for a callback of @id that is running to return - so
 * do not hold a lock such a callback takes. From a callback (a worker) it
 * does not wait: a callback of @id running on another worker at that
 * moment may still return after it. Destroying a listener: its DESTROYED
 * comes after every REQ_RECEIVED / SIDR_REQ_RECEIVED that names it as
 * listen_id, and the waiting above includes their callbacks. DESTROYED
 * never comes before this call has done what the state asks (a listener
 * stops listening, a REJ or DREQ is sent), and for a CEP_CM_ID_LINGER id
 * not before that protocol and its timewait are over. */
CEP_EXPORT int cep_cm_destroy_id(struct cep_cm_id *id);
/* As cep_cm_destroy_id() and wait (bounded: -ETIMEDOUT after 10 s, logged)
 * for DESTROYED to have been handled (callback ids only: a channel id's
 * DESTROYED must be acked by the caller, so this returns -EINVAL). For a
 * CEP_CM_ID_LINGER id that is until its protocol is over: the bound is
 * 10 s more than the longest the destroy's DREQ retries and timewait can
 * still take, from the id's own timers at the time of the call (real
 * time; with a virtual clock, someone must advance it meanwhile).
 * 0, -EINVAL (NULL, channel id), -EALREADY, -EDEADLK from inside a CM
 * callback, -ENOMEM, -ETIMEDOUT. */
CEP_EXPORT int cep_cm_destroy_id_sync(struct cep_cm_id *id);

CEP_EXPORT uint32_t cep_cm_id_local_comm_id(const struct cep_cm_id *id);
CEP_EXPORT uint32_t cep_cm_id_remote_comm_id(struct cep_cm_id *id);
CEP_EXPORT void *cep_cm_id_context(struct cep_cm_id *id);
CEP_EXPORT void cep_cm_id_set_context(struct cep_cm_id *id, void *context);
CEP_EXPORT enum cep_cm_state cep_cm_id_state(struct cep_cm_id *id);
CEP_EXPORT enum cep_cm_lap_state cep_cm_id_lap_state(struct cep_cm_id *id);
/* The underlying core CEP (a reference is not taken). */
CEP_EXPORT struct cep *cep_cm_id_cep(const struct cep_cm_id *id);

/* Listen (IDLE -> LISTEN) on service IDs matching (service_id & mask).
 * 0, -EINVAL (NULL, mask 0, or the id is not IDLE: a listener already, or
 * connected), -EADDRINUSE (same key listened on), -ENOMEM.
 * The backlog is the context's default (cep_cm_attr.listen_backlog). */
CEP_EXPORT int cep_cm_listen(struct cep_cm_id *id, uint64_t service_id, uint64_t mask);
/* As cep_cm_listen() with @backlog unanswered passive ids at most (0:
 * the context's default). A passive id counts from its REQ (or SIDR_REQ)
 * until the application answers it (accept, reject, SIDR reply), it times
 * out or it is destroyed; an
 * unanswered one expires once the requester has given up, or at the
 * latest cep_cm_attr.half_open_timeout_ms after its request (REQ_ERROR /
 * SIDR_REQ_ERROR, status -ETIMEDOUT). Returns as cep_cm_listen(): 0,
 * -EINVAL, -EADDRINUSE, -ENOMEM. */
CEP_EXPORT int cep_cm_listen_backlog(struct cep_cm_id *id, uint64_t service_id,
				     uint64_t mask, unsigned backlog);

/* CM time values are IBTA 5-bit exponents: 4.096 us * 2^t.
 * A CM timing field left 0 takes librdmacm's default (its kernel's
 * CMA_CM_RESPONSE_TIMEOUT, CMA_MAX_CM_RETRIES, CMA_IBOE_PACKET_LIFETIME),
 * so a zero-filled parameter block connects sensibly: */
#define CEP_CM_DEFAULT_RESPONSE_TIMEOUT 20 /* 4.3 s */
#define CEP_CM_DEFAULT_MAX_RETRIES 15
#define CEP_CM_DEFAULT_PACKET_LIFE_TIME 16 /* 268 ms */
struct cep_cm_conn_param {
	size_t size;                        /* sizeof(struct cep_cm_conn_param) */
	uint64_t service_id;
	struct cep_path primary;            /* local_* = this port; the REQ's
					       local_ack_timeout is computed
					       (CA ACK delay, packet_life_time),
					       this one is ignored */
	struct cep_path alternate;          /* all zero: none */
	uint32_t qpn;                       /* registered local QPN: bound here */
	uint32_t starting_psn;
	uint32_t qkey;
	uint16_t pkey;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t remote_cm_response_timeout; /* how long the peer may take;
					       0 = CEP_CM_DEFAULT_RESPONSE_TIMEOUT */
	uint8_t local_cm_response_timeout;  /* how long we take to answer REP;
					       0 = CEP_CM_DEFAULT_RESPONSE_TIMEOUT */
	uint8_t max_cm_retries;             /* 1..15; 0 = CEP_CM_DEFAULT_MAX_RETRIES */
	uint8_t packet_life_time;           /* of the path, 5 bits;
					       0 = CEP_CM_DEFAULT_PACKET_LIFE_TIME */
	uint8_t retry_count;                /* of the QP (not a CM timer): as given */
	uint8_t rnr_retry_count;            /* of the QP: as given */
	uint8_t path_mtu;                   /* 1..5; 0 = port's active MTU */
	uint8_t transport_service_type;     /* enum cep_transport_service: RC,
					       UC, or CEP_TS_EXTENDED for XRC
					       (@qpn an XRC initiator QP; the
					       REQ carries no responder
					       resources, retry counts or SRQ,
					       as the kernel's for
					       IB_QPT_XRC_INI; the REP's local
					       EECN is the peer's target QP).
					       RD: -EINVAL */
	uint8_t srq;
	uint8_t manual_rtu;                 /* 1: the application calls cep_cm_rtu */
	const void *private_data;
	size_t private_data_len;            /* <= CEP_REQ_PRIVATE_DATA_SIZE */
	const struct cep_mad_addr *peer;    /* CM address; NULL: from primary */
	uint8_t flow_control;               /* end-to-end flow control bit of the
					       REQ (1: this CA implements it);
					       read when @size covers it, else 1 */
	uint8_t manual_drep;                /* 1: after DREQ_RECEIVED the
					       application answers (cep_cm_drep
					       or cep_cm_disconnect), as on the
					       passive side; read when @size
					       covers it, else 0 */	/* Enhanced Connection Establishment (IBTA 1.4), as the kernel's
	 * ib_cm_req_param.ece: the REQ's vendor ID (24 bits) and its MAD
	 * attribute modifier. 0: none. Read when @size covers them. */
	uint32_t ece_vendor_id;
	uint32_t ece_options;
};

/* Active side: bind @p->qpn to this id, send REQ (IDLE -> REQ_SENT), arm
 * the retry timer. The REQ leaves now, or, while this context has a
 * window's worth of REQs to the same peer port unanswered, once earlier
 * ones are answered (requester pacing, libcep's own: the REQ's timer
 * starts when it leaves, and the connect still ends in REQ_ERROR no later
 * than the spec's requester would; docs/protocol.md). 0; -EINVAL (NULL, bad parameters, or the id is not
 * IDLE: connecting or connected already, a listener, being destroyed);
 * -EMSGSIZE (private data); -ERANGE (a path field wider than its wire
 * field); -ENOMEM; cep_bind()'s -ENOENT (QPN not registered), -ESHUTDOWN
 * (QP being destroyed), -EISCONN (QP bound to another connection).
 * An id may connect again once it is IDLE (after TIMEWAIT_EXIT, a REJ or
 * a timeout); such a connect first waits for one RCU grace period. */
CEP_EXPORT int cep_cm_connect(struct cep_cm_id *id, const struct cep_cm_conn_param *p);

struct cep_cm_accept_param {
	size_t size;
	uint32_t qpn;                   /* registered local QPN: bound here */
	uint32_t starting_psn;
	uint32_t qkey;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t target_ack_delay;       /* sent: the larger of this and the
					   port's CA ACK delay */
	uint8_t failover_accepted;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t manual_drep;            /* 1: the application calls cep_cm_drep */
	const void *private_data;
	size_t private_data_len;        /* <= CEP_REP_PRIVATE_DATA_SIZE */
	uint8_t flow_control;           /* the REP's end-to-end flow control bit;
					   read when @size covers it, else 1 */	/* ECE for the REP (the kernel's ib_cm_rep_param.ece): vendor ID
	 * (24 bits) and MAD attribute modifier; read when @size covers them,
	 * else 0. */
	uint32_t ece_vendor_id;
	uint32_t ece_options;
};

/* Passive side: bind, send REP (REQ_RCVD/MRA_REQ_SENT -> REP_SENT). To
 * an XRC REQ (transport service type 3, extended transport XRC) @p->qpn
 * is an XRC target QP and the REP is the kernel's for IB_QPT_XRC_TGT:
 * the QP in the local EECN, local QPN 0, SRQ set, no initiator depth or
 * flow control (the REP_RECEIVED of the other side names it there).
 * 0; -EINVAL (NULL, bad parameters, or no REQ to answer: IDLE, accepted
 * already, a listener); -EMSGSIZE; -ENOMEM; cep_bind()'s -ENOENT,
 * -ESHUTDOWN, -EISCONN. */
CEP_EXPORT int cep_cm_accept(struct cep_cm_id *id, const struct cep_cm_accept_param *p);
/* Active side after REP_RECEIVED with manual_rtu: send RTU -> ESTABLISHED
 * (no ESTABLISHED event follows: the caller knows). Also from MRA_REP_SENT.
 * 0, -EINVAL (NULL, or no REP to answer), -EMSGSIZE. */
CEP_EXPORT int cep_cm_rtu(struct cep_cm_id *id, const void *pdata, size_t len);
/* The connection is up although no RTU came: the QP bound to @id has
 * received the peer's first packet (IBV_EVENT_COMM_EST; cep_cm_qp_event()
 * in cep/verbs.h calls this for it), as the kernel's
 * ib_cm_notify(IB_EVENT_COMM_EST). Passive side, REP_SENT or MRA_REP_RCVD
 * -> ESTABLISHED: the REP is no longer retried (so no REJ "timeout" ends
 * a connection the peer already uses), a later RTU is a counted
 * duplicate, and ESTABLISHED is delivered afterwards on the id's worker.
 * 0, -EISCONN (already ESTABLISHED), -EINVAL (NULL, other states). Any
 * thread, also from a callback. */
CEP_EXPORT int cep_cm_notify_established(struct cep_cm_id *id);
/* Send REJ in any connecting state (and REP_RCVD), with reason, ARI and
 * private data. 0, -EINVAL (NULL, state, reason 0 or > CEP_REJ_REASON_MAX
 * other than CEP_REJ_VENDOR_OPTION_NOT_SUPPORTED), -EMSGSIZE (private
 * data or ARI too long). Before the peer answered our REQ (REQ_SENT, MRA_REQ_RCVD) it
 * can match only a REJ "timeout" carrying our CA GUID in the ARI (we do
 * not know its comm ID yet): that is what is sent there,
 * with @pdata; @reason and @ari are not. After a REP of ours (REP_SENT,
 * MRA_REP_RCVD) the id enters timewait, the QP still bound. */
CEP_EXPORT int cep_cm_reject(struct cep_cm_id *id, unsigned reason,
			     const void *ari, size_t ari_len,
			     const void *pdata, size_t len);
/* Send MRA for the REQ, REP or LAP being processed; a repeat of that
 * message gets it again. One per message, as the kernel's ib_send_cm_mra:
 * a second is -EINVAL - except after the context's automatic MRA
 * (cep_cm_attr.auto_mra), which this one replaces (sent now with
 * @service_timeout and @pdata). 0, -EINVAL (NULL, nothing to MRA in this
 * state, or MRAed already by the application), -EMSGSIZE. */
CEP_EXPORT int cep_cm_mra(struct cep_cm_id *id, uint8_t service_timeout,
			  const void *pdata, size_t len);
/* End a connection, as librdmacm's rdma_disconnect: ESTABLISHED ->
 * DREQ_SENT (DREQ with @pdata, retried); DREQ_RCVD (the peer's DREQ came
 * first, also when it crossed ours) -> TIMEWAIT, answering it with a DREP
 * carrying @pdata; DREQ_SENT or TIMEWAIT: already disconnecting, nothing
 * sent. All of these return 0, so a disconnect racing the peer's needs no
 * special case. -EINVAL while not yet established (use cep_cm_reject) or
 * IDLE; -EMSGSIZE (@len > CEP_DREQ_PRIVATE_DATA_SIZE). Any thread. */
CEP_EXPORT int cep_cm_disconnect(struct cep_cm_id *id, const void *pdata, size_t len);
/* DREQ_RCVD -> TIMEWAIT (DREP). 0, -EINVAL (NULL, no DREQ waiting),
 * -EMSGSIZE. */
CEP_EXPORT int cep_cm_drep(struct cep_cm_id *id, const void *pdata, size_t len);
/* ESTABLISHED, LAP_IDLE: send LAP for @alt -> LAP_SENT. A response
 * timeout of 0 is CEP_CM_DEFAULT_RESPONSE_TIMEOUT. 0, -EINVAL (NULL,
 * state), -EMSGSIZE, -ERANGE (a path field wider than its wire field),
 * -ENOMEM. */
CEP_EXPORT int cep_cm_lap(struct cep_cm_id *id, const struct cep_path *alt,
			  uint8_t remote_cm_response_timeout,
			  const void *pdata, size_t len);
/* LAP_RCVD / MRA_LAP_SENT: send APR with @status -> LAP_IDLE. 0, -EINVAL
 * (NULL, state, @status > 13), -EMSGSIZE. */
CEP_EXPORT int cep_cm_apr(struct cep_cm_id *id, unsigned status,
			  const void *info, size_t info_len,
			  const void *pdata, size_t len);
/* The connection's QP migrated to its alternate path (the verbs event
 * IBV_EVENT_PATH_MIG), as the kernel's ib_cm_notify(IB_EVENT_PATH_MIG):
 * from now the CM's messages to the peer (DREQ, DREP, LAP, ...) go by the
 * alternate path (its LID or GID, SL, hop limit, traffic class and flow
 * label; the same port, P_Key and local GID), and the peer's may still
 * come by the primary it left (its QP migrates on its own time). The
 * alternate is the REQ's or the last LAP answered with success; a second
 * call before another LAP changes nothing. ESTABLISHED with no LAP in
 * flight: 0; -EINVAL (NULL, another state, a LAP or APR pending, or no
 * alternate path: stricter than the kernel's, which would send by an
 * empty one). Any thread, also from a callback. */
CEP_EXPORT int cep_cm_migrate(struct cep_cm_id *id);

struct cep_cm_sidr_param {
	size_t size;
	uint64_t service_id;
	uint16_t pkey;
	uint8_t timeout;                /* 5-bit exponent for each try;
					   0 = CEP_CM_DEFAULT_RESPONSE_TIMEOUT */
	uint8_t max_cm_retries;         /* 0 = CEP_CM_DEFAULT_MAX_RETRIES */
	const void *private_data;
	size_t private_data_len;        /* <= CEP_SIDR_REQ_PRIVATE_DATA_SIZE */
	const struct cep_mad_addr *peer; /* required */
};
/* IDLE -> SIDR_REQ_SENT. 0, -EINVAL (NULL, no peer, state), -EMSGSIZE,
 * -ENOMEM. */
CEP_EXPORT int cep_cm_sidr_req(struct cep_cm_id *id, const struct cep_cm_sidr_param *p);
/* SIDR_REQ_RCVD -> IDLE, sending SIDR_REP. 0, -EINVAL (NULL, state,
 * @status > 5), -EMSGSIZE. */
CEP_EXPORT int cep_cm_sidr_rep(struct cep_cm_id *id, unsigned status, uint32_t qpn,
			       uint32_t qkey, const void *pdata, size_t len);

/* ---- statistics ---------------------------------------------------------- */

struct cep_cm_stats {
	size_t size;                            /* caller sets sizeof */
	uint64_t sent[CEP_MSG_COUNT];           /* by message type */
	uint64_t received[CEP_MSG_COUNT];       /* decoded, by type */
	uint64_t retries;                       /* MADs resent on timeout */
	uint64_t timeouts;                      /* retries exhausted */
	uint64_t duplicates;                    /* recognised duplicates */
	uint64_t drops[CEP_CM_DROP_COUNT];
	uint64_t rej_sent[CEP_REJ_REASON_MAX + 1];
	uint64_t rej_received[CEP_REJ_REASON_MAX + 1];
	uint64_t send_errors;                   /* transport send() failures */
	uint64_t events[CEP_CM_EVENT_COUNT];
	int64_t states[CEP_CM_STATE_COUNT];     /* ids per state now, destroyed
						   ones included until their
						   memory is freed (timewait
						   goes on after DESTROYED) */
	uint64_t ids;                           /* ids created and not yet
						   destroyed: one leaves when
						   its DESTROYED is posted */
	/* Read only when @size covers them (a struct of libcep 0.2 ends
	 * above): */
	uint64_t half_open_expired;             /* passive ids that expired
						   unanswered (the requester
						   gave up, or the limit) */
	uint64_t half_open_limited;             /* of those, ended by
						   cep_cm_attr.half_open_timeout_ms
						   before the requester's own
						   timeouts ran out */
};
/* Sum of per-worker counters (each read atomically). @st->size: at least
 * up to @ids (libcep 0.2's struct); members past @st->size are not
 * written. 0, -EINVAL (NULL, @st->size too small). Any thread. */
CEP_EXPORT int cep_cm_get_stats(struct cep_cm *cm, struct cep_cm_stats *st);

/* Conversion used for every CM timer: 4.096 us * 2^t, in microseconds. */
CEP_EXPORT uint64_t cep_cm_time_us(unsigned t);

#ifdef __cplusplus
}
#endif

#endif /* CEP_CM_H */
