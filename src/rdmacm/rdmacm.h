/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep: private declarations. The library implements the
 * API of <rdma/rdma_cma.h> (librdmacm 44, Debian 12) with libcep's CM over
 * libibumad, one CM per RDMA port, inside the application's process.
 *
 * Guarantees: the structures the application sees (rdma_cm_id,
 * rdma_event_channel, rdma_cm_event) are the real header's, embedded in
 * private ones. Locks nest in one order only: a listener's rcm_id.mtx ->
 * a new id's rcm_id.mtx -> rcm.lock (devices, port numbers) or
 * rcm_channel.mtx; rcm_service.mtx and rcm_port.svc_mtx are taken alone.
 * libcep calls may be made with any of them held: libcep never calls back
 * into this library while it holds its own locks (cep/cm.h). See
 * docs/rdmacm.md.
 */
#ifndef RCM_RDMACM_H
#define RCM_RDMACM_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cep/cm.h>
#include <cep/qp.h>
#include <cep/sa.h>
#include <cep/transport.h>

/* The one way a symbol leaves librdmacm.so.1 (librdmacm.map versions it). */
#define RCM_EXPORT __attribute__((visibility("default")))

/* librdmacm's convention: -1 and errno. */
static inline int rcm_err(int e)
{
	errno = e;
	return -1;
}

/* rsockets' options, stream and datagram alike: an int option's value
 * (setsockopt's @v, @l), and getsockopt's answer; 0 or -EINVAL when
 * @v is NULL or its room short. */
static inline int rcm_opt_get_int(const void *v, socklen_t l, int *out)
{
	if (!v || l < sizeof(int))
		return -EINVAL;
	memcpy(out, v, sizeof(int));
	return 0;
}

static inline int rcm_opt_put_int(void *v, socklen_t *l, int val)
{
	if (!v || !l || *l < sizeof(int))
		return -EINVAL;
	memcpy(v, &val, sizeof(int));
	*l = sizeof(int);
	return 0;
}

/* Add @fl (O_NONBLOCK) to descriptor @fd's status flags: 0 or -errno. */
static inline int rcm_fd_add_flags(int fd, int fl)
{
	int old = fcntl(fd, F_GETFL);

	return old < 0 || fcntl(fd, F_SETFL, old | fl) ? -errno : 0;
}

/* The library's own IP sockets (route and source lookups, multicast
 * memberships, a datagram rsocket's UDP socket) by the system call, not
 * the socket symbol: librspreload interposes socket() and would make each
 * an rsocket - a datagram rsocket, whose connect needs a route lookup of
 * its own (endless), since datagram rsockets exist. */
static inline int rcm_socket(int domain, int type, int protocol)
{
	return (int)syscall(SYS_socket, domain, type, protocol);
}

#define RCM_CONTAINER(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* rdma_cm's CM timers: response timeout exponent 20 (~4.3 s), 15 retries,
 * RoCE packet life time exponent 18 (kernel cma.c CMA_* constants). */
#define RCM_CM_RESPONSE_TIMEOUT 20
#define RCM_MAX_CM_RETRIES      15
#define RCM_ROCE_PACKET_LIFE    18
#define RCM_MRA_TIMEOUT         24
/* How late an id's QP_DESTROYED and DESTROYED may reach this layer
 * (cep_cm lazy_ms): they share a worker wake-up instead of one each. */
#define RCM_LAZY_MS             20
#define RCM_DEFAULT_BACKLOG     1024 /* ucma's max_backlog */
/* Requests a service's libcep listener holds that no rdma_cm listener has
 * taken yet: past rdma_listen's backlog they wait in the listener's
 * deferred list, MRAed, instead of being dropped for their requesters to
 * retry (issue 27); about 2 KiB each, so 32 MiB at most per service. */
