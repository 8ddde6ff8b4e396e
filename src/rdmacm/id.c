/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, ids: rdma_create_id / rdma_destroy_id, addresses
 * (rdma_bind_addr, rdma_resolve_addr, rdma_resolve_route over RoCE v2 and
 * InfiniBand: IPoIB neighbours, the SA),
 * port numbers, rdma_listen, rdma_set_option, rdma_migrate_id and the small
 * accessors. State rules are rdma_cm's (kernel cma.c): bind from IDLE,
 * resolve the address from IDLE or bound, the route once the address is
 * resolved, listen once bound (or bound to the wildcard on the way).
 *
 * Guarantees: an id's fields are guarded by its mutex; port numbers by
 * rcm.lock. An id is freed when its last reference goes: the
 * application's (rdma_destroy_id), libcep's (until DESTROYED), each queued
 * event's, each service's it listens through.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <infiniband/ib.h>

#include <cep/rdma_cm.h>

#include "ib.h"
#include "rdmacm.h"

static uint32_t rand32(void)
{
	static _Thread_local uint64_t s;

	if (!s) {
		if (getrandom(&s, sizeof(s), 0) != sizeof(s))
			s = (uint64_t)(uintptr_t)&s ^ (uint64_t)getpid() << 32;
		s |= 1;
	}
	/* xorshift64*: PSNs and port choices, not secrets */
	s ^= s >> 12;
	s ^= s << 25;
	s ^= s >> 27;
	return (uint32_t)((s * 0x2545f4914f6cdd1dull) >> 32);
}

/* ---- addresses ----------------------------------------------------------- */

/* AF_IB (struct sockaddr_ib) as the kernel's cma: the address is the GID
 * (sib_addr, the wildcard when zero), the "port" the low 16 bits of the
 * service ID under its mask, the service ID itself what a REQ carries. */
static const struct sockaddr_ib *sib_of(const struct sockaddr *a)
{
	return (const struct sockaddr_ib *)(const void *)a;
}

int rcm_addr_len(const struct sockaddr *a)
{
	if (!a)
		return 0;
	if (a->sa_family == AF_INET)
		return sizeof(struct sockaddr_in);
	if (a->sa_family == AF_INET6)
		return sizeof(struct sockaddr_in6);
	if (a->sa_family == AF_IB)
		return sizeof(struct sockaddr_ib);
	return 0;
}

int rcm_addr_any(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr == INADDR_ANY;
	if (a->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr);
	if (a->sa_family == AF_IB) {
		static const uint8_t zero[16];

		return !memcmp(sib_of(a)->sib_addr.sib_raw, zero, 16);
	}
	return 0;
}

/* 127.0.0.0/8 or ::1. */
static int addr_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr) >> 24) ==
		       IN_LOOPBACKNET;
	if (a->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr);
	return 0;
}

uint16_t rcm_addr_port(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)a)->sin_port);
	if (a->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)(const void *)a)->sin6_port);
	if (a->sa_family == AF_IB)
		return (uint16_t)(be64toh(sib_of(a)->sib_sid) & be64toh(sib_of(a)->sib_sid_mask));
	return 0;
}

static void addr_set_port(struct sockaddr *a, uint16_t port)
{
	if (a->sa_family == AF_INET)
		((struct sockaddr_in *)(void *)a)->sin_port = htons(port);
	else if (a->sa_family == AF_INET6)
		((struct sockaddr_in6 *)(void *)a)->sin6_port = htons(port);
	else if (a->sa_family == AF_IB) {
		/* the kernel's cma_bind_port: the service ID is now exact */
		struct sockaddr_ib *sib = (struct sockaddr_ib *)(void *)a;

		sib->sib_sid = htobe64((be64toh(sib->sib_sid) & be64toh(sib->sib_sid_mask)) | port);
		sib->sib_sid_mask = htobe64(~0ull);
	}
}

/* Same address (ports aside). */
static int addr_eq(const struct sockaddr *a, const struct sockaddr *b)
{
	uint8_t ga[16], gb[16];

	rcm_addr_gid(a, ga);
	rcm_addr_gid(b, gb);
	return memcmp(ga, gb, 16) == 0;
}

uint64_t rcm_service_id(const struct rcm_id *r, int dst)
{
	const struct sockaddr *a = dst ? &r->id.route.addr.dst_addr : &r->id.route.addr.src_addr;

	if (a->sa_family == AF_IB) /* cma_get_service_id */
		return be64toh(sib_of(a)->sib_sid);
	return cep_rdma_service_id((enum cep_rdma_ps)r->id.ps, rcm_addr_port(a));
}

/* ---- references ------------------------------------------------------ */

void rcm_id_get(struct rcm_id *r)
{
	atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

void rcm_id_put(struct rcm_id *r)
{
	/* acq_rel: every user's writes are visible to the one that frees */
	if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
		return;
	rcm_mc_free(r);
	free(r->id.route.path_rec);
	free(r->qp_init_attr);
	free(r->connect_pdata);
	free(r->svcs);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->mtx);
	free(r);
}

