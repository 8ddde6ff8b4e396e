/* SPDX-License-Identifier: MIT */
/*
 * cmtime-floor: the floor under bench/rdmacm-cmtime.sh. A client and a
 * server shaped as Debian's cmtime (rdmacm-utils 44) that set up and tear
 * down the same RC QPs with the verbs calls librdmacm makes for them, and
 * exchange the messages a CM connection exchanges - REQ, REP, RTU, then
 * DREQ, DREP, 256 bytes each as MADs are - over one UDP socket per process
 * instead of through any CM. What a stack costs above this program is what
 * its CM costs (docs/benchmarks.md, "librdmacm on libcep: cmtime").
 *
 *   cmtime-floor [-p PORT] [-c N] [-R FILE]            server
 *   cmtime-floor -s SERVER_IPV4 [-p PORT] [-c N] [-t MS]  client
 *
 * Per connection, on each side (librdmacm 44's calls, without its
 * rdma_init_qp_attr and event round trips):
 *   create qp   ibv_create_qp_ex (RC, 1 WR and 1 SGE each way), ibv_query_ece,
 *               ibv_modify_qp INIT; the process's first QP also makes two
 *               completion channels and two CQs that every later QP shares
 *               (rdma_create_qp writes the CQs it made into cmtime's one
 *               ibv_qp_init_attr), on one PD per device.
 *   connect     ibv_modify_qp INIT again, RTR, RTS (ucma_modify_qp_rtr/rts),
 *               from the QPN and PSN the other side sent.
 *   disconnect  ibv_modify_qp ERR, ibv_destroy_qp.
 * and 5 datagrams of 256 bytes: REQ, REP, RTU, DREQ, DREP. Address
 * resolution is a route lookup per connection (connect and getsockname on
 * one UDP socket kept for it) and the source address's RoCE v2 GID found in
 * the GID tables read at start, as a CM's address cache would; route
 * resolution on RoCE sends nothing (the path comes from the two GIDs, the
 * port's MTU and hop limit 64), so it only fills the path in memory; create
 * id has nothing to create.
 *
 * Threads and order as cmtime's: the client's main thread runs each step
 * over all N connections (connect sends all N REQs before it waits) and
 * waits for the step with sched_yield, timing each step and each
 * connection with gettimeofday; a receiving thread answers each REP (the
 * QP to RTS, the RTU) and counts each DREP, as cmtime's event thread
 * (librdmacm moves the QP and sends the RTU inside rdma_get_cm_event). The
 * server's main thread receives and hands each REQ to a request thread
 * (QP, INIT, RTR, RTS, REP) and each DREQ to a disconnect thread (ERR,
 * DREP, destroy), through a mutex and condition variable each, as cmtime's
 * server does with its events. The client prints cmtime's per-step table
 * (total ms, max ms, min us, us / conn) and a line of message counts, and
 * exits 0 only when every connection was set up and released; the server
 * runs until killed, or with -c N exits 0 after releasing N.
 *
 * UDP has no retransmission of its own, and the server answers a REQ only
 * once its QP is ready (milliseconds each in the guests, while the client
 * sends all N at once): both sockets get a receive buffer for 16,384 of
 * them (SO_RCVBUFFORCE as root) so none is dropped. Should one be lost
 * anyway, a client that has heard nothing for -t ms (default 2000, doubled
 * after each try, 5 tries) sends the step's unanswered messages again;
 * the server answers a repeated REQ with its REP, a DREQ it has no
 * connection for with a DREP, and the client's line counts every
 * retransmission (0 in a clean run: the floor is then exactly 5 packets).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

enum msg_type { M_REQ = 1, M_REP, M_RTU, M_REJ, M_DREQ, M_DREP };

#define FLOOR_MAGIC 0x434d5446u /* "CMTF" */
#define MAD_SIZE 256

/* One message: a MAD's size on the wire, the fields a CM's REQ/REP carry
 * for RC (QPN, PSN, path MTU, retry counts, both GIDs), in network order. */
struct wire {
	uint32_t magic;
	uint8_t type;
	uint8_t mtu;
	uint8_t retry;
	uint8_t rnr_retry;
	uint32_t run;   /* the client's nonce: a stale message of an earlier run is ignored */
	uint32_t conn;  /* the client's index of the connection */
	uint32_t qpn;
	uint32_t psn;
	uint8_t sgid[16]; /* the sender's GID */
	uint8_t dgid[16]; /* the receiver's, as the sender resolved it */
	uint8_t pad[MAD_SIZE - 56];
};
_Static_assert(sizeof(struct wire) == MAD_SIZE, "a message is a MAD's 256 bytes");

