/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep: stream rsockets (SOCK_STREAM), on the wire as
 * librdmacm's own, so that a libcep rsocket talks to one of Debian's
 * librdmacm (docs/rdmacm.md, "rsockets").
 *
 * The protocol (librdmacm's rsocket.c defines it; this is a separate
 * implementation of it): an RC connection made through this library's
 * rdma_cm, whose REQ and REP carry 40 bytes of connection data (version 1,
 * byte-order flag, receive credits, where the peer may write its buffer
 * grants - a two-entry SGL - and the first half of the receive buffer).
 * Data go as RDMA writes with immediate into the ring the peer granted; the
 * immediate says what the write was (bit 31-29 the operation, the rest the
 * length, the credit sequence or the control code). The receiver grants
 * half its ring at a time by writing an SGE into the sender's SGL, and
 * message credits (the receive queue) by a 16-bit sequence number.
 * Control messages (grants, shutdown, disconnect) have four slots of their
 * own in the send queue.
 *
 * The rsocket's number is its CM event channel's descriptor, a real
 * descriptor of the process, so rpoll and rselect tell rsockets from
 * other descriptors; every descriptor underneath (the event channel, the
 * completion channel) is non-blocking, and a blocking call waits in
 * poll(2) on them.
 *
 * Guarantees: a thread sending and one receiving on one rsocket go on
 * side by side (slock and rlock serialise each direction; cq_lock the
 * completion queue, the counters and the state); any of them may sleep
 * on the completion channel, and whichever takes completions wakes the
 * others through an eventfd (librdmacm lets one sleep at a time instead);
 * rshutdown from another thread wakes them too. Connection setup is
 * serialised by slock. Lock order: slock or rlock, map_lock, then
 * cq_lock; the keepalive thread's ka_mtx before cq_lock. Closing an
 * rsocket while another thread uses it is the caller's error, as close(2)
 * of a descriptor in use. Bad arguments are -1 and errno, nothing
 * changed. riomap'ed memory is written by the peer's riowrite into the
 * table entry our connection data announced. Keepalives come from one
 * thread of the process (below). Datagram rsockets (SOCK_DGRAM) are
 * rsocket_dgram.c's: an rsocket whose ds is set is one, and every call
 * below hands it there first.
 */
#include <endian.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/ib.h>
#include <rdma/rsocket.h>

#include "core/clock.h"
#include "rdmacm.h"
#include "rsocket_dgram.h"
#include "rsocket_wire.h"

/* CLOCK_MONOTONIC in milliseconds (rpoll's timeout, keepalive deadlines). */
static int64_t now_ms(void)
{
	return (int64_t)cep_clock_ms(NULL);
}

/* A local riomap: the memory registered, the offset the peer names it by,
 * its slot in the peer's table (-1: not remotely writable). */
struct rso_iomr {
	uint64_t offset;
	struct ibv_mr *mr;
	int index;
	bool queued; /* not yet written into the peer's table */
};

/* States, ordered as librdmacm's: passive, opening, connected, closed. */
enum {
	RSO_INIT = 0,
	RSO_BOUND = 0x0001,
	RSO_LISTENING = 0x0002,
	RSO_OPENING = 0x0004,
	RSO_RESOLVING_ADDR = RSO_OPENING | 0x0010,
	RSO_RESOLVING_ROUTE = RSO_OPENING | 0x0020,
	RSO_CONNECTING = RSO_OPENING | 0x0040,
	RSO_ACCEPTING = RSO_OPENING | 0x0080,
	RSO_CONNECTED = 0x0100,
	RSO_WRITABLE = 0x0200,
	RSO_READABLE = 0x0400,
	RSO_RDWR = RSO_CONNECTED | RSO_WRITABLE | RSO_READABLE,
	RSO_CONNECT_ERROR = 0x0800,
	RSO_DISCONNECTED = 0x1000,
	RSO_ERROR = 0x2000,
};

struct rso_rmsg {
	uint32_t op, data;
};

struct rso {
	int fd; /* the event channel's descriptor: the rsocket's number */
	struct rds *ds; /* a datagram rsocket (its UDP socket's number): the
			   rest unused */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	pthread_mutex_t slock, rlock, cq_lock;
	/* Threads asleep in process_cq (cq_lock), and the eventfd that wakes
	 * them when another thread made progress for them: a sender's send
	 * completions taken by the receiving thread, or the state changed
	 * (the race: a waiter sleeping on a completion another thread already
	 * consumed). Readable from the first progress seen with a waiter until
	 * the last waiter leaves. */
	int waiters;
	int wake_fd;

	/* Read anywhere (rpoll, a sender while a receiver works the CQ);
	 * written under slock while opening, under cq_lock once connected:
	 * atomic so that a reader without the lock sees a whole value (the
	 * race: rpoll's look at a state the receiving thread changes). */
	_Atomic int state;
	_Atomic int err; /* SO_ERROR */
	bool nonblock;
	int fs_flags, fd_flags;
	bool swap_sgl;
	int retries;
	struct sockaddr_storage dst;
	void *route; /* RDMA_ROUTE: ibv_path_data given before connect */
	socklen_t route_len;

	/* options, for rgetsockopt */
	uint64_t so_opts, tcp_opts, ipv6_opts;
	int ip_tos;
	int keepalive_time; /* seconds; 0 until SO_KEEPALIVE or TCP_KEEPIDLE */
	bool keepalive;     /* in the keepalive list (ka_mtx) */

	/* sizes, fixed once the QP exists */
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline;
	uint16_t target_iomap_size; /* entries of our I/O map table */

	/* the connection's resources */
	struct ibv_comp_channel *comp;
	struct ibv_cq *cq;
	bool cq_armed;
	unsigned unack_cqe;
	uint8_t *sbuf, *rbuf;
	struct ibv_mr *smr, *rmr, *target_mr;
	volatile struct rso_sge *target_sgl; /* the peer's grants to us */
	volatile struct rso_iomap *target_iomap; /* the peer's riomaps, after it */
	struct rso_rmsg *rmsg;                /* rq_size + 1 */
	int rmsg_head, rmsg_tail;

	/* sending */
	unsigned ctrl_seqno, ctrl_max_seqno;
	uint16_t sseq_no, sseq_comp;
	int target_sge;
	int sqe_avail;
	uint32_t sbuf_bytes_avail;
	uint64_t sbuf_next; /* where the next write's copy goes in sbuf */
	struct rso_sge remote_sgl; /* the peer's grant table */
	int remote_sge;
	struct rso_sge remote_iomap; /* the peer's I/O map table (length: entries) */

	/* riomap: local mappings, under map_lock (taken after slock) */
	pthread_mutex_t map_lock;
	struct rso_iomr *iomrs;
	int niomrs;

	/* receiving */
	uint16_t rseq_no, rseq_comp;
	uint32_t rbuf_bytes_avail, rbuf_free_offset, rbuf_offset;
};

/* Control writes that cannot go inline take a slot past sbuf_size. */
#define RSO_CTRL_AREA (sizeof(struct rso_sge) * RSO_CTRL_SLOTS)

/* ---- defaults: librdmacm's, and its configuration files ---------------- */

static uint16_t def_inline = 64, def_sqsize = 384, def_rqsize = 384;
static uint32_t def_mem = 1u << 17, def_wmem = 1u << 17;
static pthread_once_t conf_once = PTHREAD_ONCE_INIT;

/* One number from /etc/rdma/rsocket/NAME (librdmacm's configuration
 * directory), or def when there is none. */
static unsigned long conf_read(const char *name, unsigned long def, unsigned long max)
{
	char path[128];
	unsigned long v;
	FILE *f;

	snprintf(path, sizeof(path), "/etc/rdma/rsocket/%s", name);
	f = fopen(path, "re");
	if (!f)
		return def;
	if (fscanf(f, "%lu", &v) != 1 || v > max)
		v = def;
	fclose(f);
	return v;
}

static void conf_load(void)
{
	def_inline = (uint16_t)conf_read("inline_default", def_inline, UINT16_MAX);
	def_sqsize = (uint16_t)conf_read("sqsize_default", def_sqsize, UINT16_MAX);
	def_rqsize = (uint16_t)conf_read("rqsize_default", def_rqsize, UINT16_MAX);
	def_mem = (uint32_t)conf_read("mem_default", def_mem, UINT32_MAX >> 2);
	def_wmem = (uint32_t)conf_read("wmem_default", def_wmem, UINT32_MAX >> 2);
	if (def_mem < 1)
		def_mem = 1;
	if (def_wmem < RSO_SNDLOWAT)
		def_wmem = RSO_SNDLOWAT << 1;
}

/* ---- descriptor -> rsocket --------------------------------------------- */

/* Two levels of 1,024 slots: descriptors below 1,048,576 (the kernel's
 * nr_open default). Insert and remove under tbl_mtx; lookups read the
 * slot with acquire, pairing with the release store of a fully made
 * rsocket (the race: a lookup seeing a half-initialised one). */
#define TBL_L1 1024
#define TBL_L2 1024
static _Atomic(struct rso *) *tbl[TBL_L1];
static pthread_mutex_t tbl_mtx = PTHREAD_MUTEX_INITIALIZER;

static struct rso *rso_get(int fd)
{
	_Atomic(struct rso *) *page;

	if (fd < 0 || fd >= TBL_L1 * TBL_L2)
		return NULL;
	page = __atomic_load_n(&tbl[fd / TBL_L2], __ATOMIC_ACQUIRE);
	return page ? atomic_load_explicit(&page[fd % TBL_L2], memory_order_acquire) : NULL;
}

/* A datagram call's result (a count, 0 or a negative errno) as the
 * calls return it: -1 and errno. */
static ssize_t ds_ret(ssize_t r)
{
	return r < 0 ? rcm_err((int)-r) : r;
}

static int ret_err(int r)
{
	return r < 0 ? rcm_err(-r) : r;
}

static int rso_insert(struct rso *rs)
{
	int fd = rs->fd, ret = 0;

	if (fd < 0 || fd >= TBL_L1 * TBL_L2)
		return -EMFILE;
	pthread_mutex_lock(&tbl_mtx);
	if (!tbl[fd / TBL_L2]) {
		_Atomic(struct rso *) *page = calloc(TBL_L2, sizeof(*page));

		if (page)
			__atomic_store_n(&tbl[fd / TBL_L2], page, __ATOMIC_RELEASE);
		else
			ret = -ENOMEM;
	}
	if (!ret)
		atomic_store_explicit(&tbl[fd / TBL_L2][fd % TBL_L2], rs, memory_order_release);
	pthread_mutex_unlock(&tbl_mtx);
	return ret;
}

static void rso_remove(struct rso *rs)
{
	pthread_mutex_lock(&tbl_mtx);
	if (rso_get(rs->fd) == rs)
		atomic_store_explicit(&tbl[rs->fd / TBL_L2][rs->fd % TBL_L2], NULL,
				      memory_order_release);
	pthread_mutex_unlock(&tbl_mtx);
}

/* ---- making and freeing ------------------------------------------------ */

static struct rso *rso_alloc(const struct rso *from)
{
	struct rso *rs = calloc(1, sizeof(*rs));