#define RCM_HOLD_MAX            (16 * RCM_DEFAULT_BACKLOG)
#define RCM_PDATA_MAX           256  /* RDMA_MAX_PRIVATE_DATA */
#define RCM_PORT_LOW            32768 /* ephemeral ports: ip_local_port_range */
#define RCM_PORT_HIGH           60999

/* ---- devices and ports --------------------------------------------------- */

struct rcm_service;

/* One port of an RDMA device and, once needed, its libcep CM over umad.
 * Fields below "lazily" are written once under rcm.lock. */
struct rcm_port {
	struct rcm_dev *dev;
	uint8_t port_num;
	uint8_t link_layer;            /* IBV_LINK_LAYER_* at init */
	/* lazily: */
	struct cep_sa *sa;             /* InfiniBand: the port's SA client */
	struct cep_transport *t;
	_Atomic(struct cep_cm *) cm;   /* published after the CM started */
	struct cep_port_info info;     /* query_port at open */
	uint16_t *pkeys;               /* InfiniBand: the P_Key table, host order,
					  read at init (const after); NULL: not
					  known (RoCE, a stand-in) */
	uint16_t npkeys;
	int open_err;                  /* sticky: the open failed with -errno */
	uint8_t attached;              /* the CM is cepd's (written before cm is
					  published, read after it was read) */
	pthread_mutex_t mc_mtx;        /* InfiniBand: groups; held across their
					  SA requests, taken under no other lock */
	struct rcm_ib_group *groups;   /* InfiniBand: this process's memberships */
	pthread_mutex_t svc_mtx;       /* services list */
	struct rcm_service *services;  /* never freed: see rcm_service */
	pthread_mutex_t qpn_mtx;       /* qpns (a leaf lock) */
	struct rcm_qpn **qpns;         /* QPN -> the id that registered it */
};

#define RCM_QPN_BUCKETS 4096

/* Which id registered a QPN with the port's CM. */
struct rcm_qpn {
	struct rcm_qpn *next;
	uint32_t qpn;
	struct rcm_id *owner;          /* not a reference: cleared at unregister */
};

struct rcm_dev {
	struct ibv_context *verbs;
	struct ibv_pd *pd;             /* the default PD ids hand out (rcm.lock) */
	struct ibv_device_attr attr;
	unsigned nports;
	struct rcm_port *ports;        /* [nports], port_num = index + 1 */
	struct ibv_xrcd *xrcd;         /* XRC domain, opened on first use (rcm.lock) */
	struct ibv_gid_entry *gids;    /* GID table cache (rcm.lock), re-read */
	size_t ngids;                  /* on a miss */
};

/* ---- contexts given to libcep (first member of both kinds) ------------- */

enum rcm_kind { RCM_KIND_ID = 1, RCM_KIND_SERVICE = 2 };

struct rcm_ctx {
	enum rcm_kind kind;
};

/* One libcep listener: a service ID on one port, shared by every rdma_cm
 * listener of that (port space, port) there. Kept for the life of the
 * process once created (a REQ being delivered may still carry this
 * context after its listener went: libcep issue 10 item 2), and reused
 * when the service is listened on again. */
struct rcm_service {
	struct rcm_ctx hdr;
	struct rcm_service *next;      /* port->services */
	struct rcm_port *port;
	uint64_t sid;
	pthread_mutex_t mtx;           /* cep, listeners */
	struct cep_cm_id *cep;         /* NULL while nobody listens */
	struct rcm_id **listeners;     /* rdma_cm listeners (referenced) */
	unsigned nlisteners, cap;
};

/* ---- event channels and events ------------------------------------------ */

/* Work librdmacm does inside rdma_get_cm_event for some events. */
enum rcm_work {
	RCM_WORK_NONE,
	RCM_WORK_REP,                  /* QP to RTR/RTS and RTU: ESTABLISHED */
	RCM_WORK_QP_ERR,               /* REJECTED: QP to ERR */
	RCM_WORK_JOIN,                 /* MULTICAST_JOIN: attach the QP */
};