/* ---- devices and the GID tables read at start ---------------------------- */

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	/* the CQs the process's first QP makes, shared by all (librdmacm) */
	struct ibv_comp_channel *ch[2];
	struct ibv_cq *cq[2];
	pthread_mutex_t lk;
};

struct gident {
	struct dev *dev;
	uint8_t port;
	uint8_t index;
	enum ibv_mtu mtu;
	struct in_addr addr;
	union ibv_gid gid;
};

static struct dev *devs;
static struct gident *gids;
static int ndevs, ngids;

/* Every RoCE v2 GID of every active Ethernet port that holds an IPv4
 * address (::ffff:a.b.c.d), read once, as librdmacm reads its devices. */
static int read_gids(void)
{
	struct ibv_device **list;
	int n;

	list = ibv_get_device_list(&n);
	if (!list || n <= 0) {
		fprintf(stderr, "cmtime-floor: no RDMA device\n");
		return -1;
	}
	devs = calloc((size_t)n, sizeof(*devs));
	if (!devs)
		return -1;
	for (int d = 0; d < n; d++) {
		struct ibv_device_attr da;
		struct dev *v = &devs[ndevs];

		v->ctx = ibv_open_device(list[d]);
		if (!v->ctx || ibv_query_device(v->ctx, &da)) {
			if (v->ctx)
				ibv_close_device(v->ctx);
			continue;
		}
		pthread_mutex_init(&v->lk, NULL);
		ndevs++;
		for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
			struct ibv_port_attr pa;
			struct ibv_gid_entry *e;
			ssize_t k;

			if (ibv_query_port(v->ctx, p, &pa) || pa.state != IBV_PORT_ACTIVE ||
			    pa.link_layer != IBV_LINK_LAYER_ETHERNET || pa.gid_tbl_len <= 0)
				continue;
			e = calloc((size_t)pa.gid_tbl_len, sizeof(*e));
			if (!e)
				return -1;
			k = ibv_query_gid_table(v->ctx, e, (size_t)pa.gid_tbl_len, 0);
			for (ssize_t i = 0; i < k; i++) {
				struct gident *g;
				const uint8_t *r = e[i].gid.raw;
				static const uint8_t v4[12] = { [10] = 0xff, [11] = 0xff };

				if (e[i].port_num != p || e[i].gid_type != IBV_GID_TYPE_ROCE_V2 ||
				    memcmp(r, v4, sizeof(v4)) != 0 || e[i].gid_index > 255)
					continue;
				g = realloc(gids, (size_t)(ngids + 1) * sizeof(*gids));
				if (!g)
					return -1;
				gids = g;
				g = &gids[ngids++];
				g->dev = v;
				g->port = p;
				g->index = (uint8_t)e[i].gid_index;
				g->mtu = pa.active_mtu;
				g->gid = e[i].gid;
				memcpy(&g->addr, r + 12, 4);
			}
			free(e);
		}
	}
	ibv_free_device_list(list);
	if (!ngids) {
		fprintf(stderr, "cmtime-floor: no RoCE v2 GID with an IPv4 address\n");
		return -1;
	}
	return 0;
}

static struct gident *gid_of_addr(struct in_addr a)
{
	for (int i = 0; i < ngids; i++)
		if (gids[i].addr.s_addr == a.s_addr)
			return &gids[i];
	return NULL;
}

static struct gident *gid_of_raw(const uint8_t *raw)
{
	struct in_addr a;

	memcpy(&a, raw + 12, 4);
	return gid_of_addr(a);
}

/* ---- the verbs calls of one connection ------------------------------------ */

/* rdma_create_qp: the device's PD (librdmacm allocates it at the device's
 * first use), the shared CQs on the process's first QP, the QP, ECE, INIT. */
static struct ibv_qp *qp_create(struct gident *g)
{
	struct dev *v = g->dev;
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = g->port,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ };
	struct ibv_ece ece;
	struct ibv_qp *qp;

	pthread_mutex_lock(&v->lk);
	if (!v->pd)
		v->pd = ibv_alloc_pd(v->ctx);
	for (int i = 0; v->pd && i < 2; i++) {
		if (v->cq[i])
			continue;
		v->ch[i] = ibv_create_comp_channel(v->ctx);
		v->cq[i] = v->ch[i] ? ibv_create_cq(v->ctx, 1, NULL, v->ch[i], 0) : NULL;
	}
	pthread_mutex_unlock(&v->lk);
	if (!v->pd || !v->cq[0] || !v->cq[1])
		return NULL;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.send_cq = v->cq[1];
	a.recv_cq = v->cq[0];
	a.cap.max_send_wr = a.cap.max_recv_wr = 1;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = v->pd;
	qp = ibv_create_qp_ex(v->ctx, &a);
	if (!qp)
		return NULL;
	/* librdmacm's init_ece; rxe has no ECE (EOPNOTSUPP, no system call) */
	(void)ibv_query_ece(qp, &ece);
	if (ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS)) {
		ibv_destroy_qp(qp);
		return NULL;
	}
	return qp;
}

