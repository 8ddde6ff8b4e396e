/* SPDX-License-Identifier: MIT */
/*
 * libibumad transport: QP1 of one port, CM class 0x07 version 2 (method Send).
 * Sends are lock-free writes from any thread on a second umad fd of their
 * own (a send-only agent): ib_umad holds a file's mutex for the whole of a
 * write - on RoCE that includes creating an address handle, which resolves
 * the peer's MAC through the ib_addr workqueue - and its receive side
 * (queue_packet, read) takes the same mutex, so on one fd every MAD
 * received waited behind the sends in progress (10,000 connections in a
 * one-vCPU guest: the server read 25 MADs a second while its REP retries
 * went out; issue 21). One receive
 * thread polls the fd and an eventfd, so stop() wakes and joins it promptly;
 * after each poll it reads every MAD already queued (the fd is non-blocking),
 * one system call per MAD instead of two while MADs arrive faster than it
 * handles them. The receive thread may wait in the receive function (a
 * full CM worker ring: transport/recv_wait.h) until stop() sets stopping.
 * Driven (transport/source.h, as libcep's CM does it), it has no receive
 * thread: whichever thread leads the CM's receive queue (cm/lead.h) polls
 * the fd and reads the same batches (umad_drain) on its own thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>

#include <infiniband/umad.h>
#include <infiniband/verbs.h>

#include <cep/umad.h>

#include "transport/recv_wait.h"
#include "transport/source.h"
#include "wire/pcap.h"

#define CM_MGMT_CLASS 0x07
#define CM_CLASS_VERSION 2
#define MGMT_METHOD_SEND 0x03
#define MAD_HDR_SIZE 24
#define QP1_QKEY 0x80010000u
#define ROCE_DEFAULT_HOP_LIMIT 64

enum umad_run_state {
	UMAD_IDLE,      /* opened, start() not called */
	UMAD_RUNNING,   /* receive thread created, not joined */
	UMAD_DRIVEN,    /* started without a thread: its leaders read (drive) */
	UMAD_STOPPED,   /* joined, or stopped before start */
};

struct umad_transport {
	struct cep_transport pub;
	int fd;                    /* umad port fd, stable until destroy */
	int agent;                 /* agent id of the CM class registration */
	int send_fd;               /* sends: a second fd (or fd), stable */
	int send_agent;            /* its send-only agent (or agent) */
	int wake_fd;               /* eventfd: stop() -> receive thread */
	struct ibv_context *ctx;   /* for query_port: GIDs, MTU, P_Key */
	char ca_name[UMAD_CA_NAME_LEN];
	uint8_t port_num;
	uint8_t gid_index;
	uint8_t link_layer;        /* 1 InfiniBand, 2 Ethernet */
	uint64_t ca_guid_net;
	uint8_t my_gid[16];        /* GID at gid_index, at open: capture only */
	uint16_t my_lid;           /* at open: capture only */
	cep_recv_fn fn;
	void *fn_ctx;
	pthread_t thread;
	/* Serialises start/stop/destroy: two stop() calls must not both join,
	 * and a stop() racing start() must see the thread. Never taken on the
	 * send or receive paths. */
	pthread_mutex_t lock;
	int state;                 /* enum umad_run_state, under lock */
	int driven;                /* under lock: drive() made it threadless */
	/* Set by stop() before it wakes the receive thread: a delivery
	 * waiting for room in a full CM worker ring gives up (recv_wait.h).
	 * Relaxed: the eventfd and the join order the rest. */
	_Atomic int stopping;
	/* Statistics only: relaxed, no ordering with anything. */
	_Atomic uint64_t sent, send_errors, received, recv_errors, recv_status,
		recv_dropped;
};

static const struct cep_transport_ops umad_ops;

/* The transport whose receive function this thread is running, so stop()
 * from inside the callback does not wait for itself. */
static _Thread_local struct umad_transport *in_recv_thread;

static struct umad_transport *to_umad(struct cep_transport *t)
{
	return (struct umad_transport *)t;
}

