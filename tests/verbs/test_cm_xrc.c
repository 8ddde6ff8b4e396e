/* SPDX-License-Identifier: MIT */
/*
 * An XRC connection through the CM (issue 28): two nodes on the in-process
 * fabric, A's initiator QP connects to B's target QP. The REQ is the
 * kernel's for IB_QPT_XRC_INI (cm_format_req: transport service type 3,
 * extended transport 1, no responder resources, retry counts or SRQ), the
 * REP its for IB_QPT_XRC_TGT (cm_format_rep: local QPN 0, the target QP in
 * the local EECN, SRQ set, no initiator depth or flow control); each
 * side's QP attributes are the kernel's cm_init_qp_*_attr for its QP type
 * (the initiator's RTR without the responder's limits, the target's RTS
 * with the ACK timeout alone); the disconnect finds both ends (DREQ names
 * the target QP). An RD connect and an extended transport other than XRC
 * are refused. No device: rxe has no XRC (the guests cannot run one).
 */
#include <errno.h>
#include <string.h>

#include <cep/qp.h>
#include <cep/verbs.h>

#include "pair.h"

#define QA 0x1111 /* A's XRC initiator */
#define QB 0x2222 /* B's XRC target */
#define PSN_A 0x123456
#define PSN_B 0x654321
#define SID 0x78ull

static atomic_int est_a, est_b, dreq_b, exit_a;
static struct cep_cm_id *passive;
static struct cep_req req_seen;
static struct cep_rep rep_seen;

static int on_b(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = QB,
						  .starting_psn = PSN_B, .responder_resources = 2,
						  .initiator_depth = 3, .rnr_retry_count = 6,
						  .flow_control = 1 };

		req_seen = ev->msg.u.req;
		CHECK_EQ(cep_cm_accept(id, &ap), 0);
		passive = id;
	} else if (ev->type == CEP_CM_EV_RTU_RECEIVED) {
		atomic_store(&est_b, 1);
	} else if (ev->type == CEP_CM_EV_DREQ_RECEIVED) {
		atomic_store(&dreq_b, 1);
	}
	return 0;
}

static int on_a(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_REP_RECEIVED)
		rep_seen = ev->msg.u.rep;
	else if (ev->type == CEP_CM_EV_ESTABLISHED)
		atomic_store(&est_a, 1);
	else if (ev->type == CEP_CM_EV_TIMEWAIT_EXIT)
		atomic_store(&exit_a, 1);
	return 0;
}

static void conn(struct cep_cm_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->size = sizeof(*p);
	p->service_id = SID;
	p->qpn = QA;
	p->starting_psn = PSN_A;
	p->responder_resources = 4;
	p->initiator_depth = 5;
	p->remote_cm_response_timeout = 14;
	p->local_cm_response_timeout = 14;
	p->packet_life_time = 8;
	p->max_cm_retries = 5;
	p->retry_count = 6;
	p->rnr_retry_count = 5;
	p->path_mtu = 3;
	p->srq = 1;
	p->flow_control = 1;
	p->transport_service_type = CEP_TS_EXTENDED;
	/* RoCE: the ports' GIDs are fe80::guid */
	p->primary.local_gid[0] = p->primary.remote_gid[0] = 0xfe;
	p->primary.local_gid[1] = p->primary.remote_gid[1] = 0x80;
	p->primary.local_gid[14] = p->primary.remote_gid[14] = 0x01;
	p->primary.remote_gid[15] = 0x01;
	p->primary.hop_limit = 1;
	p->primary.local_ack_timeout = 10;
	p->primary.packet_rate = 3;
}