/* This process's membership of a group on an InfiniBand port (mcast.c):
 * how many joins hold each JoinState bit, and the SA's record of the
 * port's membership. On its port's groups list under mc_mtx. */
struct rcm_ib_group {
	struct rcm_ib_group *next;
	uint8_t mgid[16];
	uint8_t port_gid[16];
	unsigned members[4];           /* joins per JoinState bit */
	struct cep_sa_mcmember rec;    /* the SA's answer to the last Set */
};

/* A multicast join of an id (mcast.c): on the id's mc_list (its mutex)
 * until rdma_leave_multicast, freed with the id otherwise. */
struct rcm_mc {
	struct rcm_mc *next;
	void *context;                 /* the application's, in its events */
	struct sockaddr_storage addr;  /* the group as joined (leave's key) */
	socklen_t addrlen;
	union ibv_gid mgid;
	uint16_t mlid;                 /* 0 on RoCE */
	uint16_t join_flags;           /* RDMA_MC_JOIN_FLAG_* */
	int igmp_fd;                   /* holds the IP group membership, or -1 */
	uint8_t attached;              /* the id's QP is attached (id mutex) */
	uint8_t left;                  /* unlinked by leave (id mutex) */
	uint8_t ib_bit;                /* InfiniBand: its JoinState bit (0-3) */
	uint8_t ib_gid[16];            /* InfiniBand: the port GID it joined from */
	struct rcm_port *ib_port;      /* InfiniBand: holds a count of the port's
					  group mgid (id mutex; cleared by whoever
					  ends it) */
	_Atomic unsigned pending;      /* its events not yet acked or dropped */
};

struct rcm_event {
	struct rdma_cm_event ev;       /* what the application sees */
	enum rcm_work work;            /* done when the application takes it */
	struct rcm_event *next;
	struct rcm_id *owner;          /* whose events this one counts for: the
					  listener for CONNECT_REQUEST (as
					  librdmacm); holds a reference */
	struct rcm_mc *mc;             /* a multicast event's join (counted in
					  its pending), else NULL */
	uint8_t pdata[RCM_PDATA_MAX];
};

/* A FIFO of events. The lock of whatever holds it guards it. */
struct rcm_evq {
	struct rcm_event *head, *tail;
};

static inline void rcm_evq_push(struct rcm_evq *q, struct rcm_event *e)
{
	e->next = NULL;
	if (q->tail)
		q->tail->next = e;
	else
		q->head = e;
	q->tail = e;
}

static inline struct rcm_event *rcm_evq_pop(struct rcm_evq *q)
{
	struct rcm_event *e = q->head;

	if (e) {
		q->head = e->next;
		if (!q->head)
			q->tail = NULL;
		e->next = NULL;
	}
	return e;
}

/* Take the whole queue (as a NULL-terminated list). */
static inline struct rcm_event *rcm_evq_take(struct rcm_evq *q)
{
	struct rcm_event *e = q->head;

	q->head = q->tail = NULL;
	return e;
}

/* The fd is an eventfd that is readable exactly while events wait (its
 * counter and the queue change together under mtx), so poll/epoll on it
 * behaves as on librdmacm's character device. */
/* A thread blocked in rdma_get_cm_event on an empty channel: the next
 * event is handed to it directly (channel.c). */
struct rcm_getter {
	struct rcm_getter *next;       /* under the channel mutex */
	struct rcm_event *e;           /* set under the channel mutex */
	_Atomic uint32_t handed;       /* futex word: 0 waiting, 1 e is set */
	/* Its thread's waiter (cm/lead.h): it waits in cep_lead_wait, reading
	 * the ports' receive queues meanwhile, and is woken on its eventfd;
	 * NULL: none could be made, it waits on the futex word. Set before
	 * the getter is queued. */
	struct cep_lead_waiter *w;
};