static void count(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* Record one MAD on this port in the process-wide capture (src/wire/pcap.h);
 * the CM leaves capture to the transports, which know the wire addresses.
 * @peer is the other end; @out says which way the MAD went. */
static void capture(const struct umad_transport *u, const uint8_t *mad, size_t len,
		    const struct cep_mad_addr *peer, bool out)
{
	struct cep_pcap_meta m;

	/* Skip building the metadata while capture is known to be off. */
	if (atomic_load_explicit(&cep_capture_state, memory_order_relaxed) == CEP_CAPTURE_OFF)
		return;
	memset(&m, 0, sizeof(m));
	memcpy(out ? m.sgid : m.dgid, u->my_gid, 16);
	memcpy(out ? m.dgid : m.sgid, peer->gid, 16);
	m.slid = out ? u->my_lid : peer->lid;
	m.dlid = out ? peer->lid : u->my_lid;
	m.src_qpn = out ? 1 : peer->qpn;
	m.dst_qpn = out ? peer->qpn : 1;
	m.qkey = peer->qkey;
	m.sl = peer->sl;
	m.grh = u->link_layer == IBV_LINK_LAYER_ETHERNET || peer->grh_present;
	cep_capture_mad(mad, len, &m);
}

static bool gid_is_zero(const uint8_t gid[16])
{
	static const uint8_t zero[16];

	return memcmp(gid, zero, 16) == 0;
}

/* Any thread, concurrently, no lock: the buffer is on the stack and the
 * kernel serialises writes on the fd. Not after destroy(). */
static int umad_send_mad(struct cep_transport *t, const uint8_t *mad,
			 size_t len, const struct cep_mad_addr *to)
{
	struct umad_transport *u = to_umad(t);
	/* ib_user_mad header + one MAD, 8-aligned for the kernel ABI struct. */
	uint64_t buf[(sizeof(struct ib_user_mad) + 8 + CEP_MAD_SIZE) / 8 + 1];
	void *umad = buf;
	bool grh;

	if (!mad || !to || len < MAD_HDR_SIZE || len > CEP_MAD_SIZE ||
	    to->qpn > 0xffffff || to->sl > 15)
		return -EINVAL;
	grh = u->link_layer == IBV_LINK_LAYER_ETHERNET || to->grh_present;
	if (grh && gid_is_zero(to->gid))
		return -EINVAL;
	if (grh && to->flow_label > 0xfffff)
		return -EINVAL;

	memset(buf, 0, sizeof(buf));
	memcpy(umad_get_mad(umad), mad, len);
	umad_set_addr(umad, to->lid, (int)to->qpn, to->sl, (int)to->qkey);
	umad_set_pkey(umad, to->pkey_index);
	if (grh) {
		struct ib_mad_addr g;

		memset(&g, 0, sizeof(g));
		memcpy(g.gid, to->gid, 16);
		g.flow_label = to->flow_label;  /* umad_set_grh converts */
		g.hop_limit = to->hop_limit;
		if (g.hop_limit == 0 && u->link_layer == IBV_LINK_LAYER_ETHERNET)
			g.hop_limit = ROCE_DEFAULT_HOP_LIMIT;
		g.traffic_class = to->traffic_class;
		umad_set_grh(umad, &g);
		/* umad_set_grh leaves the source GID index alone. */
		umad_get_mad_addr(umad)->gid_index = to->gid_index;
	}
	umad_get_mad_addr(umad)->path_bits = to->path_bits;

	/* timeout 0: no kernel retries or response matching; the CM times
	 * its own retries. */
	if (umad_send(u->send_fd, u->send_agent, umad, CEP_MAD_SIZE, 0, 0) < 0) {
		int err = errno ? errno : EIO;

		count(&u->send_errors);
		return -err;
	}
	count(&u->sent);
	capture(u, mad, len, to, true);
	return 0;
}

/* Any thread, no lock; live reads from libibverbs and sysfs. */
static int umad_query_port(struct cep_transport *t, struct cep_port_info *out)
{
	struct umad_transport *u = to_umad(t);
	struct ibv_port_attr pa;
	struct ibv_device_attr da;
	union ibv_gid gid;
	umad_port_t port;
	__be16 pkey;
	int ret;

	if (!out)
		return -EINVAL;
	ret = ibv_query_port(u->ctx, u->port_num, &pa);
	if (ret)
		return -ret;
	ret = ibv_query_device(u->ctx, &da);
	if (ret)
		return -ret;
	/* These two return -1 and may leave errno unset. */
	errno = 0;
	if (ibv_query_gid(u->ctx, u->port_num, u->gid_index, &gid))
		return errno ? -errno : -EIO;
	errno = 0;
	if (ibv_query_pkey(u->ctx, u->port_num, 0, &pkey))
		return errno ? -errno : -EIO;
	ret = umad_get_port(u->ca_name, u->port_num, &port);
	if (ret < 0)
		return ret;

	memset(out, 0, sizeof(*out));
	out->ca_guid_net = u->ca_guid_net;
	memcpy(out->gid, gid.raw, 16);
	out->lid = (uint16_t)port.base_lid;
	out->port_num = u->port_num;
	out->link_layer = u->link_layer;
	out->gid_index = u->gid_index;
	out->active_mtu = (uint8_t)pa.active_mtu;
	out->pkey = ntohs(pkey);
	out->ca_ack_delay = da.local_ca_ack_delay > 31 ? 31 : da.local_ca_ack_delay;
	umad_release_port(&port);
	return 0;
}

/* Receive thread only: convert the kernel's address and call the user. */
static void deliver(struct umad_transport *u, void *umad, int len)
{
	const struct ib_mad_addr *a = umad_get_mad_addr(umad);
	struct cep_mad_addr from;

	if (umad_status(umad) != 0) {
		/* A send with a kernel timeout came back unanswered; we never
		 * ask for those, but a status MAD carries no data to deliver. */
		count(&u->recv_status);
		return;
	}
	if (len < MAD_HDR_SIZE || len > CEP_MAD_SIZE) {
		count(&u->recv_dropped);
		return;
	}
	memset(&from, 0, sizeof(from));
	from.lid = ntohs(a->lid);
	from.sl = a->sl;
	from.path_bits = a->path_bits;
	from.qpn = ntohl(a->qpn) & 0xffffff;
	/* ib_umad leaves qkey unset on receive; every GSI MAD carries the
	 * well-known QP1 Q_Key (the GSI QP accepts no other). */
	from.qkey = a->qkey ? ntohl(a->qkey) : QP1_QKEY;
	from.pkey_index = (uint16_t)umad_get_pkey(umad);
	from.grh_present = a->grh_present;
	if (a->grh_present) {
		from.hop_limit = a->hop_limit;
		from.traffic_class = a->traffic_class;
		from.gid_index = a->gid_index;
		from.flow_label = ntohl(a->flow_label) & 0xfffff;
		memcpy(from.gid, a->gid, 16);
	}
	count(&u->received);
	capture(u, umad_get_mad(umad), (size_t)len, &from, false);
	u->fn(u->fn_ctx, umad_get_mad(umad), (size_t)len, &from);
}

/* Drain one MAD too large for our buffer (an RMPP class never registered
 * here should not reach us, but a stuck MAD must not spin the thread). */
static void drain_large(struct umad_transport *u, int need)
{
	size_t sz = umad_size() + (size_t)need;
	void *big = malloc(sz);
	int len = need;

	count(&u->recv_dropped);
	if (big) {
		(void)umad_recv(u->fd, big, &len, 0);
		free(big);
	}
}

enum { RECV_BATCH = 64 };

/* Read and deliver what waits, at most RECV_BATCH MADs (the fd does not
 * block): the receive thread's body after each poll, and a driven
 * transport's drain. The number delivered. */
static int read_batch(struct umad_transport *u)
{
	uint64_t buf[(sizeof(struct ib_user_mad) + 8 + CEP_MAD_SIZE) / 8 + 1];
	int got = 0;

	for (int i = 0; i < RECV_BATCH; i++) {
		int len = CEP_MAD_SIZE;

		memset(buf, 0, sizeof(buf));
		errno = 0;
		int ret = umad_recv(u->fd, buf, &len, 0);

		if (ret >= 0) {
			deliver(u, buf, len);
			got++;
			continue;
		}
		if (ret == -ENOSPC || errno == ENOSPC) {
			drain_large(u, len > CEP_MAD_SIZE ? len : 4096);
			continue;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			count(&u->recv_errors);
			(void)poll(NULL, 0, 1);  /* no busy loop on a sick fd */
		}
		break;
	}
	return got;
}

/* The receive thread: until the eventfd fires, read and deliver MADs. fn and
 * fn_ctx were written before pthread_create, which orders them for us. */
static void *recv_thread(void *arg)
{
	struct umad_transport *u = arg;
	struct pollfd pfd[2] = {
		{ .fd = u->fd, .events = POLLIN },
		{ .fd = u->wake_fd, .events = POLLIN },
	};

	in_recv_thread = u;
	(void)pthread_setname_np(pthread_self(), "cep-umad");
	/* Our own thread: the CM may make it wait for room instead of
	 * dropping a MAD (the kernel's umad queue holds the rest). */
	cep_recv_wait_abort = &u->stopping;

	for (;;) {
		int n = poll(pfd, 2, -1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			count(&u->recv_errors);
			/* poll on two valid fds only fails for ENOMEM: back
			 * off instead of spinning. */
			(void)poll(NULL, 0, 10);
			continue;
		}
		if (pfd[1].revents)
			break;
		if (!(pfd[0].revents & POLLIN)) {
			if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
				count(&u->recv_errors);
				(void)poll(NULL, 0, 10);
			}
			continue;
		}
		/* Read until the queue is empty (EAGAIN), at most RECV_BATCH
		 * before polling again so stop() is seen during a flood. */
		(void)read_batch(u);
	}
	return NULL;
}