int main(void)
{
	struct pair pr;
	struct cep_cm_id *ida;
	struct cep_cm_conn_param p;
	struct cep_port_info port = { .port_num = 1, .link_layer = 2, .active_mtu = 3 };
	struct cep_qp_params qp;
	struct cep_req rq;
	struct ibv_qp_attr at;
	int mask;

	pair_open(&pr, CEP_FABRIC_LINK_ROCE, 1, NULL, QA, QB, SID, on_a, on_b);
	ida = pr.ida;

	/* no RD here, and transport 4 is no type */
	conn(&p);
	p.transport_service_type = CEP_TS_RD;
	CHECK_EQ(cep_cm_connect(ida, &p), -EINVAL);
	CHECK_EQ(cep_qp_params_active(&qp, &port, &p), -EINVAL);
	p.transport_service_type = 4;
	CHECK_EQ(cep_cm_connect(ida, &p), -EINVAL);
	CHECK_EQ(cep_cm_id_state(ida), CEP_CM_IDLE);

	conn(&p);
	CHECK_EQ(cep_cm_connect(ida, &p), 0);
	wait_flag(&est_a);
	wait_flag(&est_b);

	/* the REQ B read: the kernel's cm_format_req for IB_QPT_XRC_INI */
	CHECK_EQ(req_seen.transport_service_type, CEP_TS_EXTENDED);
	CHECK_EQ(req_seen.extended_transport_type, CEP_EXT_TRANSPORT_XRC);
	CHECK_EQ(req_seen.local_qpn, QA);
	CHECK_EQ(req_seen.initiator_depth, 5);
	CHECK_EQ(req_seen.end_to_end_flow_control, 1);
	CHECK_EQ(req_seen.responder_resources, 0);
	CHECK_EQ(req_seen.retry_count, 0);
	CHECK_EQ(req_seen.rnr_retry_count, 0);
	CHECK_EQ(req_seen.srq, 0);
	/* the REP A read: cm_format_rep for IB_QPT_XRC_TGT */
	CHECK_EQ(rep_seen.local_qpn, 0);
	CHECK_EQ(rep_seen.local_eecn, QB);
	CHECK_EQ(rep_seen.srq, 1);
	CHECK_EQ(rep_seen.initiator_depth, 0);
	CHECK_EQ(rep_seen.end_to_end_flow_control, 0);
	CHECK_EQ(rep_seen.responder_resources, 2);
	CHECK_EQ(rep_seen.rnr_retry_count, 6);
	CHECK_EQ(rep_seen.starting_psn, PSN_B);

	/* A, the initiator: RTR names the target QP, without a
	 * responder's limits; RTS a requester's */
	CHECK_EQ(cep_cm_init_qp_attr(ida, IBV_QPS_INIT, &at, &mask), 0);
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
	CHECK_EQ(cep_cm_init_qp_attr(ida, IBV_QPS_RTR, &at, &mask), 0);
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
	CHECK_EQ(at.dest_qp_num, QB);
	CHECK_EQ(at.rq_psn, PSN_A);
	CHECK_EQ(cep_cm_init_qp_attr(ida, IBV_QPS_RTS, &at, &mask), 0);
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	CHECK_EQ(at.sq_psn, PSN_B);
	CHECK_EQ(at.retry_cnt, 6);   /* ours: the REQ did not carry it */
	CHECK_EQ(at.rnr_retry, 6);   /* the REP's */
	CHECK_EQ(at.max_rd_atomic, 2); /* the target's responder resources */
	/* B, the target: RTR with a responder's limits, RTS the ACK
	 * timeout alone */
	CHECK_EQ(cep_cm_init_qp_attr(passive, IBV_QPS_INIT, &at, &mask), 0);
	CHECK(at.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
	CHECK_EQ(cep_cm_init_qp_attr(passive, IBV_QPS_RTR, &at, &mask), 0);
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	CHECK_EQ(at.dest_qp_num, QA);
	CHECK_EQ(at.max_dest_rd_atomic, 2);
	CHECK_EQ(cep_cm_init_qp_attr(passive, IBV_QPS_RTS, &at, &mask), 0);
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT);
	CHECK_EQ(at.sq_psn, PSN_A);
	CHECK(at.timeout > 0);

	/* The parameters alone: an XRC REP must say local QPN 0 and name
	 * the target in the EECN; an extended transport other than XRC is
	 * no REQ to answer */
	conn(&p);
	CHECK_EQ(cep_qp_params_active(&qp, &port, &p), 0);
	struct cep_rep rp = rep_seen;

	rp.local_qpn = QB;
	CHECK_EQ(cep_qp_params_active_rep(&qp, &rp), -EINVAL);
	rp = rep_seen;
	rp.local_eecn = 1;
	CHECK_EQ(cep_qp_params_active_rep(&qp, &rp), -EINVAL);
	CHECK_EQ(cep_qp_params_active_rep(&qp, &rep_seen), 0);
	CHECK_EQ(qp.dest_qpn, QB);
	rq = req_seen;
	CHECK_EQ(cep_qp_params_passive(&qp, &port, &rq), 0);
	CHECK_EQ(qp.transport, CEP_TS_EXTENDED);
	rq.extended_transport_type = 2;
	CHECK_EQ(cep_qp_params_passive(&qp, &port, &rq), -EINVAL);

	/* the disconnect reaches the target's end (the DREQ names QB) */
	CHECK_EQ(cep_cm_disconnect(ida, NULL, 0), 0);
	wait_flag(&dreq_b);
	wait_flag(&exit_a);

	CHECK_EQ(cep_cm_destroy_id_sync(ida), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(passive), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(pr.listener), 0);
	pair_close(&pr);
	return check_done("cm-xrc");
}
