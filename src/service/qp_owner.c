/* SPDX-License-Identifier: MIT */
/*
 * cepd_qp_owner(): who owns a QP, asked of the kernel's RDMA resource
 * tracking over NETLINK_RDMA (the nldev client that `rdma resource show qp`
 * reads). On a socket of its own for the call's length (kept in a small
 * pool between calls, below): the QP by number
 * (RDMA_NLDEV_CMD_RES_QP_GET doit with RDMA_NLDEV_ATTR_RES_LQPN, one per
 * port) on the device's index, and only when the doit cannot answer, the
 * dump of the device's QPs scanned for the number. The index comes from a
 * small cache by name, or from the device dump (RDMA_NLDEV_CMD_GET); every
 * QP reply carries the device's index and name, so a cached index that no
 * longer names the device is noticed and looked up again.
 *
 * Guarantees: every reply is read within the bounds of its datagram and of
 * each enclosing message and attribute; a truncated, malformed or
 * unexpected reply (wrong sequence number, wrong message type, bad lengths,
 * a required attribute missing or repeated) is -EPROTO, never a read past
 * a buffer. Datagrams that do not come from the kernel are dropped, so a
 * local process cannot answer in the kernel's place. Kept between calls:
 * the cache of device indexes (under cache_lock) and idle sockets that
 * answered their last check to its end (under pool_lock); nothing of one
 * check can be read as another's answer (sequence numbers go on).
 *
 * Kernel facts this relies on (drivers/infiniband/core/nldev.c, restrack.c):
 * - the QP doit needs RDMA_NLDEV_ATTR_PORT_INDEX and answers -EAGAIN when
 *   the QP is not on that port, which includes a QP in RESET (no port yet);
 *   -ENOENT when no QP of that number is tracked (or none visible from the
 *   caller's pid namespace); kernels without the doit answer -EINVAL;
 * - its reply holds the QP's attributes at the top level; the dump's
 *   messages nest them as RES_QP { RES_QP_ENTRY { ... } ... };
 * - a user QP carries RDMA_NLDEV_ATTR_RES_PID (the creating thread's id in
 *   the caller's pid namespace, omitted once that thread is gone), a
 *   kernel QP RDMA_NLDEV_ATTR_RES_KERN_NAME instead;
 * - the restrack id of QP0/QP1 is not the QPN (the port is folded in), so
 *   the doit cannot find them: those two numbers go straight to the dump.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h> /* linux-libc-dev: the kernel's uapi */

#include "service/qp_owner.h"
#include "service/qp_owner_ops.h"

#define IB_DEVICE_NAME_MAX 64       /* the kernel's limit, with the NUL */
#define QPN_MASK 0xffffffu          /* QPNs are 24 bits (IBTA) */
#define PORT_MAX 255u               /* port numbers are 8 bits on the wire */
#define NL_TIMEOUT_S 5              /* the kernel answers at once; never hang */

/* ask()'s "the doit answered -EINVAL", outside the errno range. */
#define DOIT_REFUSED (-100000)

#define NLDEV_TYPE(cmd) ((uint16_t)RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, (cmd)))

/* ---- bounds-checked reading ------------------------------------------- */

struct nla_iter {
	const uint8_t *p;
	size_t left;
};

struct nla_val {
	uint16_t type;
	const uint8_t *data;
	size_t len;
};

/* The next attribute: 1 and *v; 0 at the end; -EPROTO when the remaining
 * bytes are not a whole attribute. The last attribute may lack its padding. */
static int nla_next(struct nla_iter *it, struct nla_val *v)
{
	struct nlattr a;
	size_t step;

	if (it->left == 0)
		return 0;
	if (it->left < NLA_HDRLEN)
		return -EPROTO;
	memcpy(&a, it->p, sizeof(a));
	if (a.nla_len < NLA_HDRLEN || a.nla_len > it->left)
		return -EPROTO;
	v->type = a.nla_type & NLA_TYPE_MASK;
	v->data = it->p + NLA_HDRLEN;
	v->len = a.nla_len - NLA_HDRLEN;
	step = NLA_ALIGN((size_t)a.nla_len);
	if (step > it->left)
		step = it->left;
	it->p += step;
	it->left -= step;
	return 1;
}

static int nla_u32(const struct nla_val *v, uint32_t *out)
{
	if (v->len != sizeof(*out))
		return -EPROTO;
	memcpy(out, v->data, sizeof(*out));
	return 0;
}

