/* SPDX-License-Identifier: MIT */
/*
 * Lifetimes against destroy, with the race windows held open by the test
 * hooks of the tests' copy of the library (CM_HOOK_*, cm_internal.h):
 *
 * - events-after-destroy[-channel]: an event is on its way to the user
 *   when another thread calls cep_cm_destroy_id(). cm.h promises that no
 *   event but DESTROYED reaches the user after cep_cm_destroy_id() has
 *   returned (the kernel's ib_destroy_cm_id waits for a running handler).
 * - listener-destroy-req / -sidr: a listener (on an event channel) is
 *   destroyed while a REQ / SIDR_REQ for it is being handled on another
 *   worker. The request must keep the listener (and its channel) until it
 *   has delivered, as the kernel's cm_req_handler holds a reference on the
 *   listen id across cm_process_work: the child's REQ_RECEIVED comes
 *   before the listener's DESTROYED, and the channel cannot be destroyed
 *   while the child uses it. Without that, ASan reports a use after free.
 *
 * Usage: test-cm-lifetime NAME.
 */
#include <unistd.h>

#include "harness.h"
#include "cm/cm_internal.h"

static struct cep_cm_id *_Atomic target;
static _Atomic int want_type = -1;
static _Atomic int reached, released, late, same_worker;
static struct cep_cm_id *_Atomic listener;

/* Hold the window open: wait (bounded) for the main thread to say it has
 * done its part. A fixed engine may block the main thread on us, so the
 * wait must end on its own. */
static void hold(void)
{
	atomic_store(&reached, 1);
	for (int i = 0; i < 500 && !atomic_load(&released); i++)
		sleep_ms(1);
}

static void hook(enum cm_hook_point p, struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (p == CM_HOOK_DELIVER && id == atomic_load(&target) && ev &&
	    (int)ev->type == atomic_load(&want_type)) {
		hold();
	} else if (p == CM_HOOK_REQ_LISTENER && id == atomic_load(&listener)) {
		/* Only a REQ handled on another worker than the listener's
		 * can race with the listener's DESTROYED. */
		if (cep_dispatch_self(B.cm->d) == (int)(cep_cm_id_local_comm_id(id) % 2))
			atomic_store(&same_worker, 1);
		else
			hold();
	}
}

/* Callback ids: count events that begin after destroy returned. */
static int h_track(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (id == atomic_load(&target) && ev->type != CEP_CM_EV_DESTROYED &&
	    atomic_load(&released))
		atomic_fetch_add(&late, 1);
	return on_event(id, ev);
}

static int wait_flag(_Atomic int *f)
{
	for (int i = 0; i < 5000 && !atomic_load(f); i++)
		sleep_ms(1);
	return atomic_load(f);
}

/* DREQ_RECEIVED is on its way to B's callback when B's id is destroyed
 * from the main thread. */
static void t_events_after_destroy(void)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = h_track, .context = &B };
	struct cep_cm_id *l, *b;
	uint32_t bc;

	setup(2, 0);
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	b = raw_establish(0x7100, 0x900, 0x101, &bc);
	atomic_store(&target, b);
	atomic_store(&want_type, CEP_CM_EV_DREQ_RECEIVED);
	cm_test_hook = hook;
	raw_dreq(0x7100, bc, 0x101);
	CHECK(wait_flag(&reached));
	CHECK_EQ(cep_cm_destroy_id(b), 0);
	atomic_store(&released, 1);
	settle();
	cm_test_hook = NULL;
	CHECK_EQ(atomic_load(&late), 0);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DESTROYED, b), 1);
	CHECK_EQ(cep_cm_destroy_id_sync(l), 0);
	teardown_all();
}

/* The same with an event channel: after cep_cm_destroy_id() returns, the
 * channel yields no event of the id but DESTROYED. */
static void t_events_after_destroy_channel(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id_attr ia = { .size = sizeof(ia) };
	struct cep_cm_id *l, *b = NULL;
	struct cep_cm_event *ev;
	struct cep_msg m;
	int after = 0, destroyed = 0;

	setup(2, 0);
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	ia.channel = ch;
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	raw_req(&m, 0x7200, 0x900);
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
	CHECK_EQ(ev->type, CEP_CM_EV_REQ_RECEIVED);
	b = ev->id;
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x101 };

	CHECK_EQ(cep_cm_accept(b, &ap), 0);
	cep_cm_ack_event(ev);
	settle();
	uint32_t bc = raw_last(CEP_MSG_REP).u.rep.local_comm_id;

	cep_msg_init(&m, CEP_MSG_RTU, 1);
	m.u.rtu.local_comm_id = 0x7200;
	m.u.rtu.remote_comm_id = bc;
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
	CHECK_EQ(ev->type, CEP_CM_EV_RTU_RECEIVED);
	cep_cm_ack_event(ev);
	atomic_store(&target, b);
	atomic_store(&want_type, CEP_CM_EV_DREQ_RECEIVED);
	cm_test_hook = hook;
	raw_dreq(0x7200, bc, 0x101);
	CHECK(wait_flag(&reached));
	CHECK_EQ(cep_cm_destroy_id(b), 0);
	atomic_store(&released, 1);
	settle();
	cm_test_hook = NULL;
	while (cep_cm_get_event(ch, &ev) == 0) {
		if (ev->id == b && ev->type != CEP_CM_EV_DESTROYED)
			after++;
		destroyed += ev->id == b && ev->type == CEP_CM_EV_DESTROYED;
		cep_cm_ack_event(ev);
	}
	CHECK_EQ(after, 0);
	CHECK_EQ(destroyed, 1);
	CHECK_EQ(cep_cm_destroy_id(l), 0);
	settle();
	CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
	CHECK(ev->id == l && ev->type == CEP_CM_EV_DESTROYED);
	cep_cm_ack_event(ev);
	teardown_all();
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
}