/* A driven transport's drain (transport/source.h): on the leader's
 * thread, which is then this transport's receive thread for the CM
 * (cep_recv_wait_abort: it may run a MAD to completion, or wait for room
 * in a worker's ring until stop). Nothing after stop(). */
static int umad_drain(void *ctx)
{
	struct umad_transport *u = ctx;
	const _Atomic int *saved = cep_recv_wait_abort;
	struct umad_transport *saved_in = in_recv_thread;
	int got;

	/* acquire: fn and fn_ctx, written by start() before the CM could
	 * hand this source to a leader, are read after a stop() we must see */
	if (atomic_load_explicit(&u->stopping, memory_order_acquire))
		return 0;
	cep_recv_wait_abort = &u->stopping;
	in_recv_thread = u;
	got = read_batch(u);
	in_recv_thread = saved_in;
	cep_recv_wait_abort = saved;
	return got;
}

/* transport/source.h: before start(), make @t threadless. */
static int umad_drive(struct cep_transport *t, struct cep_transport_source *src)
{
	struct umad_transport *u = to_umad(t);
	int ret = 0;

	pthread_mutex_lock(&u->lock);
	if (u->state != UMAD_IDLE)
		ret = -EALREADY;
	else
		u->driven = 1;
	pthread_mutex_unlock(&u->lock);
	if (ret)
		return ret;
	src->fd = u->fd;
	src->drain = umad_drain;
	src->ctx = u;
	return 0;
}

