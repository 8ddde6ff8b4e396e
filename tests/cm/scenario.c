/* SPDX-License-Identifier: MIT */
/*
 * CM protocol scenarios, one per line of the coverage table of docs/protocol.md.
 * Usage: test-cm-scenario NAME. Each scenario sets up two CM nodes and a
 * scripted raw peer on the in-process fabric, drives one protocol path,
 * checks states, events, wire messages and counters, then checks that no
 * CEP leaked and every binding is back to INVALID (or RESERVED).
 */
#include <poll.h>
#include <unistd.h>

#include "harness.h"

/* REQ -> REP -> RTU with private data both ways; both ESTABLISHED, both
 * QPs bound; then DREQ -> DREP, timewait, exit, bindings INVALID. */
static void t_establish(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a, *b;
	static const char req_pd[] = "hello from A";

	setup_accepting(2);
	B.pol.rep_pdata = "hello from B";
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	p.private_data = req_pd;
	p.private_data_len = sizeof(req_pd);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK_EQ(cep_cm_connect(a, &p), -EINVAL); /* not IDLE */
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, 1));
	struct logged rq = last_ev(&B, CEP_CM_EV_REQ_RECEIVED);

	CHECK(rq.ev.private_data && !strcmp((const char *)rq.ev.private_data, req_pd));
	CHECK_EQ(rq.ev.msg.u.req.local_qpn, 0x100);
	CHECK_EQ(rq.ev.msg.u.req.local_ca_guid, GUID_A);
	CHECK_EQ(rq.ev.msg.u.req.starting_psn, 0x1234);
	struct logged rp = last_ev(&A, CEP_CM_EV_REP_RECEIVED);

	CHECK(rp.ev.private_data && !strcmp((const char *)rp.ev.private_data, "hello from B"));
	CHECK_EQ(rp.ev.msg.u.rep.local_qpn, 0x101);
	b = last_ev(&B, CEP_CM_EV_RTU_RECEIVED).id;
	CHECK(b == rq.id);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_ESTABLISHED);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	CHECK_EQ(cep_cm_id_remote_comm_id(a), cep_cm_id_local_comm_id(b));
	check_binding(&A, 0x100, cep_cm_id_local_comm_id(a));
	check_binding(&B, 0x101, cep_cm_id_local_comm_id(b));
	CHECK_EQ(stats_of(&A).states[CEP_CM_ESTABLISHED], 1);
	CHECK_EQ(stats_of(&B).states[CEP_CM_ESTABLISHED], 1);
	CHECK_EQ(stats_of(&B).states[CEP_CM_LISTEN], 1);
	CHECK_EQ(stats_of(&A).ids, 1);
	/* the QP is taken: a second connect on it fails with the bind error */
	struct cep_cm_id *a2 = make_id(&A);

	CHECK_EQ(cep_cm_connect(a2, &p), -EISCONN);
	/* release */
	CHECK_EQ(cep_cm_disconnect(a, "bye", 4), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 1));
	CHECK(pd_eq(last_ev(&B, CEP_CM_EV_DREQ_RECEIVED), "bye"));
	CHECK(wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, 1));
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_TIMEWAIT);
	/* timewait: the path's ACK timeout (packet life 8, no CA ACK
	 * delay: exponent 9, 2.1 ms rounded up to 3 ms), as the kernel's
	 * cm_enter_timewait */
	advance_ms(2);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, NULL), 0);
	advance_ms(1);
	CHECK(wait_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_IDLE);
	check_binding(&A, 0x100, CEP_BINDING_INVALID);
	check_binding(&B, 0x101, CEP_BINDING_INVALID);
	struct cep_cm_stats sa = stats_of(&A), sb = stats_of(&B);

	CHECK_EQ(sa.sent[CEP_MSG_REQ], 1);
	CHECK_EQ(sb.received[CEP_MSG_REQ], 1);
	CHECK_EQ(sb.sent[CEP_MSG_REP], 1);
	CHECK_EQ(sa.sent[CEP_MSG_RTU], 1);
	CHECK_EQ(sa.sent[CEP_MSG_DREQ], 1);
	CHECK_EQ(sb.sent[CEP_MSG_DREP], 1);
	CHECK_EQ(sa.retries, 0);
	teardown_all();
}

/* The passive side rejects the REQ (consumer reason, ARI, private data). */
static void t_rej_consumer(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_REJECT;
	B.pol.rej_reason = CEP_REJ_CONSUMER_DEFINED;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_REJ_RECEIVED, 1));
	struct logged l = last_ev(&A, CEP_CM_EV_REJ_RECEIVED);

	CHECK_EQ(l.ev.status, CEP_REJ_CONSUMER_DEFINED);
	CHECK_EQ(l.ev.msg.u.rej.reject_info_length, 3);
	CHECK(!memcmp(l.ev.msg.u.rej.ari, "ari", 3));
	CHECK(pd_eq(l, "go away"));
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_IDLE);
	check_binding(&A, 0x100, CEP_BINDING_INVALID);
	CHECK_EQ(stats_of(&A).rej_received[CEP_REJ_CONSUMER_DEFINED], 1);
	CHECK_EQ(stats_of(&B).rej_sent[CEP_REJ_CONSUMER_DEFINED], 1);
	/* the QP can be used again */
	B.pol.on_req = ON_REQ_ACCEPT;
	B.pol.accept_qpn = 0x101;
	struct cep_cm_id *a2 = make_id(&A);

	CHECK_EQ(cep_cm_connect(a2, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	teardown_all();
}

/* No listener for the service ID: REJ "invalid service ID". */
static void t_rej_no_listener(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup(2, 0);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_REJ_RECEIVED, 1));
	CHECK_EQ(last_ev(&A, CEP_CM_EV_REJ_RECEIVED).ev.status, CEP_REJ_INVALID_SERVICE_ID);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 0);
	/* a REQ for RD (unsupported transport): REJ "invalid transport type" */
	struct cep_msg m;

	listen_on(&B, SID);
	raw_req(&m, 0x4f00, 0x900);
	m.u.req.transport_service_type = CEP_TS_RD;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_INVALID_TRANSPORT_TYPE);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.remote_comm_id, 0x4f00);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 0);
	teardown_all();
}

/* The active side rejects the REP: passive gets REJ, active in timewait. */
static void t_rej_rep(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup_accepting(2);
	A.pol.reject_rep = 1;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	p.manual_rtu = 1;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REJ_RECEIVED, 1));
	CHECK_EQ(last_ev(&B, CEP_CM_EV_REJ_RECEIVED).ev.status, CEP_REJ_CONSUMER_DEFINED);
	CHECK_EQ(last_ev(&B, CEP_CM_EV_REJ_RECEIVED).ev.msg.u.rej.message_rejected, CEP_MSG_CODE_REP);
	CHECK_EQ(cep_cm_id_state(last_ev(&B, CEP_CM_EV_REJ_RECEIVED).id), CEP_CM_IDLE);
	advance_ms(100);
	CHECK(wait_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK_EQ(count_ev(&A, CEP_CM_EV_ESTABLISHED, NULL), 0);
	check_binding(&B, 0x101, CEP_BINDING_INVALID);
	teardown_all();
}

/* The application MRAs the REQ and accepts after the active side's REQ
 * timeout: the MRA extends it, no retry, no timeout. */
static void t_mra_req(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_MRA;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	p.remote_cm_response_timeout = 12; /* 17 ms + 2 x 2 ms; MRA gives 268 ms */
	p.max_cm_retries = 2;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 1));
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_MRA_REQ_RCVD);
	advance_ms(80); /* past the unextended timeout with its retries (63 ms) */
	CHECK_EQ(stats_of(&A).retries, 0);
	struct cep_cm_id *b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;

	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x101 };

	CHECK_EQ(cep_cm_accept(b, &ap), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REQ_ERROR, NULL), 0);
	CHECK_EQ(stats_of(&B).sent[CEP_MSG_MRA], 1);
	teardown_all();
}

/* Automatic MRA: B's application does nothing for longer than half of A's
 * response timeout; B sends MRA by itself; a later accept establishes. */
static void t_mra_auto(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup(2, 1);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	p.remote_cm_response_timeout = 15; /* 134 ms: auto MRA after 68 ms */
	p.max_cm_retries = 2;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	advance_ms(67);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, NULL), 0);
	advance_ms(1);
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 1));
	advance_ms(80); /* past A's unextended REQ timeout (138 ms) */
	CHECK_EQ(stats_of(&A).retries, 0);
	struct cep_cm_id *b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;

	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x101 };

	CHECK_EQ(cep_cm_accept(b, &ap), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, 1));
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REQ_ERROR, NULL), 0);
	teardown_all();
}

/* auto_mra and a listener already behind (issue 21): a second REQ while the
 * first is unanswered is MRAed at once, while the first, alone when it
 * came, waits for the half-timeout MRA. libcep's choice (a burst's
 * half-timeout MRAs left together, behind the requester's REQ timer): the
 * kernel's rdma_cm arms an MRA for every request it delivers but sends it
 * only for a repeated REQ (cma_ib_req_handler, CMA_CM_MRA_SETTING with
 * IB_CM_MRA_FLAG_DELAY; cm_dup_req_handler). */
static void t_mra_behind(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a1, *a2;

	setup(2, 1);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	a1 = make_id(&A);
	a2 = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	p.remote_cm_response_timeout = 15; /* 134 ms: auto MRA after 68 ms */
	CHECK_EQ(cep_cm_connect(a1, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	p.qpn = 0x101;
	CHECK_EQ(cep_cm_connect(a2, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 2));
	settle(); /* no time passes */
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, a1), 0);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, a2), 1);
	CHECK_EQ(cep_cm_id_state(last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id), CEP_CM_MRA_REQ_SENT);
	advance_ms(68);
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 2)); /* the first's, at half */
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, a1), 1);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, a2), 1);
	CHECK_EQ(stats_of(&A).retries, 0);
	teardown_all();
}

/* auto_mra and a listener that keeps up: once it has accepted a request,
 * its pace decides. A first request accepted after 10 ms sets it (10 ms a
 * request); then seven requests arrive at once: the one behind six others
 * (70 ms, past the half of its requester's 134 ms timeout) is MRAed at
 * once, the six before it are not (they should be answered in time; their
 * half-timeout timers still cover them, and MRA them when that passes). */
static void t_mra_pace(void)
{
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x10f };
	struct cep_cm_conn_param p;
	struct cep_cm_id *a[8];

	setup(1, 1); /* one worker: each REQ sees the count its turn leaves */
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	for (int i = 0; i < 8; i++)
		a[i] = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	p.remote_cm_response_timeout = 15; /* 134 ms: the timer's MRA after 68 ms */
	CHECK_EQ(cep_cm_connect(a[0], &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	advance_ms(10);
	CHECK_EQ(cep_cm_accept(last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id, &ap), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	for (int i = 1; i < 8; i++) {
		p.qpn = 0x100 + (uint32_t)i;
		CHECK_EQ(cep_cm_connect(a[i], &p), 0);
	}
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 8));
	settle(); /* no time passes */
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, NULL), 1);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, a[0]), 0);
	advance_ms(67);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, NULL), 1);
	advance_ms(1); /* the six others' timers */
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 7));
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, a[0]), 0);
	CHECK_EQ(stats_of(&A).retries, 0);
	CHECK_EQ(stats_of(&B).sent[CEP_MSG_MRA], 7);
	teardown_all();
}

/* The active side MRAs the REP, then sends RTU by hand. */
static void t_mra_rep(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup_accepting(2);
	A.pol.mra_rep = 1;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	p.manual_rtu = 1;
	p.local_cm_response_timeout = 12; /* B would retry REP every 17 ms */
	p.max_cm_retries = 2;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_MRA_RECEIVED, 1));
	struct cep_cm_id *b = last_ev(&B, CEP_CM_EV_MRA_RECEIVED).id;

	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REP_RCVD);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_MRA_REP_SENT);
	advance_ms(80); /* past B's unextended REP timeout with retries (51 ms) */
	CHECK_EQ(stats_of(&B).retries, 0);
	CHECK_EQ(cep_cm_rtu(a, "rtu", 4), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, 1));
	CHECK(pd_eq(last_ev(&B, CEP_CM_EV_RTU_RECEIVED), "rtu"));
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REP_ERROR, NULL), 0);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_ESTABLISHED);
	teardown_all();
}

/* auto_mra on the active side (issue 27): a REP its application has not
 * answered gets the engine's MRA only once the responder repeats it, as
 * rdma_cm's delayed MRA (CMA_CM_MRA_SETTING with IB_CM_MRA_FLAG_DELAY,
 * sent by cm_dup_rep_handler): nothing at half the responder's timeout,
 * the repeat MRAed, the responder then waits the MRA's time and the late
 * RTU establishes. Roles swapped: B, the requester, has auto_mra. */
static void t_mra_rep_auto(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *b;

	setup(2, 1);
	listen_on(&A, SID);
	A.pol.on_req = ON_REQ_ACCEPT;
	A.pol.accept_qpn = 0x101;
	b = make_id(&B);
	conn_param(&p, 0x100, LID_B, LID_A);
	p.manual_rtu = 1;
	p.local_cm_response_timeout = 12; /* A repeats its REP after 16.8 + 2 x 1 ms */
	p.max_cm_retries = 2;
	CHECK_EQ(cep_cm_connect(b, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REP_RECEIVED, 1));
	advance_ms(15); /* past half A's timeout (8.4 ms), before its repeat */
	CHECK_EQ(stats_of(&B).sent[CEP_MSG_MRA], 0);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_REP_RCVD);
	advance_ms(10); /* A's repeat, which B MRAs */
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 1));
	CHECK_EQ(stats_of(&A).retries, 1);
	CHECK_EQ(stats_of(&B).sent[CEP_MSG_MRA], 1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REP_SENT);
	advance_ms(100); /* past A's unextended tries (2 x 19 ms) */
	CHECK_EQ(stats_of(&A).retries, 1);
	CHECK_EQ(cep_cm_rtu(b, "rtu", 4), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_RTU_RECEIVED, 1));
	CHECK(pd_eq(last_ev(&A, CEP_CM_EV_RTU_RECEIVED), "rtu"));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REP_ERROR, NULL), 0);
	teardown_all();
}

/* auto_mra on the active side, behind (issue 27): once its application
 * has answered a REP, the context knows its pace (10 ms a REP here), and
 * a REP whose RTU will likely come after the responder's repeat - the REPs
 * awaiting theirs, itself included, at that pace reach the responder's
 * timeout (16 ms) - gets its MRA at half that timeout, before the repeat;
 * the one that will likely be answered in time gets none, and its MRA
 * only when the repeat comes. One worker: the REPs arrive one by one. */
static void t_mra_rep_pace(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *b[4];

	setup(1, 1);
	listen_on(&A, SID);
	A.pol.on_req = ON_REQ_ACCEPT;
	A.pol.accept_qpn = 0x101;
	conn_param(&p, 0x100, LID_B, LID_A);
	p.manual_rtu = 1;
	p.local_cm_response_timeout = 12; /* A repeats its REP after 16.8 + 2 x 1 ms */
	p.max_cm_retries = 2;
	b[0] = make_id(&B);
	CHECK_EQ(cep_cm_connect(b[0], &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REP_RECEIVED, 1));
	advance_ms(10); /* no pace yet: no MRA at half */
	CHECK_EQ(cep_cm_rtu(b[0], NULL, 0), 0); /* the pace: 10 ms for 1 REP */
	CHECK(wait_ev(&A, CEP_CM_EV_RTU_RECEIVED, 1));
	for (int i = 1; i < 4; i++) { /* one after the other, no time passing */
		b[i] = make_id(&B);
		p.qpn = 0x101 + (uint32_t)i;
		A.pol.accept_qpn = 0x109 + (uint32_t)i;
		CHECK_EQ(cep_cm_connect(b[i], &p), 0);
		CHECK(wait_ev(&B, CEP_CM_EV_REP_RECEIVED, i + 1));
	}
	CHECK_EQ(stats_of(&B).sent[CEP_MSG_MRA], 0);
	/* expected waits 10, 20, 30 ms: the second and third reach 16 ms */
	advance_ms(10); /* half A's timeout (8.4 ms) */
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 2));
	CHECK_EQ(stats_of(&B).sent[CEP_MSG_MRA], 2);
	CHECK_EQ(stats_of(&A).retries, 0);
	advance_ms(15); /* A's repeat of the first, which B MRAs then */
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 3));
	CHECK_EQ(stats_of(&A).retries, 1);
	CHECK_EQ(stats_of(&B).sent[CEP_MSG_MRA], 3);
	for (int i = 1; i < 4; i++) {
		CHECK_EQ(cep_cm_id_state(b[i]), CEP_CM_MRA_REP_SENT);
		CHECK_EQ(cep_cm_rtu(b[i], NULL, 0), 0);
	}
	CHECK(wait_ev(&A, CEP_CM_EV_RTU_RECEIVED, 4));
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REP_ERROR, NULL), 0);
	teardown_all();
}

