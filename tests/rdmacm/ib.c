/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, InfiniBand pieces without an HCA (src/rdmacm/ib.c):
 * - RDMA_OPTION_IB_PATH's checks as the kernel's ucma_set_ib_path (optlen
 *   a non-zero multiple of struct ibv_path_data, the first entry flagged
 *   exactly GMP|PRIMARY|BIDIRECTIONAL used) and rdma_set_ib_path (the id
 *   in ADDR_RESOLVED, else EINVAL; ROUTE_RESOLVED follows), the route's
 *   path record and the REQ filled from it (cm_format_req's fields);
 * - the IPoIB neighbour's 20-byte hardware address (QPN bytes 1-3, GID
 *   4-19) and a netlink RTM_NEWNEIGH dump built here, parsed;
 * - an IPoIB interface's device, port and P_Key from a fake sysfs
 *   (CEP_RDMACM_SYSROOT);
 * - AF_IB addresses, and the port space an AF_IB bind takes (the kernel's
 *   cma_select_ib_ps);
 * and (test-rdmacm-ib resolve) the layer on an InfiniBand port: a stand-in
 * device whose port is InfiniBand, its GID table cached, an IPoIB
 * interface in a fake sysfs, the neighbour table and the SA behind the
 * layer's seams (rcm_ib_sys; the SA a libcep client over a fake backend
 * as tests/sa uses): rdma_bind_addr finds the port by the interface's GID;
 * rdma_resolve_addr takes the P_Key from the interface and the peer's GID
 * from its neighbour, triggering resolution and retrying until the
 * timeout (ADDR_ERROR -ETIMEDOUT); rdma_resolve_route asks the SA as the
 * kernel's cma_query_ib_route (its component mask and fields), ROUTE_ERROR
 * on an SA error, and the REQ's CM address uses LIDs, no GRH. AF_IB on
 * that port, as the kernel's cma: rdma_create_id takes RDMA_PS_IB (an RC
 * space); rdma_bind_addr finds the port by sib_addr in its GID table and
 * binds in the space cma_select_ib_ps names, the service ID then exact
 * (cma_bind_port: prefix | port, mask all ones), a space the id may not
 * use EPROTONOSUPPORT; rdma_resolve_addr to an AF_IB destination takes
 * the GID from it, asks no neighbour, queues ADDR_RESOLVED at once, the
 * source the port sharing the GID's subnet prefix (cma_resolve_ib_dev),
 * the P_Key sib_pkey (0xffff when 0), a source of another family EINVAL;
 * the SA query's service ID is the destination's sib_sid; rdma_getaddrinfo
 * with AF_IB hints and rdma_create_ep in RDMA_PS_IB and with given paths;
 * the port's P_Key table (INIT's P_Key index, a P_Key the port lacks);
 * multicast through the SA (MCMemberRecords of a fake SA) and IPoIB's port
 * space, whose Q_Key is the broadcast group's.
 * The layer's objects are linked in. Usage: test-rdmacm-ib [resolve].
 */
#include <arpa/inet.h>
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <infiniband/ib.h>

#include "../common/check.h"
#include "../common/fake_sa.h"
#include "sa/sa_backend.h"
#include "ib.h"
#include "rdmacm.h"
#include "service/proto.h"
#include "service/remote.h"
#include "standin_dev.h"

static struct cep_sa_path sample_path(void)
{
	struct cep_sa_path p;

	memset(&p, 0, sizeof(p));
	inet_pton(AF_INET6, "fe80::2:c903:0:10", p.sgid);
	inet_pton(AF_INET6, "fe80::2:c903:0:20", p.dgid);
	p.slid = 3;
	p.dlid = 4;
	p.flow_label = 0x12345;
	p.hop_limit = 0;
	p.traffic_class = 0x20;
	p.reversible = 1;
	p.numb_path = 1;
	p.pkey = 0x8001;
	p.sl = 5;
	p.mtu_selector = 2;
	p.mtu = 4;
	p.rate_selector = 2;
	p.rate = 7;
	p.packet_life_time_selector = 2;
	p.packet_life_time = 14;
	return p;
}

static void put_path(struct ibv_path_data *d, uint32_t flags, const struct cep_sa_path *p)
{
	memset(d, 0, sizeof(*d));
	d->flags = flags;
	CHECK_EQ(cep_sa_path_encode(p, (uint8_t *)&d->path), 0);
}

#define BIDI_PRIMARY (IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL)

static void path_option(void)
{
	struct cep_sa_path want = sample_path(), other = sample_path(), got;
	struct ibv_path_data d[3];

	other.dlid = 9;
	put_path(&d[0], IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_OUTBOUND, &other);
	put_path(&d[1], BIDI_PRIMARY, &want);
	put_path(&d[2], BIDI_PRIMARY, &other);
	/* the first exactly-flagged entry wins; others are skipped */
	CHECK_EQ(rcm_ib_path_option(d, sizeof(d), &got), 0);
	CHECK_EQ(got.dlid, 4);
	CHECK_EQ(got.pkey, 0x8001);
	CHECK_EQ(got.packet_life_time, 14);
	CHECK(!memcmp(got.dgid, want.dgid, 16));
	/* none flagged GMP|PRIMARY|BIDIRECTIONAL (ALTERNATE, or one bit more) */
	CHECK_EQ(rcm_ib_path_option(d, sizeof(d[0]), &got), -EINVAL);
	put_path(&d[1], BIDI_PRIMARY | IBV_PATH_FLAG_INBOUND, &want);
	CHECK_EQ(rcm_ib_path_option(d, 2 * sizeof(d[0]), &got), -EINVAL);
	put_path(&d[1], IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_ALTERNATE | IBV_PATH_FLAG_BIDIRECTIONAL,
		 &want);
	CHECK_EQ(rcm_ib_path_option(d, 2 * sizeof(d[0]), &got), -EINVAL);
	/* lengths: 0, not a multiple of the entry */
	put_path(&d[0], BIDI_PRIMARY, &want);
	CHECK_EQ(rcm_ib_path_option(d, 0, &got), -EINVAL);
	CHECK_EQ(rcm_ib_path_option(d, sizeof(d[0]) - 1, &got), -EINVAL);
	CHECK_EQ(rcm_ib_path_option(d, sizeof(d[0]) + 8, &got), -EINVAL);
	CHECK_EQ(rcm_ib_path_option(d, sizeof(d[0]), &got), 0);
}