	if (!rs)
		return NULL;
	rs->fd = -1;
	pthread_mutex_init(&rs->slock, NULL);
	pthread_mutex_init(&rs->rlock, NULL);
	pthread_mutex_init(&rs->cq_lock, NULL);
	rs->wake_fd = -1;
	pthread_mutex_init(&rs->map_lock, NULL);
	if (from) {
		rs->target_iomap_size = from->target_iomap_size;
		rs->sbuf_size = from->sbuf_size;
		rs->rbuf_size = from->rbuf_size;
		rs->sq_inline = from->sq_inline;
		rs->sq_size = from->sq_size;
		rs->rq_size = from->rq_size;
		rs->nonblock = from->nonblock;
		rs->fs_flags = from->fs_flags;
		rs->fd_flags = from->fd_flags;
	} else {
		pthread_once(&conf_once, conf_load);
		rs->sbuf_size = def_wmem;
		rs->rbuf_size = def_mem;
		rs->sq_inline = def_inline;
		rs->sq_size = def_sqsize;
		rs->rq_size = def_rqsize;
	}
	rs->ctrl_max_seqno = RSO_CTRL_SLOTS;
	return rs;
}

/* A new event channel for rs, non-blocking, close-on-exec as asked; its
 * descriptor becomes the rsocket's number. */
static int rso_channel(struct rso *rs)
{
	int ret;

	rs->ch = rdma_create_event_channel();
	if (!rs->ch)
		return -errno;
	ret = rcm_fd_add_flags(rs->ch->fd, O_NONBLOCK);
	if (!ret && (rs->fd_flags & FD_CLOEXEC) && fcntl(rs->ch->fd, F_SETFD, FD_CLOEXEC))
		ret = -errno;
	rs->fd = rs->ch->fd;
	return ret;
}

static void ka_remove(struct rso *rs);

static void rso_free(struct rso *rs)
{
	ka_remove(rs); /* before anything goes: the keepalive thread's posts */
	if (rs->fd >= 0)
		rso_remove(rs);
	if (rs->ds)
		rds_destroy(rs->ds); /* closes the descriptor, after the removal */
	for (int i = 0; i < rs->niomrs; i++)
		if (rs->iomrs[i].mr)
			ibv_dereg_mr(rs->iomrs[i].mr);
	free(rs->iomrs);
	if (rs->id) {
		if (rs->id->qp)
			rdma_destroy_qp(rs->id);
		rdma_destroy_id(rs->id);
	}
	if (rs->cq) {
		if (rs->unack_cqe)
			ibv_ack_cq_events(rs->cq, rs->unack_cqe);
		ibv_destroy_cq(rs->cq);
	}
	if (rs->comp)
		ibv_destroy_comp_channel(rs->comp);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->target_mr)
		ibv_dereg_mr(rs->target_mr);
	free(rs->sbuf);
	free(rs->rbuf);
	free((void *)rs->target_sgl);
	free(rs->rmsg);
	free(rs->route);
	if (rs->ch)
		rdma_destroy_event_channel(rs->ch);
	pthread_mutex_destroy(&rs->slock);
	pthread_mutex_destroy(&rs->rlock);
	pthread_mutex_destroy(&rs->cq_lock);
	if (rs->wake_fd >= 0)
		close(rs->wake_fd);
	pthread_mutex_destroy(&rs->map_lock);
	free(rs);
}

static void *page_alloc(size_t len)
{
	void *p = NULL;
	long pg = sysconf(_SC_PAGESIZE);

	if (posix_memalign(&p, pg > 0 ? (size_t)pg : 4096, len))
		return NULL;
	memset(p, 0, len);
	return p;
}

static int post_recv(struct rso *rs)
{
	struct ibv_recv_wr wr = { .wr_id = RSO_WR_RECV }, *bad;

	return -ibv_post_recv(rs->id->qp, &wr, &bad);
}

/* The completion queue, the QP and the buffers of a connection; receives
 * posted. Called with slock held (connect) or before the rsocket is
 * visible (accept). */
static int rso_create_ep(struct rso *rs)
{
	struct ibv_device_attr da;
	struct ibv_qp_init_attr qa;
	uint32_t max = RSO_QP_MAX, sb;
	size_t tlen;
	struct ibv_cq *cq;
	int ret, i;

	if (!rs->id->verbs || !rs->id->pd)
		return -ENODEV;
	if (!ibv_query_device(rs->id->verbs, &da) && (uint32_t)da.max_qp_wr < max)
		max = (uint32_t)da.max_qp_wr;
	if (rs->sq_size > max)
		rs->sq_size = (uint16_t)max;
	else if (rs->sq_size < RSO_QP_MIN)
		rs->sq_size = RSO_QP_MIN;
	if (rs->rq_size > max)
		rs->rq_size = (uint16_t)max;
	else if (rs->rq_size < RSO_QP_MIN)
		rs->rq_size = RSO_QP_MIN;

	rs->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (rs->wake_fd < 0)
		return -errno;
	rs->comp = ibv_create_comp_channel(rs->id->verbs);
	if (!rs->comp)
		return -errno;
	ret = rcm_fd_add_flags(rs->comp->fd, O_NONBLOCK);
	if (ret)
		return ret;
	cq = ibv_create_cq(rs->id->verbs, rs->sq_size + rs->rq_size, rs, rs->comp, 0);
	if (!cq)
		return -errno;
	/* rpoll reads rs->cq under cq_lock (the race: a poller seeing the
	 * CQ of a connection another thread is making) */
	pthread_mutex_lock(&rs->cq_lock);
	rs->cq = cq;
	pthread_mutex_unlock(&rs->cq_lock);

	memset(&qa, 0, sizeof(qa));
	qa.qp_context = rs;
	qa.send_cq = rs->cq;
	qa.recv_cq = rs->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = rs->sq_size;
	qa.cap.max_recv_wr = rs->rq_size;
	qa.cap.max_send_sge = 2;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = rs->sq_inline;
	if (rdma_create_qp(rs->id, NULL, &qa))
		return -errno;
	rs->sq_inline = (uint16_t)(qa.cap.max_inline_data > 0xffff ? 0xffff
								    : qa.cap.max_inline_data);

	rs->rmsg = calloc((size_t)rs->rq_size + 1, sizeof(*rs->rmsg));
	sb = rs->sbuf_size + RSO_CTRL_AREA;
	rs->sbuf = page_alloc(sb);
	tlen = sizeof(struct rso_sge) * RSO_SGL_SIZE +
	       sizeof(struct rso_iomap) * rs->target_iomap_size;
	rs->target_sgl = page_alloc(tlen);
	rs->rbuf = page_alloc(rs->rbuf_size);
	if (!rs->rmsg || !rs->sbuf || !rs->target_sgl || !rs->rbuf)
		return -ENOMEM;
	rs->smr = ibv_reg_mr(rs->id->pd, rs->sbuf, sb, IBV_ACCESS_LOCAL_WRITE);
	rs->target_mr = ibv_reg_mr(rs->id->pd, (void *)rs->target_sgl, tlen,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (rs->target_iomap_size)
		rs->target_iomap = (volatile struct rso_iomap *)(rs->target_sgl + RSO_SGL_SIZE);
	rs->rmr = ibv_reg_mr(rs->id->pd, rs->rbuf, rs->rbuf_size,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!rs->smr || !rs->target_mr || !rs->rmr)
		return -errno;

	rs->sbuf_next = (uintptr_t)rs->sbuf;
	rs->sbuf_bytes_avail = rs->sbuf_size;
	/* the first half of the ring goes out in the connection data */
	rs->rbuf_free_offset = rs->rbuf_size >> 1;
	rs->rbuf_bytes_avail = rs->rbuf_size >> 1;
	rs->sqe_avail = rs->sq_size - (int)rs->ctrl_max_seqno;
	rs->rseq_comp = rs->rq_size >> 1;
	for (i = 0; i < rs->rq_size; i++) {
		ret = post_recv(rs);
		if (ret)
			return ret;
	}
	return 0;
}

static size_t conn_offset(const struct rdma_cm_id *id)
{
	return id->route.addr.src_addr.sa_family == AF_IB ? RSO_IB_HDR : 0;
}

static void conn_format(const struct rso *rs, struct rso_conn *c)
{
	rso_conn_encode(c, rs->rq_size, rs->target_iomap_size, (uintptr_t)rs->target_sgl,
			rs->target_mr->rkey, (uintptr_t)rs->rbuf, rs->rbuf_size >> 1, rs->rmr->rkey);
}

/* ... and taken, once the buffers exist. */
static void conn_save(struct rso *rs, const struct rso_conn *c)
{
	rs->remote_sgl.addr = be64toh(c->target_sgl.addr);
	rs->remote_sgl.length = be32toh(c->target_sgl.length);
	rs->remote_sgl.key = be32toh(c->target_sgl.key);
	/* grants start at entry 1: entry 0 is the data_buf given here */
	rs->remote_sge = rs->remote_sgl.length > 1 ? 1 : 0;
	rs->swap_sgl = !!(c->flags & RSO_FLAG_NET) != (__BYTE_ORDER == __BIG_ENDIAN);
	if (c->flags & RSO_FLAG_IOMAP) {
		rs->remote_iomap.addr = rs->remote_sgl.addr +
					sizeof(struct rso_sge) * rs->remote_sgl.length;
		rs->remote_iomap.length = rso_scale_to_value(c->target_iomap_size);
		rs->remote_iomap.key = rs->remote_sgl.key;
	}
	rs->target_sgl[0].addr = be64toh(c->data_buf.addr);
	rs->target_sgl[0].length = be32toh(c->data_buf.length);
	rs->target_sgl[0].key = be32toh(c->data_buf.key);
	rs->sseq_comp = be16toh(c->credits);
}

/* ---- the completion queue ---------------------------------------------- */

static int post_write_imm(struct rso *rs, struct ibv_sge *sgl, int n, uint32_t msg,
			  int flags, uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = msg;
	wr.sg_list = sgl;
	wr.num_sge = n;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = (unsigned)flags;
	wr.imm_data = htobe32(msg);
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	return -ibv_post_send(rs->id->qp, &wr, &bad);
}

static bool ctrl_avail(const struct rso *rs)
{
	return rs->ctrl_seqno != rs->ctrl_max_seqno;
}

/* Grant the peer half the ring when that much is free, else message
 * credits alone; cq_lock held. */
static void send_credits(struct rso *rs)
{
	rs->ctrl_seqno++;
	rs->rseq_comp = (uint16_t)(rs->rseq_no + (rs->rq_size >> 1));
	if (rs->rbuf_bytes_avail >= rs->rbuf_size >> 1) {
		struct rso_sge g;
		struct ibv_sge s;
		int flags = 0;

		g.addr = (uintptr_t)&rs->rbuf[rs->rbuf_free_offset];
		g.key = rs->rmr->rkey;
		g.length = rs->rbuf_size >> 1;
		if (rs->swap_sgl) {
			g.addr = __builtin_bswap64(g.addr);
			g.key = __builtin_bswap32(g.key);
			g.length = __builtin_bswap32(g.length);
		}
		if (rs->sq_inline >= sizeof(g)) {
			s.addr = (uintptr_t)&g;
			s.lkey = 0;
			flags = IBV_SEND_INLINE;
		} else {
			/* a slot of its own until the write completes: at most
			 * RSO_CTRL_SLOTS control writes are in flight */
			uint8_t *slot = rs->sbuf + rs->sbuf_size +
					sizeof(g) * (rs->ctrl_seqno & (RSO_CTRL_SLOTS - 1));

			memcpy(slot, &g, sizeof(g));
			s.addr = (uintptr_t)slot;
			s.lkey = rs->smr->lkey;
		}
		s.length = sizeof(g);
		(void)post_write_imm(rs, &s, 1,
				     RSO_MSG(RSO_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size)), flags,
				     rs->remote_sgl.addr + (uint64_t)rs->remote_sge * sizeof(struct rso_sge),
				     rs->remote_sgl.key);
		rs->rbuf_bytes_avail -= rs->rbuf_size >> 1;
		rs->rbuf_free_offset += rs->rbuf_size >> 1;
		if (rs->rbuf_free_offset >= rs->rbuf_size)
			rs->rbuf_free_offset = 0;
		if (++rs->remote_sge == (int)rs->remote_sgl.length)
			rs->remote_sge = 0;
	} else {
		(void)post_write_imm(rs, NULL, 0,
				     RSO_MSG(RSO_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size)), 0, 0, 0);
	}
}