/* REQ to a peer that never answers: Max CM Retries resends, then REJ
 * "timeout" (ARI = our CA GUID) and REQ_ERROR; the QP is free again. */
static void t_req_timeout(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup(2, 0);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.remote_cm_response_timeout = 8;
	p.max_cm_retries = 3;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	/* each try waits 2 x packet life (2 ms) + response timeout 8 (2 ms) */
	for (int i = 1; i <= 4; i++) {
		settle();
		CHECK_EQ(raw_count(CEP_MSG_REQ), i);
		advance_ms(5);
		CHECK_EQ(raw_count(CEP_MSG_REQ), i);
		advance_ms(1);
	}
	CHECK(wait_ev(&A, CEP_CM_EV_REQ_ERROR, 1));
	CHECK_EQ(last_ev(&A, CEP_CM_EV_REQ_ERROR).ev.status, -ETIMEDOUT);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_count(CEP_MSG_REQ), 4);
	struct cep_msg rej = raw_last(CEP_MSG_REJ);

	CHECK_EQ(rej.u.rej.reason, CEP_REJ_TIMEOUT);
	CHECK_EQ(rej.u.rej.reject_info_length, 8);
	CHECK_EQ(rej.u.rej.ari[7], (uint8_t)GUID_A);
	CHECK_EQ(stats_of(&A).retries, 3);
	CHECK_EQ(stats_of(&A).timeouts, 1);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_IDLE);
	check_binding(&A, 0x100, CEP_BINDING_INVALID);
	teardown_all();
}

/* Transaction IDs of new requests: no two REQs in flight share their low
 * 32 bits - the kernel's umad refuses a request whose TID is still being
 * sent, and rewrites the upper half. Retries keep their TID. */
static void t_tid(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a[3];
	uint32_t low[8];
	int n = 0;

	setup(2, 0);
	for (int i = 0; i < 3; i++) {
		a[i] = make_id(&A);
		conn_param(&p, 0x100 + (uint32_t)i, LID_A, LID_C);
		p.remote_cm_response_timeout = 8;
		p.max_cm_retries = 1;
		CHECK_EQ(cep_cm_connect(a[i], &p), 0);
	}
	advance_ms(6);
	advance_ms(6);
	CHECK(wait_ev(&A, CEP_CM_EV_REQ_ERROR, 3));
	pthread_mutex_lock(&C.mtx);
	for (int i = 0; i < C.n; i++) {
		const struct cep_msg *m = &C.got[i];

		if (m->type != CEP_MSG_REQ)
			continue;
		if (n < 8)
			low[n++] = (uint32_t)m->hdr.tid;
	}
	pthread_mutex_unlock(&C.mtx);
	CHECK_EQ(n, 6); /* 3 REQs, each retried once with its own TID */
	for (int i = 0; i < n; i++) {
		int same = 0;

		for (int j = 0; j < n; j++)
			same += low[j] == low[i];
		CHECK_EQ(same, 2); /* itself and its retry, no other REQ */
	}
	teardown_all();
}

/* Passive side: REP never answered by RTU: REP retries, REJ timeout,
 * REP_ERROR. */
static void t_rep_timeout(void)
{
	struct cep_msg m;

	setup_accepting(2);
	raw_req(&m, 0x5000, 0x900);
	raw_send(&m, LID_B);
	for (int i = 1; i <= 4; i++) { /* REP retried every 34 ms (timeout 13) */
		CHECK(raw_wait(CEP_MSG_REP, i));
		advance_ms(33);
		CHECK_EQ(raw_count(CEP_MSG_REP), i);
		advance_ms(1);
	}
	CHECK(wait_ev(&B, CEP_CM_EV_REP_ERROR, 1));
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_count(CEP_MSG_REP), 4); /* 1 + max_cm_retries */
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_TIMEOUT);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.remote_comm_id, 0x5000);
	check_binding(&B, 0x101, CEP_BINDING_INVALID);
	teardown_all();
}

/* A REJ "timeout" with remote comm ID 0 (the active side gave up before it
 * learnt ours) still finds the passive id through (comm ID, CA GUID). */
static void t_rej_timeout_remote(void)
{
	struct cep_msg m;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	raw_req(&m, 0x5100, 0x900);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	cep_msg_init(&m, CEP_MSG_REJ, 3);
	m.u.rej.local_comm_id = 0x5100;
	m.u.rej.remote_comm_id = 0;
	m.u.rej.reason = CEP_REJ_TIMEOUT;
	m.u.rej.reject_info_length = 8;
	for (int i = 0; i < 8; i++)
		m.u.rej.ari[i] = (uint8_t)(GUID_C >> (56 - 8 * i));
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REJ_RECEIVED, 1));
	CHECK_EQ(cep_cm_id_state(last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id), CEP_CM_IDLE);
	teardown_all();
}

/* Duplicate REQ while REQ_RCVD: dropped, counted, one event. */
static void t_dup_req_rcvd(void)
{
	struct cep_msg m;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	raw_req(&m, 0x5200, 0x900);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	raw_send(&m, LID_B);
	raw_send(&m, LID_B);
	CHECK_EQ(cep_cm_quiesce(B.cm, 2000), 0);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 1);
	CHECK_EQ(stats_of(&B).duplicates, 2);
	CHECK_EQ(raw_count(CEP_MSG_MRA) + raw_count(CEP_MSG_REJ) + raw_count(CEP_MSG_REP), 0);
	teardown_all();
}

/* Duplicate REQ after our MRA: the MRA is sent again. */
static void t_dup_req_mra(void)
{
	struct cep_msg m;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_MRA;
	raw_req(&m, 0x5300, 0x900);
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_MRA, 1));
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_MRA, 2));
	CHECK_EQ(raw_last(CEP_MSG_MRA).u.mra.service_timeout, 16);
	CHECK_EQ(raw_last(CEP_MSG_MRA).u.mra.remote_comm_id, 0x5300);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 1);
	teardown_all();
}

/* A repeated REQ while the old connection is in timewait is a new
 * connection request: timewait keeps only the local comm ID, the remote
 * keys went when it began (kernel cm_enter_timewait -> cm_remove_remote;
 * conformance passive-dup-req-in-timewait). The application rejects it
 * (its QP is still bound to the old id). After timewait the same remote
 * IDs and the same local QP connect again. */
static void t_dup_req_timewait_and_reuse(void)
{
	struct cep_msg m;
	uint32_t bc;
	struct cep_cm_id *b;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x5400, 0x900, 0x101, &bc);
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	cep_msg_init(&m, CEP_MSG_DREP, 8);
	m.u.drep.local_comm_id = 0x5400;
	m.u.drep.remote_comm_id = bc;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_DREP_RECEIVED, 1));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	B.pol.on_req = ON_REQ_REJECT;
	B.pol.rej_reason = CEP_REJ_CONSUMER_DEFINED;
	raw_req(&m, 0x5400, 0x900);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 2));
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_CONSUMER_DEFINED);
	CHECK_EQ(stats_of(&B).rej_sent[CEP_REJ_STALE_CONN], 0);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT); /* the old one goes on */
	advance_ms(10); /* 2 x the REQ's local ACK timeout 10 */
	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	check_binding(&B, 0x101, CEP_BINDING_INVALID);
	/* reuse: same remote comm ID, CA GUID and QPN, same local QP */
	raw_establish(0x5400, 0x900, 0x101, &bc);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 3);
	teardown_all();
}

/* Issue 17: a libcep peer still in timewait takes a reconnect at once,
 * on the same id (same comm ID and QPN) and on a new id from the same
 * QP: B's timewait (from A's ACK delay 20: 4.3 s) outlasts A's (B's ACK
 * delay 0), so A is IDLE while B is still in TIMEWAIT. Before, B's
 * remote keys answered REJ 10 "stale" and sent A back into timewait. */
static void t_reconnect_peer_timewait(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a, *a2, *b;

	ack_delay_of[0] = 20;
	ack_delay_of[1] = 0;
	setup_accepting(2);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, 1));
	b = last_ev(&B, CEP_CM_EV_RTU_RECEIVED).id;
	CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, 1));
	advance_ms(100);
	CHECK(wait_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	/* the same id again: B has its QP 0x101 in timewait, accepts on 0x102 */
	B.pol.accept_qpn = 0x102;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 2));
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_ESTABLISHED);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REJ_RECEIVED, NULL), 0);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, 2));
	advance_ms(100);
	CHECK(wait_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, 2));
	/* a new id from the same QP while both B ids are in timewait */
	B.pol.accept_qpn = 0x103;
	a2 = make_id(&A);
	CHECK_EQ(cep_cm_connect(a2, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 3));
	CHECK_EQ(cep_cm_id_state(a2), CEP_CM_ESTABLISHED);
	CHECK_EQ(stats_of(&B).rej_sent[CEP_REJ_STALE_CONN], 0);
	CHECK_EQ(stats_of(&A).rej_received[CEP_REJ_STALE_CONN], 0);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DREQ_RECEIVED, NULL), 2);
	teardown_all();
}

/* Stale connection: a new REQ from the same remote QPN + CA GUID while the
 * old connection lives: REJ stale for the new one, DREQ for the old. */
static void t_stale_conn(void)
{
	struct cep_msg m;
	uint32_t bc;
	struct cep_cm_id *b;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x5500, 0x900, 0x101, &bc);
	raw_req(&m, 0x5501, 0x900); /* new comm ID, same QPN */
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_STALE_CONN);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.remote_comm_id, 0x5501);
	/* no id survives the refusal: local comm ID 0, as the kernel's
	 * cm_issue_rej (conformance: passive-stale-req) */
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.local_comm_id, 0);
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	CHECK_EQ(raw_last(CEP_MSG_DREQ).u.dreq.local_comm_id, bc);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_DREQ_SENT);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 1);
	CHECK_EQ(stats_of(&B).rej_sent[CEP_REJ_STALE_CONN], 1);
	teardown_all();
}

/* Simultaneous DREQs: both sides sent DREQ; each answers the other's with
 * DREP and both reach timewait. */
static void t_simultaneous_dreq(void)
{
	uint32_t bc;
	struct cep_cm_id *b;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x5600, 0x900, 0x101, &bc);
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0); /* B: DREQ_SENT */
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	raw_dreq(0x5600, bc, 0x101);               /* C's DREQ crosses it */
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 1));
	CHECK(raw_wait(CEP_MSG_DREP, 1));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	/* C's DREP for B's DREQ arrives in timewait: harmless */
	struct cep_msg m;

	cep_msg_init(&m, CEP_MSG_DREP, 8);
	m.u.drep.local_comm_id = 0x5600;
	m.u.drep.remote_comm_id = bc;
	raw_send(&m, LID_B);
	advance_ms(10);
	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DREP_RECEIVED, NULL), 0);
	teardown_all();
}

/* A real A<->B pair disconnecting from both ends at once. */
static void t_simultaneous_dreq_pair(void)
{
	struct cep_cm_id *a, *b;

	setup(2, 0);
	listen_on(&B, SID);
	a = establish(&b, 0x100, 0x101);
	int ra = cep_cm_disconnect(a, NULL, 0);
	int rb = cep_cm_disconnect(b, NULL, 0);

	CHECK_EQ(ra, 0);
	CHECK_EQ(rb, 0); /* also when A's DREQ already arrived: answered (DREP) */
	advance_ms(10);
	CHECK(wait_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DREQ_ERROR, NULL) + count_ev(&B, CEP_CM_EV_DREQ_ERROR, NULL), 0);
	teardown_all();
}

/* DREQ never answered: retries, DREQ_ERROR, timewait, exit. */
static void t_dreq_timeout(void)
{
	uint32_t bc;
	struct cep_cm_id *b;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x5700, 0x900, 0x101, &bc);
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0);
	for (int i = 1; i <= 4; i++) { /* DREQ retried every 34 ms */
		CHECK(raw_wait(CEP_MSG_DREQ, i));
		advance_ms(33);
		CHECK_EQ(raw_count(CEP_MSG_DREQ), i);
		advance_ms(1);
	}
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_ERROR, 1));
	CHECK_EQ(raw_count(CEP_MSG_DREQ), 4);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	advance_ms(10);
	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	check_binding(&B, 0x101, CEP_BINDING_INVALID);
	teardown_all();
}

/* A duplicate DREQ in timewait gets a DREP again. */
static void t_dreq_in_timewait(void)
{
	uint32_t bc;

	setup(2, 0);
	listen_on(&B, SID);
	raw_establish(0x5800, 0x900, 0x101, &bc);
	raw_dreq(0x5800, bc, 0x101);
	CHECK(raw_wait(CEP_MSG_DREP, 1));
	raw_dreq(0x5800, bc, 0x101);
	CHECK(raw_wait(CEP_MSG_DREP, 2));
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DREQ_RECEIVED, NULL), 1);
	CHECK(stats_of(&B).duplicates >= 1);
	teardown_all();
}

/* Issue 17: B's DREP is lost and B's timewait (2 x 4 ms here) ends before
 * the requester's retry; B's id stays IDLE (the application destroys it
 * later, the teardown order of docs/quickstart.md). The retry gets a DREP
 * as a DREQ for an unknown comm ID does (docs/cm.md; kernel
 * cm_issue_drep), so the requester does not end in DREQ_ERROR. Nothing
 * changes on B; a DREQ that does not match the old connection is still
 * dropped. (The kernel's cm_dreq_handler drops the retry: its default
 * case; docs/protocol.md lists the difference.) */
static void t_dreq_after_timewait(void)
{
	uint32_t bc;
	struct cep_cm_id *b;
	struct cep_msg m;
	struct cep_cm_stats s0;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x5a00, 0x900, 0x101, &bc);
	raw_dreq(0x5a00, bc, 0x101);
	CHECK(raw_wait(CEP_MSG_DREP, 1)); /* C "loses" it */
	advance_ms(10);
	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	s0 = stats_of(&B);
	raw_dreq(0x5a00, bc, 0x101); /* C's retry: same TID */
	CHECK(raw_wait(CEP_MSG_DREP, 2));
	m = raw_last(CEP_MSG_DREP);
	CHECK_EQ(m.u.drep.local_comm_id, bc);
	CHECK_EQ(m.u.drep.remote_comm_id, 0x5a00);
	CHECK_EQ(m.hdr.tid, 7);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DREQ_RECEIVED, NULL), 1);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BAD_STATE], s0.drops[CEP_CM_DROP_BAD_STATE]);
	/* the wrong QPN, or a stranger with the right IDs: dropped */
	raw_dreq(0x5a00, bc, 0x102);
	cep_msg_init(&m, CEP_MSG_DREQ, 9);
	m.u.dreq.local_comm_id = 0x5a00;
	m.u.dreq.remote_comm_id = bc;
	m.u.dreq.remote_qpn_eecn = 0x101;
	raw_send_from(&X, &m, LID_B);
	settle();
	CHECK_EQ(raw_count(CEP_MSG_DREP) + X.n, 2);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_MISMATCH], s0.drops[CEP_CM_DROP_MISMATCH] + 1);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_ADDRESS], s0.drops[CEP_CM_DROP_ADDRESS] + 1);
	teardown_all();
}

/* The same end to end, the issue's figure: 1,000 connections released
 * over a fabric that loses 2% of the MADs, B's passive ids kept (IDLE)
 * after their timewait. Before the fix 17-18 disconnects ended in
 * DREQ_ERROR (each lost DREP); now none does. One worker per node: the
 * run reproduces (cep_fabric_set_faults). */
static void t_dreq_lossy(void)
{
	struct cep_fabric_faults f = { .size = sizeof(f), .loss = 0.02 };
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;
	int est = 0;

	setup(1, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_ACCEPT;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	CHECK_EQ(cep_fabric_set_faults(fab, &f), 0);
	for (int i = 0; i < 1000; i++) {
		enum cep_cm_state s;

		B.pol.accept_qpn = 0x101 + (uint32_t)i % 15;
		if (cep_cm_connect(a, &p)) {
			CHECK(0);
			break;
		}
		settle();
		for (int k = 0; k < 100; k++) {
			s = cep_cm_id_state(a);
			if (s == CEP_CM_ESTABLISHED || s == CEP_CM_IDLE)
				break;
			advance_ms(50);
		}
		if (cep_cm_id_state(a) == CEP_CM_ESTABLISHED) {
			est++;
			CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
		}
		settle();
		for (int k = 0; k < 100 && cep_cm_id_state(a) != CEP_CM_IDLE; k++)
			advance_ms(50);
		CHECK_EQ(cep_cm_id_state(a), CEP_CM_IDLE);
		advance_ms(50); /* B's timewait ends too */
	}
	CHECK(est > 950);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DREQ_ERROR, NULL), 0);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, NULL), est);
	memset(&f, 0, sizeof(f));
	f.size = sizeof(f);
	CHECK_EQ(cep_fabric_set_faults(fab, &f), 0);
	teardown_all();
}

