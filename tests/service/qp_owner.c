/* SPDX-License-Identifier: MIT */
/*
 * cepd_qp_owner() against a scripted kernel: the seam of qp_owner_ops.h
 * with a fake NETLINK_RDMA that decodes each request and answers as
 * drivers/infiniband/core/nldev.c does (device dump, QP doit per port with
 * -EAGAIN/-ENOENT, QP dump in multipart datagrams), plus mangling hooks for
 * malformed and truncated replies. One meson test per case (argv[1]).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#include "service/qp_owner.h"
#include "service/qp_owner_ops.h"
#include "../common/check.h"

#define NLDEV(cmd) ((uint16_t)RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, (cmd)))
#define DGRAM_MAX 96
#define DGRAM_CAP 65536

/* ---- the fake kernel --------------------------------------------------- */

enum owner { USER, KERNEL, GONE }; /* GONE: user QP, creating thread exited */

struct fqp {
	uint32_t dev, qpn, port; /* port 0: RESET, no port yet */
	enum owner owner;
	uint32_t tid;
};

struct fdev {
	const char *name;
	uint32_t index, ports;
};

struct dgram {
	uint8_t b[DGRAM_CAP];
	size_t len;
	size_t claimed; /* what recv reports; > cap for a truncated one */
	bool dropped;   /* never delivered */
};

struct req_seen {
	uint16_t type, flags;
	bool has_dev, has_port, has_qpn;
	uint32_t dev, port, qpn;
};

struct fake {
	struct fdev devs[4];
	int ndevs;
	struct fqp qps[400];
	int nqps;
	bool no_doit;          /* kernel without the QP doit: -EINVAL */
	bool no_tracking;      /* ... and without the QP dump: -EINVAL */
	int entries_per_msg;   /* QP dump: entries per message */
	int msgs_per_dgram;    /* messages packed in one datagram */
	/* Called on each reply datagram; @req counts requests from 0. */
	void (*mangle)(struct fake *k, struct dgram *d, int req);
	/* tid -> tgid */
	uint32_t thread_tid, thread_tgid;
	bool tgid_gone;
	/* state */
	struct dgram q[DGRAM_MAX];
	int qhead, qtail;
	struct req_seen reqs[64];
	int nreqs;
	int tgid_calls;
};

static struct fake K;

static void fake_reset(void)
{
	memset(&K, 0, sizeof(K));
	K.entries_per_msg = 1000;
	K.msgs_per_dgram = 1;
}

/* -- message building -- */

static struct dgram *cur;

static struct dgram *dgram_new(void)
{
	struct dgram *d;

	if (K.qtail >= DGRAM_MAX) {
		fprintf(stderr, "fake kernel: datagram queue full\n");
		abort();
	}
	d = &K.q[K.qtail++];
	d->len = 0;
	d->claimed = 0;
	d->dropped = false;
	return d;
}

static void *put(const void *p, size_t n)
{
	uint8_t *at = cur->b + cur->len;

	if (cur->len + NLA_ALIGN(n) > DGRAM_CAP)
		abort();
	memset(at, 0, NLA_ALIGN(n));
	if (p)
		memcpy(at, p, n);
	cur->len += NLA_ALIGN(n);
	return at;
}

static size_t msg_begin(uint16_t type, uint16_t flags, uint32_t seq)
{
	struct nlmsghdr h = { .nlmsg_type = type, .nlmsg_flags = flags, .nlmsg_seq = seq };
	size_t off = cur->len;

	put(&h, sizeof(h));
	return off;
}

static void msg_end(size_t off)
{
	uint32_t len = (uint32_t)(cur->len - off);

	memcpy(cur->b + off, &len, sizeof(len));
}

static size_t nest_begin(uint16_t type)
{
	struct nlattr a = { .nla_type = type };
	size_t off = cur->len;

	put(&a, sizeof(a));
	return off;
}

static void nest_end(size_t off)
{
	uint16_t len = (uint16_t)(cur->len - off);

	memcpy(cur->b + off, &len, sizeof(len));
}

static void put_attr(uint16_t type, const void *p, size_t n)
{
	struct nlattr a = { .nla_len = (uint16_t)(NLA_HDRLEN + n), .nla_type = type };

	put(&a, sizeof(a));
	put(p, n);
}

static void put_u32(uint16_t type, uint32_t v) { put_attr(type, &v, sizeof(v)); }
static void put_str(uint16_t type, const char *s) { put_attr(type, s, strlen(s) + 1); }

static void put_err(uint32_t seq, int err)
{
	struct nlmsgerr e = { .error = err };
	size_t m = msg_begin(NLMSG_ERROR, 0, seq);

	put(&e, sizeof(e));
	msg_end(m);
}

static void put_done(uint32_t seq, int status)
{
	size_t m = msg_begin(NLMSG_DONE, NLM_F_MULTI, seq);

	put(&status, sizeof(status));
	msg_end(m);
}

static bool mode_rename; /* QP replies name another device */

static void put_handle(const struct fdev *d)
{
	put_u32(RDMA_NLDEV_ATTR_DEV_INDEX, d->index);
	put_str(RDMA_NLDEV_ATTR_DEV_NAME, d->name);
}

static void put_qp_handle(const struct fdev *d)
{
	put_u32(RDMA_NLDEV_ATTR_DEV_INDEX, d->index);
	put_str(RDMA_NLDEV_ATTR_DEV_NAME, mode_rename ? "other0" : d->name);
}

static void put_qp(const struct fqp *q)
{
	if (q->port)
		put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, q->port);
	put_u32(RDMA_NLDEV_ATTR_RES_LQPN, q->qpn);
	if (q->owner != KERNEL)
		put_u32(RDMA_NLDEV_ATTR_RES_PDN, 3);
	if (q->owner == KERNEL)
		put_str(RDMA_NLDEV_ATTR_RES_KERN_NAME, "ib_core");
	else if (q->owner == USER)
		put_u32(RDMA_NLDEV_ATTR_RES_PID, q->tid);
	put_u32(RDMA_NLDEV_ATTR_RES_SQ_PSN, 0);
	uint8_t type = 2, state = 0;
	put_attr(RDMA_NLDEV_ATTR_RES_TYPE, &type, 1);
	put_attr(RDMA_NLDEV_ATTR_RES_STATE, &state, 1);
}