struct rcm_id *rcm_id_new(struct rcm_channel *channel, void *context,
			  enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct rcm_id *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	if (!channel) {
		channel = rcm_channel_new();
		if (!channel) {
			free(r);
			return NULL;
		}
		r->sync = 1;
	}
	r->hdr.kind = RCM_KIND_ID;
	pthread_mutex_init(&r->mtx, NULL);
	pthread_cond_init(&r->cond, NULL);
	atomic_init(&r->refs, 1);
	atomic_init(&r->events_reported, 0);
	r->id.channel = &channel->ch;
	r->id.context = context;
	r->id.ps = ps;
	r->id.qp_type = qp_type;
	r->seq = rand32() & 0xffffff;
	r->backlog = RCM_DEFAULT_BACKLOG;
	r->resp_res = r->init_depth = 0;
	return r;
}

RCM_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			      void *context, enum rdma_port_space ps)
{
	struct rcm_id *r;
	int ret = rcm_init();

	if (ret)
		return rcm_err(-ret);
	if (!id)
		return rcm_err(EINVAL);
	/* The TCP and IB (RC), UDP and IPoIB (UD) port spaces, as librdmacm's
	 * rdma_create_id picks the QP type; any other the kernel's
	 * ucma_create_id refuses, EINVAL. */
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB)
		return rcm_err(EINVAL);
	r = rcm_id_new(channel ? rcm_channel_of(channel) : NULL, context, ps,
		       ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC);
	if (!r)
		return rcm_err(ENOMEM);
	*id = &r->id;
	return 0;
}

/* ---- port numbers (rcm.lock) ------------------------------------------- */

static struct rcm_id **port_table(int ps)
{
	struct rcm_id ***t = ps == RDMA_PS_UDP ? &rcm.ports_udp :
			     ps == RDMA_PS_IB ? &rcm.ports_ib :
			     ps == RDMA_PS_IPOIB ? &rcm.ports_ipoib : &rcm.ports_tcp;

	if (!*t)
		*t = calloc(65536, sizeof(**t));
	return *t;
}

/* Would binding @r to @a collide with @o (kernel cma_check_port)? */
static int port_conflict(const struct rcm_id *r, const struct sockaddr *a,
			 const struct rcm_id *o, int listening)
{
	const struct sockaddr *oa = &o->id.route.addr.src_addr;

	if (!listening && !o->listening && r->reuseaddr && o->reuseaddr)
		return 0;
	if (r->afonly && o->afonly && a->sa_family != oa->sa_family)
		return 0;
	return rcm_addr_any(a) || rcm_addr_any(oa) || addr_eq(a, oa);
}

static int port_free(struct rcm_id **tab, uint16_t port, const struct rcm_id *r,
		     const struct sockaddr *a)
{
	for (struct rcm_id *o = tab[port]; o; o = o->bind_next)
		if (o != r && port_conflict(r, a, o, 0))
			return 0;
	return 1;
}

/* Put @r on @dev's port with its source GID and P_Key. Caller holds
 * rcm.lock (the device's PD is allocated under it). */
static void set_device(struct rcm_id *r, const struct rcm_src *dev)
{
	struct rcm_dev *d = dev->port->dev;

	if (!d->pd)
		d->pd = ibv_alloc_pd(d->verbs);
	r->port = dev->port;
	r->sgid_index = dev->gid_index;
	r->id.verbs = d->verbs;
	r->id.pd = d->pd;
	r->id.port_num = dev->port->port_num;
	memcpy(r->id.route.addr.addr.ibaddr.sgid.raw, dev->gid, 16);
	/* rdma_cm reports the IPoIB interface's P_Key; 0 on RoCE */
	r->id.route.addr.addr.ibaddr.pkey =
		dev->port->link_layer == IBV_LINK_LAYER_INFINIBAND ? htons(dev->pkey) : 0;
}

