/* SPDX-License-Identifier: MIT */
/*
 * The cepd client as leader (src/service/remote.c, issue 27: "through
 * cepd, the same rule: the application thread that waits reads the
 * service socket itself"). A real `cepd --fabric 2` on a private socket;
 * context P (port 1) is the one under test, context A (port 0) connects
 * to it, which puts REQs for P in P's socket when the test wants. Which
 * thread read P's socket comes from P's lead (cm/lead.h counters: drains
 * by application threads, by the backstop, kicks, steps aside) and which
 * thread ran a callback from the callback itself:
 *
 *   reply      a thread that waits for its call's reply reads it itself:
 *              400 calls on P with the backstop holding the socket at the
 *              start (one kick, in the first call that waits before its
 *              reply comes: the first on a quiet host), from then every
 *              reply read by the caller (at most one by the backstop,
 *              which may wake for the kick with the reply already there,
 *              and two for each span in which a loaded host kept the
 *              caller away past the lease; skipped when more than 40
 *              were, or the kick came after call 40)
 *   channel    a thread in cep_cm_channel_wait on P reads the REQ that
 *              brings its event (an application drain, none by the
 *              backstop), and returns with it
 *   backstop   no thread waits: the reader thread reads the REQ and the
 *              event reaches P's channel
 *   handover   a waiting thread returns: within the lease nobody reads a
 *              REQ that comes, after it the backstop does; the thread
 *              waits again: the backstop lets go (a kick) and the thread
 *              reads the next REQ itself
 *   inline     a context of the librdmacm drop-in (cmr_callbacks_inline):
 *              a thread waiting as rdma_get_cm_event does (cep_lead_wait
 *              on the context's lead) reads the REQ and runs its callback
 *              itself - no callback thread, no backstop drain
 *   reentrant  on such a context the REQ's callback accepts (a call that
 *              waits for its reply from inside the drain) while the next
 *              REQ is already in the socket: the nested wait reads its
 *              reply and that REQ, whose callback runs after the first
 *              returns (one at a time, in order), all on the waiting
 *              thread; both connections established, nothing read by the
 *              backstop
 *   idle       a thread leads P's socket for 600 ms, nothing comes: the
 *              reader thread (the backstop) sleeps through it - it looked
 *              once a lease (about 30 times) before it had a timer of its
 *              own; after the thread returns it takes the socket back
 *              within a few leases (a REQ then reaches the channel)
 *   blocked    on such a context the callback, run by the waiting thread,
 *              blocks on a mutex the main thread holds across calls on P:
 *              the calls return (the drain stepped aside: the caller
 *              reads its replies), then the callback runs
 * Usage: test-service-lead CEPD-PATH SCENARIO
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cep/cm.h>

#include "../common/check.h"
#include "cm/cm_internal.h"
#include "cm/lead.h"
#include "service/remote.h"

#include "cepd_test.h"

#define SID 0x4c454144ull /* "LEAD" */

static char sock_path[100];
static char dir_path[64];
static pid_t cepd_pid;
static struct cep_cm *P, *A;
static int skipped; /* the scenario could not judge (exit 77) */

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
	struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&t, &t) && errno == EINTR)
		;
}

static struct cep_lead_stats stats(struct cep_cm *cm)
{
	struct cep_lead_stats s;

	cep_lead_stats(cm_lead(cm), &s);
	return s;
}

/* Wait until *@f reaches @v, at most @ms. */
static int wait_for(_Atomic int *f, int v, int ms)
{
	double end = now_ms() + ms;

	while (atomic_load(f) < v) {
		if (now_ms() > end)
			return 0;
		sleep_ms(1);
	}
	return 1;
}

/* ---- the service, the requester --------------------------------------------------- */

static struct cep_cm *attach(unsigned port)
{
	struct cep_cm_attach_attr a = { .size = sizeof(a), .socket = sock_path, .port_num = port };
	struct cep_cm *cm = NULL;

	CHECK_EQ(cep_cm_attach(&a, &cm), 0);
	if (!cm)
		exit(check_done("attach"));
	return cm;
}

static _Atomic int a_established, a_rejected;

