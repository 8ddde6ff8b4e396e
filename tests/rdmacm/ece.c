/* SPDX-License-Identifier: MIT */
/*
 * ECE (Enhanced Connection Establishment, IBTA 1.4) without a device: the
 * calls' checks as librdmacm's (cma.c rdma_set_local_ece,
 * rdma_get_remote_ece, rdma_reject_ece), and the values on the wire as the
 * kernel's cm.c sends and reads them (cm_format_req: REQ vendor ID at
 * byte 5, 24 bits; cm_format_rep: REP vendor ID in bytes 15, 19 and 23;
 * the options in the MAD header's attribute modifier). The in-process
 * fabric of tests/cm/harness.h (CM nodes A, B; raw peer C) and the
 * layer's objects linked in, as tests/rdmacm's other layer tests.
 * Usage: test-rdmacm-ece NAME.
 */
#include <arpa/inet.h>

#include <cep/rdma_cm.h>

#include "../cm/harness.h"
#include "rdmacm.h"
#include "standin.h"

#define VENDOR 0x02c9a5u    /* 24 bits, every byte different */
#define OPTIONS 0xc0de1234u

/* librdmacm's checks: set needs an id without a QP, a vendor and no
 * comp_mask; get needs an id without a QP and gives zeros before a peer
 * sent anything. Was ENOSYS for all. */
static void t_calls(void)
{
	static int fake_qp;
	struct rcm_channel *ch = rcm_channel_new();
	struct ibv_ece e;
	struct rcm_id *r;

	CHECK(ch != NULL);
	r = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	CHECK(r != NULL);
	memset(&e, 0x5a, sizeof(e));
	CHECK_EQ(rdma_get_remote_ece(&r->id, &e), 0);
	CHECK_EQ(e.vendor_id, 0);
	CHECK_EQ(e.options, 0);
	CHECK_EQ(e.comp_mask, 0);
	errno = 0;
	CHECK_EQ(rdma_get_remote_ece(&r->id, NULL), -1);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK_EQ(rdma_get_remote_ece(NULL, &e), -1);
	CHECK_EQ(errno, EINVAL);
	e = (struct ibv_ece){ .vendor_id = 0, .options = 1 };
	errno = 0;
	CHECK_EQ(rdma_set_local_ece(&r->id, &e), -1); /* no vendor */
	CHECK_EQ(errno, EINVAL);
	e = (struct ibv_ece){ .vendor_id = VENDOR, .options = OPTIONS, .comp_mask = 1 };
	errno = 0;
	CHECK_EQ(rdma_set_local_ece(&r->id, &e), -1);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK_EQ(rdma_set_local_ece(&r->id, NULL), -1);
	CHECK_EQ(errno, EINVAL);
	e.comp_mask = 0;
	CHECK_EQ(rdma_set_local_ece(&r->id, &e), 0);
	CHECK_EQ(r->local_ece.vendor_id, VENDOR);
	CHECK_EQ(r->local_ece.options, OPTIONS);
	/* the peer's are not ours */
	CHECK_EQ(rdma_get_remote_ece(&r->id, &e), 0);
	CHECK_EQ(e.vendor_id, 0);
	/* with a QP: both refuse */
	r->id.qp = (struct ibv_qp *)(void *)&fake_qp; /* never used as one */
	errno = 0;
	CHECK_EQ(rdma_set_local_ece(&r->id, &e), -1);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK_EQ(rdma_get_remote_ece(&r->id, &e), -1);
	CHECK_EQ(errno, EINVAL);
	r->id.qp = NULL;
	rcm_id_put(r);
	rcm_channel_free(ch);
}

/* The engine carries ECE where the kernel's cm.c puts it: A's REQ to C
 * (bytes of the MAD checked too), C's REQ to B read back in B's event,
 * B's REP to C. */
