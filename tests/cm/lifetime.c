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
 * - linger-*: an id created with CEP_CM_ID_LINGER (issue 26, for cepd's
 *   accounting of a client's connection state) gets its DESTROYED only
 *   once the engine holds nothing of it: after the DREQ exchange and the
 *   timewait its destroy started (not a millisecond of virtual time
 *   before, and at once after), at once when the destroy ends it (REJ of
 *   a REQ); a passive id inherits its listener's flag;
 *   cep_cm_destroy_id_sync() waits that long; cep_cm_destroy() of the
 *   context with such an id lingering completes, frees everything and
 *   releases a waiting cep_cm_destroy_id_sync(). An id without the flag
 *   beside it gets DESTROYED right after its destroy, as before.
 * - lazy-last-events: a context whose last events may come late
 *   (lazy_ms, the librdmacm drop-in's) wakes no sleeping worker for them.
 *
 * Usage: test-cm-lifetime NAME.
 */
#include <unistd.h>

#include <cep/qp.h>

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

/* ---- CEP_CM_ID_LINGER --------------------------------------------------- */

static struct cep_cm_id *make_id_flags(struct node *n, uint64_t flags)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_event, .context = n,
				     .flags = flags };
	struct cep_cm_id *id = NULL;

	CHECK_EQ(cep_cm_create_id(n->cm, &ia, &id), 0);
	pthread_mutex_lock(&n->mtx);
	if (n->nmade < 64)
		n->made[n->nmade++] = id;
	pthread_mutex_unlock(&n->mtx);
	return id;
}

/* A connects to B (B accepts on @qb) from @a. */
static void connect_to_b(struct cep_cm_id *a, uint32_t qa, uint32_t qb)
{
	struct cep_cm_conn_param p;
	int est = count_ev(&A, CEP_CM_EV_ESTABLISHED, NULL);

	B.pol.on_req = ON_REQ_ACCEPT;
	B.pol.accept_qpn = qb;
	conn_param(&p, qa, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, est + 1));
}

static uint64_t live_ceps(struct node *n)
{
	struct cep_table_stats st;

	cep_table_stats(cep_cm_table(n->cm), &st);
	return st.live;
}

/* ms of virtual time until @id's timer fires. */
static uint64_t timer_left_ms(struct cep_cm_id *id)
{
	uint64_t now = cep_clock_now_ns(clk) / 1000000u, dl;

	pthread_mutex_lock(&id->lock);
	dl = id->deadline;
	pthread_mutex_unlock(&id->lock);
	return dl > now ? dl - now : 0;
}

/* Established, then destroyed by its user: the DREQ goes, B answers with
 * its DREP, A is in timewait - DESTROYED must wait for its end, exactly.
 * Beside it a connection without the flag gets DESTROYED at once. */
