/* SPDX-License-Identifier: MIT */
/*
 * Teardown in every order (issue 17, section 2). cep_cm_destroy() against
 * channel events: taken and not acked (refused, -EBUSY, everything stays
 * valid: ack and call again), queued and never taken (dropped), DESTROYED
 * of ids the application destroyed first, events taken while it runs,
 * from inside a callback (-EDEADLK). And a listener's destroy against its
 * child's request event: DESTROYED comes after cep_cm_destroy_id() did
 * what the state asks, never from the child's unpinning while destroy
 * waits. The expected behaviour is cm.h's contract, modelled on
 * librdmacm: rdma_destroy_id() waits until the events it handed out are
 * acked and drops the ones it never did; verbs' destroy calls refuse with
 * EBUSY while something still uses the object.
 * Usage: test-cm-teardown NAME, or test-cm-teardown callback-calls-cepd
 * CEPD-PATH.
 */
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "harness.h"
#include "cm/cm_internal.h"
#include "core/rcu.h"
#include "../service/cepd_test.h"

/* Bring node @n back after cep_cm_destroy: a fresh port and CM with the
 * same LID and GUID, its ids forgotten (they died with the old CM). */
static void node_restart(struct node *n, uint64_t guid, uint16_t lid)
{
	n->tp->ops->destroy(n->tp);
	n->n = n->nmade = 0;
	n->last_req_id = NULL;
	node_init(n, guid, lid, 1, 0);
}

static struct cep_cm_id *channel_id(struct node *n, struct cep_cm_channel *ch)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .channel = ch };
	struct cep_cm_id *id = NULL;

	CHECK_EQ(cep_cm_create_id(n->cm, &ia, &id), 0);
	return id;
}

/* A REQ from C to node @lid (A or B) for SID. */
static void req_to(uint32_t comm_id, uint32_t qpn, uint16_t lid)
{
	struct cep_msg m;

	raw_req(&m, comm_id, qpn);
	path_to(&m.u.req.primary, LID_C, lid);
	raw_send(&m, lid);
}