/* A NUL-terminated string attribute, the NUL within its payload. */
static int nla_str(const struct nla_val *v, const char **out)
{
	if (v->len == 0 || !memchr(v->data, '\0', v->len))
		return -EPROTO;
	*out = (const char *)v->data;
	return 0;
}

/* Sets *seen for a once-only attribute; a repeat is malformed. */
static int once(bool *seen)
{
	if (*seen)
		return -EPROTO;
	*seen = true;
	return 0;
}

/* ---- requests ---------------------------------------------------------- */

struct nl_req {
	union {
		struct nlmsghdr h;
		uint8_t b[128];
	} u;
};

static void req_init(struct nl_req *r, uint16_t type, uint16_t flags, uint32_t seq)
{
	memset(r, 0, sizeof(*r));
	r->u.h.nlmsg_len = NLMSG_HDRLEN;
	r->u.h.nlmsg_type = type;
	r->u.h.nlmsg_flags = flags;
	r->u.h.nlmsg_seq = seq;
}

static void req_put_u32(struct nl_req *r, uint16_t type, uint32_t val)
{
	struct nlattr a = { .nla_len = NLA_HDRLEN + sizeof(val), .nla_type = type };
	uint8_t *p = r->u.b + r->u.h.nlmsg_len;

	/* Callers put at most three u32s: 16 + 3 * 8 bytes. */
	memcpy(p, &a, sizeof(a));
	memcpy(p + NLA_HDRLEN, &val, sizeof(val));
	r->u.h.nlmsg_len += NLA_ALIGN(a.nla_len);
}

/* ---- one request, its reply -------------------------------------------- */

struct nlq {
	const struct cepd_nl_ops *ops;
	uint8_t *buf;
	uint32_t seq;
};

/* Handles one data message's attributes: 0 to go on, -errno to stop. */
typedef int (*on_msg_fn)(void *arg, struct nla_iter attrs);

/*
 * Sends @r and reads its reply: for a dump every message up to NLMSG_DONE,
 * for a doit exactly one message. Data messages must have @type; each goes
 * to @on_msg. Returns 0, the kernel's -errno (NLMSG_ERROR, or a negative
 * NLMSG_DONE status), -EPROTO for a malformed reply, or on_msg's -errno.
 */
static int nl_transact(struct nlq *q, struct nl_req *r, bool dump, uint16_t type,
		       on_msg_fn on_msg, void *arg)
{
	int ret = q->ops->send(q->ops->ctx, r->u.b, r->u.h.nlmsg_len);

	if (ret < 0)
		return ret;
	for (;;) {
		ssize_t n = q->ops->recv(q->ops->ctx, q->buf, CEPD_NL_RECV_CAP);
		const uint8_t *p = q->buf;
		size_t left;

		if (n < 0)
			return (int)n;
		if (n == 0 || (size_t)n > CEPD_NL_RECV_CAP)
			return -EPROTO; /* nothing, or truncated */
		left = (size_t)n;
		while (left > 0) {
			struct nlmsghdr h;
			const uint8_t *pl;
			size_t plen, step;

			if (left < NLMSG_HDRLEN)
				return -EPROTO;
			memcpy(&h, p, sizeof(h));
			if (h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > left ||
			    h.nlmsg_seq != r->u.h.nlmsg_seq)
				return -EPROTO;
			pl = p + NLMSG_HDRLEN;
			plen = h.nlmsg_len - NLMSG_HDRLEN;
			step = NLMSG_ALIGN((size_t)h.nlmsg_len);
			if (step > left)
				step = left;
			p += step;
			left -= step;

			if (h.nlmsg_type == NLMSG_NOOP)
				continue;
			if (h.nlmsg_type == NLMSG_ERROR) {
				int err;

				if (plen < sizeof(struct nlmsgerr))
					return -EPROTO;
				memcpy(&err, pl, sizeof(err));
				/* We ask for no ACK: error 0 is not an answer. */
				if (err >= 0 || err < -4095)
					return -EPROTO;
				return err;
			}
			if (h.nlmsg_type == NLMSG_DONE) {
				int status = 0;

				if (!dump)
					return -EPROTO;
				if (plen >= sizeof(status))
					memcpy(&status, pl, sizeof(status));
				if (status > 0 || status < -4095)
					return -EPROTO;
				return left == 0 ? status : -EPROTO;
			}
			if (h.nlmsg_type != type)
				return -EPROTO;
			ret = on_msg(arg, (struct nla_iter){ pl, plen });
			if (ret < 0)
				return ret;
			if (!dump)
				return left == 0 ? 0 : -EPROTO;
		}
	}
}