static void t_linger_timewait(void)
{
	struct cep_cm_id *a, *plain, *l;
	struct cep_cm_stats cs = { .size = sizeof(cs) };
	uint64_t tw, want;

	setup(2, 0);
	l = listen_on(&B, SID);
	a = make_id_flags(&A, CEP_CM_ID_LINGER);
	plain = make_id(&A);
	connect_to_b(a, 0x100, 0x101);
	connect_to_b(plain, 0x102, 0x103);
	CHECK_EQ(cep_cm_destroy_id(a), 0);
	CHECK_EQ(cep_cm_destroy_id(plain), 0);
	CHECK(wait_ev(&B, CEP_CM_EV_DREQ_RECEIVED, 2));
	settle(); /* the DREPs are in: both in timewait */
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DESTROYED, plain), 1); /* as before */
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DESTROYED, a), 0);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_TIMEWAIT);
	CHECK_EQ(cep_cm_id_state(plain), CEP_CM_TIMEWAIT);
	CHECK_EQ(live_ceps(&A), 2);
	CHECK_EQ(cep_cm_get_stats(A.cm, &cs), 0);
	CHECK_EQ(cs.ids, 1); /* a still counts; plain left at its DESTROYED */
	/* The active side's timewait: the path's ACK timeout from the
	 * connect's packet life (8) and the REP's target ACK delay (0). */
	tw = timer_left_ms(a);
	want = cm_ms(cep_qp_ack_timeout(0, 8));
	CHECK_EQ(tw, want);
	printf("linger: DREQ answered, timewait %llu ms: DESTROYED waits\n",
	       (unsigned long long)tw);
	advance_ms((unsigned)tw - 1);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DESTROYED, a), 0); /* 1 ms before: not yet */
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_TIMEWAIT);
	CHECK_EQ(live_ceps(&A), 2);
	advance_ms(1);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DESTROYED, a), 1); /* at its end: delivered */
	CHECK_EQ(count_ev(&A, CEP_CM_EV_TIMEWAIT_EXIT, NULL), 0); /* nothing else */
	CHECK_EQ(live_ceps(&A), 0); /* both timewaits were alike */
	CHECK_EQ(cep_cm_get_stats(A.cm, &cs), 0);
	CHECK_EQ(cs.ids, 0);
	check_binding(&A, 0x100, CEP_BINDING_INVALID);
	CHECK_EQ(cep_cm_destroy_id_sync(l), 0);
	teardown_all();
}

/* Destroyed while connecting (REQ_SENT to C, which never answers): the
 * REJ ends it, DESTROYED comes without any time passing. */
static void t_linger_rej(void)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a;

	setup(1, 0);
	a = make_id_flags(&A, CEP_CM_ID_LINGER);
	conn_param(&p, 0x100, LID_A, LID_C);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(raw_wait(CEP_MSG_REQ, 1));
	CHECK_EQ(cep_cm_destroy_id(a), 0);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK(wait_ev(&A, CEP_CM_EV_DESTROYED, 1));
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DESTROYED, a), 1);
	CHECK_EQ(live_ceps(&A), 0);
	teardown_all();
}

/* A passive id of a CEP_CM_ID_LINGER listener lingers too: C connects,
 * B's child is destroyed (DREQ to C), C answers, DESTROYED after the
 * passive timewait (the REQ's local ACK timeout: 10, about 5 ms). */
static void t_linger_passive(void)
{
	struct cep_cm_id *l, *b;
	struct cep_msg m;
	uint32_t bc;
	uint64_t tw;

	setup(1, 0);
	l = make_id_flags(&B, CEP_CM_ID_LINGER);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	b = raw_establish(0x7300, 0x900, 0x101, &bc);
	CHECK_EQ(cep_cm_destroy_id(b), 0);
	CHECK(raw_wait(CEP_MSG_DREQ, 1));
	cep_msg_init(&m, CEP_MSG_DREP, raw_last(CEP_MSG_DREQ).hdr.tid);
	m.u.drep.local_comm_id = 0x7300;
	m.u.drep.remote_comm_id = bc;
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_TIMEWAIT);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DESTROYED, b), 0);
	tw = timer_left_ms(b);
	CHECK_EQ(tw, cm_ms(10));
	advance_ms((unsigned)tw - 1);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DESTROYED, b), 0);
	advance_ms(1);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DESTROYED, b), 1);
	CHECK_EQ(cep_cm_destroy_id_sync(l), 0); /* a listener: at once */
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DESTROYED, l), 1);
	teardown_all();
}

/* cep_cm_destroy_id_sync() of a lingering id returns once timewait is
 * over, not before; its wait is bounded by the protocol's timers. */
static struct cep_cm_id *_Atomic sync_id;
static _Atomic int sync_rc = 1, sync_returned;

/* Until the other thread's destroy has sent its DREQ and B has it. */
static void wait_dreq_at_b(void)
{
	for (int i = 0; i < 5000 && count_ev(&B, CEP_CM_EV_DREQ_RECEIVED, NULL) == 0; i++) {
		sleep_ms(1);
		settle();
	}
	CHECK_EQ(count_ev(&B, CEP_CM_EV_DREQ_RECEIVED, NULL), 1);
	settle(); /* and A has B's DREP */
}