/* ucma_modify_qp_rtr and _rts: INIT again, RTR to the peer, RTS. */
static int qp_ready(struct ibv_qp *qp, const struct gident *g, const uint8_t *dgid,
		    enum ibv_mtu mtu, uint32_t dqpn, uint32_t rpsn, uint32_t spsn,
		    uint8_t retry, uint8_t rnr_retry)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = g->port,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 0;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = g->port;
	a.ah_attr.grh.sgid_index = g->index;
	a.ah_attr.grh.hop_limit = 64;
	memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = spsn;
	a.timeout = 18; /* rdma_cm's on RoCE: packet life time 16, plus one */
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* rdma_disconnect's QP to ERR (InfiniBand and RoCE) */
static int qp_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

/* ---- the socket ----------------------------------------------------------- */

static int sock;

/* Room for 16,384 queued messages: a datagram's buffer, not its 256 bytes,
 * is what the receive buffer counts. */
static void sock_buffers(void)
{
	int sz = 64 << 20;

	if (setsockopt(sock, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}

static atomic_ulong n_sent, n_received, n_repeated;

static void send_msg(const struct wire *w, const struct sockaddr_in *to)
{
	if (sendto(sock, w, sizeof(*w), 0, (const struct sockaddr *)to, sizeof(*to)) ==
	    (ssize_t)sizeof(*w))
		atomic_fetch_add_explicit(&n_sent, 1, memory_order_relaxed);
	else
		perror("cmtime-floor: sendto");
}

static uint32_t psn_new(void)
{
	return (uint32_t)lrand48() & 0xffffff;
}

/* ---- server --------------------------------------------------------------- */

enum sstate { S_QUEUED, S_REP_SENT, S_CLOSING };

struct sconn {
	struct sconn *next;  /* hash chain */
	struct sconn *qnext; /* work queue */
	struct sockaddr_in peer;
	uint32_t run, conn;  /* the key, with peer */
	enum sstate state;
	struct wire in;      /* the REQ */
	struct wire rep;     /* kept for a repeated REQ */
	struct gident *g;
	struct ibv_qp *qp;
};

#define SBUCKETS (1u << 16)
static struct sconn *stab[SBUCKETS];
static pthread_mutex_t stab_lk = PTHREAD_MUTEX_INITIALIZER;

static unsigned skey(const struct sockaddr_in *p, uint32_t run, uint32_t conn)
{
	uint32_t h = conn * 2654435761u ^ run ^ p->sin_addr.s_addr ^ p->sin_port;

	return (h ^ h >> 16) & (SBUCKETS - 1);
}

/* Caller holds stab_lk. */
static struct sconn **slookup(const struct sockaddr_in *p, uint32_t run, uint32_t conn)
{
	struct sconn **pp = &stab[skey(p, run, conn)];

	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->conn == conn && (*pp)->run == run &&
		    (*pp)->peer.sin_addr.s_addr == p->sin_addr.s_addr &&
		    (*pp)->peer.sin_port == p->sin_port)
			break;
	return pp;
}

/* A worker's FIFO, as cmtime's request and disconnect lists: the receiving
 * thread signals only when the list was empty. */
struct workq {
	pthread_mutex_t lk;
	pthread_cond_t cv;
	struct sconn *head, **tail;
};

static struct workq reqq = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, &reqq.head };
static struct workq discq = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, &discq.head };

static void wq_put(struct workq *q, struct sconn *c)
{
	int was_empty;

	pthread_mutex_lock(&q->lk);
	was_empty = !q->head;
	c->qnext = NULL;
	*q->tail = c;
	q->tail = &c->qnext;
	pthread_mutex_unlock(&q->lk);
	if (was_empty)
		pthread_cond_signal(&q->cv);
}

static struct sconn *wq_get(struct workq *q)
{
	struct sconn *c;

	pthread_mutex_lock(&q->lk);
	while (!q->head)
		pthread_cond_wait(&q->cv, &q->lk);
	c = q->head;
	q->head = c->qnext;
	if (!q->head)
		q->tail = &q->head;
	pthread_mutex_unlock(&q->lk);
	return c;
}

static long exit_after;  /* -c on the server: exit 0 after releasing this many */
static long released;