static int umad_start(struct cep_transport *t, cep_recv_fn fn, void *ctx)
{
	struct umad_transport *u = to_umad(t);
	int ret = 0;

	if (!fn)
		return -EINVAL;
	pthread_mutex_lock(&u->lock);
	if (u->state != UMAD_IDLE) {
		ret = -EALREADY;
	} else {
		u->fn = fn;
		u->fn_ctx = ctx;
		if (u->driven) {
			u->state = UMAD_DRIVEN; /* its leaders read the fd */
		} else {
			ret = -pthread_create(&u->thread, NULL, recv_thread, u);
			if (ret == 0)
				u->state = UMAD_RUNNING;
		}
	}
	pthread_mutex_unlock(&u->lock);
	return ret;
}

static void wake(struct umad_transport *u)
{
	uint64_t one = 1;

	/* Only fails if the counter would overflow: it is woken already. */
	(void)!write(u->wake_fd, &one, sizeof(one));
}

static void umad_stop(struct cep_transport *t)
{
	struct umad_transport *u = to_umad(t);

	/* release: pairs with umad_drain's acquire */
	atomic_store_explicit(&u->stopping, 1, memory_order_release);
	if (in_recv_thread == u) {
		wake(u);  /* the thread ends after this callback; destroy joins */
		return;
	}
	pthread_mutex_lock(&u->lock);
	if (u->state == UMAD_RUNNING) {
		wake(u);
		pthread_join(u->thread, NULL);
	}
	u->state = UMAD_STOPPED;
	pthread_mutex_unlock(&u->lock);
}