static const struct fdev *dev_by_index(uint32_t index)
{
	for (int i = 0; i < K.ndevs; i++)
		if (K.devs[i].index == index)
			return &K.devs[i];
	return NULL;
}

/* -- request decoding: the fake trusts nothing either -- */

static int decode(const uint8_t *p, size_t len, struct req_seen *r, uint32_t *seq)
{
	struct nlmsghdr h;
	size_t off;

	memset(r, 0, sizeof(*r));
	if (len < sizeof(h))
		return -1;
	memcpy(&h, p, sizeof(h));
	if (h.nlmsg_len != len)
		return -1;
	r->type = h.nlmsg_type;
	r->flags = h.nlmsg_flags;
	*seq = h.nlmsg_seq;
	for (off = NLMSG_HDRLEN; off + NLA_HDRLEN <= len;) {
		struct nlattr a;
		uint32_t v;

		memcpy(&a, p + off, sizeof(a));
		if (a.nla_len != NLA_HDRLEN + 4 || off + a.nla_len > len)
			return -1;
		memcpy(&v, p + off + NLA_HDRLEN, 4);
		switch (a.nla_type) {
		case RDMA_NLDEV_ATTR_DEV_INDEX: r->has_dev = true; r->dev = v; break;
		case RDMA_NLDEV_ATTR_PORT_INDEX: r->has_port = true; r->port = v; break;
		case RDMA_NLDEV_ATTR_RES_LQPN: r->has_qpn = true; r->qpn = v; break;
		default: return -1;
		}
		off += NLA_ALIGN(a.nla_len);
	}
	return off == len ? 0 : -1;
}

static void answer_dev_dump(uint32_t seq)
{
	int in_dgram = 0;

	cur = dgram_new();
	for (int i = 0; i < K.ndevs; i++) {
		if (in_dgram == K.msgs_per_dgram) {
			cur = dgram_new();
			in_dgram = 0;
		}
		size_t m = msg_begin(NLDEV(RDMA_NLDEV_CMD_GET), NLM_F_MULTI, seq);
		put_handle(&K.devs[i]);
		put_u32(RDMA_NLDEV_ATTR_PORT_INDEX, K.devs[i].ports);
		uint64_t guid = 0x1122334455667788ull;
		put_attr(RDMA_NLDEV_ATTR_NODE_GUID, &guid, sizeof(guid));
		msg_end(m);
		in_dgram++;
	}
	if (in_dgram == K.msgs_per_dgram)
		cur = dgram_new();
	put_done(seq, 0);
}

static void answer_qp_doit(const struct req_seen *r, uint32_t seq)
{
	const struct fdev *d = r->has_dev ? dev_by_index(r->dev) : NULL;

	cur = dgram_new();
	if (K.no_doit || !r->has_dev || !r->has_qpn || !d) {
		put_err(seq, -EINVAL);
		return;
	}
	if (!r->has_port || r->port == 0 || r->port > d->ports) {
		put_err(seq, -EINVAL); /* QPs are per port */
		return;
	}
	for (int i = 0; i < K.nqps; i++) {
		const struct fqp *q = &K.qps[i];

		/* restrack id: QP0/1 have the port folded in, never found */
		if (q->dev != d->index || q->qpn != r->qpn || q->qpn <= 1)
			continue;
		if (q->port != r->port) {
			put_err(seq, -EAGAIN);
			return;
		}
		size_t m = msg_begin(NLDEV(RDMA_NLDEV_CMD_RES_QP_GET), 0, seq);
		put_qp_handle(d);
		put_qp(q);
		msg_end(m);
		return;
	}
	put_err(seq, -ENOENT);
}

static void answer_qp_dump(const struct req_seen *r, uint32_t seq)
{
	const struct fdev *d = r->has_dev ? dev_by_index(r->dev) : NULL;
	int in_dgram = 0, in_msg = 0;
	size_t m = 0, table = 0;
	bool open = false;

	cur = dgram_new();
	if (!d || K.no_tracking) {
		put_done(seq, -EINVAL);
		return;
	}
	for (int i = 0; i < K.nqps; i++) {
		if (K.qps[i].dev != d->index)
			continue;
		if (open && in_msg == K.entries_per_msg) {
			nest_end(table);
			msg_end(m);
			open = false;
			if (++in_dgram == K.msgs_per_dgram) {
				cur = dgram_new();
				in_dgram = 0;
			}
		}
		if (!open) {
			m = msg_begin(NLDEV(RDMA_NLDEV_CMD_RES_QP_GET), NLM_F_MULTI, seq);
			put_qp_handle(d);
			table = nest_begin(RDMA_NLDEV_ATTR_RES_QP);
			open = true;
			in_msg = 0;
		}
		size_t e = nest_begin(RDMA_NLDEV_ATTR_RES_QP_ENTRY);
		put_qp(&K.qps[i]);
		nest_end(e);
		in_msg++;
	}
	if (open) {
		nest_end(table);
		msg_end(m);
		if (++in_dgram == K.msgs_per_dgram)
			cur = dgram_new();
	}
	put_done(seq, 0);
}

static int fake_send(void *ctx, const void *msg, size_t len)
{
	struct req_seen r;
	uint32_t seq;
	int first = K.qtail, req = K.nreqs;

	(void)ctx;
	if (decode(msg, len, &r, &seq) < 0) {
		fprintf(stderr, "fake kernel: undecodable request\n");
		check_failures++;
		return -EINVAL;
	}
	if (K.nreqs < (int)(sizeof(K.reqs) / sizeof(K.reqs[0])))
		K.reqs[K.nreqs++] = r;
	if (!(r.flags & NLM_F_REQUEST)) {
		fprintf(stderr, "fake kernel: request without NLM_F_REQUEST\n");
		check_failures++;
	}
	if (r.type == NLDEV(RDMA_NLDEV_CMD_GET) && (r.flags & NLM_F_DUMP))
		answer_dev_dump(seq);
	else if (r.type == NLDEV(RDMA_NLDEV_CMD_RES_QP_GET) && (r.flags & NLM_F_DUMP))
		answer_qp_dump(&r, seq);
	else if (r.type == NLDEV(RDMA_NLDEV_CMD_RES_QP_GET))
		answer_qp_doit(&r, seq);
	else {
		cur = dgram_new();
		put_err(seq, -EINVAL);
	}
	for (int i = first; i < K.qtail; i++) {
		K.q[i].claimed = K.q[i].len;
		if (K.mangle)
			K.mangle(&K, &K.q[i], req);
	}
	return 0;
}

