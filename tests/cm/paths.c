/* SPDX-License-Identifier: MIT */
/*
 * REQ path validation on a RoCE port (in-process fabric, GID routed): a
 * REQ whose primary remote port GID is not this port's gets REJ 12 with
 * our GID in the ARI (the kernel's cm_req_handler rejects a path it
 * cannot resolve to a local GID with IB_CM_REJ_INVALID_GID and that ARI);
 * a path MTU above the port's active MTU gets REJ 26 with the acceptable
 * MTU (IBTA table 109: 4 bits, the high nibble of the ARI's first byte);
 * a REQ for another partition (P_Key 0x1234, the port's is 0xffff) gets
 * REJ 12 with our GID too (the kernel's P_Key lookup in cm_init_av_by_path
 * fails; conformance scenario passive-req-unknown-pkey); every one of
 * these REJs names local comm ID 0, as the kernel's (no id survives);
 * a good REQ is delivered.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include <cep/clock.h>
#include <cep/cm.h>
#include <cep/fabric.h>

#include "../common/check.h"

static _Atomic int reqs;
static struct cep_msg last_rej;
static _Atomic int rejs;

static int on_b(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	if (ev->type == CEP_CM_EV_REQ_RECEIVED)
		atomic_fetch_add(&reqs, 1);
	return 0;
}

static void raw_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	struct cep_msg m;

	(void)ctx;
	(void)from;
	if (cep_msg_decode(mad, len, &m, NULL) == 0 && m.type == CEP_MSG_REJ) {
		last_rej = m;
		atomic_fetch_add(&rejs, 1);
	}
}

static void gid_of(uint8_t gid[16], uint64_t guid)
{
	memset(gid, 0, 16);
	gid[0] = 0xfe;
	gid[1] = 0x80;
	for (int i = 0; i < 8; i++)
		gid[8 + i] = (uint8_t)(guid >> (56 - 8 * i));
}

int main(void)
{
	struct cep_clock *clk;
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	struct cep_fabric *fab;
	struct cep_fabric_port_attr pa = { .size = sizeof(pa), .port_num = 1,
					   .link_layer = CEP_FABRIC_LINK_ROCE };
	struct cep_transport *tb, *tc;
	struct cep_cm *b;
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 2 };
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_b };
	struct cep_cm_id *l;
	struct cep_port_info pi;
	struct cep_mad_addr to = { .qpn = 1, .qkey = CEP_QP1_QKEY, .grh_present = 1 };
	uint8_t mad[CEP_MAD_SIZE];
	struct cep_msg m;

	CHECK_EQ(cep_clock_create(0, &clk), 0);
	fa.clock = clk;
	ca.clock = clk;
	CHECK_EQ(cep_fabric_create(&fa, &fab), 0);
	pa.ca_guid = 0xb;
	CHECK_EQ(cep_fabric_port_create(fab, &pa, &tb), 0);
	pa.ca_guid = 0xc;
	CHECK_EQ(cep_fabric_port_create(fab, &pa, &tc), 0);
	CHECK_EQ(tc->ops->start(tc, raw_recv, NULL), 0);
	ca.transport = tb;
	CHECK_EQ(cep_cm_create(&ca, &b), 0);
	CHECK_EQ(tb->ops->query_port(tb, &pi), 0);
	CHECK_EQ(pi.active_mtu, 3); /* a RoCE fabric port: 1024 */
	CHECK_EQ(cep_cm_create_id(b, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, 0x42, ~0ull), 0);
	gid_of(to.gid, 0xb);

	for (int k = 0; k < 4; k++) {
		cep_msg_init(&m, CEP_MSG_REQ, 0x100 + (uint64_t)k);
		m.u.req.local_comm_id = 0x7f60 + (uint32_t)k;
		m.u.req.service_id = 0x42;
		m.u.req.local_ca_guid = 0xc;
		m.u.req.local_qpn = 0x900 + (uint32_t)k;
		m.u.req.starting_psn = 1;
		m.u.req.remote_cm_response_timeout = 14;
		m.u.req.local_cm_response_timeout = 14;
		m.u.req.max_cm_retries = 3;
		m.u.req.partition_key = 0xffff;
		m.u.req.path_mtu = 3;
		m.u.req.primary.hop_limit = 64;
		m.u.req.primary.local_ack_timeout = 15;
		gid_of(m.u.req.primary.local_gid, 0xc);
		gid_of(m.u.req.primary.remote_gid, 0xb);
		if (k == 0)
			m.u.req.primary.remote_gid[15] ^= 0x55; /* not B's GID */
		else if (k == 1)
			m.u.req.path_mtu = 5;               /* 4096 > 1024 */
		else if (k == 2)
			m.u.req.partition_key = 0x1234;     /* not our partition */
		CHECK_EQ(cep_msg_encode(&m, mad), 0);
		CHECK_EQ(tc->ops->send(tc, mad, sizeof(mad), &to), 0);
		CHECK_EQ(cep_clock_quiesce(clk, 5000), 0);
		if (k == 0) {
			CHECK_EQ(atomic_load(&rejs), 1);
			CHECK_EQ(last_rej.u.rej.reason, CEP_REJ_INVALID_GID);
			CHECK_EQ(last_rej.u.rej.reject_info_length, 16);
			CHECK(!memcmp(last_rej.u.rej.ari, pi.gid, 16));
			CHECK_EQ(last_rej.u.rej.local_comm_id, 0);
		} else if (k == 1) {
			CHECK_EQ(atomic_load(&rejs), 2);
			CHECK_EQ(last_rej.u.rej.reason, CEP_REJ_INVALID_MTU);
			CHECK_EQ(last_rej.u.rej.reject_info_length, 1);
			CHECK_EQ(last_rej.u.rej.ari[0], 3 << 4);
			CHECK_EQ(last_rej.u.rej.local_comm_id, 0);
		} else if (k == 2) {
			CHECK_EQ(atomic_load(&rejs), 3);
			CHECK_EQ(last_rej.u.rej.reason, CEP_REJ_INVALID_GID);
			CHECK_EQ(last_rej.u.rej.reject_info_length, 16);
			CHECK(!memcmp(last_rej.u.rej.ari, pi.gid, 16));
			CHECK_EQ(last_rej.u.rej.local_comm_id, 0);
			CHECK_EQ(last_rej.u.rej.remote_comm_id, 0x7f62);
		} else {
			CHECK_EQ(atomic_load(&rejs), 3);
		}
	}
	CHECK_EQ(atomic_load(&reqs), 1);
	CHECK_EQ(cep_cm_destroy(b), 0);
	tb->ops->destroy(tb);
	tc->ops->destroy(tc);
	CHECK_EQ(cep_fabric_destroy(fab), 0);
	CHECK_EQ(cep_clock_destroy(clk), 0);
	return check_done("cm-req-path-roce");
}