/* ---- the device: index and port count by name ---------------------------- */

struct dev_find {
	const char *name;
	bool found;
	uint32_t index;
	uint32_t ports;
};

static int dev_msg(void *arg, struct nla_iter it)
{
	struct dev_find *d = arg;
	bool has_index = false, has_name = false, has_ports = false;
	const char *name = NULL;
	uint32_t index = 0, ports = 0;
	struct nla_val v;
	int ret;

	while ((ret = nla_next(&it, &v)) > 0) {
		switch (v.type) {
		case RDMA_NLDEV_ATTR_DEV_INDEX:
			if ((ret = once(&has_index)) < 0 || (ret = nla_u32(&v, &index)) < 0)
				return ret;
			break;
		case RDMA_NLDEV_ATTR_DEV_NAME:
			if ((ret = once(&has_name)) < 0 || (ret = nla_str(&v, &name)) < 0)
				return ret;
			break;
		case RDMA_NLDEV_ATTR_PORT_INDEX: /* the last port (rdma_end_port) */
			if ((ret = once(&has_ports)) < 0 || (ret = nla_u32(&v, &ports)) < 0)
				return ret;
			break;
		default:
			break;
		}
	}
	if (ret < 0)
		return ret;
	if (!has_index || !has_name)
		return -EPROTO;
	if (strcmp(name, d->name) != 0)
		return 0;
	if (d->found)
		return -EPROTO; /* two devices of one name */
	d->found = true;
	d->index = index;
	d->ports = has_ports ? ports : 0;
	return 0;
}

/* ---- the QP ------------------------------------------------------------ */

/* What the kernel said of one QP. */
struct qp_entry {
	bool has_qpn, has_pid, has_kern;
	uint32_t qpn;
	uint32_t pid;
};

/* Reads one QP attribute into @e: 0, or -EPROTO. Other attributes pass. */
static int qp_attr(struct qp_entry *e, const struct nla_val *v)
{
	const char *s;
	int ret;

	switch (v->type) {
	case RDMA_NLDEV_ATTR_RES_LQPN:
		if ((ret = once(&e->has_qpn)) < 0)
			return ret;
		return nla_u32(v, &e->qpn);
	case RDMA_NLDEV_ATTR_RES_PID:
		if ((ret = once(&e->has_pid)) < 0)
			return ret;
		return nla_u32(v, &e->pid);
	case RDMA_NLDEV_ATTR_RES_KERN_NAME:
		if ((ret = once(&e->has_kern)) < 0)
			return ret;
		return nla_str(v, &s);
	default:
		return 0;
	}
}

/* The answer an entry gives: 1 and *tid (a user QP with a live creator),
 * -EPERM (kernel QP), -ESRCH (user QP whose creating thread is gone),
 * -EPROTO (no LQPN, or both a pid and a kernel name). */
static int qp_verdict(const struct qp_entry *e, pid_t *tid)
{
	if (!e->has_qpn || (e->has_pid && e->has_kern))
		return -EPROTO;
	if (e->has_kern)
		return -EPERM;
	if (!e->has_pid)
		return -ESRCH;
	if (e->pid == 0 || e->pid > (uint32_t)INT32_MAX)
		return -EPROTO;
	*tid = (pid_t)e->pid;
	return 1;
}

struct qp_find {
	const char *dev_name;
	uint32_t dev_index;
	uint32_t qpn;
	int verdict;   /* 0 not seen, else qp_verdict() */
	pid_t tid;
};

/* Records the verdict of a matching entry; a second, different one is
 * malformed (QP1 appears once per port, each time owned by the kernel). */
static int qp_record(struct qp_find *f, const struct qp_entry *e)
{
	pid_t tid = 0;
	int v = qp_verdict(e, &tid);

	if (v == -EPROTO)
		return v;
	if (f->verdict != 0 && (f->verdict != v || f->tid != tid))
		return -EPROTO;
	f->verdict = v;
	f->tid = tid;
	return 0;
}

/* The device handle of a QP reply: DEV_INDEX and DEV_NAME, each once. A
 * reply for our index under another name means the index now belongs to
 * another device (ours was removed): -ESTALE. */
struct dev_handle {
	bool has_index, has_name;
	uint32_t index;
	const char *name;
};