static void update_credits(struct rso *rs)
{
	if ((rs->rbuf_bytes_avail >= rs->rbuf_size >> 1 ||
	     (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0) &&
	    ctrl_avail(rs) && (rs->state & RSO_CONNECTED))
		send_credits(rs);
}

/* Take every completion, counting them in *n; cq_lock held. */
static int poll_cq(struct rso *rs, unsigned *n)
{
	struct ibv_wc wc;
	int ret, rcnt = 0;

	while ((ret = ibv_poll_cq(rs->cq, 1, &wc)) > 0) {
		(*n)++;
		if (wc.wr_id & RSO_WR_RECV) {
			uint32_t msg;

			if (wc.status != IBV_WC_SUCCESS)
				continue;
			rcnt++;
			if (!(wc.wc_flags & IBV_WC_WITH_IMM))
				continue; /* librdmacm's peers always write with immediate */
			msg = be32toh(wc.imm_data);
			switch (RSO_MSG_OP(msg)) {
			case RSO_OP_SGL:
				rs->sseq_comp = (uint16_t)RSO_MSG_DATA(msg);
				break;
			case RSO_OP_IOMAP_SGL:
				break;
			case RSO_OP_CTRL:
				if (RSO_MSG_DATA(msg) == RSO_CTRL_DISCONNECT) {
					rs->state = RSO_DISCONNECTED;
					return 0;
				} else if (RSO_MSG_DATA(msg) == RSO_CTRL_SHUTDOWN) {
					if (rs->state & RSO_WRITABLE) {
						rs->state &= ~RSO_READABLE;
					} else {
						rs->state = RSO_DISCONNECTED;
						return 0;
					}
				}
				break;
			case RSO_OP_DATA:
				if (rs->state == RSO_ERROR)
					break; /* after a broken stream: nothing more */
				/* Stricter than librdmacm: a peer that writes past
				 * its message credits (the ring of received
				 * messages full) or more than one grant at once
				 * breaks the stream - the connection ends with
				 * EPROTO instead of reading stale bytes */
				if ((rs->rmsg_tail + 1) % (rs->rq_size + 1) == rs->rmsg_head ||
				    RSO_MSG_DATA(msg) > rs->rbuf_size >> 1) {
					struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

					rs->state = RSO_ERROR;
					rs->err = EPROTO;
					/* the peer's next writes fail at once */
					ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
					return -EPROTO;
				}
				rs->rmsg[rs->rmsg_tail].op = RSO_OP_DATA;
				rs->rmsg[rs->rmsg_tail].data = RSO_MSG_DATA(msg);
				if (++rs->rmsg_tail == rs->rq_size + 1)
					rs->rmsg_tail = 0;
				break;
			default:
				break;
			}
		} else {
			uint32_t msg = (uint32_t)wc.wr_id;

			switch (RSO_MSG_OP(msg)) {
			case RSO_OP_SGL:
				rs->ctrl_max_seqno++;
				break;
			case RSO_OP_CTRL:
				rs->ctrl_max_seqno++;
				if (RSO_MSG_DATA(msg) == RSO_CTRL_DISCONNECT)
					rs->state = RSO_DISCONNECTED;
				break;
			case RSO_OP_IOMAP_SGL:
				rs->sqe_avail++;
				rs->sbuf_bytes_avail += sizeof(struct rso_iomap);
				break;
			default: /* data, and riowrite's plain writes (RSO_OP_WRITE) */
				rs->sqe_avail++;
				rs->sbuf_bytes_avail += RSO_MSG_DATA(msg);
				break;
			}
			if (wc.status != IBV_WC_SUCCESS && (rs->state & RSO_CONNECTED)) {
				rs->state = RSO_ERROR;
				rs->err = EIO;
			}
		}
	}
	if (rs->state & RSO_CONNECTED) {
		while (!ret && rcnt--)
			ret = post_recv(rs);
		if (ret) {
			rs->state = RSO_ERROR;
			rs->err = -ret;
		}
	}
	return ret < 0 ? ret : 0;
}

/* The connection's CM events once it is up: the peer's DREQ (or its
 * death) ends it. The number taken. cq_lock held. */
static unsigned cm_events(struct rso *rs)
{
	struct rdma_cm_event *ev;
	unsigned n = 0;

	while (!rdma_get_cm_event(rs->ch, &ev)) {
		n++;
		switch (ev->event) {
		case RDMA_CM_EVENT_DISCONNECTED:
			if (rs->state & RSO_CONNECTED)
				rs->state = RSO_DISCONNECTED;
			break;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			rs->state = RSO_ERROR;
			rs->err = ENODEV;
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
	return n;
}

/* Completion channel events read (non-blocking), acked in batches;
 * cq_lock held. */
static void drain_cq_events(struct rso *rs)
{
	struct ibv_cq *cq;
	void *ctx;

	while (!ibv_get_cq_event(rs->comp, &cq, &ctx)) {
		rs->cq_armed = false;
		if (++rs->unack_cqe >= (unsigned)(rs->sq_size + rs->rq_size)) {
			ibv_ack_cq_events(rs->cq, rs->unack_cqe);
			rs->unack_cqe = 0;
		}
	}
}

/* Progress others may wait for (cq_lock held): wake the sleepers. */
static void wake_waiters(struct rso *rs)
{
	if (rs->waiters && rs->wake_fd >= 0 && eventfd_write(rs->wake_fd, 1)) {
		/* the counter cannot overflow: the last waiter resets it */
	}
}

/* Sleep on the completion channel, the CM channel and the wake eventfd
 * (cq_lock not held). -EINTR ends the wait as a signal ends recv(2)'s. */
static int wait_fds(struct rso *rs)
{
	struct pollfd p[3] = {
		{ .fd = rs->comp->fd, .events = POLLIN },
		{ .fd = rs->ch->fd, .events = POLLIN },
		{ .fd = rs->wake_fd, .events = POLLIN },
	};

	if (poll(p, 3, -1) < 0)
		return -errno;
	return 0;
}

/* Work the CQ and the connection's CM events until test(rs) holds;
 * cq_lock not held on entry. Non-blocking: -EWOULDBLOCK when it does not
 * hold at once. Any number of threads may sleep here together (a sender
 * and a receiver): whoever takes completions or events wakes the others,
 * who look again. */
static int process_cq(struct rso *rs, bool nonblock, bool (*test)(struct rso *))
{
	int ret;

	pthread_mutex_lock(&rs->cq_lock);
	for (;;) {
		unsigned n = 0;

		update_credits(rs);
		ret = poll_cq(rs, &n);
		n += cm_events(rs);
		if (n)
			wake_waiters(rs);
		if (test(rs)) {
			ret = 0;
			break;
		}
		if (ret)
			break;
		if (nonblock) {
			ret = -EWOULDBLOCK;
			break;
		}
		if (!rs->cq_armed) {
			ibv_req_notify_cq(rs->cq, 0);
			rs->cq_armed = true;
			continue; /* completions that came before the arm */
		}
		update_credits(rs);
		rs->waiters++;
		pthread_mutex_unlock(&rs->cq_lock);
		ret = wait_fds(rs);
		pthread_mutex_lock(&rs->cq_lock);
		if (--rs->waiters == 0) {
			eventfd_t v;

			(void)eventfd_read(rs->wake_fd, &v); /* EAGAIN when nobody woke us */
		}
		drain_cq_events(rs);
		if (ret && ret != -EINTR)
			break;
	}
	update_credits(rs);
	pthread_mutex_unlock(&rs->cq_lock);
	return ret;
}

/* Under cq_lock: what the sender and the receiver look at before they
 * wait (the race: a receiver's poll_cq moving the counters meanwhile). */
static bool locked(struct rso *rs, bool (*test)(struct rso *))
{
	bool r;

	pthread_mutex_lock(&rs->cq_lock);
	r = test(rs);
	pthread_mutex_unlock(&rs->cq_lock);
	return r;
}

/* A data call on an rsocket that has no connection: ENOTCONN. */
static bool unconnected(struct rso *rs)
{
	bool r;

	pthread_mutex_lock(&rs->cq_lock);
	r = !rs->cq || rs->state == RSO_CONNECT_ERROR;
	pthread_mutex_unlock(&rs->cq_lock);
	return r;
}

static bool can_send(struct rso *rs)
{
	return rs->sqe_avail && rs->sbuf_bytes_avail >= RSO_SNDLOWAT &&
	       rs->sseq_no != rs->sseq_comp && rs->target_sgl[rs->target_sge].length != 0;
}

static bool conn_can_send(struct rso *rs)
{
	return can_send(rs) || !(rs->state & RSO_WRITABLE);
}

static bool have_rdata(struct rso *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
}

static bool conn_have_rdata(struct rso *rs)
{
	return have_rdata(rs) || !(rs->state & RSO_READABLE);
}

static bool conn_can_send_ctrl(struct rso *rs)
{
	return ctrl_avail(rs) || !(rs->state & RSO_CONNECTED);
}

static bool all_sends_done(struct rso *rs)
{
	return ((int)rs->ctrl_max_seqno - (int)rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size ||
	       !(rs->state & RSO_CONNECTED);
}

static bool always(struct rso *rs)
{
	(void)rs;
	return true;
}

/* ---- connection setup -------------------------------------------------- */

static int event_error(const struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return -ECONNREFUSED;
	if (ev->status < 0)
		return ev->status;
	return ev->status ? -ev->status : -ECONNABORTED;
}

/* Wait for the next CM event of rs (blocking or not); NULL and -EAGAIN
 * when none and non-blocking. */
static int next_event(struct rso *rs, bool block, struct rdma_cm_event **ev)
{
	for (;;) {
		if (!rdma_get_cm_event(rs->ch, ev))
			return 0;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		if (!block)
			return -EAGAIN;
		struct pollfd p = { .fd = rs->ch->fd, .events = POLLIN };

		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return -errno;
	}
}

static int start_resolve_addr(struct rso *rs)
{
	int to = 1000 << rs->retries++;

	if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)&rs->dst, to))
		return -errno;
	rs->state = RSO_RESOLVING_ADDR;
	return 0;
}

static int start_resolve_route(struct rso *rs)
{
	int to = 1000 << rs->retries++;

	if (rs->route) {
		int ret = rdma_set_option(rs->id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, rs->route,
					  rs->route_len);

		free(rs->route);
		rs->route = NULL;
		if (!ret) {
			rs->state = RSO_RESOLVING_ROUTE;
			return 0;
		}
	}
	if (rdma_resolve_route(rs->id, to))
		return -errno;
	rs->state = RSO_RESOLVING_ROUTE;
	return 0;
}

static int start_connect(struct rso *rs)
{
	struct rdma_conn_param p;
	uint8_t pd[RSO_IB_HDR + sizeof(struct rso_conn)];
	size_t off = conn_offset(rs->id);
	int ret = rso_create_ep(rs);

	if (ret)
		return ret;
	memset(pd, 0, sizeof(pd));
	conn_format(rs, (struct rso_conn *)(void *)(pd + off));
	memset(&p, 0, sizeof(p));
	p.private_data = pd;
	p.private_data_len = (uint8_t)(off + sizeof(struct rso_conn));
	p.flow_control = 1;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	rs->retries = 0;
	if (rdma_connect(rs->id, &p))
		return -errno;
	rs->state = RSO_CONNECTING;
	return 0;
}

/* Drive setup as far as it goes (slock held): 0 connected, -EINPROGRESS
 * still opening (non-blocking), another error ends it (SO_ERROR). */
static int do_connect(struct rso *rs, bool block)
{
	struct rdma_cm_event *ev;
	int ret = 0;

	for (;;) {
		switch (atomic_load(&rs->state)) {
		case RSO_INIT:
		case RSO_BOUND:
			ret = start_resolve_addr(rs);
			break;
		case RSO_RESOLVING_ADDR:
		case RSO_RESOLVING_ROUTE:
		case RSO_CONNECTING:
		case RSO_ACCEPTING:
			ret = next_event(rs, block, &ev);
			if (ret == -EAGAIN)
				return -EINPROGRESS;
			if (ret)
				break;
			if (rs->state == RSO_RESOLVING_ADDR) {
				if (ev->event == RDMA_CM_EVENT_ADDR_RESOLVED) {
					rs->retries = 0;
					ret = start_resolve_route(rs);
				} else if (ev->event == RDMA_CM_EVENT_ADDR_ERROR &&
					   ev->status == -ETIMEDOUT && rs->retries <= RSO_CONN_RETRIES) {
					ret = start_resolve_addr(rs);
				} else {
					ret = event_error(ev);
				}
			} else if (rs->state == RSO_RESOLVING_ROUTE) {
				if (ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED)
					ret = start_connect(rs);
				else if (ev->event == RDMA_CM_EVENT_ROUTE_ERROR &&
					 ev->status == -ETIMEDOUT && rs->retries <= RSO_CONN_RETRIES)
					ret = start_resolve_route(rs);
				else
					ret = event_error(ev);
			} else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
				if (rs->state == RSO_CONNECTING) {
					struct rso_conn c;

					ret = rso_conn_parse(ev->param.conn.private_data,
							 ev->param.conn.private_data_len, 0, &c);
					if (!ret) {
						pthread_mutex_lock(&rs->cq_lock);
						conn_save(rs, &c);
						pthread_mutex_unlock(&rs->cq_lock);
					}
				}
				if (!ret) {
					pthread_mutex_lock(&rs->cq_lock);
					rs->state = RSO_RDWR;
					pthread_mutex_unlock(&rs->cq_lock);
				}
			} else if (ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE ||
				   ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
				ret = 0; /* not expected with a QP; wait on */
			} else {
				ret = event_error(ev);
			}
			rdma_ack_cm_event(ev);
			break;
		case RSO_CONNECT_ERROR:
		case RSO_DISCONNECTED:
		case RSO_ERROR:
			return -ENOTCONN;
		default:
			return (rs->state & RSO_CONNECTED) ? 0 : -EINVAL;
		}
		if (ret) {
			rs->state = RSO_CONNECT_ERROR;
			rs->err = -ret;
			return ret;
		}
	}
}