static void umad_destroy(struct cep_transport *t)
{
	struct umad_transport *u = to_umad(t);

	if (!u)
		return;
	umad_stop(t);
	if (u->send_fd != u->fd) {
		umad_unregister(u->send_fd, u->send_agent);
		umad_close_port(u->send_fd);
	}
	umad_unregister(u->fd, u->agent);
	umad_close_port(u->fd);
	close(u->wake_fd);
	ibv_close_device(u->ctx);
	pthread_mutex_destroy(&u->lock);
	free(u);
}

static const struct cep_transport_ops umad_ops = {
	.send = umad_send_mad,
	.query_port = umad_query_port,
	.start = umad_start,
	.stop = umad_stop,
	.destroy = umad_destroy,
};

static struct ibv_context *open_verbs(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	if (!list)
		return NULL;
	for (int i = 0; list[i]; i++) {
		if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
			ctx = ibv_open_device(list[i]);
			break;
		}
	}
	ibv_free_device_list(list);
	return ctx;
}

static bool gid_is_v4mapped(const uint8_t g[16])
{
	static const uint8_t prefix[12] = { [10] = 0xff, [11] = 0xff };

	return memcmp(g, prefix, sizeof(prefix)) == 0;
}

/* InfiniBand: 0. Ethernet: the first RoCE v2 GID of an IPv4 address (what
 * IPv4 peers and rdma_cm use: an IPv6 source GID cannot reach an IPv4
 * destination), else the first RoCE v2 GID. */
static int pick_gid_index(struct ibv_context *ctx, uint8_t port, int tbl_len,
			  uint8_t link_layer)
{
	int any_v2 = -EADDRNOTAVAIL;

	if (link_layer != IBV_LINK_LAYER_ETHERNET)
		return 0;
	for (int i = 0; i < tbl_len && i < 256; i++) {
		struct ibv_gid_entry e;

		if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0))
			continue;
		if (e.gid_type != IBV_GID_TYPE_ROCE_V2 || gid_is_zero(e.gid.raw))
			continue;
		if (gid_is_v4mapped(e.gid.raw))
			return i;
		if (any_v2 < 0)
			any_v2 = i;
	}
	return any_v2;
}

CEP_EXPORT int cep_umad_open(const struct cep_umad_attr *attr,
			     struct cep_transport **out)
{
	struct cep_umad_attr a = { .gid_index = CEP_UMAD_GID_AUTO };
	struct umad_transport *u;
	struct ibv_port_attr pa;
	umad_ca_t ca;
	long mask[16 / sizeof(long)];
	int flags;
	int ret;

	if (!attr || !out ||
	    attr->size < offsetof(struct cep_umad_attr, port_num) + 1)
		return -EINVAL;
	memcpy(&a, attr, attr->size < sizeof(a) ? attr->size : sizeof(a));
	if (attr->size < offsetof(struct cep_umad_attr, gid_index) + sizeof(a.gid_index))
		a.gid_index = CEP_UMAD_GID_AUTO;
	if (a.gid_index < CEP_UMAD_GID_AUTO || a.gid_index > 255)
		return -EINVAL;
	if (a.port_num == 0)
		a.port_num = 1;

	if (umad_init() < 0)
		return -ENODEV;
	ret = umad_get_ca(a.dev_name, &ca);
	if (ret < 0)
		return -ENODEV;
	u = calloc(1, sizeof(*u));
	if (!u) {
		umad_release_ca(&ca);
		return -ENOMEM;
	}
	u->pub.ops = &umad_ops;
	u->fd = -1;
	u->send_fd = -1;
	u->wake_fd = -1;
	u->state = UMAD_IDLE;
	pthread_mutex_init(&u->lock, NULL);
	memcpy(u->ca_name, ca.ca_name, sizeof(u->ca_name));
	u->ca_name[sizeof(u->ca_name) - 1] = '\0';
	u->ca_guid_net = ca.node_guid;
	u->port_num = a.port_num;
	ret = a.port_num > ca.numports ? -ENODEV : 0;
	umad_release_ca(&ca);
	if (ret)
		goto fail;