static void reply(const struct wire *in, const struct sockaddr_in *to, enum msg_type t)
{
	struct wire w;

	memset(&w, 0, sizeof(w));
	w.magic = htonl(FLOOR_MAGIC);
	w.type = (uint8_t)t;
	w.run = in->run;
	w.conn = in->conn;
	send_msg(&w, to);
}

static void sconn_drop(struct sconn *c)
{
	struct sconn **pp;

	pthread_mutex_lock(&stab_lk);
	pp = slookup(&c->peer, c->run, c->conn);
	if (*pp == c)
		*pp = c->next;
	pthread_mutex_unlock(&stab_lk);
	free(c);
}

/* cmtime's request thread: rdma_create_qp, rdma_accept (RTR, RTS, REP). */
static void *server_req_thread(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "floor-req");
	for (;;) {
		struct sconn *c = wq_get(&reqq);
		const struct wire *in = &c->in;
		enum ibv_mtu mtu = (enum ibv_mtu)in->mtu;

		c->g = gid_of_raw(in->dgid);
		if (!c->g)
			fprintf(stderr, "cmtime-floor: connection %u: no local GID is the REQ's destination\n",
				ntohl(in->conn));
		else if (mtu < IBV_MTU_256 || mtu > c->g->mtu)
			mtu = c->g->mtu;
		c->qp = c->g ? qp_create(c->g) : NULL;
		memset(&c->rep, 0, sizeof(c->rep));
		c->rep.magic = htonl(FLOOR_MAGIC);
		c->rep.run = in->run;
		c->rep.conn = in->conn;
		c->rep.psn = htonl(psn_new());
		if (!c->qp || qp_ready(c->qp, c->g, in->sgid, mtu, ntohl(in->qpn), ntohl(in->psn),
				       ntohl(c->rep.psn), in->retry, in->rnr_retry)) {
			if (c->g)
				fprintf(stderr, "cmtime-floor: connection %u: QP not ready: %s\n",
					ntohl(in->conn), strerror(errno));
			if (c->qp)
				ibv_destroy_qp(c->qp);
			reply(in, &c->peer, M_REJ);
			sconn_drop(c);
			continue;
		}
		c->rep.type = M_REP;
		c->rep.mtu = (uint8_t)mtu;
		c->rep.qpn = htonl(c->qp->qp_num);
		memcpy(c->rep.sgid, c->g->gid.raw, 16);
		memcpy(c->rep.dgid, in->sgid, 16);
		pthread_mutex_lock(&stab_lk);
		c->state = S_REP_SENT;
		pthread_mutex_unlock(&stab_lk);
		send_msg(&c->rep, &c->peer);
	}
	return NULL;
}

/* cmtime's disconnect thread: rdma_disconnect (ERR, DREP), rdma_destroy_qp. */
static void *server_disc_thread(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "floor-disc");
	for (;;) {
		struct sconn *c = wq_get(&discq);

		if (qp_error(c->qp))
			fprintf(stderr, "cmtime-floor: connection %u: QP to ERR failed\n",
				ntohl(c->conn));
		reply(&c->in, &c->peer, M_DREP);
		ibv_destroy_qp(c->qp);
		sconn_drop(c);
		if (exit_after && ++released == exit_after) {
			printf("server: %ld connections set up and released; messages sent %lu received %lu repeated %lu\n",
			       released, atomic_load(&n_sent), atomic_load(&n_received),
			       atomic_load(&n_repeated));
			fflush(stdout);
			_exit(0);
		}
	}
	return NULL;
}