/* A DREQ the id cannot take (here in MRA_REQ_SENT, before any REP: the
 * DREQ names QPN 0, which B has then) is dropped and changes nothing -
 * not the TID B's answers echo: a repeated MRA and the REP still carry
 * the REQ's (the kernel's cm_dreq_handler records a DREQ's TID only
 * once it takes the DREQ). */
static void t_dreq_bad_state_tid(void)
{
	struct cep_msg req;
	struct cep_cm_id *b;
	uint32_t bc;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_MRA;
	raw_req(&req, 0x5b00, 0x900);
	raw_send(&req, LID_B);
	CHECK(raw_wait(CEP_MSG_MRA, 1));
	bc = raw_last(CEP_MSG_MRA).u.mra.local_comm_id;
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	raw_dreq(0x5b00, bc, 0); /* TID 7 */
	settle();
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BAD_STATE], 1);
	CHECK_EQ(raw_count(CEP_MSG_DREP), 0);
	raw_send(&req, LID_B); /* repeated REQ: the MRA again */
	CHECK(raw_wait(CEP_MSG_MRA, 2));
	CHECK_EQ(raw_last(CEP_MSG_MRA).hdr.tid, req.hdr.tid);
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x101 };

	CHECK_EQ(cep_cm_accept(b, &ap), 0);
	CHECK(raw_wait(CEP_MSG_REP, 1));
	CHECK_EQ(raw_last(CEP_MSG_REP).hdr.tid, req.hdr.tid);
	teardown_all();
}

/* Forged DREQs: right local comm ID, wrong remote comm ID or QPN: nothing
 * changes. Unknown comm IDs: DREP for a DREQ, REJ for a REP, RTU counted. */
static void t_forged_and_unknown(void)
{
	uint32_t bc;
	struct cep_cm_id *b;
	struct cep_msg m;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x5900, 0x900, 0x101, &bc);
	raw_dreq(0x5999, bc, 0x101);  /* wrong remote comm ID */
	raw_dreq(0x5900, bc, 0x102);  /* wrong QPN */
	CHECK_EQ(cep_cm_quiesce(B.cm, 2000), 0);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DREQ_RECEIVED, NULL), 0);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_MISMATCH], 2);
	CHECK_EQ(raw_count(CEP_MSG_DREP), 0);
	/* unknown comm ID */
	raw_dreq(0x5900, bc ^ 0x40000000u, 0x101);
	CHECK(raw_wait(CEP_MSG_DREP, 1));
	cep_msg_init(&m, CEP_MSG_REP, 9);
	m.u.rep.local_comm_id = 0x5901;
	m.u.rep.remote_comm_id = bc ^ 0x40000000u;
	m.u.rep.local_qpn = 0x901;
	m.u.rep.local_ca_guid = GUID_C;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_INVALID_COMM_ID);
	cep_msg_init(&m, CEP_MSG_RTU, 9);
	m.u.rtu.local_comm_id = 0x5901;
	m.u.rtu.remote_comm_id = bc ^ 0x40000000u;
	raw_send(&m, LID_B);
	CHECK_EQ(cep_cm_quiesce(B.cm, 2000), 0);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_NO_CEP], 3);
	/* a MAD that fails validation is counted and changes nothing */
	uint8_t bad[CEP_MAD_SIZE] = { 1, 0x07, 9, 3 };
	struct cep_mad_addr to = { .lid = LID_B, .qpn = 1, .qkey = CEP_QP1_QKEY };

	C.tp->ops->send(C.tp, bad, sizeof(bad), &to);
	CHECK_EQ(cep_cm_quiesce(B.cm, 2000), 0);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_DECODE], 1);
	/* a REQ offering comm ID 0 cannot be answered: refused the same way */
	raw_req(&m, 0, 0x905);
	raw_send(&m, LID_B);
	CHECK_EQ(cep_cm_quiesce(B.cm, 2000), 0);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_DECODE], 2);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	teardown_all();
}

/* Duplicate REP (RTU lost): the RTU is sent again; duplicate RTU ignored. */
static void t_dup_rep_rtu(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;
	struct cep_msg m;

	setup(2, 0);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	uint32_t ac = raw_last(CEP_MSG_REQ).u.req.local_comm_id;

	cep_msg_init(&m, CEP_MSG_REP, 5);
	m.u.rep.local_comm_id = 0x6000;
	m.u.rep.remote_comm_id = ac;
	m.u.rep.local_qpn = 0x901;
	m.u.rep.local_ca_guid = GUID_C;
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	CHECK(raw_wait(CEP_MSG_RTU, 1));
	raw_send(&m, LID_A);
	CHECK(raw_wait(CEP_MSG_RTU, 2));
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REP_RECEIVED, NULL), 1);
	CHECK_EQ(stats_of(&A).duplicates, 1);
	teardown_all();
}

/* LAP -> APR (accepted), and LAP with no answer -> LAP_ERROR. */
static void t_lap_apr(void)
{
	struct cep_cm_id *a, *b;
	struct cep_path alt;

	setup(2, 0);
	listen_on(&B, SID);
	a = establish(&b, 0x100, 0x101);
	path_to(&alt, LID_A, LID_B);
	alt.sl = 3;
	CHECK_EQ(cep_cm_lap(a, &alt, 12, "lap", 4), 0);
	CHECK_EQ(cep_cm_lap(a, &alt, 12, NULL, 0), -EINVAL); /* one at a time */
	CHECK(wait_ev(&B, CEP_CM_EV_LAP_RECEIVED, 1));
	struct logged l = last_ev(&B, CEP_CM_EV_LAP_RECEIVED);

	CHECK_EQ(l.ev.msg.u.lap.alternate.sl, 3);
	CHECK_EQ(cep_cm_id_lap_state(b), CEP_CM_LAP_RCVD);
	CHECK_EQ(cep_cm_apr(b, CEP_APR_SUCCESS, NULL, 0, "ok", 3), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_APR_RECEIVED, 1));
	CHECK_EQ(last_ev(&A, CEP_CM_EV_APR_RECEIVED).ev.status, CEP_APR_SUCCESS);
	CHECK_EQ(cep_cm_id_lap_state(a), CEP_CM_LAP_IDLE);
	/* second LAP, rejected */
	CHECK_EQ(cep_cm_lap(a, &alt, 12, NULL, 0), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_LAP_RECEIVED, 2));
	CHECK_EQ(cep_cm_apr(b, CEP_APR_REJECT, NULL, 0, NULL, 0), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_APR_RECEIVED, 2));
	CHECK_EQ(last_ev(&A, CEP_CM_EV_APR_RECEIVED).ev.status, CEP_APR_REJECT);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_ESTABLISHED);
	teardown_all();
}

static void t_lap_timeout(void)
{
	uint32_t bc;
	struct cep_cm_id *b;
	struct cep_path alt;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x6100, 0x900, 0x101, &bc);
	path_to(&alt, LID_B, LID_C);
	CHECK_EQ(cep_cm_lap(b, &alt, 8, NULL, 0), 0);
	for (int i = 0; i < 4; i++)
		advance_ms(10);
	CHECK(wait_ev(&B, CEP_CM_EV_LAP_ERROR, 1));
	CHECK_EQ(raw_count(CEP_MSG_LAP), 4);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	CHECK_EQ(cep_cm_id_lap_state(b), CEP_CM_LAP_IDLE);
	teardown_all();
}

/* Issue 17: a LAP's response timeout is the LAP's alone. B's LAP with
 * timeout 8 is retried every 2 x 3 ms + 2 ms; once answered, B's DREQ is
 * retried at the connection's period (34 ms: the REQ's local CM response
 * timeout 13), not the LAP's. */
static void t_lap_dreq_period(void)
{
	uint32_t bc;
	struct cep_cm_id *b;
	struct cep_path alt;
	struct cep_msg m;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x6180, 0x900, 0x101, &bc);
	path_to(&alt, LID_B, LID_C);
	CHECK_EQ(cep_cm_lap(b, &alt, 8, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_LAP, 1));
	advance_ms(7);
	CHECK_EQ(raw_count(CEP_MSG_LAP), 1);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_LAP), 2);
	cep_msg_init(&m, CEP_MSG_APR, raw_last(CEP_MSG_LAP).hdr.tid);
	m.u.apr.local_comm_id = 0x6180;
	m.u.apr.remote_comm_id = bc;
	m.u.apr.ap_status = CEP_APR_SUCCESS;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_APR_RECEIVED, 1));
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	advance_ms(33);
	CHECK_EQ(raw_count(CEP_MSG_DREQ), 1);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_DREQ), 2);
	teardown_all();
}

/* SIDR with a reply, without a listener, and without any answer. */
static void t_sidr(void)
{
	struct cep_cm_id *a, *a2, *a3;
	struct cep_mad_addr to_b = { .lid = LID_B }, to_c = { .lid = LID_C };
	struct cep_cm_sidr_param sp = { .size = sizeof(sp), .service_id = SID, .timeout = 14,
					.max_cm_retries = 2, .private_data = "who", .private_data_len = 4,
					.peer = &to_b };

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_sidr_answer = 1;
	a = make_id(&A);
	CHECK_EQ(cep_cm_sidr_req(a, &sp), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_SIDR_REP_RECEIVED, 1));
	struct logged l = last_ev(&A, CEP_CM_EV_SIDR_REP_RECEIVED);

	CHECK_EQ(l.ev.status, CEP_SIDR_SUCCESS);
	CHECK_EQ(l.ev.msg.u.sidr_rep.qpn, 0x777);
	CHECK_EQ(l.ev.msg.u.sidr_rep.qkey, 0x1234);
	CHECK(l.ev.private_data && !strcmp((const char *)l.ev.private_data, "sidr"));
	CHECK(pd_eq(last_ev(&B, CEP_CM_EV_SIDR_REQ_RECEIVED), "who"));
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_IDLE);
	/* no listener */
	a2 = make_id(&A);
	sp.service_id = SID + 1;
	CHECK_EQ(cep_cm_sidr_req(a2, &sp), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_SIDR_REP_RECEIVED, 2));
	CHECK_EQ(last_ev(&A, CEP_CM_EV_SIDR_REP_RECEIVED).ev.status, CEP_SIDR_UNSUPPORTED);
	/* nobody answers */
	a3 = make_id(&A);
	sp.peer = &to_c;
	sp.timeout = 8;
	CHECK_EQ(cep_cm_sidr_req(a3, &sp), 0);
	for (int i = 0; i < 3; i++) /* each try waits timeout 8 (2 ms) */
		advance_ms(2);
	CHECK(wait_ev(&A, CEP_CM_EV_SIDR_REQ_ERROR, 1));
	CHECK_EQ(raw_count(CEP_MSG_SIDR_REQ), 3);
	CHECK_EQ(cep_cm_id_state(a3), CEP_CM_IDLE);
	teardown_all();
}

/* Destroying the QP of an established connection: DREQ, timewait, the
 * CEP is destroyed, the binding stays RESERVED until unregistered. */
static void t_qp_destroy(void)
{
	struct cep_cm_id *a, *b;

	setup(2, 0);
	listen_on(&B, SID);
	a = establish(&b, 0x100, 0x101);
	CHECK_EQ(cep_cm_qp_destroy(A.cm, 0x100), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 1));
	CHECK(wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, 1));
	advance_ms(10);
	CHECK(wait_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK_EQ(cep_is_destroyed(cep_cm_id_cep(a)), 1);
	/* a bind to a destroyed QPN fails with the table's error */
	struct cep_cm_id *a2 = make_id(&A);
	struct cep_cm_conn_param p;

	conn_param(&p, 0x100, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a2, &p), -ENOENT);
	CHECK(wait_ev(&A, CEP_CM_EV_QP_DESTROYED, 1));
	/* while connecting (REP_SENT): REJ "no QP" to the peer, QP_DESTROYED.
	 * B's QP is bound to the old connection until B's timewait ends. */
	struct cep_msg m;

	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, 1));

	raw_req(&m, 0x6200, 0x900);
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REP, 1));
	struct cep_cm_id *bp = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;

	CHECK_EQ(cep_cm_qp_destroy(B.cm, 0x101), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_NO_QP);
	CHECK(wait_ev(&B, CEP_CM_EV_QP_DESTROYED, 1));
	CHECK_EQ(cep_cm_id_state(bp), CEP_CM_IDLE);
	CHECK_EQ(cep_is_destroyed(cep_cm_id_cep(bp)), 1);
	teardown_all();
}

/* Destroy: async with DESTROYED as the last event; the blocking variant
 * refuses inside a callback; destroying an established id sends DREQ. */
static int sync_in_cb_result = 1;
static int cb_try_sync(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_REQ_RECEIVED)
		sync_in_cb_result = cep_cm_destroy_id_sync(id);
	return on_event(id, ev);
}

static void t_destroy(void)
{
	struct cep_cm_id *a, *b;

	setup(2, 0);
	listen_on(&B, SID);
	a = establish(&b, 0x100, 0x101);
	CHECK_EQ(cep_cm_destroy_id(a), 0);
	CHECK_EQ(cep_cm_destroy_id(a), -EALREADY);
	CHECK(wait_ev(&A, CEP_CM_EV_DESTROYED, 1));
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 1));
	advance_ms(10);
	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DREP_RECEIVED, NULL), 0); /* user gone */
	/* in a callback: -EDEADLK */
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = cb_try_sync, .context = &B };
	struct cep_cm_id *l2;

	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l2), 0);
	CHECK_EQ(cep_cm_listen(l2, SID + 5, ~0ull), 0);
	B.pol.on_req = ON_REQ_NOTHING;
	struct cep_cm_conn_param p;
	struct cep_cm_id *a2 = make_id(&A);

	conn_param(&p, 0x102, LID_A, LID_B);
	p.service_id = SID + 5;
	CHECK_EQ(cep_cm_connect(a2, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 2));
	CHECK_EQ(sync_in_cb_result, -EDEADLK);
	/* destroying the passive id while REQ_RCVD rejects the peer */
	CHECK_EQ(cep_cm_destroy_id_sync(last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_REJ_RECEIVED, 1));
	CHECK_EQ(cep_cm_destroy_id_sync(l2), 0);
	teardown_all();
}

/* Event channel: the fd is readable (epoll) while events wait. */
static void t_channel(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id *a, *l;
	struct cep_cm_id_attr ia = { .size = sizeof(ia) };
	struct cep_cm_conn_param p;
	struct cep_cm_event *ev;
	int got_req = 0, got_est = 0;

	setup(2, 0);
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	ia.channel = ch;
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	CHECK_EQ(cep_cm_get_event(ch, &ev), -EAGAIN);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	int efd = cep_cm_channel_fd(ch);
	struct cep_cm_id *pb = NULL;

	for (int i = 0; i < 5000 && !got_est; i++) {
		/* Readable only while an event waits. A worker may post one
		 * between our get and the poll (a race of the test, not of the
		 * channel): then the fd is readable and the next get finds it. */
		if (cep_cm_get_event(ch, &ev) != 0) {
			struct pollfd pfd = { .fd = efd, .events = POLLIN };

			if (poll(&pfd, 1, 0) != 1) {
				sleep_ms(1);
				continue;
			}
			if (cep_cm_get_event(ch, &ev) != 0) {
				CHECK(!"fd readable with no event queued");
				continue;
			}
		}
		if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
			struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x101 };

			got_req = 1;
			CHECK(ev->listen_id == l);
			pb = ev->id;
			CHECK_EQ(cep_cm_accept(ev->id, &ap), 0);
		} else if (ev->type == CEP_CM_EV_RTU_RECEIVED) {
			got_est = 1;
		}
		cep_cm_ack_event(ev);
	}
	CHECK(got_req && got_est);
	CHECK_EQ(cep_cm_channel_destroy(ch), -EBUSY);
	CHECK_EQ(cep_cm_destroy_id_sync(pb), -EINVAL); /* channel ids: async */
	CHECK_EQ(cep_cm_destroy_id(pb), 0);
	CHECK_EQ(cep_cm_destroy_id(l), 0);
	int destroyed = 0;

	for (int i = 0; i < 5000 && destroyed < 2; i++) {
		if (cep_cm_get_event(ch, &ev)) {
			sleep_ms(1);
			continue;
		}
		destroyed += ev->type == CEP_CM_EV_DESTROYED;
		cep_cm_ack_event(ev);
	}
	CHECK_EQ(destroyed, 2);
	teardown_all();
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
}

/* A disconnects its @round-th connection; both sides leave timewait and B
 * destroys its passive id. */
static void disconnect_round(struct cep_cm_id *a, int round)
{
	struct cep_cm_id *b = last_ev(&B, CEP_CM_EV_RTU_RECEIVED).id;

	CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, round));
	advance_ms(10);
	CHECK(wait_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, round));
	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, round));
	CHECK_EQ(cep_cm_destroy_id(b), 0);
}

