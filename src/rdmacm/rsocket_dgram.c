/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep: datagram rsockets (SOCK_DGRAM), on the wire as
 * librdmacm's (the protocol its rsocket.c defines; this is a separate
 * implementation of it, docs/rdmacm.md "Datagram rsockets").
 *
 * An rsocket is a UDP socket (its descriptor is the rsocket's number)
 * and one UD QP per local source address, each made through this
 * library's rdma_cm (an RDMA_PS_UDP id bound to that address and the UDP
 * socket's port, rdma_create_qp: RTS with rdma_cm's Q_Key). Data go over
 * a QP with the sender's address in front (struct rds_hdr), to an address
 * handle and QP number learnt for the destination. Until the number is
 * known the datagram goes over UDP with a tagged header (struct
 * rds_udp_hdr: op data, our QPN); the receiver's service thread answers
 * with a control header carrying its own QPN, makes an address handle
 * back, and queues the data as if it had come over its QP. Both sides
 * then talk over the QPs only.
 *
 * Address handles: through a resolved route of this library's rdma_cm
 * (rdma_resolve_addr and rdma_resolve_route from the QP's address to the
 * destination). On RoCE always global - the GRH with the destination's
 * GID, the source GID's index, the route's hop limit and traffic class -
 * as every RoCE port requires; librdmacm makes its address handles as
 * on InfiniBand (LID, a GRH only past a router), which RoCE ports refuse.
 * On InfiniBand as librdmacm: the path's LIDs, SL and rate, a GRH only
 * when the hop limit is above 1.
 *
 * Guarantees: every call takes the rsocket's mutex (lock) for the state
 * below; no call sleeps holding it - a blocking call waits in poll(2) on
 * the completion channels (one epoll set, epfd) and the eventfds that say
 * "a message is queued" (rx_evfd) and "a send slot is free while a sender
 * waits" (tx_evfd), so that any thread taking completions for another
 * wakes it. The service thread (one per rsocket, from the first bind,
 * connect or send until rds_destroy) takes the same mutex, never sleeps
 * holding it, and only ever adds QPs, destinations, address handles and
 * queued messages; everything is freed by rds_destroy after it has
 * stopped. Bad datagrams (from the UDP socket or a QP: a wrong tag,
 * version, length, family, truncation) are dropped and change nothing.
 * A datagram larger than the path allows (the port's MTU, at most 2,048
 * bytes, less the header) is refused with EMSGSIZE; a message that finds
 * the receive queue full is dropped, as UDP drops it.
 */
#include <endian.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "rdmacm.h"
#include "rsocket_dgram.h"
#include "rsocket_wire.h"

#define RDS_SLOT (RDS_GRH_SIZE + RDS_MSG_SIZE) /* one receive: GRH, message */
#define RDS_WR_SEND 0
#define RDS_RESOLVE_MS 2000
/* Destinations in a hash of chains; at most RDS_MAX_DESTS (the side
 * channel is unauthenticated, as librdmacm's: any UDP sender makes one). */
#define RDS_DEST_BUCKETS 1024
#define RDS_MAX_DESTS 65536
/* Address handles replaced while sends may still use them, kept until
 * the send queues drain; at most this many (then a new QP number waits) */
#define RDS_MAX_OLD_AHS 256

union rds_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
	struct sockaddr_storage ss;
};

/* A UD QP for one local address (IP and the UDP socket's port). */
struct rds_qp {
	struct rds_qp *next;
	struct rdma_cm_id *id;
	struct ibv_comp_channel *comp;
	struct ibv_cq *cq;
	bool armed; /* a notification requested and not yet taken */
	struct ibv_mr *smr, *rmr;
	uint8_t *rbuf; /* rq_size slots of RDS_SLOT */
	union rds_addr addr;
	struct rds_hdr hdr; /* our address, in front of every message */
	uint32_t max_msg;   /* header and data: the port's MTU, <= RDS_MSG_SIZE */
	uint32_t inline_max;
	enum ibv_port_state state;
	uint8_t link_layer, lmc;
};

/* A destination: the QP we reach it from, and once its QP number is
 * known, the address handle. */
struct rds_dest {
	struct rds_dest *next;
	union rds_addr addr;
	struct rds_qp *qp;
	struct ibv_ah *ah;
	uint32_t qpn;
};

/* A received message waiting for rrecvfrom: in a QP's receive slot, or
 * (forwarded from the UDP socket) in memory of its own. */
struct rds_msg {
	struct rds_qp *qp;
	uint32_t slot;
	uint32_t len; /* header and data */
	uint8_t *copy;
};

struct rds {
	int fd; /* the UDP socket */
	int domain;
	int epfd, rx_evfd, tx_evfd, stop_fd;
	pthread_mutex_t lock;
	/* below: under lock */
	bool nonblock;
	int fs_flags, fd_flags;
	bool ready;          /* buffers made, service thread started */
	bool readable, writable;
	bool rx_sig, tx_sig; /* the eventfds' state */
	int send_waiters;
	pthread_t thread;
	struct rds_qp *qps;
	struct rds_dest *dests[RDS_DEST_BUCKETS], *conn;
	unsigned ndests;
	struct ibv_ah *old_ahs[RDS_MAX_OLD_AHS]; /* replaced, sends in flight */
	int n_old_ahs;
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline;
	uint8_t *sbuf;       /* sq_size slots of RDS_MSG_SIZE */
	uint16_t *sfree;     /* free send slots */
	int nfree;
	struct rds_msg *ring; /* rq_size entries */
	unsigned head, count;
	uint64_t so_opts, ipv6_opts;
	int ip_tos;
	int err;
};

static void *rds_service(void *arg);