static int run_server(uint16_t port, const char *ready)
{
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_ANY) };
	pthread_t t1, t2;
	int one = 1;

	setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(sock, (struct sockaddr *)&me, sizeof(me))) {
		perror("cmtime-floor: bind");
		return 1;
	}
	if (pthread_create(&t1, NULL, server_req_thread, NULL) ||
	    pthread_create(&t2, NULL, server_disc_thread, NULL)) {
		fprintf(stderr, "cmtime-floor: cannot start the server's threads\n");
		return 1;
	}
	if (ready) {
		int fd = open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

		if (fd < 0) {
			perror(ready);
			return 1;
		}
		close(fd);
	}
	printf("listening on UDP port %u\n", port);
	fflush(stdout);
	for (;;) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		struct sconn **pp, *c;
		struct wire w;
		ssize_t r = recvfrom(sock, &w, sizeof(w), 0, (struct sockaddr *)&from, &fl);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			perror("cmtime-floor: recvfrom");
			return 1;
		}
		if (r != (ssize_t)sizeof(w) || w.magic != htonl(FLOOR_MAGIC))
			continue;
		atomic_fetch_add_explicit(&n_received, 1, memory_order_relaxed);
		pthread_mutex_lock(&stab_lk);
		pp = slookup(&from, w.run, w.conn);
		c = *pp;
		switch (w.type) {
		case M_REQ:
			if (c) {
				/* a repeat: the REP again once sent; queued: it comes */
				atomic_fetch_add_explicit(&n_repeated, 1, memory_order_relaxed);
				if (c->state == S_REP_SENT)
					send_msg(&c->rep, &c->peer);
				break;
			}
			c = calloc(1, sizeof(*c));
			if (!c)
				break; /* the requester repeats it */
			c->peer = from;
			c->run = w.run;
			c->conn = w.conn;
			c->in = w;
			c->state = S_QUEUED;
			*pp = c;
			pthread_mutex_unlock(&stab_lk);
			wq_put(&reqq, c);
			continue;
		case M_RTU:
			break; /* established: nothing to do, as cmtime's server */
		case M_DREQ:
			if (!c) {
				/* released already, or never known: a DREP, as a CM answers */
				pthread_mutex_unlock(&stab_lk);
				atomic_fetch_add_explicit(&n_repeated, 1, memory_order_relaxed);
				reply(&w, &from, M_DREP);
				continue;
			}
			if (c->state != S_REP_SENT) {
				atomic_fetch_add_explicit(&n_repeated, 1, memory_order_relaxed);
				break;
			}
			c->state = S_CLOSING;
			pthread_mutex_unlock(&stab_lk);
			wq_put(&discq, c);
			continue;
		default:
			break;
		}
		pthread_mutex_unlock(&stab_lk);
	}
}

/* ---- client --------------------------------------------------------------- */

enum step {
	STEP_CREATE_ID,
	STEP_RESOLVE_ADDR,
	STEP_RESOLVE_ROUTE,
	STEP_CREATE_QP,
	STEP_CONNECT,
	STEP_DISCONNECT,
	STEP_DESTROY,
	STEP_CNT
};

/* cmtime's step names: bench/rdmacm-cmtime.sh matches the rows by them */
static const char *const step_name[STEP_CNT] = {
	"create id", "resolve addr", "resolve route", "create qp",
	"connect", "disconnect", "destroy",
};

enum cstate { C_IDLE, C_REQ_SENT, C_ESTABLISHED, C_DREQ_SENT, C_DONE, C_FAILED };

struct node {
	_Atomic int state;
	struct gident *g;
	struct ibv_qp *qp;
	uint8_t dgid[16];
	enum ibv_mtu mtu;
	uint32_t psn;
	struct timeval t[STEP_CNT][2];
};

static struct node *nodes;
static long nconn = 100;
static struct timeval step_t[STEP_CNT][2];
static struct sockaddr_in server;
static uint32_t run_id;
static atomic_long completed[STEP_CNT];
static _Atomic int phase = -1; /* the step whose messages are in flight */
static _Atomic int give_up, quit;
static atomic_ulong n_retransmitted;
static int timeout_ms = 2000;

static void client_msg(struct wire *w, enum msg_type t, long i)
{
	struct node *n = &nodes[i];

	memset(w, 0, sizeof(*w));
	w->magic = htonl(FLOOR_MAGIC);
	w->type = (uint8_t)t;
	w->run = htonl(run_id);
	w->conn = htonl((uint32_t)i);
	if (t == M_REQ) {
		w->mtu = (uint8_t)n->mtu;
		w->retry = 2;     /* cmtime's retry_count */
		w->rnr_retry = 0; /* and its rnr_retry_count, not set */
		w->qpn = htonl(n->qp->qp_num);
		w->psn = htonl(n->psn);
		memcpy(w->sgid, n->g->gid.raw, 16);
		memcpy(w->dgid, n->dgid, 16);
	}
}

/* The messages of the step in flight that have no answer yet, again. */
static void retransmit(void)
{
	int p = atomic_load(&phase);
	int want = p == STEP_CONNECT ? C_REQ_SENT : C_DREQ_SENT;
	struct wire w;

	if (p != STEP_CONNECT && p != STEP_DISCONNECT)
		return;
	for (long i = 0; i < nconn; i++) {
		if (atomic_load(&nodes[i].state) != want)
			continue;
		client_msg(&w, p == STEP_CONNECT ? M_REQ : M_DREQ, i);
		send_msg(&w, &server);
		atomic_fetch_add(&n_retransmitted, 1);
	}
}

static void node_done(long i, enum step s, int ok)
{
	if (ok) /* a failed one ends the wait too, untimed */
		gettimeofday(&nodes[i].t[s][1], NULL);
	atomic_fetch_add(&completed[s], 1);
}

