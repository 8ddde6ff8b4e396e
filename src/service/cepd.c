/* SPDX-License-Identifier: MIT */
/*
 * cepd: one CM per node (issue 18). Owns the CM class of its ports (umad,
 * or an in-process fabric with --fabric N), runs libcep's CM engine on
 * each, and serves client processes over a Unix SOCK_SEQPACKET socket in
 * the protocol of proto.h. Uses libcep's public API only.
 *
 * Guarantees:
 * - A client names only its own ids: handles index its own table (with a
 *   generation, so a stale handle misses), never a pointer. Its QPNs are
 *   its own: registered by it (fabric ports: the engine's -EEXIST refuses
 *   another client's), and on RDMA ports owned by its pid (qp_check()).
 * - Every request is checked whole (cepd_req_check) before it acts; a bad
 *   one gets an error reply and changes nothing. A packet that is not a
 *   request at all (short, truncated) ends that client only.
 * - When a client's socket ends (exit, kill -9, a stream gone bad) its ids
 *   are destroyed as the engine destroys them (REJ while connecting, DREQ
 *   when established, listeners gone) and its QPs with cep_cm_qp_destroy,
 *   so its peers learn at once; its table empties as the DESTROYED events
 *   come back.
 * - Events go out from the CM worker that delivers them, never blocking
 *   it: appended to the client's queue, sent by whichever worker finds no
 *   flush running (so events that wait while one is sent go out together,
 *   one EVENTS message); a client that does not read has its queue grow to
 *   CLIENT_QUEUE_MAX and is then dropped.
 * - SIGTERM/SIGINT: the socket closes, every client is disconnected (their
 *   calls then fail with -ECONNRESET), ids and ports are torn down.
 *
 * Threads: the main thread accepts; one thread per client reads its
 * requests and answers them (so a slow client slows itself only); the CM
 * workers run sid_handler. Locks: svc.lk (the client list), client.lk (its
 * table, QPNs and event queue). No lock is held across a cep_cm_* call
 * (cep_cm_destroy_id waits for a running callback, which takes client.lk).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cep/cm.h>
#include <cep/fabric.h>
#ifdef CEPD_HAVE_UMAD
#include <cep/umad.h>
#include <cep/verbs.h>
#include <infiniband/verbs.h>
#endif
#ifdef CEPD_HAVE_QP_OWNER
#include "service/qp_owner.h"
#endif
#ifdef CEPD_HAVE_SD_LISTEN
#include "service/sd_listen.h"
#endif
#include "service/proto.h"

#define MAX_PORTS 64
#define CLIENT_QUEUE_MAX 1024  /* EVENTS messages queued for one client */
#define HANDLE_IDX_BITS 20
#define HANDLE_IDX_MASK ((1u << HANDLE_IDX_BITS) - 1)

struct port {
	char dev[CEPD_DEVICE_MAX];     /* "" on the fabric */
	uint8_t port_num;
	unsigned index;
	struct cep_transport *tp;
	struct cep_cm *cm;
	struct cep_port_info info;
};

struct sid;

/* One EVENTS message being filled or waiting to go out. */
struct chunk {
	struct chunk *next;
	size_t len;
	uint32_t count;
	_Alignas(8) uint8_t buf[CEPD_MSG_MAX]; /* holds proto.h structs */
};

struct client {
	int fd;
	pid_t pid;
	uid_t uid;
	unsigned serial;
	struct port *port;             /* NULL: a statistics reader */
	pthread_mutex_t lk;
	struct sid **slot;             /* lk: [cap], index = handle & mask */
	uint16_t *gen;                 /* lk: [cap] */
	uint32_t cap, nids, free_hint; /* lk */
	uint32_t *qpn;                 /* lk: registered by this client */
	uint32_t nqpn, qpcap;          /* lk */
	struct chunk *qhead, *qtail;   /* lk: events to send */
	uint32_t queued;               /* lk: chunks */
	int flushing;                  /* lk: a thread is sending the queue */
	int blocked;                   /* lk: the socket was full (EAGAIN) */
	int dead;                      /* lk: no event goes out, no new id */
	_Atomic int refs;              /* thread + each sid */
	/* statistics: relaxed counters, no order with anything */
	_Atomic uint64_t requests, bad, events, events_dropped;
	struct client *next;           /* svc.lk */
};

struct sid {
	struct client *c;
	struct cep_cm_id *id;
	uint32_t handle;               /* 0: an orphan (its client is gone) */
	int gone;                      /* c->lk: destroy asked; names nothing */
	int auto_rtu;                  /* client thread, before CONNECT: its
					  REP_RECEIVED is followed at once by
					  ESTABLISHED (sent together) */
};

static struct {
	struct port port[MAX_PORTS];
	unsigned nports;
	struct cep_fabric *fab;
	int lfd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int own_path;                  /* we created (and so unlink) it */
	pthread_mutex_t lk;
	struct client *clients;        /* lk */
	unsigned nclients, serial;     /* lk */
	_Atomic uint64_t clients_total, clients_dropped, bad_messages;
	_Atomic unsigned live_clients; /* client structs not yet freed */
	int check;                     /* --check: the tables at exit */
	volatile sig_atomic_t stop;
	int sigpipe[2];
	unsigned workers;
	uint32_t max_ids;              /* per client (--max-ids) */
	int verbose;
} svc = { .max_ids = 65536, .lk = PTHREAD_MUTEX_INITIALIZER, .lfd = -1, .sigpipe = { -1, -1 } };