/* For a data call on an rsocket still opening: setup first. */
static int ensure_connected(struct rso *rs, bool block)
{
	int ret;

	if (!(rs->state & RSO_OPENING))
		return 0;
	pthread_mutex_lock(&rs->slock);
	ret = do_connect(rs, block);
	pthread_mutex_unlock(&rs->slock);
	return ret == -EINPROGRESS ? -EAGAIN : ret;
}

/* ---- the calls --------------------------------------------------------- */

RCM_EXPORT int rsocket(int domain, int type, int protocol)
{
	int stype = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK), ret;
	struct rso *rs;

	if ((domain != AF_INET && domain != AF_INET6 && domain != AF_IB) ||
	    (stype != SOCK_STREAM && stype != SOCK_DGRAM) ||
	    (stype == SOCK_STREAM && protocol && protocol != IPPROTO_TCP) ||
	    (stype == SOCK_DGRAM && protocol && protocol != IPPROTO_UDP))
		return rcm_err(ENOTSUP);
	rs = rso_alloc(NULL);
	if (!rs)
		return rcm_err(ENOMEM);
	if (stype == SOCK_DGRAM) {
		struct rds_sizes sz = { .sbuf_size = rs->sbuf_size, .rbuf_size = rs->rbuf_size,
					.sq_size = rs->sq_size, .rq_size = rs->rq_size,
					.sq_inline = rs->sq_inline };

		ret = rds_create(domain, type, &sz, &rs->ds);
		if (!ret) {
			rs->fd = rds_fd(rs->ds);
			ret = rso_insert(rs);
		}
		if (ret) {
			rso_free(rs);
			return rcm_err(-ret);
		}
		return rs->fd;
	}
	rs->fd_flags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
	rs->fs_flags = (type & SOCK_NONBLOCK) ? O_NONBLOCK : 0;
	rs->nonblock = !!(type & SOCK_NONBLOCK);
	ret = rso_channel(rs);
	if (!ret && rdma_create_id(rs->ch, &rs->id, rs, RDMA_PS_TCP))
		ret = -errno;
	if (!ret) {
		rs->id->route.addr.src_addr.sa_family = (sa_family_t)domain;
		ret = rso_insert(rs);
	}
	if (ret) {
		rso_free(rs);
		return rcm_err(-ret);
	}
	return rs->fd;
}

RCM_EXPORT int rbind(int s, const struct sockaddr *addr, socklen_t len)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds)
		return ret_err(rds_bind(rs->ds, addr, len));
	if (rs->state != RSO_INIT)
		return rcm_err(EINVAL);
	if (rdma_bind_addr(rs->id, (struct sockaddr *)addr))
		return -1;
	rs->state = RSO_BOUND;
	return 0;
}

RCM_EXPORT int rlisten(int s, int backlog)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds)
		return rcm_err(EOPNOTSUPP); /* as listen(2) of a UDP socket */
	if (rs->state == RSO_LISTENING)
		return 0;
	if (rs->state & ~RSO_BOUND)
		return rcm_err(EINVAL);
	if (rdma_listen(rs->id, backlog))
		return -1;
	rs->state = RSO_LISTENING;
	return 0;
}

/* One request taken from the listener's channel and accepted: the new
 * rsocket, or NULL with *err (-EAGAIN: none waiting). rlock of the
 * listener held. */
static struct rso *accept_one(struct rso *ls, int *err)
{
	struct rdma_conn_param p;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	uint8_t pd[RSO_IB_HDR + sizeof(struct rso_conn)];
	struct rso_conn c;
	size_t off;
	struct rso *rs;
	int ret;

	ret = next_event(ls, !ls->nonblock, &ev);
	if (ret) {
		*err = ret;
		return NULL;
	}
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		rdma_ack_cm_event(ev);
		*err = -EAGAIN; /* nothing to accept: the caller looks again */
		return NULL;
	}
	id = ev->id;
	off = conn_offset(ls->id);
	ret = rso_conn_parse(ev->param.conn.private_data, ev->param.conn.private_data_len, off, &c);
	p = ev->param.conn;
	rdma_ack_cm_event(ev);
	rs = NULL;
	if (ret)
		goto reject; /* not an rsocket's request: refused as librdmacm */
	rs = rso_alloc(ls);
	if (!rs) {
		ret = -ENOMEM;
		goto reject;
	}
	ret = rso_channel(rs);
	if (!ret && rdma_migrate_id(id, rs->ch))
		ret = -errno;
	if (ret)
		goto reject;
	rs->id = id;
	id->context = rs;
	ret = rso_insert(rs);
	if (!ret)
		ret = rso_create_ep(rs);
	if (ret)
		goto reject;
	conn_save(rs, &c);
	memset(pd, 0, sizeof(pd));
	conn_format(rs, (struct rso_conn *)(void *)(pd + off));
	p.private_data = pd;
	p.private_data_len = (uint8_t)(off + sizeof(struct rso_conn));
	if (rdma_accept(id, &p)) {
		ret = -errno;
		goto reject;
	}
	rs->state = RSO_ACCEPTING;
	if (!rs->nonblock) {
		pthread_mutex_lock(&rs->slock);
		ret = do_connect(rs, true);
		pthread_mutex_unlock(&rs->slock);
		if (ret) {
			rso_free(rs);
			*err = -EAGAIN; /* this one failed: the caller waits on */
			return NULL;
		}
	}
	return rs;
reject:
	rdma_reject(id, NULL, 0);
	if (rs) {
		if (!rs->id)
			rdma_destroy_id(id);
		rso_free(rs);
	} else {
		rdma_destroy_id(id);
	}
	*err = -EAGAIN;
	return NULL;
}

static int copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src)
{
	socklen_t sz = src->sa_family == AF_INET    ? sizeof(struct sockaddr_in)
		       : src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						    : sizeof(struct sockaddr_ib);

	if (!len || (!dst && *len))
		return rcm_err(EFAULT);
	/* a NULL address of length 0 asks the length, as getsockname(2)
	 * (librspreload's transpose_socket) */
	if (*len)
		memcpy(dst, src, *len < sz ? *len : sz);
	*len = sz;
	return 0;
}

RCM_EXPORT int raccept(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rso *ls = rso_get(s), *rs;
	int err = 0;

	if (!ls)
		return rcm_err(EBADF);
	if (ls->ds)
		return rcm_err(EOPNOTSUPP);
	if (ls->state != RSO_LISTENING)
		return rcm_err(EINVAL);
	pthread_mutex_lock(&ls->rlock);
	do {
		rs = accept_one(ls, &err);
	} while (!rs && err == -EAGAIN && !ls->nonblock);
	pthread_mutex_unlock(&ls->rlock);
	if (!rs)
		return rcm_err(err == -EAGAIN ? EAGAIN : -err);
	if (addr && addrlen)
		copy_addr(addr, addrlen, rdma_get_peer_addr(rs->id));
	return rs->fd;
}

