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
 * - AF_IB addresses.
 * The layer's objects are linked in. Usage: test-rdmacm-ib.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <infiniband/ib.h>

#include "../common/check.h"
#include "ib.h"
#include "rdmacm.h"

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
}

int main(void)
{
	path_option();
	set_path();
	hwaddr();
	neigh();
	netdev();
	af_ib();
	return check_done("rdmacm-ib");
}