static void print_stats(FILE *f);
static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("cepd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---- clients: references, handles ------------------------------------- */

static void client_put(struct client *c)
{
	struct chunk *k;

	/* acq_rel: every use of c by a dropper happens before the free */
	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
		return;
	while ((k = c->qhead) != NULL) {
		c->qhead = k->next;
		free(k);
	}
	/* release: this client's last use of the ports happens before a
	 * shutdown that reads 0 destroys them (its acquire load) */
	atomic_fetch_sub_explicit(&svc.live_clients, 1, memory_order_release);
	close(c->fd);
	pthread_mutex_destroy(&c->lk);
	free(c->slot);
	free(c->gen);
	free(c->qpn);
	free(c);
}

/* c->lk held. Insert @s: 0 and s->handle, or -ENOMEM / -EMFILE (the
 * client has svc.max_ids ids: a flood of ids or of requests to its
 * listeners stops at it and costs the others nothing). */
static int handle_add(struct client *c, struct sid *s)
{
	uint32_t i;

	if (c->nids >= svc.max_ids)
		return -EMFILE;
	if (c->nids == c->cap) {
		uint32_t ncap = c->cap ? c->cap * 2 : 64;
		struct sid **ns;
		uint16_t *ng;

		if (ncap > HANDLE_IDX_MASK + 1)
			return -EMFILE;
		ns = realloc(c->slot, ncap * sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		c->slot = ns;
		ng = realloc(c->gen, ncap * sizeof(*ng));
		if (!ng)
			return -ENOMEM;
		c->gen = ng;
		for (i = c->cap; i < ncap; i++) {
			ns[i] = NULL;
			ng[i] = 1;
		}
		c->free_hint = c->cap;
		c->cap = ncap;
	}
	for (i = c->free_hint; c->slot[i]; i = (i + 1) % c->cap)
		;
	c->slot[i] = s;
	c->free_hint = (i + 1) % c->cap;
	c->nids++;
	s->handle = ((uint32_t)c->gen[i] << HANDLE_IDX_BITS) | i;
	return 0;
}

/* c->lk held. */
static void handle_del(struct client *c, struct sid *s)
{
	uint32_t i = s->handle & HANDLE_IDX_MASK;

	if (!s->handle || i >= c->cap || c->slot[i] != s)
		return;
	c->slot[i] = NULL;
	/* a stale handle of this slot no longer matches; never generation 0,
	 * so no handle is 0 */
	if (++c->gen[i] >= (1u << (32 - HANDLE_IDX_BITS)))
		c->gen[i] = 1;
	c->nids--;
}

/* c->lk held. The live sid @h names, or NULL. */
static struct sid *handle_get(struct client *c, uint32_t h)
{
	uint32_t i = h & HANDLE_IDX_MASK;
	struct sid *s;

	if (i >= c->cap || c->gen[i] != (h >> HANDLE_IDX_BITS))
		return NULL;
	s = c->slot[i];
	return s && !s->gone ? s : NULL;
}

/* ---- events out ---------------------------------------------------------- */

/* c->lk held, c->flushing ours. Send queued chunks; with the lock dropped
 * around each send. A full socket leaves the rest queued (c->blocked) for
 * the client's thread to send when it drains. */
static void flush_locked(struct client *c)
{
	struct chunk *k;

	while ((k = c->qhead) != NULL) {
		ssize_t n;

		c->qhead = k->next;
		if (!c->qhead)
			c->qtail = NULL;
		c->queued--;
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
			c->queued++;
			c->blocked = 1;
			return;
		}
		if (n < 0) /* the client is going: its thread sees it */
			atomic_fetch_add_explicit(&c->events_dropped, k->count,
						  memory_order_relaxed);
		free(k);
	}
}

/* c->lk held. Append one event record; start a new chunk when the last
 * is full. -ENOMEM, or -ENOBUFS when the client's queue is at its limit
 * (the caller drops the client). */
static int queue_event(struct client *c, const struct cepd_ev *e, const struct cep_msg *msg)
{
	size_t rec = sizeof(*e) + (e->has_msg ? sizeof(*msg) : 0);
	struct chunk *k = c->qtail;

	rec = (rec + 7) & ~(size_t)7;
	if (!k || k->len + rec > CEPD_MSG_MAX) {
		if (c->queued >= CLIENT_QUEUE_MAX)
			return -ENOBUFS;
		k = malloc(sizeof(*k));
		if (!k)
			return -ENOMEM;
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
		c->queued++;
	}
	memset(k->buf + k->len, 0, rec);
	memcpy(k->buf + k->len, e, sizeof(*e));
	((struct cepd_ev *)(k->buf + k->len))->len = (uint32_t)rec;
	if (e->has_msg)
		memcpy(k->buf + k->len + sizeof(*e), msg, sizeof(*msg));
	k->len += rec;
	k->count++;
	return 0;
}

/* c->lk held. The client is broken or must go: its reader wakes on the
 * shut socket and cleans up. */
static void client_kill_locked(struct client *c, const char *why)
{
	if (!c->dead && svc.verbose)
		logmsg("client %u (pid %d): %s", c->serial, (int)c->pid, why);
	c->dead = 1;
	shutdown(c->fd, SHUT_RDWR);
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
	if (c->flushing || c->blocked || hold)
		return;
	c->flushing = 1;
	flush_locked(c);
	c->flushing = 0;
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
static int sid_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct sid *s = ev->context;
	struct client *c = s->c;
	struct cepd_ev r;
	int destroy = 0;

	fill_event(&r, ev, id);
	if (ev->type == CEP_CM_EV_REQ_RECEIVED || ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED) {
		struct sid *ls = s;
		struct sid *ns = calloc(1, sizeof(*ns));

		if (!ns)
			return 1; /* the engine rejects; its DESTROYED names ls: see below */
		ns->c = c;
		ns->id = id;
		/* relaxed: the caller holds a reference (the listener's sid) */
		atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
		cep_cm_id_set_context(id, ns);
		pthread_mutex_lock(&c->lk);
		if (c->dead || ls->gone || handle_add(c, ns)) {
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
		if (s->handle) {
			r.handle = s->handle;
			post_event(c, &r, &ev->msg, 0);
			handle_del(c, s);
		}
		pthread_mutex_unlock(&c->lk);
		free(s);
		client_put(c);
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

/* ---- requests ------------------------------------------------------------ */

static int reply(struct client *c, uint64_t seq, int ret, const void *payload, size_t len)
{
	_Alignas(8) uint8_t buf[sizeof(struct cepd_rep) + 4096];
	struct cepd_rep *r = (struct cepd_rep *)buf;
	ssize_t n;

	if (len > sizeof(buf) - sizeof(*r))
		len = sizeof(buf) - sizeof(*r);
	memset(r, 0, sizeof(*r));
	r->h.op = CEPD_REPLY;
	r->h.seq = seq;
	r->h.len = (uint32_t)(sizeof(*r) + len);
	r->ret = ret;
	if (len)
		memcpy(buf + sizeof(*r), payload, len);
	do
		n = send(c->fd, buf, r->h.len, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : 0;
}

/* c->lk held. */
static int qp_mine(struct client *c, uint32_t qpn)
{
	for (uint32_t i = 0; i < c->nqpn; i++)
		if (c->qpn[i] == qpn)
			return 1;
	return 0;
}

/* Whether @c may register @qpn on its port: on an RDMA port, the kernel's
 * resource tracking must name the client's pid as the QP's owner; on the
 * fabric a QPN is the first registrant's (the engine's -EEXIST). 0 or
 * -EPERM (owned by another process or the kernel) / -ENOENT (no such QP)
 * / the check's error. Blocking (netlink): the client's thread only. */
static int qp_check(struct client *c, uint32_t qpn)
{
	if (!c->port->dev[0])
		return 0;
#ifdef CEPD_HAVE_QP_OWNER
	{
		pid_t owner;
		int ret = cepd_qp_owner(c->port->dev, qpn, &owner);

		if (ret)
			return ret;
		return owner == c->pid ? 0 : -EPERM;
	}
#else
	/* built without the netlink check: a QPN is the first registrant's */
	return 0;
#endif
}

static int do_qp_register(struct client *c, uint32_t qpn)
{
	uint32_t *nq;
	int ret = qp_check(c, qpn);

	if (ret)
		return ret;
	pthread_mutex_lock(&c->lk);
	if (c->nqpn >= svc.max_ids) { /* as many QPs as ids at most */
		pthread_mutex_unlock(&c->lk);
		return -EMFILE;
	}
	if (c->nqpn == c->qpcap) {
		uint32_t ncap = c->qpcap ? c->qpcap * 2 : 64;

		nq = realloc(c->qpn, ncap * sizeof(*nq));
		if (!nq) {
			pthread_mutex_unlock(&c->lk);
			return -ENOMEM;
		}
		c->qpn = nq;
		c->qpcap = ncap;
	}
	pthread_mutex_unlock(&c->lk);
	ret = cep_cm_qp_register(c->port->cm, qpn);
	if (ret)
		return ret;
	pthread_mutex_lock(&c->lk);
	c->qpn[c->nqpn++] = qpn;
	pthread_mutex_unlock(&c->lk);
	return 0;
}

static int do_qp_destroy(struct client *c, uint32_t qpn)
{
	uint32_t i;

	pthread_mutex_lock(&c->lk);
	for (i = 0; i < c->nqpn && c->qpn[i] != qpn; i++)
		;
	if (i == c->nqpn) {
		pthread_mutex_unlock(&c->lk);
		return -ENOENT; /* not registered, or another client's */
	}
	c->qpn[i] = c->qpn[--c->nqpn];
	pthread_mutex_unlock(&c->lk);
	return cep_cm_qp_destroy(c->port->cm, qpn);
}

static int do_create_id(struct client *c, struct cepd_id_rep *out)
{
	struct sid *s = calloc(1, sizeof(*s));
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = sid_handler, .context = s };
	int ret;

	if (!s)
		return -ENOMEM;
	s->c = c;
	pthread_mutex_lock(&c->lk);
	ret = handle_add(c, s);
	s->gone = 1; /* named by nothing until it has its id */
	pthread_mutex_unlock(&c->lk);
	if (ret) {
		free(s);
		return ret;
	}
	/* relaxed: the client's thread holds its own reference */
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	ret = cep_cm_create_id(c->port->cm, &ia, &s->id);
	pthread_mutex_lock(&c->lk);
	if (ret)
		handle_del(c, s);
	else
		s->gone = 0;
	pthread_mutex_unlock(&c->lk);
	if (ret) {
		free(s);
		client_put(c);
		return ret;
	}
	out->handle = s->handle;
	out->local_comm_id = cep_cm_id_local_comm_id(s->id);
	return 0;
}

static void handle_request(struct client *c, const uint8_t *buf, size_t len)
{
	const struct cepd_req *r = (const struct cepd_req *)buf;
	const uint8_t *param = buf + sizeof(*r);
	const uint8_t *pd, *aux;
	struct sid *s = NULL;
	struct cep_cm_id *id = NULL;
	union {
#ifdef CEPD_HAVE_UMAD
		struct {
			struct cepd_qp_attr_rep h;
			struct ibv_qp_attr attr;
		} qa;
#endif
		struct cepd_id_rep idr;
		struct cepd_query_rep q;
		struct cep_cm_stats st;
	} out;
	struct cepd_id_rep created;
	size_t outlen = 0;
	int create = 0;
	int ret = cepd_req_check(r, len);

	atomic_fetch_add_explicit(&c->requests, 1, memory_order_relaxed);
	if (ret)
		goto done;
	pd = param + cepd_param_size(r->h.op);
	aux = pd + r->pd_len;
	if (!c->port && r->h.op != CEPD_SERVICE_STATS) {
		ret = -EPERM;
		goto done;
	}
	if (r->flags & CEPD_F_CREATE) {
		/* the id's first request: create it, then act on it */
		ret = do_create_id(c, &created);
		if (ret)
			goto done;
		create = 1;
	}
	switch (r->h.op) {
	case CEPD_CREATE_ID: case CEPD_QP_REGISTER: case CEPD_QP_DESTROY:
	case CEPD_CM_STATS: case CEPD_QUIESCE: case CEPD_SERVICE_STATS: case CEPD_QP_EVENT:
		break;
	default:
		pthread_mutex_lock(&c->lk);
		s = handle_get(c, create ? created.handle : r->handle);
		if (s && r->h.op == CEPD_DESTROY_ID)
			s->gone = 1; /* from here the client names it no more */
		if (!s && r->h.op == CEPD_DESTROY_ID && r->handle) {
			/* a handle being destroyed says -EALREADY, as the
			 * engine's second destroy does */
			uint32_t i = r->handle & HANDLE_IDX_MASK;

			if (i < c->cap && c->slot[i] && c->gen[i] == (r->handle >> HANDLE_IDX_BITS))
				ret = -EALREADY;
		}
		pthread_mutex_unlock(&c->lk);
		if (!s) {
			if (!ret)
				ret = -EINVAL; /* not one of this client's ids */
			goto done;
		}
		id = s->id;
	}
	switch (r->h.op) {
	case CEPD_CREATE_ID:
		ret = do_create_id(c, &out.idr);
		if (!ret)
			outlen = sizeof(out.idr);
		break;
	case CEPD_DESTROY_ID:
		ret = cep_cm_destroy_id(id);
		break;
	case CEPD_LISTEN:
		ret = cep_cm_listen_backlog(id, r->x, r->y, r->a);
		break;
	case CEPD_CONNECT: {
		struct cepd_conn w;
		struct cep_cm_conn_param p;

		memcpy(&w, param, sizeof(w));
		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		pthread_mutex_lock(&c->lk);
		ret = qp_mine(c, w.qpn) ? 0 : -ENOENT;
		pthread_mutex_unlock(&c->lk);
		if (ret)
			break;
		p.service_id = w.service_id;
		p.primary = w.primary;
		p.alternate = w.alternate;
		p.qpn = w.qpn;
		p.starting_psn = w.starting_psn;
		p.qkey = w.qkey;
		p.pkey = w.pkey;
		p.responder_resources = w.responder_resources;
		p.initiator_depth = w.initiator_depth;
		p.remote_cm_response_timeout = w.remote_cm_response_timeout;
		p.local_cm_response_timeout = w.local_cm_response_timeout;
		p.max_cm_retries = w.max_cm_retries;
		p.packet_life_time = w.packet_life_time;
		p.retry_count = w.retry_count;
		p.rnr_retry_count = w.rnr_retry_count;
		p.path_mtu = w.path_mtu;
		p.transport_service_type = w.transport_service_type;
		p.srq = w.srq;
		p.manual_rtu = w.manual_rtu;
		p.private_data = r->pd_len ? pd : NULL;
		p.private_data_len = r->pd_len;
		p.peer = w.has_peer ? &w.peer : NULL;
		p.flow_control = w.flow_control;
		p.manual_drep = w.manual_drep;
		p.ece_vendor_id = w.ece_vendor_id;
		p.ece_options = w.ece_options;
		/* before the REP can come: the worker reads it after connect */
		s->auto_rtu = !w.manual_rtu;
		ret = cep_cm_connect(id, &p);
		break;
	}
	case CEPD_ACCEPT: {
		struct cepd_accept w;
		struct cep_cm_accept_param p;

		memcpy(&w, param, sizeof(w));
		pthread_mutex_lock(&c->lk);
		ret = qp_mine(c, w.qpn) ? 0 : -ENOENT;
		pthread_mutex_unlock(&c->lk);
		if (ret)
			break;
		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		p.qpn = w.qpn;
		p.starting_psn = w.starting_psn;
		p.qkey = w.qkey;
		p.responder_resources = w.responder_resources;
		p.initiator_depth = w.initiator_depth;
		p.target_ack_delay = w.target_ack_delay;
		p.failover_accepted = w.failover_accepted;
		p.rnr_retry_count = w.rnr_retry_count;
		p.srq = w.srq;
		p.manual_drep = w.manual_drep;
		p.private_data = r->pd_len ? pd : NULL;
		p.private_data_len = r->pd_len;
		p.flow_control = w.flow_control;
		p.ece_vendor_id = w.ece_vendor_id;
		p.ece_options = w.ece_options;
		ret = cep_cm_accept(id, &p);
		break;
	}
	case CEPD_RTU:
		ret = cep_cm_rtu(id, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_NOTIFY_EST:
		ret = cep_cm_notify_established(id);
		break;
	case CEPD_REJECT:
		ret = cep_cm_reject(id, r->a, r->aux_len ? aux : NULL, r->aux_len,
				    r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_MRA:
		ret = r->a > 31 ? -EINVAL :
		      cep_cm_mra(id, (uint8_t)r->a, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_DISCONNECT:
		ret = cep_cm_disconnect(id, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_DREP:
		ret = cep_cm_drep(id, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_LAP: {
		struct cep_path alt;

		memcpy(&alt, param, sizeof(alt));
		ret = r->a > 31 ? -EINVAL :
		      cep_cm_lap(id, &alt, (uint8_t)r->a, r->pd_len ? pd : NULL, r->pd_len);
		break;
	}
	case CEPD_APR:
		ret = cep_cm_apr(id, r->a, r->aux_len ? aux : NULL, r->aux_len,
				 r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_SIDR_REQ: {
		struct cepd_sidr w;
		struct cep_cm_sidr_param p;

		memcpy(&w, param, sizeof(w));
		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		p.service_id = w.service_id;
		p.pkey = w.pkey;
		p.timeout = w.timeout;
		p.max_cm_retries = w.max_cm_retries;
		p.private_data = r->pd_len ? pd : NULL;
		p.private_data_len = r->pd_len;
		p.peer = &w.peer;
		ret = cep_cm_sidr_req(id, &p);
		break;
	}
	case CEPD_SIDR_REP:
		ret = cep_cm_sidr_rep(id, r->a, r->b, r->c, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_QP_REGISTER:
		ret = r->a > 0xffffff ? -EINVAL : do_qp_register(c, r->a);
		break;
	case CEPD_QP_DESTROY:
		ret = do_qp_destroy(c, r->a);
		break;
	case CEPD_ID_QUERY:
		memset(&out.q, 0, sizeof(out.q));
		out.q.state = cep_cm_id_state(id);
		out.q.lap_state = cep_cm_id_lap_state(id);
		out.q.remote_comm_id = cep_cm_id_remote_comm_id(id);
		outlen = sizeof(out.q);
		ret = 0;
		break;
	case CEPD_CM_STATS:
		memset(&out.st, 0, sizeof(out.st));
		out.st.size = sizeof(out.st);
		ret = cep_cm_get_stats(c->port->cm, &out.st);
		if (!ret)
			outlen = sizeof(out.st);
		break;
	case CEPD_QUIESCE:
		ret = cep_cm_quiesce(c->port->cm, r->a);
		break;
#ifdef CEPD_HAVE_UMAD
	case CEPD_INIT_QP_ATTR: {
		int mask = 0;

		memset(&out.qa, 0, sizeof(out.qa));
		ret = cep_cm_init_qp_attr(id, (enum ibv_qp_state)r->a, &out.qa.attr, &mask);
		if (!ret) {
			out.qa.h.mask = mask;
			out.qa.h.attr_size = sizeof(out.qa.attr);
			/* the reply's payload: header then attr, packed */
			memmove((uint8_t *)&out + sizeof(out.qa.h), &out.qa.attr, sizeof(out.qa.attr));
			outlen = sizeof(out.qa.h) + sizeof(out.qa.attr);
		}
		break;
	}
	case CEPD_QP_EVENT: {
		struct ibv_qp qp;
		struct ibv_async_event ev;

		pthread_mutex_lock(&c->lk);
		ret = qp_mine(c, r->a) ? 0 : -ENOENT;
		pthread_mutex_unlock(&c->lk);
		if (ret)
			break;
		memset(&qp, 0, sizeof(qp));
		memset(&ev, 0, sizeof(ev));
		qp.qp_num = r->a;
		ev.element.qp = &qp;
		ev.event_type = (enum ibv_event_type)r->b;
		ret = cep_cm_qp_event(c->port->cm, &ev);
		break;
	}
#else
	case CEPD_INIT_QP_ATTR: case CEPD_QP_EVENT:
		ret = -EOPNOTSUPP;
		break;
#endif
	case CEPD_SERVICE_STATS: {
		char *text = NULL;
		size_t tlen = 0;
		FILE *f = open_memstream(&text, &tlen);

		if (!f) {
			ret = -ENOMEM;
			break;
		}
		print_stats(f);
		fclose(f);
		/* any length up to a message (many clients: the reply buffer
		 * of reply() is too small) */
		{
			size_t n = tlen < CEPD_MSG_MAX - sizeof(struct cepd_rep)
				   ? tlen : CEPD_MSG_MAX - sizeof(struct cepd_rep);
			struct cepd_rep *m = calloc(1, sizeof(*m) + n);

			if (m) {
				m->h.op = CEPD_REPLY;
				m->h.seq = r->h.seq;
				m->h.len = (uint32_t)(sizeof(*m) + n);
				memcpy(m + 1, text, n);
				(void)send(c->fd, m, m->h.len, MSG_NOSIGNAL);
				free(m);
			} else {
				(void)reply(c, r->h.seq, -ENOMEM, NULL, 0);
			}
		}
		free(text);
		return;
	}
	}
done:
	if (create) { /* the reply names the id it made, whatever the op said */
		memcpy(&out, &created, sizeof(created));
		outlen = sizeof(created);
	}
	if (ret == -EBADMSG || ret == -EOPNOTSUPP || ret == -EMSGSIZE) {
		atomic_fetch_add_explicit(&c->bad, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&svc.bad_messages, 1, memory_order_relaxed);
	}
	(void)reply(c, len >= sizeof(struct cepd_hdr) ? r->h.seq : 0, ret, &out, outlen);
}

/* ---- a client's life ----------------------------------------------------- */

static int do_hello(struct client *c, const uint8_t *buf, size_t len)
{
	const struct cepd_hello *h = (const struct cepd_hello *)buf;
	struct cepd_hello_rep rep;
	struct port *p = NULL;

	if (len != sizeof(*h) || h->h.op != CEPD_HELLO || h->h.len != len ||
	    h->magic != CEPD_MAGIC)
		return -EPROTO;
	if (h->version != CEPD_VERSION || h->sizes[0] != sizeof(struct cep_msg) ||
	    h->sizes[1] != sizeof(struct cep_path) || h->sizes[2] != sizeof(struct cep_mad_addr) ||
	    h->sizes[3] != sizeof(struct cep_cm_stats)) {
		(void)reply(c, h->h.seq, -EPROTONOSUPPORT, NULL, 0);
		return -EPROTONOSUPPORT;
	}
	memset(&rep, 0, sizeof(rep));
	rep.version = CEPD_VERSION;
	if (!(h->flags & CEPD_HELLO_STATS)) {
		if (memchr(h->device, 0, sizeof(h->device)) == NULL) {
			(void)reply(c, h->h.seq, -EINVAL, NULL, 0);
			return -EINVAL;
		}
		for (unsigned i = 0; i < svc.nports && !p; i++)
			if (h->device[0] ? !strcmp(svc.port[i].dev, h->device) &&
					   svc.port[i].port_num == h->port_num
					 : i == h->port_num)
				p = &svc.port[i];
		if (!p) {
			(void)reply(c, h->h.seq, -ENODEV, NULL, 0);
			return -ENODEV;
		}
		rep.workers = cep_cm_workers(p->cm);
		rep.ca_guid = cep_cm_ca_guid(p->cm);
		rep.port = p->info;
	}
	c->port = p;
	return reply(c, h->h.seq, 0, &rep, sizeof(rep));
}

/* The client's socket ended: destroy what it left, as the kernel's ucma
 * does when its file closes. */
static void client_cleanup(struct client *c)
{
	struct sid **ids = NULL;
	uint32_t *qpns = NULL;
	uint32_t n = 0, nq = 0, i;
	int lost;

	pthread_mutex_lock(&c->lk);
	c->dead = 1; /* no event out, a REQ to its listeners is refused */
	if (c->nids)
		ids = malloc(c->nids * sizeof(*ids));
	for (i = 0; ids && i < c->cap; i++)
		if (c->slot[i] && !c->slot[i]->gone) {
			c->slot[i]->gone = 1;
			ids[n++] = c->slot[i];
		}
	qpns = c->qpn;
	nq = c->nqpn;
	c->qpn = NULL;
	c->nqpn = c->qpcap = 0;
	lost = c->nids && !ids;
	pthread_mutex_unlock(&c->lk);
	if (lost)
		logmsg("client %u: out of memory: its ids stay until shutdown", c->serial);
	/* a sid stays alive until its DESTROYED, which only this destroy causes */
	for (i = 0; i < n; i++)
		(void)cep_cm_destroy_id(ids[i]->id);
	for (i = 0; i < nq; i++)
		(void)cep_cm_qp_destroy(c->port->cm, qpns[i]);
	free(ids);
	free(qpns);
}

static void *client_thread(void *arg)
{
	struct client *c = arg;
	uint8_t *buf = malloc(CEPD_MSG_MAX);
	int hello = 0;

	while (buf) { /* until the socket ends (shutdown_all shuts it) */
		ssize_t n;

		n = recv(c->fd, buf, CEPD_MSG_MAX, MSG_TRUNC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* the receive timeout: send events a full socket held
			 * (or a held REP_RECEIVED whose ESTABLISHED never came) */
			pthread_mutex_lock(&c->lk);
			if ((c->blocked || c->qhead) && !c->flushing) {
				c->blocked = 0;
				c->flushing = 1;
				flush_locked(c);
				c->flushing = 0;
			}
			pthread_mutex_unlock(&c->lk);
			continue;
		}
		if (n <= 0)
			break;
		if ((size_t)n > CEPD_MSG_MAX || (size_t)n < sizeof(struct cepd_hdr)) {
			atomic_fetch_add_explicit(&svc.bad_messages, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&c->bad, 1, memory_order_relaxed);
			if ((size_t)n > CEPD_MSG_MAX) { /* truncated: answer its seq */
				(void)reply(c, ((struct cepd_hdr *)buf)->seq, -EMSGSIZE, NULL, 0);
				continue;
			}
			break; /* not even a header: the stream is not ours */
		}
		if (!hello) {
			if (do_hello(c, buf, (size_t)n))
				break;
			hello = 1;
			continue;
		}
		if (((struct cepd_hdr *)buf)->op == CEPD_HELLO) {
			(void)reply(c, ((struct cepd_hdr *)buf)->seq, -EISCONN, NULL, 0);
			continue;
		}
		handle_request(c, buf, (size_t)n);
	}
	free(buf);
	if (c->port)
		client_cleanup(c);
	else {
		pthread_mutex_lock(&c->lk);
		c->dead = 1;
		pthread_mutex_unlock(&c->lk);
	}
	pthread_mutex_lock(&svc.lk);
	for (struct client **pp = &svc.clients; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	svc.nclients--;
	pthread_mutex_unlock(&svc.lk);
	if (svc.verbose)
		logmsg("client %u (pid %d) gone", c->serial, (int)c->pid);
	client_put(c);
	return NULL;
}

static void accept_client(void)
{
	struct client *c;
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	struct timeval tv = { .tv_sec = 0, .tv_usec = 100000 };
	int sndbuf = 4 << 20;
	pthread_attr_t ta;
	pthread_t t;
	int fd = accept4(svc.lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl)) {
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	c->fd = fd;
	c->pid = cr.pid;
	c->uid = cr.uid;
	pthread_mutex_init(&c->lk, NULL);
	atomic_init(&c->refs, 1);
	atomic_fetch_add_explicit(&svc.live_clients, 1, memory_order_relaxed);
	pthread_mutex_lock(&svc.lk);
	c->serial = ++svc.serial;
	c->next = svc.clients;
	svc.clients = c;
	svc.nclients++;
	pthread_mutex_unlock(&svc.lk);
	atomic_fetch_add_explicit(&svc.clients_total, 1, memory_order_relaxed);
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &ta, client_thread, c)) {
		pthread_mutex_lock(&svc.lk);
		for (struct client **pp = &svc.clients; *pp; pp = &(*pp)->next)
			if (*pp == c) {
				*pp = c->next;
				break;
			}
		svc.nclients--;
		pthread_mutex_unlock(&svc.lk);
		logmsg("no thread for a client: dropped");
		client_put(c);
	}
	pthread_attr_destroy(&ta);
}

/* ---- statistics ------------------------------------------------------------ */

static void print_stats(FILE *f)
{
	fprintf(f, "ports %u\n", svc.nports);
	for (unsigned i = 0; i < svc.nports; i++) {
		struct port *p = &svc.port[i];
		struct cep_cm_stats st = { .size = sizeof(st) };
		struct cep_table_stats ts;
		uint64_t sent = 0, rcvd = 0, drops = 0;

		if (cep_cm_get_stats(p->cm, &st) == 0) {
			for (unsigned m = 0; m < CEP_MSG_COUNT; m++) {
				sent += st.sent[m];
				rcvd += st.received[m];
			}
			for (unsigned d = 0; d < CEP_CM_DROP_COUNT; d++)
				drops += st.drops[d];
		}
		/* the engine's table: CEPs alive (timewait included) and QPNs
		 * registered, so a dead client's leftovers show */
		cep_table_stats(cep_cm_table(p->cm), &ts);
		fprintf(f, "port %u %s:%u guid %016llx mads_sent %llu mads_received %llu "
			"drops %llu retries %llu ids %llu ceps %llu qps %llu\n", i,
			p->dev[0] ? p->dev : "fabric",
			p->port_num, (unsigned long long)cep_cm_ca_guid(p->cm),
			(unsigned long long)sent, (unsigned long long)rcvd,
			(unsigned long long)drops, (unsigned long long)st.retries,
			(unsigned long long)st.ids, (unsigned long long)ts.live,
			(unsigned long long)ts.qps);
	}
	pthread_mutex_lock(&svc.lk);
	{
		unsigned n = 0;

		for (struct client *c = svc.clients; c; c = c->next)
			n += c->port != NULL;
		fprintf(f, "clients %u total %llu bad_messages %llu\n", n,
			(unsigned long long)svc.clients_total,
			(unsigned long long)svc.bad_messages);
	}
	for (struct client *c = svc.clients; c; c = c->next) {
		uint32_t nids, nq;

		if (!c->port) /* statistics readers: not clients of a port */
			continue;
		pthread_mutex_lock(&c->lk);
		nids = c->nids;
		nq = c->nqpn;
		pthread_mutex_unlock(&c->lk);
		fprintf(f, "client %u pid %d uid %u port %d ids %u qps %u requests %llu "
			"bad %llu events %llu events_dropped %llu\n", c->serial, (int)c->pid,
			(unsigned)c->uid, c->port ? (int)c->port->index : -1, nids, nq,
			(unsigned long long)c->requests, (unsigned long long)c->bad,
			(unsigned long long)c->events, (unsigned long long)c->events_dropped);
	}
	pthread_mutex_unlock(&svc.lk);
}

/* `cepd --stats`: ask a running service. */
static int stats_command(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct cepd_hello h;
	struct cepd_req r;
	uint8_t *buf = malloc(CEPD_MSG_MAX);
	ssize_t n;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0 || !buf || strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "cepd: --stats: %s\n", strerror(fd < 0 ? errno : ENAMETOOLONG));
		return 1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr, "cepd: --stats: %s: %s\n", path, strerror(errno));
		return 1;
	}
	cepd_hello_init(&h, CEPD_HELLO_STATS, 0);
	memset(&r, 0, sizeof(r));
	r.h.op = CEPD_SERVICE_STATS;
	r.h.len = sizeof(r);
	r.h.seq = 2;
	if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) < 0 ||
	    (n = recv(fd, buf, CEPD_MSG_MAX, 0)) < (ssize_t)sizeof(struct cepd_rep) ||
	    ((struct cepd_rep *)buf)->ret != 0 ||
	    send(fd, &r, sizeof(r), MSG_NOSIGNAL) < 0 ||
	    (n = recv(fd, buf, CEPD_MSG_MAX, 0)) < (ssize_t)sizeof(struct cepd_rep) ||
	    ((struct cepd_rep *)buf)->ret != 0) {
		fprintf(stderr, "cepd: --stats: no answer from %s\n", path);
		return 1;
	}
	fwrite(buf + sizeof(struct cepd_rep), 1, (size_t)n - sizeof(struct cepd_rep), stdout);
	free(buf);
	close(fd);
	return 0;
}

/* ---- ports ------------------------------------------------------------------ */

/* The next slot's port, its transport just opened: start its CM and count
 * it, or destroy the transport and leave the slot free. */
static int port_start(struct port *p)
{
	/* As the kernel's CM serves rdma_cm (and as the librdmacm drop-in's
	 * in-process CM does): a request the application has not answered in
	 * half the peer's timeout, or that arrives while its listener is
	 * behind, gets an MRA with service timeout 24, so the requester waits
	 * instead of retrying into a busy node. */
	struct cep_cm_attr ca = { .size = sizeof(ca), .transport = p->tp, .workers = svc.workers,
				  .mra_service_timeout = 24, .auto_mra = 1 };
	int ret = p->tp->ops->query_port(p->tp, &p->info);

	p->index = svc.nports;
	if (!ret)
		ret = cep_cm_create(&ca, &p->cm);
	if (ret) {
		p->tp->ops->destroy(p->tp);
		return ret;
	}
	svc.nports++;
	return 0;
}

static int fabric_ports(unsigned n)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	int ret = cep_fabric_create(&fa, &svc.fab);

	if (ret)
		return ret;
	for (unsigned i = 0; i < n; i++) {
		struct cep_fabric_port_attr pa = {
			.size = sizeof(pa), .ca_guid = 0x0002c90300a00000ull + i,
			.lid = (uint16_t)(i + 1), .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB,
		};
		struct port *p = &svc.port[svc.nports];

		ret = cep_fabric_port_create(svc.fab, &pa, &p->tp);
		if (ret)
			return ret;
		p->port_num = 1;
		ret = port_start(p);
		if (ret)
			return ret;
	}
	return 0;
}

#ifdef CEPD_HAVE_UMAD
static int umad_port(const char *dev, unsigned num)
{
	struct cep_umad_attr ua = { .size = sizeof(ua), .dev_name = dev,
				    .port_num = (uint8_t)num, .gid_index = CEP_UMAD_GID_AUTO };
	struct port *p = &svc.port[svc.nports];
	int ret;

	if (svc.nports == MAX_PORTS || strlen(dev) >= sizeof(p->dev) || num < 1 || num > 254)
		return -EINVAL;
	ret = cep_umad_open(&ua, &p->tp);
	if (ret)
		return ret;
	snprintf(p->dev, sizeof(p->dev), "%s", dev);
	p->port_num = (uint8_t)num;
	return port_start(p);
}

/* Every active port of every RDMA device. */
static int umad_all_ports(void)
{
	int n = 0, ret = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list)
		return -errno;
	for (int i = 0; i < n; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;

		if (!ctx)
			continue;
		if (!ibv_query_device(ctx, &da))
			for (unsigned pn = 1; pn <= da.phys_port_cnt; pn++) {
				struct ibv_port_attr pa;

				if (ibv_query_port(ctx, (uint8_t)pn, &pa) || pa.state != IBV_PORT_ACTIVE)
					continue;
				ret = umad_port(ibv_get_device_name(list[i]), pn);
				if (ret)
					logmsg("%s:%u: %s", ibv_get_device_name(list[i]), pn,
					       strerror(-ret));
			}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return 0;
}
#endif

/* ---- the socket -------------------------------------------------------------- */

static const char *default_path(void)
{
	const char *e = getenv("CEP_SERVICE");

	return e && *e && strcmp(e, "none") ? e : CEPD_DEFAULT_SOCKET;
}

static int listen_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (svc.lfd >= 0) /* handed over by systemd (main) */
		return 0;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		/* a socket file left by a dead cepd: take it over, never a live one */
		int e = -errno, probe;

		if (e != -EADDRINUSE) {
			close(fd);
			return e;
		}
		probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			return -EADDRINUSE;
		}
		if (probe >= 0)
			close(probe);
		unlink(path);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
			e = -errno;
			close(fd);
			return e;
		}
	}
	if (listen(fd, 128)) {
		int e = -errno;

		close(fd);
		return e;
	}
	snprintf(svc.path, sizeof(svc.path), "%s", path);
	svc.own_path = 1;
	svc.lfd = fd;
	return 0;
}