RCM_EXPORT int rconnect(int s, const struct sockaddr *addr, socklen_t len)
{
	struct rso *rs = rso_get(s);
	int ret;

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds) /* the default destination */
		return ret_err(rds_connect(rs->ds, addr, len));
	if (!addr || len > sizeof(rs->dst) || len < sizeof(sa_family_t))
		return rcm_err(EINVAL);
	pthread_mutex_lock(&rs->slock);
	if (rs->state == RSO_INIT || rs->state == RSO_BOUND) {
		memset(&rs->dst, 0, sizeof(rs->dst));
		memcpy(&rs->dst, addr, len);
	} else if (!(rs->state & RSO_OPENING)) {
		ret = (rs->state & RSO_CONNECTED) ? -EISCONN : -EINVAL;
		pthread_mutex_unlock(&rs->slock);
		return rcm_err(-ret);
	}
	ret = do_connect(rs, !rs->nonblock);
	pthread_mutex_unlock(&rs->slock);
	return ret ? rcm_err(ret == -EINPROGRESS ? EINPROGRESS : -ret) : 0;
}

static bool nonblocking(const struct rso *rs, int flags)
{
	return rs->nonblock || (flags & MSG_DONTWAIT);
}

static ssize_t peek(struct rso *rs, uint8_t *buf, size_t len)
{
	size_t left = len;
	int head = rs->rmsg_head;
	uint32_t off = rs->rbuf_offset;

	while (left && head != rs->rmsg_tail) {
		size_t n = rs->rmsg[head].data;

		if (left < n)
			n = left;
		else if (++head == rs->rq_size + 1)
			head = 0;
		left -= n;
		while (n) {
			size_t end = rs->rbuf_size - off, k = n < end ? n : end;

			memcpy(buf, &rs->rbuf[off], k);
			buf += k;
			n -= k;
			off = (uint32_t)((off + k) % rs->rbuf_size);
		}
	}
	return (ssize_t)(len - left);
}

static ssize_t recv_iov(struct rso *rs, const struct iovec *iov, int iovcnt, int flags)
{
	if (rs->ds)
		return ds_ret(rds_recvmsg(rs->ds, iov, iovcnt, flags, NULL, NULL));

	size_t len = 0, left, done = 0;
	int ret = 0, i = 0;
	size_t ioff = 0;

	for (int k = 0; k < iovcnt; k++)
		len += iov[k].iov_len;
	left = len;
	ret = ensure_connected(rs, !nonblocking(rs, flags));
	if (ret)
		return rcm_err(-ret);
	if (unconnected(rs))
		return rcm_err(ENOTCONN);
	pthread_mutex_lock(&rs->rlock);
	do {
		if (!locked(rs, have_rdata)) {
			ret = process_cq(rs, nonblocking(rs, flags), conn_have_rdata);
			if (ret)
				break;
		}
		if (flags & MSG_PEEK) {
			/* the first buffer only, as librdmacm */
			pthread_mutex_lock(&rs->cq_lock);
			done = (size_t)peek(rs, iov[0].iov_base, iov[0].iov_len);
			pthread_mutex_unlock(&rs->cq_lock);
			left = len - done;
			break;
		}
		pthread_mutex_lock(&rs->cq_lock);
		while (left && have_rdata(rs)) {
			struct rso_rmsg *m = &rs->rmsg[rs->rmsg_head];
			size_t n = m->data;

			if (left < n) {
				n = left;
				m->data -= (uint32_t)left;
			} else {
				rs->rseq_no++;
				if (++rs->rmsg_head == rs->rq_size + 1)
					rs->rmsg_head = 0;
			}
			left -= n;
			while (n) {
				size_t end = rs->rbuf_size - rs->rbuf_offset, k = n;

				if (k > end)
					k = end;
				if (k > iov[i].iov_len - ioff)
					k = iov[i].iov_len - ioff;
				memcpy((uint8_t *)iov[i].iov_base + ioff, &rs->rbuf[rs->rbuf_offset], k);
				ioff += k;
				if (ioff == iov[i].iov_len) {
					i++;
					ioff = 0;
				}
				n -= k;
				rs->rbuf_offset += (uint32_t)k;
				if (rs->rbuf_offset == rs->rbuf_size)
					rs->rbuf_offset = 0;
				rs->rbuf_bytes_avail += (uint32_t)k;
			}
		}
		pthread_mutex_unlock(&rs->cq_lock);
	} while (left && (flags & MSG_WAITALL) && (rs->state & RSO_READABLE));
	/* once the data are read, a broken connection says why (librdmacm:
	 * end of file) */
	if (!ret && left == len && len && rs->state == RSO_ERROR)
		ret = rs->err ? -rs->err : -ECONNRESET;
	pthread_mutex_unlock(&rs->rlock);
	if (ret && left == len)
		return rcm_err(ret == -EWOULDBLOCK ? EWOULDBLOCK : -ret);
	return (ssize_t)(len - left);
}

RCM_EXPORT ssize_t rrecv(int s, void *buf, size_t len, int flags)
{
	struct rso *rs = rso_get(s);
	struct iovec v = { .iov_base = buf, .iov_len = len };

	if (!rs)
		return rcm_err(EBADF);
	return recv_iov(rs, &v, 1, flags);
}

RCM_EXPORT ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *a,
			     socklen_t *l)
{
	struct rso *rs = rso_get(s);
	struct iovec v = { .iov_base = buf, .iov_len = len };
	ssize_t ret;

	if (rs && rs->ds) /* the datagram's sender */
		return ds_ret(rds_recvmsg(rs->ds, &v, 1, flags, a, l));
	ret = rrecv(s, buf, len, flags);
	if (ret > 0 && a)
		rgetpeername(s, a, l);
	return ret;
}

RCM_EXPORT ssize_t rrecvmsg(int s, struct msghdr *m, int flags)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	if (m->msg_control && m->msg_controllen)
		return rcm_err(ENOTSUP);
	if (rs->ds)
		return ds_ret(rds_recvmsg(rs->ds, m->msg_iov, (int)m->msg_iovlen, flags,
					  m->msg_name, m->msg_name ? &m->msg_namelen : NULL));
	return recv_iov(rs, m->msg_iov, (int)m->msg_iovlen, flags);
}

RCM_EXPORT ssize_t rread(int s, void *buf, size_t n)
{
	return rrecv(s, buf, n, 0);
}

RCM_EXPORT ssize_t rreadv(int s, const struct iovec *v, int n)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	return recv_iov(rs, v, n, 0);
}

/* Copy len bytes of the iovecs from (*i, *ioff) to dst. */
static void iov_copy(uint8_t *dst, const struct iovec *iov, int *i, size_t *ioff, size_t len)
{
	while (len) {
		size_t k = iov[*i].iov_len - *ioff;

		if (k > len)
			k = len;
		memcpy(dst, (const uint8_t *)iov[*i].iov_base + *ioff, k);
		dst += k;
		len -= k;
		*ioff += k;
		if (*ioff == iov[*i].iov_len) {
			(*i)++;
			*ioff = 0;
		}
	}
}

/* One data write of xfer bytes already in sbuf (sge/n); cq_lock held. */
static int write_data(struct rso *rs, struct ibv_sge *sge, int n, uint32_t xfer)
{
	uint64_t addr;
	uint32_t rkey;

	rs->sseq_no++;
	rs->sqe_avail--;
	rs->sbuf_bytes_avail -= xfer;
	/* read the grant before using it: the peer may rewrite the entry
	 * after we move past it, never before */
	addr = rs->target_sgl[rs->target_sge].addr;
	rkey = rs->target_sgl[rs->target_sge].key;
	rs->target_sgl[rs->target_sge].addr += xfer;
	rs->target_sgl[rs->target_sge].length -= xfer;
	if (!rs->target_sgl[rs->target_sge].length && ++rs->target_sge == RSO_SGL_SIZE)
		rs->target_sge = 0;
	return post_write_imm(rs, sge, n, RSO_MSG(RSO_OP_DATA, xfer),
			      xfer <= rs->sq_inline ? IBV_SEND_INLINE : 0, addr, rkey);
}

/* Copy xfer bytes of the iovecs (from *i, *ioff) into sbuf at sbuf_next,
 * wrapping; sge[] gets the one or two pieces: their number. cq_lock held. */
static int sbuf_stage(struct rso *rs, const struct iovec *iov, int *i, size_t *ioff,
		      uint32_t xfer, struct ibv_sge *sge)
{
	uint32_t tail = (uint32_t)((uintptr_t)rs->sbuf + rs->sbuf_size - rs->sbuf_next);

	sge[0].addr = rs->sbuf_next;
	sge[0].lkey = rs->smr->lkey;
	if (xfer <= tail) {
		iov_copy((uint8_t *)(uintptr_t)rs->sbuf_next, iov, i, ioff, xfer);
		sge[0].length = xfer;
		rs->sbuf_next = xfer < tail ? rs->sbuf_next + xfer : (uintptr_t)rs->sbuf;
		return 1;
	}
	iov_copy((uint8_t *)(uintptr_t)rs->sbuf_next, iov, i, ioff, tail);
	sge[0].length = tail;
	iov_copy(rs->sbuf, iov, i, ioff, xfer - tail);
	sge[1].addr = (uintptr_t)rs->sbuf;
	sge[1].length = xfer - tail;
	sge[1].lkey = rs->smr->lkey;
	rs->sbuf_next = (uintptr_t)rs->sbuf + (xfer - tail);
	return 2;
}

/* Wait until a write may go (slock held): 0, or the error that ends the
 * call (-ECONNRESET once the connection cannot send). */
static int wait_send(struct rso *rs, int flags)
{
	int ret;

	if (locked(rs, can_send))
		return 0;
	ret = process_cq(rs, nonblocking(rs, flags), conn_can_send);
	if (!ret && !(rs->state & RSO_WRITABLE))
		ret = -ECONNRESET;
	return ret;
}

/* riomap's entries written into the peer's table, before any later data
 * (slock held; map_lock taken). */
static int send_iomaps(struct rso *rs, int flags)
{
	int ret = 0;

	pthread_mutex_lock(&rs->map_lock);
	for (int k = 0; k < rs->niomrs && !ret; k++) {
		struct rso_iomr *m = &rs->iomrs[k];
		struct rso_iomap e;
		struct iovec v = { .iov_base = &e, .iov_len = sizeof(e) };
		struct ibv_sge sge[2];
		size_t ioff = 0;
		int i = 0, n;

		if (!m->mr || !m->queued)
			continue;
		ret = wait_send(rs, flags);
		if (ret)
			break;
		e.offset = m->offset;
		e.sge.addr = (uintptr_t)m->mr->addr;
		e.sge.length = (uint32_t)m->mr->length;
		e.sge.key = m->mr->rkey;
		if (rs->swap_sgl) {
			e.offset = __builtin_bswap64(e.offset);
			e.sge.addr = __builtin_bswap64(e.sge.addr);
			e.sge.length = __builtin_bswap32(e.sge.length);
			e.sge.key = __builtin_bswap32(e.sge.key);
		}
		pthread_mutex_lock(&rs->cq_lock);
		n = sbuf_stage(rs, &v, &i, &ioff, sizeof(e), sge);
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->sbuf_bytes_avail -= sizeof(e);
		ret = post_write_imm(rs, sge, n, RSO_MSG(RSO_OP_IOMAP_SGL, (unsigned)m->index),
				     sizeof(e) <= rs->sq_inline ? IBV_SEND_INLINE : 0,
				     rs->remote_iomap.addr + (uint64_t)m->index * sizeof(e),
				     rs->remote_iomap.key);
		pthread_mutex_unlock(&rs->cq_lock);
		if (!ret)
			m->queued = false;
	}
	pthread_mutex_unlock(&rs->map_lock);
	return ret;
}

