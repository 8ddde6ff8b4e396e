/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, InfiniBand pieces: see ib.h. No state, no locks;
 * every function may be called from any thread.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>

#include <infiniband/ib.h>

#include <cep/cm.h>
#include <cep/rdma_cm.h>
#include <cep/qp.h>

#include "ib.h"
#include "rdmacm.h"
#include "service/remote.h" /* cmr_mc */

#define IPOIB_HWADDR_LEN   20
#define ARPHRD_INFINIBAND_ 32

int rcm_ib_path_option(const void *optval, size_t optlen, struct cep_sa_path *out)
{
	const uint32_t want = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY |
			      IBV_PATH_FLAG_BIDIRECTIONAL;
	const struct ibv_path_data *pd = optval;

	if (!optval || optlen == 0 || optlen % sizeof(*pd))
		return -EINVAL;
	for (size_t i = 0; i < optlen / sizeof(*pd); i++) {
		if (pd[i].flags != want)
			continue;
		cep_sa_path_decode((const uint8_t *)&pd[i].path, out);
		return 0;
	}
	return -EINVAL;
}

int rcm_ib_hwaddr(const uint8_t *hw, size_t len, uint32_t *qpn, uint8_t gid[16])
{
	if (!hw || len != IPOIB_HWADDR_LEN)
		return -EINVAL;
	*qpn = (uint32_t)hw[1] << 16 | (uint32_t)hw[2] << 8 | hw[3];
	memcpy(gid, hw + 4, 16);
	return 0;
}