int rcm_bind(struct rcm_id *r, const struct sockaddr *src, const struct rcm_src *dev)
{
	struct sockaddr_storage a;
	struct rcm_id **tab;
	uint16_t pn;
	int len = rcm_addr_len(src), ret = 0, ps;

	if (!len)
		return -EAFNOSUPPORT;
	memset(&a, 0, sizeof(a));
	memcpy(&a, src, (size_t)len);
	/* AF_IB: the space named by the service ID (cma_select_ib_ps;
	 * cma_get_port's EPROTONOSUPPORT when none fits) */
	ps = src->sa_family == AF_IB ? rcm_ib_select_ps(r->id.ps, (struct sockaddr_ib *)&a)
				     : (int)r->id.ps;
	if (!ps)
		return -EPROTONOSUPPORT;
	src = (const struct sockaddr *)&a;
	pthread_mutex_lock(&rcm.lock);
	tab = port_table(ps);
	if (!tab) {
		ret = -ENOMEM;
		goto out;
	}
	pn = rcm_addr_port(src);
	if (pn == 0) {
		/* An ephemeral port nobody holds (kernel cma_alloc_any_port). */
		unsigned span = RCM_PORT_HIGH - RCM_PORT_LOW + 1, start = rand32() % span, i;

		for (i = 0; i < span; i++) {
			pn = (uint16_t)(RCM_PORT_LOW + (start + i) % span);
			if (!tab[pn])
				break;
		}
		if (i == span) {
			ret = -EADDRNOTAVAIL;
			goto out;
		}
	} else if (!port_free(tab, pn, r, src)) {
		ret = rcm_addr_any(src) ? -EADDRNOTAVAIL : -EADDRINUSE;
		goto out;
	}
	addr_set_port((struct sockaddr *)&a, pn);
	r->bind_next = tab[pn];
	tab[pn] = r;
	r->bound = 1;
	r->bind_ps = ps;
	r->any_addr = (uint8_t)rcm_addr_any(src);
	memcpy(&r->id.route.addr.src_storage, &a, sizeof(a));
	if (dev)
		set_device(r, dev);
	/* AF_IB: the P_Key is the address's (cma_translate_ib) */
	if (dev && src->sa_family == AF_IB && sib_of(src)->sib_pkey)
		r->id.route.addr.addr.ibaddr.pkey = sib_of(src)->sib_pkey;
	/* As rdma_cm reports a bound id: the destination is the unspecified
	 * address of the source's family, its GID too once on a device. */
	memset(&r->id.route.addr.dst_storage, 0, sizeof(r->id.route.addr.dst_storage));
	r->id.route.addr.dst_addr.sa_family = src->sa_family;
	if (dev)
		rcm_addr_gid(&r->id.route.addr.dst_addr, r->id.route.addr.addr.ibaddr.dgid.raw);
out:
	pthread_mutex_unlock(&rcm.lock);
	return ret;
}

static void rcm_unbind(struct rcm_id *r)
{
	struct rcm_id **tab, **pp;

	pthread_mutex_lock(&rcm.lock);
	tab = r->bound ? port_table(r->bind_ps) : NULL;
	if (tab) {
		for (pp = &tab[rcm_addr_port(&r->id.route.addr.src_addr)]; *pp;
		     pp = &(*pp)->bind_next) {
			if (*pp == r) {
				*pp = r->bind_next;
				break;
			}
		}
	}
	r->bound = 0;
	pthread_mutex_unlock(&rcm.lock);
}

/* Move a wildcard-bound id onto the port of @src (resolve_addr). */
static void bind_device(struct rcm_id *r, const struct sockaddr *src, const struct rcm_src *dev)
{
	uint16_t pn = rcm_addr_port(&r->id.route.addr.src_addr);

	pthread_mutex_lock(&rcm.lock);
	memset(&r->id.route.addr.src_storage, 0, sizeof(r->id.route.addr.src_storage));
	memcpy(&r->id.route.addr.src_storage, src, (size_t)rcm_addr_len(src));
	addr_set_port(&r->id.route.addr.src_addr, pn);
	r->any_addr = 0;
	set_device(r, dev);
	pthread_mutex_unlock(&rcm.lock);
}

/* IPoIB's port space on the port @p: the kernel's device acquisition
 * refuses it on a netdev that is not IPoIB (cma_acquire_dev_by_src_ip:
 * -EINVAL); on InfiniBand it is a UD space whose Q_Key is the IPoIB
 * broadcast group's (rcm_qkey). 0 otherwise. */
static int ipoib_check(const struct rcm_id *r, const struct rcm_port *p)
{
	if (r->id.ps != RDMA_PS_IPOIB)
		return 0;
	return p->link_layer == IBV_LINK_LAYER_INFINIBAND ? 0 : -EINVAL;
}

RCM_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct rcm_id *r;
	struct rcm_src dev, *devp = NULL;
	struct cep_cm *cm;
	int ret;

	if (!id || !rcm_addr_len(addr))
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	if (r->state != RCM_IDLE) {
		ret = -EINVAL;
		goto out;
	}
	/* A loopback address binds on no device, as the kernel's (its
	 * rdma_bind_addr translates it to the loopback netdev: id->verbs
	 * stays NULL). libfabric's verbs provider binds 127.0.0.1 in
	 * fi_getinfo() for a passive endpoint without an address. */
	if (!rcm_addr_any(addr) && !addr_loopback(addr)) {
		/* AF_IB: the port whose GID table holds sib_addr */
		ret = addr->sa_family == AF_IB ?
		      rcm_find_ib_gid(sib_of(addr)->sib_addr.sib_raw, 0, &dev) :
		      rcm_find_addr(addr, &dev);
		if (!ret)
			ret = ipoib_check(r, dev.port);
		if (ret)
			goto out;
		/* Open the port's CM now: a second process learns at bind
		 * time that the port is taken. */
		ret = rcm_port_cm(dev.port, &cm);
		if (ret)
			goto out;
		devp = &dev;
	}
	ret = rcm_bind(r, addr, devp);
	if (!ret)
		r->state = RCM_ADDR_BOUND;