	u->ctx = open_verbs(u->ca_name);
	if (!u->ctx) {
		ret = errno ? -errno : -ENODEV;
		goto fail;
	}
	ret = ibv_query_port(u->ctx, u->port_num, &pa);
	if (ret) {
		ret = -ret;
		goto fail;
	}
	u->link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ?
		IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
	if (a.gid_index == CEP_UMAD_GID_AUTO) {
		ret = pick_gid_index(u->ctx, u->port_num, pa.gid_tbl_len,
				     u->link_layer);
		if (ret < 0)
			goto fail;
		a.gid_index = ret;
	} else if (a.gid_index >= pa.gid_tbl_len) {
		ret = -EINVAL;
		goto fail;
	}
	u->gid_index = (uint8_t)a.gid_index;
	u->my_lid = pa.lid;
	{
		union ibv_gid g;

		if (ibv_query_gid(u->ctx, u->port_num, u->gid_index, &g) == 0)
			memcpy(u->my_gid, g.raw, 16);
	}

	u->wake_fd = eventfd(0, EFD_CLOEXEC);
	if (u->wake_fd < 0) {
		ret = -errno;
		goto fail;
	}
	errno = 0;
	u->fd = umad_open_port(u->ca_name, u->port_num);
	if (u->fd < 0) {
		/* libibumad says -EIO for any open() failure; errno is why. */
		ret = errno ? -errno : u->fd;
		u->fd = -1;
		goto fail;
	}
	/* Non-blocking reads let the receive thread drain the queue after
	 * one poll (libibumad may already open it so; sends never block). */
	flags = fcntl(u->fd, F_GETFL);
	if (flags < 0 || fcntl(u->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		ret = -errno;
		goto fail;
	}
	memset(mask, 0, sizeof(mask));
	mask[MGMT_METHOD_SEND / (8 * sizeof(long))] |=
		1L << (MGMT_METHOD_SEND % (8 * sizeof(long)));
	errno = 0;
	u->agent = umad_register(u->fd, CM_MGMT_CLASS, CM_CLASS_VERSION, 0, mask);
	if (u->agent < 0) {
		/* The kernel answers EINVAL when the class/method is taken
		 * (ib_cm loaded, or another CM process on this port). */
		ret = errno == EINVAL || errno == EBUSY ? -EBUSY :
			errno ? -errno : -EIO;
		goto fail;
	}
	/* The sends' own fd: an agent of no class receives nothing
	 * unsolicited (ib_umad_reg_agent registers no class for class 0) and
	 * still sends on QP1; the kernel stamps its TIDs' upper half, as
	 * for any agent. Without one (out of fds, say) sends share the
	 * receive fd, as before. */
	u->send_fd = umad_open_port(u->ca_name, u->port_num);
	u->send_agent = u->send_fd < 0 ? -1 : umad_register(u->send_fd, 0, 0, 0, NULL);
	if (u->send_agent < 0) {
		if (u->send_fd >= 0)
			umad_close_port(u->send_fd);
		u->send_fd = u->fd;
		u->send_agent = u->agent;
	}
	/* its CMs drive it: their waiting threads read its fd (source.h) */
	cep_transport_register_source(&umad_ops, umad_drive);
	*out = &u->pub;
	return 0;

fail:
	if (u->fd >= 0)
		umad_close_port(u->fd);
	if (u->wake_fd >= 0)
		close(u->wake_fd);
	if (u->ctx)
		ibv_close_device(u->ctx);
	pthread_mutex_destroy(&u->lock);
	free(u);
	return ret;
}

CEP_EXPORT int cep_umad_get_stats(struct cep_transport *t,
				  struct cep_umad_stats *out)
{
	struct umad_transport *u = to_umad(t);

	if (!t || !out || t->ops != &umad_ops)
		return -EINVAL;
	out->sent = atomic_load_explicit(&u->sent, memory_order_relaxed);
	out->send_errors = atomic_load_explicit(&u->send_errors, memory_order_relaxed);
	out->received = atomic_load_explicit(&u->received, memory_order_relaxed);
	out->recv_errors = atomic_load_explicit(&u->recv_errors, memory_order_relaxed);
	out->recv_status = atomic_load_explicit(&u->recv_status, memory_order_relaxed);
	out->recv_dropped = atomic_load_explicit(&u->recv_dropped, memory_order_relaxed);
	return 0;
}