static void t_wire(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_accept_param acc = { .size = sizeof(acc), .qpn = 0x101 };
	struct cep_cm_id *a;
	struct cep_msg m, q;
	uint8_t mad[CEP_MAD_SIZE];

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.ece_vendor_id = VENDOR;
	p.ece_options = OPTIONS;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	q = raw_last(CEP_MSG_REQ);
	CHECK_EQ(q.u.req.vendor_id, VENDOR);
	CHECK_EQ(q.hdr.attr_mod, OPTIONS);
	CHECK_EQ(cep_msg_encode(&q, mad), 0);
	CHECK_EQ(mad[24 + 4], 0); /* reserved */
	CHECK_EQ(mad[24 + 5], 0x02);
	CHECK_EQ(mad[24 + 6], 0xc9);
	CHECK_EQ(mad[24 + 7], 0xa5);
	CHECK_EQ(mad[20], 0xc0);
	CHECK_EQ(mad[23], 0x34);
	/* C to B, B answers with ECE */
	raw_req(&m, 0x9300, 0x900);
	m.u.req.vendor_id = 0x15b3;
	m.hdr.attr_mod = 7;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	struct logged rq = last_ev(&B, CEP_CM_EV_REQ_RECEIVED);

	CHECK_EQ(rq.ev.msg.u.req.vendor_id, 0x15b3);
	CHECK_EQ(rq.ev.msg.hdr.attr_mod, 7);
	acc.ece_vendor_id = VENDOR;
	acc.ece_options = OPTIONS;
	CHECK_EQ(cep_cm_accept(rq.id, &acc), 0);
	CHECK(raw_wait(CEP_MSG_REP, 1));
	q = raw_last(CEP_MSG_REP);
	CHECK_EQ(q.u.rep.vendor_id_h, 0x02);
	CHECK_EQ(q.u.rep.vendor_id_m, 0xc9);
	CHECK_EQ(q.u.rep.vendor_id_l, 0xa5);
	CHECK_EQ(q.hdr.attr_mod, OPTIONS);
	CHECK_EQ(cep_msg_encode(&q, mad), 0);
	CHECK_EQ(mad[24 + 15], 0x02);
	CHECK_EQ(mad[24 + 19], 0xc9);
	CHECK_EQ(mad[24 + 23], 0xa5);
	teardown_all();
}

/* A REQ with ECE to an rdma_cm listener: the new id's
 * rdma_get_remote_ece gives the REQ's vendor and options (librdmacm
 * ucma_process_conn_req), and rdma_reject_ece answers REJ 35. */
static void t_layer(void)
{
	struct standin s;
	struct rdma_cm_event *ev = NULL;
	struct cep_cma_hdr h;
	struct ibv_ece e;
	struct cep_msg m;

	setup(2, 0);
	standin_open(&s, 0, 0);
	s.l->backlog = 8;
	raw_req(&m, 0x9400, 0x900);
	m.u.req.service_id = s.tcp.sid;
	m.u.req.vendor_id = VENDOR;
	m.hdr.attr_mod = OPTIONS;
	cep_cma_hdr_ipv4(&h, htonl(0x0a000001), 5555, htonl(0x0a000002), PORT_RDMA);
	CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 0, m.u.req.private_data,
				    sizeof(m.u.req.private_data)), CEP_CMA_HDR_SIZE);
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(rdma_get_cm_event(&s.ch->ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK_EQ(rdma_get_remote_ece(ev->id, &e), 0);
	CHECK_EQ(e.vendor_id, VENDOR);
	CHECK_EQ(e.options, OPTIONS);
	CHECK_EQ(e.comp_mask, 0);
	CHECK_EQ(rdma_reject_ece(ev->id, "no", 3), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_VENDOR_OPTION_NOT_SUPPORTED);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.remote_comm_id, 0x9400);
	CHECK(!memcmp(raw_last(CEP_MSG_REJ).u.rej.private_data, "no", 3));
	struct rdma_cm_id *c = ev->id;

	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	standin_teardown(c, &s);
}

static const struct named_test tests[] = {
	{ "calls", t_calls },
	{ "wire", t_wire },
	{ "layer", t_layer },
};

int main(int argc, char **argv)
{
	return run_named_test(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