/* cmtime's event thread: each REP moves its QP to RTS and sends the RTU
 * (librdmacm does both inside rdma_get_cm_event), each DREP ends a
 * disconnect. The receive timeout (a quarter of -t) only drives the
 * retransmissions. */
static void *client_recv_thread(void *arg)
{
	unsigned long seen = 0;
	int idle = 0, limit = timeout_ms, tries = 0;

	(void)arg;
	pthread_setname_np(pthread_self(), "floor-recv");
	while (!atomic_load(&quit)) {
		struct wire w, rtu;
		long i;
		int st;
		ssize_t r = recv(sock, &w, sizeof(w), 0);

		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			unsigned long now = atomic_load(&n_received);
			int p = atomic_load(&phase);

			if (now != seen || (p != STEP_CONNECT && p != STEP_DISCONNECT)) {
				seen = now;
				idle = 0;
				limit = timeout_ms;
				tries = 0;
				continue;
			}
			idle += timeout_ms / 4;
			if (idle < limit)
				continue;
			if (++tries > 5) {
				atomic_store(&give_up, 1);
				continue;
			}
			retransmit();
			idle = 0;
			limit *= 2;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			perror("cmtime-floor: recv");
			atomic_store(&give_up, 1);
			return NULL;
		}
		if (r != (ssize_t)sizeof(w) || w.magic != htonl(FLOOR_MAGIC) ||
		    ntohl(w.run) != run_id || ntohl(w.conn) >= (uint32_t)nconn)
			continue;
		atomic_fetch_add_explicit(&n_received, 1, memory_order_relaxed);
		i = (long)ntohl(w.conn);
		st = atomic_load(&nodes[i].state);
		switch (w.type) {
		case M_REP:
			if (st == C_ESTABLISHED) {
				/* our RTU was lost: again */
				atomic_fetch_add_explicit(&n_repeated, 1, memory_order_relaxed);
				client_msg(&rtu, M_RTU, i);
				send_msg(&rtu, &server);
			}
			if (st != C_REQ_SENT)
				break;
			if (qp_ready(nodes[i].qp, nodes[i].g, w.sgid, nodes[i].mtu, ntohl(w.qpn),
				     ntohl(w.psn), nodes[i].psn, 2, 0)) {
				fprintf(stderr, "cmtime-floor: connection %ld: QP not ready: %s\n",
					i, strerror(errno));
				atomic_store(&nodes[i].state, C_FAILED);
				node_done(i, STEP_CONNECT, 0);
				break;
			}
			atomic_store(&nodes[i].state, C_ESTABLISHED);
			client_msg(&rtu, M_RTU, i);
			send_msg(&rtu, &server);
			node_done(i, STEP_CONNECT, 1);
			break;
		case M_REJ:
			if (st != C_REQ_SENT)
				break;
			fprintf(stderr, "cmtime-floor: connection %ld rejected\n", i);
			atomic_store(&nodes[i].state, C_FAILED);
			node_done(i, STEP_CONNECT, 0);
			break;
		case M_DREP:
			if (st != C_DREQ_SENT) {
				atomic_fetch_add_explicit(&n_repeated, 1, memory_order_relaxed);
				break;
			}
			atomic_store(&nodes[i].state, C_DONE);
			node_done(i, STEP_DISCONNECT, 1);
			break;
		default:
			break;
		}
	}
	return NULL;
}

static double us_between(const struct timeval *a, const struct timeval *b)
{
	return (b->tv_sec - a->tv_sec) * 1e6 + (b->tv_usec - a->tv_usec);
}

/* cmtime's table: the step's total, the slowest and fastest connection,
 * the total per connection. */
static void show_steps(void)
{
	printf("step              total ms     max ms     min us  us / conn\n");
	for (int s = 0; s < STEP_CNT; s++) {
		double max = 0, min = 0, tot = us_between(&step_t[s][0], &step_t[s][1]);
		int any = 0;

		for (long i = 0; i < nconn; i++) {
			const struct timeval *t = nodes[i].t[s];
			double us;

			if (!t[0].tv_sec || !t[1].tv_sec)
				continue;
			us = us_between(&t[0], &t[1]);
			if (!any || us > max)
				max = us;
			if (!any || us < min)
				min = us;
			any = 1;
		}
		printf("%-13s: %11.2f%11.2f%11.2f%11.2f\n", step_name[s], tot / 1000.,
		       max / 1000., min, tot / (double)nconn);
	}
}

/* Wait for a step's answers as cmtime does (yielding), or until the
 * receiving thread gives up on a silent peer. */
static void wait_step(enum step s, long started)
{
	while (atomic_load(&completed[s]) < started && !atomic_load(&give_up))
		sched_yield();
}