out:
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(-ret) : 0;
}

/* rdma_resolve_addr to an AF_IB destination, as the kernel's
 * cma_resolve_ib_addr: the source is the bound one, the given one
 * (AF_IB), or the port holding the destination's GID or, failing that,
 * its subnet prefix (cma_resolve_ib_dev); the destination GID is
 * sib_addr, no neighbour is asked, ADDR_RESOLVED is queued at once. The
 * P_Key is the destination's sib_pkey, the port's default 0xffff when 0;
 * a port found whose P_Key table lacks it: -ENODEV (the kernel looks on at
 * other ports). 0, or -errno for the call (nothing queued). @r->mtx held. */
static int resolve_ib(struct rcm_id *r, const struct sockaddr *src_addr,
		      const struct sockaddr *dst_addr)
{
	const struct sockaddr_ib *dst = sib_of(dst_addr);
	struct sockaddr_ib src;
	struct rcm_src dev;
	struct rcm_event *e;
	struct cep_cm *cm;
	uint16_t pkey = dst->sib_pkey ? be16toh(dst->sib_pkey) : 0xffff;
	int ret;

	if (r->state == RCM_ADDR_BOUND && r->id.route.addr.src_addr.sa_family != AF_IB)
		return -EINVAL;
	memset(&src, 0, sizeof(src));
	if (r->state == RCM_ADDR_BOUND)
		memcpy(&src, &r->id.route.addr.src_storage, sizeof(src));
	else if (src_addr)
		memcpy(&src, src_addr, sizeof(src));
	src.sib_family = AF_IB;
	src.sib_pkey = htobe16(pkey); /* cma_bind_addr: the destination's */
	if (!r->port) {
		ret = rcm_addr_any((struct sockaddr *)&src) ?
		      rcm_find_ib_gid(dst->sib_addr.sib_raw, 1, &dev) :
		      rcm_find_ib_gid(src.sib_addr.sib_raw, 0, &dev);
		if (ret)
			return ret;
		/* cma_resolve_ib_dev: a port that has the P_Key (here: the
		 * one the GID found, or none) */
		if (rcm_pkey_index(dev.port, pkey, &(uint16_t){ 0 }))
			return -ENODEV;
		memcpy(src.sib_addr.sib_raw, dev.gid, 16);
		dev.pkey = pkey;
		if (r->state == RCM_IDLE) {
			ret = rcm_bind(r, (struct sockaddr *)&src, &dev);
			if (ret)
				return ret;
		} else {
			/* bound to the wildcard GID: now to this port's */
			pthread_mutex_lock(&rcm.lock);
			memcpy(((struct sockaddr_ib *)&r->id.route.addr.src_storage)->sib_addr.sib_raw,
			       dev.gid, 16);
			r->any_addr = 0;
			set_device(r, &dev);
			pthread_mutex_unlock(&rcm.lock);
		}
	}
	ret = rcm_port_cm(r->port, &cm);
	if (ret)
		return ret;
	r->id.route.addr.addr.ibaddr.pkey = htobe16(pkey);
	memset(&r->id.route.addr.dst_storage, 0, sizeof(r->id.route.addr.dst_storage));
	memcpy(&r->id.route.addr.dst_storage, dst, sizeof(*dst));
	memcpy(r->id.route.addr.addr.ibaddr.dgid.raw, dst->sib_addr.sib_raw, 16);
	e = rcm_event_new(r, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	if (!e)
		return -ENOMEM;
	r->state = RCM_ADDR_RESOLVED;
	rcm_push_locked(e);
	return 0;
}

RCM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
				 struct sockaddr *dst_addr, int timeout_ms)
{
	struct sockaddr_storage src;
	struct rcm_src dev;
	struct rcm_event *e;
	struct rcm_id *r;
	struct cep_cm *cm;
	uint8_t dgid[16];
	int dlen = rcm_addr_len(dst_addr), ret = 0, status = 0;

