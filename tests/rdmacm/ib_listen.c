/* SPDX-License-Identifier: MIT */
/*
 * A listener's new id on an InfiniBand port without an HCA: its route is
 * the REQ's paths, as the kernel's cma_ib_new_conn_id copies them from
 * cm_format_paths_from_req (drivers/infiniband/core/cm.c): SGID/SLID the
 * REQ's remote port (ours), DGID/DLID its local port (the requester's),
 * flow label, traffic class, hop limit, SL and rate per path, the REQ's
 * P_Key and MTU, packet life time = local ACK timeout - 1, reversible,
 * selectors "exactly"; a second record when the REQ has an alternate path
 * (alternate local LID not 0); the address's P_Key the REQ's. On RoCE the
 * route stays the one the layer builds from the GIDs. The in-process
 * fabric of tests/cm/harness.h (raw peer C sends the REQ to B's CM, which
 * a stand-in port's listener uses); the layer's objects linked in.
 * Usage: test-rdmacm-ib-listen NAME.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <poll.h>

#include <cep/rdma_cm.h>

#include "../cm/harness.h"
#include "ib.h"
#include "rdmacm.h"

#define PORT_RDMA 7471

static const uint8_t GID_REQ_LOCAL[16] = { 0xfe, 0x80, [8] = 0x00, 0x02, 0xc9, 0x03, 0, 0, 0x0c, 0x03 };
static const uint8_t GID_REQ_REMOTE[16] = { 0xfe, 0x80, [8] = 0x00, 0x02, 0xc9, 0x03, 0, 0, 0x0b, 0x02 };
static const uint8_t GID_ALT_LOCAL[16] = { 0xfe, 0x80, [8] = 0x00, 0x02, 0xc9, 0x03, 0, 0, 0x0c, 0x13 };
static const uint8_t GID_ALT_REMOTE[16] = { 0xfe, 0x80, [8] = 0x00, 0x02, 0xc9, 0x03, 0, 0, 0x0b, 0x12 };

/* One REQ from C to an rdma_cm listener on a port of link layer @ll;
 * the new id's CONNECT_REQUEST is checked by @check, then rejected. */