static void *sync_thread(void *arg)
{
	(void)arg;
	atomic_store(&sync_rc, cep_cm_destroy_id_sync(atomic_load(&sync_id)));
	atomic_store(&sync_returned, 1);
	return NULL;
}

static void t_linger_sync(void)
{
	struct cep_cm_id *a, *l;
	pthread_t th;

	setup(1, 0);
	l = listen_on(&B, SID);
	a = make_id_flags(&A, CEP_CM_ID_LINGER);
	connect_to_b(a, 0x100, 0x101);
	atomic_store(&sync_id, a);
	CHECK_EQ(pthread_create(&th, NULL, sync_thread, NULL), 0);
	wait_dreq_at_b();
	sleep_ms(50);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_TIMEWAIT);
	CHECK_EQ(atomic_load(&sync_returned), 0); /* timewait not over */
	advance_ms(1000);
	for (int i = 0; i < 5000 && !atomic_load(&sync_returned); i++)
		sleep_ms(1);
	CHECK_EQ(atomic_load(&sync_returned), 1);
	pthread_join(th, NULL);
	CHECK_EQ(atomic_load(&sync_rc), 0);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DESTROYED, a), 1);
	CHECK_EQ(cep_cm_destroy_id_sync(l), 0);
	teardown_all();
}

/* cep_cm_destroy() of a context whose lingering id is in timewait, with a
 * cep_cm_destroy_id_sync() waiting for it on another thread: 0, the
 * waiter returns, no DESTROYED is delivered, and nothing leaks (ASan's
 * leak check in the sanitizer build; the table counts here). */
static void t_linger_cm_destroy(void)
{
	struct cep_cm_id *a, *b_listen;
	pthread_t th;

	setup(1, 0);
	b_listen = listen_on(&B, SID);
	a = make_id_flags(&A, CEP_CM_ID_LINGER);
	connect_to_b(a, 0x100, 0x101);
	(void)make_id_flags(&A, CEP_CM_ID_LINGER); /* and one never destroyed */
	atomic_store(&sync_id, a);
	atomic_store(&sync_returned, 0);
	CHECK_EQ(pthread_create(&th, NULL, sync_thread, NULL), 0);
	wait_dreq_at_b();
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_TIMEWAIT);
	CHECK_EQ(atomic_load(&sync_returned), 0);
	CHECK_EQ(cep_cm_destroy(A.cm), 0);
	pthread_join(th, NULL);
	CHECK_EQ(atomic_load(&sync_rc), 0);
	CHECK_EQ(count_ev(&A, CEP_CM_EV_DESTROYED, NULL), 0);
	/* A again, fresh, for the common teardown of B and the fabric. */
	A.tp->ops->destroy(A.tp);
	A.n = A.nmade = 0;
	A.last_req_id = NULL;
	node_init(&A, GUID_A, LID_A, 1, 0);
	CHECK_EQ(cep_cm_destroy_id_sync(b_listen), 0);
	teardown_all();
}

/* The attribute: a caller built before flags (a smaller size) still
 * creates ids; an unknown flag is refused. */
static void t_linger_attr(void)
{
	struct cep_cm_id_attr ia = { .size = offsetof(struct cep_cm_id_attr, flags),
				     .handler = on_event, .context = &A };
	struct cep_cm_id *id = NULL;

	setup(1, 0);
	CHECK_EQ(cep_cm_create_id(A.cm, &ia, &id), 0); /* libcep 0.2's size */
	CHECK_EQ(cep_cm_destroy_id_sync(id), 0);
	ia.size = offsetof(struct cep_cm_id_attr, flags) - 1;
	CHECK_EQ(cep_cm_create_id(A.cm, &ia, &id), -EINVAL);
	ia.size = sizeof(ia);
	ia.flags = 2;
	CHECK_EQ(cep_cm_create_id(A.cm, &ia, &id), -EINVAL);
	teardown_all();
}

