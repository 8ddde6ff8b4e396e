/* SPDX-License-Identifier: MIT */
/*
 * Who reads a receive queue (src/cm/lead.h, issue 27): two CM contexts on a
 * transport whose MADs wait in a kernel queue, as libibumad's do - a Unix
 * SOCK_SEQPACKET socket per port, registered as drivable
 * (transport/source.h), so the CM's threads and the application's read it
 * themselves. Each scenario checks which thread read (the lead's
 * counters) and which thread ran the engine (the CM callback's thread):
 *
 *   app        a thread in cep_cm_channel_wait reads the MAD that brings
 *              its event and handles it there: the REQ's event is made on
 *              that thread, no worker of the server context ran the MAD,
 *              and the backstop did not read
 *   worker     no application thread waits: a sleeping worker (the
 *              backstop) reads the queue and the connection completes
 *   handover   an application leader returns: the backstop takes the
 *              queue only after the lease, and gives it back (its kick)
 *              when the application waits again; MADs that came between
 *              are read by one of them
 *   followers  two threads wait on two channels of one context: one
 *              leads, the other follows and gets its event from the
 *              leader (its eventfd); a signal ends the leader's wait
 *              (-EINTR) and a third, following, takes its turn
 *   cancel     a leading thread cancelled in its wait gives the queue back
 *              (the next connection is read by the backstop after the
 *              lease)
 *   idle       an application that leads an idle queue does not wake the
 *              backstop worker each lease; once it leaves, the backstop
 *              reads
 *   close      a context destroyed while a thread still names it in
 *              cep_lead_wait (rdma_get_cm_event at exit): the wait lets it
 *              go and the context is freed
 * Usage: test-cm-lead SCENARIO
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cep/cm.h>

#include "../common/check.h"
#include "cm/cm_internal.h"
#include "cm/dispatch.h"
#include "cm/lead.h"
#include "transport/recv_wait.h"
#include "transport/source.h"

/* ---- a transport whose MADs wait in a socket --------------------------------------- */

#define NPORTS 2

#if defined(__SANITIZE_THREAD__)
#define LEAD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LEAD_TSAN 1
#endif
#endif

struct sockport {
	struct cep_transport pub;
	int sv[2];                 /* [0] read end (the queue), [1] its write end */
	uint16_t lid;
	uint64_t guid;
	cep_recv_fn fn;
	void *ctx;
	_Atomic int stopping;
};

struct wire {
	struct cep_mad_addr from;
	uint8_t mad[CEP_MAD_SIZE];
};

static struct sockport *ports[NPORTS + 1]; /* by LID */

static int sp_send(struct cep_transport *t, const uint8_t *mad, size_t len,
		   const struct cep_mad_addr *to)
{
	struct sockport *p = (struct sockport *)t;
	struct wire w;

	if (!to->lid || to->lid > NPORTS || len > CEP_MAD_SIZE)
		return -EHOSTUNREACH;
	memset(&w, 0, sizeof(w));
	w.from.lid = p->lid;
	w.from.qpn = 1;
	w.from.qkey = CEP_QP1_QKEY;
	memcpy(w.mad, mad, len);
	if (send(ports[to->lid]->sv[1], &w, sizeof(w.from) + len, MSG_DONTWAIT) < 0)
		return -errno;
	return 0;
}

static void sp_gid(uint64_t guid, uint8_t gid[16])
{
	memset(gid, 0, 16);
	gid[0] = 0xfe;
	gid[1] = 0x80;
	for (int i = 0; i < 8; i++)
		gid[8 + i] = (uint8_t)(guid >> (56 - 8 * i));
}

static int sp_query(struct cep_transport *t, struct cep_port_info *out)
{
	struct sockport *p = (struct sockport *)t;

	memset(out, 0, sizeof(*out));
	out->ca_guid_net = __builtin_bswap64(p->guid);
	sp_gid(p->guid, out->gid);
	out->lid = p->lid;
	out->port_num = 1;
	out->link_layer = 1;
	out->active_mtu = 5;
	out->pkey = 0xffff;
	out->ca_ack_delay = 15;
	return 0;
}

static int sp_start(struct cep_transport *t, cep_recv_fn fn, void *ctx)
{
	struct sockport *p = (struct sockport *)t;

	p->fn = fn;
	p->ctx = ctx;
	return 0;
}