static ssize_t fake_recv(void *ctx, void *buf, size_t cap)
{
	struct dgram *d;

	(void)ctx;
	while (K.qhead < K.qtail && K.q[K.qhead].dropped)
		K.qhead++;
	if (K.qhead == K.qtail)
		return -ETIMEDOUT; /* the real socket's SO_RCVTIMEO */
	d = &K.q[K.qhead++];
	memcpy(buf, d->b, d->len < cap ? d->len : cap);
	if (d->claimed > cap && d->len + NLMSG_HDRLEN <= cap) {
		/* A datagram larger than the buffer: the buffer arrives full,
		 * here of harmless NOOP messages, and the rest is lost. */
		struct nlmsghdr noop = { .nlmsg_len = NLMSG_HDRLEN, .nlmsg_type = NLMSG_NOOP };

		memcpy(&noop.nlmsg_seq, d->b + offsetof(struct nlmsghdr, nlmsg_seq), 4);
		for (size_t at = d->len; at + NLMSG_HDRLEN <= cap; at += NLMSG_HDRLEN)
			memcpy((uint8_t *)buf + at, &noop, NLMSG_HDRLEN);
	}
	return (ssize_t)d->claimed;
}

static int fake_tgid(void *ctx, pid_t tid, pid_t *tgid)
{
	(void)ctx;
	K.tgid_calls++;
	if (K.tgid_gone)
		return -ESRCH;
	*tgid = (uint32_t)tid == K.thread_tid ? (pid_t)K.thread_tgid : tid;
	return 0;
}

static const struct cepd_nl_ops OPS = { fake_send, fake_recv, fake_tgid, NULL };

/* One check with whatever device indexes earlier checks cached. */
static int owner_cached(const char *dev, uint32_t qpn, pid_t *pid)
{
	K.qhead = K.qtail = 0;
	K.nreqs = 0;
	*pid = -1;
	return cepd_qp_owner_ops(&OPS, dev, qpn, pid);
}

/* One check as a first one: no device index cached. */
static int owner(const char *dev, uint32_t qpn, pid_t *pid)
{
	cepd_qp_owner_forget_devices();
	return owner_cached(dev, qpn, pid);
}

/* rxe0 (index 3, 1 port) and mlx5_1 (index 7, 2 ports), a few QPs. */
static void standard_bed(void)
{
	fake_reset();
	K.devs[0] = (struct fdev){ "rxe0", 3, 1 };
	K.devs[1] = (struct fdev){ "mlx5_1", 7, 2 };
	K.ndevs = 2;
	K.qps[K.nqps++] = (struct fqp){ 3, 1, 1, KERNEL, 0 };
	K.qps[K.nqps++] = (struct fqp){ 3, 0x11, 1, USER, 100 };
	K.qps[K.nqps++] = (struct fqp){ 3, 0x12, 1, USER, 200 };
	K.qps[K.nqps++] = (struct fqp){ 3, 0x13, 0, USER, 300 };   /* RESET */
	K.qps[K.nqps++] = (struct fqp){ 3, 0x14, 1, KERNEL, 0 };   /* a ULP's */
	K.qps[K.nqps++] = (struct fqp){ 3, 0x15, 1, GONE, 0 };
	K.qps[K.nqps++] = (struct fqp){ 7, 0x11, 2, USER, 700 };   /* same QPN, other device */
	K.qps[K.nqps++] = (struct fqp){ 7, 1, 1, KERNEL, 0 };
	K.qps[K.nqps++] = (struct fqp){ 7, 1, 2, KERNEL, 0 };
}

/* ---- cases ------------------------------------------------------------- */

static void t_doit(void)
{
	pid_t pid;

	standard_bed();
	CHECK_EQ(owner("rxe0", 0x11, &pid), 0);
	CHECK_EQ(pid, 100);
	/* device dump, then one doit on port 1 naming device 3 and QPN 0x11 */
	CHECK_EQ(K.nreqs, 2);
	CHECK_EQ(K.reqs[0].type, NLDEV(RDMA_NLDEV_CMD_GET));
	CHECK(K.reqs[0].flags & NLM_F_DUMP);
	CHECK_EQ(K.reqs[1].type, NLDEV(RDMA_NLDEV_CMD_RES_QP_GET));
	CHECK(!(K.reqs[1].flags & NLM_F_DUMP));
	CHECK(K.reqs[1].has_dev && K.reqs[1].dev == 3);
	CHECK(K.reqs[1].has_port && K.reqs[1].port == 1);
	CHECK(K.reqs[1].has_qpn && K.reqs[1].qpn == 0x11);
	CHECK_EQ(owner("rxe0", 0x12, &pid), 0);
	CHECK_EQ(pid, 200);
	/* the same QPN on the other device has another owner */
	CHECK_EQ(owner("mlx5_1", 0x11, &pid), 0);
	CHECK_EQ(pid, 700);
	/* ... found on its second port: doit port 1 said -EAGAIN */
	CHECK_EQ(K.nreqs, 3);
	CHECK(K.reqs[1].dev == 7 && K.reqs[1].port == 1 && K.reqs[2].port == 2);
}

static void t_thread(void)
{
	pid_t pid;

	standard_bed();
	K.qps[K.nqps++] = (struct fqp){ 3, 0x40, 1, USER, 4242 };
	K.thread_tid = 4242;
	K.thread_tgid = 4200;
	CHECK_EQ(owner("rxe0", 0x40, &pid), 0);
	CHECK_EQ(pid, 4200);
	CHECK_EQ(K.tgid_calls, 1);
	/* the creating thread gone between the reply and /proc */
	K.tgid_gone = true;
	CHECK_EQ(owner("rxe0", 0x40, &pid), -ESRCH);
	CHECK_EQ(pid, -1);
}

