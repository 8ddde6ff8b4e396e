/* SPDX-License-Identifier: MIT */
/*
 * Verbs glue unit test: QP attributes and masks for INIT, RTR and RTS on
 * both sides of one known connection (RoCE and InfiniBand ports), the two
 * sides' consistency, the ACK timeout rule, the CM-state table and the
 * errors. No device needed.
 */
#include <errno.h>
#include <string.h>

#include <cep/verbs.h>

#include "../common/check.h"

static const uint8_t gid_a[16] = { [10] = 0xff, [11] = 0xff, 10, 77, 0, 1 };
static const uint8_t gid_b[16] = { [10] = 0xff, [11] = 0xff, 10, 77, 0, 2 };

/* The kernel CM's rule, written as its two branches, as an oracle. */
static unsigned oracle_ack_timeout(unsigned delay, unsigned plt)
{
	unsigned t = plt + 1;

	if (t >= delay)
		t += delay >= t - 1;
	else
		t = delay + (t + 1 >= delay);
	return t > 31 ? 31 : t;
}

static struct cep_port_info port(uint8_t link, uint8_t gid_index, uint8_t mtu)
{
	struct cep_port_info p;

	memset(&p, 0, sizeof(p));
	p.port_num = 1;
	p.link_layer = link;
	p.gid_index = gid_index;
	p.active_mtu = mtu;
	p.lid = link == 1 ? 7 : 0;
	return p;
}

/* Active side's connect parameters, a -> b. */
static struct cep_cm_conn_param conn_param(void)
{
	struct cep_cm_conn_param c;

	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	c.service_id = 0x0000000001060000ull | 7471;
	memcpy(c.primary.local_gid, gid_a, 16);
	memcpy(c.primary.remote_gid, gid_b, 16);
	c.primary.local_lid = 0;
	c.primary.remote_lid = 0;
	c.primary.flow_label = 0x12345;
	c.primary.packet_rate = 3;
	c.primary.traffic_class = 0x20;
	c.primary.hop_limit = 64;
	c.primary.sl = 2;
	c.primary.local_ack_timeout = 18;
	c.qpn = 0x000123;
	c.starting_psn = 0xabcdef;
	c.responder_resources = 4;
	c.initiator_depth = 8;
	c.packet_life_time = 16;
	c.retry_count = 6;
	c.rnr_retry_count = 5;
	c.path_mtu = 0; /* port's */
	c.transport_service_type = CEP_TS_RC;
	return c;
}

/* The REQ that conn_param() produces, as b decodes it. */
static struct cep_req req_of(const struct cep_cm_conn_param *c, uint8_t mtu)
{
	struct cep_req r;

	memset(&r, 0, sizeof(r));
	r.local_comm_id = 0x1111;
	r.service_id = c->service_id;
	r.local_qpn = c->qpn;
	r.responder_resources = c->responder_resources;
	r.initiator_depth = c->initiator_depth;
	r.transport_service_type = c->transport_service_type;
	r.starting_psn = c->starting_psn;
	r.retry_count = c->retry_count;
	r.partition_key = 0xffff;
	r.path_mtu = mtu;
	r.rnr_retry_count = c->rnr_retry_count;
	r.primary = c->primary;
	return r;
}

static struct cep_cm_accept_param accept_param(void)
{
	struct cep_cm_accept_param a;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.qpn = 0x000456;
	a.starting_psn = 0x010203;
	a.responder_resources = 8; /* <= REQ initiator depth */
	a.initiator_depth = 2;     /* <= REQ responder resources */
	a.target_ack_delay = 15;
	a.rnr_retry_count = 7;
	a.failover_accepted = CEP_FAILOVER_ACCEPTED;
	return a;
}

static struct cep_rep rep_of(const struct cep_cm_accept_param *a)
{
	struct cep_rep r;

	memset(&r, 0, sizeof(r));
	r.local_comm_id = 0x2222;
	r.remote_comm_id = 0x1111;
	r.local_qpn = a->qpn;
	r.starting_psn = a->starting_psn;
	r.responder_resources = a->responder_resources;
	r.initiator_depth = a->initiator_depth;
	r.target_ack_delay = a->target_ack_delay;
	r.failover_accepted = a->failover_accepted;
	r.rnr_retry_count = a->rnr_retry_count;
	return r;
}