/* A's ids: count how each connection ends. */
static int a_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	if (ev->type == CEP_CM_EV_ESTABLISHED)
		atomic_fetch_add(&a_established, 1);
	if (ev->type == CEP_CM_EV_REJ_RECEIVED || ev->type == CEP_CM_EV_REQ_ERROR ||
	    ev->type == CEP_CM_EV_REP_ERROR)
		atomic_fetch_add(&a_rejected, 1);
	return 0;
}

static uint32_t next_qpn = 0x100;

/* A REQ from A to P's listener (a new id of A, a new QP). */
static void connect_one(void)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = a_handler };
	struct cep_cm_conn_param p;
	struct cep_cm_id *id;
	uint32_t qpn = next_qpn++;

	CHECK_EQ(cep_cm_qp_register(A, qpn), 0);
	CHECK_EQ(cep_cm_create_id(A, &ia, &id), 0);
	cepd_fabric_conn(&p, 0, 1, SID, qpn, 16);
	CHECK_EQ(cep_cm_connect(id, &p), 0);
}

static void setup(const char *cepd)
{
	char *argv[] = { "cepd", "--fabric", "2", "--workers", "2", "--socket", sock_path, NULL };

	snprintf(dir_path, sizeof(dir_path), "/tmp/cepd-lead.XXXXXX");
	if (!mkdtemp(dir_path))
		exit(1);
	snprintf(sock_path, sizeof(sock_path), "%s/cepd.sock", dir_path);
	cepd_pid = cepd_spawn(cepd, argv, sock_path, 500, "lead");
	P = attach(1);
	A = attach(0);
}

static struct cep_cm_channel *chan; /* P's, destroyed after it */

static void teardown(void)
{
	int st;

	CHECK_EQ(cep_cm_destroy(A), 0);
	CHECK_EQ(cep_cm_destroy(P), 0);
	if (chan) /* free once P's ids are gone */
		CHECK_EQ(cep_cm_channel_destroy(chan), 0);
	kill(cepd_pid, SIGTERM);
	waitpid(cepd_pid, &st, 0);
	unlink(sock_path);
	rmdir(dir_path);
}

/* A listener of P on channel @ch (no callback: P's callback thread does
 * not wait on its socket). */