static void t_reset(void)
{
	pid_t pid;

	/* A QP in RESET has no port: the doit says -EAGAIN, the dump answers. */
	standard_bed();
	CHECK_EQ(owner("rxe0", 0x13, &pid), 0);
	CHECK_EQ(pid, 300);
	CHECK_EQ(K.nreqs, 3);
	CHECK(K.reqs[2].flags & NLM_F_DUMP);
	CHECK(K.reqs[2].has_dev && K.reqs[2].dev == 3 && !K.reqs[2].has_qpn);
}

static void t_multipart(void)
{
	pid_t pid;

	/* 300 QPs in RESET, 7 entries per message, 3 messages per datagram:
	 * the answer sits in the middle, then at the very end of the dump. */
	fake_reset();
	K.devs[0] = (struct fdev){ "rxe0", 1, 1 };
	K.ndevs = 1;
	for (uint32_t i = 0; i < 300; i++)
		K.qps[K.nqps++] = (struct fqp){ 1, 0x100 + i, 0, USER, 1000 + i };
	K.entries_per_msg = 7;
	K.msgs_per_dgram = 3;
	CHECK_EQ(owner("rxe0", 0x100 + 150, &pid), 0);
	CHECK_EQ(pid, 1150);
	CHECK_EQ(owner("rxe0", 0x100 + 299, &pid), 0);
	CHECK_EQ(pid, 1299);
	/* every datagram was read, up to NLMSG_DONE */
	CHECK(K.qtail > 10);
	CHECK_EQ(K.qhead, K.qtail);
	CHECK_EQ(owner("rxe0", 0x100 + 300, &pid), -ENOENT);
	/* one message per datagram, one entry per message */
	fake_reset();
	K.devs[0] = (struct fdev){ "rxe0", 1, 1 };
	K.ndevs = 1;
	for (uint32_t i = 0; i < 60; i++)
		K.qps[K.nqps++] = (struct fqp){ 1, 0x100 + i, 0, USER, 1000 + i };
	K.entries_per_msg = 1;
	CHECK_EQ(owner("rxe0", 0x100 + 59, &pid), 0);
	CHECK_EQ(pid, 1059);
	/* the device dump in several datagrams too */
	fake_reset();
	for (uint32_t i = 0; i < 4; i++) {
		static const char *names[] = { "a0", "b0", "rxe0", "d0" };
		K.devs[K.ndevs++] = (struct fdev){ names[i], 10 + i, 1 };
	}
	K.qps[K.nqps++] = (struct fqp){ 12, 0x20, 1, USER, 77 };
	CHECK_EQ(owner("rxe0", 0x20, &pid), 0);
	CHECK_EQ(pid, 77);
	CHECK_EQ(K.reqs[1].dev, 12);
}

static void t_no_doit(void)
{
	pid_t pid;

	standard_bed();
	K.no_doit = true;
	CHECK_EQ(owner("rxe0", 0x12, &pid), 0);
	CHECK_EQ(pid, 200);
	CHECK_EQ(K.nreqs, 3);
	CHECK_EQ(owner("rxe0", 0x99, &pid), -ENOENT);
	CHECK_EQ(owner("rxe0", 0x14, &pid), -EPERM);
}

static void t_enoent(void)
{
	pid_t pid;

	standard_bed();
	CHECK_EQ(owner("rxe0", 0x99, &pid), -ENOENT);
	CHECK_EQ(pid, -1);
	CHECK_EQ(K.nreqs, 2); /* the doit's -ENOENT is final */
	CHECK_EQ(owner("rxe1", 0x11, &pid), -ENOENT);
	CHECK_EQ(K.nreqs, 1);
	CHECK_EQ(owner("rxe", 0x11, &pid), -ENOENT); /* no prefix match */
	CHECK_EQ(owner("rxe0", 0xffffff, &pid), -ENOENT);
	/* a device whose QPs are all on another device */
	CHECK_EQ(owner("mlx5_1", 0x12, &pid), -ENOENT);
}

static void t_kernel(void)
{
	pid_t pid;

	standard_bed();
	CHECK_EQ(owner("rxe0", 0x14, &pid), -EPERM);
	CHECK_EQ(pid, -1);
	/* QP1 goes straight to the dump (its restrack id is not its QPN) */
	CHECK_EQ(owner("rxe0", 1, &pid), -EPERM);
	CHECK_EQ(K.nreqs, 2);
	CHECK(K.reqs[1].flags & NLM_F_DUMP);
	/* ... and appears once per port: both kernel, one answer */
	CHECK_EQ(owner("mlx5_1", 1, &pid), -EPERM);
	CHECK_EQ(owner("rxe0", 0, &pid), -ENOENT);
	CHECK_EQ(K.tgid_calls, 0);
}

static void t_no_pid(void)
{
	pid_t pid;

	standard_bed();
	CHECK_EQ(owner("rxe0", 0x15, &pid), -ESRCH);
	CHECK_EQ(pid, -1);
	CHECK_EQ(K.tgid_calls, 0);
}

static void t_args(void)
{
	char longname[80];
	pid_t pid;

	standard_bed();
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	CHECK_EQ(owner(NULL, 0x11, &pid), -EINVAL);
	CHECK_EQ(owner("", 0x11, &pid), -EINVAL);
	CHECK_EQ(owner(longname, 0x11, &pid), -EINVAL);
	CHECK_EQ(owner("rxe0", 0x1000000, &pid), -EINVAL);
	CHECK_EQ(cepd_qp_owner_ops(&OPS, "rxe0", 0x11, NULL), -EINVAL);
	CHECK_EQ(cepd_qp_owner_ops(NULL, "rxe0", 0x11, &pid), -EINVAL);
	CHECK_EQ(K.nreqs, 0);
	/* the real entry point checks before it opens a socket */
	CHECK_EQ(cepd_qp_owner("", 0x11, 0, &pid), -EINVAL);
	CHECK_EQ(cepd_qp_owner("rxe0", 0x1000000, 0, &pid), -EINVAL);
}