struct rcm_channel {
	struct rdma_event_channel ch;  /* ch.fd */
	pthread_mutex_t mtx;
	struct rcm_evq q;
	int signaled;                  /* eventfd counter is 1 */
	/* Blocked getters, oldest first; nonempty only while q is empty. */
	struct rcm_getter *waiting, **waiting_tail;
	/* Threads inside rdma_get_cm_event, plus RCM_CHANNEL_DEAD once
	 * destroyed: the channel (its memory and fd) is freed by whichever
	 * of destroy and the last getter comes last (channel.c). */
	_Atomic unsigned getters;
};
#define RCM_CHANNEL_DEAD (1u << 31)

/* ---- ids ------------------------------------------------------------------ */

/* rdma_cm's id states (kernel enum rdma_cm_state, the ones used here). */
enum rcm_state {
	RCM_IDLE, RCM_ADDR_BOUND, RCM_ADDR_RESOLVED, RCM_ROUTE_RESOLVED,
	RCM_LISTEN, RCM_CONNECT, RCM_DISCONNECT,
};

struct rcm_id {
	struct rcm_ctx hdr;            /* libcep context of cep */
	struct rdma_cm_id id;          /* what the application sees */
	pthread_mutex_t mtx;           /* everything below, and id.qp */
	pthread_cond_t cond;           /* events_completed grew */
	atomic_uint refs;              /* user, libcep id, queued events */
	enum rcm_state state;
	int destroying;                /* rdma_destroy_id began: no more events */
	int sync;                      /* own private channel (rdma_create_ep) */
	uint32_t qkey;                 /* UD: the id's Q_Key once set (mtx; cma's
					  id_priv->qkey), 0 before */
	_Atomic unsigned events_reported; /* handed out by rdma_get_cm_event */
	unsigned queued;               /* in its channel: that channel's mutex */
	unsigned events_completed;     /* acked */
	struct rcm_port *port;         /* NULL: not bound to a device yet */
	uint8_t sgid_index;
	uint8_t bound;                 /* in the port-number table */
	uint8_t any_addr;              /* bound to the wildcard address */
	uint8_t reuseaddr, afonly;     /* written under rcm.lock too */
	uint8_t listening;             /* rcm.lock: in LISTEN for port checks */
	int bind_ps;                   /* port space of its port number (AF_IB:
					  rcm_ib_select_ps's), rcm.lock */
	uint8_t tos, tos_set, ack_timeout, ack_timeout_set;
	uint8_t resp_res, init_depth;  /* rdma_cm's responder res./initiator depth */
	uint8_t disconnected;          /* DISCONNECTED delivered */
	uint8_t connect_error;         /* CONNECT_ERROR delivered: drop the rest */
	uint8_t rep_bad;               /* the REP's QP parameters were unusable */
	uint8_t cr_pending;            /* new passive id whose CONNECT_REQUEST
					  the application has not taken yet */
	struct rcm_evq held;           /* its events until then */
	uint32_t seq;                  /* our starting PSN (rdma_cm's seq_num) */
	struct cep_cm_id *cep;         /* the connection in libcep, or NULL */
	struct cep_qp_params qpp;      /* INIT/RTR/RTS attributes */
	uint8_t have_req;              /* passive: qpp holds the REQ's half */
	uint8_t route_given;           /* route.path_rec is the REQ's path: given
					  (RDMA_OPTION_IB_PATH) or the SA's */
	/* ECE (librdmacm's local_ece / remote_ece; comp_mask unused): ours
	 * for the REQ or REP, the peer's from its REQ or REP; rep_ece: the
	 * REP's until the application takes CONNECT_RESPONSE */
	struct ibv_ece local_ece, remote_ece, rep_ece;
	uint32_t qpn_registered;       /* QPN registered with port's CM, 0 none */
	struct rcm_id *bind_next;      /* port-number table chain */
	/* listeners */
	int backlog;                   /* CONNECT_REQUESTs queued at most */
	int cr_queued;                 /* queued, not yet fetched */
	struct rcm_evq deferred;       /* REQs past the backlog */
	struct rcm_service **svcs;     /* services listened on */
	unsigned nsvcs;
	struct rcm_mc *mc_list;        /* multicast joins */
	/* rdma_create_ep */
	struct ibv_qp_init_attr *qp_init_attr;
	uint8_t *connect_pdata;
	size_t connect_len;
};