	/* RoCE: resolution is local (the GID is the address). InfiniBand:
	 * the neighbour's hardware address, waited for up to timeout_ms. */
	if (!id || !dlen || (src_addr && !rcm_addr_len(src_addr)))
		return rcm_err(EINVAL);
	if (src_addr && src_addr->sa_family != dst_addr->sa_family)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	if (r->state != RCM_IDLE && r->state != RCM_ADDR_BOUND) {
		ret = -EINVAL;
		goto out;
	}
	if (dst_addr->sa_family == AF_IB) {
		ret = resolve_ib(r, src_addr, dst_addr);
		goto out;
	}
	/* an id bound to AF_IB resolves only AF_IB (the kernel compares
	 * cma_family with the destination's) */
	if (r->state == RCM_ADDR_BOUND && r->id.route.addr.src_addr.sa_family == AF_IB) {
		ret = -EINVAL;
		goto out;
	}
	/* The source: the bound one, the given one, or the route's. */
	memset(&src, 0, sizeof(src));
	if (r->state == RCM_ADDR_BOUND && !r->any_addr)
		memcpy(&src, &r->id.route.addr.src_storage, sizeof(src));
	else if (src_addr && !rcm_addr_any(src_addr))
		memcpy(&src, src_addr, (size_t)rcm_addr_len(src_addr));
	else
		status = rcm_route_source(dst_addr, &src);
	if (!status)
		status = r->port ? 0 : rcm_find_addr((struct sockaddr *)&src, &dev);
	if (!status && !r->port) {
		ret = ipoib_check(r, dev.port);
		status = ret; /* the kernel's ADDR_ERROR -EINVAL */
		ret = 0;
	}
	if (!status && r->state == RCM_IDLE) {
		addr_set_port((struct sockaddr *)&src,
			      src_addr ? rcm_addr_port(src_addr) : 0);
		status = rcm_bind(r, (struct sockaddr *)&src, &dev);
	} else if (!status && !r->port) {
		bind_device(r, (struct sockaddr *)&src, &dev);
	}
	if (!status) {
		ret = rcm_port_cm(r->port, &cm);
		if (ret == -EBUSY || ret == -EACCES)
			goto out; /* say so now: nothing on this port will work */
		status = ret;
		ret = 0;
	}
	rcm_addr_gid(dst_addr, dgid);
	if (!status && r->port->link_layer == IBV_LINK_LAYER_INFINIBAND) {
		uint8_t lgid[16];
		uint16_t pkey;
		int ifindex;

		/* the kernel's addr.c: the route's netdev, then its neighbour */
		status = rcm_ib_local(&r->id.route.addr.src_addr, lgid, &pkey, &ifindex);
		if (status)
			status = -EADDRNOTAVAIL;
		else
			status = rcm_ib_resolve_neigh(ifindex, &r->id.route.addr.src_addr,
						      dst_addr, timeout_ms, dgid);
	}
	memset(&r->id.route.addr.dst_storage, 0, sizeof(r->id.route.addr.dst_storage));
	memcpy(&r->id.route.addr.dst_storage, dst_addr, (size_t)dlen);
	memcpy(r->id.route.addr.addr.ibaddr.dgid.raw, dgid, 16);
	/* The result comes as an event, as from the kernel's resolver. */
	if (status) {
		e = rcm_event_new(r, RDMA_CM_EVENT_ADDR_ERROR, status);
		r->state = r->bound ? RCM_ADDR_BOUND : RCM_IDLE;
	} else {
		e = rcm_event_new(r, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
		r->state = RCM_ADDR_RESOLVED;
	}
	if (!e) {
		ret = -ENOMEM;
		goto out;
	}
	rcm_push_locked(e);
out:
	pthread_mutex_unlock(&r->mtx);
	if (ret)
		return rcm_err(-ret);
	return rcm_complete(r);
}

void rcm_fill_path(struct rcm_id *r, struct ibv_sa_path_rec *p)
{
	memset(p, 0, sizeof(*p));
	memcpy(p->dgid.raw, r->id.route.addr.addr.ibaddr.dgid.raw, 16);
	memcpy(p->sgid.raw, r->id.route.addr.addr.ibaddr.sgid.raw, 16);
	p->hop_limit = 64;
	p->traffic_class = r->tos;
	p->reversible = htonl(1);
	p->numb_path = 1;
	p->pkey = htons(0xffff);
	p->mtu_selector = 2;
	/* the port's MTU as its CM saw it at open (the port's CM is open
	 * for every id with a route) */
	p->mtu = r->port->info.active_mtu ? r->port->info.active_mtu : IBV_MTU_1024;
	p->rate_selector = 2;
	p->packet_life_time_selector = 2;
	p->packet_life_time = RCM_ROCE_PACKET_LIFE;
}

RCM_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct cep_sa_path sp;
	struct rcm_event *e;
	struct rcm_id *r;
	int ret = 0, status = 0, ib;