static int fd_readable(struct cep_cm_channel *ch)
{
	struct pollfd p = { .fd = cep_cm_channel_fd(ch), .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/* Destroy the CM, then ack: the order. An event taken and not
 * acked holds its id, so cep_cm_destroy() refuses (-EBUSY) and changes
 * nothing: the event, its id and the context stay valid and working; after
 * the ack it succeeds. Before, it freed the context anyway and the ack's
 * last put ran id_release on it (ASan: heap-use-after-free). */
static void t_destroy_then_ack(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_event *ev, *ev2;
	struct cep_cm_id *l, *child;

	setup(1, 0);
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	l = channel_id(&B, ch);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	req_to(0x7500, 0x900, LID_B);
	settle();
	CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
	CHECK_EQ(ev->type, CEP_CM_EV_REQ_RECEIVED);
	child = ev->id;
	CHECK_EQ(cep_cm_destroy(B.cm), -EBUSY);
	CHECK_EQ(cep_cm_id_state(child), CEP_CM_REQ_RCVD);
	cep_cm_ack_event(ev);
	cep_rcu_barrier(); /* the ack's last put has run its release */
	/* Refused: still live and working (workers, transport, ids). */
	CHECK_EQ(cep_cm_reject(child, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	req_to(0x7501, 0x901, LID_B);
	settle();
	CHECK_EQ(cep_cm_get_event(ch, &ev2), 0);
	CHECK_EQ(ev2->type, CEP_CM_EV_REQ_RECEIVED);
	CHECK(ev2->listen_id == l);
	/* Taken again: refused again; acked: destroyed (the listener and
	 * both children left to it). */
	CHECK_EQ(cep_cm_destroy(B.cm), -EBUSY);
	cep_cm_ack_event(ev2);
	CHECK_EQ(cep_cm_destroy(B.cm), 0);
	CHECK_EQ(cep_cm_destroy(B.cm), -EINVAL); /* dead now */
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
	node_restart(&B, GUID_B, LID_B);
	teardown_all();
}

/* Events queued and never taken do not hold the context: cep_cm_destroy()
 * drops them (the application never saw them) and returns 0, as cm.h
 * always said. Another context's events on the same channel stay. Before,
 * they held their ids: -EBUSY, and the channel stayed busy for ever. */
static void t_destroy_queued(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_event *ev;
	struct cep_cm_id *lb, *la, *a_child;
	int rc;

	setup(1, 0);
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	lb = channel_id(&B, ch);
	CHECK_EQ(cep_cm_listen(lb, SID, ~0ull), 0);
	(void)channel_id(&B, ch); /* an idle id too */
	la = channel_id(&A, ch);
	CHECK_EQ(cep_cm_listen(la, SID, ~0ull), 0);
	req_to(0x7600, 0x900, LID_B);
	req_to(0x7601, 0x901, LID_A);
	req_to(0x7602, 0x902, LID_B);
	settle();
	CHECK(fd_readable(ch));
	rc = cep_cm_destroy(B.cm);
	CHECK_EQ(rc, 0);
	if (rc)
		return; /* the old engine freed the context under those events */
	/* Only A's event is left. */
	CHECK(fd_readable(ch));
	CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
	CHECK_EQ(ev->type, CEP_CM_EV_REQ_RECEIVED);
	CHECK(ev->listen_id == la);
	a_child = ev->id;
	cep_cm_ack_event(ev);
	CHECK(!fd_readable(ch));
	CHECK_EQ(cep_cm_get_event(ch, &ev), -EAGAIN);
	CHECK_EQ(cep_cm_channel_destroy(ch), -EBUSY); /* A's ids use it */
	CHECK_EQ(cep_cm_destroy_id(a_child), 0);
	CHECK_EQ(cep_cm_destroy_id(la), 0);
	settle();
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
		CHECK_EQ(ev->type, CEP_CM_EV_DESTROYED);
		cep_cm_ack_event(ev);
	}
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
	node_restart(&B, GUID_B, LID_B);
	teardown_all();
}

/* Destroy the ids, then the CM: their DESTROYED events, queued and never
 * taken, are dropped with the context (one taken and acked before), and
 * the channel is free afterwards. Before: -EBUSY. */
static void t_destroy_ids_first(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_event *ev;
	struct cep_cm_id *l, *idle, *child;
	int rc;

	setup(1, 0);
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	l = channel_id(&B, ch);
	idle = channel_id(&B, ch);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	req_to(0x7700, 0x900, LID_B);
	settle();
	CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
	CHECK_EQ(ev->type, CEP_CM_EV_REQ_RECEIVED);
	child = ev->id;
	cep_cm_ack_event(ev);
	CHECK_EQ(cep_cm_destroy_id(child), 0);
	settle();
	CHECK(raw_wait(CEP_MSG_REJ, 1)); /* destroy rejected the REQ */
	CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
	CHECK(ev->id == child && ev->type == CEP_CM_EV_DESTROYED);
	cep_cm_ack_event(ev); /* ack, then destroy: the plain order */
	CHECK_EQ(cep_cm_destroy_id(l), 0);
	CHECK_EQ(cep_cm_destroy_id(idle), 0);
	settle();
	CHECK(fd_readable(ch)); /* two DESTROYED wait */
	rc = cep_cm_destroy(B.cm);
	CHECK_EQ(rc, 0);
	if (rc)
		return;
	CHECK(!fd_readable(ch));
	CHECK_EQ(cep_cm_get_event(ch, &ev), -EAGAIN);
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
	node_restart(&B, GUID_B, LID_B);
	teardown_all();
}

/* An application thread takes events from a channel shared by two
 * contexts while one of them is being destroyed (here: a callback of the
 * dying context, which its destroy's drain waits for). Once that destroy
 * has committed, the channel hands out none of its events - the destroy
 * drops them - and the other context's events as usual. */
static _Atomic int take_reached, take_rc1 = 1, take_rc2 = 1;
static struct cep_cm_event *_Atomic taken_ev;

static int h_take(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct cep_cm_channel *ch = ev->context;
	struct cep_cm_event *got = NULL;

	(void)id;
	if (ev->type != CEP_CM_EV_REQ_RECEIVED)
		return 0;
	atomic_store(&take_reached, 1);
	/* until B's destroy has committed (bounded) */
	for (int i = 0; i < 5000 && !(atomic_load(&B.cm->taken) & CM_CLOSED); i++)
		sleep_ms(1);
	CHECK(atomic_load(&B.cm->taken) & CM_CLOSED);
	atomic_store(&take_rc1, cep_cm_get_event(ch, &got));
	atomic_store(&taken_ev, got);
	atomic_store(&take_rc2, cep_cm_get_event(ch, &got));
	return 0;
}

static void t_destroy_concurrent_take(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_event *ev;
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = h_take };
	struct cep_cm_id *la, *lb, *lcb;
	struct cep_msg m;

	setup(1, 0);
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	la = channel_id(&A, ch);
	lb = channel_id(&B, ch);
	CHECK_EQ(cep_cm_listen(la, SID, ~0ull), 0);
	CHECK_EQ(cep_cm_listen(lb, SID, ~0ull), 0);
	ia.context = ch;
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &lcb), 0);
	CHECK_EQ(cep_cm_listen(lcb, SID + 1, ~0ull), 0);
	req_to(0x7a00, 0x900, LID_B); /* B's event first on the channel */
	settle();
	req_to(0x7a01, 0x901, LID_A);
	settle();
	raw_req(&m, 0x7a02, 0x902);
	m.u.req.service_id = SID + 1;
	raw_send(&m, LID_B);
	for (int i = 0; i < 5000 && !atomic_load(&take_reached); i++)
		sleep_ms(1);
	CHECK(atomic_load(&take_reached));
	CHECK_EQ(cep_cm_destroy(B.cm), 0);
	CHECK_EQ(atomic_load(&take_rc1), 0);
	ev = atomic_load(&taken_ev);
	CHECK(ev && ev->listen_id == la); /* B's was skipped */
	CHECK_EQ(atomic_load(&take_rc2), -EAGAIN);
	CHECK_EQ(cep_cm_get_event(ch, &ev), -EAGAIN); /* B's was dropped */
	CHECK(!fd_readable(ch));
	if ((ev = atomic_load(&taken_ev)) != NULL) {
		CHECK_EQ(cep_cm_destroy_id(ev->id), 0);
		cep_cm_ack_event(ev);
	}
	CHECK_EQ(cep_cm_destroy_id(la), 0);
	settle();
	while (cep_cm_get_event(ch, &ev) == 0) {
		CHECK_EQ(ev->type, CEP_CM_EV_DESTROYED);
		cep_cm_ack_event(ev);
	}
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
	node_restart(&B, GUID_B, LID_B);
	teardown_all();
}