static void on_signal(int sig)
{
	int e = errno;

	svc.stop = 1;
	if (svc.sigpipe[1] >= 0)
		(void)!write(svc.sigpipe[1], &sig, 1);
	errno = e;
}

/* --check, every client gone: wait (30 s at most) until each port's
 * engine holds no id, no CEP (timewaits over) and no QPN, quiesce it and
 * run cep_table_check() on its table. 0, or 1 after logging what held
 * on. The main thread; only the CM workers run (nothing arms a timer
 * once no id is left). */
static int check_tables(void)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int status = 0;

	for (unsigned i = 0; i < svc.nports; i++) {
		struct cep_cm *cm = svc.port[i].cm;
		struct cep_cm_stats st = { .size = sizeof(st) };
		struct cep_table_stats tst;
		char msg[512];
		int bad = 0;

		for (int t = 0; t < 1500; t++) {
			if (cep_cm_get_stats(cm, &st))
				break;
			cep_table_stats(cep_cm_table(cm), &tst);
			if (!st.ids && !tst.live && !tst.qps)
				break;
			nanosleep(&ts, NULL);
		}
		if (cep_cm_quiesce(cm, 5000))
			logmsg("check: port %u did not quiesce", i);
		(void)cep_cm_get_stats(cm, &st);
		cep_table_stats(cep_cm_table(cm), &tst);
		if (st.ids || tst.live || tst.qps) {
			logmsg("check: port %u keeps %llu ids, %llu CEPs, %llu QPNs with no client",
			       i, (unsigned long long)st.ids, (unsigned long long)tst.live,
			       (unsigned long long)tst.qps);
			bad = 1;
		}
		if (cep_table_check(cep_cm_table(cm), msg, sizeof(msg))) {
			logmsg("check: port %u: cep_table_check: %s", i, msg);
			bad = 1;
		}
		status |= bad;
		logmsg("check: port %u: %s (CEPs allocated %llu freed %llu, binds %llu)", i,
		       bad ? "FAILED" : "tables consistent and empty",
		       (unsigned long long)tst.allocated, (unsigned long long)tst.freed,
		       (unsigned long long)tst.bound);
	}
	return status;
}