static socklen_t addr_len(int family)
{
	return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

static bool addr_eq(const union rds_addr *a, const struct sockaddr *b)
{
	if (a->sa.sa_family != b->sa_family)
		return false;
	if (b->sa_family == AF_INET) {
		const struct sockaddr_in *i = (const struct sockaddr_in *)b;

		return a->in.sin_port == i->sin_port && a->in.sin_addr.s_addr == i->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *i6 = (const struct sockaddr_in6 *)b;

	return a->in6.sin6_port == i6->sin6_port &&
	       !memcmp(&a->in6.sin6_addr, &i6->sin6_addr, 16);
}

/* An address given by the application: of the rsocket's family, long
 * enough. */
static int addr_check(const struct rds *ds, const struct sockaddr *sa, socklen_t len)
{
	if (!sa)
		return -EFAULT;
	if (len < sizeof(sa_family_t) || sa->sa_family != ds->domain)
		return -EAFNOSUPPORT;
	if (len < addr_len(ds->domain))
		return -EINVAL;
	return 0;
}

static bool addr_any(const union rds_addr *a)
{
	if (a->sa.sa_family == AF_INET)
		return a->in.sin_addr.s_addr == htonl(INADDR_ANY) ||
		       a->in.sin_addr.s_addr == htonl(INADDR_LOOPBACK);
	return !memcmp(&a->in6.sin6_addr, &in6addr_any, 16) ||
	       !memcmp(&a->in6.sin6_addr, &in6addr_loopback, 16);
}

static uint16_t *addr_port(union rds_addr *a)
{
	return a->sa.sa_family == AF_INET ? &a->in.sin_port : &a->in6.sin6_port;
}

/* ---- the eventfds: level-triggered conditions --------------------------
 * Contract of every function in this file below a heading that says
 * "lock held": the caller holds ds->lock; "either thread": an
 * application thread or the service thread may call it. */

static void evfd_set(int fd, bool *sig, bool want)
{
	uint64_t v = 1;

	if (want == *sig)
		return;
	if (want)
		*sig = write(fd, &v, sizeof(v)) == sizeof(v);
	else
		*sig = read(fd, &v, sizeof(v)) != sizeof(v);
}

/* rx: a message queued, or reads shut down; tx: a free send slot while
 * a sender waits, or writes shut down. Lock held; either thread (the
 * service thread queues forwarded data). */
static void evfd_sync(struct rds *ds)
{
	evfd_set(ds->rx_evfd, &ds->rx_sig, ds->count || !ds->readable);
	evfd_set(ds->tx_evfd, &ds->tx_sig,
		 (ds->send_waiters && ds->nfree) || !ds->writable);
}

/* ---- making and freeing ------------------------------------------------ */

int rds_create(int domain, int type, const struct rds_sizes *sz, struct rds **out)
{
	struct rds *ds;
	int ret = 0;

	if (domain != AF_INET && domain != AF_INET6)
		return -EAFNOSUPPORT;
	ds = calloc(1, sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	ds->domain = domain;
	ds->fd = ds->epfd = ds->rx_evfd = ds->tx_evfd = ds->stop_fd = -1;
	pthread_mutex_init(&ds->lock, NULL);
	ds->readable = ds->writable = true;
	ds->sbuf_size = sz->sbuf_size;
	ds->rbuf_size = sz->rbuf_size;
	ds->sq_size = sz->sq_size;
	ds->rq_size = sz->rq_size;
	ds->sq_inline = sz->sq_inline;
	ds->nonblock = !!(type & SOCK_NONBLOCK);
	ds->fs_flags = ds->nonblock ? O_NONBLOCK : 0;
	ds->fd_flags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
	ds->fd = rcm_socket(domain, SOCK_DGRAM | (type & SOCK_CLOEXEC), 0);
	ds->epfd = epoll_create1(EPOLL_CLOEXEC);
	ds->rx_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ds->tx_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ds->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ds->fd < 0 || ds->epfd < 0 || ds->rx_evfd < 0 || ds->tx_evfd < 0 || ds->stop_fd < 0)
		ret = -errno;
	if (ret) {
		rds_destroy(ds);
		return ret;
	}
	*out = ds;
	return 0;
}

int rds_fd(const struct rds *ds)
{
	return ds->fd;
}

static void qp_free(struct rds_qp *qp)
{
	if (qp->id && qp->id->qp)
		rdma_destroy_qp(qp->id);
	if (qp->smr)
		ibv_dereg_mr(qp->smr);
	if (qp->rmr)
		ibv_dereg_mr(qp->rmr);
	if (qp->cq)
		ibv_destroy_cq(qp->cq);
	if (qp->comp)
		ibv_destroy_comp_channel(qp->comp);
	if (qp->id)
		rdma_destroy_id(qp->id);
	free(qp->rbuf);
	free(qp);
}

void rds_destroy(struct rds *ds)
{
	uint64_t one = 1;

	if (ds->ready) {
		/* the thread takes lock: stopped and joined without it */
		if (write(ds->stop_fd, &one, sizeof(one)) == sizeof(one))
			pthread_join(ds->thread, NULL);
	}
	for (int b = 0; b < RDS_DEST_BUCKETS; b++)
		while (ds->dests[b]) {
			struct rds_dest *d = ds->dests[b];

			ds->dests[b] = d->next;
			if (d->ah)
				ibv_destroy_ah(d->ah);
			free(d);
		}
	for (int i = 0; i < ds->n_old_ahs; i++)
		ibv_destroy_ah(ds->old_ahs[i]);
	while (ds->qps) {
		struct rds_qp *qp = ds->qps;

		ds->qps = qp->next;
		qp_free(qp);
	}
	for (unsigned i = 0; ds->ring && i < ds->count; i++)
		free(ds->ring[(ds->head + i) % ds->rq_size].copy);
	free(ds->ring);
	free(ds->sfree);
	free(ds->sbuf);
	if (ds->fd >= 0)
		close(ds->fd);
	if (ds->epfd >= 0)
		close(ds->epfd);
	if (ds->rx_evfd >= 0)
		close(ds->rx_evfd);
	if (ds->tx_evfd >= 0)
		close(ds->tx_evfd);
	if (ds->stop_fd >= 0)
		close(ds->stop_fd);
	pthread_mutex_destroy(&ds->lock);
	free(ds);
}

/* Buffers and the service thread, before the first bind, connect or
 * send; the UDP socket bound to the wildcard address if it is not bound
 * yet, so that our header's port is its port from the start. Lock held;
 * application threads only (it starts the service thread). */
static int ep_init(struct rds *ds)
{
	union rds_addr a;
	socklen_t al = sizeof(a);
	int ret;

	if (ds->ready)
		return 0;
	if (getsockname(ds->fd, &a.sa, &al))
		return -errno;
	if (!*addr_port(&a)) {
		memset(&a, 0, sizeof(a));
		a.sa.sa_family = (sa_family_t)ds->domain;
		if (bind(ds->fd, &a.sa, addr_len(ds->domain)))
			return -errno;
	}
	/* librdmacm's sizes: a slot of 2,048 bytes per queue entry */
	if (ds->sq_size > RSO_QP_MAX)
		ds->sq_size = RSO_QP_MAX;
	if (ds->rq_size > RSO_QP_MAX)
		ds->rq_size = RSO_QP_MAX;
	if (ds->rq_size > ds->rbuf_size / RDS_MSG_SIZE)
		ds->rq_size = (uint16_t)(ds->rbuf_size / RDS_MSG_SIZE);
	if (ds->sq_size > ds->sbuf_size / RDS_MSG_SIZE)
		ds->sq_size = (uint16_t)(ds->sbuf_size / RDS_MSG_SIZE);
	if (ds->rq_size < 2)
		ds->rq_size = 2;
	if (ds->sq_size < 2)
		ds->sq_size = 2;
	ds->rbuf_size = ds->rq_size * RDS_MSG_SIZE;
	ds->sbuf_size = ds->sq_size * RDS_MSG_SIZE;
	ds->sbuf = calloc(ds->sq_size, RDS_MSG_SIZE);
	ds->sfree = calloc(ds->sq_size, sizeof(*ds->sfree));
	ds->ring = calloc(ds->rq_size, sizeof(*ds->ring));
	if (!ds->sbuf || !ds->sfree || !ds->ring) {
		ret = -ENOMEM;
		goto err;
	}
	for (int i = 0; i < ds->sq_size; i++)
		ds->sfree[i] = (uint16_t)(ds->sq_size - 1 - i);
	ds->nfree = ds->sq_size;
	ret = -pthread_create(&ds->thread, NULL, rds_service, ds);
	if (ret)
		goto err;
	ds->ready = true;
	return 0;
err:
	free(ds->sbuf);
	free(ds->sfree);
	free(ds->ring);
	ds->sbuf = NULL;
	ds->sfree = NULL;
	ds->ring = NULL;
	return ret;
}

/* ---- QPs and destinations (lock held; either thread: the service thread
 * makes the destination, and its QP, of a stranger's first datagram) --- */

static int post_recv(struct rds_qp *qp, uint32_t slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(qp->rbuf + (size_t)slot * RDS_SLOT),
		.length = RDS_SLOT,
		.lkey = qp->rmr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = RSO_WR_RECV | slot, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return -ibv_post_recv(qp->id->qp, &wr, &bad);
}

/* The UD QP for local address src (IP and our UDP port). */
static int qp_create(struct rds *ds, const union rds_addr *src, struct rds_qp **out)
{
	struct ibv_qp_init_attr qa;
	struct ibv_port_attr pa;
	struct epoll_event ev;
	struct rds_qp *qp = calloc(1, sizeof(*qp));
	int ret;

	if (!qp)
		return -ENOMEM;
	qp->addr = *src;
	rds_hdr_encode(&qp->hdr, &src->sa);
	if (rdma_create_id(NULL, &qp->id, qp, RDMA_PS_UDP) ||
	    rdma_bind_addr(qp->id, (struct sockaddr *)&src->sa))
		goto err_errno;
	if (!qp->id->verbs) {
		ret = -ENODEV;
		goto err;
	}
	if (ibv_query_port(qp->id->verbs, qp->id->port_num, &pa)) {
		ret = -EIO;
		goto err;
	}
	qp->link_layer = pa.link_layer;
	qp->lmc = pa.lmc;
	qp->max_msg = 128u << pa.active_mtu;
	if (qp->max_msg > RDS_MSG_SIZE)
		qp->max_msg = RDS_MSG_SIZE;
	qp->comp = ibv_create_comp_channel(qp->id->verbs);
	if (!qp->comp)
		goto err_errno;
	ret = rcm_fd_add_flags(qp->comp->fd, O_NONBLOCK);
	if (ret)
		goto err;
	qp->cq = ibv_create_cq(qp->id->verbs, ds->sq_size + ds->rq_size, qp, qp->comp, 0);
	if (!qp->cq)
		goto err_errno;
	/* armed from the start: a thread already asleep (it armed the QPs
	 * there were) is woken by this one's first completion too */
	if (!ibv_req_notify_cq(qp->cq, 0))
		qp->armed = true;
	memset(&qa, 0, sizeof(qa));
	qa.qp_context = qp;
	qa.send_cq = qa.recv_cq = qp->cq;
	qa.qp_type = IBV_QPT_UD;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = ds->sq_size;
	qa.cap.max_recv_wr = ds->rq_size;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = ds->sq_inline;
	if (rdma_create_qp(qp->id, NULL, &qa))
		goto err_errno;
	qp->inline_max = qa.cap.max_inline_data;
	qp->rbuf = calloc(ds->rq_size, RDS_SLOT);
	if (!qp->rbuf) {
		ret = -ENOMEM;
		goto err;
	}
	qp->rmr = ibv_reg_mr(qp->id->qp->pd, qp->rbuf, (size_t)ds->rq_size * RDS_SLOT,
			     IBV_ACCESS_LOCAL_WRITE);
	qp->smr = ibv_reg_mr(qp->id->qp->pd, ds->sbuf, (size_t)ds->sq_size * RDS_MSG_SIZE, 0);
	if (!qp->rmr || !qp->smr)
		goto err_errno;
	for (uint32_t i = 0; i < ds->rq_size; i++) {
		ret = post_recv(qp, i);
		if (ret)
			goto err;
	}
	ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = qp };
	if (epoll_ctl(ds->epfd, EPOLL_CTL_ADD, qp->comp->fd, &ev))
		goto err_errno;
	qp->next = ds->qps;
	ds->qps = qp;
	*out = qp;
	return 0;
err_errno:
	ret = errno ? -errno : -ENOMEM;
err:
	qp_free(qp);
	return ret;
}

/* Our source address towards to: the UDP socket's, or when that is the
 * wildcard, the address the kernel's routing picks (a UDP socket
 * connected there), with the UDP socket's port. */
static int src_addr(struct rds *ds, const struct sockaddr *to, union rds_addr *src)
{
	socklen_t l = sizeof(*src);
	uint16_t port;
	int s, ret = 0;

	if (getsockname(ds->fd, &src->sa, &l))
		return -errno;
	if (!addr_any(src))
		return 0;
	port = *addr_port(src);
	s = rcm_socket(ds->domain, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	l = sizeof(*src);
	if (connect(s, to, addr_len(ds->domain)) || getsockname(s, &src->sa, &l))
		ret = -errno;
	close(s);
	*addr_port(src) = port;
	return ret;
}

/* FNV-1a over the port and the address. */
static unsigned dest_bucket(const struct sockaddr *to)
{
	const uint8_t *p;
	size_t n;
	uint32_t h = 2166136261u;

	if (to->sa_family == AF_INET) {
		p = (const uint8_t *)&((const struct sockaddr_in *)to)->sin_port;
		n = 6; /* sin_port, sin_addr */
	} else {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)to;

		h = (h ^ (in6->sin6_port & 0xff)) * 16777619u;
		h = (h ^ (in6->sin6_port >> 8)) * 16777619u;
		p = in6->sin6_addr.s6_addr;
		n = 16;
	}
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h % RDS_DEST_BUCKETS;
}

static struct rds_dest *dest_find(struct rds *ds, const struct sockaddr *to)
{
	for (struct rds_dest *d = ds->dests[dest_bucket(to)]; d; d = d->next)
		if (addr_eq(&d->addr, to))
			return d;
	return NULL;
}

/* The destination to, made with its QP when new (to checked already). */
static int dest_get(struct rds *ds, const struct sockaddr *to, struct rds_dest **out)
{
	union rds_addr src;
	struct rds_dest *d = dest_find(ds, to);
	struct rds_qp *qp;
	int ret;

	if (d) {
		*out = d;
		return 0;
	}
	if (ds->ndests >= RDS_MAX_DESTS)
		return -ENOBUFS;
	ret = src_addr(ds, to, &src);
	if (ret)
		return ret;
	for (qp = ds->qps; qp; qp = qp->next)
		if (addr_eq(&qp->addr, &src.sa))
			break;
	if (!qp) {
		ret = qp_create(ds, &src, &qp);
		if (ret)
			return ret;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	memcpy(&d->addr, to, addr_len(ds->domain));
	d->qp = qp;
	d->next = ds->dests[dest_bucket(to)];
	ds->dests[dest_bucket(to)] = d;
	ds->ndests++;
	*out = d;
	return 0;
}

/* ---- completions (lock held; application threads only: the service
 * thread never takes completions) ---------------------------------------- */

/* Notifications taken from the completion channels. */
static void cq_events(struct rds *ds)
{
	struct ibv_cq *cq;
	void *ctx;

	for (struct rds_qp *qp = ds->qps; qp; qp = qp->next)
		while (qp->armed && !ibv_get_cq_event(qp->comp, &cq, &ctx)) {
			ibv_ack_cq_events(cq, 1);
			qp->armed = false;
		}
}

/* A receive's message checked and queued, or its slot posted again. */
static void recv_done(struct rds *ds, struct rds_qp *qp, const struct ibv_wc *wc)
{
	uint32_t slot = (uint32_t)(wc->wr_id & ~RSO_WR_RECV);
	struct sockaddr_storage from;
	uint8_t *m;

	if (slot >= ds->rq_size)
		return;
	m = qp->rbuf + (size_t)slot * RDS_SLOT + RDS_GRH_SIZE;
	if (wc->status == IBV_WC_SUCCESS && wc->byte_len >= RDS_GRH_SIZE &&
	    wc->byte_len <= RDS_SLOT && ds->count < ds->rq_size && ds->readable &&
	    rds_hdr_parse(m, wc->byte_len - RDS_GRH_SIZE, ds->domain, &from) > 0) {
		ds->ring[(ds->head + ds->count++) % ds->rq_size] = (struct rds_msg){
			.qp = qp, .slot = slot, .len = wc->byte_len - RDS_GRH_SIZE };
		return;
	}
	if (wc->status != IBV_WC_WR_FLUSH_ERR)
		post_recv(qp, slot);
}

static void poll_cqs(struct rds *ds)
{
	struct ibv_wc wc[16];
	int n;

	for (struct rds_qp *qp = ds->qps; qp; qp = qp->next)
		while ((n = ibv_poll_cq(qp->cq, 16, wc)) > 0)
			for (int i = 0; i < n; i++) {
				if (wc[i].wr_id & RSO_WR_RECV)
					recv_done(ds, qp, &wc[i]);
				else if (wc[i].wr_id < ds->sq_size && ds->nfree < ds->sq_size) {
					ds->sfree[ds->nfree++] = (uint16_t)wc[i].wr_id;
					if (wc[i].status != IBV_WC_SUCCESS &&
					    wc[i].status != IBV_WC_WR_FLUSH_ERR)
						ds->err = EIO; /* SO_ERROR: a datagram not sent */
				}
			}
	/* every send done: replaced address handles are named by none */
	while (ds->n_old_ahs && ds->nfree == ds->sq_size)
		ibv_destroy_ah(ds->old_ahs[--ds->n_old_ahs]);
	evfd_sync(ds);
}

/* Before sleeping: every CQ asked to notify, then polled once more (a
 * completion between the poll and the request would notify no one). */
static void arm(struct rds *ds)
{
	for (struct rds_qp *qp = ds->qps; qp; qp = qp->next)
		if (!qp->armed && !ibv_req_notify_cq(qp->cq, 0))
			qp->armed = true;
	poll_cqs(ds);
}

static void drive(struct rds *ds)
{
	if (!ds->ready)
		return;
	cq_events(ds);
	poll_cqs(ds);
}

/* Sleep until a completion or evfd says something: lock held on entry
 * and on return, dropped while asleep; application threads only. */
static int wait_unlocked(struct rds *ds, int evfd)
{
	struct pollfd p[2] = {
		{ .fd = ds->epfd, .events = POLLIN },
		{ .fd = evfd, .events = POLLIN },
	};
	int r;

	arm(ds);
	pthread_mutex_unlock(&ds->lock);
	r = poll(p, 2, -1);
	pthread_mutex_lock(&ds->lock);
	return r < 0 ? -errno : 0;
}

/* ---- sending ------------------------------------------------------------ */

static size_t iov_total(const struct iovec *iov, int n)
{
	size_t t = 0;

	for (int i = 0; i < n; i++)
		t += iov[i].iov_len;
	return t;
}

static void iov_gather(uint8_t *dst, const struct iovec *iov, int n)
{
	for (int i = 0; i < n; i++) {
		memcpy(dst, iov[i].iov_base, iov[i].iov_len);
		dst += iov[i].iov_len;
	}
}

/* Over the UDP socket: our header (op, the QP's number and address),
 * then len bytes of data. Lock held (locked) or not; either thread. The
 * destination's address and our header are copied under the lock, which
 * the send itself drops: d is never freed before rds_destroy. */
static ssize_t send_udp(struct rds *ds, struct rds_dest *d, uint8_t op, const uint8_t *data,
			size_t len, int flags, bool locked)
{
	struct rds_udp_hdr u;
	union rds_addr to;
	struct iovec v[2];
	struct msghdr mh = { 0 };
	ssize_t r;

	v[0].iov_base = &u;
	v[0].iov_len = rds_udp_hdr_encode(&u, &d->qp->hdr, op, d->qp->id->qp->qp_num);
	v[1].iov_base = (void *)data;
	v[1].iov_len = len;
	to = d->addr;
	if (locked)
		pthread_mutex_unlock(&ds->lock);
	mh.msg_name = &to;
	mh.msg_namelen = addr_len(ds->domain);
	mh.msg_iov = v;
	mh.msg_iovlen = len ? 2 : 1;
	r = sendmsg(ds->fd, &mh, flags | MSG_NOSIGNAL);
	if (locked)
		pthread_mutex_lock(&ds->lock);
	if (r < 0)
		return -errno;
	return r >= (ssize_t)v[0].iov_len ? r - (ssize_t)v[0].iov_len : -EIO;
}

ssize_t rds_sendmsg(struct rds *ds, const struct iovec *iov, int iovcnt, int flags,
		    const struct sockaddr *to, socklen_t tolen)
{
	uint8_t data[RDS_MSG_SIZE];
	struct rds_dest *d;
	size_t len;
	ssize_t ret;
	bool nb;

	if (iovcnt < 0 || (iovcnt && !iov))
		return -EINVAL;
	if (to) {
		ret = addr_check(ds, to, tolen);
		if (ret)
			return ret;
	}
	len = iov_total(iov, iovcnt);
	if (len > RDS_MSG_SIZE - RDS_HDR6_LEN)
		return -EMSGSIZE;
	pthread_mutex_lock(&ds->lock);
	nb = ds->nonblock || (flags & MSG_DONTWAIT);
	if (!ds->writable) {
		ret = -EPIPE;
		goto out;
	}
	if (!to && !ds->conn) {
		ret = -EDESTADDRREQ;
		goto out;
	}
	ret = ep_init(ds);
	if (ret)
		goto out;
	if (to) {
		ret = dest_get(ds, to, &d);
		if (ret)
			goto out;
	} else {
		d = ds->conn;
	}
	if (len + d->qp->hdr.length > d->qp->max_msg) {
		ret = -EMSGSIZE;
		goto out;
	}
	iov_gather(data, iov, iovcnt);
	if (!d->ah) {
		ret = send_udp(ds, d, RDS_UDP_OP_DATA, data, len,
			       (flags & MSG_DONTWAIT) | (ds->nonblock ? MSG_DONTWAIT : 0), true);
		goto out;
	}
	for (;;) {
		drive(ds);
		if (ds->nfree || !ds->writable)
			break;
		if (nb) {
			ret = -EWOULDBLOCK;
			goto out;
		}
		ds->send_waiters++;
		ret = wait_unlocked(ds, ds->tx_evfd);
		ds->send_waiters--;
		if (ret)
			goto out;
	}
	if (!ds->writable) {
		ret = -EPIPE;
		goto out;
	}
	{
		uint16_t slot = ds->sfree[--ds->nfree];
		uint8_t *m = ds->sbuf + (size_t)slot * RDS_MSG_SIZE;
		struct ibv_sge sge = {
			.addr = (uintptr_t)m,
			.length = (uint32_t)(d->qp->hdr.length + len),
			.lkey = d->qp->smr->lkey,
		};
		struct ibv_send_wr wr = {
			.wr_id = RDS_WR_SEND | slot,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = IBV_WR_SEND,
			.send_flags = sge.length <= d->qp->inline_max ? IBV_SEND_INLINE : 0,
		};
		struct ibv_send_wr *bad;
		int r;

		wr.wr.ud.ah = d->ah;
		wr.wr.ud.remote_qpn = d->qpn;
		wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
		memcpy(m, &d->qp->hdr, d->qp->hdr.length);
		memcpy(m + d->qp->hdr.length, data, len);
		r = ibv_post_send(d->qp->id->qp, &wr, &bad);
		if (r) {
			ds->sfree[ds->nfree++] = slot;
			ret = -r;
		} else {
			ret = (ssize_t)len;
		}
	}
out:
	evfd_sync(ds);
	pthread_mutex_unlock(&ds->lock);
	return ret;
}

/* ---- receiving ---------------------------------------------------------- */

static void copy_from(struct sockaddr *dst, socklen_t *len, const struct sockaddr_storage *src)
{
	socklen_t sz = addr_len(src->ss_family);

	if (!dst || !len)
		return;
	memcpy(dst, src, *len < sz ? *len : sz);
	*len = sz;
}

ssize_t rds_recvmsg(struct rds *ds, const struct iovec *iov, int iovcnt, int flags,
		    struct sockaddr *from, socklen_t *fromlen)
{
	struct sockaddr_storage src;
	struct rds_msg *m;
	const uint8_t *p, *data;
	size_t dlen, done = 0;
	ssize_t ret;
	int hl;

	if (iovcnt < 0 || (iovcnt && !iov))
		return -EINVAL;
	if (from && !fromlen)
		return -EFAULT; /* as recvfrom(2) */
	pthread_mutex_lock(&ds->lock);
	for (;;) {
		drive(ds);
		if (ds->count)
			break;
		if (!ds->readable) {
			ret = 0;
			goto out;
		}
		if (ds->nonblock || (flags & MSG_DONTWAIT)) {
			ret = -EWOULDBLOCK;
			goto out;
		}
		ret = wait_unlocked(ds, ds->rx_evfd);
		if (ret)
			goto out;
	}
	m = &ds->ring[ds->head];
	p = m->copy ? m->copy : m->qp->rbuf + (size_t)m->slot * RDS_SLOT + RDS_GRH_SIZE;
	hl = rds_hdr_parse(p, m->len, ds->domain, &src); /* checked when queued */
	if (hl < 0)
		hl = (int)m->len;
	data = p + hl;
	dlen = m->len - (size_t)hl;
	for (int i = 0; i < iovcnt && done < dlen; i++) {
		size_t n = iov[i].iov_len < dlen - done ? iov[i].iov_len : dlen - done;

		memcpy(iov[i].iov_base, data + done, n);
		done += n;
	}
	copy_from(from, fromlen, &src);
	ret = (flags & MSG_TRUNC) ? (ssize_t)dlen : (ssize_t)done;
	if (!(flags & MSG_PEEK)) {
		if (m->copy)
			free(m->copy);
		else
			post_recv(m->qp, m->slot);
		*m = (struct rds_msg){ 0 };
		ds->head = (ds->head + 1) % ds->rq_size;
		ds->count--;
	}
out:
	evfd_sync(ds);
	pthread_mutex_unlock(&ds->lock);
	return ret;
}

/* ---- the service thread: the UDP side channel -------------------------- */

/* Address attributes towards peer from a route resolved by this
 * library's rdma_cm from our QP's address (local). Service thread, lock
 * not held (resolution may wait up to RDS_RESOLVE_MS twice); qp's fields
 * read here never change after qp_create. */
static int make_ah_attr(struct rds *ds, const union rds_addr *local, const union rds_addr *peer,
			const struct rds_qp *qp, struct ibv_ah_attr *ah)
{
	struct rdma_cm_id *rid;
	union rds_addr src = *local;
	const struct ibv_sa_path_rec *pr;
	int ret = 0;

	if (rdma_create_id(NULL, &rid, NULL, RDMA_PS_UDP))
		return -errno;
	*addr_port(&src) = 0;
	if (rdma_resolve_addr(rid, &src.sa, (struct sockaddr *)&peer->sa, RDS_RESOLVE_MS) ||
	    rdma_resolve_route(rid, RDS_RESOLVE_MS)) {
		ret = -errno;
		goto out;
	}
	if (rid->verbs != qp->id->verbs || rid->port_num != qp->id->port_num) {
		ret = -EHOSTUNREACH;
		goto out;
	}
	pr = rid->route.num_paths ? rid->route.path_rec : NULL;
	memset(ah, 0, sizeof(*ah));
	ah->port_num = qp->id->port_num;
	if (qp->link_layer == IBV_LINK_LAYER_ETHERNET) {
		/* RoCE: always global (the destination's GID from the route,
		 * our GID's index, the route's hop limit), as the kernel's
		 * ib_init_ah_attr_from_path makes RoCE addresses */
		ah->is_global = 1;
		memcpy(ah->grh.dgid.raw, rid->route.addr.addr.ibaddr.dgid.raw, 16);
		ah->grh.sgid_index = rcm_id_of(rid)->sgid_index;
		ah->grh.hop_limit = pr && pr->hop_limit ? pr->hop_limit : 64;
		ah->grh.traffic_class = ds->ip_tos ? (uint8_t)ds->ip_tos
					: pr ? pr->traffic_class : 0;
		ah->grh.flow_label = pr ? be32toh(pr->flow_label) : 0;
		ah->sl = pr ? pr->sl : 0;
	} else if (pr) {
		/* InfiniBand, as librdmacm: the path's LIDs, a GRH past a router */
		ah->dlid = be16toh(pr->dlid);
		ah->sl = pr->sl;
		ah->src_path_bits = (uint8_t)(be16toh(pr->slid) & ((1u << qp->lmc) - 1));
		ah->static_rate = pr->rate;
		if (pr->hop_limit > 1) {
			ah->is_global = 1;
			ah->grh.dgid = pr->dgid;
			ah->grh.sgid_index = rcm_id_of(rid)->sgid_index;
			ah->grh.hop_limit = pr->hop_limit;
			ah->grh.traffic_class = pr->traffic_class;
			ah->grh.flow_label = be32toh(pr->flow_label);
		}
	} else {
		ret = -EHOSTUNREACH;
	}
out:
	rdma_destroy_id(rid);
	return ret;
}

/* The address handle of d for QP number qpn. Service thread; takes the
 * lock itself (not across the resolution). The one it replaces is
 * destroyed when no send is in flight, else kept until then. */
static void learn_qpn(struct rds *ds, struct rds_dest *d, uint32_t qpn)
{
	union rds_addr local, peer;
	struct ibv_ah_attr attr;
	struct rds_qp *qp;
	struct ibv_ah *ah;

	pthread_mutex_lock(&ds->lock);
	qp = d->qp;
	local = qp->addr;
	peer = d->addr;
	pthread_mutex_unlock(&ds->lock);
	/* the route resolved without the lock: it may wait */
	if (make_ah_attr(ds, &local, &peer, qp, &attr))
		return;
	ah = ibv_create_ah(qp->id->qp->pd, &attr);
	if (!ah)
		return;
	pthread_mutex_lock(&ds->lock);
	/* no send in flight (every slot free): no work request names a
	 * replaced handle any more */
	if (ds->nfree == ds->sq_size) {
		while (ds->n_old_ahs)
			ibv_destroy_ah(ds->old_ahs[--ds->n_old_ahs]);
		if (d->ah)
			ibv_destroy_ah(d->ah);
	} else if (d->ah) {
		if (ds->n_old_ahs == RDS_MAX_OLD_AHS) { /* a peer that keeps changing */
			pthread_mutex_unlock(&ds->lock);
			ibv_destroy_ah(ah);
			return;
		}
		ds->old_ahs[ds->n_old_ahs++] = d->ah;
	}
	d->ah = ah;
	d->qpn = qpn;
	pthread_mutex_unlock(&ds->lock);
}

/* One datagram from the UDP socket. Service thread; takes the lock. */
static void udp_one(struct rds *ds)
{
	uint8_t buf[RDS_UDP_HDR6_LEN + RDS_MSG_SIZE];
	union rds_addr from;
	socklen_t fl = sizeof(from);
	struct rds_dest *d;
	uint32_t qpn;
	uint8_t op;
	ssize_t n;
	int hl;
	bool need_ah;

	n = recvfrom(ds->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC, &from.sa, &fl);
	if (n < 0 || (size_t)n > sizeof(buf) || from.sa.sa_family != ds->domain)
		return;
	hl = rds_udp_hdr_parse(buf, (size_t)n, from.sa.sa_family, &op, &qpn);
	if (hl < 0)
		return;
	pthread_mutex_lock(&ds->lock);
	if (dest_get(ds, &from.sa, &d)) {
		pthread_mutex_unlock(&ds->lock);
		return;
	}
	/* data: tell the sender our QP's number, so it sends over the QPs */
	if (op == RDS_UDP_OP_DATA)
		send_udp(ds, d, RDS_UDP_OP_CTRL, NULL, 0, MSG_DONTWAIT, true);
	need_ah = !d->ah || d->qpn != qpn;
	pthread_mutex_unlock(&ds->lock);
	if (need_ah)
		learn_qpn(ds, d, qpn);
	if (op != RDS_UDP_OP_DATA)
		return;
	/* the data queued as if they had come over our QP: the sender's UDP
	 * address in our header in front */
	pthread_mutex_lock(&ds->lock);
	if (ds->readable && ds->count < ds->rq_size &&
	    (size_t)(n - hl) + d->qp->hdr.length <= RDS_MSG_SIZE) {
		struct rds_hdr h;
		uint8_t *c;

		rds_hdr_encode(&h, &from.sa);
		c = malloc(h.length + (size_t)(n - hl));
		if (c) {
			memcpy(c, &h, h.length);
			memcpy(c + h.length, buf + hl, (size_t)(n - hl));
			ds->ring[(ds->head + ds->count++) % ds->rq_size] = (struct rds_msg){
				.copy = c, .len = (uint32_t)(h.length + (size_t)(n - hl)) };
			evfd_sync(ds);
		}
	}
	pthread_mutex_unlock(&ds->lock);
}

/* The service thread: the UDP socket's datagrams until rds_destroy
 * writes stop_fd. Takes lock (never sleeps with it). */
static void *rds_service(void *arg)
{
	struct rds *ds = arg;

	for (;;) {
		struct pollfd p[2] = {
			{ .fd = ds->fd, .events = POLLIN },
			{ .fd = ds->stop_fd, .events = POLLIN },
		};

		if (poll(p, 2, -1) < 0)
			continue;
		if (p[1].revents)
			return NULL;
		if (p[0].revents & POLLIN)
			udp_one(ds);
	}
}

/* ---- the other calls ---------------------------------------------------- */

int rds_bind(struct rds *ds, const struct sockaddr *sa, socklen_t len)
{
	int ret = addr_check(ds, sa, len);

	if (ret)
		return ret;
	pthread_mutex_lock(&ds->lock);
	if (ds->ready)
		ret = -EINVAL; /* bound already (by a send or connect) */
	else if (bind(ds->fd, sa, len))
		ret = -errno;
	else
		ret = ep_init(ds);
	pthread_mutex_unlock(&ds->lock);
	return ret;
}

int rds_connect(struct rds *ds, const struct sockaddr *sa, socklen_t len)
{
	struct rds_dest *d;
	int ret = addr_check(ds, sa, len);

	if (ret)
		return ret;
	pthread_mutex_lock(&ds->lock);
	ret = ep_init(ds);
	if (!ret)
		ret = dest_get(ds, sa, &d);
	if (!ret && connect(ds->fd, sa, len))
		ret = -errno;
	if (!ret)
		ds->conn = d;
	pthread_mutex_unlock(&ds->lock);
	return ret;
}

/* The UDP socket's names, as librdmacm gives them. */
int rds_getsockname(struct rds *ds, struct sockaddr *sa, socklen_t *len)
{
	if (!len || (!sa && *len))
		return -EFAULT;
	return getsockname(ds->fd, sa, len) ? -errno : 0;
}

int rds_getpeername(struct rds *ds, struct sockaddr *sa, socklen_t *len)
{
	if (!len || (!sa && *len))
		return -EFAULT;
	return getpeername(ds->fd, sa, len) ? -errno : 0;
}

/* As librdmacm keeps them for datagrams: every option but SOL_RDMA's goes
 * to the UDP socket first (its refusal is the answer); the buffer sizes
 * (doubled, as the kernel's) and queue sizes count until the first bind,
 * connect or send; the rest are remembered for rgetsockopt. */
int rds_setsockopt(struct rds *ds, int level, int name, const void *v, socklen_t l)
{
	int val = 0, ret;

	if (level != SOL_RDMA && setsockopt(ds->fd, level, name, v, l))
		return -errno;
	if (level != SOL_SOCKET || name != SO_LINGER) {
		ret = rcm_opt_get_int(v, l, &val);
		if (ret && level == SOL_RDMA)
			return ret;
	}
	pthread_mutex_lock(&ds->lock);
	ret = 0;
	switch (level) {
	case SOL_SOCKET:
		if (name == SO_RCVBUF && !ds->ready && val > 0)
			ds->rbuf_size = (uint32_t)val << 1;
		else if (name == SO_SNDBUF && !ds->ready && val > 0)
			ds->sbuf_size = (uint32_t)val << 1;
		else if (name == SO_REUSEADDR || name == SO_BROADCAST)
			ds->so_opts = val ? ds->so_opts | (1ull << name) : ds->so_opts & ~(1ull << name);
		break;
	case IPPROTO_IP:
		if (name == IP_TOS)
			ds->ip_tos = val & 0xff;
		break;
	case IPPROTO_IPV6:
		if (name == IPV6_V6ONLY)
			ds->ipv6_opts = val ? ds->ipv6_opts | (1ull << name)
					    : ds->ipv6_opts & ~(1ull << name);
		break;
	case SOL_RDMA:
		if (ds->ready) {
			ret = -EINVAL;
			break;
		}
		if (val < 0) {
			ret = -EINVAL;
			break;
		}
		switch (name) {
		case RDMA_SQSIZE:
			ds->sq_size = (uint16_t)(val > RSO_QP_MAX ? RSO_QP_MAX : val);
			break;
		case RDMA_RQSIZE:
			ds->rq_size = (uint16_t)(val > RSO_QP_MAX ? RSO_QP_MAX : val);
			break;
		case RDMA_INLINE:
			ds->sq_inline = (uint16_t)(val > RSO_QP_MAX ? RSO_QP_MAX : val);
			break;
		default:
			ret = -ENOTSUP;
		}
		break;
	}
	pthread_mutex_unlock(&ds->lock);
	return ret;
}

int rds_getsockopt(struct rds *ds, int level, int name, void *v, socklen_t *l)
{
	int ret = -ENOTSUP;

	pthread_mutex_lock(&ds->lock);
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR:
		case SO_BROADCAST:
			ret = rcm_opt_put_int(v, l, !!(ds->so_opts & (1ull << name)));
			break;
		case SO_RCVBUF:
			ret = rcm_opt_put_int(v, l, (int)ds->rbuf_size);
			break;
		case SO_SNDBUF:
			ret = rcm_opt_put_int(v, l, (int)ds->sbuf_size);
			break;
		case SO_TYPE:
			ret = rcm_opt_put_int(v, l, SOCK_DGRAM);
			break;
		case SO_ERROR:
			ret = rcm_opt_put_int(v, l, ds->err);
			if (!ret)
				ds->err = 0;
			break;
		}
		break;
	case IPPROTO_IP:
		if (name == IP_TOS)
			ret = rcm_opt_put_int(v, l, ds->ip_tos);
		break;
	case IPPROTO_IPV6:
		if (name == IPV6_V6ONLY)
			ret = rcm_opt_put_int(v, l, !!(ds->ipv6_opts & (1ull << name)));
		break;
	case SOL_RDMA:
		switch (name) {
		case RDMA_SQSIZE:
			ret = rcm_opt_put_int(v, l, ds->sq_size);
			break;
		case RDMA_RQSIZE:
			ret = rcm_opt_put_int(v, l, ds->rq_size);
			break;
		case RDMA_INLINE:
			ret = rcm_opt_put_int(v, l, ds->sq_inline);
			break;
		}
		break;
	}
	pthread_mutex_unlock(&ds->lock);
	return ret;
}