/* From a callback: -EDEADLK, and nothing changed (the context still
 * answers, and is destroyed normally afterwards). */
static _Atomic int cb_destroy_rc = 1, cb_sync_rc = 1;

static int h_destroy_cm(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		atomic_store(&cb_destroy_rc, cep_cm_destroy(B.cm));
		atomic_store(&cb_sync_rc, cep_cm_destroy_id_sync(id));
	}
	return on_event(id, ev);
}

static void t_destroy_in_callback(void)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = h_destroy_cm, .context = &B };
	struct cep_cm_id *l;

	setup(2, 0);
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	B.pol.on_req = ON_REQ_REJECT;
	B.pol.rej_reason = CEP_REJ_CONSUMER_DEFINED;
	req_to(0x7800, 0x900, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(atomic_load(&cb_destroy_rc), -EDEADLK);
	CHECK_EQ(atomic_load(&cb_sync_rc), -EDEADLK);
	req_to(0x7801, 0x901, LID_B); /* still listening, still answering */
	CHECK(raw_wait(CEP_MSG_REJ, 2));
	CHECK_EQ(cep_cm_destroy_id_sync(l), 0);
	teardown_all();
}

/*
 * A callback listener is destroyed while its child's REQ_RECEIVED is
 * being delivered; the callback rejects the REQ. cep_cm_destroy_id() sets
 * the listener gone and waits, lock dropped, for the child's delivery;
 * the child then unpins the listener (cm_listener_release). That must not
 * post the listener's DESTROYED: destroy has not yet done what the state
 * asks (leave LISTEN, drop the table's reference), and once DESTROYED has
 * dropped the user's reference destroy's own cep_destroy drops the last
 * one under the caller's feet (seen: DESTROYED before cep_cm_destroy_id
 * returned, 3 runs in 5). Expected (cm.h): DESTROYED is the id's last
 * event, after the destroy did what the state asks - as the kernel's
 * cm_destroy_id first takes a listener out of its tree and only then
 * waits for the id's last reference. One worker; the hooks fix the order:
 * the child's delivery is held until destroy waits, destroy's wait is
 * held until the child has unpinned the listener and the worker is idle
 * again. No sleep decides the outcome: the old engine fails every run.
 */