/* rdma_set_option on an id: state checks, the route, the event, the REQ */
static void set_path(void)
{
	struct cep_sa_path want = sample_path();
	struct ibv_path_data d;
	struct rcm_channel *ch = rcm_channel_new();
	struct rdma_cm_event *ev;
	struct cep_cm_conn_param cp;
	struct cep_mad_addr to;
	struct rcm_id *r;
	const struct ibv_sa_path_rec *pr;

	CHECK(ch != NULL);
	r = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	CHECK(r != NULL);
	put_path(&d, BIDI_PRIMARY, &want);
	errno = 0;
	CHECK_EQ(rdma_set_option(&r->id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &d, sizeof(d)), -1);
	CHECK_EQ(errno, EINVAL); /* idle: rdma_set_ib_path wants ADDR_RESOLVED */
	errno = 0;
	CHECK_EQ(rdma_set_option(&r->id, RDMA_OPTION_IB, 7, &d, sizeof(d)), -1);
	CHECK_EQ(errno, ENOSYS);
	/* the state rdma_resolve_addr leaves (no device here) */
	pthread_mutex_lock(&r->mtx);
	r->state = RCM_ADDR_RESOLVED;
	pthread_mutex_unlock(&r->mtx);
	errno = 0;
	CHECK_EQ(rdma_set_option(&r->id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &d, 3), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(rdma_set_option(&r->id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &d, sizeof(d)), 0);
	CHECK_EQ(rdma_get_cm_event(&ch->ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK_EQ(ev->status, 0);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	CHECK_EQ(r->id.route.num_paths, 1);
	pr = r->id.route.path_rec;
	CHECK(pr != NULL);
	CHECK_EQ(be16toh(pr->slid), 3);
	CHECK_EQ(be16toh(pr->dlid), 4);
	CHECK_EQ(be16toh(pr->pkey), 0x8001);
	CHECK_EQ(be32toh(pr->flow_label), 0x12345);
	CHECK_EQ(pr->sl, 5);
	CHECK_EQ(pr->mtu, 4);
	CHECK_EQ(pr->rate, 7);
	CHECK_EQ(pr->packet_life_time, 14);
	CHECK(!memcmp(pr->sgid.raw, want.sgid, 16));
	/* a second time: the id is no longer in ADDR_RESOLVED */
	errno = 0;
	CHECK_EQ(rdma_set_option(&r->id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &d, sizeof(d)), -1);
	CHECK_EQ(errno, EINVAL);

	/* the REQ from that route, as cm_format_req: ACK timeout from the
	 * device's ACK delay (16) and 2 x the life time (cep_qp_ack_timeout) */
	memset(&cp, 0, sizeof(cp));
	memset(&to, 0, sizeof(to));
	cp.size = sizeof(cp);
	CHECK_EQ(rcm_ib_conn_from_path(pr, 16, 0, &cp, &to), 0);
	CHECK_EQ(cp.primary.local_lid, 3);
	CHECK_EQ(cp.primary.remote_lid, 4);
	CHECK_EQ(cp.primary.sl, 5);
	CHECK_EQ(cp.primary.packet_rate, 7);
	CHECK_EQ(cp.primary.flow_label, 0x12345);
	CHECK_EQ(cp.primary.traffic_class, 0x20);
	CHECK_EQ(cp.primary.subnet_local, 1);
	CHECK_EQ(cp.pkey, 0x8001);
	CHECK_EQ(cp.path_mtu, 4);
	CHECK_EQ(cp.packet_life_time, 14);
	/* kernel cm_ack_timeout(16, 14): 2 x life = 15 is within one of the
	 * ACK delay 16, so 16 + 1 */
	CHECK_EQ(cp.primary.local_ack_timeout, 17);
	CHECK_EQ(to.lid, 4);
	CHECK_EQ(to.sl, 5);
	CHECK_EQ(to.grh_present, 0); /* subnet-local InfiniBand: no GRH */
	CHECK_EQ(rcm_ib_conn_from_path(pr, 16, 1, &cp, &to), 0);
	CHECK_EQ(to.grh_present, 1); /* RoCE: always */
	CHECK(!memcmp(to.gid, want.dgid, 16));
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	rcm_channel_free(ch);
}

static void hwaddr(void)
{
	uint8_t hw[20] = { 0x00, 0x00, 0x04, 0x48, 0xfe, 0x80, 0, 0, 0, 0, 0, 0,
			   0x00, 0x02, 0xc9, 0x03, 0x00, 0x01, 0x02, 0x03 };
	uint8_t gid[16], want[16];
	uint32_t qpn = 0;

	CHECK_EQ(rcm_ib_hwaddr(hw, sizeof(hw), &qpn, gid), 0);
	CHECK_EQ(qpn, 0x448);
	inet_pton(AF_INET6, "fe80::2:c903:1:203", want);
	CHECK(!memcmp(gid, want, 16));
	CHECK_EQ(rcm_ib_hwaddr(hw, 6, &qpn, gid), -EINVAL); /* Ethernet's length */
}

/* Append one RTM_NEWNEIGH to @buf at @off; returns the new offset. */
static size_t add_neigh(uint8_t *buf, size_t off, int ifindex, const char *ip, uint16_t state,
			const uint8_t *ll, size_t ll_len)
{
	struct nlmsghdr *nh = (struct nlmsghdr *)(void *)(buf + off);
	struct ndmsg *nd = NLMSG_DATA(nh);
	struct rtattr *rta;
	size_t len = NLMSG_LENGTH(sizeof(*nd));

	memset(nh, 0, NLMSG_SPACE(sizeof(*nd)) + 64);
	nh->nlmsg_type = RTM_NEWNEIGH;
	nd->ndm_family = AF_INET;
	nd->ndm_ifindex = ifindex;
	nd->ndm_state = state;
	rta = (struct rtattr *)(void *)((uint8_t *)nh + NLMSG_ALIGN(len));
	rta->rta_type = NDA_DST;
	rta->rta_len = RTA_LENGTH(4);
	inet_pton(AF_INET, ip, RTA_DATA(rta));
	len = NLMSG_ALIGN(len) + RTA_ALIGN(rta->rta_len);
	if (ll) {
		rta = (struct rtattr *)(void *)((uint8_t *)nh + len);
		rta->rta_type = NDA_LLADDR;
		rta->rta_len = (unsigned short)RTA_LENGTH(ll_len);
		memcpy(RTA_DATA(rta), ll, ll_len);
		len += RTA_ALIGN(rta->rta_len);
	}
	nh->nlmsg_len = (uint32_t)len;
	return off + NLMSG_ALIGN(len);
}

static void neigh(void)
{
	static uint8_t buf[4096];
	uint8_t ll[20], hw[20];
	struct sockaddr_in dst = { .sin_family = AF_INET };
	struct nlmsghdr *done;
	size_t off = 0;

	for (int i = 0; i < 20; i++)
		ll[i] = (uint8_t)(0xa0 + i);
	inet_pton(AF_INET, "10.9.0.2", &dst.sin_addr);
	off = add_neigh(buf, off, 4, "10.9.0.2", NUD_REACHABLE, ll, 20); /* other if */
	off = add_neigh(buf, off, 5, "10.9.0.3", NUD_REACHABLE, ll, 20); /* other ip */
	CHECK_EQ(rcm_ib_neigh_parse(buf, off, 5, (struct sockaddr *)&dst, hw), -ENOENT);
	off = add_neigh(buf, off, 5, "10.9.0.2", NUD_STALE, ll, 20);
	CHECK_EQ(rcm_ib_neigh_parse(buf, off, 5, (struct sockaddr *)&dst, hw), 0);
	CHECK(!memcmp(hw, ll, 20));
	done = (struct nlmsghdr *)(void *)(buf + off);
	memset(done, 0, NLMSG_SPACE(4));
	done->nlmsg_type = NLMSG_DONE;
	done->nlmsg_len = NLMSG_LENGTH(4);
	CHECK_EQ(rcm_ib_neigh_parse(buf, off + NLMSG_SPACE(4), 6, (struct sockaddr *)&dst, hw), 1);
	off = add_neigh(buf, 0, 5, "10.9.0.2", NUD_INCOMPLETE, NULL, 0);
	CHECK_EQ(rcm_ib_neigh_parse(buf, off, 5, (struct sockaddr *)&dst, hw), -EAGAIN);
	off = add_neigh(buf, 0, 5, "10.9.0.2", NUD_REACHABLE, ll, 6); /* not IPoIB */
	CHECK_EQ(rcm_ib_neigh_parse(buf, off, 5, (struct sockaddr *)&dst, hw), -EAGAIN);
	/* the kernel's own table answers (nothing resolved on lo) */
	CHECK_EQ(rcm_ib_neigh(1, (struct sockaddr *)&dst, hw), -ENOENT);
}

static void put_file(const char *root, const char *rel, const char *text)
{
	char path[1024], cmd[1200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	CHECK_EQ(system(cmd), 0);
	f = fopen(path, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

static void netdev(void)
{
	char root[] = "/tmp/cep-rdmacm-ib-XXXXXX", cmd[256];
	struct rcm_ib_netdev nd;

	CHECK(mkdtemp(root) != NULL);
	put_file(root, "sys/class/net/ib0/type", "32\n");
	put_file(root, "sys/class/net/ib0/dev_port", "1\n");
	put_file(root, "sys/class/net/ib0/pkey", "0x8001\n");
	put_file(root, "sys/class/net/ib0/device/infiniband/mlx5_0/ports/x", "");
	put_file(root, "sys/class/net/ib1/type", "32\n");
	put_file(root, "sys/class/net/ib1/dev_id", "0x0\n"); /* an older kernel */
	put_file(root, "sys/class/net/ib1/pkey", "0xffff\n");
	put_file(root, "sys/class/net/ib1/device/infiniband/qib0/x", "");
	put_file(root, "sys/class/net/eth0/type", "1\n");
	put_file(root, "sys/class/net/eth0/device/infiniband/rxe0/x", "");
	put_file(root, "sys/class/net/ib2/type", "32\n");
	put_file(root, "sys/class/net/ib2/dev_port", "0\n");
	put_file(root, "sys/class/net/ib2/pkey", "zz\n");
	put_file(root, "sys/class/net/ib2/device/infiniband/mlx4_0/x", "");
	setenv("CEP_RDMACM_SYSROOT", root, 1);
	CHECK_EQ(rcm_ib_netdev("ib0", &nd), 0);
	CHECK(!strcmp(nd.dev, "mlx5_0"));
	CHECK_EQ(nd.port_num, 2);
	CHECK_EQ(nd.pkey, 0x8001);
	CHECK_EQ(rcm_ib_netdev("ib1", &nd), 0);
	CHECK(!strcmp(nd.dev, "qib0"));
	CHECK_EQ(nd.port_num, 1);
	CHECK_EQ(nd.pkey, 0xffff);
	CHECK_EQ(rcm_ib_netdev("eth0", &nd), -ENODEV);  /* not IPoIB */
	CHECK_EQ(rcm_ib_netdev("ib9", &nd), -ENODEV);   /* no such interface */
	CHECK_EQ(rcm_ib_netdev("../ib0", &nd), -ENODEV);
	CHECK_EQ(rcm_ib_netdev("ib2", &nd), -EINVAL);   /* a P_Key that does not parse */
	unsetenv("CEP_RDMACM_SYSROOT");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK_EQ(system(cmd), 0);
}

static void af_ib(void)
{
	struct sockaddr_ib sib;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	uint8_t gid[16], want[16];
	uint64_t sid;
	uint16_t pkey;

	memset(&sib, 0, sizeof(sib));
	sib.sib_family = AF_IB;
	sib.sib_pkey = htobe16(0x8002);
	inet_pton(AF_INET6, "fe80::2:c903:0:20", want);
	memcpy(sib.sib_addr.sib_raw, want, 16);
	sib.sib_sid = htobe64(0x0000000001061d2full);
	CHECK_EQ(rcm_ib_sockaddr((struct sockaddr *)&sib, gid, &sid, &pkey), 0);
	CHECK(!memcmp(gid, want, 16));
	CHECK_EQ(sid, 0x0000000001061d2full);
	CHECK_EQ(pkey, 0x8002);
	CHECK_EQ(rcm_ib_sockaddr((struct sockaddr *)&sin, gid, &sid, &pkey), -EAFNOSUPPORT);

	/* the bind's port space, as the kernel's cma_select_ib_ps */
	struct { int id_ps; uint64_t sid, mask; int ps; uint64_t sid_out, mask_out; } c[] = {
		/* an IB id takes the IB space, or TCP's, or UDP's */
		{ RDMA_PS_IB, 0x13f1234, ~0ull, RDMA_PS_IB, 0x13f1234, ~0ull },
		{ RDMA_PS_IB, 0x1061234, ~0ull, RDMA_PS_TCP, 0x1061234, ~0ull },
		{ RDMA_PS_IB, 0x1111234, ~0ull, RDMA_PS_UDP, 0x1111234, ~0ull },
		/* a TCP id not the IB space; nobody an unknown prefix */
		{ RDMA_PS_TCP, 0x13f1234, ~0ull, 0, 0x13f1234, ~0ull },
		{ RDMA_PS_TCP, 0x5551234, ~0ull, 0, 0x5551234, ~0ull },
		{ RDMA_PS_UDP, 0x1061234, ~0ull, 0, 0x1061234, ~0ull },
		/* no prefix under the mask: the id's space; the port under the
		 * mask only, the mask widened by the space's bits */
		{ RDMA_PS_UDP, 0xabcd1234, 0xffff, RDMA_PS_UDP, 0x1111234, 0xffffffffffffffffull },
		{ RDMA_PS_IB, 0x1234, 0, RDMA_PS_IB, 0x13f0000, 0xffffffffffff0000ull },
		{ RDMA_PS_TCP, 0x10612ff, 0xffffffffffff00f0ull, RDMA_PS_TCP, 0x10600f0,
		  0xffffffffffff00f0ull },
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		sib.sib_sid = htobe64(c[i].sid);
		sib.sib_sid_mask = htobe64(c[i].mask);
		CHECK_EQ(rcm_ib_select_ps(c[i].id_ps, &sib), c[i].ps);
		CHECK_EQ(be64toh(sib.sib_sid), c[i].sid_out);
		CHECK_EQ(be64toh(sib.sib_sid_mask), c[i].mask_out);
	}
}

/* ---- the layer on an InfiniBand port (stand-ins, seams) ---------------- */

static const char *GID_A = "fe80::2:c903:0:10", *GID_B = "fe80::2:c903:0:20";

/* The fake neighbour table: answers -ENOENT @misses times, then @hw
 * (or -EAGAIN forever when @never). */
static struct {
	pthread_mutex_t lock;
	int misses, never, asked, kicks, ifindex;
	uint8_t hw[20];
	struct sockaddr_storage kick_src, kick_dst;
} nb = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int fake_ifname_of(const struct sockaddr *a, char name[IF_NAMESIZE], int *ifindex)
{
	const struct sockaddr_in *in = (const void *)a;

	if (a->sa_family != AF_INET || in->sin_addr.s_addr != htonl(0x0a000001))
		return -EADDRNOTAVAIL;
	strcpy(name, "ib0");
	*ifindex = 5;
	return 0;
}

static int fake_neigh(int ifindex, const struct sockaddr *dst, uint8_t hw[20])
{
	int ret;

	(void)dst;
	pthread_mutex_lock(&nb.lock);
	nb.asked++;
	nb.ifindex = ifindex;
	if (nb.never) {
		ret = -EAGAIN;
	} else if (nb.misses > 0) {
		nb.misses--;
		ret = -ENOENT;
	} else {
		memcpy(hw, nb.hw, 20);
		ret = 0;
	}
	pthread_mutex_unlock(&nb.lock);
	return ret;
}

static int fake_kick(const struct sockaddr *src, const struct sockaddr *dst)
{
	pthread_mutex_lock(&nb.lock);
	nb.kicks++;
	memcpy(&nb.kick_src, src, sizeof(struct sockaddr_in));
	memcpy(&nb.kick_dst, dst, sizeof(struct sockaddr_in));
	pthread_mutex_unlock(&nb.lock);
	return 0;
}

/* A fake SA behind a real libcep SA client: answers each PathRecord Get
 * with @answer (or the error @status), keeping the query. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint8_t q[8][CEP_SA_MAD_SIZE];
	unsigned head, tail, sends;
	uint16_t status;
	struct cep_sa_mad_hdr last;
	struct cep_sa_path last_path, answer;
	/* MCMemberRecords: Gets answer the broadcast group (none with
	 * no_bcast), Sets the joined group with MLID 0xc00a (an SA-assigned
	 * MGID for a zero one), or mc_status */
	unsigned mc_gets, mc_sets, mc_dels;
	int no_bcast;
	uint16_t mc_status;
	struct cep_sa_mad_hdr mc_last;
	struct cep_sa_mcmember mc_get, mc_set, mc_del;
} fsa = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

#define ASSIGNED_MGID "ff12:a01b:8001::abcd"

/* Under fsa.lock: the answer to an MCMemberRecord request @h (changed to
 * the answer's header) asking @m. */
static void fsa_mcmember(struct cep_sa_mad_hdr *h, const struct cep_sa_mcmember *m,
			 struct cep_sa_mcmember *a)
{
	static const uint8_t zero[16];

	fsa.mc_last = *h;
	*a = *m;
	h->status = 0;
	if (h->method == CEP_SA_METHOD_GET) {
		fsa.mc_gets++;
		fsa.mc_get = *m;
		if (fsa.no_bcast)
			h->status = 0x0300; /* ERR_NO_RECORDS */
		/* the broadcast group's parameters */
		a->qkey = 0xb1b;
		a->mlid = 0xc000;
		a->mtu_selector = a->rate_selector = 2;
		a->mtu = 4;
		a->rate = 3;
		a->sl = 3;
		a->flow_label = 0x12345;
		a->traffic_class = 0x40;
		a->hop_limit = 2;
		a->pkey = 0x8001;
		a->scope = 2;
	} else if (h->method == CEP_SA_METHOD_SET) {
		fsa.mc_sets++;
		fsa.mc_set = *m;
		h->status = fsa.mc_status;
		a->mlid = 0xc00a;
		a->hop_limit = 2;
		a->mtu_selector = a->rate_selector = 2;
		a->mtu = 4;
		a->rate = 3;
		if (!memcmp(a->mgid, zero, 16))
			inet_pton(AF_INET6, ASSIGNED_MGID, a->mgid);
	} else {
		fsa.mc_dels++;
		fsa.mc_del = *m;
		h->method = CEP_SA_METHOD_DELETE_RESP;
		return;
	}
	h->method = CEP_SA_METHOD_GET_RESP;
}

static int fsa_send(void *ctx, const uint8_t *mad, size_t len, uint16_t dlid, uint8_t sl)
{
	struct cep_sa_mad_hdr h;
	uint8_t rec[CEP_SA_PATH_REC_SIZE];

	(void)ctx, (void)dlid, (void)sl;
	if (len != CEP_SA_MAD_SIZE || cep_sa_mad_decode(mad, len, &h))
		return -EINVAL;
	pthread_mutex_lock(&fsa.lock);
	fsa.sends++;
	if (h.attr_id == CEP_SA_ATTR_MCMEMBER_REC) {
		struct cep_sa_mcmember m, a;
		uint8_t mrec[CEP_SA_MCM_REC_SIZE];

		cep_sa_mcmember_decode(mad + CEP_SA_HDR_SIZE, &m);
		fsa_mcmember(&h, &m, &a);
		h.comp_mask = 0;
		CHECK_EQ(cep_sa_mcmember_encode(&a, mrec), 0);
		if (fsa.tail - fsa.head < 8) {
			cep_sa_mad_encode(fsa.q[fsa.tail++ % 8], &h, mrec, sizeof(mrec));
			pthread_cond_broadcast(&fsa.cond);
		}
		pthread_mutex_unlock(&fsa.lock);
		return 0;
	}
	fsa.last = h;
	cep_sa_path_decode(mad + CEP_SA_HDR_SIZE, &fsa.last_path);
	h.method = CEP_SA_METHOD_GET_RESP;
	h.comp_mask = 0;
	h.status = fsa.status;
	CHECK_EQ(cep_sa_path_encode(&fsa.answer, rec), 0);
	if (fsa.tail - fsa.head < 8) {
		cep_sa_mad_encode(fsa.q[fsa.tail++ % 8], &h, rec, sizeof(rec));
		pthread_cond_broadcast(&fsa.cond);
	}
	pthread_mutex_unlock(&fsa.lock);
	return 0;
}

static int fsa_recv(void *ctx, uint8_t *mad, size_t len, int timeout_ms)
{
	(void)ctx;
	return fake_sa_take(&fsa.lock, &fsa.cond, &fsa.head, &fsa.tail, fsa.q, 8, mad, len,
			    timeout_ms);
}

static int fsa_port(void *ctx, struct cep_sa_port *out)
{
	(void)ctx;
	memset(out, 0, sizeof(*out));
	out->lid = 3;
	out->sm_lid = 1;
	out->state = 4;
	out->port_num = 1;
	out->pkey = 0xffff;
	inet_pton(AF_INET6, GID_A, out->gid);
	return 0;
}

static const struct sa_backend_ops fsa_ops = { .send = fsa_send, .recv = fsa_recv,
					       .port = fsa_port };
static char sa_dev[64];
static uint8_t sa_port_num;

static int fake_sa_get(const char *dev, uint8_t port_num, uint32_t timeout_ms,
		       struct cep_sa **out)
{
	/* 2 s per attempt: a loaded machine (sanitizers) needs it */
	struct cep_sa_attr a = { .size = sizeof(a), .timeout_ms = 2000, .attempts = 2,
				 .flags = CEP_SA_ATTR_NO_CACHE };

	(void)timeout_ms;
	snprintf(sa_dev, sizeof(sa_dev), "%s", dev);
	sa_port_num = port_num;
	return sa_create(&fsa_ops, NULL, &a, out);
}

/* One event off @ch: its type and status; acked. */
static enum rdma_cm_event_type next_event(struct rcm_channel *ch, int *status)
{
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type t;

	CHECK_EQ(rdma_get_cm_event(&ch->ch, &ev), 0);
	t = ev->event;
	*status = ev->status;
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	return t;
}

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sib_set(struct sockaddr_ib *s, const uint8_t gid[16], uint16_t pkey, uint64_t sid,
		    uint64_t mask)
{
	memset(s, 0, sizeof(*s));
	s->sib_family = AF_IB;
	s->sib_pkey = htobe16(pkey);
	memcpy(s->sib_addr.sib_raw, gid, 16);
	s->sib_sid = htobe64(sid);
	s->sib_sid_mask = htobe64(mask);
}

#define SID_IB  0x00000000013f0000ull
#define SID_TCP 0x0000000001060000ull
#define SID_UDP 0x0000000001110000ull

/* The synchronous endpoint API with AF_IB, on the stand-in InfiniBand port
 * ports[0] (GID @ga), the peer @gb: rdma_getaddrinfo's AF_IB conversion
 * (librdmacm's ucma_convert_in6), rdma_create_ep in RDMA_PS_IB, and with
 * paths given in ai_route (RDMA_OPTION_IB_PATH, no SA query). */
static void af_ib_endpoints(struct rcm_port *ports, const uint8_t ga[16], const uint8_t gb[16])
{
	struct rdma_addrinfo hints, *res, *pres;
	struct cep_sa_path given = sample_path();
	struct ibv_path_data d[2];
	const struct sockaddr_ib *s;
	struct rdma_cm_id *id;
	char gbs[INET6_ADDRSTRLEN], gas[INET6_ADDRSTRLEN];
	unsigned sends;

	inet_ntop(AF_INET6, gb, gbs, sizeof(gbs));
	inet_ntop(AF_INET6, ga, gas, sizeof(gas));
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_FAMILY | RAI_NUMERICHOST;
	hints.ai_family = AF_IB;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK_EQ(rdma_getaddrinfo(gbs, "7471", &hints, &res), 0);
	CHECK_EQ(res->ai_family, AF_IB);
	CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
	CHECK_EQ(res->ai_qp_type, IBV_QPT_RC); /* TCP -> a stream -> RC */
	CHECK_EQ(res->ai_dst_len, sizeof(struct sockaddr_ib));
	CHECK_EQ(res->ai_src_len, 0);
	s = (const void *)res->ai_dst_addr;
	CHECK_EQ(s->sib_family, AF_IB);
	CHECK(!memcmp(s->sib_addr.sib_raw, gb, 16));
	CHECK_EQ(be16toh(s->sib_pkey), 0xffff);
	CHECK_EQ(be64toh(s->sib_sid), SID_TCP | 7471);
	CHECK_EQ(be64toh(s->sib_sid_mask), ~0ull);
	/* passive, no port: the prefix's mask only; RDMA_PS_IB and a
	 * datagram QP type */
	hints.ai_flags = RAI_FAMILY | RAI_NUMERICHOST | RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_IB;
	hints.ai_qp_type = IBV_QPT_UD;
	CHECK_EQ(rdma_getaddrinfo(gas, NULL, &hints, &pres), 0);
	CHECK_EQ(pres->ai_flags, RAI_PASSIVE);
	CHECK_EQ(pres->ai_family, AF_IB);
	CHECK_EQ(pres->ai_dst_len, 0);
	s = (const void *)pres->ai_src_addr;
	CHECK_EQ(pres->ai_src_len, sizeof(*s));
	CHECK(!memcmp(s->sib_addr.sib_raw, ga, 16));
	CHECK_EQ(be64toh(s->sib_sid), SID_IB);
	CHECK_EQ(be64toh(s->sib_sid_mask), RDMA_IB_IP_PS_MASK);
	rdma_freeaddrinfo(pres);
	/* an IPv4 literal is no GID (librdmacm would read it as IPv6) */
	hints.ai_flags = RAI_FAMILY | RAI_NUMERICHOST;
	CHECK(rdma_getaddrinfo("10.0.0.2", "7471", &hints, &pres) != 0);
	/* AF_IB without RAI_FAMILY: IP addresses, as librdmacm */
	hints.ai_flags = RAI_NUMERICHOST;
	CHECK_EQ(rdma_getaddrinfo("10.0.0.2", "7471", &hints, &pres), 0);
	CHECK_EQ(pres->ai_family, AF_INET);
	CHECK_EQ(pres->ai_dst_addr->sa_family, AF_INET);
	rdma_freeaddrinfo(pres);

	/* rdma_create_ep to it with a given path: ROUTE_RESOLVED from that
	 * path, the SA not asked */
	put_path(&d[0], IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_ALTERNATE | IBV_PATH_FLAG_BIDIRECTIONAL,
		 &given);
	given.dlid = 6;
	memcpy(given.dgid, gb, 16);
	put_path(&d[1], BIDI_PRIMARY, &given);
	res->ai_route = malloc(sizeof(d));
	CHECK(res->ai_route != NULL);
	memcpy(res->ai_route, d, sizeof(d));
	res->ai_route_len = sizeof(d);
	sends = fsa.sends;
	CHECK_EQ(rdma_create_ep(&id, res, NULL, NULL), 0);
	CHECK_EQ(fsa.sends, sends);
	CHECK_EQ(rcm_id_of(id)->state, RCM_ROUTE_RESOLVED);
	CHECK(rcm_id_of(id)->route_given);
	CHECK(rcm_id_of(id)->port == &ports[0]);
	CHECK_EQ(id->ps, RDMA_PS_TCP);
	CHECK_EQ(id->route.num_paths, 1);
	CHECK_EQ(be16toh(id->route.path_rec->dlid), 6);
	CHECK_EQ(be16toh(id->route.path_rec->pkey), 0x8001);
	CHECK(!memcmp(id->route.path_rec->dgid.raw, gb, 16));
	rdma_destroy_ep(id);
	/* a given route the option refuses (no primary entry): EINVAL */
	res->ai_route_len = sizeof(d[0]);
	errno = 0;
	id = NULL;
	CHECK_EQ(rdma_create_ep(&id, res, NULL, NULL), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK(id == NULL);
	CHECK_EQ(fsa.sends, sends);

	/* RDMA_PS_IB without paths: the SA's route, for the destination's
	 * service ID; a UD QP type gives a UD id */
	free(res->ai_route);
	res->ai_route = NULL;
	res->ai_route_len = 0;
	res->ai_port_space = RDMA_PS_IB;
	res->ai_qp_type = IBV_QPT_UD;
	fsa.status = 0;
	CHECK_EQ(rdma_create_ep(&id, res, NULL, NULL), 0);
	CHECK_EQ(fsa.sends, sends + 1);
	CHECK_EQ(fsa.last_path.service_id, SID_TCP | 7471);
	CHECK_EQ(id->ps, RDMA_PS_IB);
	CHECK_EQ(id->qp_type, IBV_QPT_UD);
	CHECK_EQ(rcm_id_of(id)->state, RCM_ROUTE_RESOLVED);
	CHECK_EQ(be16toh(id->route.path_rec->dlid), 4); /* the SA's answer */
	rdma_destroy_ep(id);
	/* XRC: the id is made (the kernel's RDMA_PS_IB takes the QP type
	 * given); without a QP or a QP number its rdma_connect is EINVAL,
	 * as an RC id's (the connection itself: ib-listen-xrc-connect) */
	res->ai_qp_type = IBV_QPT_XRC_SEND;
	CHECK_EQ(rdma_create_ep(&id, res, NULL, NULL), 0);
	CHECK_EQ(id->qp_type, IBV_QPT_XRC_SEND);
	errno = 0;
	CHECK_EQ(rdma_connect(id, NULL), -1);
	CHECK_EQ(errno, EINVAL);
	rdma_destroy_ep(id);
	/* no QP type rdma_cm knows: EINVAL, nothing made (stricter) */
	res->ai_qp_type = IBV_QPT_RAW_PACKET;
	errno = 0;
	CHECK_EQ(rdma_create_ep(&id, res, NULL, NULL), -1);
	CHECK_EQ(errno, EINVAL);
	/* IPoIB's space over AF_IB: no space of the kernel's cma_select_ib_ps
	 * takes it (EPROTONOSUPPORT) */
	res->ai_port_space = RDMA_PS_IPOIB;
	res->ai_qp_type = IBV_QPT_UD;
	errno = 0;
	CHECK_EQ(rdma_create_ep(&id, res, NULL, NULL), -1);
	CHECK_EQ(errno, EPROTONOSUPPORT);
	rdma_freeaddrinfo(res);
}

/* AF_IB on the stand-in InfiniBand port ports[0] (GID @ga), the peer @gb. */
static void af_ib_layer(struct rcm_channel *ch, struct rcm_port *ports, const uint8_t ga[16],
			const uint8_t gb[16])
{
	struct sockaddr_in in = { .sin_family = AF_INET };
	struct sockaddr_ib a, d;
	const struct sockaddr_ib *s;
	struct rdma_cm_id *id, *id2;
	struct rcm_id *r, *t;
	int status, asked;
	uint16_t pn;

	/* librdmacm's rdma_create_id: RDMA_PS_IB is RC, RDMA_PS_IPOIB UD; an
	 * AF_IB address has no IPoIB space (cma_select_ib_ps: bind and
	 * resolve EPROTONOSUPPORT), the id untouched */
	CHECK_EQ(rdma_create_id(&ch->ch, &id2, NULL, RDMA_PS_IPOIB), 0);
	CHECK_EQ(id2->qp_type, IBV_QPT_UD);
	sib_set(&a, ga, 0, 0, 0);
	errno = 0;
	CHECK_EQ(rdma_bind_addr(id2, (struct sockaddr *)&a), -1);
	CHECK_EQ(errno, EPROTONOSUPPORT);
	CHECK_EQ(rcm_id_of(id2)->state, RCM_IDLE);
	sib_set(&d, gb, 0, 0, 0);
	errno = 0;
	CHECK_EQ(rdma_resolve_addr(id2, NULL, (struct sockaddr *)&d, 2000), -1);
	CHECK_EQ(errno, EPROTONOSUPPORT);
	CHECK_EQ(rcm_id_of(id2)->state, RCM_IDLE);
	CHECK_EQ(rdma_destroy_id(id2), 0);
	/* a port space rdma_cm has not: the kernel's ucma_create_id refuses
	 * it EINVAL, and so librdmacm's rdma_create_id; nothing made */
	errno = 0;
	id2 = NULL;
	CHECK_EQ(rdma_create_id(&ch->ch, &id2, NULL, (enum rdma_port_space)0x0107), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK(id2 == NULL);
	CHECK_EQ(rdma_create_id(&ch->ch, &id, NULL, RDMA_PS_IB), 0);
	CHECK_EQ(id->ps, RDMA_PS_IB);
	CHECK_EQ(id->qp_type, IBV_QPT_RC);
	r = rcm_id_of(id);

	/* bind by GID, no service ID: the IB space, an ephemeral port */
	sib_set(&a, ga, 0x8001, 0, 0);
	CHECK_EQ(rdma_bind_addr(id, (struct sockaddr *)&a), 0);
	CHECK(r->port == &ports[0]);
	CHECK_EQ(id->port_num, 1);
	CHECK(!memcmp(id->route.addr.addr.ibaddr.sgid.raw, ga, 16));
	CHECK_EQ(ntohs(id->route.addr.addr.ibaddr.pkey), 0x8001);
	s = (const void *)&id->route.addr.src_addr;
	CHECK_EQ(s->sib_family, AF_IB);
	CHECK(!memcmp(s->sib_addr.sib_raw, ga, 16));
	pn = (uint16_t)be64toh(s->sib_sid);
	CHECK(pn >= RCM_PORT_LOW && pn <= RCM_PORT_HIGH);
	CHECK_EQ(be64toh(s->sib_sid), SID_IB | pn);
	CHECK_EQ(be64toh(s->sib_sid_mask), ~0ull);
	CHECK_EQ(ntohs(rdma_get_src_port(id)), pn);
	CHECK_EQ(rdma_destroy_id(id), 0);

	/* a TCP id, service ID TCP | 7000: that space and port; the P_Key
	 * 0xffff without sib_pkey */
	t = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	CHECK(t != NULL);
	sib_set(&a, ga, 0, SID_TCP | 7000, ~0ull);
	CHECK_EQ(rdma_bind_addr(&t->id, (struct sockaddr *)&a), 0);
	s = (const void *)&t->id.route.addr.src_addr;
	CHECK_EQ(be64toh(s->sib_sid), SID_TCP | 7000);
	CHECK_EQ(ntohs(rdma_get_src_port(&t->id)), 7000);
	CHECK_EQ(ntohs(t->id.route.addr.addr.ibaddr.pkey), 0xffff);
	/* the TCP space's port 7000 is now taken for IP binds too (one
	 * bind list per space and port, as the kernel's) */
	r = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	CHECK(r != NULL);
	in.sin_port = htons(7000);
	errno = 0;
	CHECK_EQ(rdma_bind_addr(&r->id, (struct sockaddr *)&in), -1);
	CHECK_EQ(errno, EADDRNOTAVAIL);
	/* the UDP space is not a TCP id's (cma_get_port: EPROTONOSUPPORT) */
	sib_set(&a, ga, 0, SID_UDP | 7001, ~0ull);
	errno = 0;
	CHECK_EQ(rdma_bind_addr(&r->id, (struct sockaddr *)&a), -1);
	CHECK_EQ(errno, EPROTONOSUPPORT);
	CHECK_EQ(r->state, RCM_IDLE);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	CHECK_EQ(rdma_destroy_id(&t->id), 0);

	/* rdma_resolve_addr to AF_IB, no source: GID_A's port (GID_B's
	 * subnet prefix), ADDR_RESOLVED at once, no neighbour asked */
	r = rcm_id_new(ch, NULL, RDMA_PS_IB, IBV_QPT_RC);
	CHECK(r != NULL);
	sib_set(&d, gb, 0x8001, SID_TCP | 7471, ~0ull);
	asked = nb.asked;
	CHECK_EQ(rdma_resolve_addr(&r->id, NULL, (struct sockaddr *)&d, 2000), 0);
	CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK_EQ(status, 0);
	CHECK_EQ(nb.asked, asked);
	CHECK_EQ(r->state, RCM_ADDR_RESOLVED);
	CHECK(r->port == &ports[0]);
	CHECK(!memcmp(r->id.route.addr.addr.ibaddr.sgid.raw, ga, 16));
	CHECK(!memcmp(r->id.route.addr.addr.ibaddr.dgid.raw, gb, 16));
	CHECK_EQ(ntohs(r->id.route.addr.addr.ibaddr.pkey), 0x8001);
	s = (const void *)&r->id.route.addr.src_addr;
	CHECK_EQ(s->sib_family, AF_IB);
	CHECK(!memcmp(s->sib_addr.sib_raw, ga, 16));
	CHECK_EQ(be64toh(s->sib_sid) & ~0xffffull, SID_IB);
	s = (const void *)&r->id.route.addr.dst_addr;
	CHECK_EQ(s->sib_family, AF_IB);
	CHECK_EQ(be64toh(s->sib_sid), SID_TCP | 7471);
	CHECK_EQ(ntohs(rdma_get_dst_port(&r->id)), 7471);
	/* its route: the SA query asks for the destination's sib_sid and
	 * the traffic class (cma_query_ib_route's AF_IB case) */
	fsa.status = 0;
	CHECK_EQ(rdma_resolve_route(&r->id, 2000), 0);
	CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK_EQ(fsa.last_path.service_id, SID_TCP | 7471);
	CHECK_EQ(fsa.last_path.pkey, 0x8001);
	CHECK(!memcmp(fsa.last_path.dgid, gb, 16));
	CHECK(fsa.last.comp_mask & CEP_SA_PR_TCLASS);
	CHECK(!(fsa.last.comp_mask & CEP_SA_PR_QOS_CLASS));
	CHECK_EQ(rdma_destroy_id(&r->id), 0);

	/* sib_pkey 0: the port's default P_Key; bound by GID first, the
	 * bound source stays */
	r = rcm_id_new(ch, NULL, RDMA_PS_IB, IBV_QPT_RC);
	sib_set(&a, ga, 0, SID_IB | 7100, ~0ull);
	CHECK_EQ(rdma_bind_addr(&r->id, (struct sockaddr *)&a), 0);
	d.sib_pkey = 0;
	CHECK_EQ(rdma_resolve_addr(&r->id, NULL, (struct sockaddr *)&d, 2000), 0);
	CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK_EQ(ntohs(r->id.route.addr.addr.ibaddr.pkey), 0xffff);
	CHECK_EQ(ntohs(rdma_get_src_port(&r->id)), 7100);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);

	/* a source of another family: EINVAL, the id untouched */
	r = rcm_id_new(ch, NULL, RDMA_PS_IB, IBV_QPT_RC);
	in.sin_port = 0;
	in.sin_addr.s_addr = htonl(0x0a000001);
	errno = 0;
	CHECK_EQ(rdma_resolve_addr(&r->id, (struct sockaddr *)&in, (struct sockaddr *)&d, 2000),
		 -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(r->state, RCM_IDLE);
	CHECK(r->port == NULL);
	/* nor an id bound to IPv4 (the kernel: cma_family != the destination's) */
	in.sin_addr.s_addr = 0;
	CHECK_EQ(rdma_bind_addr(&r->id, (struct sockaddr *)&in), 0);
	errno = 0;
	CHECK_EQ(rdma_resolve_addr(&r->id, NULL, (struct sockaddr *)&d, 2000), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(r->state, RCM_ADDR_BOUND);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);

	af_ib_endpoints(ports, ga, gb);
}

static uint16_t pkeys[4] = { 0xffff, 0x7fff, 0x8001, 0x0002 };

/* The port's P_Key table (the kernel's ib_find_cached_pkey): the index a
 * QP's INIT takes for the id's P_Key, a full member's entry first; an
 * AF_IB destination whose P_Key the port lacks: ENODEV (cma_resolve_ib_dev
 * finds no port), nothing changed. */
static void pkey_table(struct rcm_channel *ch, struct rcm_port *ports, const uint8_t gb[16])
{
	struct ibv_qp_attr qa;
	struct sockaddr_ib d;
	struct rcm_id *r;
	uint16_t ix;
	int mask, status;

	CHECK_EQ(rcm_pkey_index(&ports[0], 0x8001, &ix), 0);
	CHECK_EQ(ix, 2);
	CHECK_EQ(rcm_pkey_index(&ports[0], 0x0001, &ix), 0); /* the low 15 bits */
	CHECK_EQ(ix, 2);
	CHECK_EQ(rcm_pkey_index(&ports[0], 0x7fff, &ix), 0); /* the full member's */
	CHECK_EQ(ix, 0);
	CHECK_EQ(rcm_pkey_index(&ports[0], 0x8002, &ix), 0); /* limited only */
	CHECK_EQ(ix, 3);
	CHECK_EQ(rcm_pkey_index(&ports[0], 0x1234, &ix), -ENOENT);
	CHECK_EQ(rcm_pkey_index(&ports[1], 0x1234, &ix), 0); /* no table */
	CHECK_EQ(ix, 0);

	/* an RC and a UD id on P_Key 0x8001: INIT's index 2 */
	for (int ud = 0; ud < 2; ud++) {
		r = rcm_id_new(ch, NULL, ud ? RDMA_PS_UDP : RDMA_PS_IB, ud ? IBV_QPT_UD : IBV_QPT_RC);
		CHECK(r != NULL);
		sib_set(&d, gb, 0x8001, SID_TCP | 7471, ~0ull);
		CHECK_EQ(rdma_resolve_addr(&r->id, NULL, (struct sockaddr *)&d, 2000), 0);
		CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ADDR_RESOLVED);
		memset(&qa, 0, sizeof(qa));
		qa.qp_state = IBV_QPS_INIT;
		CHECK_EQ(rdma_init_qp_attr(&r->id, &qa, &mask), 0);
		CHECK(mask & IBV_QP_PKEY_INDEX);
		CHECK_EQ(qa.pkey_index, 2);
		CHECK_EQ(rdma_destroy_id(&r->id), 0);
	}
	/* a P_Key the port lacks */
	r = rcm_id_new(ch, NULL, RDMA_PS_IB, IBV_QPT_RC);
	sib_set(&d, gb, 0x1234, SID_TCP | 7471, ~0ull);
	errno = 0;
	CHECK_EQ(rdma_resolve_addr(&r->id, NULL, (struct sockaddr *)&d, 2000), -1);
	CHECK_EQ(errno, ENODEV);
	CHECK_EQ(r->state, RCM_IDLE);
	CHECK(r->port == NULL);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
}

/* One event off @ch, copied, acked. */
static struct rdma_cm_event take_event(struct rcm_channel *ch)
{
	struct rdma_cm_event *ev, copy;

	CHECK_EQ(rdma_get_cm_event(&ch->ch, &ev), 0);
	copy = *ev;
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	return copy;
}

static unsigned mc_count(const unsigned *c)
{
	unsigned n;

	pthread_mutex_lock(&fsa.lock);
	n = *c;
	pthread_mutex_unlock(&fsa.lock);
	return n;
}

/* cepd's PATH_QUERY as the drop-in sends it (rcm_ib_sys.path_remote):
 * recorded, answered with @answer or refused with @ret. */
static struct {
	unsigned calls;
	struct cep_cm *cm;
	uint64_t mask;
	struct cep_sa_path query, answer;
	int ret;
} fpr;

static int fake_path_remote(struct cep_cm *cm, uint64_t comp_mask, uint32_t flags,
			    const struct cep_sa_path *query, struct cep_sa_path *out)
{
	fpr.calls++;
	fpr.cm = cm;
	fpr.mask = comp_mask;
	fpr.query = *query;
	CHECK_EQ(flags, 0);
	if (fpr.ret)
		return fpr.ret;
	*out = fpr.answer;
	return 0;
}

/* cepd's MC_JOIN / MC_LEAVE as the drop-in sends them (rcm_ib_sys.mc_remote):
 * recorded; a join answered with @status, or refused with @ret. Called on
 * the test's thread only (the calls wait for it). */
static struct {
	unsigned joins, leaves, bcasts;
	struct cep_cm *cm;
	struct cepd_mc last;
	int ret, status;
} fmc;

static int fake_mc_remote(struct cep_cm *cm, uint32_t op, const struct cepd_mc *m,
			  struct cepd_mc_rep *rep)
{
	struct cep_sa_mcmember rec;

	fmc.cm = cm;
	fmc.last = *m;
	if (op == CEPD_MC_LEAVE) {
		fmc.leaves++;
		CHECK(rep == NULL);
		return 0;
	}
	if (op == CEPD_MC_BCAST) { /* IPoIB's broadcast group, cepd's answer */
		fmc.bcasts++;
		memset(rep, 0, sizeof(*rep));
		memset(&rec, 0, sizeof(rec));
		rec.qkey = 0xb2b;
		rec.pkey = m->pkey;
		CHECK_EQ(cep_sa_mcmember_encode(&rec, rep->rec), 0);
		return 0;
	}
	CHECK_EQ(op, CEPD_MC_JOIN);
	fmc.joins++;
	if (fmc.ret)
		return fmc.ret;
	memset(rep, 0, sizeof(*rep));
	rep->status = fmc.status;
	memset(&rec, 0, sizeof(rec));
	memcpy(rec.mgid, m->mgid, 16);
	memcpy(rec.port_gid, m->port_gid, 16);
	rec.qkey = m->qkey ? m->qkey : 0xb1b;
	rec.mlid = 0xc0de;
	rec.sl = 5;
	rec.pkey = m->pkey;
	rec.join_state = (uint8_t)(1u << m->bit);
	CHECK_EQ(cep_sa_mcmember_encode(&rec, rep->rec), 0);
	return 0;
}

/* Multicast on the stand-in InfiniBand port (ib0: P_Key 0x8001, GID
 * @ga), as the kernel's cma_join_ib_multicast and ib_multicast: the
 * group's MGID, the broadcast group's parameters, the Set's record and
 * mask, MULTICAST_JOIN from the SA's answer, one Set and one Delete per
 * JoinState however many ids of the process join, Deletes at leave and at
 * destroy, the SA's refusal as MULTICAST_ERROR, no broadcast group as
 * EADDRNOTAVAIL, an SA-assigned MGID; through cepd, cepd's MC_JOIN and
 * MC_LEAVE for every join and leave (it counts), none here. */
static void ib_multicast(struct rcm_channel *ch, struct rcm_port *ports, const uint8_t ga[16])
{
	struct sockaddr_in src = { .sin_family = AF_INET }, grp = { .sin_family = AF_INET };
	struct sockaddr_in6 g6 = { .sin6_family = AF_INET6 };
	struct rdma_cm_join_mc_attr_ex ex = { 0 };
	struct rdma_cm_event ev;
	struct rcm_id *a, *b;
	uint8_t want[16];
	int ctx_a, ctx_b;
	unsigned sets, dels, gets_cepd;

	src.sin_addr.s_addr = htonl(0x0a000001);
	grp.sin_addr.s_addr = htonl(0xe0010203);        /* 224.1.2.3 */
	a = rcm_id_new(ch, NULL, RDMA_PS_UDP, IBV_QPT_UD);
	b = rcm_id_new(ch, NULL, RDMA_PS_UDP, IBV_QPT_UD);
	CHECK(a && b);
	CHECK_EQ(rdma_bind_addr(&a->id, (struct sockaddr *)&src), 0);
	CHECK_EQ(rdma_bind_addr(&b->id, (struct sockaddr *)&src), 0);
	CHECK(a->port == &ports[0]);

	/* the first join: the broadcast group, then the Set */
	CHECK_EQ(rdma_join_multicast(&a->id, (struct sockaddr *)&grp, &ctx_a), 0);
	CHECK_EQ(mc_count(&fsa.mc_gets), 1);
	CHECK_EQ(mc_count(&fsa.mc_sets), 1);
	inet_pton(AF_INET6, "ff12:401b:8001::ffff:ffff", want);
	CHECK(!memcmp(fsa.mc_get.mgid, want, 16));
	/* ip_ib_mc_map, rdma_cm's signature: ff12:4001:P_Key::0.1.2.3 */
	inet_pton(AF_INET6, "ff12:4001:8001::1:203", want);
	CHECK(!memcmp(fsa.mc_set.mgid, want, 16));
	CHECK(!memcmp(fsa.mc_set.port_gid, ga, 16));
	CHECK(fsa.mc_last.comp_mask == (CEP_SA_MCM_MGID | CEP_SA_MCM_PORT_GID | CEP_SA_MCM_PKEY |
					CEP_SA_MCM_JOIN_STATE | CEP_SA_MCM_QKEY | CEP_SA_MCM_SL |
					CEP_SA_MCM_FLOW_LABEL | CEP_SA_MCM_TCLASS));
	CHECK_EQ(fsa.mc_set.qkey, RDMA_UDP_QKEY);
	CHECK_EQ(fsa.mc_set.pkey, 0x8001);
	CHECK_EQ(fsa.mc_set.join_state, CEP_SA_JOIN_FULL);
	CHECK_EQ(fsa.mc_set.sl, 3);                 /* the broadcast group's */
	CHECK_EQ(fsa.mc_set.flow_label, 0x12345);
	CHECK_EQ(fsa.mc_set.traffic_class, 0x40);
	ev = take_event(ch);
	CHECK_EQ(ev.event, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK_EQ(ev.status, 0);
	CHECK(ev.id == &a->id);
	CHECK(ev.param.ud.private_data == &ctx_a);
	CHECK_EQ(ev.param.ud.qp_num, 0xffffff);
	CHECK_EQ(ev.param.ud.qkey, RDMA_UDP_QKEY);
	CHECK_EQ(ev.param.ud.ah_attr.dlid, 0xc00a);
	CHECK_EQ(ev.param.ud.ah_attr.sl, 3);
	CHECK_EQ(ev.param.ud.ah_attr.static_rate, 3);
	CHECK_EQ(ev.param.ud.ah_attr.port_num, 1);
	CHECK_EQ(ev.param.ud.ah_attr.is_global, 1);
	CHECK(!memcmp(ev.param.ud.ah_attr.grh.dgid.raw, want, 16));
	CHECK_EQ(ev.param.ud.ah_attr.grh.flow_label, 0x12345);
	CHECK_EQ(ev.param.ud.ah_attr.grh.hop_limit, 2);
	CHECK_EQ(ev.param.ud.ah_attr.grh.traffic_class, 0x40);

	/* a second id of the process joins the group: the port is a member
	 * already, nothing goes to the SA; its leave sends nothing either */
	CHECK_EQ(rdma_join_multicast(&b->id, (struct sockaddr *)&grp, &ctx_b), 0);
	CHECK_EQ(mc_count(&fsa.mc_sets), 1);
	CHECK_EQ(mc_count(&fsa.mc_gets), 1);
	ev = take_event(ch);
	CHECK_EQ(ev.event, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK(ev.param.ud.private_data == &ctx_b);
	CHECK_EQ(ev.param.ud.ah_attr.dlid, 0xc00a);
	CHECK_EQ(rdma_leave_multicast(&a->id, (struct sockaddr *)&grp), 0);
	CHECK_EQ(mc_count(&fsa.mc_dels), 0);
	CHECK_EQ(rdma_leave_multicast(&a->id, (struct sockaddr *)&grp), -1);
	CHECK_EQ(errno, EADDRNOTAVAIL);
	/* the last one's leave: the port's membership ends */
	CHECK_EQ(rdma_leave_multicast(&b->id, (struct sockaddr *)&grp), 0);
	CHECK_EQ(mc_count(&fsa.mc_dels), 1);
	CHECK(!memcmp(fsa.mc_del.mgid, want, 16));
	CHECK(!memcmp(fsa.mc_del.port_gid, ga, 16));
	CHECK_EQ(fsa.mc_del.join_state, CEP_SA_JOIN_FULL);
	CHECK(fsa.mc_last.comp_mask == (CEP_SA_MCM_MGID | CEP_SA_MCM_PORT_GID |
					CEP_SA_MCM_JOIN_STATE));

	/* send-only full member (JoinState bit 3), an IPv6 group
	 * (ipv6_ib_mc_map: ff12:6001:P_Key + the group's last 10 bytes);
	 * destroying the id ends it */
	inet_pton(AF_INET6, "ff0e::1:2:3:4", &g6.sin6_addr);
	ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ex.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	ex.addr = (struct sockaddr *)&g6;
	CHECK_EQ(rdma_join_multicast_ex(&a->id, &ex, &ctx_a), 0);
	CHECK_EQ(mc_count(&fsa.mc_sets), 2);
	CHECK_EQ(fsa.mc_set.join_state, CEP_SA_JOIN_SENDONLY_FULL);
	inet_pton(AF_INET6, "ff12:6001:8001:0:1:2:3:4", want);
	CHECK(!memcmp(fsa.mc_set.mgid, want, 16));
	CHECK_EQ(take_event(ch).event, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK_EQ(rdma_destroy_id(&a->id), 0);
	CHECK_EQ(mc_count(&fsa.mc_dels), 2);
	CHECK(!memcmp(fsa.mc_del.mgid, want, 16));
	CHECK_EQ(fsa.mc_del.join_state, CEP_SA_JOIN_SENDONLY_FULL);

	/* the SA refuses the Set: MULTICAST_ERROR -EINVAL (the kernel's
	 * status for an SA error), the join's context; leave sends nothing */
	pthread_mutex_lock(&fsa.lock);
	fsa.mc_status = 0x0200;
	pthread_mutex_unlock(&fsa.lock);
	CHECK_EQ(rdma_join_multicast(&b->id, (struct sockaddr *)&grp, &ctx_b), 0);
	ev = take_event(ch);
	CHECK_EQ(ev.event, RDMA_CM_EVENT_MULTICAST_ERROR);
	CHECK_EQ(ev.status, -EINVAL);
	CHECK(ev.param.ud.private_data == &ctx_b);
	dels = mc_count(&fsa.mc_dels);
	CHECK_EQ(rdma_leave_multicast(&b->id, (struct sockaddr *)&grp), 0);
	CHECK_EQ(mc_count(&fsa.mc_dels), dels);
	pthread_mutex_lock(&fsa.lock);
	fsa.mc_status = 0;
	fsa.no_bcast = 1;
	pthread_mutex_unlock(&fsa.lock);

	/* no broadcast group (IPoIB not up): EADDRNOTAVAIL, no Set */
	sets = mc_count(&fsa.mc_sets);
	CHECK_EQ(rdma_join_multicast(&b->id, (struct sockaddr *)&grp, &ctx_b), -1);
	CHECK_EQ(errno, EADDRNOTAVAIL);
	CHECK_EQ(mc_count(&fsa.mc_sets), sets);
	pthread_mutex_lock(&fsa.lock);
	fsa.no_bcast = 0;
	pthread_mutex_unlock(&fsa.lock);

	/* a unicast address: EINVAL (stricter than the kernel), nothing sent */
	grp.sin_addr.s_addr = htonl(0x0a000007);
	CHECK_EQ(rdma_join_multicast(&b->id, (struct sockaddr *)&grp, &ctx_b), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(mc_count(&fsa.mc_sets), sets);

	/* the zero address: the SA assigns the MGID, which the event gives */
	grp.sin_addr.s_addr = 0;
	CHECK_EQ(rdma_join_multicast(&b->id, (struct sockaddr *)&grp, &ctx_b), 0);
	CHECK_EQ(mc_count(&fsa.mc_sets), sets + 1);
	memset(want, 0, 16);
	CHECK(!memcmp(fsa.mc_set.mgid, want, 16));
	ev = take_event(ch);
	CHECK_EQ(ev.event, RDMA_CM_EVENT_MULTICAST_JOIN);
	inet_pton(AF_INET6, ASSIGNED_MGID, want);
	CHECK(!memcmp(ev.param.ud.ah_attr.grh.dgid.raw, want, 16));
	CHECK_EQ(rdma_leave_multicast(&b->id, (struct sockaddr *)&grp), 0);
	CHECK(!memcmp(fsa.mc_del.mgid, want, 16));

	/* IPoIB's space on the IPoIB address: bound; its Q_Key the broadcast
	 * group's, asked once (cma_set_qkey) when the QP's INIT attributes
	 * need it; its join keeps IPoIB's signature (ff12:401b) and asks the
	 * group's rate, MTU and hop limit too (cma_join_ib_multicast) */
	{
		struct rcm_id *ip = rcm_id_new(ch, NULL, RDMA_PS_IPOIB, IBV_QPT_UD);
		struct ibv_qp_attr qa;
		unsigned gets;
		int qmask;

		CHECK(ip != NULL);
		CHECK_EQ(rdma_bind_addr(&ip->id, (struct sockaddr *)&src), 0);
		CHECK(ip->port == &ports[0]);
		gets = mc_count(&fsa.mc_gets);
		qa.qp_state = IBV_QPS_INIT;
		CHECK_EQ(rdma_init_qp_attr(&ip->id, &qa, &qmask), 0);
		CHECK_EQ(qa.qkey, 0xb1b);
		CHECK(qmask & IBV_QP_QKEY);
		CHECK_EQ(mc_count(&fsa.mc_gets), gets + 1);
		CHECK_EQ(rdma_init_qp_attr(&ip->id, &qa, &qmask), 0);
		CHECK_EQ(qa.qkey, 0xb1b);
		CHECK_EQ(mc_count(&fsa.mc_gets), gets + 1); /* the id keeps it */
		grp.sin_addr.s_addr = htonl(0xe0010203);
		CHECK_EQ(rdma_join_multicast(&ip->id, (struct sockaddr *)&grp, &ctx_b), 0);
		inet_pton(AF_INET6, "ff12:401b:8001::1:203", want);
		CHECK(!memcmp(fsa.mc_set.mgid, want, 16));
		CHECK_EQ(fsa.mc_set.qkey, 0xb1b);
		CHECK_EQ(fsa.mc_set.hop_limit, 2);
		CHECK_EQ(fsa.mc_set.mtu, 4);
		CHECK(fsa.mc_last.comp_mask & CEP_SA_MCM_RATE);
		CHECK(fsa.mc_last.comp_mask & CEP_SA_MCM_HOP_LIMIT);
		ev = take_event(ch);
		CHECK_EQ(ev.event, RDMA_CM_EVENT_MULTICAST_JOIN);
		CHECK_EQ(ev.param.ud.qkey, 0xb1b);
		CHECK_EQ(rdma_destroy_id(&ip->id), 0);
		CHECK(!memcmp(fsa.mc_del.mgid, want, 16));
		/* no broadcast group: the INIT attributes fail, as the kernel's
		 * cache miss (EADDRNOTAVAIL) */
		ip = rcm_id_new(ch, NULL, RDMA_PS_IPOIB, IBV_QPT_UD);
		CHECK_EQ(rdma_bind_addr(&ip->id, (struct sockaddr *)&src), 0);
		pthread_mutex_lock(&fsa.lock);
		fsa.no_bcast = 1;
		pthread_mutex_unlock(&fsa.lock);
		errno = 0;
		CHECK_EQ(rdma_init_qp_attr(&ip->id, &qa, &qmask), -1);
		CHECK_EQ(errno, EADDRNOTAVAIL);
		pthread_mutex_lock(&fsa.lock);
		fsa.no_bcast = 0;
		pthread_mutex_unlock(&fsa.lock);
		CHECK_EQ(rdma_destroy_id(&ip->id), 0);
		sets = mc_count(&fsa.mc_sets);
	}

	/* through cepd: each join and leave is cepd's MC_JOIN / MC_LEAVE
	 * (cepd counts the node's and builds the Set), none counted or sent
	 * to the SA here; its answer makes the event, its refusal the call's
	 * error, the SA's failure it reports MULTICAST_ERROR */
	ports[0].attached = 1;
	rcm_ib_sys.mc_remote = fake_mc_remote;
	grp.sin_addr.s_addr = htonl(0xe0010203);
	gets_cepd = mc_count(&fsa.mc_gets);
	{
		struct rcm_id *c = rcm_id_new(ch, NULL, RDMA_PS_UDP, IBV_QPT_UD);
		struct rcm_id *ip = rcm_id_new(ch, NULL, RDMA_PS_IPOIB, IBV_QPT_UD);

		CHECK(c && ip);
		CHECK_EQ(rdma_bind_addr(&c->id, (struct sockaddr *)&src), 0);
		CHECK_EQ(rdma_bind_addr(&ip->id, (struct sockaddr *)&src), 0);
		CHECK_EQ(rdma_join_multicast(&b->id, (struct sockaddr *)&grp, &ctx_b), 0);
		CHECK_EQ(fmc.joins, 1);
		CHECK(fmc.cm == ports[0].cm);
		inet_pton(AF_INET6, "ff12:4001:8001::1:203", want);
		CHECK(!memcmp(fmc.last.mgid, want, 16));
		CHECK(!memcmp(fmc.last.port_gid, ga, 16));
		CHECK_EQ(fmc.last.qkey, RDMA_UDP_QKEY);
		CHECK_EQ(fmc.last.pkey, 0x8001);
		CHECK_EQ(fmc.last.bit, 0);
		ev = take_event(ch);
		CHECK_EQ(ev.event, RDMA_CM_EVENT_MULTICAST_JOIN);
		CHECK(ev.param.ud.private_data == &ctx_b);
		CHECK_EQ(ev.param.ud.qkey, RDMA_UDP_QKEY);
		CHECK_EQ(ev.param.ud.ah_attr.dlid, 0xc0de);  /* cepd's answer */
		CHECK_EQ(ev.param.ud.ah_attr.sl, 5);
		CHECK(!memcmp(ev.param.ud.ah_attr.grh.dgid.raw, want, 16));
		/* a second id of the process: cepd's to count, so sent too */
		CHECK_EQ(rdma_join_multicast(&c->id, (struct sockaddr *)&grp, &ctx_a), 0);
		CHECK_EQ(fmc.joins, 2);
		CHECK_EQ(take_event(ch).event, RDMA_CM_EVENT_MULTICAST_JOIN);
		/* an IPoIB id's Q_Key: the broadcast group's, asked of cepd */
		{
			struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT };
			int qmask;

			CHECK_EQ(rdma_init_qp_attr(&ip->id, &qa, &qmask), 0);
			CHECK_EQ(qa.qkey, 0xb2b);
			CHECK_EQ(fmc.bcasts, 1);
			CHECK_EQ(fmc.last.pkey, 0x8001);
		}
		/* IPoIB's space asks the broadcast group's Q_Key (0); send-only
		 * full member is bit 3 */
		ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
		ex.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
		ex.addr = (struct sockaddr *)&grp;
		CHECK_EQ(rdma_join_multicast_ex(&ip->id, &ex, &ctx_a), 0);
		CHECK_EQ(fmc.joins, 3);
		CHECK_EQ(fmc.last.qkey, 0);
		CHECK_EQ(fmc.last.bit, 3);
		inet_pton(AF_INET6, "ff12:401b:8001::1:203", want);
		CHECK(!memcmp(fmc.last.mgid, want, 16));
		ev = take_event(ch);
		CHECK_EQ(ev.event, RDMA_CM_EVENT_MULTICAST_JOIN);
		CHECK_EQ(ev.param.ud.qkey, 0xb1b); /* the group's, as cepd answered */
		/* leaves: each its MC_LEAVE of the group the join was answered */
		CHECK_EQ(rdma_leave_multicast(&b->id, (struct sockaddr *)&grp), 0);
		CHECK_EQ(fmc.leaves, 1);
		inet_pton(AF_INET6, "ff12:4001:8001::1:203", want);
		CHECK(!memcmp(fmc.last.mgid, want, 16));
		CHECK(!memcmp(fmc.last.port_gid, ga, 16));
		CHECK_EQ(fmc.last.bit, 0);
		CHECK_EQ(rdma_destroy_id(&c->id), 0);
		CHECK_EQ(fmc.leaves, 2);
		CHECK_EQ(rdma_destroy_id(&ip->id), 0);
		CHECK_EQ(fmc.leaves, 3);
		CHECK_EQ(fmc.last.bit, 3);
		/* the SA's failure, as cepd reports it: MULTICAST_ERROR, and the
		 * leave sends nothing */
		fmc.status = -ETIMEDOUT;
		CHECK_EQ(rdma_join_multicast(&b->id, (struct sockaddr *)&grp, &ctx_b), 0);
		ev = take_event(ch);
		CHECK_EQ(ev.event, RDMA_CM_EVENT_MULTICAST_ERROR);
		CHECK_EQ(ev.status, -ETIMEDOUT);
		CHECK_EQ(rdma_leave_multicast(&b->id, (struct sockaddr *)&grp), 0);
		CHECK_EQ(fmc.leaves, 3);
		fmc.status = 0;
		/* cepd refuses: the call's error, nothing held */
		fmc.ret = -EACCES;
		CHECK_EQ(rdma_join_multicast(&b->id, (struct sockaddr *)&grp, &ctx_b), -1);
		CHECK_EQ(errno, EACCES);
		fmc.ret = 0;
		CHECK_EQ(rdma_leave_multicast(&b->id, (struct sockaddr *)&grp), -1);
		CHECK_EQ(errno, EADDRNOTAVAIL);
		CHECK_EQ(fmc.joins, 5);
		CHECK_EQ(fmc.leaves, 3);
	}
	ports[0].attached = 0;
	rcm_ib_sys.mc_remote = cmr_mc;
	CHECK_EQ(mc_count(&fsa.mc_sets), sets);
	CHECK_EQ(mc_count(&fsa.mc_gets), gets_cepd);
	CHECK_EQ(rdma_destroy_id(&b->id), 0);
	CHECK(ports[0].groups == NULL);
}

static void resolve(void)
{
	static struct ibv_device fdev;
	static struct ibv_context fctx;
	static int fake_cm;
	char root[] = "/tmp/cep-rdmacm-ib-XXXXXX", cmd[256];
	struct sockaddr_in src = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	struct ibv_gid_entry gids[2];
	struct rcm_dev dev;
	struct rcm_port ports[2];
	struct rcm_channel *ch = rcm_channel_new();
	struct rcm_id *r, *b;
	struct cep_cm_conn_param cp;
	struct cep_mad_addr to;
	uint8_t ga[16], gb[16];
	uint64_t t0;
	uint16_t pkey;
	unsigned sends;
	int status, ifindex;

	CHECK(ch != NULL);
	inet_pton(AF_INET6, GID_A, ga);
	inet_pton(AF_INET6, GID_B, gb);
	/* ib0: IPoIB on mlx5_0 port 1, P_Key 0x8001, hardware address
	 * 80:00:00:48 + GID_A */
	CHECK(mkdtemp(root) != NULL);
	put_file(root, "sys/class/net/ib0/type", "32\n");
	put_file(root, "sys/class/net/ib0/dev_port", "0\n");
	put_file(root, "sys/class/net/ib0/pkey", "0x8001\n");
	put_file(root, "sys/class/net/ib0/address",
		 "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00:00:10\n");
	put_file(root, "sys/class/net/ib0/device/infiniband/mlx5_0/x", "");
	put_file(root, "sys/class/net/ib1/type", "32\n");
	put_file(root, "sys/class/net/ib1/address", "80:00:00:48:fe:80\n");
	setenv("CEP_RDMACM_SYSROOT", root, 1);
	CHECK_EQ(rcm_ib_netdev_gid("ib0", gb), 0);
	CHECK(!memcmp(gb, ga, 16));
	CHECK_EQ(rcm_ib_netdev_gid("ib1", gb), -EINVAL); /* 6 bytes, not 20 */
	CHECK_EQ(rcm_ib_netdev_gid("ib9", gb), -ENODEV);
	inet_pton(AF_INET6, GID_B, gb);

	/* a device: port 1 InfiniBand (GID_A at index 0), port 2 iWARP */
	standin_dev(&dev, &fctx, &fdev, "mlx5_0", ports, 2);
	memset(gids, 0, sizeof(gids));
	dev.attr.local_ca_ack_delay = 16;
	ports[0].link_layer = IBV_LINK_LAYER_INFINIBAND;
	ports[1].link_layer = IBV_LINK_LAYER_UNSPECIFIED;
	/* the port's CM: present, never used by these calls */
	atomic_store(&ports[0].cm, (struct cep_cm *)(void *)&fake_cm);
	memcpy(gids[0].gid.raw, ga, 16);
	gids[0].port_num = 1;
	gids[0].gid_index = 0;
	gids[0].gid_type = IBV_GID_TYPE_IB;
	dev.gids = gids;
	dev.ngids = 1;
	rcm.devs = &dev;
	rcm.ndevs = 1;
	rcm.inited = 1;
	rcm_ib_sys.ifname_of = fake_ifname_of;
	rcm_ib_sys.neigh = fake_neigh;
	rcm_ib_sys.kick = fake_kick;
	rcm_ib_sys.sa_get = fake_sa_get;
	/* wildcard listeners take RoCE and InfiniBand ports, nothing else */
	CHECK(rcm_port_usable(&ports[0]));
	CHECK(!rcm_port_usable(&ports[1]));

	/* rdma_bind_addr on the IPoIB address: the port of ib0's GID */
	src.sin_addr.s_addr = htonl(0x0a000001);
	dst.sin_addr.s_addr = htonl(0x0a000002);
	b = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	CHECK(b != NULL);
	CHECK_EQ(rdma_bind_addr(&b->id, (struct sockaddr *)&src), 0);
	CHECK(b->port == &ports[0]);
	CHECK_EQ(b->id.port_num, 1);
	CHECK(!memcmp(b->id.route.addr.addr.ibaddr.sgid.raw, ga, 16));
	CHECK_EQ(ntohs(b->id.route.addr.addr.ibaddr.pkey), 0x8001);
	CHECK_EQ(rdma_destroy_id(&b->id), 0);
	/* an address on no interface is not IPoIB (rcm_find_addr then reads
	 * the RoCE GID tables again: verbs, not run on a stand-in device) */
	src.sin_addr.s_addr = htonl(0x0a000009);
	CHECK_EQ(rcm_ib_local((struct sockaddr *)&src, gb, &pkey, &ifindex), -ENODEV);
	src.sin_addr.s_addr = htonl(0x0a000001);
	CHECK_EQ(rcm_ib_local((struct sockaddr *)&src, gb, &pkey, &ifindex), 0);
	CHECK(!memcmp(gb, ga, 16));
	CHECK_EQ(pkey, 0x8001);
	CHECK_EQ(ifindex, 5);
	inet_pton(AF_INET6, GID_B, gb);

	/* rdma_resolve_addr: the neighbour unknown twice, then GID_B */
	nb.hw[0] = 0x80;
	nb.hw[3] = 0x48;
	memcpy(nb.hw + 4, gb, 16);
	nb.misses = 2;
	r = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	CHECK(r != NULL);
	CHECK_EQ(rdma_resolve_addr(&r->id, (struct sockaddr *)&src, (struct sockaddr *)&dst,
				   2000), 0);
	CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK_EQ(status, 0);
	CHECK_EQ(nb.asked, 3);
	CHECK_EQ(nb.ifindex, 5);
	CHECK(nb.kicks >= 1);         /* resolution was asked for */
	CHECK_EQ(((struct sockaddr_in *)&nb.kick_dst)->sin_addr.s_addr, dst.sin_addr.s_addr);
	CHECK_EQ(((struct sockaddr_in *)&nb.kick_src)->sin_addr.s_addr, src.sin_addr.s_addr);
	CHECK_EQ(r->state, RCM_ADDR_RESOLVED);
	CHECK(!memcmp(r->id.route.addr.addr.ibaddr.sgid.raw, ga, 16));
	CHECK(!memcmp(r->id.route.addr.addr.ibaddr.dgid.raw, gb, 16));
	CHECK_EQ(ntohs(r->id.route.addr.addr.ibaddr.pkey), 0x8001);

	/* rdma_resolve_route: an SA error first (ERR_NO_RECORDS) */
	memset(&fsa.answer, 0, sizeof(fsa.answer));
	memcpy(fsa.answer.sgid, ga, 16);
	memcpy(fsa.answer.dgid, gb, 16);
	fsa.answer.slid = 3;
	fsa.answer.dlid = 4;
	fsa.answer.hop_limit = 0;
	fsa.answer.reversible = 1;
	fsa.answer.numb_path = 1;
	fsa.answer.pkey = 0x8001;
	fsa.answer.sl = 2;
	fsa.answer.mtu_selector = fsa.answer.rate_selector = 2;
	fsa.answer.packet_life_time_selector = 2;
	fsa.answer.mtu = 4;
	fsa.answer.rate = 3;
	fsa.answer.packet_life_time = 14;
	fsa.status = 0x0300;
	r->tos = 0x10;
	CHECK_EQ(rdma_resolve_route(&r->id, 2000), 0);
	CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ROUTE_ERROR);
	CHECK_EQ(status, -EHOSTUNREACH);
	CHECK_EQ(r->state, RCM_ADDR_RESOLVED);
	CHECK(!strcmp(sa_dev, "mlx5_0"));
	CHECK_EQ(sa_port_num, 1);
	/* the query, as cma_query_ib_route */
	CHECK_EQ(fsa.last.attr_id, CEP_SA_ATTR_PATH_REC);
	CHECK_EQ(fsa.last.comp_mask, CEP_SA_PR_DGID | CEP_SA_PR_SGID | CEP_SA_PR_PKEY |
				     CEP_SA_PR_NUMB_PATH | CEP_SA_PR_REVERSIBLE |
				     CEP_SA_PR_SERVICE_ID | CEP_SA_PR_QOS_CLASS);
	CHECK(!memcmp(fsa.last_path.sgid, ga, 16));
	CHECK(!memcmp(fsa.last_path.dgid, gb, 16));
	CHECK_EQ(fsa.last_path.pkey, 0x8001);
	CHECK_EQ(fsa.last_path.numb_path, 1);
	CHECK_EQ(fsa.last_path.reversible, 1);
	CHECK_EQ(fsa.last_path.qos_class, 0x10);
	CHECK_EQ(fsa.last_path.service_id, 0x0000000001060000ull | 0); /* TCP, port 0 */
	/* then the path */
	fsa.status = 0;
	CHECK_EQ(rdma_resolve_route(&r->id, 2000), 0);
	CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK_EQ(status, 0);
	CHECK_EQ(r->state, RCM_ROUTE_RESOLVED);
	CHECK_EQ(r->id.route.num_paths, 1);
	CHECK_EQ(ntohs(r->id.route.path_rec->dlid), 4);
	CHECK_EQ(ntohs(r->id.route.path_rec->slid), 3);
	CHECK_EQ(ntohs(r->id.route.path_rec->pkey), 0x8001);
	CHECK_EQ(r->id.route.path_rec->packet_life_time, 14);
	CHECK(r->route_given);
	/* the REQ's CM address from that path: LID 4, SL 2, no GRH */
	memset(&cp, 0, sizeof(cp));
	memset(&to, 0, sizeof(to));
	cp.size = sizeof(cp);
	CHECK_EQ(rcm_ib_conn_from_path(r->id.route.path_rec, 16,
				       r->port->link_layer == IBV_LINK_LAYER_ETHERNET, &cp, &to), 0);
	CHECK_EQ(to.lid, 4);
	CHECK_EQ(to.sl, 2);
	CHECK_EQ(to.grh_present, 0);
	CHECK_EQ(cp.primary.remote_lid, 4);
	CHECK_EQ(cp.pkey, 0x8001);
	/* through cepd: the same query is cepd's PATH_QUERY (the SA is asked
	 * there), the process's SA client is not asked; cepd's answer is the
	 * route, its error ROUTE_ERROR */
	ports[0].attached = 1;
	rcm_ib_sys.path_remote = fake_path_remote;
	sends = mc_count(&fsa.sends);
	fpr.answer = fsa.answer;
	fpr.answer.dlid = 9;
	fpr.ret = -ETIMEDOUT;
	r->state = RCM_ADDR_RESOLVED; /* resolve the route again */
	CHECK_EQ(rdma_resolve_route(&r->id, 2000), 0);
	CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ROUTE_ERROR);
	CHECK_EQ(status, -ETIMEDOUT);
	CHECK_EQ(fpr.calls, 1);
	CHECK(fpr.cm == ports[0].cm);
	CHECK_EQ(fpr.mask, CEP_SA_PR_DGID | CEP_SA_PR_SGID | CEP_SA_PR_PKEY | CEP_SA_PR_NUMB_PATH |
			   CEP_SA_PR_REVERSIBLE | CEP_SA_PR_SERVICE_ID | CEP_SA_PR_QOS_CLASS);
	CHECK(!memcmp(fpr.query.sgid, ga, 16));
	CHECK(!memcmp(fpr.query.dgid, gb, 16));
	CHECK_EQ(fpr.query.pkey, 0x8001);
	CHECK_EQ(fpr.query.qos_class, 0x10);
	fpr.ret = 0;
	CHECK_EQ(rdma_resolve_route(&r->id, 2000), 0);
	CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK_EQ(r->state, RCM_ROUTE_RESOLVED);
	CHECK_EQ(ntohs(r->id.route.path_rec->dlid), 9);
	CHECK_EQ(fpr.calls, 2);
	CHECK_EQ(mc_count(&fsa.sends), sends);
	ports[0].attached = 0;
	rcm_ib_sys.path_remote = cmr_path_query;
	CHECK_EQ(rdma_destroy_id(&r->id), 0);

	/* a neighbour that never resolves: ADDR_ERROR -ETIMEDOUT after the
	 * call's timeout, not before, and not much later */
	nb.never = 1;
	nb.kicks = 0;
	r = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	t0 = ms_now();
	CHECK_EQ(rdma_resolve_addr(&r->id, (struct sockaddr *)&src, (struct sockaddr *)&dst,
				   300), 0);
	CHECK(ms_now() - t0 >= 300);
	CHECK(ms_now() - t0 < 5000);
	CHECK_EQ(next_event(ch, &status), RDMA_CM_EVENT_ADDR_ERROR);
	CHECK_EQ(status, -ETIMEDOUT);
	CHECK(nb.kicks >= 1);
	CHECK(r->state != RCM_ADDR_RESOLVED);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);

	/* from here the port has a P_Key table: the default (full and
	 * limited), 0x8001, and 0x0002 as a limited member only */
	ports[0].pkeys = pkeys;
	ports[0].npkeys = 4;
	af_ib_layer(ch, ports, ga, gb);
	pkey_table(ch, ports, gb);
	ports[0].pkeys = NULL;
	ports[0].npkeys = 0;
	ib_multicast(ch, ports, ga);

	if (ports[0].sa)
		cep_sa_put(ports[0].sa);
	ports[0].sa = NULL;
	atomic_store(&ports[0].cm, NULL);
	rcm.ndevs = 0;
	rcm.devs = NULL;
	rcm_channel_free(ch);
	unsetenv("CEP_RDMACM_SYSROOT");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK_EQ(system(cmd), 0);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "resolve")) {
		resolve();
		return check_done("rdmacm-ib-resolve");
	}
	path_option();
	set_path();
	hwaddr();
	neigh();
	netdev();
	af_ib();
	return check_done("rdmacm-ib");
}