	if (!id)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	if (r->state != RCM_ADDR_RESOLVED) {
		ret = EINVAL;
		goto out;
	}
	/* InfiniBand: one path from the SA (kernel cma_query_ib_route); an
	 * SA error is ROUTE_ERROR with the id left in ADDR_RESOLVED. */
	ib = r->port && r->port->link_layer == IBV_LINK_LAYER_INFINIBAND;
	if (ib) {
		struct cep_sa_path q;
		uint64_t mask = rcm_ib_route_query(r, &q);
		uint32_t per = timeout_ms > 0 ? (uint32_t)timeout_ms / 4 : 0;

		/* through cepd when the port's CM is its (rcm_ib_path_query) */
		status = rcm_ib_path_query(r->port, per < 100 ? 100 : per, mask, &q, &sp);
		if (status) {
			e = rcm_event_new(r, RDMA_CM_EVENT_ROUTE_ERROR, status);
			if (!e)
				ret = ENOMEM;
			else
				rcm_push_locked(e);
			goto out;
		}
	}
	/* RoCE: the path is the two GIDs (kernel cma_resolve_iboe_route). */
	ret = rcm_route_resolved(r, ib ? &sp : NULL);
out:
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(ret) : rcm_complete(r);
}

int rcm_route_resolved(struct rcm_id *r, const struct cep_sa_path *sp)
{
	struct ibv_sa_path_rec *path;
	struct rcm_event *e;

	path = r->id.route.path_rec ? r->id.route.path_rec : malloc(sizeof(*path));
	e = rcm_event_new(r, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	if (!path || !e) {
		if (path != r->id.route.path_rec)
			free(path);
		if (e)
			rcm_event_drop(e);
		return ENOMEM;
	}
	if (sp)
		rcm_ib_path_rec(sp, path);
	else
		rcm_fill_path(r, path);
	r->id.route.path_rec = path;
	r->id.route.num_paths = 1;
	r->route_given = sp != NULL; /* the REQ's path (conn.c) */
	r->state = RCM_ROUTE_RESOLVED;
	rcm_push_locked(e);
	return 0;
}

/* ---- listening ----------------------------------------------------------- */

static struct rcm_service *service_get(struct rcm_port *p, uint64_t sid)
{
	struct rcm_service *s;

	pthread_mutex_lock(&p->svc_mtx);
	for (s = p->services; s; s = s->next)
		if (s->sid == sid)
			break;
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (s) {
			s->hdr.kind = RCM_KIND_SERVICE;
			s->port = p;
			s->sid = sid;
			pthread_mutex_init(&s->mtx, NULL);
			s->next = p->services;
			p->services = s;
		}
	}
	pthread_mutex_unlock(&p->svc_mtx);
	return s;
}

int rcm_service_listen(struct rcm_service *s, struct cep_cm *cm)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = rcm_cep_handler,
				     .context = &s->hdr };
	int ret = cep_cm_create_id(cm, &ia, &s->cep);

	if (ret)
		return ret;
	/* Past the rdma_cm listener's backlog a request waits in its deferred
	 * list (rcm_push_request), MRAed (at once when the listener's pace
	 * says it will wait past half its requester's timeout, else at that
	 * half: cm_mra_now): the CM holds it rather than drop it. With the
	 * CM's default backlog, 1024 as rdma_listen's, the list was never
	 * used: an application that fell 1,024 requests behind lost every
	 * later REQ for its requester to retry. */
	ret = cep_cm_listen_backlog(s->cep, s->sid, ~0ull, RCM_HOLD_MAX);
	if (ret) {
		cep_cm_destroy_id(s->cep);
		s->cep = NULL;
	}
	return ret;
}

/* Add listener @r to @s, starting libcep's listener if it is the first. */
static int service_add(struct rcm_service *s, struct cep_cm *cm, struct rcm_id *r)
{
	int ret = 0;

	pthread_mutex_lock(&s->mtx);
	if (s->nlisteners == s->cap) {
		unsigned cap = s->cap ? 2 * s->cap : 4;
		struct rcm_id **l = realloc(s->listeners, cap * sizeof(*l));

		if (!l) {
			ret = -ENOMEM;
			goto out;
		}
		s->listeners = l;
		s->cap = cap;
	}
	if (!s->cep) {
		ret = rcm_service_listen(s, cm);
		if (ret)
			goto out;
	}
	rcm_id_get(r);
	s->listeners[s->nlisteners++] = r;
out:
	pthread_mutex_unlock(&s->mtx);
	return ret;
}

static void service_remove(struct rcm_service *s, struct rcm_id *r)
{
	int found = 0;

	pthread_mutex_lock(&s->mtx);
	for (unsigned i = 0; i < s->nlisteners; i++) {
		if (s->listeners[i] == r) {
			s->listeners[i] = s->listeners[--s->nlisteners];
			found = 1;
			break;
		}
	}
	if (s->nlisteners == 0 && s->cep) {
		cep_cm_destroy_id(s->cep);
		s->cep = NULL;
	}
	pthread_mutex_unlock(&s->mtx);
	if (found)
		rcm_id_put(r);
}

static void unlisten(struct rcm_id *r)
{
	for (unsigned i = 0; i < r->nsvcs; i++)
		service_remove(r->svcs[i], r);
	r->nsvcs = 0;
}