static struct cep_cm_id *_Atomic lis;
static _Atomic int reached, released, waited, in_wait, early, lis_destroyed;

static uint32_t req_inflight_of(struct cep_cm_id *id)
{
	uint32_t n;

	pthread_mutex_lock(&id->lock);
	n = id->lis.req_inflight;
	pthread_mutex_unlock(&id->lock);
	return n;
}

static void lis_hook(enum cm_hook_point p, struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct cep_cm_id *l = atomic_load(&lis);

	if (p == CM_HOOK_DELIVER && ev && ev->type == CEP_CM_EV_REQ_RECEIVED &&
	    ev->listen_id == l) {
		/* worker: hold the child's delivery until destroy waits for it */
		atomic_store(&reached, 1);
		for (int i = 0; i < 5000 && !atomic_load(&released); i++)
			sleep_ms(1);
	} else if (p == CM_HOOK_DESTROY_WAIT && id == l && !atomic_load(&waited)) {
		/* main thread, in cep_cm_destroy_id's wait, no lock held */
		atomic_store(&waited, 1);
		atomic_store(&in_wait, 1);
		atomic_store(&released, 1);
		for (int i = 0; i < 5000 && req_inflight_of(id); i++)
			sleep_ms(1);
		CHECK_EQ(req_inflight_of(id), 0);
		/* whatever the unpinning posted has run */
		CHECK_EQ(cep_cm_quiesce(B.cm, 5000), 0);
		atomic_store(&in_wait, 0);
	}
}

static int h_lis(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_DESTROYED && id == atomic_load(&lis)) {
		/* the id is valid until this returns */
		if (atomic_load(&in_wait) || cep_cm_id_state(id) != CEP_CM_IDLE ||
		    !cep_is_destroyed(cep_cm_id_cep(id)))
			atomic_store(&early, 1);
		atomic_fetch_add(&lis_destroyed, 1);
	}
	return on_event(id, ev);
}

static void t_listener_release_destroyed(void)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = h_lis, .context = &B };
	struct cep_cm_id *l;

	setup(1, 0);
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	B.pol.on_req = ON_REQ_REJECT;
	B.pol.rej_reason = CEP_REJ_CONSUMER_DEFINED;
	atomic_store(&lis, l);
	cm_test_hook = lis_hook;
	req_to(0x7900, 0x900, LID_B);
	for (int i = 0; i < 5000 && !atomic_load(&reached); i++)
		sleep_ms(1);
	CHECK(atomic_load(&reached));
	CHECK_EQ(cep_cm_destroy_id(l), 0);
	CHECK(atomic_load(&waited)); /* the window was open */
	settle();
	cm_test_hook = NULL;
	CHECK_EQ(atomic_load(&early), 0);
	CHECK_EQ(atomic_load(&lis_destroyed), 1);
	CHECK(raw_wait(CEP_MSG_REJ, 1)); /* the callback's REJ */
	teardown_all();
}