/* A listener on a channel is destroyed while a REQ (or SIDR_REQ) for it is
 * between the listener check and its use on another worker. */
static void listener_race(int sidr)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id_attr ia = { .size = sizeof(ia) };
	struct cep_cm_id *l, *child = NULL;
	struct cep_cm_event *ev;
	int order_ok = 0, seen_l_destroyed = 0, ch_rc;

	setup(2, 0);
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	ia.channel = ch;
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	atomic_store(&listener, l);
	cm_test_hook = hook;
	/* A request whose worker differs from the listener's (the route is
	 * unpredictable: try fresh IDs until one lands on the other). */
	for (uint32_t i = 0; i < 64 && !atomic_load(&reached); i++) {
		struct cep_msg m;

		atomic_store(&same_worker, 0);
		if (sidr) {
			cep_msg_init(&m, CEP_MSG_SIDR_REQ, 0x5000 + i);
			m.u.sidr_req.request_id = 0x7300 + i;
			m.u.sidr_req.service_id = SID;
			m.u.sidr_req.partition_key = 0xffff;
		} else {
			raw_req(&m, 0x7300 + i, 0x900 + i);
		}
		raw_send(&m, LID_B);
		for (int k = 0; k < 5000 && !atomic_load(&reached) && !atomic_load(&same_worker); k++)
			sleep_ms(1);
		if (atomic_load(&reached))
			break;
		/* same worker: let it finish and drop the child */
		settle();
		while (cep_cm_get_event(ch, &ev) == 0) {
			if (ev->id != l)
				cep_cm_destroy_id(ev->id);
			cep_cm_ack_event(ev);
		}
	}
	CHECK(atomic_load(&reached));
	/* The window is open on the other worker: destroy the listener,
	 * take its DESTROYED, destroy the channel (bounded waits: a fixed
	 * engine keeps the listener until the request has delivered). */
	CHECK_EQ(cep_cm_destroy_id(l), 0);
	for (int k = 0; k < 300 && !seen_l_destroyed; k++) {
		if (cep_cm_get_event(ch, &ev)) {
			sleep_ms(1);
			continue;
		}
		if (ev->id == l && ev->type == CEP_CM_EV_DESTROYED)
			seen_l_destroyed = 1;
		else if (ev->listen_id == l)
			child = ev->id, order_ok = 1; /* the request came first */
		cep_cm_ack_event(ev);
	}
	ch_rc = cep_cm_channel_destroy(ch);
	atomic_store(&released, 1);
	settle();
	cm_test_hook = NULL;
	CHECK(seen_l_destroyed);
	CHECK(order_ok);        /* REQ_RECEIVED before the listener's DESTROYED */
	CHECK_EQ(ch_rc, -EBUSY); /* the child still uses the channel */
	if (ch_rc == 0)
		return;         /* the engine would now use the freed channel */
	while (cep_cm_get_event(ch, &ev) == 0) {
		if (!child && ev->listen_id == l)
			child = ev->id;
		cep_cm_ack_event(ev);
	}
	CHECK(child != NULL);
	if (child)
		CHECK_EQ(cep_cm_destroy_id(child), 0);
	settle();
	while (cep_cm_get_event(ch, &ev) == 0)
		cep_cm_ack_event(ev);
	teardown_all();
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
}

static void t_listener_destroy_req(void)
{
	listener_race(0);
}

static void t_listener_destroy_sidr(void)
{
	listener_race(1);
}

static const struct named_test tests[] = {
	{ "events-after-destroy", t_events_after_destroy },
	{ "events-after-destroy-channel", t_events_after_destroy_channel },
	{ "listener-destroy-req", t_listener_destroy_req },
	{ "listener-destroy-sidr", t_listener_destroy_sidr },
};

int main(int argc, char **argv)
{
	return run_named_test(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