/* An id connects again after its connection ended (TIMEWAIT_EXIT), as
 * the kernel lets an IDLE cm_id send a new REQ (ib_send_cm_req only
 * checks IB_CM_IDLE). Twice, and after a REJ too. */
static void t_reconnect(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup_accepting(2);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	for (int round = 1; round <= 3; round++) {
		CHECK_EQ(cep_cm_connect(a, &p), 0);
		CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, round));
		CHECK_EQ(cep_cm_id_state(a), CEP_CM_ESTABLISHED);
		CHECK_EQ(count_ev(&A, CEP_CM_EV_REQ_ERROR, NULL), 0);
		check_binding(&A, 0x100, cep_cm_id_local_comm_id(a));
		disconnect_round(a, round);
		CHECK_EQ(cep_cm_id_state(a), CEP_CM_IDLE);
	}
	CHECK_EQ(stats_of(&A).rej_received[CEP_REJ_STALE_CONN], 0);
	CHECK_EQ(stats_of(&B).rej_received[CEP_REJ_STALE_CONN], 0);
	/* rejected, then connected on the same id */
	B.pol.on_req = ON_REQ_REJECT;
	B.pol.rej_reason = CEP_REJ_CONSUMER_DEFINED;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_REJ_RECEIVED, 1));
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_IDLE);
	B.pol.on_req = ON_REQ_ACCEPT;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 4));
	teardown_all();
}

/* The same from a CM worker, on an id whose remote keys were removed when
 * its first connection's timewait ended: A connects to a service nobody
 * listens on, and its REJ_RECEIVED callback connects again to the right
 * one (the kernel's cm_id handler may call ib_send_cm_req). Under
 * CEP_RCU=qsbr (cm-reconnect-callback-qsbr) the worker is an online QSBR
 * reader: nothing on the path may wait for a grace period. */
static void t_reconnect_callback(void)
{
	struct cep_cm_conn_param p, wrong;
	struct cep_cm_id *a;

	setup_accepting(2);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	wrong = p;
	wrong.service_id = SID + 1;
	for (int round = 1; round <= 3; round++) {
		if (round == 1) {
			CHECK_EQ(cep_cm_connect(a, &p), 0);
		} else {
			A.pol.reconnect = &p;
			CHECK_EQ(cep_cm_connect(a, &wrong), 0);
			CHECK(wait_ev(&A, CEP_CM_EV_REJ_RECEIVED, round - 1));
		}
		CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, round));
		A.pol.reconnect = NULL;
		CHECK_EQ(cep_cm_id_state(a), CEP_CM_ESTABLISHED);
		check_binding(&A, 0x100, cep_cm_id_local_comm_id(a));
		disconnect_round(a, round);
	}
	CHECK_EQ(atomic_load(&A.pol.reconnects), 2);
	CHECK_EQ(atomic_load(&A.pol.reconnect_errors), 0);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_IDLE);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REQ_ERROR, NULL), 0);
	CHECK_EQ(stats_of(&B).rej_received[CEP_REJ_STALE_CONN], 0);
	teardown_all();
}

/* Reject (REP_SENT) and destroy (MRA_REP_RCVD) after our REP went out:
 * the peer already has our QPN, so the QP stays bound to the id through
 * timewait, as the kernel's ib_send_cm_rej enters timewait there. */
static void t_rej_rep_sent(void)
{
	struct cep_msg m;
	struct cep_cm_id *b;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_to_rep_sent(0x7400, 0x900, 0x101, 1);
	CHECK_EQ(cep_cm_reject(b, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.remote_comm_id, 0x7400);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	check_binding(&B, 0x101, cep_cm_id_local_comm_id(b));
	advance_ms(10); /* 2 x the REQ's local ACK timeout 10 */
	CHECK(wait_ev(&B, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	check_binding(&B, 0x101, CEP_BINDING_INVALID);
	/* destroy in MRA_REP_RCVD */
	b = raw_to_rep_sent(0x7401, 0x901, 0x101, 2);
	uint32_t bc = raw_last(CEP_MSG_REP).u.rep.local_comm_id;

	raw_mra(&m, 2, 0x7401, bc, CEP_MSG_CODE_REP, 14);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_MRA_RECEIVED, 1));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REP_RCVD);
	CHECK_EQ(cep_cm_destroy_id_sync(b), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 2));
	check_binding(&B, 0x101, bc);
	CHECK_EQ(cep_is_destroyed(cep_cm_id_cep(b)), 0); /* timewait holds it */
	advance_ms(10);
	check_binding(&B, 0x101, CEP_BINDING_INVALID);
	teardown_all();
}

/* The active side gives up before it knows the passive comm ID (REQ_SENT):
 * QP destroyed, or the application rejects. The only REJ a peer can match
 * then is reason Timeout with our CA GUID in the ARI (found through the
 * remote (comm ID, GUID) key), which is what the kernel's cm_destroy_id
 * sends; a REJ "no QP" with remote comm ID 0 matches nobody. */
static void t_rej_unmatched(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a, *a2;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	struct cep_cm_id *b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;

	CHECK_EQ(cep_cm_qp_destroy(A.cm, 0x100), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REJ_RECEIVED, 1));
	CHECK_EQ(last_ev(&B, CEP_CM_EV_REJ_RECEIVED).ev.status, CEP_REJ_TIMEOUT);
	CHECK_EQ(last_ev(&B, CEP_CM_EV_REJ_RECEIVED).ev.msg.u.rej.reject_info_length, 8);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	/* the application rejects its own REQ */
	a2 = make_id(&A);
	conn_param(&p, 0x101, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a2, &p), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 2));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	CHECK_EQ(cep_cm_reject(a2, CEP_REJ_CONSUMER_DEFINED, NULL, 0, "bye", 4), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_REJ_RECEIVED, 2));
	CHECK_EQ(last_ev(&B, CEP_CM_EV_REJ_RECEIVED).ev.status, CEP_REJ_TIMEOUT);
	CHECK(pd_eq(last_ev(&B, CEP_CM_EV_REJ_RECEIVED), "bye"));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_NO_CEP], 0);
	teardown_all();
}

/* Answers echo the request's transaction ID (MAD TIDs pair a response
 * with its request): DREP to a DREQ (also a repeated one in timewait),
 * MRA and APR to a LAP - the kernel's cm_dreq_handler and cm_lap_handler
 * record the request's TID for them. */
static void t_tid_echo(void)
{
	struct cep_msg m;
	struct cep_path alt;
	struct cep_cm_id *b;
	uint32_t bc;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x7500, 0x900, 0x101, &bc);
	/* LAP with TID 0x51: MRA and APR echo it */
	cep_msg_init(&m, CEP_MSG_LAP, 0x5100000051ull);
	m.u.lap.local_comm_id = 0x7500;
	m.u.lap.remote_comm_id = bc;
	m.u.lap.remote_qpn_eecn = 0x101;
	m.u.lap.remote_cm_response_timeout = 14;
	path_to(&alt, LID_C, LID_B);
	m.u.lap.alternate = alt;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_LAP_RECEIVED, 1));
	CHECK_EQ(cep_cm_mra(b, 14, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_MRA, 1));
	CHECK_EQ(raw_last(CEP_MSG_MRA).hdr.tid, 0x5100000051ull);
	CHECK_EQ(cep_cm_apr(b, CEP_APR_SUCCESS, NULL, 0, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_APR, 1));
	CHECK_EQ(raw_last(CEP_MSG_APR).hdr.tid, 0x5100000051ull);
	/* DREQ with TID 0x77: the DREP echoes it; a repeat with 0x78 too */
	cep_msg_init(&m, CEP_MSG_DREQ, 0x7700000077ull);
	m.u.dreq.local_comm_id = 0x7500;
	m.u.dreq.remote_comm_id = bc;
	m.u.dreq.remote_qpn_eecn = 0x101;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_DREP, 1));
	CHECK_EQ(raw_last(CEP_MSG_DREP).hdr.tid, 0x7700000077ull);
	m.hdr.tid = 0x7800000078ull;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_DREP, 2));
	CHECK_EQ(raw_last(CEP_MSG_DREP).hdr.tid, 0x7800000078ull);
	teardown_all();
}

/* A REJ "timeout" with remote comm ID 0 is how an active side that gave
 * up before our REP was answered reaches us; it needs only the peer's
 * comm ID and CA GUID, so anyone can forge it. It is legitimate only for
 * a passive id before RTU (REQ_RCVD .. MRA_REP_RCVD); libcep drops and
 * counts it elsewhere (stricter than the kernel, docs/protocol.md). */
static void t_rej_timeout_forged(void)
{
	struct cep_msg m;
	struct cep_cm_id *b;
	uint32_t bc;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x7600, 0x900, 0x101, &bc);
	cep_msg_init(&m, CEP_MSG_REJ, 3);
	m.u.rej.local_comm_id = 0x7600;
	m.u.rej.remote_comm_id = 0;
	m.u.rej.reason = CEP_REJ_TIMEOUT;
	m.u.rej.reject_info_length = 8;
	for (int i = 0; i < 8; i++)
		m.u.rej.ari[i] = (uint8_t)(GUID_C >> (56 - 8 * i));
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REJ_RECEIVED, NULL), 0);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BAD_STATE], 1);
	/* also while B disconnects */
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0);
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_DREQ_SENT);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REJ_RECEIVED, NULL), 0);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BAD_STATE], 2);
	teardown_all();
}

/* A REP that names an existing connection's (remote comm ID, CA GUID) is a
 * duplicate to drop (kernel cm_rep_handler: "Check for duplicate REP"),
 * not a stale connection: the live connection must not be torn down. */
static void t_rep_dup_remote_id(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a, *a2;
	struct cep_msg m;

	setup(2, 0);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	raw_rep(&m, 0x6000, 0x901);
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	/* a second connection; its REP reuses the first one's comm ID */
	a2 = make_id(&A);
	conn_param(&p, 0x101, LID_A, LID_C);
	CHECK_EQ(cep_cm_connect(a2, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 2));
	raw_rep(&m, 0x6000, 0x902);
	raw_send(&m, LID_A);
	settle();
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_ESTABLISHED);
	CHECK_EQ(cep_cm_id_state(a2), CEP_CM_REQ_SENT);
	CHECK_EQ(raw_count(CEP_MSG_REJ), 0);
	CHECK_EQ(raw_count(CEP_MSG_DREQ), 0);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REP_RECEIVED, a2), 0);
	CHECK_EQ(stats_of(&A).duplicates, 1);
	/* the right REP for a2 still connects it */
	m.u.rep.local_comm_id = 0x6001;
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 2));
	CHECK_EQ(cep_cm_id_state(a2), CEP_CM_ESTABLISHED);
	/* a REP naming the first connection's QPN with a new comm ID is
	 * stale: REJ 10 to it and DREQ for the old connection (kernel) */
	struct cep_cm_id *a3 = make_id(&A);

	conn_param(&p, 0x102, LID_A, LID_C);
	CHECK_EQ(cep_cm_connect(a3, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 3));
	raw_rep(&m, 0x6002, 0x901);
	raw_send(&m, LID_A);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_STALE_CONN);
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_DREQ_SENT);
	CHECK_EQ(cep_cm_id_state(a3), CEP_CM_REQ_SENT);
	/* and a3's keys are still free for its right REP */
	m.u.rep.local_comm_id = 0x6003;
	m.u.rep.local_qpn = 0x903;
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 3));
	CHECK_EQ(cep_cm_id_state(a3), CEP_CM_ESTABLISHED);
	teardown_all();
}

/* A stale REQ (remote QPN + CA GUID of a live connection) for a service
 * nobody listens on: still REJ "stale connection" and the old connection
 * released - the kernel's cm_match_req checks duplicate, stale, then the
 * listener. */
static void t_stale_no_listener(void)
{
	struct cep_msg m;
	struct cep_cm_id *b;
	uint32_t bc;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x7700, 0x900, 0x101, &bc);
	raw_req(&m, 0x7701, 0x900);
	m.u.req.service_id = SID + 9;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_STALE_CONN);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.local_comm_id, 0);
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_DREQ_SENT);
	/* no listener, nothing stale: REJ 8, local comm ID 0 (kernel
	 * cm_issue_rej; conformance: passive-no-listener) */
	raw_req(&m, 0x7702, 0x905);
	m.u.req.service_id = SID + 9;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 2));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_INVALID_SERVICE_ID);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.remote_comm_id, 0x7702);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.local_comm_id, 0);
	teardown_all();
}

/* Timers from the right inputs (kernel cm_format_req / cm_format_rep /
 * cm_rep_handler): the REQ's local ACK timeout is computed from the
 * port's CA ACK delay and the packet life time (not copied from the
 * caller); the REP carries the port's CA ACK delay; the active side's
 * timewait follows the ACK timeout computed from the REP's target ACK
 * delay; timeouts a peer supplies are clamped to 2^24 x 4.096 us (68.7 s). */
static void t_timer_inputs(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a, *b;
	struct cep_msg m;

	ack_delay_of[0] = 15;
	ack_delay_of[1] = 17;
	setup_accepting(2);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.packet_life_time = 14;
	p.primary.local_ack_timeout = 3;  /* ignored: computed */
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	/* max(14 + 1, 15) plus one as they are within one: 16 */
	CHECK_EQ(raw_last(CEP_MSG_REQ).u.req.primary.local_ack_timeout, 16);
	/* C answers with target ACK delay 20: A's ACK timeout becomes 20 and
	 * its timewait 4.096 us x 2^20 = 4295 ms (kernel cm_enter_timewait) */
	raw_rep(&m, 0x7800, 0x901);
	m.u.rep.target_ack_delay = 20;
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	cep_msg_init(&m, CEP_MSG_DREP, raw_last(CEP_MSG_DREQ).hdr.tid);
	m.u.drep.local_comm_id = 0x7800;
	m.u.drep.remote_comm_id = cep_cm_id_local_comm_id(a);
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, 1));
	advance_ms(4294);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, NULL), 0);
	advance_ms(1);
	CHECK(wait_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	/* B's REP carries B's port ACK delay */
	raw_req(&m, 0x7801, 0x901);
	m.u.req.local_cm_response_timeout = 31; /* ~2.4 h: clamped to 24 */
	m.u.req.primary.local_ack_timeout = 31; /* timewait clamped too */
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REP, 1));
	CHECK_EQ(raw_last(CEP_MSG_REP).u.rep.target_ack_delay, 17);
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	/* the REP is retried after 2^24 x 4.096 us = 68720 ms, not 2.4 h */
	advance_ms(68719);
	CHECK_EQ(raw_count(CEP_MSG_REP), 1);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_REP), 2);
	uint32_t bc = raw_last(CEP_MSG_REP).u.rep.local_comm_id;

	cep_msg_init(&m, CEP_MSG_RTU, 1);
	m.u.rtu.local_comm_id = 0x7801;
	m.u.rtu.remote_comm_id = bc;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, 1));
	raw_dreq(0x7801, bc, 0x101);
	CHECK(raw_wait(CEP_MSG_DREP, 1));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	advance_ms(68720 - 1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	advance_ms(1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	teardown_all();
}

/* Every RTU lost: the passive side's QP has seen the peer's first packet
 * (IBV_EVENT_COMM_EST), so the application tells the CM, as
 * ib_cm_notify(IB_EVENT_COMM_EST) does in the kernel: REP_SENT ->
 * ESTABLISHED, the REP is not retried, no REJ "timeout" kills a
 * connection the active side already uses; a late RTU is a duplicate. */
static void t_comm_est(void)
{
	struct cep_msg m;
	struct cep_cm_id *b;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_to_rep_sent(0x7900, 0x900, 0x101, 1);
	CHECK_EQ(cep_cm_notify_established(b), 0);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	CHECK(wait_ev(&B, CEP_CM_EV_ESTABLISHED, 1));
	CHECK_EQ(cep_cm_notify_established(b), -EISCONN);
	for (int i = 0; i < 6; i++) /* REP retried every 34 ms, 3 times: no more */
		advance_ms(34);
	CHECK_EQ(raw_count(CEP_MSG_REP), 1);
	CHECK_EQ(raw_count(CEP_MSG_REJ), 0);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REP_ERROR, NULL), 0);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	/* the RTU after all: a duplicate, no event */
	cep_msg_init(&m, CEP_MSG_RTU, 1);
	m.u.rtu.local_comm_id = 0x7900;
	m.u.rtu.remote_comm_id = raw_last(CEP_MSG_REP).u.rep.local_comm_id;
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(count_ev(&B, CEP_CM_EV_RTU_RECEIVED, NULL), 0);
	CHECK_EQ(stats_of(&B).duplicates, 1);
	/* not while connecting otherwise, nor on a listener */
	CHECK_EQ(cep_cm_notify_established(B.made[0]), -EINVAL);
	CHECK_EQ(cep_cm_notify_established(NULL), -EINVAL);
	teardown_all();
}