/*
 * What a callback may call (issue 26): cm.h and cep_cm(3) said that
 * cep_cm_qp_destroy() and cep_cm_quiesce() must not be called from one,
 * libcep(7), cep_cm_event(3) and the quick start that anything but
 * cep_cm_destroy() and cep_cm_destroy_id_sync() may. What happens: a
 * callback runs with no libcep lock held, and a QP's teardown takes only
 * the bound id's lock (cm_id_teardown), so cep_cm_qp_destroy() works there
 * as from any thread, on the callback's own connection too: the handler
 * that delivered the event re-checks the state after the callback. The
 * waits are refused: cep_cm_quiesce() of the callback's own context would
 * wait for the callback itself to return (its item counts until then:
 * -ETIMEDOUT at best), cep_cm_destroy() would join its own worker,
 * cep_cm_destroy_id_sync() would wait for a DESTROYED its own worker is to
 * deliver: each is -EDEADLK and changes nothing. The documents now all
 * say so. For each event of a connection's life (A connects, B accepts,
 * A disconnects), the node that gets it calls all four from its callback
 * on its own QP: the three waits -EDEADLK, the QP destroy 0, and the QP's
 * connection torn down as cm.h says (REJ while connecting, DREQ when
 * established, DREP when a DREQ waits, QP_DESTROYED to the id bound to
 * it), the QPN forgotten, and the tables clean at the end.
 */
struct cb_call {
	enum cep_cm_event_type at;  /* the callback that calls */
	struct node *n;             /* on this node */
	int qp_destroyed;           /* QP_DESTROYED then delivered there */
	struct node *peer;          /* the peer then gets ... */
	enum cep_cm_event_type peer_ev; /* (CEP_CM_EVENT_COUNT: nothing) */
};
static const struct cb_call *_Atomic cbc_row;
static _Atomic int cbc_done, cbc_qp_rc = 1, cbc_quiesce_rc = 1, cbc_destroy_rc = 1,
	cbc_sync_rc = 1;

static int h_cb_calls(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	const struct cb_call *row = atomic_load(&cbc_row);
	struct node *n = ev->context;
	int r = on_event(id, ev); /* B accepts first, on its QP 0x101 */

	if (row && ev->type == row->at && n == row->n && !atomic_exchange(&cbc_done, 1)) {
		atomic_store(&cbc_quiesce_rc, cep_cm_quiesce(n->cm, 200));
		atomic_store(&cbc_destroy_rc, cep_cm_destroy(n->cm));
		atomic_store(&cbc_sync_rc, cep_cm_destroy_id_sync(id));
		atomic_store(&cbc_qp_rc, cep_cm_qp_destroy(n->cm, n == &B ? 0x101 : 0x100));
	}
	return r;
}

static void cb_calls_one(const struct cb_call *row)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = h_cb_calls };
	struct cep_cm_id *a, *l;
	struct cep_cm_conn_param p;
	uint32_t b;

	A.n = A.nmade = B.n = B.nmade = 0;
	A.last_req_id = B.last_req_id = NULL;
	atomic_store(&cbc_done, 0);
	atomic_store(&cbc_qp_rc, 1);
	atomic_store(&cbc_quiesce_rc, 1);
	atomic_store(&cbc_destroy_rc, 1);
	atomic_store(&cbc_sync_rc, 1);
	atomic_store(&cbc_row, row);
	setup(2, 0);
	ia.context = &B;
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l), 0);
	B.made[B.nmade++] = l;
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	B.pol.on_req = ON_REQ_ACCEPT;
	B.pol.accept_qpn = 0x101;
	ia.context = &A;
	CHECK_EQ(cep_cm_create_id(A.cm, &ia, &a), 0);
	A.made[A.nmade++] = a;
	conn_param(&p, 0x100, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	settle();
	if (cep_cm_id_state(a) == CEP_CM_ESTABLISHED)
		CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
	advance_ms(1000); /* every timewait over */
	printf("%s on %s: quiesce %d, destroy %d, destroy_id_sync %d, qp_destroy %d\n",
	       cep_cm_event_name(row->at), row->n->name, atomic_load(&cbc_quiesce_rc),
	       atomic_load(&cbc_destroy_rc), atomic_load(&cbc_sync_rc), atomic_load(&cbc_qp_rc));
	CHECK_EQ(atomic_load(&cbc_done), 1);
	CHECK_EQ(atomic_load(&cbc_quiesce_rc), -EDEADLK);
	CHECK_EQ(atomic_load(&cbc_destroy_rc), -EDEADLK);
	CHECK_EQ(atomic_load(&cbc_sync_rc), -EDEADLK);
	CHECK_EQ(atomic_load(&cbc_qp_rc), 0);
	CHECK_EQ(count_ev(row->n, CEP_CM_EV_QP_DESTROYED, NULL), row->qp_destroyed);
	if (row->peer)
		CHECK_EQ(count_ev(row->peer, row->peer_ev, NULL), 1);
	CHECK_EQ(cep_qp_binding(cep_cm_table(row->n->cm), row->n == &B ? 0x101 : 0x100, &b),
		 -ENOENT);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_IDLE);
	atomic_store(&cbc_row, NULL);
	teardown_all(); /* the contexts still work: ids destroyed, tables clean */
}