/* Read one line of sysfs file @root/sys/class/net/@ifname/@file. */
static int read_net(const char *ifname, const char *file, char *buf, size_t len)
{
	const char *root = getenv("CEP_RDMACM_SYSROOT");
	char path[PATH_MAX];
	FILE *f;
	int n;

	if (strchr(ifname, '/') || !strcmp(ifname, ".") || !strcmp(ifname, ".."))
		return -ENODEV;
	n = snprintf(path, sizeof(path), "%s/sys/class/net/%s/%s", root ? root : "",
		     ifname, file);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	f = fopen(path, "re");
	if (!f)
		return -errno;
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return -EINVAL;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

static int parse_ul(const char *s, int base, unsigned long max, unsigned long *v)
{
	char *end;

	errno = 0;
	*v = strtoul(s, &end, base);
	return errno || end == s || *end || *v > max ? -EINVAL : 0;
}

int rcm_ib_netdev(const char *ifname, struct rcm_ib_netdev *out)
{
	const char *root = getenv("CEP_RDMACM_SYSROOT");
	char buf[64], path[PATH_MAX];
	unsigned long v;
	struct dirent *de;
	DIR *d;
	int ret, found = 0;

	memset(out, 0, sizeof(*out));
	ret = read_net(ifname, "type", buf, sizeof(buf));
	if (ret)
		return -ENODEV;
	if (parse_ul(buf, 10, UINT16_MAX, &v))
		return -EINVAL;
	if (v != ARPHRD_INFINIBAND_)
		return -ENODEV;
	if (snprintf(path, sizeof(path), "%s/sys/class/net/%s/device/infiniband",
		     root ? root : "", ifname) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	d = opendir(path);
	if (!d)
		return -ENODEV;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && strlen(de->d_name) < sizeof(out->dev)) {
			strcpy(out->dev, de->d_name);
			found++;
		}
	closedir(d);
	if (found != 1)
		return -ENODEV; /* none, or several: which one is unknowable */
	/* ipoib reports port - 1 in dev_port (older kernels: dev_id) */
	if (read_net(ifname, "dev_port", buf, sizeof(buf)) == 0)
		ret = parse_ul(buf, 10, 253, &v);
	else if (read_net(ifname, "dev_id", buf, sizeof(buf)) == 0)
		ret = parse_ul(buf, 16, 253, &v);
	else
		ret = -EINVAL;
	if (ret)
		return -EINVAL;
	out->port_num = (uint8_t)(v + 1);
	if (read_net(ifname, "pkey", buf, sizeof(buf)) || parse_ul(buf, 16, 0xffff, &v))
		return -EINVAL;
	out->pkey = (uint16_t)v;
	return 0;
}

static int same_addr(const struct rtattr *rta, const struct sockaddr *dst)
{
	size_t len = RTA_PAYLOAD(rta);

	if (dst->sa_family == AF_INET)
		return len == 4 && !memcmp(RTA_DATA(rta),
			&((const struct sockaddr_in *)(const void *)dst)->sin_addr, 4);
	return len == 16 && !memcmp(RTA_DATA(rta),
		&((const struct sockaddr_in6 *)(const void *)dst)->sin6_addr, 16);
}

int rcm_ib_neigh_parse(const void *buf, size_t len, int ifindex,
		       const struct sockaddr *dst, uint8_t hw[20])
{
	const struct nlmsghdr *nh;
	unsigned int rest = len > UINT_MAX ? UINT_MAX : (unsigned int)len;

	for (nh = buf; NLMSG_OK(nh, rest); nh = NLMSG_NEXT(nh, rest)) {
		const struct ndmsg *nd;
		const struct rtattr *rta;
		const struct rtattr *a_dst = NULL, *a_ll = NULL;
		unsigned int alen;

		if (nh->nlmsg_type == NLMSG_DONE)
			return 1;
		if (nh->nlmsg_type == NLMSG_ERROR)
			return -EPROTO;
		if (nh->nlmsg_type != RTM_NEWNEIGH ||
		    nh->nlmsg_len < NLMSG_LENGTH(sizeof(*nd)))
			continue;
		nd = NLMSG_DATA(nh);
		if (nd->ndm_ifindex != ifindex || nd->ndm_family != dst->sa_family)
			continue;
		alen = (unsigned int)(nh->nlmsg_len - NLMSG_LENGTH(sizeof(*nd)));
		for (rta = (const struct rtattr *)((const char *)nd + NLMSG_ALIGN(sizeof(*nd)));
		     RTA_OK(rta, alen); rta = RTA_NEXT(rta, alen)) {
			if (rta->rta_type == NDA_DST)
				a_dst = rta;
			else if (rta->rta_type == NDA_LLADDR)
				a_ll = rta;
		}
		if (!a_dst || !same_addr(a_dst, dst))
			continue;
		if ((nd->ndm_state & (NUD_INCOMPLETE | NUD_FAILED | NUD_NONE)) || !a_ll ||
		    RTA_PAYLOAD(a_ll) != IPOIB_HWADDR_LEN)
			return -EAGAIN;
		memcpy(hw, RTA_DATA(a_ll), IPOIB_HWADDR_LEN);
		return 0;
	}
	return -ENOENT;
}

int rcm_ib_neigh(int ifindex, const struct sockaddr *dst, uint8_t hw[20])
{
	struct {
		struct nlmsghdr nh;
		struct ndmsg nd;
	} req;
	static __thread char buf[32768];
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	int fd, ret = -ENOENT;

	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return -errno;
	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(req.nd));
	req.nh.nlmsg_type = RTM_GETNEIGH;
	req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.nh.nlmsg_seq = 1;
	req.nd.ndm_family = (unsigned char)dst->sa_family;
	if (sendto(fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		goto out;
	}
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		int r;

		if (n < 0) {
			ret = -errno;
			break;
		}
		r = rcm_ib_neigh_parse(buf, (size_t)n, ifindex, dst, hw);
		if (r == 1 || n == 0)
			break;        /* dump over; ret keeps any earlier answer */
		if (r != -ENOENT && ret == -ENOENT)
			ret = r;      /* read on to the end of the dump */
	}
out:
	close(fd);
	return ret;
}

int rcm_ib_sockaddr(const struct sockaddr *a, uint8_t gid[16], uint64_t *sid,
		    uint16_t *pkey)
{
	const struct sockaddr_ib *ib = (const void *)a;

	if (!a || a->sa_family != AF_IB)
		return -EAFNOSUPPORT;
	memcpy(gid, ib->sib_addr.sib_raw, 16);
	*sid = be64toh(ib->sib_sid);
	*pkey = be16toh(ib->sib_pkey);
	return 0;
}

#define IB_PS_MASK 0xffffffffffff0000ull

int rcm_ib_select_ps(int id_ps, struct sockaddr_ib *sib)
{
	static const int spaces[] = { RDMA_PS_IB, RDMA_PS_TCP, RDMA_PS_UDP };
	uint64_t mask = be64toh(sib->sib_sid_mask) & IB_PS_MASK;
	uint64_t sid = be64toh(sib->sib_sid) & mask;

	for (size_t i = 0; i < sizeof(spaces) / sizeof(spaces[0]); i++) {
		uint64_t prefix = cep_rdma_service_id((enum cep_rdma_ps)spaces[i], 0);
		uint16_t port;

		if (id_ps != RDMA_PS_IB && id_ps != spaces[i])
			continue;
		if (sid != (prefix & mask))
			continue;
		port = (uint16_t)(be64toh(sib->sib_sid) & be64toh(sib->sib_sid_mask));
		sib->sib_sid = htobe64(prefix | port);
		sib->sib_sid_mask = htobe64(IB_PS_MASK | be64toh(sib->sib_sid_mask));
		return spaces[i];
	}
	return 0;
}