/* Scripts cannot see a libcep listener (no kernel cm_id in `rdma resource`):
 * CEP_RDMACM_READY=FILE is created once the first rdma_listen succeeds. */
static void signal_ready(void)
{
	static atomic_int done;
	const char *path = getenv("CEP_RDMACM_READY");
	char tmp[4096];
	int fd;

	if (!path || !*path || atomic_exchange(&done, 1))
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, "listening\n", 10) != 10 || close(fd) || rename(tmp, path))
		fprintf(stderr, "librdmacm (libcep): cannot create %s\n", path);
}

RCM_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct rcm_port *targets[64];
	struct rcm_id *r;
	unsigned n = 0, ok = 0;
	uint64_t sid;
	int ret = 0, first_err = 0;

	if (!id)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	if (r->state == RCM_IDLE) {
		/* Listen before bind: the IPv4 wildcard, an ephemeral port. */
		struct sockaddr_in any = { .sin_family = AF_INET };

		ret = rcm_bind(r, (struct sockaddr *)&any, NULL);
		if (!ret)
			r->state = RCM_ADDR_BOUND;
	}
	if (!ret && r->state != RCM_ADDR_BOUND)
		ret = -EINVAL;
	if (!ret && r->reuseaddr) {
		/* Two listeners may not share an address (cma_bind_listen). */
		struct rcm_id **tab;

		pthread_mutex_lock(&rcm.lock);
		tab = port_table(r->bind_ps);
		for (struct rcm_id *o = tab ? tab[rcm_addr_port(&r->id.route.addr.src_addr)] : NULL;
		     o; o = o->bind_next)
			if (o != r && o->listening &&
			    port_conflict(r, &r->id.route.addr.src_addr, o, 1))
				ret = -EADDRINUSE;
		pthread_mutex_unlock(&rcm.lock);
	}
	if (!ret) {
		pthread_mutex_lock(&rcm.lock);
		r->listening = 1;
		pthread_mutex_unlock(&rcm.lock);
	}
	if (ret) {
		pthread_mutex_unlock(&r->mtx);
		return rcm_err(-ret);
	}
	r->backlog = backlog > 0 && backlog < RCM_DEFAULT_BACKLOG ? backlog : RCM_DEFAULT_BACKLOG;
	if (r->port) {
		targets[n++] = r->port;
	} else {
		for (unsigned i = 0; i < rcm_port_count() && n < 64; i++)
			if (rcm_port_usable(rcm_port_at(i)))
				targets[n++] = rcm_port_at(i);
	}
	free(r->svcs);
	r->svcs = calloc(n ? n : 1, sizeof(*r->svcs));
	r->state = RCM_LISTEN;
	pthread_mutex_unlock(&r->mtx);
	if (!r->svcs)
		ret = -ENOMEM;
	sid = rcm_service_id(r, 0);
	for (unsigned i = 0; !ret && i < n; i++) {
		struct rcm_service *s;
		struct cep_cm *cm;
		int e = rcm_port_cm(targets[i], &cm);

		s = e ? NULL : service_get(targets[i], sid);
		if (!e && !s)
			e = -ENOMEM;
		if (!e)
			e = service_add(s, cm, r);
		if (e) {
			if (!first_err)
				first_err = e;
			continue;
		}
		r->svcs[r->nsvcs++] = s;
		ok++;
	}
	if (!ret && !ok)
		ret = first_err ? first_err : -ENODEV;
	if (ret) {
		unlisten(r);
		pthread_mutex_lock(&r->mtx);
		r->state = RCM_ADDR_BOUND;
		pthread_mutex_lock(&rcm.lock);
		r->listening = 0;
		pthread_mutex_unlock(&rcm.lock);
		pthread_mutex_unlock(&r->mtx);
		return rcm_err(-ret);
	}
	signal_ready();
	return 0;
}

/* ---- destruction ------------------------------------------------------- */

static void drop_list(struct rcm_event *e)
{
	while (e) {
		struct rcm_event *next = e->next;

		rcm_event_drop(e);
		e = next;
	}
}

/* Everything rdma_destroy_id does before waiting for the acks. */
static void id_teardown(struct rcm_id *r)
{
	struct rcm_event *deferred, *held;
	struct cep_cm_id *cep;

	pthread_mutex_lock(&r->mtx);
	r->destroying = 1;
	rcm_mc_end(r); /* the kernel's destroy leaves the groups */
	cep = r->cep;
	deferred = rcm_evq_take(&r->deferred);
	held = rcm_evq_take(&r->held);
	pthread_mutex_unlock(&r->mtx);
	rcm_mc_end_ib(r); /* InfiniBand: the SA's Deletes, outside the lock */
	unlisten(r);
	rcm_unbind(r);
	drop_list(rcm_channel_take(rcm_channel_of(r->id.channel), r));
	drop_list(deferred);
	drop_list(held);
	/* libcep sends what the state asks (REJ, DREQ, DREP) and keeps
	 * timewait; DESTROYED drops its reference on r. */
	if (cep)
		cep_cm_destroy_id(cep);
	pthread_mutex_lock(&r->mtx);
	rcm_qp_unregister(r);
	pthread_mutex_unlock(&r->mtx);
}