/* SIGTERM: close the socket, drop every client (their calls fail with
 * -ECONNRESET), wait for their threads, then free the ports. 0, or 1
 * when --check found the tables wrong. */
static int shutdown_all(void)
{
	int status = 0;

	struct timespec ts = { 0, 10 * 1000 * 1000 };

	close(svc.lfd);
	if (svc.own_path)
		unlink(svc.path);
	/* first no event goes out to anyone (what one client's teardown
	 * causes must not reach another as if the service still ran), then
	 * every socket ends */
	pthread_mutex_lock(&svc.lk);
	for (struct client *c = svc.clients; c; c = c->next) {
		pthread_mutex_lock(&c->lk);
		c->dead = 1;
		pthread_mutex_unlock(&c->lk);
	}
	for (struct client *c = svc.clients; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&svc.lk);
	/* every client's thread ends and its ids' DESTROYED come back (5 s
	 * at most): then no sid is left for cep_cm_destroy to drop */
	for (int i = 0; i < 500; i++) {
		if (!atomic_load_explicit(&svc.live_clients, memory_order_acquire))
			break;
		nanosleep(&ts, NULL);
	}
	if (svc.check)
		status = check_tables();
	for (unsigned i = 0; i < svc.nports; i++) {
		(void)cep_cm_quiesce(svc.port[i].cm, 1000);
		if (cep_cm_destroy(svc.port[i].cm))
			logmsg("port %u: the CM did not close cleanly", i);
		svc.port[i].tp->ops->destroy(svc.port[i].tp);
	}
	if (svc.fab)
		(void)cep_fabric_destroy(svc.fab);
	return status;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cepd [--socket PATH] [--port DEV:PORT]... [--fabric N] [--workers N]\n"
		"            [--max-ids N] [--check] [-v]\n"
		"       cepd --stats [--socket PATH]\n"
		"Serve libcep's connection manager to the processes of this node.\n"
		"  --socket PATH  listen here (default $CEP_SERVICE, else %s)\n"
		"  --port DEV:PORT  own this RDMA port's CM class (repeatable;\n"
		"                 default: every active port)\n"
		"  --fabric N     an in-process fabric of N ports instead (tests, benchmarks)\n"
		"  --workers N    CM workers per port (default: online CPUs)\n"
		"  --max-ids N    ids (and QPs) one client may hold (default 65536)\n"
		"  --stats        print a running service's statistics and exit\n"
		"  --check        at exit, check the CM tables (tests): exit 1 if wrong\n"
		"  -v             log clients coming and going\n", CEPD_DEFAULT_SOCKET);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "port", required_argument, NULL, 'p' },
		{ "fabric", required_argument, NULL, 'f' },
		{ "workers", required_argument, NULL, 'w' },
		{ "max-ids", required_argument, NULL, 'm' },
		{ "stats", no_argument, NULL, 'S' },
		{ "check", no_argument, NULL, 'C' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL;
	const char *ports[MAX_PORTS];
	unsigned nports = 0;
	long fabric = 0;
	int stats = 0, o, ret = 0;
	struct sigaction sa;

	while ((o = getopt_long(argc, argv, "s:p:f:w:m:SCvh", opts, NULL)) != -1) {
		switch (o) {
		case 's': path = optarg; break;
		case 'p':
			if (nports == MAX_PORTS) {
				fprintf(stderr, "cepd: at most %d ports\n", MAX_PORTS);
				return 2;
			}
			ports[nports++] = optarg;
			break;
		case 'f':
			fabric = strtol(optarg, NULL, 0);
			if (fabric < 1 || fabric > MAX_PORTS) {
				fprintf(stderr, "cepd: --fabric takes 1..%d\n", MAX_PORTS);
				return 2;
			}
			break;
		case 'w': svc.workers = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'm': {
			unsigned long v = strtoul(optarg, NULL, 0);

			if (v < 1 || v > HANDLE_IDX_MASK + 1) {
				fprintf(stderr, "cepd: --max-ids takes 1..%u\n", HANDLE_IDX_MASK + 1);
				return 2;
			}
			svc.max_ids = (uint32_t)v;
			break;
		}
		case 'S': stats = 1; break;
		case 'C': svc.check = 1; break;
		case 'v': svc.verbose = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (!path)
		path = default_path();
	if (stats)
		return stats_command(path);
	if (fabric && nports) {
		fprintf(stderr, "cepd: --fabric and --port exclude each other\n");
		return 2;
	}
#ifdef CEPD_HAVE_SD_LISTEN
	/* before any thread: it edits the environment */
	ret = cepd_sd_listen_fd();
	if (ret >= 0)
		svc.lfd = ret;
	else if (ret != -ENOENT) {
		fprintf(stderr, "cepd: the socket systemd passed: %s\n", strerror(-ret));
		return 1;
	}
	ret = 0;
#endif
	if (pipe2(svc.sigpipe, O_CLOEXEC | O_NONBLOCK)) {
		perror("cepd: pipe");
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (fabric)
		ret = fabric_ports((unsigned)fabric);
	else {
#ifdef CEPD_HAVE_UMAD
		for (unsigned i = 0; i < nports && !ret; i++) {
			char dev[CEPD_DEVICE_MAX];
			const char *colon = strrchr(ports[i], ':');
			unsigned long num = colon ? strtoul(colon + 1, NULL, 10) : 1;
			size_t dl = colon ? (size_t)(colon - ports[i]) : strlen(ports[i]);

			if (dl == 0 || dl >= sizeof(dev)) {
				ret = -EINVAL;
				break;
			}
			memcpy(dev, ports[i], dl);
			dev[dl] = 0;
			ret = umad_port(dev, (unsigned)num);
			if (ret)
				fprintf(stderr, "cepd: %s: %s\n", ports[i], strerror(-ret));
		}
		if (!ret && !nports)
			ret = umad_all_ports();
#else
		ret = -EOPNOTSUPP;
#endif
	}
	if (!ret && !svc.nports)
		ret = -ENODEV;
	if (ret) {
		fprintf(stderr, "cepd: no port to serve: %s\n", strerror(-ret));
		return 1;
	}
	ret = listen_socket(path);
	if (ret) {
		fprintf(stderr, "cepd: %s: %s\n", path, strerror(-ret));
		return 1;
	}
	if (svc.verbose)
		logmsg("serving %u port(s) on %s", svc.nports, path);
	while (!svc.stop) {
		struct pollfd pf[2] = { { .fd = svc.lfd, .events = POLLIN },
					{ .fd = svc.sigpipe[0], .events = POLLIN } };

		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[0].revents & POLLIN)
			accept_client();
	}
	return shutdown_all();
}