static void sp_stop(struct cep_transport *t)
{
	atomic_store(&((struct sockport *)t)->stopping, 1);
}

static void sp_destroy(struct cep_transport *t)
{
	struct sockport *p = (struct sockport *)t;

	close(p->sv[0]);
	close(p->sv[1]);
	free(p);
}

static const struct cep_transport_ops sp_ops = {
	.send = sp_send, .query_port = sp_query, .start = sp_start,
	.stop = sp_stop, .destroy = sp_destroy,
};

/* The drain: what umad_drain does, on the leader's thread. */
static int sp_drain(void *ctx)
{
	struct sockport *p = ctx;
	const _Atomic int *saved = cep_recv_wait_abort;
	int got = 0;

	if (atomic_load(&p->stopping))
		return 0;
	cep_recv_wait_abort = &p->stopping;
	for (int i = 0; i < 64; i++) {
		struct wire w;
		ssize_t n = recv(p->sv[0], &w, sizeof(w), MSG_DONTWAIT);

		if (n < (ssize_t)sizeof(w.from))
			break;
		p->fn(p->ctx, w.mad, (size_t)n - sizeof(w.from), &w.from);
		got++;
	}
	cep_recv_wait_abort = saved;
	return got;
}

static int sp_drive(struct cep_transport *t, struct cep_transport_source *src)
{
	struct sockport *p = (struct sockport *)t;

	src->fd = p->sv[0];
	src->drain = sp_drain;
	src->ctx = p;
	return 0;
}

static struct cep_transport *sp_open(uint16_t lid)
{
	struct sockport *p = calloc(1, sizeof(*p));

	if (!p || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p->sv))
		exit(1);
	p->pub.ops = &sp_ops;
	p->lid = lid;
	p->guid = 0x0002c90300b00000ull + lid;
	ports[lid] = p;
	return &p->pub;
}

/* ---- two contexts ------------------------------------------------------------------ */

static struct cep_cm *cm_a, *cm_b;
static struct cep_transport *tp_a, *tp_b;

static struct cep_cm *open_cm(struct cep_transport *t)
{
	struct cep_cm_attr a = { .size = sizeof(a), .transport = t, .workers = 1 };
	struct cep_cm *cm = NULL;

	if (cep_cm_create(&a, &cm)) {
		fprintf(stderr, "cep_cm_create failed\n");
		exit(1);
	}
	return cm;
}

static void setup(void)
{
	cep_transport_register_source(&sp_ops, sp_drive);
	tp_a = sp_open(1);
	tp_b = sp_open(2);
	cm_a = open_cm(tp_a);
	cm_b = open_cm(tp_b);
	CHECK(cm_lead(cm_a) != NULL && cm_lead(cm_b) != NULL);
}

static void teardown(void)
{
	CHECK_EQ(cep_cm_destroy(cm_a), 0);
	CHECK_EQ(cep_cm_destroy(cm_b), 0);
	tp_a->ops->destroy(tp_a);
	tp_b->ops->destroy(tp_b);
}

static struct cep_lead_stats lead_stats(struct cep_cm *cm)
{
	struct cep_lead_stats st;

	cep_lead_stats(cm_lead(cm), &st);
	return st;
}

/* The thread each REQ_RECEIVED / ESTABLISHED callback ran on. */
static _Atomic(pthread_t) req_thread, est_thread;
static _Atomic int reqs, ests;
static _Atomic uint32_t next_qpn = 0x200;

static int server_cb(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param p = { .size = sizeof(p), .starting_psn = 1,
						 .responder_resources = 1, .initiator_depth = 1,
						 .rnr_retry_count = 7 };

		atomic_store(&req_thread, pthread_self());
		p.qpn = atomic_fetch_add(&next_qpn, 1);
		CHECK_EQ(cep_cm_qp_register(id->cm, p.qpn), 0);
		CHECK_EQ(cep_cm_accept(id, &p), 0);
		atomic_fetch_add(&reqs, 1);
	}
	return 0;
}

static int client_cb(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	if (ev->type == CEP_CM_EV_ESTABLISHED) {
		atomic_store(&est_thread, pthread_self());
		atomic_fetch_add(&ests, 1);
	}
	return 0;
}

#define SID 0x7777ull

