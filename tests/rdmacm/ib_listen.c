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
 *
 * AF_IB (af-ib, connect): a listener bound to an AF_IB address takes a
 * REQ that carries no CMA header, all of its private data the user's, and
 * the new id's addresses are AF_IB as the kernel's cma_save_ib_info (ours
 * the REQ's remote GID, the peer's its local GID, the REQ's P_Key, flow
 * label and service ID, mask all ones); an AF_IB id's REQ carries the
 * destination's sib_sid as service ID (cma_get_service_id) and no CMA
 * header (cma_user_data_offset 0 for AF_IB). A SIDR_REQ's new id on an
 * AF_IB listener (sidr-af-ib, -no-grh): destination P_Key the request's,
 * GID the GRH's source when the MAD had one. An AF_IB UD id's SIDR_REP
 * (sidr-qkey): its Q_Key taken, or ADDR_ERROR -EINVAL when it has none or
 * is not the id's (cma_set_qkey).
 * Usage: test-rdmacm-ib-listen NAME.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <poll.h>

#include <infiniband/ib.h>

#include <cep/rdma_cm.h>

#include "../cm/harness.h"
#include "ib.h"
#include "rdmacm.h"
#include "standin.h"


static const uint8_t GID_REQ_LOCAL[16] = { 0xfe, 0x80, [8] = 0x00, 0x02, 0xc9, 0x03, 0, 0, 0x0c, 0x03 };
static const uint8_t GID_REQ_REMOTE[16] = { 0xfe, 0x80, [8] = 0x00, 0x02, 0xc9, 0x03, 0, 0, 0x0b, 0x02 };
static const uint8_t GID_ALT_LOCAL[16] = { 0xfe, 0x80, [8] = 0x00, 0x02, 0xc9, 0x03, 0, 0, 0x0c, 0x13 };
static const uint8_t GID_ALT_REMOTE[16] = { 0xfe, 0x80, [8] = 0x00, 0x02, 0xc9, 0x03, 0, 0, 0x0b, 0x12 };

/* One REQ from C to an rdma_cm listener on a port of link layer @ll;
 * the new id's CONNECT_REQUEST is checked by @check, then rejected. */
