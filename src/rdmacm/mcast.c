/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, multicast: rdma_join_multicast,
 * rdma_join_multicast_ex and rdma_leave_multicast as librdmacm and the
 * kernel's rdma_cm give them on RoCE (cma_iboe_join_multicast). A RoCE
 * join asks nothing of the fabric or of the CM: the MGID comes from the
 * group's address, the node's membership of the IP group (what lets
 * snooping switches forward the group to this port) is held by a socket
 * of this process on the port's netdev for as long as the join lasts, the
 * MULTICAST_JOIN event carries the address handle attributes, the group
 * QPN 0xffffff and the id's Q_Key, and the id's QP is attached to the
 * MGID when the application takes the event (librdmacm's
 * ucma_process_join). So a join needs no CM and no cepd: a process that
 * dies drops its memberships with its descriptors and QPs.
 *
 * As the kernel: the id must be bound to a device or have resolved its
 * address (ADDR_BOUND with a device, or ADDR_RESOLVED) and be of a UD QP
 * type, else EINVAL; a zero address EINVAL; an InfiniBand port's join
 * (MCMemberRecord through the SA) is not built: ENOSYS. Stricter: the
 * address must be a multicast group (IPv4 224/4, IPv6 or an AF_IB GID in
 * ff00::/8) - the kernel would join a unicast "group".
 *
 * MGID (cma_iboe_set_mgid, RoCE v2 - the only GID type libcep's ids use):
 * an IPv4 group a.b.c.d gives ::ffff:a.b.c.d, an IPv6 group itself, an
 * AF_IB address its sib_addr. The address handle: global, the MGID as
 * destination, the id's source GID index, hop limit 64
 * (IPV6_DEFAULT_HOPLIMIT for RoCE v2), rate, SL, flow label and traffic
 * class 0, LID 0.
 *
 * Lifetimes: a join (struct rcm_mc) lives on its id's list under the id's
 * mutex until rdma_leave_multicast unlinks it, or until the id is freed.
 * Each event made for it counts in mc->pending until acked or dropped;
 * leave takes back the join's events still queued and waits for the ones
 * the application holds (librdmacm waits for events_reported), so the
 * struct is freed when no event points to it. rdma_destroy_id ends the
 * memberships (the sockets) at once; the structs go with the id.
 *
 * Guarantees: any thread; the calls take the id's mutex, and rcm.lock
 * (read the GID cache) never under it.
 */
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/ib.h>

#include "rdmacm.h"

#define MC_QPN 0xffffffu   /* the multicast QPN (IB_MULTICAST_QPN) */
#define MC_HOP_LIMIT 64    /* IPV6_DEFAULT_HOPLIMIT: RoCE v2 */

/* The MGID of group @a (cma_iboe_set_mgid for RoCE v2); -EINVAL when @a
 * is zero or not a multicast group, -EAFNOSUPPORT for other families. */
static int mgid_of(const struct sockaddr *a, uint8_t mgid[16])
{
	memset(mgid, 0, 16);
	switch (a->sa_family) {
	case AF_INET: {
		const struct sockaddr_in *in = (const void *)a;
		uint32_t h = ntohl(in->sin_addr.s_addr);

		if (!IN_MULTICAST(h))
			return -EINVAL;
		mgid[10] = mgid[11] = 0xff;
		memcpy(mgid + 12, &in->sin_addr, 4);
		return 0;
	}
	case AF_INET6:
		memcpy(mgid, &((const struct sockaddr_in6 *)(const void *)a)->sin6_addr, 16);
		break;
	case AF_IB:
		memcpy(mgid, &((const struct sockaddr_ib *)(const void *)a)->sib_addr, 16);
		break;
	default:
		return -EAFNOSUPPORT;
	}
	return mgid[0] == 0xff ? 0 : -EINVAL;
}

/* The netdev of @r's source GID (its GID table entry); 0 when unknown.
 * Takes rcm.lock: not under r->mtx. */
static int netdev_of(const struct rcm_port *p, uint8_t gid_index)
{
	const struct rcm_dev *d = p->dev;
	int ifindex = 0;

	pthread_mutex_lock(&rcm.lock);
	for (size_t i = 0; i < d->ngids; i++)
		if (d->gids[i].port_num == p->port_num && d->gids[i].gid_index == gid_index) {
			ifindex = (int)d->gids[i].ndev_ifindex;
			break;
		}
	pthread_mutex_unlock(&rcm.lock);
	return ifindex;
}

/* The node's membership of the group @mgid on netdev @ifindex, held by
 * the returned socket (IGMP / MLD report now, leave at close), or
 * -errno. An IPv4-mapped MGID is an IPv4 group (the kernel's
 * cma_igmp_send reads bytes 12-15); any other an IPv6 group. */
static int membership(const uint8_t mgid[16], int ifindex)
{
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };
	int v4 = !memcmp(mgid, v4mapped, sizeof(v4mapped));
	int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int ret;

	if (fd < 0)
		return -errno;
	if (v4) {
		struct ip_mreqn m = { .imr_ifindex = ifindex };

		memcpy(&m.imr_multiaddr, mgid + 12, 4);
		ret = setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m));
	} else {
		struct ipv6_mreq m = { .ipv6mr_interface = (unsigned)ifindex };

		memcpy(&m.ipv6mr_multiaddr, mgid, 16);
		ret = setsockopt(fd, IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &m, sizeof(m));
	}
	if (ret) {
		ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

static int join(struct rcm_id *r, const struct sockaddr *addr, socklen_t addrlen,
		uint16_t flags, void *context)
{
	struct rcm_mc *mc;
	struct rcm_event *e;
	struct rcm_port *port;
	uint8_t gid_index;
	int ret, send_only = flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, ifindex;

	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return -ENOMEM;
	mc->igmp_fd = -1;
	mc->context = context;
	mc->join_flags = flags;
	memcpy(&mc->addr, addr, addrlen);
	mc->addrlen = addrlen;
	ret = mgid_of(addr, mc->mgid.raw);
	if (ret)
		goto err;
	pthread_mutex_lock(&r->mtx);
	/* cma's rdma_join_multicast: a device, an address, a UD QP type */
	if (r->destroying || !r->port ||
	    (r->state != RCM_ADDR_BOUND && r->state != RCM_ADDR_RESOLVED) ||
	    r->id.qp_type != IBV_QPT_UD)
		ret = -EINVAL;
	else if (r->port->link_layer != IBV_LINK_LAYER_ETHERNET)
		ret = -ENOSYS; /* InfiniBand: the SA's MCMemberRecord, not built */
	port = r->port;
	gid_index = r->sgid_index;
	pthread_mutex_unlock(&r->mtx);
	if (ret)
		goto err;
	if (!send_only) { /* cma_igmp_send: a send-only member does not join */
		ifindex = netdev_of(port, gid_index);
		if (!ifindex) {
			ret = -ENODEV; /* as the kernel without the netdev */
			goto err;
		}
		mc->igmp_fd = membership(mc->mgid.raw, ifindex);
		if (mc->igmp_fd < 0) {
			ret = mc->igmp_fd;
			mc->igmp_fd = -1;
			goto err;
		}
	}
	e = rcm_event_new(r, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
	if (!e) {
		ret = -ENOMEM;
		goto err;
	}
	e->mc = mc;
	e->work = RCM_WORK_JOIN;
	e->ev.param.ud.private_data = context; /* librdmacm: the join's context */
	e->ev.param.ud.qp_num = MC_QPN;
	e->ev.param.ud.qkey = RDMA_UDP_QKEY; /* cma_set_default_qkey: UDP and IB */
	e->ev.param.ud.ah_attr.is_global = 1;
	e->ev.param.ud.ah_attr.port_num = port->port_num;
	e->ev.param.ud.ah_attr.grh.dgid = mc->mgid;
	e->ev.param.ud.ah_attr.grh.sgid_index = gid_index;
	e->ev.param.ud.ah_attr.grh.hop_limit = MC_HOP_LIMIT;
	atomic_fetch_add_explicit(&mc->pending, 1, memory_order_relaxed);
	pthread_mutex_lock(&r->mtx);
	if (r->destroying) {
		/* rdma_destroy_id began meanwhile: as if it came first */
		pthread_mutex_unlock(&r->mtx);
		e->mc = NULL;
		rcm_event_drop(e);
		ret = -EINVAL;
		goto err;
	}
	mc->next = r->mc_list;
	r->mc_list = mc;
	rcm_push_locked(e);
	pthread_mutex_unlock(&r->mtx);
	return rcm_complete(r); /* a synchronous id waits for it */
err:
	if (mc->igmp_fd >= 0)
		close(mc->igmp_fd);
	free(mc);
	return rcm_err(-ret);
}

RCM_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc,
				      void *context)
{
	int len;

	if (!id || !mc)
		return rcm_err(EINVAL);
	/* librdmacm's checks, in its order */
	if (mc->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return rcm_err(ENOTSUP);
	if (!(mc->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
		return rcm_err(EINVAL);
	if (!(mc->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    mc->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return rcm_err(EINVAL);
	len = mc->addr ? rcm_addr_len(mc->addr) : 0;
	if (!len)
		return rcm_err(EINVAL);
	return join(rcm_id_of(id), mc->addr, (socklen_t)len, (uint16_t)mc->join_flags, context);
}

RCM_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	int len = addr ? rcm_addr_len(addr) : 0;

	if (!id || !len)
		return rcm_err(EINVAL);
	return join(rcm_id_of(id), addr, (socklen_t)len, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

RCM_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct rcm_id *r;
	struct rcm_mc *mc, **pp;
	int len = addr ? rcm_addr_len(addr) : 0;

	if (!id || !len)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	for (pp = &r->mc_list; *pp; pp = &(*pp)->next)
		if (!memcmp(&(*pp)->addr, addr, (size_t)len))
			break;
	mc = *pp;
	if (mc) {
		*pp = mc->next;
		/* librdmacm: the QP leaves the group first */
		if (mc->attached && r->id.qp)
			ibv_detach_mcast(r->id.qp, &mc->mgid, mc->mlid);
		mc->attached = 0;
		mc->left = 1; /* an event being taken now attaches nothing */
	}
	pthread_mutex_unlock(&r->mtx);
	if (!mc)
		return rcm_err(EADDRNOTAVAIL);
	/* A synchronous id keeps its last event until its next call: if that
	 * is the join's, it is acked here rather than waited for forever. */
	if (r->sync && r->id.event &&
	    RCM_CONTAINER(r->id.event, struct rcm_event, ev)->mc == mc) {
		rdma_ack_cm_event(r->id.event);
		r->id.event = NULL;
	}
	if (mc->igmp_fd >= 0)
		close(mc->igmp_fd);
	mc->igmp_fd = -1;
	/* Its events the application has not fetched go (the kernel's
	 * leave drops them from the queue); the others of the id go back. */
	if (atomic_load_explicit(&mc->pending, memory_order_acquire)) {
		struct rcm_channel *c = rcm_channel_of(r->id.channel);
		struct rcm_event *list = rcm_channel_take(c, r), *keep = NULL, **kt = &keep;

		while (list) {
			struct rcm_event *e = list;

			list = e->next;
			e->next = NULL;
			if (e->mc == mc) {
				rcm_event_drop(e);
			} else {
				*kt = e;
				kt = &e->next;
			}
		}
		if (keep)
			rcm_channel_put(c, keep);
	}
	/* ...and those it holds are waited for (librdmacm: events_reported) */
	pthread_mutex_lock(&r->mtx);
	while (atomic_load_explicit(&mc->pending, memory_order_acquire))
		pthread_cond_wait(&r->cond, &r->mtx);
	pthread_mutex_unlock(&r->mtx);
	free(mc);
	return 0;
}

void rcm_mc_join_taken(struct rcm_id *r, struct rcm_event *e)
{
	struct rcm_mc *mc = e->mc;
	int ret;

	/* librdmacm's ucma_process_join: attach the id's QP now, unless
	 * send-only; a failure makes it MULTICAST_ERROR, status -1, errno */
	if (!r->id.qp || mc->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER || mc->attached ||
	    mc->left)
		return;
	ret = ibv_attach_mcast(r->id.qp, &mc->mgid, mc->mlid);
	if (ret) {
		e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
		e->ev.status = -1;
		errno = ret;
		return;
	}
	mc->attached = 1;
}

void rcm_mc_end(struct rcm_id *r)
{
	for (struct rcm_mc *mc = r->mc_list; mc; mc = mc->next)
		if (mc->igmp_fd >= 0) {
			close(mc->igmp_fd);
			mc->igmp_fd = -1;
		}
}

void rcm_mc_free(struct rcm_id *r)
{
	while (r->mc_list) {
		struct rcm_mc *mc = r->mc_list;

		r->mc_list = mc->next;
		if (mc->igmp_fd >= 0)
			close(mc->igmp_fd);
		free(mc);
	}
}