static int handle_attr(struct dev_handle *h, const struct nla_val *v)
{
	int ret;

	if (v->type == RDMA_NLDEV_ATTR_DEV_INDEX) {
		if ((ret = once(&h->has_index)) < 0)
			return ret;
		return nla_u32(v, &h->index);
	}
	if ((ret = once(&h->has_name)) < 0)
		return ret;
	return nla_str(v, &h->name);
}

static int handle_check(const struct dev_handle *h, const struct qp_find *f)
{
	if (!h->has_index || !h->has_name || h->index != f->dev_index)
		return -EPROTO;
	return strcmp(h->name, f->dev_name) == 0 ? 0 : -ESTALE;
}

/* The doit reply: the device handle and one QP's attributes, flat. */
static int qp_doit_msg(void *arg, struct nla_iter it)
{
	struct qp_find *f = arg;
	struct qp_entry e = { 0 };
	struct dev_handle h = { 0 };
	struct nla_val v;
	int ret;

	while ((ret = nla_next(&it, &v)) > 0) {
		if (v.type == RDMA_NLDEV_ATTR_DEV_INDEX || v.type == RDMA_NLDEV_ATTR_DEV_NAME)
			ret = handle_attr(&h, &v);
		else
			ret = qp_attr(&e, &v);
		if (ret < 0)
			return ret;
	}
	if (ret < 0 || (ret = handle_check(&h, f)) < 0)
		return ret;
	if (!e.has_qpn || e.qpn != f->qpn)
		return -EPROTO;
	return qp_record(f, &e);
}

/* One dump message: the device handle and RES_QP { RES_QP_ENTRY {...} ... }. */
static int qp_dump_msg(void *arg, struct nla_iter it)
{
	struct qp_find *f = arg;
	struct dev_handle h = { 0 };
	bool has_table = false;
	struct nla_iter table = { NULL, 0 };
	struct nla_val v;
	int ret;

	while ((ret = nla_next(&it, &v)) > 0) {
		if (v.type == RDMA_NLDEV_ATTR_DEV_INDEX || v.type == RDMA_NLDEV_ATTR_DEV_NAME) {
			if ((ret = handle_attr(&h, &v)) < 0)
				return ret;
		} else if (v.type == RDMA_NLDEV_ATTR_RES_QP) {
			if ((ret = once(&has_table)) < 0)
				return ret;
			table = (struct nla_iter){ v.data, v.len };
		}
	}
	if (ret < 0 || (ret = handle_check(&h, f)) < 0)
		return ret;
	if (!has_table)
		return -EPROTO;
	while ((ret = nla_next(&table, &v)) > 0) {
		struct nla_iter ent = { v.data, v.len };
		struct qp_entry e = { 0 };
		struct nla_val a;

		if (v.type != RDMA_NLDEV_ATTR_RES_QP_ENTRY)
			return -EPROTO;
		while ((ret = nla_next(&ent, &a)) > 0)
			if ((ret = qp_attr(&e, &a)) < 0)
				return ret;
		if (ret < 0)
			return ret;
		if (!e.has_qpn)
			return -EPROTO;
		if (e.qpn == f->qpn && (ret = qp_record(f, &e)) < 0)
			return ret;
	}
	return ret;
}

/* ---- the whole question ------------------------------------------------ */

static int find_device(struct nlq *q, const char *ibdev, struct dev_find *d)
{
	struct nl_req r;
	int ret;

	req_init(&r, NLDEV_TYPE(RDMA_NLDEV_CMD_GET), NLM_F_REQUEST | NLM_F_DUMP, ++q->seq);
	ret = nl_transact(q, &r, true, NLDEV_TYPE(RDMA_NLDEV_CMD_GET), dev_msg, d);
	if (ret < 0)
		return ret;
	return d->found ? 0 : -ENOENT;
}

/* The doit on each port: 0 with f->verdict set, -ENOENT, -ESTALE (the
 * index is not our device's), or -EAGAIN when it cannot tell (the QP has
 * no port yet, or this kernel has no QP doit). The kernel answers -EINVAL
 * both for an unknown device index and for a missing doit: -EINVAL. */