/* The device index cache: one doit per check once the index is known, and
 * every way the index can go out of date. */
static void t_cache(void)
{
	pid_t pid;

	standard_bed();
	CHECK_EQ(owner("rxe0", 0x11, &pid), 0);
	CHECK_EQ(K.nreqs, 2);
	CHECK_EQ(owner_cached("rxe0", 0x12, &pid), 0);
	CHECK_EQ(pid, 200);
	CHECK_EQ(K.nreqs, 1); /* the doit alone */
	CHECK_EQ(K.reqs[0].type, NLDEV(RDMA_NLDEV_CMD_RES_QP_GET));
	CHECK(K.reqs[0].has_dev && K.reqs[0].dev == 3);
	/* a second device alongside */
	CHECK_EQ(owner_cached("mlx5_1", 0x11, &pid), 0);
	CHECK_EQ(pid, 700);
	CHECK_EQ(owner_cached("mlx5_1", 0x11, &pid), 0);
	CHECK_EQ(K.nreqs, 2); /* port 1 (-EAGAIN), port 2 */
	/* QP1 and RESET QPs: the dump, on the cached index */
	CHECK_EQ(owner_cached("rxe0", 1, &pid), -EPERM);
	CHECK_EQ(K.nreqs, 1);
	CHECK_EQ(owner_cached("rxe0", 0x13, &pid), 0);
	CHECK_EQ(pid, 300);
	CHECK_EQ(K.nreqs, 2);

	/* rxe0 re-created under a new index: the old one is unknown (-EINVAL),
	 * the name is looked up again, the doit asked again. */
	for (int i = 0; i < K.nqps; i++)
		if (K.qps[i].dev == 3)
			K.qps[i].dev = 5;
	K.devs[0].index = 5;
	CHECK_EQ(owner_cached("rxe0", 0x11, &pid), 0);
	CHECK_EQ(pid, 100);
	CHECK_EQ(K.nreqs, 3);
	CHECK(K.reqs[0].dev == 3 && K.reqs[2].dev == 5);
	CHECK_EQ(owner_cached("rxe0", 0x11, &pid), 0);
	CHECK_EQ(K.nreqs, 1);
	/* ... the same through the dump (QP1 is asked of the dump only) */
	K.devs[0].index = 6;
	for (int i = 0; i < K.nqps; i++)
		if (K.qps[i].dev == 5)
			K.qps[i].dev = 6;
	CHECK_EQ(owner_cached("rxe0", 1, &pid), -EPERM);
	CHECK_EQ(K.nreqs, 3);

	/* The old index now another device's: its reply names that device,
	 * so the answer is not taken for rxe0's. */
	K.devs[2] = (struct fdev){ "siw0", 6, 1 };
	K.ndevs = 3;
	K.devs[0].index = 8;
	for (int i = 0; i < K.nqps; i++)
		if (K.qps[i].dev == 6)
			K.qps[i].dev = 8;
	K.qps[K.nqps++] = (struct fqp){ 6, 0x11, 1, USER, 666 };
	CHECK_EQ(owner_cached("rxe0", 0x11, &pid), 0);
	CHECK_EQ(pid, 100);
	CHECK_EQ(K.nreqs, 3);
	CHECK(K.reqs[0].dev == 6 && K.reqs[2].dev == 8);

	/* A QPN nobody has: the index is confirmed (device dump), then -ENOENT. */
	CHECK_EQ(owner_cached("rxe0", 0x99, &pid), -ENOENT);
	CHECK_EQ(K.nreqs, 2);
	/* The old index now another device's, which lacks the QPN: its
	 * -ENOENT (an error names no device) is not taken for rxe0's. */
	K.qps[K.nqps++] = (struct fqp){ 8, 0x16, 1, USER, 116 };
	K.devs[0].index = 10;
	for (int i = 0; i < K.nqps; i++)
		if (K.qps[i].dev == 8)
			K.qps[i].dev = 10;
	K.devs[3] = (struct fdev){ "other1", 8, 1 };
	K.ndevs = 4;
	CHECK_EQ(owner_cached("rxe0", 0x16, &pid), 0);
	CHECK_EQ(pid, 116);
	CHECK_EQ(K.nreqs, 3);
	CHECK(K.reqs[0].dev == 8 && K.reqs[2].dev == 10);

	/* rxe0 gone: the cached index finds nothing, the name neither. */
	K.devs[0].name = "gone0";
	CHECK_EQ(owner_cached("rxe0", 0x11, &pid), -ENOENT);
	CHECK_EQ(pid, -1);
	CHECK_EQ(K.nreqs, 2);
	CHECK_EQ(owner_cached("rxe0", 0x11, &pid), -ENOENT);
	CHECK_EQ(K.nreqs, 1); /* nothing cached for it any more */

	/* Without the doit: the cached index is refused by the doit, looked
	 * up again, found the same: the dump answers. */
	standard_bed();
	K.no_doit = true;
	CHECK_EQ(owner("rxe0", 0x12, &pid), 0);
	CHECK_EQ(owner_cached("rxe0", 0x12, &pid), 0);
	CHECK_EQ(pid, 200);
	CHECK_EQ(K.nreqs, 3);
	CHECK(K.reqs[2].flags & NLM_F_DUMP);

	/* Without the doit and the QP dump (no tracking): -EOPNOTSUPP. */
	K.no_tracking = true;
	CHECK_EQ(owner_cached("rxe0", 0x12, &pid), -EOPNOTSUPP);
	CHECK_EQ(owner("rxe0", 0x12, &pid), -EOPNOTSUPP);

	/* A fresh index whose reply names another device: ours went away
	 * between the lookup and the question. */
	standard_bed();
	mode_rename = true;
	CHECK_EQ(owner("rxe0", 0x11, &pid), -ENOENT);
	mode_rename = false;
}

/* -- mangling -- */

static int mangle_req = -1;  /* which request's replies to mangle */

static struct nlattr *find_attr(uint8_t *p, size_t len, uint16_t type)
{
	/* Walks nested attributes too (depth-first) over a well-formed reply. */
	size_t off = 0;