static void one_req(uint8_t ll, int alt, void (*check)(const struct rdma_cm_id *, int alt),
		    uint32_t comm_id)
{
	static int fake_pd;
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = rcm_cep_handler };
	struct rcm_service tcp;
	struct rcm_dev dev;
	struct rcm_port port;
	struct rcm_channel *ch;
	struct rcm_id *l;
	struct cep_cm_id *lc = NULL;
	struct rdma_cm_event *ev = NULL;
	struct cep_cma_hdr h;
	struct cep_msg m;

	setup(2, 0);
	memset(&tcp, 0, sizeof(tcp));
	memset(&dev, 0, sizeof(dev));
	memset(&port, 0, sizeof(port));
	dev.pd = (struct ibv_pd *)(void *)&fake_pd; /* never used as one */
	port.dev = &dev;
	port.port_num = 1;
	port.link_layer = ll;
	pthread_mutex_init(&port.qpn_mtx, NULL);
	pthread_mutex_init(&port.svc_mtx, NULL);
	atomic_store(&port.cm, B.cm);
	tcp.hdr.kind = RCM_KIND_SERVICE;
	tcp.sid = cep_rdma_service_id(CEP_RDMA_PS_TCP, PORT_RDMA);
	tcp.port = &port;
	pthread_mutex_init(&tcp.mtx, NULL);
	ia.context = &tcp.hdr;
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &lc), 0);
	CHECK_EQ(cep_cm_listen(lc, tcp.sid, ~0ull), 0);
	ch = rcm_channel_new();
	CHECK(ch != NULL);
	l = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC); /* 0.0.0.0:PORT_RDMA */
	l->any_addr = 1;
	l->id.route.addr.src_addr.sa_family = AF_INET;
	l->state = RCM_LISTEN;
	l->backlog = 8;
	tcp.listeners = &l;
	tcp.nlisteners = tcp.cap = 1;

	raw_req(&m, comm_id, 0x900);
	m.u.req.service_id = tcp.sid;
	m.u.req.partition_key = 0x7fff; /* limited member: the port is 0xffff */
	m.u.req.path_mtu = 4;                    /* 2048 */
	m.u.req.primary.sl = 5;
	m.u.req.primary.packet_rate = 7;         /* 40 Gb/s */
	m.u.req.primary.local_ack_timeout = 16;  /* life time 15 */
	m.u.req.primary.flow_label = 0x12345;
	m.u.req.primary.traffic_class = 0x20;
	m.u.req.primary.hop_limit = 1;
	memcpy(m.u.req.primary.local_gid, GID_REQ_LOCAL, 16);
	memcpy(m.u.req.primary.remote_gid, GID_REQ_REMOTE, 16);
	if (alt) {
		path_to(&m.u.req.alternate, 13, 12);
		m.u.req.alternate.sl = 9;
		m.u.req.alternate.packet_rate = 3;
		m.u.req.alternate.local_ack_timeout = 0; /* life time stays 0 */
		memcpy(m.u.req.alternate.local_gid, GID_ALT_LOCAL, 16);
		memcpy(m.u.req.alternate.remote_gid, GID_ALT_REMOTE, 16);
	}
	cep_cma_hdr_ipv4(&h, htonl(0x0a000001), 5555, htonl(0x0a000002), PORT_RDMA);
	CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 0, m.u.req.private_data,
				    sizeof(m.u.req.private_data)), CEP_CMA_HDR_SIZE);
	raw_send(&m, LID_B);
	settle();
	/* never block: a REQ the CM refused leaves the channel empty */
	CHECK_EQ(poll(&(struct pollfd){ .fd = ch->ch.fd, .events = POLLIN }, 1, 5000), 1);
	CHECK_EQ(raw_count(CEP_MSG_REJ), 0);
	CHECK_EQ(rdma_get_cm_event(&ch->ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	check(ev->id, alt);
	CHECK_EQ(rdma_reject(ev->id, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	struct rdma_cm_id *c = ev->id;

	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	CHECK_EQ(rdma_destroy_id(c), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(lc), 0);
	tcp.nlisteners = 0;
	rcm_id_put(l);
	teardown_all();
	free(port.qpns);
	rcm_channel_free(ch);
}

static void check_ib(const struct rdma_cm_id *id, int alt)
{
	const struct ibv_sa_path_rec *p = id->route.path_rec;

	CHECK(p != NULL);
	CHECK_EQ(id->route.num_paths, alt ? 2 : 1);
	/* the primary path, from here: we are the REQ's remote port */
	CHECK(!memcmp(p[0].sgid.raw, GID_REQ_REMOTE, 16));
	CHECK(!memcmp(p[0].dgid.raw, GID_REQ_LOCAL, 16));
	CHECK_EQ(be16toh(p[0].slid), LID_B);
	CHECK_EQ(be16toh(p[0].dlid), LID_C);
	CHECK_EQ(be16toh(p[0].pkey), 0x7fff);
	CHECK_EQ(p[0].sl, 5);
	CHECK_EQ(p[0].mtu, 4);
	CHECK_EQ(p[0].mtu_selector, 2);
	CHECK_EQ(p[0].rate, 7);
	CHECK_EQ(p[0].rate_selector, 2);
	CHECK_EQ(p[0].packet_life_time, 15);
	CHECK_EQ(p[0].packet_life_time_selector, 2);
	CHECK_EQ(be32toh(p[0].flow_label), 0x12345);
	CHECK_EQ(p[0].traffic_class, 0x20);
	CHECK_EQ(p[0].hop_limit, 1);
	CHECK_EQ(be32toh(p[0].reversible), 1);
	CHECK_EQ(be16toh(id->route.addr.addr.ibaddr.pkey), 0x7fff);
	CHECK(!memcmp(id->route.addr.addr.ibaddr.sgid.raw, GID_REQ_REMOTE, 16));
	CHECK(!memcmp(id->route.addr.addr.ibaddr.dgid.raw, GID_REQ_LOCAL, 16));
	if (!alt)
		return;
	CHECK(!memcmp(p[1].sgid.raw, GID_ALT_REMOTE, 16));
	CHECK(!memcmp(p[1].dgid.raw, GID_ALT_LOCAL, 16));
	CHECK_EQ(be16toh(p[1].slid), 12);
	CHECK_EQ(be16toh(p[1].dlid), 13);
	CHECK_EQ(be16toh(p[1].pkey), 0x7fff);
	CHECK_EQ(p[1].sl, 9);
	CHECK_EQ(p[1].mtu, 4);
	CHECK_EQ(p[1].rate, 3);
	CHECK_EQ(p[1].packet_life_time, 0);
}

/* RoCE: the layer's path from the GIDs (cma_resolve_iboe_route's view). */
static void check_roce(const struct rdma_cm_id *id, int alt)
{
	const struct ibv_sa_path_rec *p = id->route.path_rec;

	(void)alt;
	CHECK(p != NULL);
	CHECK_EQ(id->route.num_paths, 1);
	CHECK_EQ(p[0].slid, 0);
	CHECK_EQ(p[0].dlid, 0);
	CHECK_EQ(be16toh(p[0].pkey), 0xffff);
	CHECK_EQ(p[0].packet_life_time, RCM_ROCE_PACKET_LIFE);
}

static void t_primary(void)
{
	one_req(IBV_LINK_LAYER_INFINIBAND, 0, check_ib, 0x9500);
}

static void t_alternate(void)
{
	one_req(IBV_LINK_LAYER_INFINIBAND, 1, check_ib, 0x9501);
}

static void t_roce(void)
{
	one_req(IBV_LINK_LAYER_ETHERNET, 1, check_roce, 0x9502);
}

static const struct named_test tests[] = {
	{ "primary", t_primary },
	{ "alternate", t_alternate },
	{ "roce", t_roce },
};

int main(int argc, char **argv)
{
	return run_named_test(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