static int run_client(const char *addr, uint16_t port)
{
	struct timeval tmo = { .tv_sec = timeout_ms / 4 / 1000,
			       .tv_usec = timeout_ms / 4 % 1000 * 1000 };
	struct sockaddr_in me = { .sin_family = AF_INET };
	pthread_t rx;
	long started, bad = 0;
	int look;

	server.sin_family = AF_INET;
	server.sin_port = htons(port);
	if (inet_pton(AF_INET, addr, &server.sin_addr) != 1) {
		fprintf(stderr, "cmtime-floor: %s is not an IPv4 address\n", addr);
		return 2;
	}
	nodes = calloc((size_t)nconn, sizeof(*nodes));
	look = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (!nodes || look < 0 ||
	    bind(sock, (struct sockaddr *)&me, sizeof(me)) ||
	    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo))) {
		perror("cmtime-floor: client setup");
		return 1;
	}
	if (pthread_create(&rx, NULL, client_recv_thread, NULL)) {
		fprintf(stderr, "cmtime-floor: cannot start the receiving thread\n");
		return 1;
	}

	/* create id: a CM id has nothing to stand for here */
	printf("create id\n");
	gettimeofday(&step_t[STEP_CREATE_ID][0], NULL);
	for (long i = 0; i < nconn; i++) {
		gettimeofday(&nodes[i].t[STEP_CREATE_ID][0], NULL);
		atomic_init(&nodes[i].state, C_IDLE);
		gettimeofday(&nodes[i].t[STEP_CREATE_ID][1], NULL);
	}
	gettimeofday(&step_t[STEP_CREATE_ID][1], NULL);

	/* resolve addr: the route's source address, and its GID */
	printf("resolve addr\n");
	gettimeofday(&step_t[STEP_RESOLVE_ADDR][0], NULL);
	for (long i = 0; i < nconn; i++) {
		struct sockaddr_in src;
		socklen_t sl = sizeof(src);
		struct node *n = &nodes[i];

		gettimeofday(&n->t[STEP_RESOLVE_ADDR][0], NULL);
		if (connect(look, (struct sockaddr *)&server, sizeof(server)) ||
		    getsockname(look, (struct sockaddr *)&src, &sl) ||
		    !(n->g = gid_of_addr(src.sin_addr))) {
			fprintf(stderr, "cmtime-floor: no RoCE GID routes to %s\n", addr);
			return 1;
		}
		gettimeofday(&n->t[STEP_RESOLVE_ADDR][1], NULL);
	}
	gettimeofday(&step_t[STEP_RESOLVE_ADDR][1], NULL);

	/* resolve route: on RoCE the path is the two GIDs and the port's MTU */
	printf("resolve route\n");
	gettimeofday(&step_t[STEP_RESOLVE_ROUTE][0], NULL);
	for (long i = 0; i < nconn; i++) {
		struct node *n = &nodes[i];

		gettimeofday(&n->t[STEP_RESOLVE_ROUTE][0], NULL);
		n->dgid[10] = n->dgid[11] = 0xff;
		memcpy(&n->dgid[12], &server.sin_addr, 4);
		n->mtu = n->g->mtu;
		gettimeofday(&n->t[STEP_RESOLVE_ROUTE][1], NULL);
	}
	gettimeofday(&step_t[STEP_RESOLVE_ROUTE][1], NULL);

	printf("create qp\n");
	gettimeofday(&step_t[STEP_CREATE_QP][0], NULL);
	for (long i = 0; i < nconn; i++) {
		struct node *n = &nodes[i];

		gettimeofday(&n->t[STEP_CREATE_QP][0], NULL);
		n->qp = qp_create(n->g);
		if (!n->qp) {
			fprintf(stderr, "cmtime-floor: connection %ld: no QP: %s\n", i,
				strerror(errno));
			return 1;
		}
		n->psn = psn_new();
		gettimeofday(&n->t[STEP_CREATE_QP][1], NULL);
	}
	gettimeofday(&step_t[STEP_CREATE_QP][1], NULL);

	/* connect: all N REQs, then the answers (the receiving thread) */
	printf("connect\n");
	atomic_store(&phase, STEP_CONNECT);
	gettimeofday(&step_t[STEP_CONNECT][0], NULL);
	started = 0;
	for (long i = 0; i < nconn; i++) {
		struct wire w;

		client_msg(&w, M_REQ, i);
		gettimeofday(&nodes[i].t[STEP_CONNECT][0], NULL);
		atomic_store(&nodes[i].state, C_REQ_SENT);
		send_msg(&w, &server);
		started++;
	}
	wait_step(STEP_CONNECT, started);
	gettimeofday(&step_t[STEP_CONNECT][1], NULL);

	/* disconnect: ERR, DREQ, destroy the QP; then the DREPs */
	printf("disconnect\n");
	atomic_store(&phase, STEP_DISCONNECT);
	gettimeofday(&step_t[STEP_DISCONNECT][0], NULL);
	started = 0;
	for (long i = 0; i < nconn; i++) {
		struct node *n = &nodes[i];
		struct wire w;

		if (atomic_load(&n->state) != C_ESTABLISHED)
			continue;
		gettimeofday(&n->t[STEP_DISCONNECT][0], NULL);
		if (qp_error(n->qp))
			fprintf(stderr, "cmtime-floor: connection %ld: QP to ERR failed\n", i);
		client_msg(&w, M_DREQ, i);
		atomic_store(&n->state, C_DREQ_SENT);
		send_msg(&w, &server);
		ibv_destroy_qp(n->qp);
		n->qp = NULL;
		started++;
	}
	wait_step(STEP_DISCONNECT, started);
	gettimeofday(&step_t[STEP_DISCONNECT][1], NULL);
	atomic_store(&phase, -1);

	/* destroy: no id to destroy; the shared CQs go with the last QP */
	printf("destroy\n");
	gettimeofday(&step_t[STEP_DESTROY][0], NULL);
	for (long i = 0; i < nconn; i++) {
		gettimeofday(&nodes[i].t[STEP_DESTROY][0], NULL);
		if (nodes[i].qp) {
			ibv_destroy_qp(nodes[i].qp);
			nodes[i].qp = NULL;
		}
		gettimeofday(&nodes[i].t[STEP_DESTROY][1], NULL);
	}
	for (int d = 0; d < ndevs; d++)
		for (int k = 0; k < 2; k++) {
			if (devs[d].cq[k])
				ibv_destroy_cq(devs[d].cq[k]);
			if (devs[d].ch[k])
				ibv_destroy_comp_channel(devs[d].ch[k]);
		}
	gettimeofday(&step_t[STEP_DESTROY][1], NULL);

	atomic_store(&quit, 1);
	pthread_join(rx, NULL);
	close(look);
	show_steps();
	for (long i = 0; i < nconn; i++)
		bad += atomic_load(&nodes[i].state) != C_DONE;
	/* no colon: the bench's summary takes "name: numbers" lines for steps */
	printf("floor messages sent %lu received %lu retransmitted %lu repeated %lu; connections %ld released %ld failed %ld\n",
	       atomic_load(&n_sent), atomic_load(&n_received), atomic_load(&n_retransmitted),
	       atomic_load(&n_repeated), nconn, nconn - bad, bad);
	if (bad)
		fprintf(stderr, "cmtime-floor: %ld of %ld connections were not set up and released%s\n",
			bad, nconn, atomic_load(&give_up) ? " (the server went silent)" : "");
	return bad ? 1 : 0;
}