void rcm_ib_path_rec(const struct cep_sa_path *p, struct ibv_sa_path_rec *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->dgid.raw, p->dgid, 16);
	memcpy(out->sgid.raw, p->sgid, 16);
	out->dlid = htobe16(p->dlid);
	out->slid = htobe16(p->slid);
	out->raw_traffic = p->raw_traffic;
	out->flow_label = htobe32(p->flow_label);
	out->hop_limit = p->hop_limit;
	out->traffic_class = p->traffic_class;
	out->reversible = p->reversible;
	out->numb_path = p->numb_path;
	out->pkey = htobe16(p->pkey);
	out->sl = p->sl;
	out->mtu_selector = p->mtu_selector;
	out->mtu = p->mtu;
	out->rate_selector = p->rate_selector;
	out->rate = p->rate;
	out->packet_life_time_selector = p->packet_life_time_selector;
	out->packet_life_time = p->packet_life_time;
	out->preference = p->preference;
}

static void path_from_req(const struct cep_req *rq, const struct cep_path *cp,
			  struct ibv_sa_path_rec *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->dgid.raw, cp->local_gid, 16);
	memcpy(out->sgid.raw, cp->remote_gid, 16);
	out->dlid = htobe16(cp->local_lid);
	out->slid = htobe16(cp->remote_lid);
	out->flow_label = htobe32(cp->flow_label);
	out->hop_limit = cp->hop_limit;
	out->traffic_class = cp->traffic_class;
	out->reversible = htobe32(1);
	out->pkey = htobe16(rq->partition_key);
	out->sl = cp->sl;
	out->mtu_selector = 2; /* IB_SA_EQ */
	out->mtu = rq->path_mtu;
	out->rate_selector = 2;
	out->rate = cp->packet_rate;
	out->packet_life_time_selector = 2;
	out->packet_life_time = cp->local_ack_timeout ? (uint8_t)(cp->local_ack_timeout - 1) : 0;
}

int rcm_ib_paths_from_req(const struct cep_req *rq, struct ibv_sa_path_rec out[2])
{
	path_from_req(rq, &rq->primary, &out[0]);
	if (!rq->alternate.local_lid)
		return 1;
	path_from_req(rq, &rq->alternate, &out[1]);
	return 2;
}

void rcm_ib_path_of_rec(const struct ibv_sa_path_rec *r, struct cep_sa_path *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->dgid, r->dgid.raw, 16);
	memcpy(out->sgid, r->sgid.raw, 16);
	out->dlid = be16toh(r->dlid);
	out->slid = be16toh(r->slid);
	out->raw_traffic = r->raw_traffic != 0;
	out->flow_label = be32toh(r->flow_label) & 0xfffff;
	out->hop_limit = r->hop_limit;
	out->traffic_class = r->traffic_class;
	out->reversible = r->reversible != 0;
	out->numb_path = r->numb_path;
	out->pkey = be16toh(r->pkey);
	out->sl = r->sl & 0xf;
	out->mtu_selector = r->mtu_selector;
	out->mtu = r->mtu;
	out->rate_selector = r->rate_selector;
	out->rate = r->rate;
	out->packet_life_time_selector = r->packet_life_time_selector;
	out->packet_life_time = r->packet_life_time;
	out->preference = r->preference;
}

int rcm_ib_conn_from_path(const struct ibv_sa_path_rec *rec, uint8_t ack_delay, int roce,
			  struct cep_cm_conn_param *p, struct cep_mad_addr *to)
{
	struct cep_sa_path sp;
	int ret;

	rcm_ib_path_of_rec(rec, &sp);
	ret = cep_sa_path_to_conn(&sp, p);
	if (ret)
		return ret;
	/* 0 would mean libcep's default, not the path's */
	if (p->packet_life_time == 0)
		p->packet_life_time = 1;
	p->primary.local_ack_timeout = cep_qp_ack_timeout(ack_delay, p->packet_life_time);
	to->lid = sp.dlid;
	to->sl = sp.sl;
	to->grh_present = roce || !p->primary.subnet_local;
	to->hop_limit = sp.hop_limit;
	to->traffic_class = sp.traffic_class;
	to->flow_label = sp.flow_label;
	memcpy(to->gid, sp.dgid, 16);
	return 0;
}