static void conn_param(struct cep_cm_conn_param *p, uint32_t qpn)
{
	memset(p, 0, sizeof(*p));
	p->size = sizeof(*p);
	p->service_id = SID;
	p->primary.local_lid = 1;
	p->primary.remote_lid = 2;
	sp_gid(ports[1]->guid, p->primary.local_gid);
	sp_gid(ports[2]->guid, p->primary.remote_gid);
	p->primary.subnet_local = 1;
	p->primary.local_ack_timeout = 14;
	p->qpn = qpn;
	p->starting_psn = 1;
	p->pkey = 0xffff;
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->remote_cm_response_timeout = 16;
	p->local_cm_response_timeout = 16;
	p->max_cm_retries = 3;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->transport_service_type = CEP_TS_RC;
}

/* A from A to B's listener (A's client_cb). */
static struct cep_cm_id *connect_one(uint32_t qpn)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = client_cb };
	struct cep_cm_conn_param p;
	struct cep_cm_id *id = NULL;

	CHECK_EQ(cep_cm_create_id(cm_a, &ia, &id), 0);
	CHECK_EQ(cep_cm_qp_register(cm_a, qpn), 0);
	conn_param(&p, qpn);
	CHECK_EQ(cep_cm_connect(id, &p), 0);
	return id;
}

static int wait_for(_Atomic int *v, int want, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (atomic_load(v) >= want)
			return 1;
		usleep(1000);
	}
	return atomic_load(v) >= want;
}

/* ---- scenarios ------------------------------------------------------------------------ */

/* B's listener on channel @ch (its REQs are events there, answered by
 * the thread that takes them), or on server_cb when @ch is NULL. */
static struct cep_cm_id *listen_b(struct cep_cm_channel *ch)
{
	struct cep_cm_id_attr la = { .size = sizeof(la), .channel = ch,
				     .handler = ch ? NULL : server_cb };
	struct cep_cm_id *l = NULL;

