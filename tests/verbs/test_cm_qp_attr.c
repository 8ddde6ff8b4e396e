/* SPDX-License-Identifier: MIT */
/*
 * cep_cm_init_qp_attr() through the CM: two nodes on the in-process fabric
 * connect, and each side's INIT/RTR/RTS attributes must name the peer's
 * QPN and cross the PSNs; states that do not allow a QP state refuse it.
 */
#include <errno.h>
#include <string.h>

#include <cep/verbs.h>

#include "pair.h"

#define QA 0x1111
#define QB 0x2222
#define PSN_A 0x123456
#define PSN_B 0x654321
#define SID 0x77ull

static atomic_int est_a, est_b, passive_checked;
static struct cep_cm_id *passive;

static int on_b(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct ibv_qp_attr attr;
	int mask;

	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = QB,
						  .starting_psn = PSN_B, .responder_resources = 2,
						  .initiator_depth = 3, .rnr_retry_count = 7 };

		/* From the REQ alone: INIT yes, RTR not before the accept. */
		CHECK_EQ(cep_cm_init_qp_attr(id, IBV_QPS_INIT, &attr, &mask), 0);
		CHECK(mask & IBV_QP_ACCESS_FLAGS);
		CHECK_EQ(cep_cm_init_qp_attr(id, IBV_QPS_RTR, &attr, &mask), -ENODATA);
		CHECK_EQ(cep_cm_init_qp_attr(id, IBV_QPS_SQD, &attr, &mask), -EINVAL);
		CHECK_EQ(cep_cm_accept(id, &ap), 0);
		passive = id;
		atomic_store(&passive_checked, 1);
	} else if (ev->type == CEP_CM_EV_RTU_RECEIVED) {
		atomic_store(&est_b, 1);
	}
	return 0;
}

static int on_a(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_ESTABLISHED)
		atomic_store(&est_a, 1);
	return 0;
}

int main(void)
{
	struct pair pr;
	struct cep_cm_id *ida;
	struct cep_cm_conn_param p;
	struct ibv_qp_attr at;
	int mask;

	pair_open(&pr, CEP_FABRIC_LINK_ROCE, 1, NULL, QA, QB, SID, on_a, on_b);
	ida = pr.ida;
	/* IDLE: nothing to give yet. */
	CHECK_EQ(cep_cm_init_qp_attr(ida, IBV_QPS_INIT, &at, &mask), -EINVAL);

	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = SID;
	p.qpn = QA;
	p.starting_psn = PSN_A;
	p.responder_resources = 4;
	p.initiator_depth = 4;
	p.remote_cm_response_timeout = 14;
	p.local_cm_response_timeout = 14;
	p.packet_life_time = 8;
	p.max_cm_retries = 5;
	p.retry_count = 6;
	p.rnr_retry_count = 5;
	p.path_mtu = 3;
	/* RoCE: the ports' GIDs are fe80::guid. */
	p.primary.local_gid[0] = 0xfe;
	p.primary.local_gid[1] = 0x80;
	p.primary.local_gid[15] = 0x00;
	p.primary.remote_gid[0] = 0xfe;
	p.primary.remote_gid[1] = 0x80;
	p.primary.remote_gid[14] = 0x01;
	p.primary.remote_gid[15] = 0x01;
	p.primary.local_gid[14] = 0x01;
	p.primary.hop_limit = 1;
	p.primary.local_ack_timeout = 10;
	p.primary.packet_rate = 3;
	CHECK_EQ(cep_cm_connect(ida, &p), 0);
	/* REQ_SENT: INIT only. */
	{
		int r = cep_cm_init_qp_attr(ida, IBV_QPS_RTR, &at, &mask);

		CHECK(r == -EINVAL || r == 0); /* 0 if the REP already came */
	}
	wait_flag(&est_a);
	wait_flag(&est_b);
	CHECK(atomic_load(&passive_checked));

	/* Active side. */
	CHECK_EQ(cep_cm_init_qp_attr(ida, IBV_QPS_INIT, &at, &mask), 0);
	CHECK(mask & IBV_QP_STATE);
	CHECK_EQ(at.qp_state, IBV_QPS_INIT);
	CHECK_EQ(cep_cm_init_qp_attr(ida, IBV_QPS_RTR, &at, &mask), 0);
	CHECK_EQ(at.dest_qp_num, QB);
	CHECK_EQ(at.rq_psn, PSN_A);
	CHECK_EQ(at.path_mtu, 3);
	CHECK(at.ah_attr.is_global);
	CHECK_EQ(at.ah_attr.grh.dgid.raw[15], 0x01);
	CHECK_EQ(cep_cm_init_qp_attr(ida, IBV_QPS_RTS, &at, &mask), 0);
	CHECK_EQ(at.sq_psn, PSN_B);
	CHECK_EQ(at.retry_cnt, 6);
	CHECK_EQ(at.rnr_retry, 7); /* the REP's RNR retry count */
	/* Passive side. */
	CHECK_EQ(cep_cm_init_qp_attr(passive, IBV_QPS_RTR, &at, &mask), 0);
	CHECK_EQ(at.dest_qp_num, QA);
	CHECK_EQ(at.rq_psn, PSN_B);
	CHECK_EQ(cep_cm_init_qp_attr(passive, IBV_QPS_RTS, &at, &mask), 0);
	CHECK_EQ(at.sq_psn, PSN_A);
	CHECK_EQ(at.retry_cnt, 6);
	CHECK_EQ(at.rnr_retry, 5); /* the REQ's RNR retry count */
	CHECK_EQ(cep_cm_init_qp_attr(NULL, IBV_QPS_RTS, &at, &mask), -EINVAL);

	CHECK_EQ(cep_cm_destroy_id_sync(ida), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(passive), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(pr.listener), 0);
	pair_close(&pr);
	return check_done("cm-qp-attr");
}
