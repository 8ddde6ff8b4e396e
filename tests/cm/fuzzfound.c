/* SPDX-License-Identifier: MIT */
/*
 * Regression tests for what fuzz-cm (tests/fuzz/fuzz_cm.c) found: each
 * replays the fuzzer's sequence, reduced, through the public API, and
 * checks the rule the fuzzer saw broken, as cm.h states it.
 * Usage: test-cm-fuzzfound NAME.
 */
#include "harness.h"

/* Bring node @n back after cep_cm_destroy: a fresh port and CM with the
 * same LID and GUID, its ids forgotten (they died with the old CM). */
static void node_restart(struct node *n, uint64_t guid, uint16_t lid)
{
	n->tp->ops->destroy(n->tp);
	n->n = n->nmade = 0;
	n->last_req_id = NULL;
	node_init(n, guid, lid, 1, 0);
}

/* cm.h: cep_cm_destroy "destroys every id left"; cep_cm_channel_destroy
 * is -EBUSY only "while events are queued or ids still use the channel".
 * After the CM is gone no id uses the channel, so it must be destroyable
 * (fuzz-cm: a node restarted with a channel id left; the channel stayed
 * busy for ever and leaked with its eventfd). */
static void t_channel_after_cm_destroy(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id_attr ia = { .size = sizeof(ia) };
	struct cep_cm_id *idle, *l;

	setup(1, 0);
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	ia.channel = ch;
	CHECK_EQ(cep_cm_create_id(A.cm, &ia, &idle), 0);
	CHECK_EQ(cep_cm_create_id(A.cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	settle();
	CHECK_EQ(cep_cm_destroy(A.cm), 0);
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
	node_restart(&A, GUID_A, LID_A);
	teardown_all();
}

/* issue 10 #13 (fixed on main by drop_user_refs; failed before it):
 * an id whose QP was destroyed leaves the table when its timewait ends,
 * while the application still holds it; cep_cm_destroy must free it too
 * (cm.h: it destroys every id left) and return 0. fuzz-cm: connect,
 * QP_DESTROY, ADVANCE 10 ms, CM_RESTART -> -EBUSY and a leak. */
static void t_cm_destroy_after_qp_destroy(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup_accepting(1);
	a = make_id(&A);
	conn_param(&p, 0x100, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, 1));
	CHECK_EQ(cep_cm_qp_destroy(A.cm, 0x100), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_QP_DESTROYED, 1));
	advance_ms(10); /* timewait: 2 x local ACK timeout 10 */
	CHECK(wait_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, 1));
	CHECK_EQ(cep_is_destroyed(cep_cm_id_cep(a)), 1); /* out of the table */
	CHECK_EQ(cep_cm_destroy(A.cm), 0);
	node_restart(&A, GUID_A, LID_A);
	teardown_all();
}

/* issue 10 #8 (fixed on main; failed before it):
 * a response carries the TID of the request it answers (IBTA vol. 1
 * 13.4.6.4; the kernel's cm_dreq_handler / cm_lap_handler record it).
 * fuzz-cm: the raw port connects to B, sends a DREQ, gets a DREP with the
 * REQ's TID; the same for a LAP and its APR. */
static void t_tid_echo(void)
{
	struct cep_msg m;
	struct cep_cm_id *b;
	uint32_t bc;

	setup_accepting(1);
	raw_req(&m, 0x5a00, 0x900);
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REP, 1));
	bc = raw_last(CEP_MSG_REP).u.rep.local_comm_id;
	cep_msg_init(&m, CEP_MSG_RTU, 0x99005a00ull);
	m.u.rtu.local_comm_id = 0x5a00;
	m.u.rtu.remote_comm_id = bc;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, 1));
	b = last_ev(&B, CEP_CM_EV_RTU_RECEIVED).id;
	cep_msg_init(&m, CEP_MSG_LAP, 0x5555);
	m.u.lap.local_comm_id = 0x5a00;
	m.u.lap.remote_comm_id = bc;
	m.u.lap.remote_qpn_eecn = 0x101;
	m.u.lap.remote_cm_response_timeout = 12;
	path_to(&m.u.lap.alternate, LID_C, LID_B);
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_LAP_RECEIVED, 1));
	CHECK_EQ(cep_cm_apr(b, CEP_APR_SUCCESS, NULL, 0, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_APR, 1));
	CHECK_EQ(raw_last(CEP_MSG_APR).hdr.tid, 0x5555);
	cep_msg_init(&m, CEP_MSG_DREQ, 0x4444);
	m.u.dreq.local_comm_id = 0x5a00;
	m.u.dreq.remote_comm_id = bc;
	m.u.dreq.remote_qpn_eecn = 0x101;
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_DREP, 1));
	CHECK_EQ(raw_last(CEP_MSG_DREP).hdr.tid, 0x4444);
	teardown_all();
}

static const struct named_test tests[] = {
	{ "channel-after-cm-destroy", t_channel_after_cm_destroy },
	{ "cm-destroy-after-qp-destroy", t_cm_destroy_after_qp_destroy },
	{ "tid-echo", t_tid_echo },
};

int main(int argc, char **argv)
{
	return run_named_test(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