/* Half-open connections are bounded per listener: REQs beyond the
 * listener's backlog are dropped and counted (the kernel drops a REQ
 * whose handler returns -ENOMEM without REJ, so the peer retries); an
 * answer frees a slot. */
static void t_backlog(void)
{
	struct cep_msg m;
	struct cep_cm_id *l;

	setup(2, 0);
	l = make_id(&B);
	CHECK_EQ(cep_cm_listen_backlog(l, SID, ~0ull, 4), 0);
	B.pol.on_req = ON_REQ_NOTHING;
	for (uint32_t i = 0; i < 10; i++) {
		raw_req(&m, 0x7a00 + i, 0x900 + i);
		raw_send(&m, LID_B);
	}
	settle();
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 4);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BACKLOG], 6);
	CHECK_EQ(raw_count(CEP_MSG_REJ), 0);
	/* answering one frees its slot */
	CHECK_EQ(cep_cm_reject(last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id, CEP_REJ_CONSUMER_DEFINED,
			       NULL, 0, NULL, 0), 0);
	raw_req(&m, 0x7a20, 0x920);
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 5);
	CHECK_EQ(cep_cm_listen_backlog(make_id(&B), SID + 1, ~0ull, 0), 0); /* 0: default */
	teardown_all();
}

/* Issue 21, the 10,000-connection storm in small: a burst of REQs beyond
 * the listener's backlog to a slow application (it accepts 4 requests per
 * 5 ms) whose peer is slow too (each RTU 200 ms after its REP, longer than the REQ retry period of
 * 136 ms, as cmtime's
 * client sends it after RTR/RTS). ucma's backlog (the kernel's rdma_cm)
 * counts only requests the application has not taken; a REQ past it is
 * dropped unanswered (cm_destroy_id in REQ_RCVD with -ENOMEM: "Do not
 * reject to allow future retries") and retried by the requester. So an
 * accepted child, waiting for its RTU in REP_SENT, must not hold a slot:
 * when it did, the backlog filled with REP_SENT ids and most REQs were
 * dropped again and again. Every connection completes; the REQs per
 * connection are printed and bounded. */
static void t_backlog_storm(void)
{
	enum { N = 48, BACKLOG = 8, STEP_MS = 5, TAKE = 4, RTU_STEPS = 40 };
	struct cep_cm_conn_param p;
	struct cep_cm_id *a[N], *l;
	int rep_step[N], rtu_sent = 0, taken = 0, step;
	struct cep_cm_stats sa, sb;

	setup(2, 0);
	for (uint32_t q = 0; q < N; q++) {
		CHECK_EQ(cep_cm_qp_register(A.cm, 0x200 + q), 0);
		CHECK_EQ(cep_cm_qp_register(B.cm, 0x300 + q), 0);
	}
	l = make_id(&B);
	CHECK_EQ(cep_cm_listen_backlog(l, SID, ~0ull, BACKLOG), 0);
	B.pol.on_req = ON_REQ_NOTHING; /* the test thread accepts, slowly */
	for (int i = 0; i < N; i++) {
		a[i] = make_id(&A);
		rep_step[i] = -1;
		conn_param(&p, 0x200 + (uint32_t)i, LID_A, LID_B);
		p.manual_rtu = 1;
		p.max_cm_retries = 15;
		CHECK_EQ(cep_cm_connect(a[i], &p), 0);
	}
	for (step = 0; step < 4000 && rtu_sent < N; step++) {
		struct cep_cm_id *req[N];
		int nreq = 0, took = 0;

		advance_ms(STEP_MS);
		pthread_mutex_lock(&B.mtx);
		for (int k = 0; k < B.n && nreq < N; k++)
			if (B.log[k].ev.type == CEP_CM_EV_REQ_RECEIVED)
				req[nreq++] = B.log[k].id;
		pthread_mutex_unlock(&B.mtx);
		for (int k = taken; k < nreq && took < TAKE; k++, took++) {
			struct cep_cm_accept_param ap = { .size = sizeof(ap),
				.qpn = 0x300 + (uint32_t)k, .starting_psn = 0x4242,
				.responder_resources = 4, .initiator_depth = 4 };

			CHECK_EQ(cep_cm_accept(req[k], &ap), 0);
		}
		taken += took;
		for (int i = 0; i < N; i++) {
			if (rep_step[i] < 0 && cep_cm_id_state(a[i]) == CEP_CM_REP_RCVD)
				rep_step[i] = step;
			if (rep_step[i] >= 0 && step - rep_step[i] == RTU_STEPS) {
				CHECK_EQ(cep_cm_rtu(a[i], NULL, 0), 0);
				rtu_sent++;
			}
		}
	}
	advance_ms(STEP_MS);
	CHECK_EQ(rtu_sent, N);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_RTU_RECEIVED, NULL), N);
	for (int i = 0; i < N; i++)
		CHECK_EQ(cep_cm_id_state(a[i]), CEP_CM_ESTABLISHED);
	sa = stats_of(&A);
	sb = stats_of(&B);
	printf("backlog-storm: %d connections, backlog %d: all established after %d ms; "
	       "REQs sent %llu (%.2f per connection), dropped on the backlog %llu, "
	       "REQ_RECEIVED %llu\n", N, BACKLOG, step * STEP_MS,
	       (unsigned long long)sa.sent[CEP_MSG_REQ], (double)sa.sent[CEP_MSG_REQ] / N,
	       (unsigned long long)sb.drops[CEP_CM_DROP_BACKLOG],
	       (unsigned long long)sb.events[CEP_CM_EV_REQ_RECEIVED]);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), N);
	/* Only unanswered requests fill the backlog: each round of retries
	 * (all REQs went out at once) admits BACKLOG, the application has
	 * answered them long before the next round, so N + (N - BACKLOG) +
	 * ... REQs in all (168: 3.5 per connection). With the REP_SENT ids
	 * counted until their RTU came 200 ms later, a round found the
	 * slots still held: 288 REQs, 6.0 per connection, 1610 ms. */
	unsigned want = 0;

	for (int r = N; r > 0; r -= BACKLOG)
		want += (unsigned)r;
	CHECK(sa.sent[CEP_MSG_REQ] <= want);
	teardown_all();
}

/* A REQ nobody answers does not hold its id forever: once the requester
 * has given up (1 + Max CM Retries periods of its response timeout plus
 * two packet lifetimes) the passive id goes back to IDLE with REQ_ERROR,
 * and its backlog slot and CEP are free. A flood of 2000 fresh REQs to a
 * silent application leaves at most the backlog (default 1024) live and
 * nothing after the expiry. */
static void t_half_open_expiry(void)
{
	struct cep_msg m;
	struct cep_table_stats st;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	B.pol.destroy_on_error = 1;
	raw_req(&m, 0x7b00, 0x900);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	struct cep_cm_id *b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;

	/* the REQ: 4 tries of 2 x 3 ms + 17 ms = 92 ms */
	advance_ms(91);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_REQ_RCVD);
	advance_ms(1);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_ERROR, 1));
	CHECK_EQ(last_ev(&B, CEP_CM_EV_REQ_ERROR).ev.status, -ETIMEDOUT);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DESTROYED, b), 1); /* the callback's verdict */
	/* the flood */
	for (uint32_t i = 0; i < 2000; i++) {
		raw_req(&m, 0x100000 + i, 0x10000 + i);
		raw_send(&m, LID_B);
		if (i % 256 == 255)
			settle();
	}
	settle();
	cep_table_stats(cep_cm_table(B.cm), &st);
	CHECK_EQ(st.live, 1 + 1024);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BACKLOG], 2000 - 1024);
	advance_ms(92);
	cep_table_stats(cep_cm_table(B.cm), &st);
	CHECK_EQ(st.live, 1); /* the listener */
	teardown_all();
}

/* Issue 17: the half-open expiry is bounded by a local limit
 * (cep_cm_attr.half_open_timeout_ms, default 60 s), whatever timeouts the
 * requester gives. A forged REQ with every timeout at 31 and 15 retries
 * (its requester would wait 16 x (2 x 68.7 s + 68.7 s), 55 minutes,
 * with the clamp) held a backlog slot for all that time, so one forged
 * REQ a second kept a backlog of 1024 full; now a slot frees after 60 s
 * (counted: half_open_expired, half_open_limited). Our own MRA lets an
 * id wait its service timeout; automatic MRA and SIDR obey the limit. */
static void forged_req(struct cep_msg *m, uint32_t comm_id, uint32_t qpn)
{
	raw_req(m, comm_id, qpn);
	m->u.req.remote_cm_response_timeout = 31;
	m->u.req.local_cm_response_timeout = 31;
	m->u.req.primary.local_ack_timeout = 31;
	m->u.req.max_cm_retries = 15;
}

static void t_half_open_limit(void)
{
	struct cep_msg m;
	struct cep_table_stats st;
	struct cep_cm_id *b, *mraed;
	uint64_t most = 0;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	B.pol.destroy_on_error = 1;
	forged_req(&m, 0x7b80, 0x900);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	advance_ms(59999);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_REQ_RCVD);
	advance_ms(1);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_ERROR, 1));
	CHECK_EQ(stats_of(&B).half_open_expired, 1);
	CHECK_EQ(stats_of(&B).half_open_limited, 1);
	CHECK_EQ(raw_count(CEP_MSG_REJ) + raw_count(CEP_MSG_MRA), 0); /* nothing sent */
	/* one forged REQ a second for 5 minutes: at most 60 half-open */
	for (uint32_t i = 0; i < 300; i++) {
		forged_req(&m, 0x200000 + i, 0x20000 + i);
		raw_send(&m, LID_B);
		advance_ms(1000);
		cep_table_stats(cep_cm_table(B.cm), &st);
		if (st.live - 1 > most)
			most = st.live - 1;
	}
	CHECK(most <= 60);
	advance_ms(60000);
	cep_table_stats(cep_cm_table(B.cm), &st);
	CHECK_EQ(st.live, 1); /* the listener */
	CHECK_EQ(stats_of(&B).half_open_expired, 301);
	CHECK_EQ(stats_of(&B).half_open_limited, 301);
	/* our MRA outlasts the limit: the id waits for the requester's next
	 * try after it - our service timeout (26: 274878 ms) + its ACK
	 * timeout + one of its response timeouts (31, clamped to 24: 68720
	 * ms each) */
	B.pol.destroy_on_error = 0;
	forged_req(&m, 0x7b81, 0x901);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 302));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	CHECK_EQ(cep_cm_mra(b, 26, NULL, 0), 0);
	mraed = b;
	advance_ms(274878 + 2 * 68720 - 1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	advance_ms(1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	/* SIDR: min(68.7 s, the limit) */
	cep_msg_init(&m, CEP_MSG_SIDR_REQ, 0x5151);
	m.u.sidr_req.request_id = 0x7b82;
	m.u.sidr_req.service_id = SID;
	m.u.sidr_req.partition_key = 0xffff;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_SIDR_REQ_RECEIVED, 1));
	b = last_ev(&B, CEP_CM_EV_SIDR_REQ_RECEIVED).id;
	advance_ms(59999);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_SIDR_REQ_RCVD);
	advance_ms(1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	CHECK_EQ(stats_of(&B).half_open_expired, 1 + 300 + 1 + 1);
	/* by hand: the harness tells ids apart by address, and these two may
	 * reuse the memory of ids destroyed above */
	CHECK_EQ(cep_cm_destroy_id_sync(b), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(mraed), 0);
	teardown_all();
}

/* The same limit set by the context (5 s) with automatic MRA: the MRA
 * goes at half the requester's response timeout (20: 4295 ms), and from
 * it the id waits for the requester's next try, past the limit: the
 * context's MRA service timeout (16: 269 ms) + the requester's ACK
 * timeout (31, clamped to 24: 68720 ms) + its response timeout. Each
 * repeat of the REQ gets the MRA again and starts that wait over (a
 * request the application holds lives while its requester waits, as the
 * kernel's). A REQ whose requester gives up first expires then, not
 * counted as limited. */
static void t_half_open_limit_auto_mra(void)
{
	struct cep_msg m;
	struct cep_cm_id *b;

	half_open_ms_of[1] = 5000;
	setup(2, 1);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	forged_req(&m, 0x7b90, 0x900);
	m.u.req.remote_cm_response_timeout = 20;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	const uint32_t next_try = 269 + 68720 + 4295;

	advance_ms(2149);
	CHECK(raw_wait(CEP_MSG_MRA, 1));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	advance_ms(next_try - 1000);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	raw_send(&m, LID_B); /* the requester tries again */
	CHECK(raw_wait(CEP_MSG_MRA, 2));
	advance_ms(1010); /* past the first wait's end */
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	advance_ms(next_try - 1010 - 2);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	advance_ms(3);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_ERROR, 1));
	/* a quick requester is not cut: not counted as limited */
	raw_req(&m, 0x7b91, 0x901);
	m.u.req.max_cm_retries = 2;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 2));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	advance_ms(9); /* the MRA (17 ms / 2), then 269 + 5 + 2 x (2 x 3 + 17) */
	CHECK(raw_wait(CEP_MSG_MRA, 3));
	advance_ms(319);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	advance_ms(1);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_ERROR, 2));
	CHECK_EQ(stats_of(&B).half_open_expired, 2);
	CHECK_EQ(stats_of(&B).half_open_limited, 1);
	teardown_all();
}

/* The worker a REQ lands on is keyed with a per-context secret: the same
 * REQs reach two identical contexts on different workers, so a sender
 * cannot steer a flood onto the worker of a victim connection. */
static void t_route_keyed(void)
{
	struct cep_msg m;
	int same = 0, n = 0;
	unsigned wb[64];

	setup(16, 0);
	listen_on(&A, SID);
	listen_on(&B, SID);
	A.pol.on_req = ON_REQ_NOTHING;
	B.pol.on_req = ON_REQ_NOTHING;
	for (uint32_t i = 0; i < 64; i++) {
		raw_req(&m, 0x7c00 + i, 0x900 + i);
		raw_send(&m, LID_B);
		settle();
		wb[i] = cep_cm_id_local_comm_id(last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id) % 16;
		m.u.req.primary.remote_lid = LID_A;
		raw_send(&m, LID_A);
		settle();
		same += wb[i] == cep_cm_id_local_comm_id(last_ev(&A, CEP_CM_EV_REQ_RECEIVED).id) % 16;
		n++;
	}
	CHECK_EQ(n, 64);
	CHECK(same < 20); /* 4 expected by chance; an unkeyed hash gives 64 */
	teardown_all();
}

/* C (raw) connects to B with an alternate path from X (C's second port,
 * say); B accepts on qb: B's id, its comm ID in *b_comm, ESTABLISHED (the
 * @rtus-th RTU_RECEIVED). Before the RTU: cep_cm_migrate refused. */
static struct cep_cm_id *raw_establish_alt(uint32_t comm_id, uint32_t qpn, uint32_t qb, int rtus,
					   uint32_t *b_comm)
{
	struct cep_msg m;
	struct cep_cm_id *b;
	int reps = raw_count(CEP_MSG_REP);

	B.pol.on_req = ON_REQ_ACCEPT;
	B.pol.accept_qpn = qb;
	raw_req(&m, comm_id, qpn);
	path_to(&m.u.req.alternate, LID_X, LID_B);
	m.u.req.alternate.sl = 5;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REP, reps + 1));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	*b_comm = raw_last(CEP_MSG_REP).u.rep.local_comm_id;
	CHECK_EQ(cep_cm_migrate(b), -EINVAL); /* REP_SENT: not established */
	cep_msg_init(&m, CEP_MSG_RTU, 1);
	m.u.rtu.local_comm_id = comm_id;
	m.u.rtu.remote_comm_id = *b_comm;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, rtus));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	return b;
}

/* C's LAP (TID @tid) on its connection @local / @remote (B's QP @qpn)
 * for an alternate path from @slid to B; waits for B's @laps-th
 * LAP_RECEIVED. */
static void raw_lap(uint64_t tid, uint32_t local, uint32_t remote, uint32_t qpn, uint16_t slid,
		    int laps)
{
	struct cep_msg m;

	cep_msg_init(&m, CEP_MSG_LAP, tid);
	m.u.lap.local_comm_id = local;
	m.u.lap.remote_comm_id = remote;
	m.u.lap.remote_qpn_eecn = qpn;
	m.u.lap.remote_cm_response_timeout = 14;
	path_to(&m.u.lap.alternate, slid, LID_B);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_LAP_RECEIVED, laps));
}

/* cep_cm_migrate, the kernel's ib_cm_notify(IB_EVENT_PATH_MIG): once the
 * QP migrated, the connection's CM messages go by its alternate path (X
 * stands for the peer's second port): the REQ's on the passive side, the
 * connect's on the active side, a LAP's once answered with success; the
 * primary it left is still the peer's address. Refused (-EINVAL) without
 * an alternate, before ESTABLISHED and while a LAP waits for its APR. */