static int qp_by_doit(struct nlq *q, const struct dev_find *d, struct qp_find *f)
{
	uint32_t port, last = d->ports < PORT_MAX ? d->ports : PORT_MAX;

	for (port = 1; port <= last; port++) {
		struct nl_req r;
		int ret;

		req_init(&r, NLDEV_TYPE(RDMA_NLDEV_CMD_RES_QP_GET), NLM_F_REQUEST, ++q->seq);
		req_put_u32(&r, RDMA_NLDEV_ATTR_DEV_INDEX, d->index);
		req_put_u32(&r, RDMA_NLDEV_ATTR_PORT_INDEX, port);
		req_put_u32(&r, RDMA_NLDEV_ATTR_RES_LQPN, f->qpn);
		ret = nl_transact(q, &r, false, NLDEV_TYPE(RDMA_NLDEV_CMD_RES_QP_GET),
				  qp_doit_msg, f);
		if (ret == -EAGAIN)
			continue;            /* on another port, or none yet */
		if (ret == -EOPNOTSUPP)
			return -EAGAIN;      /* no doit: the dump will tell */
		return ret;
	}
	return -EAGAIN;
}

static int qp_by_dump(struct nlq *q, const struct dev_find *d, struct qp_find *f)
{
	struct nl_req r;
	int ret;

	req_init(&r, NLDEV_TYPE(RDMA_NLDEV_CMD_RES_QP_GET), NLM_F_REQUEST | NLM_F_DUMP, ++q->seq);
	req_put_u32(&r, RDMA_NLDEV_ATTR_DEV_INDEX, d->index);
	ret = nl_transact(q, &r, true, NLDEV_TYPE(RDMA_NLDEV_CMD_RES_QP_GET), qp_dump_msg, f);
	if (ret < 0)
		return ret; /* -EINVAL: unknown index, or no QP tracking */
	return f->verdict != 0 ? 0 : -ENOENT;
}

/* ---- device index cache -------------------------------------------------
 * The index of a device by name, so that a check is one doit, not a device
 * dump and a doit. An entry is only a hint: every QP reply names its device
 * (index and name), so an index that now belongs to another device, or to
 * none, is noticed and looked up again. Lock: cache_lock, held only to copy
 * an entry in or out. */

#define DEV_CACHE_SLOTS 8