static void usage(const char *me)
{
	fprintf(stderr,
		"usage: %s [-p PORT] [-c N] [-R FILE]                 server\n"
		"       %s -s SERVER_IPV4 [-p PORT] [-c N] [-t MS]    client\n"
		"  -p  UDP port (default 7471, cmtime's)\n"
		"  -c  connections (client, default 100); server: exit after releasing N\n"
		"  -R  server: create FILE once it listens\n"
		"  -t  client: ms of silence before unanswered messages are sent again (2000)\n",
		me, me);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *dst = NULL, *ready = NULL;
	long port = 7471, c = -1;
	int op;

	while ((op = getopt(argc, argv, "s:c:p:t:R:")) != -1) {
		switch (op) {
		case 's': dst = optarg; break;
		case 'c': c = strtol(optarg, NULL, 0); break;
		case 'p': port = strtol(optarg, NULL, 0); break;
		case 't': timeout_ms = atoi(optarg); break;
		case 'R': ready = optarg; break;
		default: usage(argv[0]);
		}
	}
	if (optind != argc || port <= 0 || port > 65535 || c == 0 || c < -1 ||
	    c > 1000000 || timeout_ms < 4)
		usage(argv[0]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	srand48((long)getpid() ^ (long)time(NULL));
	if (read_gids())
		return 1;
	sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0) {
		perror("cmtime-floor: socket");
		return 1;
	}
	sock_buffers();
	if (!dst) {
		exit_after = c > 0 ? c : 0;
		return run_server((uint16_t)port, ready);
	}
	if (c > 0)
		nconn = c;
	run_id = (uint32_t)mrand48();
	return run_client(dst, (uint16_t)port);
}