/* ---- the layer on InfiniBand ports ------------------------------------ */

static int sys_ifname_of(const struct sockaddr *a, char name[IF_NAMESIZE], int *ifindex)
{
	struct ifaddrs *ifs, *i;
	uint8_t want[16], have[16];
	int ret = -EADDRNOTAVAIL;

	if (getifaddrs(&ifs))
		return -errno;
	rcm_addr_gid(a, want);
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != a->sa_family)
			continue;
		rcm_addr_gid(i->ifa_addr, have);
		if (memcmp(want, have, 16) || strlen(i->ifa_name) >= IF_NAMESIZE)
			continue;
		strcpy(name, i->ifa_name);
		*ifindex = (int)if_nametoindex(i->ifa_name);
		ret = *ifindex ? 0 : -ENODEV;
		break;
	}
	freeifaddrs(ifs);
	return ret;
}

static int sys_kick(const struct sockaddr *src, const struct sockaddr *dst)
{
	struct sockaddr_storage s, d;
	int len = rcm_addr_len(dst), fd, ret = 0;

	if (!len || rcm_addr_len(src) != len)
		return -EAFNOSUPPORT;
	memset(&s, 0, sizeof(s));
	memset(&d, 0, sizeof(d));
	memcpy(&s, src, (size_t)len);
	memcpy(&d, dst, (size_t)len);
	if (dst->sa_family == AF_INET) {
		((struct sockaddr_in *)&s)->sin_port = 0;
		((struct sockaddr_in *)&d)->sin_port = htons(9); /* discard */
	} else {
		((struct sockaddr_in6 *)&s)->sin6_port = 0;
		((struct sockaddr_in6 *)&d)->sin6_port = htons(9);
	}
	fd = rcm_socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Sending needs the neighbour: the kernel starts ARP / ND for it. */
	if (bind(fd, (struct sockaddr *)&s, (socklen_t)len) ||
	    sendto(fd, "", 0, MSG_DONTWAIT, (struct sockaddr *)&d, (socklen_t)len) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

static int sys_sa_get(const char *dev, uint8_t port_num, uint32_t timeout_ms, struct cep_sa **out)
{
	struct cep_sa_attr a = { .size = sizeof(a), .dev_name = dev, .port_num = port_num,
				 .timeout_ms = timeout_ms };

	return cep_sa_get(&a, out);
}

struct rcm_ib_sys rcm_ib_sys = {
	.ifname_of = sys_ifname_of,
	.neigh = rcm_ib_neigh,
	.kick = sys_kick,
	.sa_get = sys_sa_get,
	.mc_remote = cmr_mc,
	.path_remote = cmr_path_query,
};

struct cep_cm *rcm_port_cepd(struct rcm_port *p)
{
	struct cep_cm *cm = atomic_load_explicit(&p->cm, memory_order_acquire);

	return cm && p->attached ? cm : NULL; /* attached: written before cm */
}

int rcm_ib_path_query(struct rcm_port *p, uint32_t timeout_ms, uint64_t comp_mask,
		      const struct cep_sa_path *query, struct cep_sa_path *out)
{
	struct cep_cm *cm = rcm_port_cepd(p);
	struct cep_sa *sa;
	int ret;

	if (cm)
		return rcm_ib_sys.path_remote(cm, comp_mask, 0, query, out);
	ret = rcm_port_sa(p, timeout_ms, &sa);
	return ret ? ret : cep_sa_path_query(sa, comp_mask, query, 0, out);
}

int rcm_ib_netdev_gid(const char *ifname, uint8_t gid[16])
{
	uint8_t hw[IPOIB_HWADDR_LEN];
	char buf[128], *p;
	uint32_t qpn;
	size_t n = 0;
	int ret = read_net(ifname, "address", buf, sizeof(buf));

	if (ret)
		return -ENODEV;
	/* "80:00:00:48:fe:80:...": 20 hex bytes separated by colons */
	for (p = buf; n < sizeof(hw); n++) {
		unsigned long v;
		char *end;

		if (!isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1]))
			return -EINVAL;
		v = strtoul(p, &end, 16);
		if (end != p + 2)
			return -EINVAL;
		hw[n] = (uint8_t)v;
		p = end;
		if (*p == ':')
			p++;
		else if (*p || n + 1 != sizeof(hw))
			return -EINVAL;
	}
	return *p ? -EINVAL : rcm_ib_hwaddr(hw, sizeof(hw), &qpn, gid);
}