struct dev_slot {
	char name[IB_DEVICE_NAME_MAX];
	uint32_t index, ports;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dev_slot cache[DEV_CACHE_SLOTS];
static unsigned int cache_next; /* the slot a new name replaces */

static bool cache_get(const char *name, struct dev_find *d)
{
	bool hit = false;

	pthread_mutex_lock(&cache_lock);
	for (unsigned int i = 0; i < DEV_CACHE_SLOTS && !hit; i++) {
		if (strcmp(cache[i].name, name) == 0) {
			d->index = cache[i].index;
			d->ports = cache[i].ports;
			d->found = hit = true;
		}
	}
	pthread_mutex_unlock(&cache_lock);
	return hit;
}

/* Records (or with !d, forgets) the device @name. */
static void cache_set(const char *name, const struct dev_find *d)
{
	struct dev_slot *s = NULL;

	pthread_mutex_lock(&cache_lock);
	for (unsigned int i = 0; i < DEV_CACHE_SLOTS && !s; i++)
		if (strcmp(cache[i].name, name) == 0)
			s = &cache[i];
	if (!s && d) {
		s = &cache[cache_next];
		cache_next = (cache_next + 1) % DEV_CACHE_SLOTS;
	}
	if (s && d) {
		snprintf(s->name, sizeof(s->name), "%s", name);
		s->index = d->index;
		s->ports = d->ports;
	} else if (s) {
		s->name[0] = '\0';
	}
	pthread_mutex_unlock(&cache_lock);
}

void cepd_qp_owner_forget_devices(void)
{
	pthread_mutex_lock(&cache_lock);
	memset(cache, 0, sizeof(cache));
	cache_next = 0;
	pthread_mutex_unlock(&cache_lock);
}

/* The QP on device @d: the doit (unless @dump_only), then the dump when the
 * doit cannot tell. 0 with f->verdict set, or -errno: -ESTALE when a reply
 * names another device; DOIT_REFUSED (internal, never returned to a caller)
 * when the doit answered -EINVAL, which is the kernel's answer both for an
 * unknown device index and for a kernel without the QP doit; -EINVAL when
 * the dump did. */
static int ask(struct nlq *q, const struct dev_find *d, struct qp_find *f, bool dump_only)
{
	int ret = -EAGAIN;

	f->dev_index = d->index;
	f->verdict = 0;
	f->tid = 0;
	/* QP0/QP1: restrack ids with the port folded in, only in the dump. */
	if (!dump_only && f->qpn > 1)
		ret = qp_by_doit(q, d, f);
	if (ret == -EINVAL)
		return DOIT_REFUSED; /* stale index, or no doit: the caller tells which */
	if (ret == -EAGAIN)
		ret = qp_by_dump(q, d, f);
	return ret;
}

static bool args_ok(const char *ibdev, uint32_t qpn, const pid_t *pid)
{
	return ibdev && pid && ibdev[0] != '\0' &&
	       strnlen(ibdev, IB_DEVICE_NAME_MAX) < IB_DEVICE_NAME_MAX && qpn <= QPN_MASK;
}

/* The whole check over @ops, replies read into @buf (CEPD_NL_RECV_CAP
 * bytes), requests numbered from *seq + 1 on (*seq is the last one sent on
 * return, whatever the answer). */
static int query(const struct cepd_nl_ops *ops, uint8_t *buf, uint32_t *seq,
		 const char *ibdev, uint32_t qpn, pid_t *pid)
{
	struct dev_find d = { .name = ibdev };
	struct qp_find f = { .dev_name = ibdev, .qpn = qpn };
	struct nlq q = { .ops = ops, .buf = buf, .seq = *seq };
	bool cached;
	pid_t tgid;
	int ret;

	cached = cache_get(ibdev, &d);
	if (!cached) {
		ret = find_device(&q, ibdev, &d);
		if (ret < 0)
			goto out;
		cache_set(ibdev, &d);
	}
	ret = ask(&q, &d, &f, false);
	if (cached && (ret == -ESTALE || ret == DOIT_REFUSED || ret == -EINVAL ||
		       ret == -ENOENT)) {
		/* The cached index may be out of date: look the name up again.
		 * (-ENOENT too: an error reply names no device, and the index
		 * could be another device's now. Only a QPN nobody has pays.) */
		int first = ret;
		uint32_t old = d.index;

		cache_set(ibdev, NULL);
		d = (struct dev_find){ .name = ibdev };
		ret = find_device(&q, ibdev, &d);
		if (ret < 0)
			goto out;
		cache_set(ibdev, &d);
		if (first == -ENOENT && d.index == old)
			ret = -ENOENT; /* the index was right */
		else
			/* The same index refused again: the kernel lacks the doit
			 * (or QP tracking, which the dump will say). */
			ret = ask(&q, &d, &f, first != -ESTALE && d.index == old);
	}
	if (ret == DOIT_REFUSED) /* a fresh index refused by the doit: no doit */
		ret = ask(&q, &d, &f, true);
	if (ret == -ESTALE) {
		/* Found by name a moment ago, now another device's index:
		 * ours was removed. */
		cache_set(ibdev, NULL);
		ret = -ENOENT;
	} else if (ret == -EINVAL) {
		/* The dump refused a fresh index: no QP resource tracking. */
		ret = -EOPNOTSUPP;
	}
	if (ret < 0)
		goto out;
	if (f.verdict < 0) {
		ret = f.verdict;
		goto out;
	}
	/* The kernel names the creating thread; the owner is its process. */
	ret = ops->tgid(ops->ctx, f.tid, &tgid);
	if (ret == 0)
		*pid = tgid;
out:
	*seq = q.seq;
	return ret;
}

int cepd_qp_owner_ops(const struct cepd_nl_ops *ops, const char *ibdev,
		      uint32_t qpn, pid_t *pid)
{
	uint32_t seq = 0;
	uint8_t *buf;
	int ret;

	if (!ops || !args_ok(ibdev, qpn, pid))
		return -EINVAL;
	buf = malloc(CEPD_NL_RECV_CAP);
	if (!buf)
		return -ENOMEM;
	ret = query(ops, buf, &seq, ibdev, qpn, pid);
	free(buf);
	return ret;
}

/* ---- the real kernel and /proc ----------------------------------------- */

int cepd_parse_tgid(const char *status, size_t len, pid_t *tgid)
{
	static const char key[] = "Tgid:";
	size_t i = 0;

	/* Find "Tgid:" at the start of a line. */
	while (i + sizeof(key) - 1 <= len) {
		if (memcmp(status + i, key, sizeof(key) - 1) == 0) {
			long v = 0;
			size_t j = i + sizeof(key) - 1, digits = 0;

			while (j < len && (status[j] == ' ' || status[j] == '\t'))
				j++;
			while (j < len && status[j] >= '0' && status[j] <= '9' && digits < 10) {
				v = v * 10 + (status[j] - '0');
				j++;
				digits++;
			}
			if (digits == 0 || digits == 10 || v <= 0 || v > INT32_MAX ||
			    (j < len && status[j] != '\n'))
				return -EPROTO;
			*tgid = (pid_t)v;
			return 0;
		}
		{
			const char *nl = memchr(status + i, '\n', len - i);

			if (!nl)
				break;
			i = (size_t)(nl - status) + 1;
		}
	}
	return -EPROTO;
}

/* The real socket, and when its answers must have come. */
struct nl_sock {
	int fd;
	uint32_t seq;             /* the last request's number on this socket */
	uint8_t *buf;             /* CEPD_NL_RECV_CAP bytes for its replies */
	struct timespec deadline; /* CLOCK_MONOTONIC, this check's */
	pid_t expect;             /* the caller's expected owner, or 0 */
};

int cepd_proc_tgid(pid_t expect, pid_t tid, pid_t *tgid)
{
	char path[48], text[2048];
	size_t len = 0;
	int fd;

	/* The caller's expected process: a thread whose id is a process's id
	 * is that process's main thread (threads and processes draw their
	 * ids from one space), so its process is @tid itself - what
	 * pidfd_open() below would say, without the two system calls. A
	 * caller that expects a pid it does not know to be alive learns
	 * nothing new: pidfd_open() would have said the same. */
	if (expect > 0 && tid == expect) {
		*tgid = tid;
		return 0;
	}
	/* Another thread of the expected process (a QP made on an
	 * application's worker thread: cmtime's server): procfs shows a
	 * thread under /proc/PID/task/ only while it is in PID's thread
	 * group, so one lookup says what the status file below would (the
	 * same snapshot: its answer may be out of date as soon as it is
	 * given, as the status file's), without pidfd_open(), open(), two
	 * read()s and close() - 8 of cepd's 36 system calls a connection on
	 * cmtime's server. Not found: a thread of another process, or gone;
	 * the status file says which. */
	if (expect > 0 && tid > 0) {
		snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)expect, (int)tid);
		if (faccessat(AT_FDCWD, path, F_OK, 0) == 0) {
			*tgid = expect;
			return 0;
		}
	}