void rcm_id_abandon(struct rcm_id *r)
{
	id_teardown(r);
	if (r->sync)
		rcm_channel_free(rcm_channel_of(r->id.channel));
	rcm_id_put(r);
}

RCM_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct rcm_id *r;

	if (!id)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	if (r->destroying) {
		pthread_mutex_unlock(&r->mtx);
		return rcm_err(EINVAL);
	}
	pthread_mutex_unlock(&r->mtx);
	id_teardown(r);
	if (r->sync && r->id.event) {
		rdma_ack_cm_event(r->id.event);
		r->id.event = NULL;
	}
	rcm_wait_acked(r);
	if (r->sync)
		rcm_channel_free(rcm_channel_of(r->id.channel));
	rcm_id_put(r);
	return 0;
}

/* ---- options, migration, accessors --------------------------------------- */

/* Bind flags are read by other ids' port checks under rcm.lock. */
static void set_locked(uint8_t *flag, int v)
{
	pthread_mutex_lock(&rcm.lock);
	*flag = (uint8_t)v;
	pthread_mutex_unlock(&rcm.lock);
}

RCM_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname,
			       void *optval, size_t optlen)
{
	struct rcm_id *r;
	int ret = 0;

	if (!id || !optval)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	if (level == RDMA_OPTION_IB)
		return optname == RDMA_OPTION_IB_PATH ? rcm_ib_set_path(r, optval, optlen)
						      : rcm_err(ENOSYS);
	if (level != RDMA_OPTION_ID)
		return rcm_err(ENOSYS);
	pthread_mutex_lock(&r->mtx);
	switch (optname) {
	case RDMA_OPTION_ID_TOS:
		if (optlen != sizeof(uint8_t))
			ret = EINVAL;
		else
			r->tos = *(uint8_t *)optval, r->tos_set = 1;
		break;
	case RDMA_OPTION_ID_REUSEADDR:
		/* kernel rdma_set_reuseaddr: before bind, or to clear */
		if (optlen != sizeof(int))
			ret = EINVAL;
		else if ((*(int *)optval && r->state != RCM_LISTEN) || r->state == RCM_IDLE)
			set_locked(&r->reuseaddr, *(int *)optval != 0);
		else
			ret = EINVAL;
		break;
	case RDMA_OPTION_ID_AFONLY:
		if (optlen != sizeof(int) || (r->state != RCM_IDLE && r->state != RCM_ADDR_BOUND))
			ret = EINVAL;
		else
			set_locked(&r->afonly, *(int *)optval != 0);
		break;
	case RDMA_OPTION_ID_ACK_TIMEOUT:
		if (optlen != sizeof(uint8_t) || r->id.qp_type != IBV_QPT_RC)
			ret = EINVAL;
		else
			r->ack_timeout = *(uint8_t *)optval & 31, r->ack_timeout_set = 1;
		break;
	default:
		ret = ENOSYS;
		break;
	}
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(ret) : 0;
}

RCM_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct rcm_channel *old, *nc;
	struct rcm_event *moved;
	struct rcm_id *r;
	int was_sync;

	if (!id)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	if (r->sync && !channel)
		return rcm_err(EINVAL);
	nc = channel ? rcm_channel_of(channel) : rcm_channel_new();
	if (!nc)
		return rcm_err(ENOMEM);
	pthread_mutex_lock(&r->mtx);
	old = rcm_channel_of(r->id.channel);
	was_sync = r->sync;
	/* The id's waiting events follow it (kernel ucma_migrate_id). */
	moved = rcm_channel_take(old, r);
	rcm_channel_put(nc, moved);
	r->id.channel = &nc->ch;
	r->sync = channel == NULL;
	pthread_mutex_unlock(&r->mtx);
	if (was_sync) {
		if (r->id.event) {
			rdma_ack_cm_event(r->id.event);
			r->id.event = NULL;
		}
		rcm_channel_free(old);
	}
	/* Events already handed out on the old channel must be acked first. */
	rcm_wait_acked(r);
	return 0;
}

RCM_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return htons(rcm_addr_port(&id->route.addr.src_addr));
}

RCM_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return htons(rcm_addr_port(&id->route.addr.dst_addr));
}

RCM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **list = NULL;

	if (rcm_init() == 0)
		list = calloc(rcm.ndevs + 1, sizeof(*list));
	if (list)
		for (unsigned i = 0; i < rcm.ndevs; i++)
			list[i] = rcm.devs[i].verbs;
	if (num_devices)
		*num_devices = list ? (int)rcm.ndevs : 0;
	return list;
}

RCM_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}
