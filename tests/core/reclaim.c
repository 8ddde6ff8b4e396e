/* SPDX-License-Identifier: MIT */
/*
 * Reclamation in batches (src/core/rcu.c, issue 27): what libcep frees
 * reaches liburcu's call_rcu in batches, so liburcu's call_rcu thread
 * wakes once a batch, not once an object; and every batch still gets
 * there: a thread that goes idle, one that exits, cep_rcu_barrier.
 * Usage: test-core-reclaim CASE (no argument: the cases).
 *
 *  paced    A connects to B one connection after another (connect, wait
 *           for ESTABLISHED, disconnect, wait for the DREP, a pause of
 *           PACE_US): a few hundred a second, the rate of cmtime's server
 *           in the guests or a few times it, on the in-process fabric in
 *           real time. After
 *           WARMUP connections, over the next CONNS: the call_rcu calls
 *           libcep made (cep_rcu_get_stats) and the voluntary context
 *           switches of liburcu's call_rcu thread (libcep names it
 *           urcu-call-rcu: each of its sleeps is one), per connection.
 *           Fails above MAX_CALLS and MAX_WAKES per connection. With a
 *           call_rcu per object (built with -DCEP_RCU_DEFER_MAX=1, the
 *           code before the batches) it measures 8 calls and about 0.5
 *           wake-ups per connection on a quiet 2-CPU host.
 *  idle     a thread frees a few CEPs and then blocks, holding them on its
 *           list: a CM's worker (which wakes at least once a second)
 *           hands them to liburcu, so they are freed within a few seconds
 *           with no barrier.
 *  exit     a thread frees a few CEPs and exits: its list is handed over
 *           as it leaves, freed with no barrier.
 *  barrier  a thread frees a few CEPs and blocks: cep_table_check on
 *           another thread (cep_rcu_barrier) finds every one freed.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cep/cm.h>
#include <cep/fabric.h>
#include <cep/table.h>

#include "../common/check.h"
#include "core/rcu.h"

#define SID 0x0000000000c0ffeeull
#define QPN_BASE 0x1000u
#define WARMUP 100u
#define CONNS 1000u
#define PACE_US 1000u
#define MAX_CALLS 0.05
#define MAX_WAKES 0.1
#define FEW 100u /* CEPs the thread cases free: fewer than a full list */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_us(unsigned us)
{
	struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000L };

	nanosleep(&ts, NULL);
}

/* Wait up to @ms for *@a to reach @want. */
static int wait_for(_Atomic uint64_t *a, uint64_t want, unsigned ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;

	while (atomic_load(a) < want) {
		if (now_ns() > end)
			return -ETIMEDOUT;
		sleep_us(50);
	}
	return 0;
}

/* Voluntary context switches of the thread named urcu-call-rcu, or -1. */
static long call_rcu_thread_switches(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	long v = -1;

	while (d && (e = readdir(d))) {
		char path[300], line[128];
		FILE *f;
		int ours = 0;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		ours = fgets(line, sizeof(line), f) && !strcmp(line, "urcu-call-rcu\n");
		fclose(f);
		if (!ours)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
				break;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return v;
}

/* ---- two CM nodes on the in-process fabric, real time -------------------- */

static struct cep_fabric *fab;
static struct node {
	struct cep_transport *tp;
	struct cep_cm *cm;
} A, B;
static _Atomic uint64_t established, released, a_destroyed, b_destroyed, failed;

static int on_a(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	switch (ev->type) {
	case CEP_CM_EV_ESTABLISHED:
		atomic_fetch_add(&established, 1);
		return 0;
	case CEP_CM_EV_DREP_RECEIVED:
	case CEP_CM_EV_DREQ_ERROR:
		atomic_fetch_add(&released, 1);
		return 0;
	case CEP_CM_EV_REJ_RECEIVED:
	case CEP_CM_EV_REQ_ERROR:
		atomic_fetch_add(&failed, 1);
		return cep_cm_id_state(id) == CEP_CM_IDLE;
	case CEP_CM_EV_TIMEWAIT_EXIT:
		return 1;
	case CEP_CM_EV_DESTROYED:
		atomic_fetch_add(&a_destroyed, 1);
		return 0;
	default:
		return 0;
	}
}

static int on_b(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	switch (ev->type) {
	case CEP_CM_EV_REQ_RECEIVED: {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .starting_psn = 7,
						  .responder_resources = 4, .initiator_depth = 4,
						  .rnr_retry_count = 7 };
		uint32_t i;

		memcpy(&i, ev->private_data, sizeof(i));
		ap.qpn = QPN_BASE + i;
		if (cep_cm_accept(id, &ap)) {
			atomic_fetch_add(&failed, 1);
			return 1;
		}
		return 0;
	}
	case CEP_CM_EV_REJ_RECEIVED:
		return cep_cm_id_state(id) == CEP_CM_IDLE;
	case CEP_CM_EV_REP_ERROR:
	case CEP_CM_EV_TIMEWAIT_EXIT:
		return 1;
	case CEP_CM_EV_DESTROYED:
		atomic_fetch_add(&b_destroyed, 1);
		return 0;
	default:
		return 0;
	}
}