/* The librdmacm drop-in's lazy last events (cm->lazy_ms, cm_post_bits_lazy):
 * on a context with lazy_ms, destroying 20 callback ids queues their
 * DESTROYED without waking the sleeping worker (no kick: each finds it
 * asleep and sets its timerfd instead), and each DESTROYED still comes,
 * once; a QP destroyed under an established id queues its QP_DESTROYED
 * the same way. cep_cm_destroy_id_sync (a thread waits) is not lazy: its
 * item wakes the worker, and it returns with DESTROYED handled. Without
 * the lazy path every one of those posts kicks the sleeping worker. */
static void t_lazy_last_events(void)
{
	enum { N = 20 };
	struct cep_cm_id *ids[N], *b, *s, *l;
	struct cep_dispatch_stats s0, s1;
	uint32_t bc;

	setup(1, 0);
	B.cm->lazy_ms = 200; /* before the first id, as rcm_port_cm */
	for (int i = 0; i < N; i++)
		ids[i] = make_id(&B);
	l = listen_on(&B, SID);
	b = raw_establish(0x7300, 0x900, 0x101, &bc);
	settle();
	sleep_ms(5);
	cep_dispatch_stats(B.cm->d, &s0);
	for (int i = 0; i < N; i++)
		CHECK_EQ(cep_cm_destroy_id(ids[i]), 0);
	CHECK_EQ(cep_cm_qp_destroy(B.cm, 0x101), 0);
	settle();
	cep_dispatch_stats(B.cm->d, &s1);
	printf("lazy: %d destroys and a QP's, kicks %llu, found asleep %llu, timerfd arms %llu\n",
	       N, (unsigned long long)(s1.kick_work - s0.kick_work),
	       (unsigned long long)(s1.lazy - s0.lazy), (unsigned long long)(s1.soon - s0.soon));
	for (int i = 0; i < N; i++)
		CHECK_EQ(count_ev(&B, CEP_CM_EV_DESTROYED, ids[i]), 1);
	CHECK_EQ(count_ev(&B, CEP_CM_EV_QP_DESTROYED, b), 1);
	CHECK_EQ(s1.kick_work - s0.kick_work, 0);
	CHECK(s1.lazy > s0.lazy);

	/* a waiting destroy is not lazy: five, each found the worker asleep
	 * (it wakes every 50 ms with the virtual clock, for microseconds) */
	cep_dispatch_stats(B.cm->d, &s0);
	for (int i = 0; i < 5; i++) {
		s = make_id(&B);
		settle();
		sleep_ms(5);
		CHECK_EQ(cep_cm_destroy_id_sync(s), 0);
		CHECK_EQ(count_ev(&B, CEP_CM_EV_DESTROYED, s), 1);
	}
	cep_dispatch_stats(B.cm->d, &s1);
	CHECK(s1.kick_work > s0.kick_work);
	CHECK_EQ(cep_cm_destroy_id(b), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(l), 0);
	teardown_all();
}

static const struct named_test tests[] = {
	{ "events-after-destroy", t_events_after_destroy },
	{ "events-after-destroy-channel", t_events_after_destroy_channel },
	{ "listener-destroy-req", t_listener_destroy_req },
	{ "listener-destroy-sidr", t_listener_destroy_sidr },
	{ "linger-timewait", t_linger_timewait },
	{ "linger-rej", t_linger_rej },
	{ "linger-passive", t_linger_passive },
	{ "linger-sync", t_linger_sync },
	{ "linger-cm-destroy", t_linger_cm_destroy },
	{ "linger-attr", t_linger_attr },
	{ "lazy-last-events", t_lazy_last_events },
};

int main(int argc, char **argv)
{
	return run_named_test(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