/* A writable mapping not yet written into the peer's table (the list is
 * the table's few entries at most). */
static bool iomap_pending(struct rso *rs)
{
	bool r = false;

	pthread_mutex_lock(&rs->map_lock);
	for (int k = 0; k < rs->niomrs; k++)
		if (rs->iomrs[k].mr && rs->iomrs[k].queued)
			r = true;
	pthread_mutex_unlock(&rs->map_lock);
	return r;
}

static ssize_t send_iov(struct rso *rs, const struct iovec *iov, int iovcnt, int flags)
{
	size_t len = 0, left, ioff = 0;
	uint32_t olen = RSO_OLAP_START;
	int ret, i = 0;

	if (rs->ds) /* to the default destination */
		return ds_ret(rds_sendmsg(rs->ds, iov, iovcnt, flags, NULL, 0));

	for (int k = 0; k < iovcnt; k++)
		len += iov[k].iov_len;
	left = len;
	ret = ensure_connected(rs, !nonblocking(rs, flags));
	if (ret)
		return rcm_err(-ret);
	if (unconnected(rs))
		return rcm_err(ENOTCONN);
	pthread_mutex_lock(&rs->slock);
	if (iomap_pending(rs))
		ret = send_iomaps(rs, flags);
	while (!ret && left) {
		struct ibv_sge sge[2];
		uint32_t xfer;
		int n;

		ret = wait_send(rs, flags);
		if (ret)
			break;
		pthread_mutex_lock(&rs->cq_lock);
		if (olen < left) {
			xfer = olen;
			if (olen < RSO_MAX_XFER)
				olen <<= 1;
		} else {
			xfer = (uint32_t)left;
		}
		if (xfer > rs->sbuf_bytes_avail)
			xfer = rs->sbuf_bytes_avail;
		if (xfer > rs->target_sgl[rs->target_sge].length)
			xfer = rs->target_sgl[rs->target_sge].length;
		n = sbuf_stage(rs, iov, &i, &ioff, xfer, sge);
		ret = write_data(rs, sge, n, xfer);
		pthread_mutex_unlock(&rs->cq_lock);
		if (!ret)
			left -= xfer;
	}
	pthread_mutex_unlock(&rs->slock);
	if (ret && left == len)
		return rcm_err(ret == -EWOULDBLOCK ? EWOULDBLOCK : -ret);
	return (ssize_t)(len - left);
}

RCM_EXPORT ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	struct rso *rs = rso_get(s);
	struct iovec v = { .iov_base = (void *)buf, .iov_len = len };

	if (!rs)
		return rcm_err(EBADF);
	return send_iov(rs, &v, 1, flags);
}

RCM_EXPORT ssize_t rsendto(int s, const void *buf, size_t len, int flags,
			   const struct sockaddr *a, socklen_t l)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds) {
		struct iovec v = { .iov_base = (void *)buf, .iov_len = len };

		return ds_ret(rds_sendmsg(rs->ds, &v, 1, flags, a, l));
	}
	if (a || l)
		return rcm_err(EISCONN); /* a stream's peer is its connection's */
	return rsend(s, buf, len, flags);
}

RCM_EXPORT ssize_t rsendmsg(int s, const struct msghdr *m, int flags)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	if (m->msg_control && m->msg_controllen)
		return rcm_err(ENOTSUP);
	if (rs->ds)
		return ds_ret(rds_sendmsg(rs->ds, m->msg_iov, (int)m->msg_iovlen, flags,
					  m->msg_name, m->msg_namelen));
	return send_iov(rs, m->msg_iov, (int)m->msg_iovlen, flags);
}

RCM_EXPORT ssize_t rwrite(int s, const void *buf, size_t n)
{
	return rsend(s, buf, n, 0);
}

RCM_EXPORT ssize_t rwritev(int s, const struct iovec *v, int n)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	return send_iov(rs, v, n, 0);
}

/* ---- shutdown and close ------------------------------------------------ */

RCM_EXPORT int rshutdown(int s, int how)
{
	struct rso *rs = rso_get(s);
	int ctrl, ret = 0;

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds)
		return ret_err(rds_shutdown(rs->ds, how));
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return rcm_err(EINVAL);
	if (rs->state & RSO_CONNECTED) {
		pthread_mutex_lock(&rs->cq_lock);
		if (how == SHUT_RDWR) {
			ctrl = RSO_CTRL_DISCONNECT;
			rs->state &= ~(RSO_READABLE | RSO_WRITABLE);
		} else if (how == SHUT_WR) {
			rs->state &= ~RSO_WRITABLE;
			ctrl = (rs->state & RSO_READABLE) ? RSO_CTRL_SHUTDOWN : RSO_CTRL_DISCONNECT;
		} else {
			rs->state &= ~RSO_READABLE;
			ctrl = (rs->state & RSO_WRITABLE) ? -1 : RSO_CTRL_DISCONNECT;
		}
		wake_waiters(rs); /* a reader or writer asleep sees the shutdown */
		pthread_mutex_unlock(&rs->cq_lock);
		if (ctrl < 0)
			return 0;
		if (!locked(rs, conn_can_send_ctrl))
			ret = process_cq(rs, false, conn_can_send_ctrl);
		pthread_mutex_lock(&rs->cq_lock);
		if (!ret && (rs->state & RSO_CONNECTED) && ctrl_avail(rs)) {
			rs->ctrl_seqno++;
			ret = post_write_imm(rs, NULL, 0, RSO_MSG(RSO_OP_CTRL, ctrl), 0, 0, 0);
		}
		pthread_mutex_unlock(&rs->cq_lock);
		if (rs->state & RSO_CONNECTED)
			process_cq(rs, false, all_sends_done);
	}
	if ((rs->state & RSO_DISCONNECTED) && rs->id->qp) {
		/* the QP to the error state: receives flush, rpoll wakes */
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
	}
	return ret ? rcm_err(-ret) : 0;
}

RCM_EXPORT int rclose(int s)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	if (rs->state & RSO_CONNECTED)
		rshutdown(s, SHUT_RDWR);
	rso_free(rs);
	return 0;
}

/* ---- keepalives ------------------------------------------------------- */

/* As librdmacm's: an rsocket with SO_KEEPALIVE gets a zero-byte RDMA write
 * (no immediate: nothing for the peer's receive queue; its wr_id a
 * KEEPALIVE control message, one of the four control slots) every
 * keepalive_time seconds (TCP_KEEPIDLE; by default the kernel's
 * net.ipv4.tcp_keepalive_time) from one thread of the process, so that a
 * peer gone without a word fails the write after the QP's retries and the
 * next call on the rsocket says so. The thread runs while the list is not
 * empty. ka_mtx guards the list and each member's deadline and is taken
 * before an rsocket's cq_lock; rso_free leaves the list first, so the
 * thread never posts on a freed rsocket. */
static pthread_mutex_t ka_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ka_cond;
static pthread_once_t ka_once = PTHREAD_ONCE_INIT;
static struct ka_entry {
	struct rso *rs;
	int64_t due; /* CLOCK_MONOTONIC milliseconds */
} *ka_list;
static int ka_n, ka_cap;
static bool ka_running;

static void ka_init(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&ka_cond, &a);
	pthread_condattr_destroy(&a);
}

/* A zero-byte write marked KEEPALIVE, when a control slot is free and the
 * connection is up (a busy one skips this round, as librdmacm's). */
static void ka_send(struct rso *rs)
{
	pthread_mutex_lock(&rs->cq_lock);
	if (rs->cq && ctrl_avail(rs) && (rs->state & RSO_CONNECTED)) {
		struct ibv_send_wr wr, *bad;

		memset(&wr, 0, sizeof(wr));
		wr.wr_id = RSO_MSG(RSO_OP_CTRL, RSO_CTRL_KEEPALIVE);
		wr.opcode = IBV_WR_RDMA_WRITE;
		rs->ctrl_seqno++;
		if (ibv_post_send(rs->id->qp, &wr, &bad))
			rs->ctrl_seqno--;
	}
	pthread_mutex_unlock(&rs->cq_lock);
}

static void *ka_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&ka_mtx);
	while (ka_n) {
		int64_t now = now_ms(), next = INT64_MAX;
		struct timespec ts;

		for (int k = 0; k < ka_n; k++) {
			if (ka_list[k].due <= now) {
				ka_send(ka_list[k].rs);
				ka_list[k].due = now + (int64_t)ka_list[k].rs->keepalive_time * 1000;
			}
			if (ka_list[k].due < next)
				next = ka_list[k].due;
		}
		ts.tv_sec = (time_t)(next / 1000);
		ts.tv_nsec = (long)(next % 1000) * 1000000;
		pthread_cond_timedwait(&ka_cond, &ka_mtx, &ts);
	}
	ka_running = false;
	pthread_mutex_unlock(&ka_mtx);
	return NULL;
}

/* Into the list (or its deadline restarted): 0 or -errno. */
static int ka_add(struct rso *rs)
{
	int ret = 0, k;

	pthread_once(&ka_once, ka_init);
	pthread_mutex_lock(&ka_mtx);
	for (k = 0; k < ka_n && ka_list[k].rs != rs; k++)
		;
	if (k == ka_n) {
		if (ka_n == ka_cap) {
			int cap = ka_cap ? ka_cap * 2 : 16;
			struct ka_entry *l = realloc(ka_list, sizeof(*l) * (size_t)cap);

			if (!l) {
				pthread_mutex_unlock(&ka_mtx);
				return -ENOMEM;
			}
			ka_list = l;
			ka_cap = cap;
		}
		ka_list[ka_n++].rs = rs;
	}
	ka_list[k].due = now_ms() + (int64_t)rs->keepalive_time * 1000;
	rs->keepalive = true;
	if (!ka_running) {
		pthread_t t;
		pthread_attr_t a;

		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		ret = -pthread_create(&t, &a, ka_thread, NULL);
		pthread_attr_destroy(&a);
		if (ret) {
			ka_list[k] = ka_list[--ka_n];
			rs->keepalive = false;
		} else {
			ka_running = true;
		}
	}
	pthread_cond_signal(&ka_cond);
	pthread_mutex_unlock(&ka_mtx);
	return ret;
}

static void ka_remove(struct rso *rs)
{
	pthread_mutex_lock(&ka_mtx);
	for (int k = 0; k < ka_n; k++)
		if (ka_list[k].rs == rs) {
			ka_list[k] = ka_list[--ka_n];
			break;
		}
	rs->keepalive = false;
	if (ka_running)
		pthread_cond_signal(&ka_cond);
	pthread_mutex_unlock(&ka_mtx);
}