static void t_migrate(void)
{
	struct cep_cm_conn_param p;
	struct cep_msg m;
	struct cep_cm_id *a, *b, *b2;
	uint32_t bc, b2c;
	int xd, cd;

	setup(2, 0);
	listen_on(&B, SID);
	CHECK_EQ(cep_cm_migrate(NULL), -EINVAL);
	/* no alternate path (rdma_cm's connections, every one on RoCE) */
	b = raw_establish(0x7f00, 0x900, 0x101, &bc);
	CHECK_EQ(cep_cm_migrate(b), -EINVAL);
	/* passive: C's REQ has an alternate path from X */
	b2 = raw_establish_alt(0x7f01, 0x901, 0x102, 2, &b2c);
	xd = raw_count_at(&X, CEP_MSG_DREQ);
	cd = raw_count(CEP_MSG_DREQ);
	CHECK_EQ(cep_cm_migrate(b2), 0);
	CHECK_EQ(cep_cm_migrate(b2), 0); /* on it already: nothing changes */
	CHECK_EQ(cep_cm_disconnect(b2, NULL, 0), 0);
	settle();
	CHECK_EQ(raw_count_at(&X, CEP_MSG_DREQ), xd + 1); /* by the alternate path */
	CHECK_EQ(raw_count(CEP_MSG_DREQ), cd);
	/* the peer's DREP by its primary (its QP not migrated yet) counts */
	cep_msg_init(&m, CEP_MSG_DREP, raw_last_at(&X, CEP_MSG_DREQ).hdr.tid);
	m.u.drep.local_comm_id = 0x7f01;
	m.u.drep.remote_comm_id = b2c;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_DREP_RECEIVED, 1));
	CHECK_EQ(cep_cm_id_state(b2), CEP_CM_TIMEWAIT);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_ADDRESS], 0);
	/* a LAP answered with success gives b an alternate; not while the
	 * LAP waits for its APR */
	raw_lap(0x62, 0x7f00, bc, 0x101, LID_X, 1);
	CHECK_EQ(cep_cm_migrate(b), -EINVAL);
	CHECK_EQ(cep_cm_apr(b, CEP_APR_SUCCESS, NULL, 0, NULL, 0), 0);
	xd = raw_count_at(&X, CEP_MSG_DREQ);
	cd = raw_count(CEP_MSG_DREQ);
	CHECK_EQ(cep_cm_migrate(b), 0);
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0);
	settle();
	CHECK_EQ(raw_count_at(&X, CEP_MSG_DREQ), xd + 1);
	CHECK_EQ(raw_count(CEP_MSG_DREQ), cd);
	/* a LAP answered with success after a migration arms its path: the
	 * APR goes by the alternate the connection is on (X), the next
	 * migration moves to the LAP's (C's port again) */
	b2 = raw_establish_alt(0x7f02, 0x902, 0x104, 3, &b2c);
	CHECK_EQ(cep_cm_migrate(b2), 0);
	raw_lap(0x63, 0x7f02, b2c, 0x104, LID_C, 2);
	int xa = raw_count_at(&X, CEP_MSG_APR);

	CHECK_EQ(cep_cm_apr(b2, CEP_APR_SUCCESS, NULL, 0, NULL, 0), 0);
	settle();
	CHECK_EQ(raw_count_at(&X, CEP_MSG_APR), xa + 1);
	xd = raw_count_at(&X, CEP_MSG_DREQ);
	cd = raw_count(CEP_MSG_DREQ);
	CHECK_EQ(cep_cm_migrate(b2), 0);
	CHECK_EQ(cep_cm_disconnect(b2, NULL, 0), 0);
	settle();
	CHECK_EQ(raw_count(CEP_MSG_DREQ), cd + 1);
	CHECK_EQ(raw_count_at(&X, CEP_MSG_DREQ), xd);
	/* active: A's connect names an alternate path to X */
	a = make_id(&A);
	B.pol.accept_qpn = 0x103;
	conn_param(&p, 0x100, LID_A, LID_B);
	path_to(&p.alternate, LID_A, LID_X);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	xd = raw_count_at(&X, CEP_MSG_DREQ);
	int bd = count_ev(&B, CEP_CM_EV_DREQ_RECEIVED, NULL);

	CHECK_EQ(cep_cm_migrate(a), 0);
	CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
	settle();
	CHECK_EQ(raw_count_at(&X, CEP_MSG_DREQ), xd + 1);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DREQ_RECEIVED, NULL), bd);
	CHECK_EQ(cep_cm_destroy_id(a), 0);
	teardown_all();
}

/* Messages for a connection count only from its peer's address (the
 * REQ's destination or source, the paths a LAP installs): a stranger
 * (port X) who learnt the IDs cannot end, reset, stall or complete it.
 * Stricter than the kernel, which does not look at the source. Also: a
 * REJ for our REQ must say it rejects the REQ (the kernel drops the
 * "other" code), and an MRA's service timeout is clamped. */
static void t_peer_address(void)
{
	struct cep_cm_conn_param p;
	struct cep_msg m;
	struct cep_cm_id *a, *b;
	uint32_t bc, ac;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x7d00, 0x900, 0x101, &bc);
	/* X's DREQ with C's IDs: dropped, nothing sent */
	cep_msg_init(&m, CEP_MSG_DREQ, 7);
	m.u.dreq.local_comm_id = 0x7d00;
	m.u.dreq.remote_comm_id = bc;
	m.u.dreq.remote_qpn_eecn = 0x101;
	raw_send_from(&X, &m, LID_B);
	settle();
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_ADDRESS], 1);
	CHECK_EQ(X.n + raw_count(CEP_MSG_DREP), 0);
	/* X's REQ claiming C's QPN and CA GUID: refused as stale, but C's
	 * live connection is not released for a stranger */
	raw_req(&m, 0x7d10, 0x900);
	raw_send_from(&X, &m, LID_B);
	settle();
	CHECK_EQ(X.n, 1);
	CHECK_EQ(X.got[0].u.rej.reason, CEP_REJ_STALE_CONN);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_ESTABLISHED);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_ADDRESS], 2);
	/* A connects to C; X tries REJ, MRA and REP with the right IDs */
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.remote_cm_response_timeout = 14; /* 67 ms + 2 x 2 ms per try */
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	ac = raw_last(CEP_MSG_REQ).u.req.local_comm_id;
	cep_msg_init(&m, CEP_MSG_REJ, 3);
	m.u.rej.remote_comm_id = ac;
	m.u.rej.reason = CEP_REJ_CONSUMER_DEFINED;
	m.u.rej.message_rejected = CEP_MSG_CODE_REQ;
	raw_send_from(&X, &m, LID_A);
	raw_mra(&m, 4, 0x7d01, ac, CEP_MSG_CODE_REQ, 31);
	raw_send_from(&X, &m, LID_A);
	cep_msg_init(&m, CEP_MSG_REP, raw_last(CEP_MSG_REQ).hdr.tid);
	m.u.rep.local_comm_id = 0x7d02;
	m.u.rep.remote_comm_id = ac;
	m.u.rep.local_qpn = 0x902; /* X's own QP */
	m.u.rep.local_ca_guid = GUID_X;
	raw_send_from(&X, &m, LID_A);
	settle();
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_REQ_SENT);
	CHECK_EQ(stats_of(&A).drops[CEP_CM_DROP_ADDRESS], 3);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REJ_RECEIVED, NULL) + count_ev(&A, CEP_CM_EV_MRA_RECEIVED, NULL) +
		 count_ev(&A, CEP_CM_EV_REP_RECEIVED, NULL), 0);
	/* C's REJ with the "other" code cannot end a REQ it never rejected */
	cep_msg_init(&m, CEP_MSG_REJ, 3);
	m.u.rej.remote_comm_id = ac;
	m.u.rej.reason = CEP_REJ_CONSUMER_DEFINED;
	m.u.rej.message_rejected = CEP_MSG_CODE_OTHER;
	raw_send(&m, LID_A);
	settle();
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_REQ_SENT);
	/* C's MRA asking for 2.4 hours: clamped to 68.7 s */
	raw_mra(&m, 4, 0x7d01, ac, CEP_MSG_CODE_REQ, 31);
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 1));
	int reqs = raw_count(CEP_MSG_REQ);

	advance_ms(68720 + 2 * 2 + 10); /* service timeout + path's ACK timeout */
	CHECK_EQ(raw_count(CEP_MSG_REQ), reqs + 1); /* retried, not stalled */
	/* an alternate path installed by LAP makes X a peer address too */
	struct cep_path alt;

	path_to(&alt, LID_X, LID_B);
	cep_msg_init(&m, CEP_MSG_LAP, 0x61);
	m.u.lap.local_comm_id = 0x7d00;
	m.u.lap.remote_comm_id = bc;
	m.u.lap.remote_qpn_eecn = 0x101;
	m.u.lap.remote_cm_response_timeout = 14;
	m.u.lap.alternate = alt;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_LAP_RECEIVED, 1));
	CHECK_EQ(cep_cm_apr(b, CEP_APR_SUCCESS, NULL, 0, NULL, 0), 0);
	cep_msg_init(&m, CEP_MSG_DREQ, 8);
	m.u.dreq.local_comm_id = 0x7d00;
	m.u.dreq.remote_comm_id = bc;
	m.u.dreq.remote_qpn_eecn = 0x101;
	raw_send_from(&X, &m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 1));
	teardown_all();
}

/* Disconnect when the peer's DREQ came first, or when we already
 * disconnect, behaves as librdmacm's rdma_disconnect (which answers a
 * received DREQ with a DREP when it cannot send its own DREQ, and returns
 * 0): DREQ_RCVD -> DREP, TIMEWAIT; DREQ_SENT and TIMEWAIT -> 0, nothing
 * sent; a connection not yet established -> -EINVAL. */
static void t_disconnect_crossed(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a, *b;
	uint32_t bc;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.manual_drep = 1;
	b = raw_establish(0x7e00, 0x900, 0x101, &bc);
	raw_dreq(0x7e00, bc, 0x101);
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 1));
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_DREQ_RCVD);
	CHECK_EQ(cep_cm_disconnect(b, "bye", 4), 0);
	CHECK(raw_wait(CEP_MSG_DREP, 1));
	CHECK(!strcmp((const char *)raw_last(CEP_MSG_DREP).u.drep.private_data, "bye"));
	CHECK_EQ(raw_last(CEP_MSG_DREP).hdr.tid, 7); /* raw_dreq's TID */
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0);  /* timewait: nothing to do */
	settle();
	CHECK_EQ(raw_count(CEP_MSG_DREP) + raw_count(CEP_MSG_DREQ), 1);
	/* DREQ_SENT: a second disconnect sends nothing more */
	b = raw_establish(0x7e01, 0x901, 0x102, &bc);
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0);
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0);
	settle();
	CHECK_EQ(raw_count(CEP_MSG_DREQ), 1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_DREQ_SENT);
	/* not established: nothing to disconnect */
	a = make_id(&A);
	CHECK_EQ(cep_cm_disconnect(a, NULL, 0), -EINVAL);
	conn_param(&p, 0x100, LID_A, LID_C);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK_EQ(cep_cm_disconnect(a, NULL, 0), -EINVAL);
	CHECK_EQ(cep_cm_destroy_id(a), 0);
	/* An active id may leave the DREP to the application too, as an
	 * rdma_cm one always does (its DREP is rdma_disconnect's; conformance
	 * active-disconnect-in-dreq-rcvd, active-dreq-crossing-dreq). */
	struct cep_msg m;

	for (int crossing = 0; crossing < 2; crossing++) {
		uint32_t cid = 0x7e10 + (uint32_t)crossing;
		uint32_t qpn = 0x10c + (uint32_t)crossing;

		a = make_id(&A);
		conn_param(&p, qpn, LID_A, LID_C);
		p.manual_drep = 1;
		CHECK_EQ(cep_cm_connect(a, &p), 0);
		CHECK(raw_wait(CEP_MSG_REQ, crossing + 1));
		raw_rep(&m, cid, 0x920 + (uint32_t)crossing);
		raw_send(&m, LID_A);
		CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, crossing + 1));
		if (crossing) { /* our DREQ and the peer's cross */
			CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
			CHECK(raw_wait(CEP_MSG_DREQ, 1));
		}
		cep_msg_init(&m, CEP_MSG_DREQ, 0x77 + (uint64_t)crossing);
		m.u.dreq.local_comm_id = cid;
		m.u.dreq.remote_comm_id = cep_cm_id_local_comm_id(a);
		m.u.dreq.remote_qpn_eecn = qpn;
		raw_send(&m, LID_A);
		CHECK(wait_ev(&A, CEP_CM_EV_DREQ_RECEIVED, crossing + 1));
		settle();
		CHECK_EQ(raw_count(CEP_MSG_DREP), 1 + crossing); /* none from A */
		CHECK_EQ(cep_cm_id_state(a), CEP_CM_DREQ_RCVD);
		if (!crossing) {
			CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
			CHECK(raw_wait(CEP_MSG_DREP, 2));
			CHECK_EQ(raw_last(CEP_MSG_DREP).hdr.tid, 0x77);
		} else { /* the peer's DREP for our DREQ ends it, unanswered */
			cep_msg_init(&m, CEP_MSG_DREP, raw_last(CEP_MSG_DREQ).hdr.tid);
			m.u.drep.local_comm_id = cid;
			m.u.drep.remote_comm_id = cep_cm_id_local_comm_id(a);
			raw_send(&m, LID_A);
			CHECK(wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, 1));
			CHECK_EQ(raw_count(CEP_MSG_DREP), 2);
		}
		CHECK_EQ(cep_cm_id_state(a), CEP_CM_TIMEWAIT);
	}
	teardown_all();
}

/* A REQ of a class version we do not speak gets REJ 31 "unsupported
 * class version" with the highest version we support (2) in the ARI, as
 * docs/protocol.md says; any other message of that version is dropped. */
static void t_class_version(void)
{
	struct cep_msg m;
	uint8_t mad[CEP_MAD_SIZE];
	struct cep_mad_addr to = { .lid = LID_B, .qpn = 1, .qkey = CEP_QP1_QKEY };

	setup(2, 0);
	listen_on(&B, SID);
	raw_req(&m, 0x7f00, 0x900);
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	mad[2] = 3; /* class version */
	CHECK_EQ(C.tp->ops->send(C.tp, mad, sizeof(mad), &to), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	struct cep_msg r = raw_last(CEP_MSG_REJ);

	CHECK_EQ(r.u.rej.reason, CEP_REJ_INVALID_CLASS_VERSION);
	CHECK_EQ(r.u.rej.remote_comm_id, 0x7f00);
	CHECK_EQ(r.u.rej.message_rejected, CEP_MSG_CODE_REQ);
	CHECK_EQ(r.u.rej.reject_info_length, 1);
	CHECK_EQ(r.u.rej.ari[0], 2);
	CHECK_EQ(r.hdr.tid, m.hdr.tid);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 0);
	raw_dreq(0x7f00, 0x1234, 0x101);
	settle();
	cep_msg_init(&m, CEP_MSG_DREQ, 9);
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	mad[2] = 3;
	CHECK_EQ(C.tp->ops->send(C.tp, mad, sizeof(mad), &to), 0);
	settle();
	CHECK_EQ(raw_count(CEP_MSG_REJ), 1);
	teardown_all();
}

/* The MRA resent for a duplicate REP (MRA_REP_SENT) answers only a REP of
 * this connection: a REP naming another sender comm ID is dropped (the
 * kernel's cm_dup_rep_handler looks the id up by both comm IDs). */
static void t_dup_rep_mra_ids(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;
	struct cep_msg m;

	setup(2, 0);
	A.pol.mra_rep = 1;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.manual_rtu = 1;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	raw_rep(&m, 0x7f10, 0x901);
	raw_send(&m, LID_A);
	CHECK(raw_wait(CEP_MSG_MRA, 1));
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_MRA_REP_SENT);
	raw_send(&m, LID_A); /* the same REP again: MRA again */
	CHECK(raw_wait(CEP_MSG_MRA, 2));
	m.u.rep.local_comm_id = 0x7f11; /* not this connection's peer */
	raw_send(&m, LID_A);
	settle();
	CHECK_EQ(raw_count(CEP_MSG_MRA), 2);
	CHECK_EQ(stats_of(&A).drops[CEP_CM_DROP_MISMATCH], 1);
	teardown_all();
}

/* A resent MRA, RTU or DREP carries the private data of the original, as
 * the kernel keeps it (cm_set_private_data) for cm_dup_req_handler,
 * cm_dup_rep_handler and the DREP of a repeated DREQ. */