static const int init_mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
			     IBV_QP_PORT;
static const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
static const int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
static const unsigned rw_all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

static void test_roce_both_sides(void)
{
	struct cep_port_info pa = port(2, 1, 3), pb = port(2, 1, 3);
	struct cep_cm_conn_param c = conn_param();
	struct cep_req req = req_of(&c, 3);
	struct cep_cm_accept_param acc = accept_param();
	struct cep_rep rep = rep_of(&acc);
	struct cep_qp_params a, b;
	struct ibv_qp_attr at;
	int mask;

	/* ---- active side, before the REP: INIT only ---- */
	CHECK_EQ(cep_qp_params_active(&a, &pa, &c), 0);
	CHECK_EQ(a.role, CEP_QP_ROLE_ACTIVE);
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_INIT, &at, &mask), 0);
	CHECK_EQ(mask, init_mask);
	CHECK_EQ(at.qp_state, IBV_QPS_INIT);
	CHECK_EQ(at.port_num, 1);
	CHECK_EQ(at.pkey_index, 0);
	CHECK_EQ(at.qp_access_flags, rw_all); /* responder resources 4 > 0 */
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_RTR, &at, &mask), -ENODATA);
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_RTS, &at, &mask), -ENODATA);

	/* ---- passive side from the REQ ---- */
	CHECK_EQ(cep_qp_params_passive(&b, &pb, &req), 0);
	CHECK_EQ(b.role, CEP_QP_ROLE_PASSIVE);
	CHECK_EQ(cep_qp_params_init_attr(&b, IBV_QPS_INIT, &at, &mask), 0);
	CHECK_EQ(mask, init_mask);
	CHECK_EQ(at.qp_access_flags, rw_all); /* REQ initiator depth 8 > 0 */
	/* RTR needs our RQ PSN, which only the accept gives. */
	CHECK_EQ(cep_qp_params_init_attr(&b, IBV_QPS_RTR, &at, &mask), -ENODATA);
	CHECK_EQ(cep_qp_params_init_attr(&b, IBV_QPS_RTS, &at, &mask), -ENODATA);

	CHECK_EQ(cep_qp_params_passive_accept(&b, &acc), 0);
	CHECK_EQ(cep_qp_params_init_attr(&b, IBV_QPS_RTR, &at, &mask), 0);
	CHECK_EQ(mask, rtr_mask);
	CHECK_EQ(at.qp_state, IBV_QPS_RTR);
	CHECK_EQ(at.dest_qp_num, 0x123);
	CHECK_EQ(at.rq_psn, 0x010203);      /* the REP's (our) starting PSN */
	CHECK_EQ(at.path_mtu, IBV_MTU_1024);
	CHECK_EQ(at.max_dest_rd_atomic, 8); /* accept's responder resources */
	CHECK_EQ(at.min_rnr_timer, 0);
	CHECK_EQ(at.ah_attr.is_global, 1);
	CHECK_EQ(at.ah_attr.dlid, 0);
	CHECK(memcmp(at.ah_attr.grh.dgid.raw, gid_a, 16) == 0); /* back to a */
	CHECK_EQ(at.ah_attr.grh.sgid_index, 1);
	CHECK_EQ(at.ah_attr.grh.hop_limit, 64);
	CHECK_EQ(at.ah_attr.grh.traffic_class, 0x20);
	CHECK_EQ(at.ah_attr.grh.flow_label, 0x12345);
	CHECK_EQ(at.ah_attr.sl, 2);
	CHECK_EQ(at.ah_attr.static_rate, 3);
	CHECK_EQ(at.ah_attr.port_num, 1);
	CHECK_EQ(cep_qp_params_init_attr(&b, IBV_QPS_RTS, &at, &mask), 0);
	CHECK_EQ(mask, rts_mask);
	CHECK_EQ(at.qp_state, IBV_QPS_RTS);
	CHECK_EQ(at.sq_psn, 0xabcdef);      /* the REQ's starting PSN */
	CHECK_EQ(at.timeout, 18);      /* the REQ's local ACK timeout */
	CHECK_EQ(at.retry_cnt, 6);     /* the REQ's retry count */
	CHECK_EQ(at.rnr_retry, 5);     /* the REQ's RNR retry count */
	CHECK_EQ(at.max_rd_atomic, 2); /* accept's initiator depth */

	/* ---- active side after the REP ---- */
	CHECK_EQ(cep_qp_params_active_rep(&a, &rep), 0);
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_RTR, &at, &mask), 0);
	CHECK_EQ(mask, rtr_mask);
	CHECK_EQ(at.dest_qp_num, 0x456);
	CHECK_EQ(at.rq_psn, 0xabcdef);       /* the REQ's (our) starting PSN */
	CHECK_EQ(at.path_mtu, IBV_MTU_1024); /* port's active MTU, as the REQ */
	CHECK_EQ(at.max_dest_rd_atomic, 2);  /* REP initiator depth */
	CHECK(memcmp(at.ah_attr.grh.dgid.raw, gid_b, 16) == 0);
	CHECK_EQ(at.ah_attr.is_global, 1);
	CHECK_EQ(at.ah_attr.grh.sgid_index, 1);
	CHECK_EQ(at.ah_attr.grh.flow_label, 0x12345);
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_RTS, &at, &mask), 0);
	CHECK_EQ(mask, rts_mask);
	CHECK_EQ(at.sq_psn, 0x010203);  /* the REP's starting PSN */
	CHECK_EQ(at.max_rd_atomic, 8);  /* REP responder resources */
	CHECK_EQ(at.retry_cnt, 6);      /* our retry count */
	CHECK_EQ(at.rnr_retry, 7);      /* REP RNR retry count */
	CHECK_EQ(at.timeout, oracle_ack_timeout(15, 16)); /* 17 */
	CHECK_EQ(at.timeout, 17);

	/* The two sides agree: each one's RQ PSN is the other's SQ PSN, each
	 * one's destination is the other's QP, reads fit the resources. And
	 * as the kernel CM: the REQ's PSN is the active side's RQ PSN. */
	CHECK_EQ(a.rq_psn, req.starting_psn);
	CHECK_EQ(b.sq_psn, req.starting_psn);
	CHECK_EQ(a.sq_psn, rep.starting_psn);
	CHECK_EQ(b.rq_psn, rep.starting_psn);
	CHECK_EQ(a.dest_qpn, b.local_qpn);
	CHECK_EQ(b.dest_qpn, a.local_qpn);
	CHECK_EQ(a.rq_psn, b.sq_psn);
	CHECK_EQ(b.rq_psn, a.sq_psn);
	CHECK(a.max_rd_atomic <= b.max_dest_rd_atomic);
	CHECK(b.max_rd_atomic <= a.max_dest_rd_atomic);
	CHECK_EQ(a.path_mtu, b.path_mtu);
}