static inline struct rcm_id *rcm_id_of(struct rdma_cm_id *id)
{
	return RCM_CONTAINER(id, struct rcm_id, id);
}

static inline struct rcm_channel *rcm_channel_of(struct rdma_event_channel *ch)
{
	return RCM_CONTAINER(ch, struct rcm_channel, ch);
}

/* ---- device.c ---------------------------------------------------------- */

/* Open the devices once (librdmacm's ucma_init). 0 or -errno (ENODEV
 * when the machine has no RDMA device). Any thread. */
int rcm_init(void);
/* Where a local address lives: the port, the source GID and its index,
 * the P_Key (an IPoIB interface's; 0xffff on RoCE). */
struct rcm_src {
	struct rcm_port *port;
	uint8_t gid_index;
	uint8_t gid[16];
	uint16_t pkey;
};
/* The port of local address @addr: the one whose GID table holds its
 * RoCE v2 GID (IPv4-mapped or IPv6), or, for an address of an IPoIB
 * interface, the InfiniBand port whose GID table holds that interface's
 * GID (ib.h rcm_ib_local). 0 and @out, or -EADDRNOTAVAIL. Any thread. */
int rcm_find_addr(const struct sockaddr *addr, struct rcm_src *out);
/* AF_IB: the InfiniBand port whose GID table holds @gid (bind). With
 * @prefix_ok, failing that the first whose GID shares @gid's subnet
 * prefix, its GID the source (the kernel's cma_resolve_ib_dev). @out's
 * P_Key is left to the caller. 0 or -EADDRNOTAVAIL. */
int rcm_find_ib_gid(const uint8_t gid[16], int prefix_ok, struct rcm_src *out);
/* The source address the kernel's routing table picks towards @dst
 * (port untouched). 0 or -errno. */
int rcm_route_source(const struct sockaddr *dst, struct sockaddr_storage *src);
/* The port's CM, opening the transport and the CM on first use. 0 or
 * -errno; -EBUSY (with one explanation on stderr) when another process or
 * the kernel's ib_cm owns the CM class on that port. Takes rcm.lock. */
int rcm_port_cm(struct rcm_port *port, struct cep_cm **out);
/* The SA client of an InfiniBand port, opened on first use and kept
 * until exit (@timeout_ms per attempt, for the first open). 0 or -errno.
 * Takes rcm.lock. */
int rcm_port_sa(struct rcm_port *port, uint32_t timeout_ms, struct cep_sa **out);
/* A port rdma_cm runs on: RoCE or InfiniBand. */
static inline int rcm_port_usable(const struct rcm_port *p)
{
	return p->link_layer == IBV_LINK_LAYER_ETHERNET ||
	       p->link_layer == IBV_LINK_LAYER_INFINIBAND;
}
/* The receive queues of the ports whose CM is open (cm/lead.h: what a
 * thread waiting for events reads meanwhile), at most @max in @out: how
 * many. Any thread, no lock. */
#define RCM_LEADS_MAX 8
struct cep_lead;
unsigned rcm_leads(struct cep_lead **out, unsigned max);
/* Every port of every device, for wildcard listeners. */
unsigned rcm_port_count(void);
struct rcm_port *rcm_port_at(unsigned i);
/* The device's default PD, allocated on first use. Takes rcm.lock. */
struct ibv_pd *rcm_dev_pd(struct rcm_dev *d);
/* The index of @pkey in @p's P_Key table, as the kernel's
 * ib_find_cached_pkey: the low 15 bits match, a full member's entry
 * preferred; 0 when the table is not known (RoCE's has 0xffff alone at 0).
 * 0 or -ENOENT. Any thread (the table is constant). */