static void t_resend_pdata(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a, *b;
	struct cep_msg m, req;
	uint32_t bc;

	setup(2, 0);
	listen_on(&B, SID);
	/* MRA for a REQ, resent for the repeated REQ */
	B.pol.on_req = ON_REQ_NOTHING;
	raw_req(&req, 0x7f20, 0x900);
	raw_send(&req, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	CHECK_EQ(cep_cm_mra(b, 16, "mra-pd", 7), 0);
	raw_send(&req, LID_B);
	CHECK(raw_wait(CEP_MSG_MRA, 2));
	CHECK(!strcmp((const char *)raw_last(CEP_MSG_MRA).u.mra.private_data, "mra-pd"));
	/* DREP, resent for the repeated DREQ */
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x101, .manual_drep = 1 };

	CHECK_EQ(cep_cm_accept(b, &ap), 0);
	CHECK(raw_wait(CEP_MSG_REP, 1));
	bc = raw_last(CEP_MSG_REP).u.rep.local_comm_id;
	cep_msg_init(&m, CEP_MSG_RTU, 1);
	m.u.rtu.local_comm_id = 0x7f20;
	m.u.rtu.remote_comm_id = bc;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, 1));
	raw_dreq(0x7f20, bc, 0x101);
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 1));
	CHECK_EQ(cep_cm_drep(b, "drep-pd", 8), 0);
	raw_dreq(0x7f20, bc, 0x101);
	CHECK(raw_wait(CEP_MSG_DREP, 2));
	CHECK(!strcmp((const char *)raw_last(CEP_MSG_DREP).u.drep.private_data, "drep-pd"));
	/* RTU, resent for the repeated REP */
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.manual_rtu = 1;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	raw_rep(&m, 0x7f21, 0x901);
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_REP_RECEIVED, 1));
	CHECK_EQ(cep_cm_rtu(a, "rtu-pd", 7), 0);
	raw_send(&m, LID_A);
	CHECK(raw_wait(CEP_MSG_RTU, 2));
	CHECK(!strcmp((const char *)raw_last(CEP_MSG_RTU).u.rtu.private_data, "rtu-pd"));
	teardown_all();
}

/* End-to-end flow control is the caller's (ib_cm_req_param / rep_param
 * .flow_control in the kernel), not always 1. */
static void t_flow_control(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;
	struct cep_msg m;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.flow_control = 0;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REQ).u.req.end_to_end_flow_control, 0);
	struct cep_cm_id *a2 = make_id(&A);

	conn_param(&p, 0x101, LID_A, LID_C);
	p.flow_control = 1;
	CHECK_EQ(cep_cm_connect(a2, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 2));
	CHECK_EQ(raw_last(CEP_MSG_REQ).u.req.end_to_end_flow_control, 1);
	raw_req(&m, 0x7f30, 0x900);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x101, .flow_control = 0 };

	CHECK_EQ(cep_cm_accept(last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id, &ap), 0);
	CHECK(raw_wait(CEP_MSG_REP, 1));
	CHECK_EQ(raw_last(CEP_MSG_REP).u.rep.end_to_end_flow_control, 0);
	teardown_all();
}

/* An MRA extends the wait by its service timeout plus the path's ACK
 * timeout (kernel cm_mra_handler: service timeout + av.timeout), not one
 * packet lifetime: packet life 14 -> path timeout 15 (135 ms). */
static void t_mra_path_timeout(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;
	struct cep_msg m;

	setup(2, 0);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.packet_life_time = 14;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	raw_mra(&m, 4, 0x7f40, raw_last(CEP_MSG_REQ).u.req.local_comm_id, CEP_MSG_CODE_REQ,
		10); /* 5 ms */
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 1));
	advance_ms(139);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 1);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 2);
	teardown_all();
}

/* MRA semantics (docs/protocol.md, "MRA"), on both sides:
 * - active: an MRA extends the wait in progress only (service timeout +
 *   path ACK timeout), as the kernel since 6.14; the peer's MRA for a
 *   later try extends that try's wait again (one extension per try:
 *   issue 21), a second MRA for the same try is a duplicate, a try no MRA
 *   answers waits the normal period;
 * - passive: after our MRA the id expires when such a requester has given
 *   up: service timeout + path ACK timeout + Max CM Retries normal
 *   periods (before: every period extended, kernel 6.1's reading). */
static void t_mra_once(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a, *b;
	struct cep_msg m;

	setup(2, 0);
	listen_on(&B, SID);
	/* active A -> raw C: REQ every 2 x 2 ms + 17 ms = 21 ms, 3 retries */
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.remote_cm_response_timeout = 12;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	raw_mra(&m, 4, 0x7f80, raw_last(CEP_MSG_REQ).u.req.local_comm_id, CEP_MSG_CODE_REQ,
		14); /* 68 ms + the path's 3 ms */
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 1));
	advance_ms(70);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 1);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 2);
	raw_send(&m, LID_A); /* C repeats its MRA for the repeated REQ */
	raw_send(&m, LID_A); /* and a copy: a duplicate */
	settle();
	CHECK_EQ(count_ev(&A, CEP_CM_EV_MRA_RECEIVED, NULL), 1);
	CHECK_EQ(stats_of(&A).duplicates, 1);
	advance_ms(70); /* this try extended too */
	CHECK_EQ(raw_count(CEP_MSG_REQ), 2);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 3);
	advance_ms(20); /* no MRA for this try: the normal period */
	CHECK_EQ(raw_count(CEP_MSG_REQ), 3);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 4);
	raw_send(&m, LID_A); /* MRAs still extend the last try... */
	settle();
	advance_ms(70);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REQ_ERROR, NULL), 0);
	advance_ms(1); /* ...but no try is left: Max CM Retries bounds a busy or lying peer */
	CHECK(wait_ev(&A, CEP_CM_EV_REQ_ERROR, 1));
	CHECK_EQ(raw_count(CEP_MSG_REQ), 4);
	/* passive B <- raw C: B's application MRAs (service timeout 16, 269
	 * ms); C's REQ: path ACK timeout 10 (5 ms), packet life 9 (3 ms),
	 * response timeout 12 (17 ms), 3 retries. C gives up after 269 + 5 +
	 * 3 x (2 x 3 + 17) = 343 ms: then B's id expires. */
	B.pol.on_req = ON_REQ_MRA;
	raw_req(&m, 0x7f81, 0x900);
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_MRA, 1));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	advance_ms(342);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	advance_ms(1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_ERROR, 1));
	teardown_all();
}

/* Linux rdma_cm answers a repeated REQ its application holds with an MRA
 * of service timeout 24 (CMA_CM_MRA_SETTING, 68.7 s): the clamp of a peer's
 * timeouts (exponent 24) keeps it whole. Before, 23 halved it and the
 * REQ came again after 34.4 s. */
static void t_mra_timeout_24(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;
	struct cep_msg m;

	setup(2, 0);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	raw_mra(&m, 4, 0x7f90, raw_last(CEP_MSG_REQ).u.req.local_comm_id, CEP_MSG_CODE_REQ,
		24);
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_MRA_RECEIVED, 1));
	/* 4.096 us x 2^24 = 68720 ms, + the path's ACK timeout (9: 3 ms) */
	advance_ms(34363);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 1);
	advance_ms(68722 - 34363);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 1);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 2);
	teardown_all();
}

/* The REQ's primary path must lead to this port: a remote port LID that
 * is not ours gets REJ 13 with our LID in the ARI (the kernel refuses a
 * path it cannot resolve to a local port, cm_init_av_by_path). */
static void t_req_path_lid(void)
{
	struct cep_msg m;

	setup(2, 0);
	listen_on(&B, SID);
	raw_req(&m, 0x7f50, 0x900);
	m.u.req.primary.remote_lid = 9;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_INVALID_LID);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reject_info_length, 2);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.ari[1], LID_B);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.local_comm_id, 0);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 0);
	/* another partition: REJ 12 (kernel cm_init_av_by_path) */
	raw_req(&m, 0x7f51, 0x901);
	m.u.req.partition_key = 0x1234;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 2));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_INVALID_GID);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reject_info_length, 16);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.local_comm_id, 0);
	/* the same partition with the other membership bit: accepted */
	raw_req(&m, 0x7f52, 0x902);
	m.u.req.partition_key = 0x7fff;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	CHECK_EQ(raw_count(CEP_MSG_REJ), 2);
	teardown_all();
}

/* A zero-filled connect parameter block (but the QPN, service and path)
 * gets librdmacm's defaults for its CM timing fields, documented in cm.h:
 * response timeouts 20 (4.3 s), Max CM Retries 15, packet life 16
 * (268 ms; the kernel's RoCE default), so the REQ is retried after
 * 2 x 269 + 4295 = 4833 ms instead of timing out for good after 3 ms. */
static void t_conn_defaults(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup(2, 0);
	a = make_id(&A);
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = SID;
	p.qpn = 0x100;
	path_to(&p.primary, LID_A, LID_C);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	struct cep_msg r = raw_last(CEP_MSG_REQ);

	CHECK_EQ(r.u.req.remote_cm_response_timeout, 20);
	CHECK_EQ(r.u.req.local_cm_response_timeout, 20);
	CHECK_EQ(r.u.req.max_cm_retries, 15);
	advance_ms(4832);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 1);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_REQ_ERROR, NULL), 0);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_REQ), 2);
	/* SIDR: timeout and retries 0 take the same defaults */
	struct cep_mad_addr to_c = { .lid = LID_C };
	struct cep_cm_sidr_param sp = { .size = sizeof(sp), .service_id = SID, .peer = &to_c };
	struct cep_cm_id *s2 = make_id(&A);

	CHECK_EQ(cep_cm_sidr_req(s2, &sp), 0);
	CHECK(raw_wait(CEP_MSG_SIDR_REQ, 1));
	advance_ms(4294);
	CHECK_EQ(raw_count(CEP_MSG_SIDR_REQ), 1);
	advance_ms(1);
	CHECK_EQ(raw_count(CEP_MSG_SIDR_REQ), 2);
	teardown_all();
}

/* RTU, DREQ and DREP events point private_data at the message only when
 * the peer sent some: the wire field has no length, so an all-zero field
 * is "none" (NULL, length 0), as cm.h says. */
static void t_pdata_none(void)
{
	struct cep_msg m;
	struct cep_cm_id *b;
	uint32_t bc;

	setup(2, 0);
	listen_on(&B, SID);
	b = raw_establish(0x7f70, 0x900, 0x101, &bc); /* its RTU carries none */
	struct logged l = last_ev(&B, CEP_CM_EV_RTU_RECEIVED);

	CHECK(l.ev.private_data == NULL);
	CHECK_EQ(l.ev.private_data_len, 0);
	raw_dreq(0x7f70, bc, 0x101);
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 1));
	CHECK(last_ev(&B, CEP_CM_EV_DREQ_RECEIVED).ev.private_data == NULL);
	CHECK_EQ(last_ev(&B, CEP_CM_EV_DREQ_RECEIVED).ev.private_data_len, 0);
	/* with data: the whole field */
	b = raw_establish(0x7f71, 0x901, 0x102, &bc);
	cep_msg_init(&m, CEP_MSG_DREQ, 8);
	m.u.dreq.local_comm_id = 0x7f71;
	m.u.dreq.remote_comm_id = bc;
	m.u.dreq.remote_qpn_eecn = 0x102;
	m.u.dreq.private_data[5] = 1;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 2));
	CHECK(last_ev(&B, CEP_CM_EV_DREQ_RECEIVED).ev.private_data != NULL);
	CHECK_EQ(last_ev(&B, CEP_CM_EV_DREQ_RECEIVED).ev.private_data_len,
		 CEP_DREQ_PRIVATE_DATA_SIZE);
	/* DREP with none */
	b = raw_establish(0x7f72, 0x902, 0x103, &bc);
	CHECK_EQ(cep_cm_disconnect(b, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	cep_msg_init(&m, CEP_MSG_DREP, raw_last(CEP_MSG_DREQ).hdr.tid);
	m.u.drep.local_comm_id = 0x7f72;
	m.u.drep.remote_comm_id = bc;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_DREP_RECEIVED, 1));
	CHECK(last_ev(&B, CEP_CM_EV_DREP_RECEIVED).ev.private_data == NULL);
	teardown_all();
}

/* When a handle is dead (cm.h): after cep_cm_destroy_id() the id stays
 * valid until its DESTROYED is handled (here: acked on a channel), but it
 * is no longer the application's to drive - every call but the getters
 * and a second destroy (-EALREADY) is -EINVAL; a second cep_cm_destroy()
 * of a context is -EINVAL, not a use after free. */
static void t_handle_dead(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id_attr ia = { .size = sizeof(ia) };
	struct cep_cm_id *id;
	struct cep_cm_event *ev;
	struct cep_cm_conn_param p;

	setup(2, 0);
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	ia.channel = ch;
	CHECK_EQ(cep_cm_create_id(A.cm, &ia, &id), 0);
	CHECK_EQ(cep_cm_destroy_id(id), 0);
	CHECK_EQ(cep_cm_destroy_id(id), -EALREADY);
	conn_param(&p, 0x100, LID_A, LID_C);
	CHECK_EQ(cep_cm_connect(id, &p), -EINVAL);
	CHECK_EQ(cep_cm_listen(id, SID, ~0ull), -EINVAL);
	CHECK_EQ(cep_cm_disconnect(id, NULL, 0), -EINVAL);
	CHECK_EQ(cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), -EINVAL);
	CHECK_EQ(cep_cm_notify_established(id), -EINVAL);
	CHECK_EQ(cep_cm_id_state(id), CEP_CM_IDLE); /* getters still answer */
	settle();
	CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
	CHECK(ev->id == id && ev->type == CEP_CM_EV_DESTROYED);
	cep_cm_ack_event(ev); /* from here the handle is dead */
	teardown_all();
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
	/* a second destroy of a context */
	struct cep_fabric *f2;
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = 9, .lid = 9,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_transport *t;
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 1 };
	struct cep_cm *cm;

	CHECK_EQ(cep_fabric_create(&fa, &f2), 0);
	CHECK_EQ(cep_fabric_port_create(f2, &pa, &t), 0);
	ca.transport = t;
	CHECK_EQ(cep_cm_create(&ca, &cm), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	CHECK_EQ(cep_cm_destroy(cm), -EINVAL);
	t->ops->destroy(t);
	CHECK_EQ(cep_fabric_destroy(f2), 0);
}

/* What cep_cm_id(3) RETURN VALUE and cep_cm(3) promise a new user: a
 * call in the wrong state is -EINVAL, as the kernel's ib_send_cm_req /
 * rdma_connect (connect twice) and ib_send_cm_rep / rdma_accept (accept on
 * an IDLE id) answer it, and the state tells it from a bad argument;
 * -EISCONN where ib_cm_notify has it; stats.ids drops when an id is
 * destroyed, not a grace period later. */
static void t_user_contract(void)
{
	struct cep_cm_id *a, *b, *idle;
	struct cep_cm_conn_param p;
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x10f };
	struct cep_cm_stats st = { .size = sizeof(st) };

	setup(2, 0);
	listen_on(&B, SID);
	a = establish(&b, 0x100, 0x101);
	conn_param(&p, 0x102, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), -EINVAL);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_ESTABLISHED);
	CHECK_EQ(cep_cm_connect(NULL, &p), -EINVAL);
	idle = make_id(&B);
	CHECK_EQ(cep_cm_accept(idle, &ap), -EINVAL);
	CHECK_EQ(cep_cm_id_state(idle), CEP_CM_IDLE);
	CHECK_EQ(cep_cm_listen(idle, SID, ~0ull), -EADDRINUSE);
	CHECK_EQ(cep_cm_notify_established(b), -EISCONN);
	CHECK_EQ(cep_cm_get_stats(A.cm, &st), 0);
	CHECK_EQ(st.ids, 1);
	CHECK_EQ(cep_cm_destroy_id(a), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_DESTROYED, 1));
	CHECK_EQ(cep_cm_quiesce(A.cm, 5000), 0);
	CHECK_EQ(cep_cm_get_stats(A.cm, &st), 0);
	CHECK_EQ(st.ids, 0);
	CHECK_EQ(cep_cm_get_stats(B.cm, &st), 0);
	CHECK_EQ(st.ids, 3); /* listener, passive id, idle */
	teardown_all();
}

/* Issue 26: the REJ of a request names our local comm ID only once the
 * requester knows it. From REQ_RCVD (nothing sent yet) it is 0, from
 * MRA_REQ_SENT our MRA's: the kernel's cm_format_rej writes them so per
 * state (REQ_RCVD: 0; MRA_REQ_SENT, REP_RCVD and the rest: the id's), for
 * the application's reject and for the REJ 28 of a destroy alike
 * (cm_destroy_id). Message rejected: REQ in both. */