	while (off + NLA_HDRLEN <= len) {
		struct nlattr *a = (struct nlattr *)(p + off);

		if (a->nla_len < NLA_HDRLEN || off + a->nla_len > len)
			return NULL;
		if ((a->nla_type & NLA_TYPE_MASK) == type)
			return a;
		if (a->nla_type == RDMA_NLDEV_ATTR_RES_QP ||
		    a->nla_type == RDMA_NLDEV_ATTR_RES_QP_ENTRY) {
			struct nlattr *in = find_attr(p + off + NLA_HDRLEN,
						      a->nla_len - NLA_HDRLEN, type);
			if (in)
				return in;
		}
		off += NLA_ALIGN(a->nla_len);
	}
	return NULL;
}

/* The first message's attribute @type in datagram @d. */
static struct nlattr *dg_attr(struct dgram *d, uint16_t type)
{
	struct nlmsghdr *h = (struct nlmsghdr *)d->b;

	if (d->len < NLMSG_HDRLEN || h->nlmsg_type < NLMSG_MIN_TYPE)
		return NULL;
	return find_attr(d->b + NLMSG_HDRLEN, h->nlmsg_len - NLMSG_HDRLEN, type);
}

static enum { M_NONE, M_TRUNC_CLAIM, M_MSGLEN, M_SEQ, M_TYPE, M_NLA_SHORT,
	      M_NLA_LONG, M_U32_LEN, M_NO_QPN, M_DUP_PID, M_OTHER_QPN, M_STR_NUL,
	      M_CUT, M_NO_DONE, M_ACK, M_PID_AND_KERN, M_NO_TABLE, M_OTHER_DEV,
	      M_DONE_ERR, M_TAIL, M_LAST_LONG } mode;

static void mangle(struct fake *k, struct dgram *d, int req)
{
	struct nlmsghdr *h = (struct nlmsghdr *)d->b;
	struct nlattr *a;

	(void)k;
	if (req != mangle_req)
		return;
	switch (mode) {
	case M_NONE:
		break;
	case M_TRUNC_CLAIM: /* the kernel's datagram did not fit */
		d->claimed = DGRAM_CAP + 100;
		break;
	case M_MSGLEN: /* a message longer than its datagram */
		h->nlmsg_len = (uint32_t)d->len + 4;
		break;
	case M_SEQ:
		h->nlmsg_seq += 1;
		break;
	case M_TYPE:
		if (h->nlmsg_type >= NLMSG_MIN_TYPE)
			h->nlmsg_type = NLDEV(RDMA_NLDEV_CMD_PORT_GET);
		break;
	case M_NLA_SHORT:
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_RES_LQPN)))
			a->nla_len = 2;
		break;
	case M_NLA_LONG: /* an entry attribute running past its nest */
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_RES_LQPN)))
			a->nla_len = 4000;
		break;
	case M_U32_LEN:
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_RES_PID)))
			a->nla_len = NLA_HDRLEN + 2;
		break;
	case M_NO_QPN:
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_RES_LQPN)))
			a->nla_type = 0x7ff; /* an attribute nobody knows */
		break;
	case M_DUP_PID:
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_RES_PDN)))
			a->nla_type = RDMA_NLDEV_ATTR_RES_PID;
		break;
	case M_OTHER_QPN:
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_RES_LQPN)))
			memcpy((uint8_t *)a + NLA_HDRLEN, &(uint32_t){ 0x77 }, 4);
		break;
	case M_STR_NUL: /* the device name without its NUL */
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_DEV_NAME)))
			memset((uint8_t *)a + NLA_HDRLEN, 'r', a->nla_len - NLA_HDRLEN);
		break;
	case M_CUT: /* datagram cut mid-attribute, lengths left as they were */
		d->len = d->claimed = d->len > 30 ? d->len - 9 : d->len;
		break;
	case M_NO_DONE: /* the dump stops without NLMSG_DONE */
		if (h->nlmsg_type == NLMSG_DONE)
			d->dropped = true;
		break;
	case M_ACK: /* an ACK instead of an answer */
		if (h->nlmsg_type == NLMSG_ERROR)
			memset(d->b + NLMSG_HDRLEN, 0, sizeof(int));
		break;
	case M_PID_AND_KERN:
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_RES_SQ_PSN))) {
			/* SQ_PSN (8 bytes) becomes a 1-char kernel name */
			a->nla_type = RDMA_NLDEV_ATTR_RES_KERN_NAME;
			a->nla_len = NLA_HDRLEN + 2;
			memcpy((uint8_t *)a + NLA_HDRLEN, "k", 2);
		}
		break;
	case M_NO_TABLE:
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_RES_QP)))
			a->nla_type = 0x7fe;
		break;
	case M_OTHER_DEV:
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_DEV_INDEX)))
			memcpy((uint8_t *)a + NLA_HDRLEN, &(uint32_t){ 99 }, 4);
		break;
	case M_DONE_ERR:
		if (h->nlmsg_type == NLMSG_DONE)
			memcpy(d->b + NLMSG_HDRLEN, &(int){ -EPERM }, sizeof(int));
		break;
	case M_LAST_LONG: /* the entry's last attribute runs past its end */
		if ((a = dg_attr(d, RDMA_NLDEV_ATTR_RES_STATE)))
			a->nla_len += 8;
		break;
	case M_TAIL: /* three stray bytes after the last message */
		memset(d->b + d->len, 0, 3);
		d->len += 3;
		d->claimed = d->len;
		break;
	}
}

static int mangled(int m, int req, const char *dev, uint32_t qpn)
{
	pid_t pid;
	int ret;

	mode = m;
	mangle_req = req;
	K.mangle = mangle;
	ret = owner(dev, qpn, &pid);
	K.mangle = NULL;
	if (ret < 0 && pid != -1) {
		fprintf(stderr, "pid written on failure (mode %d)\n", m);
		check_failures++;
	}
	return ret;
}