	CHECK_EQ(cep_cm_create_id(cm_b, &la, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	return l;
}

struct waiter_arg {
	struct cep_cm_channel *ch;
	struct cep_cm *cm;
	int timeout_ms;
	int ret;
	_Atomic int in;          /* inside cep_cm_channel_wait */
};

static void *channel_waiter(void *p)
{
	struct waiter_arg *a = p;

	atomic_store(&a->in, 1);
	a->ret = cep_cm_channel_wait(a->ch, &a->cm, 1, a->timeout_ms);
	atomic_store(&a->in, 0);
	return NULL;
}

/* The start of a scenario with one waiter: the contexts, a channel for
 * @a, B listening (its REQs on that channel if @reqs_on_channel, else
 * answered by server_cb), and three leases for B's worker to have looked
 * - and, nobody waiting, to lead B's queue as the backstop: waited for
 * (5 s at most), since on a loaded host the worker may look later than
 * three leases (a fixed 60 ms failed cm-lead-app once there). */
static void setup_waiter(struct cep_cm_channel **ch, struct waiter_arg *a, int reqs_on_channel)
{
	setup();
	CHECK_EQ(cep_cm_channel_create(ch), 0);
	(void)listen_b(reqs_on_channel ? *ch : NULL);
	a->ch = *ch;
	a->cm = cm_b;
	usleep(LEAD_LEASE_MS * 3000);
	for (int i = 0; i < 5000 && !lead_stats(cm_b).backstop_now; i++)
		usleep(1000);
	CHECK_EQ(lead_stats(cm_b).backstop_now, 1);
}

/* Start a thread waiting on @a's channel and return once it leads B's
 * queue (B's application leads counted past @before; bounded). */
static void start_leader(struct waiter_arg *a, pthread_t *t, uint64_t before)
{
	pthread_create(t, NULL, channel_waiter, a);
	for (int i = 0; i < 1000 && lead_stats(cm_b).app_leads == before; i++)
		usleep(1000);
}

/* Take the one event of @ch: its type, or -1. */
static int take_event(struct cep_cm_channel *ch)
{
	struct cep_cm_event *ev = NULL;
	int t;

	if (cep_cm_get_event(ch, &ev))
		return -1;
	t = (int)ev->type;
	cep_cm_ack_event(ev);
	return t;
}

/* app: B's REQ read and run by the thread waiting on its channel. */
static void scenario_app(void)
{
	struct cep_cm_channel *ch;
	struct waiter_arg arg = { .cm = NULL, .timeout_ms = 5000 };
	struct cep_lead_stats b0, b1;
	struct cep_dispatch_stats d0, d1;
	pthread_t t;

	setup_waiter(&ch, &arg, 1); /* the backstop leads B now */
	b0 = lead_stats(cm_b);
	cep_dispatch_stats(cm_b->d, &d0);
	/* it takes B's queue from the backstop (a kick) */
	start_leader(&arg, &t, b0.app_leads);
	(void)connect_one(0x100);
	pthread_join(t, NULL);
	CHECK_EQ(arg.ret, 0);
	b1 = lead_stats(cm_b);
	cep_dispatch_stats(cm_b->d, &d1);
	CHECK(b1.app_leads > b0.app_leads);
	CHECK(b1.kicks > b0.kicks);          /* the backstop let go when asked */
	CHECK(b1.app_drains > b0.app_drains);
	/* read and run on the waiting thread: no worker of B took it from a
	 * ring, and the backstop read nothing meanwhile */
	CHECK(d1.inline_mads > d0.inline_mads);
	CHECK_EQ(b1.backstop_drains, b0.backstop_drains);
	CHECK_EQ(take_event(ch), CEP_CM_EV_REQ_RECEIVED);
	teardown();
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
}

/* worker: nobody waits; the sleeping worker reads and the connection
 * completes (callbacks on both sides). */
static void scenario_worker(void)
{
	struct cep_lead_stats b0, b1;

	setup();
	(void)listen_b(NULL);
	b0 = lead_stats(cm_b);
	(void)connect_one(0x100);
	CHECK(wait_for(&ests, 1, 5000));
	CHECK(wait_for(&reqs, 1, 5000));
	b1 = lead_stats(cm_b);
	CHECK(b1.backstop_drains > b0.backstop_drains);
	CHECK_EQ(b1.app_drains, b0.app_drains);
	CHECK_EQ(b1.app_leads, 0);
	/* the REQ ran on B's worker, not on some other thread of the test */
	CHECK(!pthread_equal(atomic_load(&req_thread), pthread_self()));
	teardown();
}

/* handover: an application leader returns; within the lease the
 * backstop does not read, after it it does. */
static void scenario_handover(void)
{
	struct cep_cm_channel *ch;
	struct waiter_arg arg = { .timeout_ms = 30 };
	struct cep_lead_stats s0, s1;
	pthread_t t;

	setup();
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	(void)listen_b(NULL); /* REQs answered by server_cb */
	arg.ch = ch;
	arg.cm = cm_b;
	/* 1. a wait that leads and returns (timeout): nothing read */
	pthread_create(&t, NULL, channel_waiter, &arg);
	pthread_join(t, NULL);
	CHECK_EQ(arg.ret, -ETIMEDOUT);
	s0 = lead_stats(cm_b);
	CHECK(s0.app_leads >= 1);
	/* 2. a connection right after: within the lease nobody reads it;
	 * then the backstop does, and the connection completes */
	(void)connect_one(0x101);
	usleep((LEAD_LEASE_MS / 2) * 1000);
	s1 = lead_stats(cm_b);
	CHECK_EQ(s1.backstop_drains, s0.backstop_drains); /* still the application's */
	CHECK(wait_for(&reqs, 1, 5000));
	CHECK(wait_for(&ests, 1, 5000));
	s1 = lead_stats(cm_b);
	CHECK(s1.backstop_drains > s0.backstop_drains);
	/* 3. the application waits again: the backstop lets go (a kick) */
	usleep(LEAD_LEASE_MS * 3000);
	s0 = lead_stats(cm_b);
	arg.timeout_ms = 200;
	start_leader(&arg, &t, s0.app_leads);
	(void)connect_one(0x102);
	CHECK(wait_for(&reqs, 2, 5000));
	pthread_join(t, NULL);
	s1 = lead_stats(cm_b);
	CHECK(s1.kicks > s0.kicks);
	CHECK(s1.app_drains > s0.app_drains);
	teardown();
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
}

/* idle: an application thread leads an idle queue for 600 ms. The
 * backstop worker sleeps on (told when the application leaves) instead of
 * a look every lease (20 ms: about 30 wake-ups here, and 50 a second for
 * the life of an idle event loop); when the wait ends, the backstop is
 * awake by the lease's end, takes the queue and reads the next
 * connection's REQ. */
static void scenario_idle(void)
{
	struct cep_cm_channel *ch;
	struct waiter_arg arg = { .timeout_ms = 600 };
	struct cep_dispatch_stats d0, d1;
	struct cep_lead_stats s0, s1;
	pthread_t t;

	setup_waiter(&ch, &arg, 0); /* the worker has looked and slept */
	s0 = lead_stats(cm_b);
	start_leader(&arg, &t, s0.app_leads);
	usleep(LEAD_LEASE_MS * 2000); /* the worker's lease look, if any */
	cep_dispatch_stats(cm_b->d, &d0);
	pthread_join(t, NULL);
	cep_dispatch_stats(cm_b->d, &d1);
	printf("idle: an application led for 600 ms; the backstop worker slept %llu times "
	       "(%llu timed out)\n", (unsigned long long)(d1.sleeps - d0.sleeps),
	       (unsigned long long)(d1.timeouts - d0.timeouts));
	CHECK_EQ(arg.ret, -ETIMEDOUT);
	CHECK(d1.sleeps - d0.sleeps <= 3);
	/* the application is gone: the backstop reads the next REQ */
	usleep(LEAD_LEASE_MS * 3000);
	s0 = lead_stats(cm_b);
	(void)connect_one(0x101);
	CHECK(wait_for(&reqs, 1, 5000));
	s1 = lead_stats(cm_b);
	CHECK(s1.backstop_drains > s0.backstop_drains);
	CHECK_EQ(s1.app_drains, s0.app_drains);
	teardown();
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
}

static void on_signal(int sig)
{
	(void)sig;
}

/* followers: two threads wait on two channels of B; the REQ for the
 * second arrives while the first leads, and reaches the second through
 * its eventfd. Then a third follows on the second channel; a signal ends
 * the leader's wait, the third takes its turn and reads the next REQ
 * itself. */
static void scenario_followers(void)
{
	struct cep_cm_channel *ch1, *ch2;
	struct waiter_arg a1 = { .timeout_ms = -1 }, a2 = { .timeout_ms = 5000 },
			  a3 = { .timeout_ms = 5000 };
	struct cep_lead_stats s0, s1;
	struct sigaction sa;
	pthread_t t1, t2, t3;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: poll returns EINTR */
	sigaction(SIGUSR1, &sa, NULL);
	setup();
	CHECK_EQ(cep_cm_channel_create(&ch1), 0);
	CHECK_EQ(cep_cm_channel_create(&ch2), 0);
	(void)listen_b(ch2); /* the REQs are ch2's */
	a1.ch = ch1;
	a2.ch = a3.ch = ch2;
	a1.cm = a2.cm = a3.cm = cm_b;
	s0 = lead_stats(cm_b);
	pthread_create(&t1, NULL, channel_waiter, &a1);
	for (int i = 0; i < 1000 && lead_stats(cm_b).app_leads == s0.app_leads; i++)
		usleep(1000);
	pthread_create(&t2, NULL, channel_waiter, &a2); /* follows t1 */
	while (!atomic_load(&a2.in))
		usleep(1000);
	usleep(20 * 1000);
	(void)connect_one(0x100);
	pthread_join(t2, NULL);
	CHECK_EQ(a2.ret, 0);
	/* t1 counts its drain after the drain returns, and the drain woke
	 * t2 before that: wait for the count (bounded) */
	for (int i = 0; i < 1000 && lead_stats(cm_b).app_drains == s0.app_drains; i++)
		usleep(1000);
	s1 = lead_stats(cm_b);
	CHECK_EQ(s1.app_leads, s0.app_leads + 1); /* t1 led; t2 never had to */
	CHECK(s1.app_drains > s0.app_drains);
	CHECK_EQ(s1.backstop_drains, s0.backstop_drains);
	CHECK_EQ(take_event(ch2), CEP_CM_EV_REQ_RECEIVED);
	/* t3 follows t1; t1's wait ends (a signal: -EINTR, as a signal ends
	 * a read of the ucma fd) and t3 takes the turn */
	pthread_create(&t3, NULL, channel_waiter, &a3);
	while (!atomic_load(&a3.in))
		usleep(1000);
	usleep(20 * 1000);
	pthread_kill(t1, SIGUSR1);
	pthread_join(t1, NULL);
	CHECK_EQ(a1.ret, -EINTR);
	for (int i = 0; i < 1000 && lead_stats(cm_b).app_leads == s1.app_leads; i++)
		usleep(1000);
	CHECK_EQ(lead_stats(cm_b).app_leads, s1.app_leads + 1); /* t3's turn */
	CHECK(lead_stats(cm_b).handovers > s1.handovers);
	(void)connect_one(0x101);
	pthread_join(t3, NULL);
	CHECK_EQ(a3.ret, 0);
	CHECK_EQ(take_event(ch2), CEP_CM_EV_REQ_RECEIVED);
	CHECK_EQ(lead_stats(cm_b).backstop_drains, s0.backstop_drains);
	teardown();
	CHECK_EQ(cep_cm_channel_destroy(ch1), 0);
	CHECK_EQ(cep_cm_channel_destroy(ch2), 0);
}

/* cancel: a leading waiter is cancelled; the queue is the backstop's
 * again after the lease, and a later connection completes. */
static void scenario_cancel(void)
{
#ifdef LEAD_TSAN
	/* ThreadSanitizer loses the mutex a cleanup handler takes when the
	 * thread is cancelled inside an intercepted poll(): it reports the
	 * handler's writes under the lead's mutex as unlocked (seen with
	 * clang 14). Not a race of ours: the cancel is tested in the other
	 * builds. */
	printf("cancel: skipped under ThreadSanitizer\n");
	exit(77);
#endif
	struct cep_cm_channel *ch;
	struct waiter_arg arg = { .timeout_ms = -1 };
	struct cep_lead_stats s0, s1;
	pthread_t t;

	setup();
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	(void)listen_b(NULL);
	arg.ch = ch;
	arg.cm = cm_b;
	s0 = lead_stats(cm_b);
	start_leader(&arg, &t, s0.app_leads);
	CHECK_EQ(pthread_cancel(t), 0);
	CHECK_EQ(pthread_join(t, NULL), 0);
	(void)connect_one(0x100);
	CHECK(wait_for(&ests, 1, 5000));
	s1 = lead_stats(cm_b);
	CHECK(s1.backstop_drains > s0.backstop_drains);
	teardown();
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
}

static int never(void *arg)
{
	(void)arg;
	return 0;
}

/* The lead of B, named in a wait for 1.5 s (its own predicate never true). */
static void *close_waiter(void *p)
{
	struct lw { struct cep_cm_channel *ch; struct cep_lead *l; int ret; } *w = p;

	w->ret = cep_lead_wait(&w->l, 1, -1, never, NULL, 1500);
	return NULL;
}

/* close: a thread waits with B's queue (as rdma_get_cm_event at exit)
 * while B is destroyed; it lets the queue go, keeps waiting on its
 * channel, and B is freed. */
static void scenario_close(void)
{
	struct cep_cm_channel *ch;
	struct cep_lead *l;
	struct lw { struct cep_cm_channel *ch; struct cep_lead *l; int ret; } w;
	pthread_t t;
	struct timespec t0, t1;

	setup();
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	l = cm_lead(cm_b);
	w.ch = ch;
	w.l = l;
	pthread_create(&t, NULL, close_waiter, &w);
	for (int i = 0; i < 1000 && lead_stats(cm_b).app_leads == 0; i++)
		usleep(1000);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_EQ(cep_cm_destroy(cm_b), 0); /* closes the lead: the waiter lets go */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 2000);
	pthread_join(t, NULL);
	CHECK_EQ(w.ret, -ETIMEDOUT); /* its channel never got an event */
	CHECK_EQ(cep_cm_destroy(cm_a), 0);
	tp_a->ops->destroy(tp_a);
	tp_b->ops->destroy(tp_b);
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} sc[] = {
		{ "app", scenario_app }, { "worker", scenario_worker },
		{ "handover", scenario_handover }, { "followers", scenario_followers },
		{ "cancel", scenario_cancel }, { "close", scenario_close },
		{ "idle", scenario_idle },
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s SCENARIO\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < sizeof(sc) / sizeof(sc[0]); i++)
		if (!strcmp(argv[1], sc[i].name)) {
			sc[i].fn();
			return check_done(argv[1]);
		}
	fprintf(stderr, "unknown scenario %s\n", argv[1]);
	return 2;
}