#ifdef SYS_pidfd_open
	/* The common case, a QP created by the main thread, without
	 * generating a status file: pidfd_open() accepts only a thread-group
	 * leader, whose tid is its process id (EINVAL for other threads). */
	fd = (int)syscall(SYS_pidfd_open, tid, 0);
	if (fd >= 0) {
		close(fd);
		*tgid = tid;
		return 0;
	}
	if (errno == ESRCH)
		return -ESRCH;
	/* EINVAL (another thread), ENOSYS (before Linux 5.3): /proc says. */
#endif
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	/* Tgid is on the fourth line; 2 KiB holds it with room. */
	while (len < sizeof(text)) {
		ssize_t n = read(fd, text + len, sizeof(text) - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno == ESRCH ? -ESRCH : -errno;

			close(fd);
			return err;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	return cepd_parse_tgid(text, len, tgid);
}

static int proc_tgid(void *ctx, pid_t tid, pid_t *tgid)
{
	const struct nl_sock *ns = ctx;

	return cepd_proc_tgid(ns->expect, tid, tgid);
}

static bool past(const struct timespec *deadline)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > deadline->tv_sec ||
	       (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

static int nl_send(void *ctx, const void *msg, size_t len)
{
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int fd = ((struct nl_sock *)ctx)->fd;
	ssize_t n;

	do
		n = sendto(fd, msg, len, 0, (struct sockaddr *)&kernel, sizeof(kernel));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

static ssize_t nl_recv(void *ctx, void *buf, size_t cap)
{
	struct nl_sock *ns = ctx;
	int fd = ns->fd;

	for (;;) {
		struct sockaddr_nl from;
		struct iovec iov = { .iov_base = buf, .iov_len = cap };
		struct msghdr mh = {
			.msg_name = &from, .msg_namelen = sizeof(from),
			.msg_iov = &iov, .msg_iovlen = 1,
		};
		/* MSG_TRUNC: the datagram's full length, so truncation shows. */
		ssize_t n = recvmsg(fd, &mh, MSG_TRUNC);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		}
		/* Only the kernel (port 0) answers; another process that
		 * learnt our port id (/proc/net/netlink) could otherwise claim
		 * any QP, or, sending without end, hold us here: the deadline. */
		if (mh.msg_namelen != sizeof(from) || from.nl_family != AF_NETLINK ||
		    from.nl_pid != 0) {
			if (past(&ns->deadline))
				return -ETIMEDOUT;
			continue;
		}
		if (mh.msg_flags & MSG_TRUNC)
			return (ssize_t)cap + 1;
		return n;
	}
}

/* ---- sockets kept between checks -----------------------------------------
 * A check used to open, set up, connect and close a socket of its own: four
 * system calls around a conversation of two. Now a check takes an idle
 * socket (with its reply buffer) from this pool, or opens one when none is
 * idle, and gives it back after a check that answered 0; any other outcome
 * closes it. Why a socket that answered 0 is clean for the next check: a
 * doit was read to its one reply and a dump to its NLMSG_DONE (nl_transact
 * checks nothing follows either in the datagram), and the kernel sends
 * nothing unasked on a socket that joined no group and asked for no ACKs.
 * Should anything stale remain all the same, its sequence number is an
 * earlier request's (a socket's numbers go on from check to check), so the
 * next check fails -EPROTO - it never takes it for an answer - and that
 * closes the socket. A pooled socket stays connected to the kernel, so no
 * other process can queue datagrams on it (nl_recv's filter stays too).
 * At most NL_POOL_IDLE sockets wait idle: enough for cepd's concurrent
 * checks (one per client thread, and a check lasts one round trip),
 * bounded whatever the number of clients. Lock: pool_lock, held only to
 * take or put an entry. */

#define NL_POOL_IDLE 4

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nl_sock pool[NL_POOL_IDLE];
static unsigned int pool_n;

static int sock_open(struct nl_sock *ns)
{
	struct timeval tv = { .tv_sec = NL_TIMEOUT_S };
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int fd, ret;

	ns->buf = malloc(CEPD_NL_RECV_CAP);
	if (!ns->buf)
		return -ENOMEM;
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
	if (fd < 0) {
		/* No NETLINK_RDMA in this kernel (ib_core absent). */
		ret = errno == EPROTONOSUPPORT || errno == EAFNOSUPPORT ? -EOPNOTSUPP : -errno;
		free(ns->buf);
		return ret;
	}
	/* Connected to the kernel (port 0), the socket is refused unicasts
	 * from any other socket (netlink_getsockbyportid: ECONNREFUSED to the
	 * sender); nl_recv checks the sender as well. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    connect(fd, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		ret = -errno;
		close(fd);
		free(ns->buf);
		return ret;
	}
	ns->fd = fd;
	ns->seq = 0;
	return 0;
}

static void sock_close(struct nl_sock *ns)
{
	close(ns->fd);
	free(ns->buf);
}

static int sock_take(struct nl_sock *ns)
{
	bool got = false;

	pthread_mutex_lock(&pool_lock);
	if (pool_n > 0) {
		*ns = pool[--pool_n];
		got = true;
	}
	pthread_mutex_unlock(&pool_lock);
	return got ? 0 : sock_open(ns);
}

/* Back to the pool after a check that answered 0; closed otherwise, or when
 * NL_POOL_IDLE wait already. */
static void sock_give(struct nl_sock *ns, int ret)
{
	bool kept = false;

	if (ret == 0) {
		pthread_mutex_lock(&pool_lock);
		if (pool_n < NL_POOL_IDLE) {
			pool[pool_n++] = *ns;
			kept = true;
		}
		pthread_mutex_unlock(&pool_lock);
	}
	if (!kept)
		sock_close(ns);
}

int cepd_qp_owner(const char *ibdev, uint32_t qpn, pid_t expect, pid_t *pid)
{
	struct cepd_nl_ops ops = { .send = nl_send, .recv = nl_recv, .tgid = proc_tgid };
	struct nl_sock ns;
	int ret;

	if (!args_ok(ibdev, qpn, pid))
		return -EINVAL;
	ret = sock_take(&ns);
	if (ret < 0)
		return ret;
	clock_gettime(CLOCK_MONOTONIC, &ns.deadline);
	ns.deadline.tv_sec += NL_TIMEOUT_S;
	ns.expect = expect;
	ops.ctx = &ns;
	ret = query(&ops, ns.buf, &ns.seq, ibdev, qpn, pid);
	sock_give(&ns, ret);
	return ret;
}