static void t_callback_calls(void)
{
	static const struct cb_call rows[] = {
		/* B accepted from this callback: REP_SENT -> REJ (no QP) */
		{ CEP_CM_EV_REQ_RECEIVED, &B, 1, &A, CEP_CM_EV_REJ_RECEIVED },
		/* REP_RCVD -> REJ (no QP), timewait */
		{ CEP_CM_EV_REP_RECEIVED, &A, 1, &B, CEP_CM_EV_REJ_RECEIVED },
		/* ESTABLISHED -> DREQ */
		{ CEP_CM_EV_ESTABLISHED, &A, 1, &B, CEP_CM_EV_DREQ_RECEIVED },
		{ CEP_CM_EV_RTU_RECEIVED, &B, 1, &A, CEP_CM_EV_DREQ_RECEIVED },
		/* DREQ_RCVD -> DREP, timewait */
		{ CEP_CM_EV_DREQ_RECEIVED, &B, 1, &A, CEP_CM_EV_DREP_RECEIVED },
		/* in timewait: nothing to send */
		{ CEP_CM_EV_DREP_RECEIVED, &A, 1, NULL, CEP_CM_EVENT_COUNT },
		/* timewait over: no longer bound, nothing to tear down */
		{ CEP_CM_EV_TIMEWAIT_EXIT, &A, 0, NULL, CEP_CM_EVENT_COUNT },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		cb_calls_one(&rows[i]);
}

/* The same on a context of cepd (cep_cm_attach): its callbacks run on a
 * library thread and another one reads the service's answers, so a
 * callback's cep_cm_qp_destroy() is one more request, answered as any
 * other call a callback makes there; it was refused with -EDEADLK "as the
 * local one", which never refused it. The three waits stay -EDEADLK. A's
 * ESTABLISHED callback calls all four on its own QP: the QP destroy is 0,
 * A gets QP_DESTROYED and B the DREQ it sends. cepd --fabric 2. */
static struct cep_cm *_Atomic rc_a;
static _Atomic int rc_qp_rc = 1, rc_quiesce_rc = 1, rc_destroy_rc = 1, rc_sync_rc = 1,
	rc_qp_gone, rc_dreq, rc_done;

static int rc_a_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct cep_cm *cm = atomic_load(&rc_a);

	if (ev->type == CEP_CM_EV_ESTABLISHED && !atomic_exchange(&rc_done, 1)) {
		atomic_store(&rc_quiesce_rc, cep_cm_quiesce(cm, 200));
		atomic_store(&rc_destroy_rc, cep_cm_destroy(cm));
		atomic_store(&rc_sync_rc, cep_cm_destroy_id_sync(id));
		atomic_store(&rc_qp_rc, cep_cm_qp_destroy(cm, 0x100));
	} else if (ev->type == CEP_CM_EV_QP_DESTROYED) {
		atomic_store(&rc_qp_gone, 1);
	}
	return 0;
}