static bool ka_on(struct rso *rs)
{
	bool on;

	pthread_mutex_lock(&ka_mtx);
	on = rs->keepalive;
	pthread_mutex_unlock(&ka_mtx);
	return on;
}

/* The kernel's TCP keepalive time, librdmacm's default for rsockets. */
static int ka_default_time(void)
{
	unsigned long v = 7200;
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "re");

	if (f) {
		if (fscanf(f, "%lu", &v) != 1 || !v || v > INT32_MAX)
			v = 7200;
		fclose(f);
	}
	return (int)v;
}

/* ---- names, options, flags --------------------------------------------- */

RCM_EXPORT int rgetpeername(int s, struct sockaddr *a, socklen_t *l)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds)
		return ret_err(rds_getpeername(rs->ds, a, l));
	return copy_addr(a, l, rdma_get_peer_addr(rs->id));
}

RCM_EXPORT int rgetsockname(int s, struct sockaddr *a, socklen_t *l)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds)
		return ret_err(rds_getsockname(rs->ds, a, l));
	return copy_addr(a, l, rdma_get_local_addr(rs->id));
}

static void opt_bit(uint64_t *opts, int name, bool on)
{
	if (name < 0 || name >= 64)
		return;
	if (on)
		*opts |= 1ull << name;
	else
		*opts &= ~(1ull << name);
}

RCM_EXPORT int rsetsockopt(int s, int level, int name, const void *v, socklen_t l)
{
	struct rso *rs = rso_get(s);
	int val = 0, ret;

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds)
		return ret_err(rds_setsockopt(rs->ds, level, name, v, l));
	if (name == SO_LINGER && level == SOL_SOCKET) {
		struct linger lg;

		if (!v || l < sizeof(lg))
			return rcm_err(EINVAL);
		memcpy(&lg, v, sizeof(lg));
		/* stored inverted: the default (0) is on, as librdmacm */
		opt_bit(&rs->so_opts, SO_LINGER, !lg.l_onoff);
		return 0;
	}
	if (level != IPPROTO_TCP || name != TCP_CONGESTION) {
		ret = rcm_opt_get_int(v, l, &val);
		if (ret)
			return rcm_err(-ret);
	}
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR:
			if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
					    &val, sizeof(val)) &&
			    errno != ENOSYS && rs->state == RSO_INIT)
				return -1;
			opt_bit(&rs->so_opts, name, val);
			return 0;
		case SO_RCVBUF:
			if (!rs->rbuf && val > 0)
				rs->rbuf_size = (uint32_t)val << 1;
			return 0;
		case SO_SNDBUF:
			if (!rs->sbuf && val > 0)
				rs->sbuf_size = (uint32_t)val << 1;
			if (rs->sbuf_size < RSO_SNDLOWAT)
				rs->sbuf_size = RSO_SNDLOWAT << 1;
			return 0;
		case SO_OOBINLINE:
			opt_bit(&rs->so_opts, name, val);
			return 0;
		case SO_KEEPALIVE:
			if (val && !ka_on(rs)) {
				if (!rs->keepalive_time)
					rs->keepalive_time = ka_default_time();
				ret = ka_add(rs);
				if (ret)
					return rcm_err(-ret);
			} else if (!val) {
				ka_remove(rs);
			}
			opt_bit(&rs->so_opts, name, val);
			return 0;
		}
		break;
	case IPPROTO_IP:
		if (name == IP_TOS) {
			uint8_t tos = (uint8_t)val;

			if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos,
					    sizeof(tos)))
				return -1;
			rs->ip_tos = val;
			return 0;
		}
		break;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_NODELAY:
			opt_bit(&rs->tcp_opts, name, val); /* every write goes at once */
			return 0;
		case TCP_KEEPIDLE:
			if (val <= 0)
				return rcm_err(EINVAL);
			rs->keepalive_time = val;
			if (ka_on(rs) && ka_add(rs)) /* the new period from now */
				return -1;
			return 0;
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
		case TCP_MAXSEG:
		case TCP_CONGESTION:
			return 0; /* nothing to do on a reliable connection */
		}
		break;
	case IPPROTO_IPV6:
		if (name == IPV6_V6ONLY) {
			if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &val,
					    sizeof(val)))
				return -1;
			opt_bit(&rs->ipv6_opts, name, val);
			return 0;
		}
		break;
	case SOL_RDMA:
		if (rs->state >= RSO_OPENING)
			return rcm_err(EINVAL);
		switch (name) {
		case RDMA_SQSIZE:
			rs->sq_size = (uint16_t)((unsigned)val < RSO_QP_MAX ? (unsigned)val : RSO_QP_MAX);
			return 0;
		case RDMA_RQSIZE:
			rs->rq_size = (uint16_t)((unsigned)val < RSO_QP_MAX ? (unsigned)val : RSO_QP_MAX);
			return 0;
		case RDMA_INLINE:
			rs->sq_inline = (uint16_t)((unsigned)val < RSO_QP_MAX ? (unsigned)val : RSO_QP_MAX);
			return 0;
		case RDMA_IOMAPSIZE:
			if (val < 0)
				return rcm_err(EINVAL);
			rs->target_iomap_size =
				(uint16_t)rso_scale_to_value(rso_value_to_scale((unsigned)val) & 0xff);
			return 0;
		case RDMA_ROUTE:
			free(rs->route);
			rs->route = malloc(l);
			if (!rs->route)
				return rcm_err(ENOMEM);
			memcpy(rs->route, v, l);
			rs->route_len = l;
			return 0;
		}
		break;
	}
	return rcm_err(ENOTSUP);
}

/* getsockopt's answer as the calls return it: 0, or -1 and errno. */
static int put_int(void *v, socklen_t *l, int val)
{
	return ret_err(rcm_opt_put_int(v, l, val));
}

RCM_EXPORT int rgetsockopt(int s, int level, int name, void *v, socklen_t *l)
{
	struct rso *rs = rso_get(s);

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds)
		return ret_err(rds_getsockopt(rs->ds, level, name, v, l));
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			return put_int(v, l, !!(rs->so_opts & (1ull << name)));
		case SO_RCVBUF:
			return put_int(v, l, (int)rs->rbuf_size);
		case SO_SNDBUF:
			return put_int(v, l, (int)rs->sbuf_size);
		case SO_LINGER: {
			struct linger lg = { .l_onoff = !(rs->so_opts & (1ull << SO_LINGER)) };

			if (!v || !l || *l < sizeof(lg))
				return rcm_err(EINVAL);
			memcpy(v, &lg, sizeof(lg));
			*l = sizeof(lg);
			return 0;
		}
		case SO_ERROR: {
			int e = rs->err;

			rs->err = 0;
			return put_int(v, l, e);
		}
		}
		break;
	case IPPROTO_IP:
		if (name == IP_TOS)
			return put_int(v, l, rs->ip_tos);
		break;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_NODELAY:
			return put_int(v, l, !!(rs->tcp_opts & (1ull << name)));
		case TCP_KEEPIDLE:
			return put_int(v, l, rs->keepalive_time);
		case TCP_MAXSEG:
			return put_int(v, l, rs->id->route.num_paths && rs->id->route.path_rec
						     ? 1 << (7 + rs->id->route.path_rec->mtu)
						     : 2048);
		}
		break;
	case IPPROTO_IPV6:
		if (name == IPV6_V6ONLY)
			return put_int(v, l, !!(rs->ipv6_opts & (1ull << name)));
		break;
	case SOL_RDMA:
		switch (name) {
		case RDMA_SQSIZE:
			return put_int(v, l, rs->sq_size);
		case RDMA_RQSIZE:
			return put_int(v, l, rs->rq_size);
		case RDMA_INLINE:
			return put_int(v, l, rs->sq_inline);
		case RDMA_IOMAPSIZE:
			return put_int(v, l, rs->target_iomap_size);
		}
		break;
	}
	return rcm_err(ENOTSUP);
}

RCM_EXPORT int rfcntl(int s, int cmd, ...)
{
	struct rso *rs = rso_get(s);
	va_list ap;
	int arg, ret = 0;

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds) {
		va_start(ap, cmd);
		arg = (cmd == F_SETFL || cmd == F_SETFD) ? va_arg(ap, int) : 0;
		va_end(ap);
		return ret_err(rds_fcntl(rs->ds, cmd, arg));
	}
	va_start(ap, cmd);
	switch (cmd) {
	case F_GETFL:
		ret = rs->fs_flags;
		break;
	case F_SETFL:
		arg = va_arg(ap, int);
		rs->fs_flags = arg;
		rs->nonblock = !!(arg & O_NONBLOCK);
		break;
	case F_GETFD:
		ret = rs->fd_flags;
		break;
	case F_SETFD:
		arg = va_arg(ap, int);
		rs->fd_flags = arg;
		if (fcntl(rs->fd, F_SETFD, arg & FD_CLOEXEC))
			ret = -1;
		break;
	default:
		ret = rcm_err(ENOTSUP);
		break;
	}
	va_end(ap);
	return ret;
}

/* ---- I/O maps: riomap, riounmap, riowrite ------------------------------ */

/* A free slot of the peer's table for a writable mapping, or -1. map_lock
 * held. */
static int iomap_free_index(const struct rso *rs)
{
	for (unsigned idx = 0; idx < rs->remote_iomap.length; idx++) {
		bool used = false;

		for (int k = 0; k < rs->niomrs; k++)
			if (rs->iomrs[k].mr && rs->iomrs[k].index == (int)idx)
				used = true;
		if (!used)
			return (int)idx;
	}
	return -1;
}

/* Map buf for the peer's riowrite at offset (-1: its address), as
 * librdmacm: PROT_WRITE takes a slot of the peer's table and is written
 * into it before our next data; PROT_NONE only registers. Conflicting
 * offsets are not checked (as librdmacm). */
RCM_EXPORT off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct rso *rs = rso_get(s);
	struct rso_iomr *m = NULL, *grown;
	int access = IBV_ACCESS_LOCAL_WRITE, index = -1;

	(void)flags;
	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds)
		return rcm_err(ENOTSUP); /* RDMA writes need a connection */
	if (!rs->id->pd || (prot & ~PROT_WRITE) || !buf || !len)
		return rcm_err(EINVAL);
	pthread_mutex_lock(&rs->map_lock);
	if (prot & PROT_WRITE) {
		index = iomap_free_index(rs);
		if (index < 0) {
			pthread_mutex_unlock(&rs->map_lock);
			return rcm_err(ENOMEM); /* the peer's table is full (librdmacm's answer) */
		}
		access |= IBV_ACCESS_REMOTE_WRITE;
	}
	for (int k = 0; k < rs->niomrs; k++)
		if (!rs->iomrs[k].mr)
			m = &rs->iomrs[k];
	if (!m) {
		grown = realloc(rs->iomrs, sizeof(*grown) * (size_t)(rs->niomrs + 1));
		if (!grown) {
			pthread_mutex_unlock(&rs->map_lock);
			return rcm_err(ENOMEM);
		}
		rs->iomrs = grown;
		m = &rs->iomrs[rs->niomrs++];
		memset(m, 0, sizeof(*m));
	}
	m->mr = ibv_reg_mr(rs->id->pd, buf, len, access);
	if (!m->mr) {
		int e = errno;

		pthread_mutex_unlock(&rs->map_lock);
		return rcm_err(e);
	}
	if (offset == -1)
		offset = (off_t)(uintptr_t)buf;
	m->offset = (uint64_t)offset;
	m->index = index;
	m->queued = index >= 0;
	pthread_mutex_unlock(&rs->map_lock);
	return offset;
}