int rcm_ib_local(const struct sockaddr *a, uint8_t gid[16], uint16_t *pkey, int *ifindex)
{
	struct rcm_ib_netdev nd;
	char name[IF_NAMESIZE];
	int ret;

	if (a->sa_family != AF_INET && a->sa_family != AF_INET6)
		return -ENODEV;
	ret = rcm_ib_sys.ifname_of(a, name, ifindex);
	if (ret)
		return -ENODEV;
	ret = rcm_ib_netdev(name, &nd);
	if (!ret)
		ret = rcm_ib_netdev_gid(name, gid);
	if (ret)
		return -ENODEV;
	*pkey = nd.pkey;
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int rcm_ib_resolve_neigh(int ifindex, const struct sockaddr *src, const struct sockaddr *dst,
			 int timeout_ms, uint8_t gid[16])
{
	const uint64_t end = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	uint64_t next_kick = 0;
	uint8_t hw[IPOIB_HWADDR_LEN];
	uint32_t qpn;
	int ret;

	for (;;) {
		uint64_t now;

		ret = rcm_ib_sys.neigh(ifindex, dst, hw);
		if (ret == 0)
			return rcm_ib_hwaddr(hw, sizeof(hw), &qpn, gid);
		if (ret != -ENOENT && ret != -EAGAIN)
			return ret;
		now = now_ms();
		if (now >= end)
			return -ETIMEDOUT;
		/* Not (yet) valid: ask the kernel to resolve it, again each
		 * second while it stays unresolved (a FAILED entry is retried
		 * by the neighbour layer once traffic asks for it). */
		if (now >= next_kick) {
			rcm_ib_sys.kick(src, dst);
			next_kick = now + 1000;
		}
		usleep((useconds_t)(end - now < 10 ? end - now : 10) * 1000u);
	}
}

uint64_t rcm_ib_route_query(const struct rcm_id *r, struct cep_sa_path *q)
{
	const struct sockaddr *src = &r->id.route.addr.src_addr;
	uint64_t mask = CEP_SA_PR_DGID | CEP_SA_PR_SGID | CEP_SA_PR_PKEY | CEP_SA_PR_NUMB_PATH |
			CEP_SA_PR_REVERSIBLE | CEP_SA_PR_SERVICE_ID;

	memset(q, 0, sizeof(*q));
	memcpy(q->sgid, r->id.route.addr.addr.ibaddr.sgid.raw, 16);
	memcpy(q->dgid, r->id.route.addr.addr.ibaddr.dgid.raw, 16);
	q->pkey = be16toh(r->id.route.addr.addr.ibaddr.pkey);
	q->numb_path = 1;
	q->reversible = 1;
	q->service_id = rcm_service_id(r, 1);
	if (src->sa_family == AF_INET) {
		q->qos_class = r->tos;
		mask |= CEP_SA_PR_QOS_CLASS;
	} else if (src->sa_family == AF_IB) {
		uint32_t fi = be32toh(((const struct sockaddr_ib *)(const void *)src)->sib_flowinfo);

		q->traffic_class = (uint8_t)(fi >> 20);
		mask |= CEP_SA_PR_TCLASS;
	} else {
		uint32_t fi = be32toh(((const struct sockaddr_in6 *)(const void *)src)->sin6_flowinfo);

		q->traffic_class = (uint8_t)(fi >> 20);
		mask |= CEP_SA_PR_TCLASS;
	}
	return mask;
}

/* The kernel's ucma_set_ib_path + rdma_set_ib_path: the option's checks,
 * then the id must be in ADDR_RESOLVED (else EINVAL); the path becomes the
 * route (one path) and ROUTE_RESOLVED is queued. */
int rcm_ib_set_path(struct rcm_id *r, const void *optval, size_t optlen)
{
	struct cep_sa_path sp;
	int ret = rcm_ib_path_option(optval, optlen, &sp);

	if (ret)
		return rcm_err(-ret);
	pthread_mutex_lock(&r->mtx);
	if (r->state != RCM_ADDR_RESOLVED) {
		ret = EINVAL;
		goto out;
	}
	ret = rcm_route_resolved(r, &sp);
out:
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(ret) : rcm_complete(r);
}
