/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, multicast: rdma_join_multicast,
 * rdma_join_multicast_ex and rdma_leave_multicast as librdmacm and the
 * kernel's rdma_cm give them on RoCE (cma_iboe_join_multicast) and on
 * InfiniBand (cma_join_ib_multicast, below). A RoCE
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
 * type, else EINVAL; on RoCE a zero address EINVAL. Stricter: the
 * address must be a multicast group (IPv4 224/4, IPv6 or an AF_IB GID in
 * ff00::/8) - the kernel would join a unicast "group".
 *
 * InfiniBand: a join is the port's membership at the SA (MCMemberRecord
 * Set, Delete at leave), which this process counts per group and
 * JoinState as the kernel's ib_multicast counts the node's (struct
 * rcm_ib_group on the port, under its mc_mtx): the first join of a
 * JoinState sends the Set and the last leave the Delete; the others
 * share the record. The call waits for the SA, then queues MULTICAST_JOIN
 * (or MULTICAST_ERROR with the SA's failure). The SA knows ports, not
 * processes: in a process of its own a process's count is not another's,
 * and a dead process's memberships stay. Through cepd they are cepd's:
 * each join and leave is its MC_JOIN / MC_LEAVE, cepd counts the node's
 * (all its clients') joins as the kernel does and ends a dead client's
 * (src/service/mcast.c). The SA requests and cepd's requests run under no
 * id's mutex.
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
 * (read the GID cache) and a port's mc_mtx never under it.
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
#include "ib.h"
#include "sa/mc_join.h"
#include "service/proto.h"

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
	int fd = rcm_socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
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

/* ---- InfiniBand: memberships through the SA ----------------------------- */

#define IB_SA_TIMEOUT_MS 1000u

/* The MGID of group @a on an InfiniBand port (the kernel's cma_set_mgid),
 * with IPoIB's default broadcast address standing for the interface's:
 * scope 2 and the id's P_Key, full member. A zero address gives a zero
 * MGID, which the SA replaces by one it assigns. An IPv4 group maps as
 * ip_ib_mc_map, an IPv6 group as ipv6_ib_mc_map, both with rdma_cm's
 * signature (0x01 for IPoIB's 0x1b) in RDMA_PS_UDP; an IPv6 address of
 * the SA's form (ff1x:a01b::) and an AF_IB one are the MGID. Stricter
 * than the kernel: a unicast address is -EINVAL. */
static int ib_mgid_of(const struct sockaddr *a, int ps, uint16_t pkey, uint8_t mgid[16])
{
	uint8_t sig = ps == RDMA_PS_UDP ? 0x01 : 0x1b;

	memset(mgid, 0, 16);
	switch (a->sa_family) {
	case AF_INET: {
		uint32_t h = ntohl(((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr);

		if (!h)
			return 0;
		if (!IN_MULTICAST(h))
			return -EINVAL;
		cep_mc_ipoib_prefix(mgid, 0x4000 | sig, pkey);
		mgid[12] = (uint8_t)((h >> 24) & 0x0f);
		mgid[13] = (uint8_t)(h >> 16);
		mgid[14] = (uint8_t)(h >> 8);
		mgid[15] = (uint8_t)h;
		return 0;
	}
	case AF_INET6: {
		const uint8_t *g = ((const struct sockaddr_in6 *)(const void *)a)->sin6_addr.s6_addr;

		if (cep_mc_zero16(g))
			return 0;
		if (g[0] != 0xff)
			return -EINVAL;
		if ((g[1] & 0xf0) == 0x10 && g[2] == 0xa0 && g[3] == 0x1b) {
			memcpy(mgid, g, 16); /* an MGID the SA assigned */
			return 0;
		}
		cep_mc_ipoib_prefix(mgid, 0x6000 | sig, pkey);
		memcpy(mgid + 6, g + 6, 10);
		return 0;
	}
	case AF_IB: {
		const uint8_t *g = ((const struct sockaddr_ib *)(const void *)a)->sib_addr.sib_raw;

		if (!cep_mc_zero16(g) && g[0] != 0xff)
			return -EINVAL;
		memcpy(mgid, g, 16);
		return 0;
	}
	default:
		return -EAFNOSUPPORT;
	}
}

int rcm_qkey(struct rcm_id *r, uint32_t *out)
{
	struct cep_sa_mcmember t;
	struct cep_sa *sa;
	int ret;

	if (!r->qkey && r->id.ps != RDMA_PS_IPOIB) {
		r->qkey = RDMA_UDP_QKEY; /* cma_set_default_qkey */
	} else if (!r->qkey) {
		uint16_t pkey = be16toh(r->id.route.addr.addr.ibaddr.pkey);
		struct cep_cm *cm;

		if (!r->port || r->port->link_layer != IBV_LINK_LAYER_INFINIBAND)
			return -EINVAL;
		cm = rcm_port_cepd(r->port);
		if (cm) { /* cepd asks the SA: the process may not */
			struct cepd_mc m = { .pkey = pkey };
			struct cepd_mc_rep rep;

			ret = rcm_ib_sys.mc_remote(cm, CEPD_MC_BCAST, &m, &rep);
			if (!ret)
				cep_sa_mcmember_decode(rep.rec, &t);
		} else {
			ret = rcm_port_sa(r->port, IB_SA_TIMEOUT_MS, &sa);
			if (!ret)
				ret = cep_mc_bcast_rec(sa, pkey, &t);
		}
		if (ret)
			return ret;
		r->qkey = t.qkey;
	}
	*out = r->qkey;
	return 0;
}

/* Under p->mc_mtx. */
static struct rcm_ib_group *ib_group_find(struct rcm_port *p, const uint8_t mgid[16],
					  const uint8_t port_gid[16])
{
	struct rcm_ib_group *g;

	for (g = p->groups; g; g = g->next)
		if (!memcmp(g->mgid, mgid, 16) && !memcmp(g->port_gid, port_gid, 16))
			break;
	return g;
}

_Static_assert(CEPD_MC_QKEY == RDMA_UDP_QKEY, "cepd's rdma_cm Q_Key is librdmacm's");

/* The id's Q_Key for a join, as cepd's MC_JOIN and cep_mc_sa_join take
 * it: 0 for the IPoIB broadcast group's (RDMA_PS_IPOIB), else rdma_cm's. */
static uint32_t ib_join_qkey(int ps)
{
	return ps == RDMA_PS_IPOIB ? 0 : RDMA_UDP_QKEY;
}

/* A join through cepd: its MC_JOIN, the answer as ib_join's. */
static int ib_join_remote(struct cep_cm *cm, struct rcm_mc *mc, const uint8_t sgid[16],
			  uint16_t pkey, int ps, int *status, struct cep_sa_mcmember *rec)
{
	struct cepd_mc m;
	struct cepd_mc_rep rep;
	int ret;

	memset(&m, 0, sizeof(m));
	memcpy(m.mgid, mc->mgid.raw, 16);
	memcpy(m.port_gid, sgid, 16);
	m.qkey = ib_join_qkey(ps);
	m.pkey = pkey;
	m.bit = mc->ib_bit;
	memset(&rep, 0, sizeof(rep));
	ret = rcm_ib_sys.mc_remote(cm, CEPD_MC_JOIN, &m, &rep);
	if (ret)
		return ret;
	*status = rep.status;
	if (rep.status)
		return 0;
	cep_sa_mcmember_decode(rep.rec, rec);
	return 0;
}

/*
 * Join @mc's group (mc->mgid, its JoinState bit mc->ib_bit) from the port
 * GID @sgid of InfiniBand port @p, as the kernel's cma_join_ib_multicast
 * and ib_multicast. Through cepd the membership is cepd's (MC_JOIN: it
 * counts the node's joins and sends the SA what this would). In a
 * process of its own: the first join of a JoinState on this process's
 * port sends the SA a Set (src/sa/mc_join.h: IPoIB's broadcast group's
 * parameters, the id's Q_Key and P_Key); later ones share its
 * answer. Returns 0 with the group's record in @rec (mc->mgid, mc->mlid
 * and mc->ib_port set) or an SA failure in @status (the kernel's event
 * statuses: -ETIMEDOUT, -ENETDOWN, else -EINVAL for the SA's refusal); or
 * a negative errno for the call (-EADDRNOTAVAIL: no broadcast group to
 * take the parameters from, the kernel's cache miss; the client's errors;
 * cepd's refusals; -ENOMEM). Takes p->mc_mtx; blocks on the SA.
 */
static int ib_join(struct rcm_port *p, struct rcm_mc *mc, const uint8_t sgid[16],
		   uint16_t pkey, int ps, int *status, struct cep_sa_mcmember *rec)
{
	unsigned bit = mc->ib_bit;
	struct rcm_ib_group *g = NULL;
	struct cep_cm *cm = rcm_port_cepd(p);
	struct cep_sa *sa;
	int ret;

	*status = 0;
	if (cm) {
		ret = ib_join_remote(cm, mc, sgid, pkey, ps, status, rec);
		if (!ret && !*status) {
			memcpy(mc->mgid.raw, rec->mgid, 16);
			memcpy(mc->ib_gid, sgid, 16);
			mc->mlid = rec->mlid;
			mc->ib_port = p;
		}
		return ret;
	}
	ret = rcm_port_sa(p, IB_SA_TIMEOUT_MS, &sa);
	if (ret)
		return ret;
	pthread_mutex_lock(&p->mc_mtx);
	if (!cep_mc_zero16(mc->mgid.raw))
		g = ib_group_find(p, mc->mgid.raw, sgid);
	if (g && g->members[bit]) {
		*rec = g->rec;
		goto joined;
	}
	ret = cep_mc_sa_join(sa, mc->mgid.raw, sgid, pkey, ib_join_qkey(ps), bit, status, rec);
	if (ret || *status)
		goto out;
	if (!g)
		g = ib_group_find(p, rec->mgid, sgid);
	if (!g) {
		g = calloc(1, sizeof(*g));
		if (!g) {
			/* joined, but nothing to count it in: leave again */
			cep_mc_sa_leave(sa, rec->mgid, sgid, bit);
			ret = -ENOMEM;
			goto out;
		}
		memcpy(g->mgid, rec->mgid, 16);
		memcpy(g->port_gid, sgid, 16);
		g->next = p->groups;
		p->groups = g;
	}
	g->rec = *rec;
joined:
	g->members[bit]++;
	memcpy(mc->mgid.raw, g->mgid, 16);
	memcpy(mc->ib_gid, sgid, 16);
	mc->mlid = rec->mlid;
	mc->ib_port = p;
out:
	pthread_mutex_unlock(&p->mc_mtx);
	return ret;
}

/* One join of @mgid's JoinState @bit from @port_gid ends: through cepd
 * its MC_LEAVE (cepd counts); else the last of this process's for that
 * bit sends the SA a Delete of it (its answer changes nothing here: the
 * membership is ours no longer either way). Takes p->mc_mtx; blocks on
 * the SA. */
static void ib_leave(struct rcm_port *p, const uint8_t mgid[16], const uint8_t port_gid[16],
		     unsigned bit)
{
	struct rcm_ib_group *g, **pp;
	struct cep_cm *cm = rcm_port_cepd(p);
	struct cep_sa *sa;
	int have_sa;

	if (cm) {
		struct cepd_mc m;

		memset(&m, 0, sizeof(m));
		memcpy(m.mgid, mgid, 16);
		memcpy(m.port_gid, port_gid, 16);
		m.bit = (uint8_t)bit;
		/* refused only for a membership cepd does not hold for us:
		 * then there is nothing to end */
		(void)rcm_ib_sys.mc_remote(cm, CEPD_MC_LEAVE, &m, NULL);
		return;
	}
	have_sa = rcm_port_sa(p, IB_SA_TIMEOUT_MS, &sa) == 0; /* open since the join */
	pthread_mutex_lock(&p->mc_mtx);
	g = ib_group_find(p, mgid, port_gid);
	if (g && g->members[bit] && --g->members[bit] == 0 && have_sa)
		cep_mc_sa_leave(sa, mgid, port_gid, bit);
	if (g && !g->members[0] && !g->members[1] && !g->members[2] && !g->members[3]) {
		for (pp = &p->groups; *pp != g; pp = &(*pp)->next)
			;
		*pp = g->next;
		free(g);
	}
	pthread_mutex_unlock(&p->mc_mtx);
}

/* Under the id's mutex: take @mc's InfiniBand membership out of it, to be
 * ended (ib_leave) after the lock; NULL when it holds none. */
static struct rcm_port *ib_take(struct rcm_mc *mc)
{
	struct rcm_port *p = mc->ib_port;

	mc->ib_port = NULL;
	return p;
}

static int join(struct rcm_id *r, const struct sockaddr *addr, socklen_t addrlen,
		uint16_t flags, void *context)
{
	struct cep_sa_mcmember rec;
	struct rcm_mc *mc;
	struct rcm_event *e;
	struct rcm_port *port;
	uint8_t gid_index, sgid[16];
	uint16_t pkey = 0;
	int ret, send_only = flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, ifindex;
	int ib = 0, ps, status = 0;

	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return -ENOMEM;
	mc->igmp_fd = -1;
	mc->context = context;
	mc->join_flags = flags;
	/* ucma: BIT(FULLMEMBER_JOIN) or BIT(SENDONLY_FULLMEMBER_JOIN) */
	mc->ib_bit = send_only ? 3 : 0;
	memcpy(&mc->addr, addr, addrlen);
	mc->addrlen = addrlen;
	pthread_mutex_lock(&r->mtx);
	/* cma's rdma_join_multicast: a device, an address, a UD QP type */
	if (r->destroying || !r->port ||
	    (r->state != RCM_ADDR_BOUND && r->state != RCM_ADDR_RESOLVED) ||
	    r->id.qp_type != IBV_QPT_UD)
		ret = -EINVAL;
	else if (r->port->link_layer == IBV_LINK_LAYER_INFINIBAND)
		ret = 0, ib = 1;
	else if (r->port->link_layer != IBV_LINK_LAYER_ETHERNET)
		ret = -ENOSYS; /* neither RoCE nor InfiniBand (the kernel's) */
	else
		ret = 0;
	port = r->port;
	gid_index = r->sgid_index;
	ps = r->id.ps;
	memcpy(sgid, r->id.route.addr.addr.ibaddr.sgid.raw, 16);
	if (ib)
		pkey = be16toh(r->id.route.addr.addr.ibaddr.pkey);
	pthread_mutex_unlock(&r->mtx);
	if (!ret)
		ret = ib ? ib_mgid_of(addr, ps, pkey, mc->mgid.raw) : mgid_of(addr, mc->mgid.raw);
	if (ret)
		goto err;
	if (ib) {
		ret = ib_join(port, mc, sgid, pkey, ps, &status, &rec);
		if (ret)
			goto err;
	} else if (!send_only) { /* cma_igmp_send: a send-only member does not join */
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
	e = rcm_event_new(r, status ? RDMA_CM_EVENT_MULTICAST_ERROR : RDMA_CM_EVENT_MULTICAST_JOIN,
			  status);
	if (!e) {
		ret = -ENOMEM;
		goto err;
	}
	e->mc = mc;
	e->ev.param.ud.private_data = context; /* librdmacm: the join's context */
	if (!status) {
		struct ibv_ah_attr *ah = &e->ev.param.ud.ah_attr;

		e->work = RCM_WORK_JOIN;
		e->ev.param.ud.qp_num = MC_QPN;
		ah->is_global = 1;
		ah->port_num = port->port_num;
		ah->grh.dgid = mc->mgid;
		ah->grh.sgid_index = gid_index;
		if (ib) {
			/* ib_init_ah_from_mcmember: the group's record */
			e->ev.param.ud.qkey = rec.qkey;
			ah->dlid = rec.mlid;
			ah->sl = rec.sl;
			ah->static_rate = rec.rate;
			ah->grh.flow_label = rec.flow_label;
			ah->grh.hop_limit = rec.hop_limit;
			ah->grh.traffic_class = rec.traffic_class;
		} else {
			e->ev.param.ud.qkey = RDMA_UDP_QKEY; /* cma_set_default_qkey */
			ah->grh.hop_limit = MC_HOP_LIMIT;
		}
	}
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
	if (mc->ib_port)
		ib_leave(mc->ib_port, mc->mgid.raw, mc->ib_gid, mc->ib_bit);
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
	struct rcm_port *ib_port = NULL;
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
		ib_port = ib_take(mc);
	}
	pthread_mutex_unlock(&r->mtx);
	if (!mc)
		return rcm_err(EADDRNOTAVAIL);
	if (ib_port) /* then the port's membership (cma_leave_ib_mc_group) */
		ib_leave(ib_port, mc->mgid.raw, mc->ib_gid, mc->ib_bit);
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

void rcm_mc_end_ib(struct rcm_id *r)
{
	for (;;) {
		struct rcm_port *p = NULL;
		struct rcm_mc *mc;

		pthread_mutex_lock(&r->mtx);
		for (mc = r->mc_list; mc; mc = mc->next) {
			p = ib_take(mc);
			if (p)
				break;
		}
		pthread_mutex_unlock(&r->mtx);
		if (!p)
			return;
		/* mc stays on the list (so its MGID too) until the id is freed */
		ib_leave(p, mc->mgid.raw, mc->ib_gid, mc->ib_bit);
	}
}

void rcm_mc_free(struct rcm_id *r)
{
	while (r->mc_list) {
		struct rcm_mc *mc = r->mc_list;
		struct rcm_port *p = ib_take(mc);

		if (p) /* an id freed without its teardown (never published) */
			ib_leave(p, mc->mgid.raw, mc->ib_gid, mc->ib_bit);
		r->mc_list = mc->next;
		if (mc->igmp_fd >= 0)
			close(mc->igmp_fd);
		free(mc);
	}
}