/* The mapping of exactly buf and len undone (the peer's table keeps the
 * stale entry, as with librdmacm: the caller's protocol must stop its
 * writes first). */
RCM_EXPORT int riounmap(int s, void *buf, size_t len)
{
	struct rso *rs = rso_get(s);
	int ret = rcm_err(EINVAL);

	if (!rs)
		return rcm_err(EBADF);
	if (rs->ds)
		return rcm_err(ENOTSUP);
	pthread_mutex_lock(&rs->map_lock);
	for (int k = 0; k < rs->niomrs; k++) {
		struct rso_iomr *m = &rs->iomrs[k];

		if (m->mr && m->mr->addr == buf && m->mr->length == len) {
			ibv_dereg_mr(m->mr);
			memset(m, 0, sizeof(*m));
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&rs->map_lock);
	return ret;
}

/* The peer's mapping covering offset, copied (cq_lock held: the peer
 * writes the table; an entry is read whole after its IOMAP_SGL arrived). */
static bool iomap_find(struct rso *rs, uint64_t offset, struct rso_iomap *out)
{
	for (unsigned k = 0; k < rs->target_iomap_size; k++) {
		uint64_t o = rs->target_iomap[k].offset;
		uint32_t l = rs->target_iomap[k].sge.length;

		if (l && offset >= o && offset < o + l) {
			out->offset = o;
			out->sge.addr = rs->target_iomap[k].sge.addr;
			out->sge.key = rs->target_iomap[k].sge.key;
			out->sge.length = l;
			return true;
		}
	}
	return false;
}

/* count bytes of buf straight into the peer's mapping at offset (plain
 * RDMA writes, nothing for the peer's receive queue): the bytes written,
 * as librdmacm (0 when no mapping covers offset). */
RCM_EXPORT size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	struct rso *rs = rso_get(s);
	struct iovec v = { .iov_base = (void *)buf, .iov_len = count };
	size_t left = count, ioff = 0;
	uint32_t olen = RSO_OLAP_START;
	uint64_t off = (uint64_t)offset;
	int ret, i = 0;

	if (!rs)
		return (size_t)rcm_err(EBADF);
	if (rs->ds)
		return (size_t)rcm_err(ENOTSUP);
	ret = ensure_connected(rs, !nonblocking(rs, flags));
	if (ret)
		return (size_t)rcm_err(-ret);
	if (unconnected(rs))
		return (size_t)rcm_err(ENOTCONN);
	pthread_mutex_lock(&rs->slock);
	if (iomap_pending(rs))
		ret = send_iomaps(rs, flags);
	while (!ret && left) {
		struct ibv_send_wr wr, *bad;
		struct rso_iomap iom;
		struct ibv_sge sge[2];
		uint32_t xfer;

		ret = wait_send(rs, flags);
		if (ret)
			break;
		pthread_mutex_lock(&rs->cq_lock);
		if (!iomap_find(rs, off, &iom)) {
			pthread_mutex_unlock(&rs->cq_lock);
			break;
		}
		if (olen < left) {
			xfer = olen;
			if (olen < RSO_MAX_XFER)
				olen <<= 1;
		} else {
			xfer = (uint32_t)left;
		}
		if (xfer > rs->sbuf_bytes_avail)
			xfer = rs->sbuf_bytes_avail;
		if (xfer > iom.offset + iom.sge.length - off)
			xfer = (uint32_t)(iom.offset + iom.sge.length - off);
		memset(&wr, 0, sizeof(wr));
		wr.sg_list = sge;
		wr.num_sge = sbuf_stage(rs, &v, &i, &ioff, xfer, sge);
		wr.wr_id = RSO_MSG(RSO_OP_WRITE, xfer);
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = xfer <= rs->sq_inline ? IBV_SEND_INLINE : 0;
		wr.wr.rdma.remote_addr = iom.sge.addr + (off - iom.offset);
		wr.wr.rdma.rkey = iom.sge.key;
		rs->sqe_avail--;
		rs->sbuf_bytes_avail -= xfer;
		ret = -ibv_post_send(rs->id->qp, &wr, &bad);
		pthread_mutex_unlock(&rs->cq_lock);
		if (!ret) {
			left -= xfer;
			off += xfer;
		}
	}
	pthread_mutex_unlock(&rs->slock);
	if (ret && left == count)
		return (size_t)rcm_err(ret == -EWOULDBLOCK ? EWOULDBLOCK : -ret);
	return count - left;
}

/* ---- rpoll, rselect ---------------------------------------------------- */

/* What rs is ready for, driving it without sleeping. */
static short poll_rs(struct rso *rs, short events)
{
	short rev = 0;

	if (rs->ds)
		return rds_poll(rs->ds, events);
	if (rs->state == RSO_LISTENING) {
		struct pollfd p = { .fd = rs->ch->fd, .events = POLLIN };

		if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN))
			rev |= events & POLLIN;
		return rev;
	}
	if (rs->state & RSO_OPENING) {
		pthread_mutex_lock(&rs->slock);
		(void)do_connect(rs, false);
		pthread_mutex_unlock(&rs->slock);
	}
	if (rs->state & (RSO_CONNECTED | RSO_ERROR) || rs->state == RSO_DISCONNECTED) {
		process_cq(rs, true, always);
		/* under cq_lock: another thread's process_cq moves them */
		if ((events & POLLIN) && locked(rs, conn_have_rdata))
			rev |= POLLIN;
		if ((events & POLLOUT) && locked(rs, can_send))
			rev |= POLLOUT;
		/* POLLHUP once what came before the peer's disconnect is read:
		 * librdmacm reports it at once beside POLLIN, and a program
		 * that stops at POLLHUP (rstream -T a) loses the last data; a
		 * TCP socket whose peer closed is readable until drained too */
		if (!(rs->state & RSO_CONNECTED)) {
			if (rs->state != RSO_DISCONNECTED)
				rev |= POLLERR;
			else if (!locked(rs, have_rdata))
				rev |= POLLHUP;
		}
	} else if (rs->state == RSO_CONNECT_ERROR) {
		rev |= (short)(events & (POLLIN | POLLOUT)) | POLLERR;
	}
	return rev;
}

static int poll_check(struct pollfd *fds, nfds_t n)
{
	int cnt = 0;

	for (nfds_t i = 0; i < n; i++) {
		struct rso *rs = rso_get(fds[i].fd);

		if (rs) {
			fds[i].revents = poll_rs(rs, fds[i].events);
		} else {
			fds[i].revents = 0;
			if (poll(&fds[i], 1, 0) < 0)
				return -1;
		}
		if (fds[i].revents)
			cnt++;
	}
	return cnt;
}

RCM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct pollfd *w;
	int64_t end = timeout > 0 ? now_ms() + timeout : 0;
	nfds_t n;
	int ret;

	/* no rsocket among them: poll(2) itself, one system call (rping's
	 * and cmtime's CM channels) */
	for (n = 0; n < nfds && !rso_get(fds[n].fd); n++)
		;
	if (n == nfds)
		return poll(fds, nfds, timeout);
	ret = poll_check(fds, nfds);
	if (ret || !timeout)
		return ret;
	/* descriptors to wait on per rsocket: completions and CM events (a
	 * datagram rsocket's: RDS_WAIT_FDS) */
	w = calloc(nfds * RDS_WAIT_FDS + 1, sizeof(*w));
	if (!w)
		return rcm_err(ENOMEM);
	for (;;) {
		nfds_t k = 0;
		int left = -1, err;
		bool expired = false;

		for (nfds_t i = 0; i < nfds; i++) {
			struct rso *rs = rso_get(fds[i].fd);

			if (!rs) {
				w[k++] = (struct pollfd){ .fd = fds[i].fd, .events = fds[i].events };
				continue;
			}
			if (rs->ds) {
				k += (nfds_t)rds_wait_begin(rs->ds, fds[i].events, &w[k]);
				continue;
			}
			pthread_mutex_lock(&rs->cq_lock);
			if (rs->cq) {
				if (!rs->cq_armed) {
					ibv_req_notify_cq(rs->cq, 0);
					rs->cq_armed = true;
				}
				w[k++] = (struct pollfd){ .fd = rs->comp->fd, .events = POLLIN };
			}
			pthread_mutex_unlock(&rs->cq_lock);
			w[k++] = (struct pollfd){ .fd = rs->ch->fd, .events = POLLIN };
		}
		/* completions between the check and the arm */
		ret = poll_check(fds, nfds);
		if (!ret && timeout > 0) {
			int64_t rem = end - now_ms();

			expired = rem <= 0;
			left = (int)rem;
		}
		if (!ret && !expired && poll(w, k, left) < 0)
			ret = -1;
		/* every datagram rsocket's wait ends, whatever ended ours */
		err = errno;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rso *rs = rso_get(fds[i].fd);

			if (rs && rs->ds)
				rds_wait_end(rs->ds, fds[i].events);
		}
		errno = err;
		if (ret || expired)
			break;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rso *rs = rso_get(fds[i].fd);

			if (rs && !rs->ds) {
				pthread_mutex_lock(&rs->cq_lock);
				if (rs->cq)
					drain_cq_events(rs);
				pthread_mutex_unlock(&rs->cq_lock);
			}
		}
		ret = poll_check(fds, nfds);
		if (ret)
			break;
	}
	free(w);
	return ret;
}

RCM_EXPORT int rselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	struct pollfd *p;
	int n = 0, ret, to;

	if (nfds < 0 || nfds > FD_SETSIZE)
		return rcm_err(EINVAL);
	p = calloc((size_t)nfds + 1, sizeof(*p));
	if (!p)
		return rcm_err(ENOMEM);
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (rd && FD_ISSET(fd, rd))
			ev |= POLLIN;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT;
		if (ex && FD_ISSET(fd, ex))
			ev |= POLLPRI;
		if (ev)
			p[n++] = (struct pollfd){ .fd = fd, .events = ev };
	}
	to = tv ? (int)(tv->tv_sec * 1000 + tv->tv_usec / 1000) : -1;
	ret = rpoll(p, (nfds_t)n, to);
	if (ret < 0) {
		free(p);
		return ret;
	}
	if (rd)
		FD_ZERO(rd);
	if (wr)
		FD_ZERO(wr);
	if (ex)
		FD_ZERO(ex);
	ret = 0;
	for (int i = 0; i < n; i++) {
		bool any = false;

		if (rd && (p[i].revents & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(p[i].fd, rd);
			any = true;
		}
		if (wr && (p[i].revents & (POLLOUT | POLLERR))) {
			FD_SET(p[i].fd, wr);
			any = true;
		}
		if (ex && (p[i].revents & POLLPRI)) {
			FD_SET(p[i].fd, ex);
			any = true;
		}
		ret += any;
	}
	free(p);
	return ret;
}