static void t_truncated(void)
{
	standard_bed();
	/* request 0: device dump; 1: the QP doit */
	CHECK_EQ(mangled(M_NONE, 1, "rxe0", 0x11), 0); /* the bed is sound */
	CHECK_EQ(mangled(M_TRUNC_CLAIM, 0, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_TRUNC_CLAIM, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_MSGLEN, 0, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_MSGLEN, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_CUT, 0, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_CUT, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_TAIL, 1, "rxe0", 0x11), -EPROTO);
	/* a dump that never ends is a timeout, not a hang */
	CHECK_EQ(mangled(M_NO_DONE, 0, "rxe0", 0x11), -ETIMEDOUT);
	/* request 2: the QP dump (QP 0x13 is in RESET) */
	CHECK_EQ(mangled(M_NONE, 2, "rxe0", 0x13), 0);
	CHECK_EQ(mangled(M_TRUNC_CLAIM, 2, "rxe0", 0x13), -EPROTO);
	CHECK_EQ(mangled(M_CUT, 2, "rxe0", 0x13), -EPROTO);
	CHECK_EQ(mangled(M_NO_DONE, 2, "rxe0", 0x13), -ETIMEDOUT);
}

static void t_malformed(void)
{
	standard_bed();
	CHECK_EQ(mangled(M_SEQ, 0, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_SEQ, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_TYPE, 0, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_TYPE, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_STR_NUL, 0, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_OTHER_DEV, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_ACK, 1, "rxe0", 0x99), -EPROTO);
	/* attribute lengths, doit (request 1) and dump (request 2) */
	CHECK_EQ(mangled(M_NLA_SHORT, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_NLA_SHORT, 2, "rxe0", 0x13), -EPROTO);
	CHECK_EQ(mangled(M_NLA_LONG, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_NLA_LONG, 2, "rxe0", 0x13), -EPROTO);
	CHECK_EQ(mangled(M_U32_LEN, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_U32_LEN, 2, "rxe0", 0x13), -EPROTO);
	CHECK_EQ(mangled(M_LAST_LONG, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_LAST_LONG, 2, "rxe0", 0x13), -EPROTO);
	/* required attributes missing or repeated, contradictions */
	CHECK_EQ(mangled(M_NO_QPN, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_NO_QPN, 2, "rxe0", 0x13), -EPROTO);
	CHECK_EQ(mangled(M_DUP_PID, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_PID_AND_KERN, 1, "rxe0", 0x11), -EPROTO);
	CHECK_EQ(mangled(M_NO_TABLE, 2, "rxe0", 0x13), -EPROTO);
	CHECK_EQ(mangled(M_OTHER_DEV, 2, "rxe0", 0x13), -EPROTO);
	/* the doit answering for another QP */
	CHECK_EQ(mangled(M_OTHER_QPN, 1, "rxe0", 0x11), -EPROTO);
	/* the kernel's own errors pass through */
	CHECK_EQ(mangled(M_DONE_ERR, 2, "rxe0", 0x13), -EPERM);
	CHECK_EQ(mangled(M_DONE_ERR, 0, "rxe0", 0x13), -EPERM);
	CHECK_EQ(K.tgid_calls, 0);
}

static void t_dup_entry(void)
{
	pid_t pid;

	/* The same QPN twice on one device with two owners: no answer. */
	standard_bed();
	K.qps[K.nqps++] = (struct fqp){ 3, 0x13, 0, USER, 301 };
	CHECK_EQ(owner("rxe0", 0x13, &pid), -EPROTO);
	CHECK_EQ(pid, -1);
	/* two devices of one name */
	standard_bed();
	K.devs[K.ndevs++] = (struct fdev){ "rxe0", 9, 1 };
	CHECK_EQ(owner("rxe0", 0x11, &pid), -EPROTO);
}

/* Random damage to every reply: never a crash (the ASan build reads any
 * overrun), always either the true answer or a negative errno. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

static int damaged;

static void mangle_random(struct fake *k, struct dgram *d, int req)
{
	(void)k;
	(void)req;
	if (rnd() % 3 == 0)
		return;
	damaged++;
	switch (rnd() % 3) {
	case 0: /* flip bytes */
		for (int i = rnd() % 4; i >= 0 && d->len; i--)
			d->b[rnd() % d->len] ^= (uint8_t)(1u << (rnd() % 8));
		break;
	case 1: /* cut */
		if (d->len)
			d->len = d->claimed = rnd() % d->len;
		break;
	case 2: /* a random 16-bit length somewhere */
		if (d->len >= 2) {
			size_t at = (rnd() % (d->len / 2)) * 2;
			uint16_t v = (uint16_t)rnd();
			memcpy(d->b + at, &v, 2);
		}
		break;
	}
}

static void t_fuzz(void)
{
	static const uint32_t qpns[] = { 0x11, 0x13, 1, 0x14, 0x15, 0x99 };
	static const int truth[] = { 100, 300, -EPERM, -EPERM, -ESRCH, -ENOENT };
	int answers = 0, errors = 0, clean = 0;

	standard_bed();
	K.entries_per_msg = 2;
	K.msgs_per_dgram = 2;
	for (int i = 0; i < 30000; i++) {
		int c = (int)(rnd() % 6);
		pid_t pid = -1;
		int ret;

		K.qhead = K.qtail = 0;
		K.nreqs = 0;
		damaged = 0;
		if (i % 2)
			cepd_qp_owner_forget_devices();
		K.mangle = mangle_random;
		ret = cepd_qp_owner_ops(&OPS, "rxe0", qpns[c], &pid);
		K.mangle = NULL;
		if (!damaged) {
			/* nothing was touched: the true answer */
			clean++;
			CHECK_EQ(ret == 0 ? pid : ret, truth[c]);
		} else if (ret == 0) {
			answers++;
			CHECK(pid > 0);
		} else {
			errors++;
			CHECK(ret < 0 && ret >= -4095);
			CHECK_EQ(pid, -1);
		}
	}
	printf("fuzz: %d clean, %d damaged answered, %d damaged refused\n",
	       clean, answers, errors);
	CHECK(clean > 0 && errors > 0);
}

/* /proc/<tid>/status of a live thread names the process (Tgid). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pid_t thread_tid;
static bool thread_exit;

static void *thread_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	thread_tid = (pid_t)syscall(SYS_gettid);
	pthread_cond_broadcast(&cv);
	while (!thread_exit)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return NULL;
}

static int read_status(pid_t tid, char *buf, size_t cap, size_t *len)
{
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	*len = fread(buf, 1, cap, f);
	fclose(f);
	return 0;
}

/* A child process with a second thread (forked while this process has
 * one thread: ThreadSanitizer's children may not start threads
 * otherwise): its pid, its thread's id in *@tid, and the pipe end that
 * ends it when written (*@end). */
