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

/* issue 10 #13 (engine's branch fixes it: expected to fail until then):
 * an id whose QP was destroyed leaves the table when its timewait ends,
 * while the application still holds it; cep_cm_destroy must free it too
 * (cm.h: it destroys every id left) and return 0. fuzz-cm: connect,
 * QP_DESTROY, ADVANCE 10 ms, CM_RESTART -> -EBUSY and a leak. */
static void t_cm_destroy_after_qp_destroy(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup(1, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_ACCEPT;
	B.pol.accept_qpn = 0x101;
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

static const struct {
	const char *name;
	void (*fn)(void);
} tests[] = {
	{ "channel-after-cm-destroy", t_channel_after_cm_destroy },
	{ "cm-destroy-after-qp-destroy", t_cm_destroy_after_qp_destroy },
};

int main(int argc, char **argv)
{
	if (argc != 2) {
		for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
			printf("%s\n", tests[i].name);
		return argc == 1 ? 0 : 2;
	}
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		if (!strcmp(argv[1], tests[i].name)) {
			tests[i].fn();
			return check_done(argv[1]);
		}
	fprintf(stderr, "unknown test %s\n", argv[1]);
	return 2;
}