static void nodes_up(uint32_t nqpn)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };

	CHECK_EQ(cep_fabric_create(&fa, &fab), 0);
	for (int k = 0; k < 2; k++) {
		struct cep_fabric_port_attr pa = { .size = sizeof(pa),
			.ca_guid = 0x0002c90300000000ull + (uint64_t)k + 1, .lid = (uint16_t)(k + 1),
			.port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
		struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 1 };
		struct node *n = k ? &B : &A;

		CHECK_EQ(cep_fabric_port_create(fab, &pa, &n->tp), 0);
		ca.transport = n->tp;
		CHECK_EQ(cep_cm_create(&ca, &n->cm), 0);
		for (uint32_t q = 0; q < nqpn; q++)
			CHECK_EQ(cep_cm_qp_register(n->cm, QPN_BASE + q), 0);
	}
}

static void nodes_down(void)
{
	for (int k = 0; k < 2; k++) {
		struct node *n = k ? &B : &A;
		char msg[512] = "";
		int rc = cep_table_check(cep_cm_table(n->cm), msg, sizeof(msg));

		CHECK_EQ(rc, 0);
		if (rc)
			fprintf(stderr, "node %c: %s\n", "AB"[k], msg);
		CHECK_EQ(cep_cm_destroy(n->cm), 0);
		n->tp->ops->destroy(n->tp);
	}
	CHECK_EQ(cep_fabric_destroy(fab), 0);
}

static void t_paced(void)
{
	struct cep_cm_id_attr la = { .size = sizeof(la), .handler = on_b };
	struct cep_cm_conn_param p;
	struct cep_rcu_stats s0, s1;
	struct cep_cm_id *listener;
	long w0 = -1, w1;
	uint64_t t0 = 0, t1;
	uint32_t total = WARMUP + CONNS;

	nodes_up(total);
	CHECK_EQ(cep_cm_create_id(B.cm, &la, &listener), 0);
	CHECK_EQ(cep_cm_listen(listener, SID, ~0ull), 0);
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = SID;
	p.responder_resources = 4;
	p.initiator_depth = 4;
	p.remote_cm_response_timeout = 18; /* 1 s a try: a loaded host is no loss */
	p.local_cm_response_timeout = 18;
	p.packet_life_time = 8;            /* timewait of a few ms */
	p.max_cm_retries = 15;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	p.primary.local_lid = 1;
	p.primary.remote_lid = 2;
	p.primary.subnet_local = 1;
	p.primary.packet_rate = 3;
	for (uint32_t i = 0; i < total && !check_failures; i++) {
		struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_a };
		struct cep_cm_id *a;

		if (i == WARMUP) {
			/* The warm-up's frees reach liburcu: its call_rcu
			 * thread exists, named, before the count starts. */
			cep_rcu_barrier();
			cep_rcu_get_stats(&s0);
			w0 = call_rcu_thread_switches();
			t0 = now_ns();
		}
		CHECK_EQ(cep_cm_create_id(A.cm, &ia, &a), 0);
		p.qpn = QPN_BASE + i;
		p.private_data = &i;
		p.private_data_len = sizeof(i);
		CHECK_EQ(cep_cm_connect(a, &p), 0);
		CHECK_EQ(wait_for(&established, i + 1, 10000), 0);
		CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
		CHECK_EQ(wait_for(&released, i + 1, 10000), 0);
		sleep_us(PACE_US);
	}
	cep_rcu_get_stats(&s1);
	w1 = call_rcu_thread_switches();
	t1 = now_ns();
	CHECK_EQ(atomic_load(&failed), 0);
	CHECK(w0 >= 0 && w1 >= 0); /* the thread is there, and named */
	if (!check_failures) {
		double calls = (double)(s1.call_rcu - s0.call_rcu) / CONNS;
		double wakes = (double)(w1 - w0) / CONNS;
		double objs = (double)(s1.deferred - s0.deferred) / CONNS;

		printf("%u connections at %.0f/s: %.2f objects deferred, %.4f call_rcu calls, "
		       "%.4f call_rcu thread wake-ups per connection (hand-offs: %llu full, "
		       "%llu aged)\n", CONNS, CONNS / ((double)(t1 - t0) * 1e-9), objs, calls, wakes,
		       (unsigned long long)(s1.full - s0.full),
		       (unsigned long long)(s1.aged - s0.aged));
		CHECK(objs >= 4); /* the connections did free something */
		CHECK(calls <= MAX_CALLS);
		CHECK(wakes <= MAX_WAKES);
	}
	CHECK_EQ(wait_for(&a_destroyed, total, 20000), 0);
	CHECK_EQ(wait_for(&b_destroyed, total, 20000), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(listener), 0);
	nodes_down();
	cep_rcu_get_stats(&s1);
	CHECK_EQ(s1.freed, s1.deferred); /* the barriers took every list */
}