int rcm_pkey_index(const struct rcm_port *p, uint16_t pkey, uint16_t *index);
/* The device's XRC domain (librdmacm's ucma_get_xrcd: opened once, kept),
 * or NULL and errno the device's answer (EOPNOTSUPP: no XRC). */
struct ibv_xrcd *rcm_dev_xrcd(struct ibv_context *verbs);
/* Port information for @id's source GID (the QP glue's view). */
void rcm_port_info(const struct rcm_id *id, struct cep_port_info *out);
/* The libcep event handler shared by every id (conn.c). */
int rcm_cep_handler(struct cep_cm_id *cid, const struct cep_cm_event *ev);

extern struct rcm_global {
	pthread_mutex_t lock;          /* init, ports' lazy fields, port numbers */
	int inited, init_err;
	struct rcm_dev *devs;
	unsigned ndevs;
	struct rcm_id **ports_tcp, **ports_udp, **ports_ib, **ports_ipoib; /* [65536]
					  chains, lazily */
} rcm;

/* ---- channel.c --------------------------------------------------------- */

struct rcm_channel *rcm_channel_new(void);
void rcm_channel_free(struct rcm_channel *c);
/* A zeroed event for @owner (takes a reference); NULL on no memory. */
struct rcm_event *rcm_event_new(struct rcm_id *owner, enum rdma_cm_event_type type,
				int status);
/* Free an event that was never handed out (drops the owner reference;
 * a CONNECT_REQUEST's new id is destroyed). */
void rcm_event_drop(struct rcm_event *e);
/* Queue @e on its owner's channel unless the owner is being destroyed
 * (then it is dropped), or hold it while the owner's CONNECT_REQUEST has
 * not been taken. Caller holds e->owner->mtx. */
void rcm_push_locked(struct rcm_event *e);
/* Queue a CONNECT_REQUEST for listener @e->owner, within its backlog;
 * past it the event waits in the listener's deferred list. */
void rcm_push_request(struct rcm_event *e);
/* Remove @owner's queued events from @c; returns them as a list. */
struct rcm_event *rcm_channel_take(struct rcm_channel *c, struct rcm_id *owner);
/* Append a list of events to @c (rdma_migrate_id). */
void rcm_channel_put(struct rcm_channel *c, struct rcm_event *list);
/* Wait until every event handed out for @r was acked (r->mtx not held). */
void rcm_wait_acked(struct rcm_id *r);
/* Take the next event of a sync id's channel (librdmacm's ucma_complete):
 * 0, or -1/errno from the event (ECONNREFUSED for REJECTED). */
int rcm_complete(struct rcm_id *r);

/* ---- id.c -------------------------------------------------------------- */

void rcm_id_get(struct rcm_id *r);
void rcm_id_put(struct rcm_id *r);
/* A new id on @channel (NULL: a private one, sync). */
struct rcm_id *rcm_id_new(struct rcm_channel *channel, void *context,
			  enum rdma_port_space ps, enum ibv_qp_type qp_type);
/* Give @r the source address @src on @dev's port and GID (NULL: no
 * device yet) and a port number (@src's, or an ephemeral one when 0).
 * 0 or -errno. */
int rcm_bind(struct rcm_id *r, const struct sockaddr *src, const struct rcm_src *dev);
/* Destroy an id nobody outside the library knows yet (a request that
 * cannot be delivered): rejects its connection, frees it. */
void rcm_id_abandon(struct rcm_id *r);
/* The service ID of @r's source port. */
uint64_t rcm_service_id(const struct rcm_id *r, int dst);
int rcm_addr_any(const struct sockaddr *a);
int rcm_addr_len(const struct sockaddr *a);
uint16_t rcm_addr_port(const struct sockaddr *a);
void rcm_addr_gid(const struct sockaddr *a, uint8_t gid[16]);
/* @s->mtx held (or @s not yet shared), nobody listening: start its libcep
 * listener on @cm, holding up to RCM_HOLD_MAX requests untaken. 0 or the
 * error of cep_cm_create_id / cep_cm_listen_backlog (s->cep NULL then). */