static void test_infiniband_alt_and_uc(void)
{
	struct cep_port_info pa = port(1, 0, 5), pb = port(1, 0, 5);
	struct cep_cm_conn_param c = conn_param();
	struct cep_cm_accept_param acc = accept_param();
	struct cep_qp_params a, b;
	struct ibv_qp_attr at;
	struct cep_req req;
	struct cep_rep rep;
	int mask;

	c.primary.local_lid = 7;
	c.primary.remote_lid = 9;
	c.primary.subnet_local = 1;
	c.primary.hop_limit = 0;
	c.alternate = c.primary;
	c.alternate.local_lid = 17;
	c.alternate.remote_lid = 19;
	c.alternate.sl = 3;
	c.path_mtu = 4;
	c.responder_resources = 0;
	req = req_of(&c, 4);
	req.alternate = c.alternate;

	CHECK_EQ(cep_qp_params_passive(&b, &pb, &req), 0);
	acc.failover_accepted = CEP_FAILOVER_ACCEPTED;
	acc.responder_resources = 0;
	CHECK_EQ(cep_qp_params_passive_accept(&b, &acc), 0);
	CHECK_EQ(cep_qp_params_init_attr(&b, IBV_QPS_RTR, &at, &mask), 0);
	CHECK_EQ(mask, rtr_mask | IBV_QP_ALT_PATH);
	CHECK_EQ(at.ah_attr.is_global, 0);   /* subnet local on IB: no GRH */
	CHECK_EQ(at.ah_attr.dlid, 7);        /* the REQ's local LID */
	CHECK_EQ(at.ah_attr.grh.hop_limit, 0);
	CHECK_EQ(at.alt_ah_attr.dlid, 17);
	CHECK_EQ(at.alt_ah_attr.sl, 3);
	CHECK_EQ(at.alt_port_num, 1);
	CHECK_EQ(at.alt_timeout, 18);
	CHECK_EQ(at.path_mtu, IBV_MTU_2048);
	CHECK_EQ(cep_qp_params_init_attr(&b, IBV_QPS_INIT, &at, &mask), 0);
	/* No responder resources: no remote reads or atomics. */
	CHECK_EQ(at.qp_access_flags, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK_EQ(cep_qp_params_init_attr(&b, IBV_QPS_RTS, &at, &mask), 0);
	CHECK_EQ(mask, rts_mask | IBV_QP_PATH_MIG_STATE);
	CHECK_EQ(at.path_mig_state, IBV_MIG_REARM);

	/* Active side: the REP refuses failover -> no alternate path. */
	CHECK_EQ(cep_qp_params_active(&a, &pa, &c), 0);
	CHECK_EQ(a.has_alternate, 1);
	acc.failover_accepted = CEP_FAILOVER_REJECTED;
	rep = rep_of(&acc);
	CHECK_EQ(cep_qp_params_active_rep(&a, &rep), 0);
	CHECK_EQ(a.has_alternate, 0);
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_RTR, &at, &mask), 0);
	CHECK_EQ(mask, rtr_mask);
	CHECK_EQ(at.ah_attr.dlid, 9);
	CHECK_EQ(at.path_mtu, IBV_MTU_2048);
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_RTS, &at, &mask), 0);
	CHECK_EQ(mask, rts_mask);

	/* UC: no read/atomic, RNR or ACK timeout attributes. */
	c.transport_service_type = CEP_TS_UC;
	c.alternate = (struct cep_path){ 0 };
	CHECK_EQ(cep_qp_params_active(&a, &pa, &c), 0);
	CHECK_EQ(cep_qp_params_active_rep(&a, &rep), 0);
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_RTR, &at, &mask), 0);
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		       IBV_QP_RQ_PSN);
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_RTS, &at, &mask), 0);
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN);
	CHECK_EQ(cep_qp_params_init_attr(&a, IBV_QPS_INIT, &at, &mask), 0);
	CHECK_EQ(at.qp_access_flags, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

static void test_ack_timeout(void)
{
	for (unsigned d = 0; d < 32; d++)
		for (unsigned p = 0; p < 32; p++)
			CHECK_EQ(cep_qp_ack_timeout((uint8_t)d, (uint8_t)p),
				 oracle_ack_timeout(d, p));
	CHECK_EQ(cep_qp_ack_timeout(15, 14), 16); /* 2^15 + 2^15 */
	CHECK_EQ(cep_qp_ack_timeout(0, 14), 15);  /* delay negligible */
	CHECK_EQ(cep_qp_ack_timeout(31, 31), 31); /* capped */
}

static void test_state_table(void)
{
	static const enum ibv_qp_state qs[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };

	for (unsigned s = 0; s < CEP_CM_STATE_COUNT; s++) {
		int connecting_or_up = s == CEP_CM_REQ_RCVD || s == CEP_CM_MRA_REQ_SENT ||
				       s == CEP_CM_REP_RCVD || s == CEP_CM_MRA_REP_SENT ||
				       s == CEP_CM_REP_SENT || s == CEP_CM_MRA_REP_RCVD ||
				       s == CEP_CM_ESTABLISHED;
		int sent_only = s == CEP_CM_REQ_SENT || s == CEP_CM_MRA_REQ_RCVD;

		for (unsigned i = 0; i < 3; i++) {
			int want = (connecting_or_up || (sent_only && i == 0)) ? 0 : -EINVAL;
			if (cep_qp_state_allowed((enum cep_cm_state)s, qs[i]) != want) {
				fprintf(stderr, "state %s qp %u: got %d\n",
					cep_cm_state_name(s), i,
					cep_qp_state_allowed((enum cep_cm_state)s, qs[i]));
				check_failures++;
			}
		}
		CHECK_EQ(cep_qp_state_allowed((enum cep_cm_state)s, IBV_QPS_RESET), -EINVAL);
		CHECK_EQ(cep_qp_state_allowed((enum cep_cm_state)s, IBV_QPS_ERR), -EINVAL);
	}
}

static void test_errors(void)
{
	struct cep_port_info pr = port(2, 1, 3), bad = port(0, 1, 3);
	struct cep_cm_conn_param c = conn_param();
	struct cep_req req = req_of(&c, 3);
	struct cep_cm_accept_param acc = accept_param();
	struct cep_rep rep = rep_of(&acc);
	struct cep_qp_params p, before;
	struct ibv_qp_attr at;
	int mask = 12345;

	memset(&p, 0x5a, sizeof(p));
	before = p;
	CHECK_EQ(cep_qp_params_active(&p, &bad, &c), -EINVAL);
	CHECK_EQ(cep_qp_params_active(&p, NULL, &c), -EINVAL);
	c.qpn = 1;
	CHECK_EQ(cep_qp_params_active(&p, &pr, &c), -EINVAL);
	c = conn_param();
	c.size = 8;
	CHECK_EQ(cep_qp_params_active(&p, &pr, &c), -EINVAL);
	c = conn_param();
	c.transport_service_type = CEP_TS_RD;
	CHECK_EQ(cep_qp_params_active(&p, &pr, &c), -EINVAL);
	req.path_mtu = 6;
	CHECK_EQ(cep_qp_params_passive(&p, &pr, &req), -EINVAL);
	c = conn_param();
	req = req_of(&c, 3);
	req.local_qpn = 0x1000000;
	CHECK_EQ(cep_qp_params_passive(&p, &pr, &req), -EINVAL);
	CHECK(memcmp(&p, &before, sizeof(p)) == 0); /* nothing changed */

	/* Steps out of order or on the wrong side. */
	c = conn_param();
	req = req_of(&c, 3);
	CHECK_EQ(cep_qp_params_passive(&p, &pr, &req), 0);
	CHECK_EQ(cep_qp_params_active_rep(&p, &rep), -EINVAL);
	CHECK_EQ(cep_qp_params_active(&p, &pr, &c), 0);
	CHECK_EQ(cep_qp_params_passive_accept(&p, &acc), -EINVAL);
	rep.local_qpn = 0;
	CHECK_EQ(cep_qp_params_active_rep(&p, &rep), -EINVAL);
	CHECK_EQ(p.have, CEP_QP_HAVE_INIT);

	/* States other than INIT/RTR/RTS. */
	CHECK_EQ(cep_qp_params_init_attr(&p, IBV_QPS_RESET, &at, &mask), -EINVAL);
	CHECK_EQ(cep_qp_params_init_attr(&p, IBV_QPS_SQD, &at, &mask), -EINVAL);
	CHECK_EQ(cep_qp_params_init_attr(&p, IBV_QPS_ERR, &at, &mask), -EINVAL);
	CHECK_EQ(mask, 12345);
	CHECK_EQ(cep_qp_params_init_attr(NULL, IBV_QPS_INIT, &at, &mask), -EINVAL);
	memset(&p, 0, sizeof(p));
	CHECK_EQ(cep_qp_params_init_attr(&p, IBV_QPS_INIT, &at, &mask), -EINVAL);
	CHECK_EQ(cep_verbs_modify_qp(NULL, &p, IBV_QPS_RTS), -EINVAL);
}

int main(void)
{
	test_roce_both_sides();
	test_infiniband_alt_and_uc();
	test_ack_timeout();
	test_state_table();
	test_errors();
	return check_done("verbs-qp-attr");
}