static pid_t child_with_thread(pid_t *tid, int *end)
{
	int p[2], q[2];
	pid_t child;
	char go = 0;

	CHECK_EQ(pipe(p), 0);
	CHECK_EQ(pipe(q), 0);
	child = fork();
	if (child == 0) {
		pthread_t t;

		pthread_create(&t, NULL, thread_main, NULL);
		pthread_mutex_lock(&mu);
		while (!thread_tid)
			pthread_cond_wait(&cv, &mu);
		pthread_mutex_unlock(&mu);
		if (write(p[1], &thread_tid, sizeof(thread_tid)) != sizeof(thread_tid) ||
		    read(q[0], &go, 1) < 0)
			_exit(1);
		_exit(0);
	}
	CHECK(child > 0);
	*tid = 0;
	CHECK_EQ(read(p[0], tid, sizeof(*tid)), (ssize_t)sizeof(*tid));
	CHECK(*tid > 0 && *tid != child);
	close(p[0]);
	close(p[1]);
	close(q[0]);
	*end = q[1];
	return child;
}

/* cepd_proc_tgid, the real lookup, with @mine a second thread of this
 * process and @theirs one of process @child: whatever the caller expects,
 * each thread's process, and -ESRCH once @child is gone. The expected
 * process's own threads are found by its task directory (no status
 * file: qp_owner.h); a thread of another process is not taken for one of
 * the expected process's. */
static void proc_tgid_cases(pid_t mine, pid_t child, pid_t theirs, int end)
{
	const pid_t self = getpid();
	const pid_t expects[] = { 0, self, 1 };
	pid_t v;
	char go = 0;

	for (size_t i = 0; i < sizeof(expects) / sizeof(expects[0]); i++) {
		v = -1;
		CHECK_EQ(cepd_proc_tgid(expects[i], self, &v), 0);
		CHECK_EQ(v, self);
		v = -1;
		CHECK_EQ(cepd_proc_tgid(expects[i], mine, &v), 0);
		CHECK_EQ(v, self);
		v = -1;
		CHECK_EQ(cepd_proc_tgid(expects[i], theirs, &v), 0);
		CHECK_EQ(v, child);
	}
	v = -1;
	CHECK_EQ(cepd_proc_tgid(child, theirs, &v), 0); /* the child's own */
	CHECK_EQ(v, child);
	CHECK_EQ(write(end, &go, 1), 1);
	CHECK_EQ(waitpid(child, NULL, 0), child);
	close(end);
	v = -1;
	CHECK_EQ(cepd_proc_tgid(self, theirs, &v), -ESRCH); /* gone */
	CHECK_EQ(v, -1);
}

static void t_tgid(void)
{
	static const char ok[] = "Name:\tx\nUmask:\t0022\nState:\tS\nTgid:\t4200\nNgid:\t0\nPid:\t4242\n";
	static const char last[] = "Name:\tx\nTgid:\t77";
	static const char *bad[] = {
		"Name:\tx\nPid:\t5\n",            /* none */
		"Name:\tTgid:\t5\n",              /* not at a line start */
		"Tgid:\t\n",                       /* no digits */
		"Tgid:\t0\n",                      /* zero */
		"Tgid:\t-5\n",
		"Tgid:\t12x\n",
		"Tgid:\t99999999999\n",            /* too wide */
		"",
	};
	char buf[4096];
	size_t len = 0;
	pthread_t t;
	pid_t v = -1, child, theirs;
	int end;

	child = child_with_thread(&theirs, &end);
	CHECK_EQ(cepd_parse_tgid(ok, strlen(ok), &v), 0);
	CHECK_EQ(v, 4200);
	CHECK_EQ(cepd_parse_tgid(last, strlen(last), &v), 0);
	CHECK_EQ(v, 77);
	/* a length that stops inside the number */
	CHECK_EQ(cepd_parse_tgid(last, strlen(last) - 1, &v), 0);
	CHECK_EQ(v, 7);
	CHECK_EQ(cepd_parse_tgid(ok, 20, &v), -EPROTO);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = -1;
		CHECK_EQ(cepd_parse_tgid(bad[i], strlen(bad[i]), &v), -EPROTO);
		CHECK_EQ(v, -1);
	}
	/* the real format, for this process and for one of its threads */
	CHECK_EQ(read_status(getpid(), buf, sizeof(buf), &len), 0);
	CHECK_EQ(cepd_parse_tgid(buf, len, &v), 0);
	CHECK_EQ(v, getpid());
	pthread_create(&t, NULL, thread_main, NULL);
	pthread_mutex_lock(&mu);
	while (!thread_tid)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	CHECK(thread_tid != getpid());
	CHECK_EQ(read_status(thread_tid, buf, sizeof(buf), &len), 0);
	v = -1;
	CHECK_EQ(cepd_parse_tgid(buf, len, &v), 0);
	CHECK_EQ(v, getpid());
	proc_tgid_cases(thread_tid, child, theirs, end);
	pthread_mutex_lock(&mu);
	thread_exit = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	pthread_join(t, NULL);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{ "doit", t_doit }, { "thread", t_thread }, { "reset", t_reset },
	{ "multipart", t_multipart }, { "no_doit", t_no_doit }, { "enoent", t_enoent },
	{ "kernel", t_kernel }, { "no_pid", t_no_pid }, { "args", t_args },
	{ "truncated", t_truncated }, { "malformed", t_malformed },
	{ "dup_entry", t_dup_entry }, { "cache", t_cache }, { "fuzz", t_fuzz }, { "tgid", t_tgid },
};

int main(int argc, char **argv)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (argc < 2 || strcmp(argv[1], cases[i].name) == 0) {
			cases[i].fn();
			if (argc >= 2)
				return check_done(argv[1]);
		}
	}
	if (argc >= 2) {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	return check_done("qp_owner");
}