int rcm_service_listen(struct rcm_service *s, struct cep_cm *cm);

/* ---- conn.c -------------------------------------------------------------- */

/* Create the libcep id of @r on its port's CM. Caller holds r->mtx. */
int rcm_cep_create(struct rcm_id *r);
/* Register @qpn with @r's port CM (once per QPN). Caller holds r->mtx. */
int rcm_qp_register(struct rcm_id *r, uint32_t qpn);
/* Move a new QP to INIT (UD: to RTS) for @r and register an RC QP's
 * number. Caller holds r->mtx. */
int rcm_qp_init(struct rcm_id *r, struct ibv_qp *qp);
/* librdmacm's ECE steps for a new QP (init_ece, set_local_ece). Caller
 * holds r->mtx. 0 or -errno. */
int rcm_qp_ece(struct rcm_id *r, struct ibv_qp *qp);
void rcm_qp_unregister(struct rcm_id *r);
/* Move @qp to ERR (librdmacm's ucma_modify_qp_err). */
int rcm_qp_error(struct ibv_qp *qp);
/* An event was taken by the application: do its work (librdmacm's
 * rdma_get_cm_event processing). Application thread, no lock held. */
void rcm_event_taken(struct rcm_event *e);
/* Fill a path record for @r's route (RoCE). */
void rcm_fill_path(struct rcm_id *r, struct ibv_sa_path_rec *p);
/* id.c, r->mtx held, the id in ADDR_RESOLVED: its one path is @sp's
 * record (an SA's or the application's: the REQ is built from it), or with
 * @sp NULL the RoCE path of its two GIDs; ROUTE_RESOLVED queued. 0 or
 * ENOMEM (nothing changed). */
struct cep_sa_path;
int rcm_route_resolved(struct rcm_id *r, const struct cep_sa_path *sp);

/* ---- mcast.c ------------------------------------------------------------- */

/* MULTICAST_JOIN @e of @r taken by the application (rcm_event_taken, r->mtx
 * held): attach r's QP to the group, or make it MULTICAST_ERROR. */
void rcm_mc_join_taken(struct rcm_id *r, struct rcm_event *e);
/* rdma_destroy_id: end @r's group memberships now. r->mtx held (the
 * teardown's own section: no lock of its own on every destroy). */
void rcm_mc_end(struct rcm_id *r);
/* A UD id's Q_Key, set on first use as the kernel's cma_set_qkey(id, 0):
 * rdma_cm's (RDMA_UDP_QKEY) in RDMA_PS_UDP and RDMA_PS_IB, the IPoIB
 * broadcast group's (the SA's MCMemberRecord, through cepd cepd's
 * MC_BCAST) in RDMA_PS_IPOIB - which gets a device only on InfiniBand. 0
 * and @out, or -errno (-EADDRNOTAVAIL: no broadcast group). r->mtx held;
 * may block on the SA. */
int rcm_qkey(struct rcm_id *r, uint32_t *out);
/* rdma_destroy_id, after that section: @r's InfiniBand memberships end
 * (an SA Delete where it held the process's last join of a JoinState).
 * Takes r->mtx and the port's mc_mtx; blocks on the SA. */
void rcm_mc_end_ib(struct rcm_id *r);
/* The last reference to @r went: free its joins (no event points to them). */
void rcm_mc_free(struct rcm_id *r);

/* ---- ib.c (InfiniBand; more in ib.h) ---------------------------------- */

/* rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH): -1/errno or 0 and
 * ROUTE_RESOLVED queued, as the kernel's ucma_set_ib_path. */
int rcm_ib_set_path(struct rcm_id *r, const void *optval, size_t optlen);

#endif /* RCM_RDMACM_H */