static void one_req(uint8_t ll, int alt, void (*check)(const struct rdma_cm_event *, int alt),
		    uint32_t comm_id, int af_ib)
{
	struct standin s;
	struct rdma_cm_event *ev = NULL;
	struct cep_cma_hdr h;
	struct cep_msg m;

	setup(2, 0);
	standin_open(&s, ll, 0);
	if (af_ib) { /* bound to the wildcard GID, service ID exact */
		struct sockaddr_ib *sib = (struct sockaddr_ib *)&s.l->id.route.addr.src_storage;

		sib->sib_family = AF_IB;
		sib->sib_sid = htobe64(s.tcp.sid);
		sib->sib_sid_mask = htobe64(~0ull);
	}
	s.l->backlog = 8;

	raw_req(&m, comm_id, 0x900);
	m.u.req.service_id = s.tcp.sid;
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
	if (af_ib) { /* no CMA header: the first byte is not its version 0 */
		memcpy(m.u.req.private_data, "\x7fhello", 7);
	} else {
		cep_cma_hdr_ipv4(&h, htonl(0x0a000001), 5555, htonl(0x0a000002), PORT_RDMA);
		CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 0, m.u.req.private_data,
					    sizeof(m.u.req.private_data)), CEP_CMA_HDR_SIZE);
	}
	raw_send(&m, LID_B);
	settle();
	/* never block: a REQ the CM refused leaves the channel empty */
	CHECK_EQ(poll(&(struct pollfd){ .fd = s.ch->ch.fd, .events = POLLIN }, 1, 5000), 1);
	CHECK_EQ(raw_count(CEP_MSG_REJ), 0);
	CHECK_EQ(rdma_get_cm_event(&s.ch->ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	check(ev, alt);
	CHECK_EQ(rdma_reject(ev->id, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	struct rdma_cm_id *c = ev->id;

	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	standin_teardown(c, &s);
}

static void check_ib(const struct rdma_cm_event *ev, int alt)
{
	const struct rdma_cm_id *id = ev->id;
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
static void check_roce(const struct rdma_cm_event *ev, int alt)
{
	const struct rdma_cm_id *id = ev->id;
	const struct ibv_sa_path_rec *p = id->route.path_rec;

	(void)alt;
	CHECK(p != NULL);
	CHECK_EQ(id->route.num_paths, 1);
	CHECK_EQ(p[0].slid, 0);
	CHECK_EQ(p[0].dlid, 0);
	CHECK_EQ(be16toh(p[0].pkey), 0xffff);
	CHECK_EQ(p[0].packet_life_time, RCM_ROCE_PACKET_LIFE);
}

/* AF_IB: the route as on InfiniBand, the addresses cma_save_ib_info's,
 * the private data from byte 0. */
static void check_af_ib(const struct rdma_cm_event *ev, int alt)
{
	const struct sockaddr_ib *src = (const void *)&ev->id->route.addr.src_addr;
	const struct sockaddr_ib *dst = (const void *)&ev->id->route.addr.dst_addr;

	check_ib(ev, alt);
	CHECK_EQ(src->sib_family, AF_IB);
	CHECK_EQ(dst->sib_family, AF_IB);
	CHECK(!memcmp(src->sib_addr.sib_raw, GID_REQ_REMOTE, 16));
	CHECK(!memcmp(dst->sib_addr.sib_raw, GID_REQ_LOCAL, 16));
	CHECK_EQ(be16toh(src->sib_pkey), 0x7fff);
	CHECK_EQ(be16toh(dst->sib_pkey), 0x7fff);
	CHECK_EQ(be32toh(src->sib_flowinfo), 0x12345);
	CHECK_EQ(be64toh(src->sib_sid), cep_rdma_service_id(CEP_RDMA_PS_TCP, PORT_RDMA));
	CHECK_EQ(be64toh(src->sib_sid_mask), ~0ull);
	CHECK_EQ(rdma_get_src_port(ev->id), htons(PORT_RDMA));
	CHECK(ev->param.conn.private_data != NULL);
	CHECK(!memcmp(ev->param.conn.private_data, "\x7fhello", 7));
}

static void t_primary(void)
{
	one_req(IBV_LINK_LAYER_INFINIBAND, 0, check_ib, 0x9500, 0);
}

static void t_alternate(void)
{
	one_req(IBV_LINK_LAYER_INFINIBAND, 1, check_ib, 0x9501, 0);
}

static void t_roce(void)
{
	one_req(IBV_LINK_LAYER_ETHERNET, 1, check_roce, 0x9502, 0);
}

static void t_af_ib(void)
{
	one_req(IBV_LINK_LAYER_INFINIBAND, 0, check_af_ib, 0x9503, 1);
}

/* An active AF_IB id of @ps and @qpt on a stand-in InfiniBand port of A's
 * CM, where rdma_resolve_addr / rdma_resolve_route on AF_IB leave it: its
 * source GID_REQ_LOCAL with service ID @src_sid, its destination
 * GID_REQ_REMOTE with @dst_sid, a given path from A's LID to raw C's. */
static struct rcm_id *af_ib_active(struct rcm_channel *ch, struct rcm_dev *dev,
				   struct rcm_port *port, int ps, enum ibv_qp_type qpt,
				   uint64_t src_sid, uint64_t dst_sid)
{
	struct ibv_sa_path_rec path;
	struct sockaddr_ib *src, *dst;
	struct rcm_id *r;

	standin_port(dev, port, A.cm, IBV_LINK_LAYER_INFINIBAND);
	dev->attr.local_ca_ack_delay = 16;
	port->info.active_mtu = IBV_MTU_2048;
	port->info.port_num = 1;
	port->info.link_layer = IBV_LINK_LAYER_INFINIBAND;
	r = rcm_id_new(ch, NULL, ps, qpt);
	CHECK(r != NULL);
	if (!r)
		exit(check_done("af_ib_active"));
	src = (struct sockaddr_ib *)&r->id.route.addr.src_storage;
	dst = (struct sockaddr_ib *)&r->id.route.addr.dst_storage;
	src->sib_family = dst->sib_family = AF_IB;
	memcpy(src->sib_addr.sib_raw, GID_REQ_LOCAL, 16);
	memcpy(dst->sib_addr.sib_raw, GID_REQ_REMOTE, 16);
	src->sib_sid = htobe64(src_sid);
	src->sib_sid_mask = htobe64(~0ull);
	dst->sib_sid = htobe64(dst_sid);
	dst->sib_sid_mask = htobe64(~0ull);
	r->port = port;
	r->id.port_num = 1;
	memcpy(r->id.route.addr.addr.ibaddr.sgid.raw, GID_REQ_LOCAL, 16);
	memcpy(r->id.route.addr.addr.ibaddr.dgid.raw, GID_REQ_REMOTE, 16);
	memset(&path, 0, sizeof(path));
	memcpy(path.sgid.raw, GID_REQ_LOCAL, 16);
	memcpy(path.dgid.raw, GID_REQ_REMOTE, 16);
	path.slid = htobe16(LID_A);
	path.dlid = htobe16(LID_C);
	path.pkey = htobe16(0xffff);
	path.mtu = IBV_MTU_2048;
	path.mtu_selector = path.rate_selector = path.packet_life_time_selector = 2;
	path.rate = 3;
	path.packet_life_time = 14;
	path.reversible = htobe32(1);
	path.numb_path = 1;
	r->id.route.path_rec = malloc(sizeof(path));
	CHECK(r->id.route.path_rec != NULL);
	memcpy(r->id.route.path_rec, &path, sizeof(path));
	r->id.route.num_paths = 1;
	r->route_given = 1;
	r->state = RCM_ROUTE_RESOLVED;
	return r;
}

/* An AF_IB id's REQ (from A's CM to raw C): the service ID is the
 * destination's sib_sid, here in the IB port space, and the private data
 * is the user's from byte 0, no CMA header. */
static void t_connect(void)
{
	/* a TCP-space ID on an IB id: sent as given, not rebuilt from the port */
	const uint64_t sid = cep_rdma_service_id(CEP_RDMA_PS_TCP, 0x4242);
	struct rdma_conn_param cp = { .qp_num = 0x777, .private_data = "abc",
				      .private_data_len = 4, .retry_count = 7,
				      .rnr_retry_count = 7 };
	struct rcm_channel *ch;
	struct rcm_dev dev;
	struct rcm_port port;
	struct rcm_id *r;
	struct cep_msg q;

	setup(2, 0);
	ch = rcm_channel_new();
	CHECK(ch != NULL);
	r = af_ib_active(ch, &dev, &port, RDMA_PS_IB, IBV_QPT_RC,
			 cep_rdma_service_id(CEP_RDMA_PS_IB, 0x9999), sid);
	if (rdma_connect(&r->id, &cp))
		perror("rdma_connect");
	CHECK_EQ(r->state, RCM_CONNECT);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	q = raw_last(CEP_MSG_REQ);
	CHECK_EQ(q.u.req.service_id, sid);
	CHECK(!memcmp(q.u.req.private_data, "abc", 4));
	CHECK_EQ(q.u.req.local_qpn, 0x777);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	teardown_all();
	free(port.qpns);
	rcm_channel_free(ch);
}

/* An AF_IB UD id's SIDR_REQ (A's CM to raw C) answered by C with a
 * SIDR_REP of Q_Key @qkey, the id's own Q_Key @ours before (0: unset, no
 * QP yet): the event is ESTABLISHED with the peer's Q_Key, which becomes
 * the id's, or, for none or another than the id's, ADDR_ERROR -EINVAL, as
 * the kernel's cma_sidr_rep_handler (cma_set_qkey). */
static void sidr_qkey(uint32_t ours, uint32_t qkey, enum rdma_cm_event_type want)
{
	const uint64_t sid = cep_rdma_service_id(CEP_RDMA_PS_UDP, 0x4343);
	struct rdma_conn_param cp = { .qp_num = 0x778 };
	struct rdma_cm_event *ev;
	struct rcm_channel *ch;
	struct rcm_dev dev;
	struct rcm_port port;
	struct pollfd pf;
	struct rcm_id *r;
	struct cep_msg q, m;

	setup(2, 0);
	ch = rcm_channel_new();
	CHECK(ch != NULL);
	r = af_ib_active(ch, &dev, &port, RDMA_PS_UDP, IBV_QPT_UD,
			 cep_rdma_service_id(CEP_RDMA_PS_UDP, 0x9998), sid);
	r->qkey = ours; /* as rdma_create_qp's INIT leaves it */
	CHECK_EQ(rdma_connect(&r->id, &cp), 0);
	CHECK(raw_wait(CEP_MSG_SIDR_REQ, 1));
	q = raw_last(CEP_MSG_SIDR_REQ);
	CHECK_EQ(q.u.sidr_req.service_id, sid);
	cep_msg_init(&m, CEP_MSG_SIDR_REP, q.hdr.tid);
	m.u.sidr_rep.request_id = q.u.sidr_req.request_id;
	m.u.sidr_rep.status = CEP_SIDR_SUCCESS;
	m.u.sidr_rep.qpn = 0x5a5a;
	m.u.sidr_rep.qkey = qkey;
	raw_send(&m, LID_A);
	pf.fd = ch->ch.fd;
	pf.events = POLLIN;
	CHECK_EQ(poll(&pf, 1, 5000), 1);
	CHECK_EQ(rdma_get_cm_event(&ch->ch, &ev), 0);
	CHECK_EQ(ev->event, want);
	if (want == RDMA_CM_EVENT_ESTABLISHED) {
		CHECK_EQ(ev->param.ud.qkey, qkey);
		CHECK_EQ(ev->param.ud.qp_num, 0x5a5a);
		CHECK_EQ(r->qkey, qkey);
	} else {
		CHECK_EQ(ev->status, -EINVAL);
		CHECK_EQ(r->qkey, ours);
	}
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	teardown_all();
	free(port.qpns);
	rcm_channel_free(ch);
}

static void t_sidr_qkey(void)
{
	sidr_qkey(0, 0x11111111, RDMA_CM_EVENT_ESTABLISHED);        /* taken */
	sidr_qkey(RDMA_UDP_QKEY, RDMA_UDP_QKEY, RDMA_CM_EVENT_ESTABLISHED);
	sidr_qkey(RDMA_UDP_QKEY, 0x11111111, RDMA_CM_EVENT_ADDR_ERROR); /* not ours */
	sidr_qkey(0, 0, RDMA_CM_EVENT_ADDR_ERROR);                   /* none */
}

/* A SIDR_REQ to an AF_IB listener of the UDP space on an InfiniBand port,
 * sent from C with a GRH: the new id's source is the listener's, its
 * destination the SIDR_REQ's P_Key and the GRH's source GID - C's (the
 * kernel's cma_save_ib_info leaves both out for a SIDR id). Without a GRH
 * the destination GID stays unknown (zero), the P_Key still set. */
static void sidr_to_af_ib(int grh)
{
	struct standin s;
	struct rcm_service udp;
	struct rcm_id *ul;
	struct cep_cm_id *lu;
	struct cep_port_info ci;
	struct cep_mad_addr to = { .lid = LID_B, .qpn = 1, .qkey = CEP_QP1_QKEY,
				   .grh_present = (uint8_t)grh, .hop_limit = 1 };
	struct rdma_cm_event *ev = NULL;
	struct sockaddr_ib *lsib;
	const struct sockaddr_ib *src, *dst;
	uint8_t mad[CEP_MAD_SIZE], zero[16] = { 0 };
	struct cep_msg m;

	setup(2, 0);
	standin_open(&s, IBV_LINK_LAYER_INFINIBAND, 0);
	lu = service_listener(&udp, CEP_RDMA_PS_UDP);
	udp.port = &s.port;
	rdma_listener(&udp, s.ch, RDMA_PS_UDP, IBV_QPT_UD, &ul);
	lsib = (struct sockaddr_ib *)&ul->id.route.addr.src_storage;
	lsib->sib_family = AF_IB;
	memcpy(lsib->sib_addr.sib_raw, GID_REQ_REMOTE, 16);
	lsib->sib_pkey = htobe16(0xffff);
	lsib->sib_sid = htobe64(udp.sid);
	lsib->sib_sid_mask = htobe64(~0ull);
	CHECK_EQ(C.tp->ops->query_port(C.tp, &ci), 0);

	cep_msg_init(&m, CEP_MSG_SIDR_REQ, 0x5171);
	m.u.sidr_req.request_id = 0x9701;
	m.u.sidr_req.service_id = udp.sid;
	m.u.sidr_req.partition_key = 0x8001;
	memcpy(m.u.sidr_req.private_data, "\x7fudp", 5); /* no CMA header */
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(C.tp->ops->send(C.tp, mad, sizeof(mad), &to), 0);
	CHECK_EQ(poll(&(struct pollfd){ .fd = s.ch->ch.fd, .events = POLLIN }, 1, 5000), 1);
	CHECK_EQ(rdma_get_cm_event(&s.ch->ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(!memcmp(ev->param.ud.private_data, "\x7fudp", 5));
	src = (const void *)&ev->id->route.addr.src_addr;
	dst = (const void *)&ev->id->route.addr.dst_addr;
	CHECK_EQ(src->sib_family, AF_IB);
	CHECK(!memcmp(src->sib_addr.sib_raw, GID_REQ_REMOTE, 16));
	CHECK_EQ(be64toh(src->sib_sid), udp.sid);
	CHECK_EQ(dst->sib_family, AF_IB);
	CHECK_EQ(be16toh(dst->sib_pkey), 0x8001);
	CHECK(!memcmp(dst->sib_addr.sib_raw, grh ? ci.gid : zero, 16));
	CHECK(!memcmp(ev->id->route.addr.addr.ibaddr.dgid.raw, grh ? ci.gid : zero, 16));
	CHECK_EQ(rdma_reject(ev->id, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_SIDR_REP, 1));
	CHECK_EQ(raw_last(CEP_MSG_SIDR_REP).u.sidr_rep.status, CEP_SIDR_REJECT);
	struct rdma_cm_id *c = ev->id;

	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(lu), 0);
	udp.nlisteners = 0;
	rcm_id_put(ul);
	standin_teardown(c, &s);
}

static void t_sidr_af_ib(void)
{
	sidr_to_af_ib(1);
}

static void t_sidr_af_ib_no_grh(void)
{
	sidr_to_af_ib(0);
}

/* XRC (issue 28), the active side: an AF_IB id of an XRC send QP (no QP
 * here: the number given, as rdma_connect allows) sends the kernel's REQ
 * for IB_QPT_XRC_INI (transport service type 3, extended transport 1, no
 * responder resources, retry counts or SRQ; its initiator depth); the
 * target's REP (local QPN 0, its QP in the local EECN) is
 * CONNECT_RESPONSE with that QP as qp_num (the kernel's
 * cm_format_rep_event), the initiator's RTR names it without a
 * responder's limits, and rdma_establish sends the RTU. An XRC receive id
 * answers and does not connect: EINVAL. */
static void t_xrc_connect(void)
{
	const uint64_t sid = cep_rdma_service_id(CEP_RDMA_PS_IB, 0x4444);
	struct rdma_conn_param cp = { .qp_num = 0x779, .initiator_depth = 3,
				      .responder_resources = 2, .retry_count = 7,
				      .rnr_retry_count = 7, .srq = 1 };
	struct rdma_cm_event *ev;
	struct rcm_channel *ch;
	struct rcm_dev dev, dev2;
	struct rcm_port port, port2;
	struct ibv_qp_attr a;
	struct rcm_id *r, *t;
	struct cep_msg q, m;
	int mask;

	setup(2, 0);
	ch = rcm_channel_new();
	CHECK(ch != NULL);
	t = af_ib_active(ch, &dev2, &port2, RDMA_PS_IB, IBV_QPT_XRC_RECV,
			 cep_rdma_service_id(CEP_RDMA_PS_IB, 0x9997), sid);
	CHECK_EQ(rdma_connect(&t->id, &cp), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 0);
	CHECK_EQ(rdma_destroy_id(&t->id), 0);
	free(port2.qpns);
	r = af_ib_active(ch, &dev, &port, RDMA_PS_IB, IBV_QPT_XRC_SEND,
			 cep_rdma_service_id(CEP_RDMA_PS_IB, 0x9996), sid);
	CHECK_EQ(rdma_connect(&r->id, &cp), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	q = raw_last(CEP_MSG_REQ);
	CHECK_EQ(q.u.req.service_id, sid);
	CHECK_EQ(q.u.req.local_qpn, 0x779);
	CHECK_EQ(q.u.req.transport_service_type, CEP_TS_EXTENDED);
	CHECK_EQ(q.u.req.extended_transport_type, CEP_EXT_TRANSPORT_XRC);
	CHECK_EQ(q.u.req.initiator_depth, 3);
	CHECK_EQ(q.u.req.responder_resources, 0);
	CHECK_EQ(q.u.req.retry_count, 0);
	CHECK_EQ(q.u.req.rnr_retry_count, 0);
	CHECK_EQ(q.u.req.srq, 0);
	raw_rep(&m, 0x7200, 0);
	m.u.rep.local_eecn = 0x5b5b;
	m.u.rep.srq = 1;
	m.u.rep.responder_resources = 1;
	m.u.rep.rnr_retry_count = 7;
	m.u.rep.starting_psn = 0x777;
	raw_send(&m, LID_A);
	if (poll(&(struct pollfd){ .fd = ch->ch.fd, .events = POLLIN }, 1, 5000) != 1) {
		CHECK(!"CONNECT_RESPONSE"); /* never block on an empty channel */
		exit(check_done("xrc-connect"));
	}
	CHECK_EQ(rdma_get_cm_event(&ch->ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK_EQ(ev->param.conn.qp_num, 0x5b5b);
	CHECK_EQ(ev->param.conn.srq, 1);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	a.qp_state = IBV_QPS_RTR;
	CHECK_EQ(rdma_init_qp_attr(&r->id, &a, &mask), 0);
	CHECK_EQ(a.dest_qp_num, 0x5b5b);
	CHECK_EQ(mask & (IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
	a.qp_state = IBV_QPS_RTS;
	CHECK_EQ(rdma_init_qp_attr(&r->id, &a, &mask), 0);
	CHECK(mask & IBV_QP_RETRY_CNT);
	CHECK_EQ(a.sq_psn, 0x777);
	CHECK_EQ(rdma_establish(&r->id), 0);
	CHECK(raw_wait(CEP_MSG_RTU, 1));
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	teardown_all();
	free(port.qpns);
	rcm_channel_free(ch);
}

/* Raw C's REQ (@xrc: an XRC initiator's) to the stand-in service's port,
 * kept in *@sent: the event it made on the listener's channel, or NULL
 * when none came within 1 s (refused). */
static struct rdma_cm_event *xrc_req(struct standin *s, uint32_t comm_id, int xrc,
				     struct cep_msg *sent)
{
	struct rdma_cm_event *ev = NULL;
	struct cep_cma_hdr h;
	struct cep_msg m;

	raw_req(&m, comm_id, 0x900);
	m.u.req.service_id = s->tcp.sid;
	if (xrc) {
		m.u.req.transport_service_type = CEP_TS_EXTENDED;
		m.u.req.extended_transport_type = CEP_EXT_TRANSPORT_XRC;
		m.u.req.initiator_depth = 2;
	}
	cep_cma_hdr_ipv4(&h, htonl(0x0a000001), 5555, htonl(0x0a000002), PORT_RDMA);
	CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 0, m.u.req.private_data,
				    sizeof(m.u.req.private_data)), CEP_CMA_HDR_SIZE);
	raw_send(&m, LID_B);
	settle();
	if (sent)
		*sent = m;
	if (poll(&(struct pollfd){ .fd = s->ch->ch.fd, .events = POLLIN }, 1, 1000) != 1)
		return NULL;
	CHECK_EQ(rdma_get_cm_event(&s->ch->ch, &ev), 0);
	return ev;
}

/* XRC, the passive side: an XRC REQ is for a listener of XRC receive ids
 * (the kernel's cma_ib_check_req_qp_type) - an RC listener refuses it
 * with REJ 28, an XRC one an RC REQ; the XRC listener's new id is an XRC
 * receive id, and its rdma_accept sends the target's REP (local QPN 0,
 * the QP in the local EECN, SRQ set, no initiator depth), its QP moved by
 * the target's attributes (RTR with the responder's limits, RTS the ACK
 * timeout alone). */
static void t_xrc_listen(void)
{
	struct standin s;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp = { .qp_num = 0x300,
				      .responder_resources = RDMA_MAX_RESP_RES,
				      .initiator_depth = RDMA_MAX_INIT_DEPTH,
				      .rnr_retry_count = 7 };
	struct ibv_qp_attr a;
	struct rdma_cm_id *c;
	struct cep_msg r, sent;
	int mask;

	setup(2, 0);
	standin_open(&s, IBV_LINK_LAYER_ETHERNET, 0);
	s.l->backlog = 8;
	CHECK(xrc_req(&s, 0x9600, 1, NULL) == NULL); /* RC listener, XRC REQ */
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_CONSUMER_DEFINED);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.remote_comm_id, 0x9600);
	s.l->id.qp_type = IBV_QPT_XRC_RECV; /* before any request: no lock */
	CHECK(xrc_req(&s, 0x9601, 0, NULL) == NULL); /* XRC listener, RC REQ */
	CHECK(raw_wait(CEP_MSG_REJ, 2));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.remote_comm_id, 0x9601);
	ev = xrc_req(&s, 0x9602, 1, &sent);
	CHECK(ev != NULL);
	if (!ev)
		exit(check_done("xrc-listen"));
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	c = ev->id;
	CHECK_EQ(c->qp_type, IBV_QPT_XRC_RECV);
	CHECK_EQ(ev->param.conn.qp_num, 0x900);
	CHECK_EQ(ev->param.conn.responder_resources, 2); /* its initiator depth */
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	standin_req_params(c, &sent.u.req);
	CHECK_EQ(rdma_accept(c, &cp), 0);
	CHECK(raw_wait(CEP_MSG_REP, 1));
	r = raw_last(CEP_MSG_REP);
	CHECK_EQ(r.u.rep.remote_comm_id, 0x9602);
	CHECK_EQ(r.u.rep.local_qpn, 0);
	CHECK_EQ(r.u.rep.local_eecn, 0x300);
	CHECK_EQ(r.u.rep.srq, 1);
	CHECK_EQ(r.u.rep.initiator_depth, 0);
	a.qp_state = IBV_QPS_RTR;
	CHECK_EQ(rdma_init_qp_attr(c, &a, &mask), 0);
	CHECK_EQ(a.dest_qp_num, 0x900);
	CHECK(mask & IBV_QP_MAX_DEST_RD_ATOMIC);
	a.qp_state = IBV_QPS_RTS;
	CHECK_EQ(rdma_init_qp_attr(c, &a, &mask), 0);
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT);
	standin_teardown(c, &s);
}

static const struct named_test tests[] = {
	{ "xrc-connect", t_xrc_connect },
	{ "xrc-listen", t_xrc_listen },
	{ "sidr-af-ib", t_sidr_af_ib },
	{ "sidr-af-ib-no-grh", t_sidr_af_ib_no_grh },
	{ "primary", t_primary },
	{ "alternate", t_alternate },
	{ "roce", t_roce },
	{ "af-ib", t_af_ib },
	{ "connect", t_connect },
	{ "sidr-qkey", t_sidr_qkey },
};

int main(int argc, char **argv)
{
	return run_named_test(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