int rds_fcntl(struct rds *ds, int cmd, int arg)
{
	int ret = 0;

	pthread_mutex_lock(&ds->lock);
	switch (cmd) {
	case F_GETFL:
		ret = ds->fs_flags;
		break;
	case F_SETFL:
		ds->fs_flags = arg;
		ds->nonblock = !!(arg & O_NONBLOCK);
		break;
	case F_GETFD:
		ret = ds->fd_flags;
		break;
	case F_SETFD:
		if (fcntl(ds->fd, F_SETFD, arg & FD_CLOEXEC))
			ret = -errno;
		else
			ds->fd_flags = arg;
		break;
	default:
		ret = -ENOTSUP;
	}
	pthread_mutex_unlock(&ds->lock);
	return ret;
}

int rds_shutdown(struct rds *ds, int how)
{
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	pthread_mutex_lock(&ds->lock);
	if (how != SHUT_WR)
		ds->readable = false;
	if (how != SHUT_RD)
		ds->writable = false;
	evfd_sync(ds); /* wakes the threads asleep in a call */
	pthread_mutex_unlock(&ds->lock);
	return 0;
}

short rds_poll(struct rds *ds, short events)
{
	short rev = 0;

	pthread_mutex_lock(&ds->lock);
	drive(ds);
	if ((events & POLLIN) && (ds->count || !ds->readable))
		rev |= POLLIN;
	/* before the first send there is nothing to wait for */
	if ((events & POLLOUT) && (!ds->ready || ds->nfree || !ds->writable))
		rev |= POLLOUT;
	if (!ds->readable && !ds->writable)
		rev |= POLLHUP;
	pthread_mutex_unlock(&ds->lock);
	return rev;
}

int rds_wait_begin(struct rds *ds, short events, struct pollfd *w)
{
	int n = 0;

	pthread_mutex_lock(&ds->lock);
	if (ds->ready) {
		cq_events(ds);
		arm(ds);
		w[n++] = (struct pollfd){ .fd = ds->epfd, .events = POLLIN };
	}
	if (events & POLLIN)
		w[n++] = (struct pollfd){ .fd = ds->rx_evfd, .events = POLLIN };
	if (events & POLLOUT) {
		ds->send_waiters++;
		w[n++] = (struct pollfd){ .fd = ds->tx_evfd, .events = POLLIN };
	}
	evfd_sync(ds);
	pthread_mutex_unlock(&ds->lock);
	return n;
}

void rds_wait_end(struct rds *ds, short events)
{
	if (!(events & POLLOUT))
		return;
	pthread_mutex_lock(&ds->lock);
	ds->send_waiters--;
	evfd_sync(ds);
	pthread_mutex_unlock(&ds->lock);
}