/* ---- a thread's list when it goes idle, exits, or a barrier comes -------- */

static struct cep_table *tbl;
static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int freed_all, go_on;

/* Create and destroy FEW CEPs (each destroy's last put defers it), then,
 * unless @arg says exit, block until told to go on. */
static void *freer(void *arg)
{
	for (uint32_t i = 0; i < FEW; i++) {
		struct cep *c;

		CHECK_EQ(cep_create(tbl, NULL, &c), 0);
		CHECK_EQ(cep_destroy(c), 0);
		cep_put(c); /* ours: the last */
	}
	pthread_mutex_lock(&mtx);
	freed_all = 1;
	pthread_cond_broadcast(&cv);
	while (!arg && !go_on)
		pthread_cond_wait(&cv, &mtx);
	pthread_mutex_unlock(&mtx);
	return NULL;
}

static pthread_t start_freer(int exits)
{
	pthread_t th;

	freed_all = go_on = 0;
	CHECK_EQ(cep_table_create(NULL, &tbl), 0);
	CHECK_EQ(pthread_create(&th, NULL, freer, exits ? (void *)1 : NULL), 0);
	pthread_mutex_lock(&mtx);
	while (!freed_all)
		pthread_cond_wait(&cv, &mtx);
	pthread_mutex_unlock(&mtx);
	return th;
}

static void stop_freer(pthread_t th)
{
	pthread_mutex_lock(&mtx);
	go_on = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mtx);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(cep_table_destroy(tbl), 0);
}

/* Freed CEPs of tbl reach @want within @ms, with no barrier. */
static int freed_within(uint64_t want, unsigned ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
	struct cep_table_stats st;

	for (;;) {
		cep_table_stats(tbl, &st);
		if (st.freed >= want)
			return 0;
		if (now_ns() > end) {
			fprintf(stderr, "%llu of %llu freed after %u ms\n",
				(unsigned long long)st.freed, (unsigned long long)want, ms);
			return -ETIMEDOUT;
		}
		sleep_us(1000);
	}
}

static void t_idle(void)
{
	struct cep_table_stats st;
	pthread_t th;

	nodes_up(0); /* workers: they wake at least once a second */
	th = start_freer(0);
	cep_table_stats(tbl, &st);
	CHECK_EQ(st.allocated, FEW);
	CHECK_EQ(freed_within(FEW, 10000), 0);
	stop_freer(th);
	nodes_down();
}

static void t_exit(void)
{
	struct cep_rcu_stats s0, s1;
	pthread_t th;

	cep_rcu_get_stats(&s0);
	th = start_freer(1);
	CHECK_EQ(pthread_join(th, NULL), 0);
	cep_rcu_get_stats(&s1);
	CHECK(s1.exited > s0.exited);
	CHECK_EQ(freed_within(FEW, 5000), 0);
	CHECK_EQ(cep_table_destroy(tbl), 0);
}

static void t_barrier(void)
{
	char msg[512] = "";
	pthread_t th = start_freer(0);
	int rc = cep_table_check(tbl, msg, sizeof(msg));

	CHECK_EQ(rc, 0);
	if (rc)
		fprintf(stderr, "table check: %s\n", msg);
	stop_freer(th);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{ "paced", t_paced },
	{ "idle", t_idle },
	{ "exit", t_exit },
	{ "barrier", t_barrier },
};

int main(int argc, char **argv)
{
	size_t n = sizeof(cases) / sizeof(cases[0]);

	for (size_t i = 0; argc == 2 && i < n; i++)
		if (!strcmp(argv[1], cases[i].name)) {
			cases[i].fn();
			return check_done(argv[1]);
		}
	fprintf(stderr, "usage: %s CASE; cases:", argv[0]);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %s", cases[i].name);
	fprintf(stderr, "\n");
	return 2;
}