static void t_rej_req_local_id(void)
{
	struct cep_cm_id *b;
	struct cep_msg m, r;
	uint32_t ours;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	raw_req(&m, 0x7fb0, 0x900);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	CHECK_EQ(cep_cm_reject(b, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	r = raw_last(CEP_MSG_REJ);
	CHECK_EQ(r.u.rej.local_comm_id, 0);
	CHECK_EQ(r.u.rej.remote_comm_id, 0x7fb0);
	CHECK_EQ(r.u.rej.message_rejected, CEP_MSG_CODE_REQ);
	CHECK_EQ(r.u.rej.reason, CEP_REJ_CONSUMER_DEFINED);
	CHECK_EQ(r.hdr.tid, m.hdr.tid);
	/* after our MRA: the comm ID the MRA gave */
	raw_req(&m, 0x7fb1, 0x901);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 2));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	CHECK_EQ(cep_cm_mra(b, 16, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_MRA, 1));
	ours = raw_last(CEP_MSG_MRA).u.mra.local_comm_id;
	CHECK(ours != 0);
	CHECK_EQ(ours, cep_cm_id_local_comm_id(b));
	CHECK_EQ(cep_cm_reject(b, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 2));
	r = raw_last(CEP_MSG_REJ);
	CHECK_EQ(r.u.rej.local_comm_id, ours);
	CHECK_EQ(r.u.rej.remote_comm_id, 0x7fb1);
	CHECK_EQ(r.u.rej.message_rejected, CEP_MSG_CODE_REQ);
	/* destroyed in REQ_RCVD: REJ 28, local comm ID 0 */
	raw_req(&m, 0x7fb2, 0x902);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 3));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	CHECK_EQ(cep_cm_destroy_id(b), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 3));
	r = raw_last(CEP_MSG_REJ);
	CHECK_EQ(r.u.rej.local_comm_id, 0);
	CHECK_EQ(r.u.rej.remote_comm_id, 0x7fb2);
	CHECK_EQ(r.u.rej.reason, CEP_REJ_CONSUMER_DEFINED);
	teardown_all();
}

/* Issue 26: a SIDR_REQ past the listener's backlog is refused with
 * SIDR_REP status 2 "reject", request ID and TID echoed, counted BACKLOG
 * (a REQ there is still dropped unanswered). The kernel: ucma refuses a
 * request past its backlog (ucma_connect_event_handler: -ENOMEM), rdma_cm
 * passes the error to ib_cm, and ib_cm's cm_destroy_id answers a
 * SIDR_REQ_RCVD id with status 2 whatever the error (only REQ_RCVD with
 * -ENOMEM stays silent). Before, the SIDR_REQ was dropped. */
static void t_sidr_backlog(void)
{
	struct cep_cm_id *l;
	struct cep_msg m, r;

	setup(2, 0);
	l = make_id(&B);
	CHECK_EQ(cep_cm_listen_backlog(l, SID, ~0ull, 1), 0);
	for (uint32_t i = 0; i < 2; i++) {
		cep_msg_init(&m, CEP_MSG_SIDR_REQ, 0x5150 + i);
		m.u.sidr_req.request_id = 0x7fc0 + i;
		m.u.sidr_req.service_id = SID;
		m.u.sidr_req.partition_key = 0xffff;
		raw_send(&m, LID_B);
		settle();
	}
	CHECK_EQ(count_ev(&B, CEP_CM_EV_SIDR_REQ_RECEIVED, NULL), 1);
	CHECK(raw_wait(CEP_MSG_SIDR_REP, 1));
	r = raw_last(CEP_MSG_SIDR_REP);
	CHECK_EQ(r.u.sidr_rep.status, CEP_SIDR_REJECT);
	CHECK_EQ(r.u.sidr_rep.request_id, 0x7fc1);
	CHECK_EQ(r.u.sidr_rep.service_id, SID);
	CHECK_EQ(r.hdr.tid, 0x5151);
	CHECK_EQ(raw_count(CEP_MSG_SIDR_REP), 1);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BACKLOG], 1);
	/* a REQ past the same backlog: dropped, nothing sent */
	raw_req(&m, 0x7fc2, 0x900);
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL), 0);
	CHECK_EQ(raw_count(CEP_MSG_REJ) + raw_count(CEP_MSG_MRA), 0);
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BACKLOG], 2);
	teardown_all();
}

/* Issue 26: a requester may repeat its REQ only as often as its Max CM
 * Retries says. While the request is unanswered each repeat spends one of
 * those tries; in MRA_REQ_SENT a repeat within them gets our MRA again
 * and renews the expiry (the kernel's cm_dup_req_handler MRAs every
 * repeat, and its REQ_RCVD never expires), a repeat beyond them is a
 * lie: nothing sent, nothing renewed, and the request expires. Before,
 * every repeat renewed the wait: a peer held a half-open id and its
 * backlog slot for ever (3,602 s, 61 MRAs). Times: our MRA 16 (269 ms) +
 * the path's ACK timeout 10 (5 ms) = 274 ms; C's normal period 2 x 3 ms
 * + 17 ms = 23 ms. */
static void t_half_open_repeats(void)
{
	struct cep_cm_id *b;
	struct cep_msg m;

	setup(2, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_MRA; /* service timeout 16 */
	raw_req(&m, 0x7f90, 0x900);
	m.u.req.max_cm_retries = 2; /* one REQ and two repeats */
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_MRA, 1)); /* expiry: 274 + 2 x 23 ms */
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	advance_ms(250);
	raw_send(&m, LID_B); /* repeat 1: MRA, expiry 250 + 274 + 23 */
	CHECK(raw_wait(CEP_MSG_MRA, 2));
	advance_ms(250);
	raw_send(&m, LID_B); /* repeat 2, the last: MRA, expiry 500 + 274 */
	CHECK(raw_wait(CEP_MSG_MRA, 3));
	advance_ms(250);
	raw_send(&m, LID_B); /* repeat 3: more than the REQ allows */
	settle();
	CHECK_EQ(raw_count(CEP_MSG_MRA), 3);
	CHECK_EQ(stats_of(&B).duplicates, 3);
	advance_ms(23); /* 773 ms */
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	advance_ms(1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_ERROR, 1));
	CHECK_EQ(last_ev(&B, CEP_CM_EV_REQ_ERROR).ev.status, -ETIMEDOUT);
	CHECK_EQ(raw_count(CEP_MSG_MRA), 3);
	/* repeats before our MRA spend tries too: one retry, repeated while
	 * REQ_RCVD (dropped); after the application's MRA the requester has
	 * none left, so the next repeat gets nothing and the id expires when
	 * the MRA's wait ends (274 ms) */
	B.pol.on_req = ON_REQ_NOTHING;
	raw_req(&m, 0x7f91, 0x901);
	m.u.req.max_cm_retries = 1;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 2));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_REQ_RCVD);
	CHECK_EQ(cep_cm_mra(b, 16, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_MRA, 4));
	advance_ms(100);
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(raw_count(CEP_MSG_MRA), 4);
	advance_ms(173);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_MRA_REQ_SENT);
	advance_ms(1);
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_IDLE);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_ERROR, 2));
	CHECK_EQ(stats_of(&B).half_open_expired, 2);
	teardown_all();
}

/* Issue 26: with auto_mra the engine may MRA a request before the
 * application does (here at once: the listener has another request
 * unanswered). The kernel's ib_send_cm_mra refuses a second MRA for one
 * request (-EINVAL in MRA_REQ_SENT), but the engine's is not the
 * application's: the application's replaces it - sent with its service
 * timeout and private data, and resent for a repeat - and only a second
 * one of its own is refused. Before, the call returned -EINVAL or 0
 * depending on whether the engine had been first. */
static void t_mra_replaces_auto(void)
{
	struct cep_cm_id *b1, *b2;
	struct cep_msg m, r;

	setup(2, 1);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_NOTHING;
	raw_req(&m, 0x7fa0, 0x900);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_REQ_RECEIVED, 1));
	b1 = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	raw_req(&m, 0x7fa1, 0x901);
	raw_send(&m, LID_B); /* behind: the engine MRAs it at once */
	CHECK(raw_wait(CEP_MSG_MRA, 1));
	b2 = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	CHECK(b2 != b1);
	CHECK_EQ(cep_cm_id_state(b2), CEP_CM_MRA_REQ_SENT);
	CHECK_EQ(raw_last(CEP_MSG_MRA).u.mra.service_timeout, 16); /* the context's */
	CHECK_EQ(cep_cm_mra(b2, 20, "app", 4), 0);
	CHECK(raw_wait(CEP_MSG_MRA, 2));
	r = raw_last(CEP_MSG_MRA);
	CHECK_EQ(r.u.mra.service_timeout, 20);
	CHECK_EQ(r.u.mra.remote_comm_id, 0x7fa1);
	CHECK(!strcmp((const char *)r.u.mra.private_data, "app"));
	CHECK_EQ(cep_cm_mra(b2, 21, NULL, 0), -EINVAL); /* its second: refused */
	raw_send(&m, LID_B); /* a repeat gets the application's MRA */
	CHECK(raw_wait(CEP_MSG_MRA, 3));
	r = raw_last(CEP_MSG_MRA);
	CHECK_EQ(r.u.mra.service_timeout, 20);
	CHECK(!strcmp((const char *)r.u.mra.private_data, "app"));
	/* the first request, still REQ_RCVD: the application's MRA as ever */
	CHECK_EQ(cep_cm_id_state(b1), CEP_CM_REQ_RCVD);
	CHECK_EQ(cep_cm_mra(b1, 20, NULL, 0), 0);
	CHECK_EQ(cep_cm_mra(b1, 20, NULL, 0), -EINVAL);
	CHECK(raw_wait(CEP_MSG_MRA, 4));
	CHECK_EQ(raw_count(CEP_MSG_MRA), 4);
	teardown_all();
}

/* XRC (issue 28): an XRC target's REP names its QP in the local EECN with
 * local QPN 0 (the kernel's cm_format_rep for IB_QPT_XRC_TGT). A REP of
 * the other form names no QP of the connection and changes nothing - the
 * kernel's cm_rep_handler reads the field of its id's type whatever the
 * REP says: an XRC connect answered by an RC REP, and an RC connect
 * answered by an XRC one, are dropped (MISMATCH) and the id waits; the
 * right REP then establishes it with the QP it named (the DREQ names
 * it). The codec refuses a REP of local QPN 0 that is no XRC target's. */
static void t_xrc_rep_form(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a, *a2;
	struct cep_msg m, out;
	uint8_t mad[CEP_MAD_SIZE];
	uint64_t drops;

	setup(2, 0);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_C);
	p.transport_service_type = CEP_TS_EXTENDED;
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REQ).u.req.transport_service_type, CEP_TS_EXTENDED);
	CHECK_EQ(raw_last(CEP_MSG_REQ).u.req.extended_transport_type, CEP_EXT_TRANSPORT_XRC);
	drops = stats_of(&A).drops[CEP_CM_DROP_MISMATCH];
	raw_rep(&m, 0x7100, 0x900); /* an RC responder's */
	raw_send(&m, LID_A);
	settle();
	CHECK_EQ(stats_of(&A).drops[CEP_CM_DROP_MISMATCH], drops + 1);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_REQ_SENT);
	CHECK_EQ(raw_count(CEP_MSG_RTU), 0);
	raw_rep(&m, 0x7100, 0); /* the target's */
	m.u.rep.local_eecn = 0x900;
	m.u.rep.srq = 1;
	raw_send(&m, LID_A);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	CHECK(raw_wait(CEP_MSG_RTU, 1));
	CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	CHECK_EQ(raw_last(CEP_MSG_DREQ).u.dreq.remote_qpn_eecn, 0x900);

	a2 = make_id(&A);
	conn_param(&p, 0x101, LID_A, LID_C); /* RC */
	CHECK_EQ(cep_cm_connect(a2, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 2));
	CHECK_EQ(raw_last(CEP_MSG_REQ).u.req.transport_service_type, CEP_TS_RC);
	raw_rep(&m, 0x7101, 0);
	m.u.rep.local_eecn = 0x901;
	m.u.rep.srq = 1;
	raw_send(&m, LID_A);
	settle();
	CHECK_EQ(stats_of(&A).drops[CEP_CM_DROP_MISMATCH], drops + 2);
	CHECK_EQ(cep_cm_id_state(a2), CEP_CM_REQ_SENT);
	CHECK_EQ(raw_count(CEP_MSG_RTU), 1);

	/* the codec: local QPN 0 only with SRQ and a QP in the EECN */
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(cep_msg_decode(mad, sizeof(mad), &out, NULL), 0);
	m.u.rep.srq = 0;
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(cep_msg_decode(mad, sizeof(mad), &out, NULL), -EBADMSG);
	m.u.rep.srq = 1;
	m.u.rep.local_eecn = 1;
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(cep_msg_decode(mad, sizeof(mad), &out, NULL), -EBADMSG);
	teardown_all();
}

static const struct {
	const char *name;
	void (*fn)(void);
} scenarios[] = {
	{ "xrc-rep-form", t_xrc_rep_form },
	{ "rej-req-local-id", t_rej_req_local_id },
	{ "sidr-backlog", t_sidr_backlog },
	{ "half-open-repeats", t_half_open_repeats },
	{ "mra-replaces-auto", t_mra_replaces_auto },
	{ "user-contract", t_user_contract },
	{ "conn-defaults", t_conn_defaults },
	{ "pdata-none", t_pdata_none },
	{ "handle-dead", t_handle_dead },
	{ "class-version", t_class_version },
	{ "dup-rep-mra-ids", t_dup_rep_mra_ids },
	{ "resend-pdata", t_resend_pdata },
	{ "flow-control", t_flow_control },
	{ "mra-path-timeout", t_mra_path_timeout },
	{ "mra-once", t_mra_once },
	{ "mra-timeout-24", t_mra_timeout_24 },
	{ "req-path-lid", t_req_path_lid },
	{ "disconnect-crossed", t_disconnect_crossed },
	{ "peer-address", t_peer_address },
	{ "migrate", t_migrate },
	{ "backlog", t_backlog },
	{ "backlog-storm", t_backlog_storm },
	{ "half-open-expiry", t_half_open_expiry },
	{ "half-open-limit", t_half_open_limit },
	{ "half-open-limit-auto-mra", t_half_open_limit_auto_mra },
	{ "route-keyed", t_route_keyed },
	{ "comm-est", t_comm_est },
	{ "timer-inputs", t_timer_inputs },
	{ "stale-no-listener", t_stale_no_listener },
	{ "rep-dup-remote-id", t_rep_dup_remote_id },
	{ "rej-timeout-forged", t_rej_timeout_forged },
	{ "tid-echo", t_tid_echo },
	{ "rej-unmatched", t_rej_unmatched },
	{ "rej-rep-sent", t_rej_rep_sent },
	{ "reconnect", t_reconnect },
	{ "reconnect-callback", t_reconnect_callback },
	{ "establish", t_establish },
	{ "rej-consumer", t_rej_consumer },
	{ "rej-no-listener", t_rej_no_listener },
	{ "rej-rep", t_rej_rep },
	{ "mra-req", t_mra_req },
	{ "mra-auto", t_mra_auto },
	{ "mra-behind", t_mra_behind },
	{ "mra-pace", t_mra_pace },
	{ "mra-rep", t_mra_rep },
	{ "mra-rep-auto", t_mra_rep_auto },
	{ "mra-rep-pace", t_mra_rep_pace },
	{ "req-timeout", t_req_timeout },
	{ "tid", t_tid },
	{ "rep-timeout", t_rep_timeout },
	{ "rej-timeout-remote", t_rej_timeout_remote },
	{ "dup-req-rcvd", t_dup_req_rcvd },
	{ "dup-req-mra", t_dup_req_mra },
	{ "dup-req-timewait-reuse", t_dup_req_timewait_and_reuse },
	{ "reconnect-peer-timewait", t_reconnect_peer_timewait },
	{ "stale-conn", t_stale_conn },
	{ "simultaneous-dreq", t_simultaneous_dreq },
	{ "simultaneous-dreq-pair", t_simultaneous_dreq_pair },
	{ "dreq-timeout", t_dreq_timeout },
	{ "dreq-in-timewait", t_dreq_in_timewait },
	{ "dreq-after-timewait", t_dreq_after_timewait },
	{ "dreq-lossy", t_dreq_lossy },
	{ "dreq-bad-state-tid", t_dreq_bad_state_tid },
	{ "forged-unknown", t_forged_and_unknown },
	{ "dup-rep-rtu", t_dup_rep_rtu },
	{ "lap-apr", t_lap_apr },
	{ "lap-timeout", t_lap_timeout },
	{ "lap-dreq-period", t_lap_dreq_period },
	{ "sidr", t_sidr },
	{ "qp-destroy", t_qp_destroy },
	{ "destroy", t_destroy },
	{ "channel", t_channel },
};

int main(int argc, char **argv)
{
	if (argc != 2) {
		for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
			printf("%s\n", scenarios[i].name);
		return argc == 1 ? 0 : 2;
	}
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		if (!strcmp(argv[1], scenarios[i].name)) {
			scenarios[i].fn();
			return check_done(argv[1]);
		}
	fprintf(stderr, "unknown scenario %s\n", argv[1]);
	return 2;
}