static struct cep_cm_id *listen_channel(struct cep_cm_channel *ch)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .channel = ch };
	struct cep_cm_id *l;

	CHECK_EQ(cep_cm_create_id(P, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	return l;
}

/* Take the REQ event waiting on @ch and reject it (A's id ends). */
static void reject_next(struct cep_cm_channel *ch)
{
	struct cep_cm_event *ev = NULL;

	CHECK_EQ(cep_cm_get_event(ch, &ev), 0);
	if (!ev)
		return;
	CHECK_EQ(ev->type, CEP_CM_EV_REQ_RECEIVED);
	if (ev->type == CEP_CM_EV_REQ_RECEIVED)
		CHECK_EQ(cep_cm_reject(ev->id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
	cep_cm_ack_event(ev);
}

/* ---- a waiting thread ------------------------------------------------------------------ */

struct waiter {
	struct cep_cm_channel *ch;
	int timeout_ms;
	int ret;
	double returned_ms;
	_Atomic int started;
};

static void *channel_waiter(void *arg)
{
	struct waiter *w = arg;

	atomic_store(&w->started, 1);
	w->ret = cep_cm_channel_wait(w->ch, &P, 1, w->timeout_ms);
	w->returned_ms = now_ms();
	return NULL;
}

/* Start @w and return once it leads P's socket (it took it, or kicked the
 * backstop and took it). */
static void start_leading(pthread_t *t, struct waiter *w)
{
	uint64_t leads = stats(P).app_leads;

	atomic_store(&w->started, 0);
	CHECK_EQ(pthread_create(t, NULL, channel_waiter, w), 0);
	for (int i = 0; i < 5000 && stats(P).app_leads == leads; i++)
		sleep_ms(1);
	CHECK(stats(P).app_leads > leads);
}

/* ---- reply ------------------------------------------------------------------------------ */

static void scenario_reply(void)
{
	struct cep_lead_stats s0, s1, kicked;
	static double start[400], end[400];
	unsigned slow = 0, n = 0, k = 400;

	/* idle past the lease: the backstop holds the socket */
	sleep_ms(LEAD_LEASE_MS * 3);
	s0 = stats(P);
	for (uint32_t i = 0; i < 400; i++) {
		start[i] = now_ms();
		if (i < 200)
			CHECK_EQ(cep_cm_qp_register(P, 0x5000 + i), 0);
		else
			CHECK_EQ(cep_cm_qp_destroy(P, 0x5000 + i - 200), 0);
		end[i] = now_ms();
		if (k == 400 && stats(P).kicks > s0.kicks) {
			k = i; /* the call that took the socket from the backstop */
			kicked = stats(P);
		}
	}
	s1 = stats(P);
	/* Until the caller first waits for a reply that has not come, the
	 * backstop, which holds the socket, reads each reply as it comes (the
	 * caller then finds its reply there and waits for nothing: one
	 * wake-up, the backstop's, as the caller's own would be). A quiet host
	 * has the first caller waiting before its reply: it kicks in call 0;
	 * a loaded one, which keeps the caller from its wait past the round
	 * trip to cepd, later (seen under TSan beside guests: call 11).
	 * From the kick on the caller reads its replies: the backstop may take
	 * the socket back only once no application thread waited for a lease,
	 * which between two calls is a span, from the start of one call to
	 * the end of the next, of at least LEAD_LEASE_MS (the caller left
	 * somewhere in it and came back). A quiet host has none; each one a
	 * loaded host makes allows the backstop a drain or two (the reply it
	 * finds, the kick's wake-up), no more. */
	for (unsigned i = k; i + 1 < 400; i++)
		if (end[i + 1] - start[i] >= LEAD_LEASE_MS)
			slow++;
	n = 1 + 2 * slow;
	printf("reply: 400 calls: %llu application drains, %llu backstop drains, %llu kicks, "
	       "the first kick in call %u, %u spans over the lease after it\n",
	       (unsigned long long)(s1.app_drains - s0.app_drains),
	       (unsigned long long)(s1.backstop_drains - s0.backstop_drains),
	       (unsigned long long)(s1.kicks - s0.kicks), k, slow);
	if (slow > 40 || (k > 40 && k < 400)) {
		/* a host this loaded says nothing about who reads */
		printf("reply: %u spans over the lease, the first kick in call %u: "
		       "host too loaded, not judged\n", slow, k);
		skipped = 1;
		return;
	}
	CHECK(k < 400);                                      /* it took it from the backstop */
	if (k == 400)
		return;
	/* from the call that kicked: the caller's, but for the kick's and
	 * the slow spans' */
	CHECK(s1.backstop_drains - kicked.backstop_drains <= n);
	CHECK(s1.app_drains - kicked.app_drains + n >= 400 - (k + 1));
}

/* ---- channel ----------------------------------------------------------------------------- */

static void scenario_channel(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id *l;
	struct waiter w = { .timeout_ms = 5000 };
	struct cep_lead_stats s0, s1;
	pthread_t t;

	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	chan = ch;
	l = listen_channel(ch);
	w.ch = ch;
	sleep_ms(LEAD_LEASE_MS * 3);
	start_leading(&t, &w);
	s0 = stats(P);
	connect_one();
	pthread_join(t, NULL);
	s1 = stats(P);
	CHECK_EQ(w.ret, 0);
	CHECK(s1.app_drains > s0.app_drains);
	CHECK_EQ(s1.backstop_drains, s0.backstop_drains);
	reject_next(ch);
	CHECK(wait_for(&a_rejected, 1, 5000));
	(void)l;
}

/* ---- idle -------------------------------------------------------------------------------- */

static void scenario_idle(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id *l;
	struct waiter w = { .timeout_ms = 600 };
	struct cep_lead_stats s0, s1, s2;
	struct pollfd pf;
	pthread_t t;

	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	chan = ch;
	l = listen_channel(ch);
	w.ch = ch;
	sleep_ms(LEAD_LEASE_MS * 3);
	start_leading(&t, &w);
	s0 = stats(P);
	pthread_join(t, NULL);
	s1 = stats(P);
	CHECK_EQ(w.ret, -ETIMEDOUT);
	printf("idle: an application led P's socket for 600 ms; the reader thread "
	       "looked %llu times\n", (unsigned long long)(s1.backstop_looks - s0.backstop_looks));
	/* the kick that gave the socket to the waiter may wake it once more */
	CHECK(s1.backstop_looks - s0.backstop_looks <= 2);
	/* the lease ends: the reader thread holds the socket again (its
	 * timer), and the next REQ reaches the channel through it */
	for (int i = 0; i < 5000 && !stats(P).backstop_now; i++)
		sleep_ms(1);
	CHECK_EQ(stats(P).backstop_now, 1);
	connect_one();
	/* nobody waits: the REQ's event reaches the channel through it */
	pf.fd = cep_cm_channel_fd(ch);
	pf.events = POLLIN;
	CHECK_EQ(poll(&pf, 1, 5000), 1);
	s2 = stats(P);
	CHECK(s2.backstop_drains > s1.backstop_drains);
	CHECK_EQ(s2.app_drains, s1.app_drains);
	reject_next(ch);
	CHECK(wait_for(&a_rejected, 1, 5000));
	(void)l;
}

/* ---- backstop ---------------------------------------------------------------------------- */

static void scenario_backstop(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id *l;
	struct cep_lead_stats s0, s1;
	struct pollfd pf;

	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	chan = ch;
	l = listen_channel(ch);
	s0 = stats(P);
	connect_one();
	/* nobody waits on P: only its reader thread can read the REQ */
	pf.fd = cep_cm_channel_fd(ch);
	pf.events = POLLIN;
	CHECK_EQ(poll(&pf, 1, 5000), 1);
	s1 = stats(P);
	CHECK(s1.backstop_drains > s0.backstop_drains);
	CHECK_EQ(s1.app_drains, s0.app_drains);
	reject_next(ch);
	CHECK(wait_for(&a_rejected, 1, 5000));
	(void)l;
}

/* ---- handover ------------------------------------------------------------------------------ */

static void scenario_handover(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id *l;
	struct waiter w = { .timeout_ms = 30 };
	struct cep_lead_stats s0, s1;
	struct pollfd pf;
	pthread_t t;
	double at;

	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	chan = ch;
	l = listen_channel(ch);
	w.ch = ch;
	/* 1. a wait that leads and returns (nothing came) */
	start_leading(&t, &w);
	pthread_join(t, NULL);
	CHECK_EQ(w.ret, -ETIMEDOUT);
	s0 = stats(P);
	/* 2. a REQ right after: nobody reads it within the lease, the
	 * backstop does after it */
	connect_one();
	at = now_ms();
	if (at < w.returned_ms + LEAD_LEASE_MS / 2)
		sleep_ms((int)(w.returned_ms + LEAD_LEASE_MS / 2 - at));
	s1 = stats(P);
	if (now_ms() < w.returned_ms + LEAD_LEASE_MS - 2) /* a slow host: not judged */
		CHECK_EQ(s1.backstop_drains, s0.backstop_drains);
	pf.fd = cep_cm_channel_fd(ch);
	pf.events = POLLIN;
	CHECK_EQ(poll(&pf, 1, 5000), 1);
	s1 = stats(P);
	CHECK(s1.backstop_drains > s0.backstop_drains);
	CHECK_EQ(s1.app_drains, s0.app_drains);
	reject_next(ch);
	CHECK(wait_for(&a_rejected, 1, 5000));
	/* 3. the thread waits again: the backstop lets go, the thread reads */
	sleep_ms(LEAD_LEASE_MS * 3);
	s0 = stats(P);
	w.timeout_ms = 5000;
	start_leading(&t, &w);
	connect_one();
	pthread_join(t, NULL);
	CHECK_EQ(w.ret, 0);
	s1 = stats(P);
	CHECK(s1.kicks > s0.kicks);
	CHECK(s1.app_drains > s0.app_drains);
	CHECK_EQ(s1.backstop_drains, s0.backstop_drains);
	reject_next(ch);
	CHECK(wait_for(&a_rejected, 2, 5000));
	(void)l;
}

/* ---- inline, reentrant, blocked: a drop-in context --------------------------------------- */

static pthread_t waiter_thread;
static _Atomic int reqs, rtus, depth, max_depth, off_thread, accepts_ok, order_bad;
static _Atomic int mode;          /* 0 inline: reject; 1 reentrant: accept; 2 blocked */
static _Atomic int second_sent, in_callback, slow;
static pthread_mutex_t M = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t p_qpn = 0x800;

/* P's callbacks (as the drop-in's rcm_cep_handler: they may run on any
 * thread that holds no application lock). */
static int p_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	int d = atomic_fetch_add(&depth, 1) + 1;

	if (d > atomic_load(&max_depth))
		atomic_store(&max_depth, d);
	if (!pthread_equal(pthread_self(), waiter_thread))
		atomic_fetch_add(&off_thread, 1);
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		int n = atomic_fetch_add(&reqs, 1) + 1;

		switch (atomic_load(&mode)) {
		case 0:
			CHECK_EQ(cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
			break;
		case 1: {
			struct cep_cm_accept_param p = { .size = sizeof(p), .starting_psn = 1,
							 .responder_resources = 1,
							 .initiator_depth = 1, .rnr_retry_count = 7 };

			if (n == 1) {
				/* the second REQ is (most likely) in the socket
				 * before our call reads: its wait takes it. Within
				 * the lease (the socket is free meanwhile: after
				 * it the backstop would read) */
				double t0 = now_ms();

				atomic_store(&second_sent, 1);
				for (int i = 0; i < 5000 && atomic_load(&second_sent) != 2; i++)
					sleep_ms(1);
				sleep_ms(2);
				if (now_ms() - t0 > LEAD_LEASE_MS - 2)
					atomic_store(&slow, 1);
			} else if (atomic_load(&rtus) != 0) {
				atomic_fetch_add(&order_bad, 1);
			}
			p.qpn = atomic_fetch_add(&p_qpn, 1);
			CHECK_EQ(cep_cm_qp_register(id->cm, p.qpn), 0);
			if (cep_cm_accept(id, &p) == 0)
				atomic_fetch_add(&accepts_ok, 1);
			break;
		}
		default:
			atomic_store(&in_callback, 1);
			pthread_mutex_lock(&M);
			CHECK_EQ(cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
			pthread_mutex_unlock(&M);
			break;
		}
	}
	if (ev->type == CEP_CM_EV_RTU_RECEIVED)
		atomic_fetch_add(&rtus, 1);
	atomic_fetch_sub(&depth, 1);
	return 0;
}

struct lead_wait {
	_Atomic int *count;
	int want;
	int ret;
};

static int count_reached(void *arg)
{
	struct lead_wait *w = arg;

	return atomic_load(w->count) >= w->want;
}

/* As rdma_get_cm_event waits (src/rdmacm/channel.c): leading the
 * context's lead until its predicate holds. */
static void *lead_waiter(void *arg)
{
	struct lead_wait *w = arg;
	struct cep_lead *l = cm_lead(P);

	w->ret = cep_lead_wait(&l, 1, -1, count_reached, w, 10000);
	return NULL;
}

static struct cep_cm_id *listen_inline(void)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = p_handler };
	struct cep_cm_id *l;

	CHECK_EQ(cmr_callbacks_inline(P), 0);
	CHECK_EQ(cep_cm_create_id(P, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	return l;
}

static void start_lead_waiter(struct lead_wait *w)
{
	uint64_t leads = stats(P).app_leads;

	CHECK_EQ(pthread_create(&waiter_thread, NULL, lead_waiter, w), 0);
	for (int i = 0; i < 5000 && stats(P).app_leads == leads; i++)
		sleep_ms(1);
	CHECK(stats(P).app_leads > leads);
}

static void scenario_inline(void)
{
	struct lead_wait w = { .count = &reqs, .want = 1 };
	struct cep_lead_stats s0, s1;

	atomic_store(&mode, 0);
	(void)listen_inline();
	sleep_ms(LEAD_LEASE_MS * 3);
	start_lead_waiter(&w);
	s0 = stats(P);
	connect_one();
	pthread_join(waiter_thread, NULL);
	s1 = stats(P);
	CHECK_EQ(w.ret, 0);
	CHECK_EQ(atomic_load(&reqs), 1);
	CHECK_EQ(atomic_load(&off_thread), 0); /* the callback ran on the waiting thread */
	CHECK(s1.app_drains > s0.app_drains);
	CHECK_EQ(s1.backstop_drains, s0.backstop_drains);
	CHECK(wait_for(&a_rejected, 1, 5000));
}

static void scenario_reentrant(void)
{
	struct lead_wait w = { .count = &rtus, .want = 2 };
	struct cep_lead_stats s0, s1;

	atomic_store(&mode, 1);
	(void)listen_inline();
	sleep_ms(LEAD_LEASE_MS * 3);
	start_lead_waiter(&w);
	s0 = stats(P);
	connect_one();
	/* the first REQ's callback waits for this one to be sent */
	CHECK(wait_for(&second_sent, 1, 5000));
	connect_one();
	atomic_store(&second_sent, 2);
	pthread_join(waiter_thread, NULL);
	s1 = stats(P);
	CHECK_EQ(w.ret, 0);
	CHECK_EQ(atomic_load(&reqs), 2);
	CHECK_EQ(atomic_load(&accepts_ok), 2);
	CHECK_EQ(atomic_load(&rtus), 2);
	CHECK_EQ(atomic_load(&max_depth), 1);  /* never one callback inside another */
	CHECK_EQ(atomic_load(&order_bad), 0);
	CHECK_EQ(atomic_load(&off_thread), 0); /* all on the waiting thread */
	if (!atomic_load(&slow)) /* the nested call's reply read by the waiting thread */
		CHECK_EQ(s1.backstop_drains, s0.backstop_drains);
	else
		printf("reentrant: the callback outlasted the lease (a slow host): "
		       "who read the reply not judged\n");
	CHECK(wait_for(&a_established, 2, 5000));
	printf("reentrant: %llu application drains, %llu steps aside\n",
	       (unsigned long long)(s1.app_drains - s0.app_drains),
	       (unsigned long long)(s1.asides - s0.asides));
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "blocked: a call under the callback's mutex did not return\n";

	(void)!write(2, m, sizeof(m) - 1);
	_exit(1);
}

static void scenario_blocked(void)
{
	struct lead_wait w = { .count = &reqs, .want = 1 };
	struct cep_cm_stats st = { .size = sizeof(st) };
	struct cep_lead_stats s0, s1;

	atomic_store(&mode, 2);
	(void)listen_inline();
	sleep_ms(LEAD_LEASE_MS * 3);
	start_lead_waiter(&w);
	s0 = stats(P);
	pthread_mutex_lock(&M);
	connect_one();
	/* the waiting thread read the REQ and runs its callback: blocked on M */
	CHECK(wait_for(&in_callback, 1, 5000));
	signal(SIGALRM, on_alarm);
	alarm(10);
	CHECK_EQ(cep_cm_get_stats(P, &st), 0);
	CHECK_EQ(cep_cm_qp_register(P, 0x6000), 0);
	CHECK_EQ(cep_cm_qp_destroy(P, 0x6000), 0);
	alarm(0);
	pthread_mutex_unlock(&M);
	pthread_join(waiter_thread, NULL);
	s1 = stats(P);
	CHECK_EQ(w.ret, 0);
	CHECK(s1.asides > s0.asides);
	CHECK_EQ(atomic_load(&off_thread), 0);
	CHECK(wait_for(&a_rejected, 1, 5000));
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} sc[] = {
		{ "reply", scenario_reply }, { "channel", scenario_channel },
		{ "backstop", scenario_backstop }, { "handover", scenario_handover },
		{ "inline", scenario_inline }, { "reentrant", scenario_reentrant },
		{ "blocked", scenario_blocked }, { "idle", scenario_idle },
	};

	if (argc != 3) {
		fprintf(stderr, "usage: test-service-lead CEPD-PATH SCENARIO\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(sc) / sizeof(sc[0]); i++)
		if (!strcmp(argv[2], sc[i].name)) {
			setup(argv[1]);
			sc[i].fn();
			teardown();
			int rc = check_done(argv[2]);
			return rc ? rc : skipped ? 77 : 0;
		}
	fprintf(stderr, "test-service-lead: unknown scenario %s\n", argv[2]);
	return 2;
}