static int rc_b_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0x200,
						  .starting_psn = 1, .responder_resources = 1,
						  .initiator_depth = 1, .rnr_retry_count = 7 };

		CHECK_EQ(cep_cm_accept(id, &ap), 0);
	} else if (ev->type == CEP_CM_EV_DREQ_RECEIVED) {
		atomic_store(&rc_dreq, 1);
	}
	return 0;
}

static void rc_wait(_Atomic int *f)
{
	for (int i = 0; i < 5000 && !atomic_load(f); i++)
		sleep_ms(2);
	CHECK(atomic_load(f));
}

static int t_callback_calls_cepd(const char *cepd_path)
{
	char dir[] = "/tmp/cep-teardown-cepd.XXXXXX", sock[108];
	struct cep_cm_attach_attr aa = { .size = sizeof(aa) };
	struct cep_cm_id_attr ia = { .size = sizeof(ia) };
	struct cep_cm_conn_param p;
	struct cep_cm *a = NULL, *b = NULL;
	struct cep_cm_id *ida, *lb;
	int status;
	pid_t pid;

	if (!mkdtemp(dir))
		return 1;
	snprintf(sock, sizeof(sock), "%s/cepd.sock", dir);
	char *const argv[] = { "cepd", "--fabric", "2", "--workers", "2", "--socket", sock, NULL };

	pid = cepd_spawn(cepd_path, argv, sock, 500, "callback-calls-cepd");
	aa.socket = sock;
	aa.port_num = 0;
	CHECK_EQ(cep_cm_attach(&aa, &a), 0);
	aa.port_num = 1;
	CHECK_EQ(cep_cm_attach(&aa, &b), 0);
	atomic_store(&rc_a, a);
	CHECK_EQ(cep_cm_qp_register(a, 0x100), 0);
	CHECK_EQ(cep_cm_qp_register(b, 0x200), 0);
	ia.handler = rc_b_handler;
	CHECK_EQ(cep_cm_create_id(b, &ia, &lb), 0);
	CHECK_EQ(cep_cm_listen(lb, 0x5444434bull, ~0ull), 0);
	ia.handler = rc_a_handler;
	CHECK_EQ(cep_cm_create_id(a, &ia, &ida), 0);
	cepd_fabric_conn(&p, 0, 1, 0x5444434bull, 0x100, 16);
	CHECK_EQ(cep_cm_connect(ida, &p), 0);
	rc_wait(&rc_done);
	rc_wait(&rc_dreq);
	rc_wait(&rc_qp_gone);
	printf("cepd context, from ESTABLISHED: quiesce %d, destroy %d, destroy_id_sync %d, "
	       "qp_destroy %d\n", atomic_load(&rc_quiesce_rc), atomic_load(&rc_destroy_rc),
	       atomic_load(&rc_sync_rc), atomic_load(&rc_qp_rc));
	CHECK_EQ(atomic_load(&rc_quiesce_rc), -EDEADLK);
	CHECK_EQ(atomic_load(&rc_destroy_rc), -EDEADLK);
	CHECK_EQ(atomic_load(&rc_sync_rc), -EDEADLK);
	CHECK_EQ(atomic_load(&rc_qp_rc), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(ida), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(lb), 0);
	CHECK_EQ(cep_cm_destroy(a), 0);
	CHECK_EQ(cep_cm_destroy(b), 0);
	kill(pid, SIGTERM);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(sock);
	rmdir(dir);
	return check_done("callback-calls-cepd");
}

static const struct named_test tests[] = {
	{ "destroy-then-ack", t_destroy_then_ack },
	{ "destroy-queued", t_destroy_queued },
	{ "destroy-ids-first", t_destroy_ids_first },
	{ "destroy-concurrent-take", t_destroy_concurrent_take },
	{ "destroy-in-callback", t_destroy_in_callback },
	{ "listener-release-destroyed", t_listener_release_destroyed },
	{ "callback-calls", t_callback_calls },
};

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "callback-calls-cepd"))
		return t_callback_calls_cepd(argv[2]);
	return run_named_test(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
