/* SPDX-License-Identifier: MIT */
/*
 * cep-soak, the soak tier (opt-in): for --duration seconds it runs
 * cep-stress's "faults" scenario and a steady connection storm over a
 * fabric with 20% loss side by side in one process, samples every second
 * the process's RSS and, over all four CM nodes, the live CEPs, the ids
 * allocated and the armed timers, and fails if any of them trends upward
 * once the load is steady (trend_check below; docs/stress.md "Soak").
 * The machine is shared, so it judges growth, never speed. --self-test
 * runs the trend test on synthetic series; --inject-leak leaks an id and
 * 16 KiB a second to show a real run fails then.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
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

#include "cm/cm_internal.h"
#include "cm/dispatch.h"
#include "../stress.h"

/* ---- the storm: W slots on node A, each connecting, releasing, again ---- */

#define STORM_SID 0x50a6000000000001ull
#define STORM_QPN_A 0x30000u
#define STORM_QPN_B 0x40000u

struct slot {
	_Atomic int busy;           /* an id lives for this slot */
	int again;                  /* its id's DESTROYED connects at once (the
				       id's worker; set before connect) */
	uint32_t index;
};

static struct storm {
	struct cep_fabric *fab;
	struct cep_transport *tpa, *tpb;
	struct cep_cm *a, *b;
	struct cep_cm_id *listener;
	struct slot *slots;
	unsigned nslots;
	_Atomic int stop;
	_Atomic uint64_t connects, established, released, failed, errors;
} S;

static void storm_connect(struct slot *sl);

/* Node A: disconnect once established, destroy the id when it ends. */
static int storm_on_a(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct slot *sl = ev->context;

	switch (ev->type) {
	case CEP_CM_EV_ESTABLISHED:
		atomic_fetch_add_explicit(&S.established, 1, memory_order_relaxed);
		cep_cm_disconnect(id, NULL, 0);
		return 0;
	case CEP_CM_EV_TIMEWAIT_EXIT:
		atomic_fetch_add_explicit(&S.released, 1, memory_order_relaxed);
		return 1;
	case CEP_CM_EV_REJ_RECEIVED:
	case CEP_CM_EV_REQ_ERROR:
	case CEP_CM_EV_REP_ERROR:
	case CEP_CM_EV_DREQ_ERROR:
	case CEP_CM_EV_QP_DESTROYED:
		atomic_fetch_add_explicit(&S.failed, 1, memory_order_relaxed);
		return 1; /* a timewait left continues without us */
	case CEP_CM_EV_DESTROYED:
		/* The next connection of the slot at once, so the load stays
		 * steady whatever the driver thread gets of the CPU. */
		if (sl->again && !atomic_load(&S.stop))
			storm_connect(sl);
		else
			atomic_store_explicit(&sl->busy, 0, memory_order_release);
		return 0;
	default:
		return 0;
	}
}

/* Node B: accept on the slot's QPN (the REQ's private data names it);
 * disconnect too once established, so a connection whose every DREQ from
 * A was lost still ends (a lossy fabric has no other liveness signal
 * here); destroy the id when it ends. */
static int storm_on_b(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	switch (ev->type) {
	case CEP_CM_EV_REQ_RECEIVED: {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .starting_psn = 3,
						  .responder_resources = 1, .initiator_depth = 1 };
		uint32_t i;

		memcpy(&i, ev->private_data, sizeof(i));
		if (i >= S.nslots) {
			cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
			return 1;
		}
		ap.qpn = STORM_QPN_B + i;
		if (cep_cm_accept(id, &ap)) {
			/* the slot's last connection still holds the QP (timewait) */
			cep_cm_reject(id, CEP_REJ_NO_QP, NULL, 0, NULL, 0);
			return 1;
		}
		return 0;
	}
	case CEP_CM_EV_RTU_RECEIVED:
		cep_cm_disconnect(id, NULL, 0);
		return 0;
	case CEP_CM_EV_TIMEWAIT_EXIT:
	case CEP_CM_EV_REJ_RECEIVED:
	case CEP_CM_EV_REP_ERROR:
	case CEP_CM_EV_DREQ_ERROR:
		return 1;
	default:
		return 0;
	}
}

/* Open the slot's next connection (the driver thread, or the previous
 * id's DESTROYED callback). A connect refused (the QP still bound to the
 * last connection in timewait) leaves the slot to the driver. */
static void storm_connect(struct slot *sl)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = storm_on_a, .context = sl };
	struct cep_cm_conn_param p = { .size = sizeof(p), .service_id = STORM_SID,
				       .qpn = STORM_QPN_A + sl->index, .starting_psn = 1,
				       .responder_resources = 1, .initiator_depth = 1,
				       .remote_cm_response_timeout = 12, /* ~17 ms */
				       .local_cm_response_timeout = 12,
				       .packet_life_time = 5, .max_cm_retries = 4,
				       .private_data = &sl->index,
				       .private_data_len = sizeof(sl->index) };
	struct cep_cm_id *id;

	p.primary.local_lid = 11;
	p.primary.remote_lid = 12;
	p.primary.subnet_local = 1;
	p.primary.local_ack_timeout = 8; /* timewait ~2 ms */
	atomic_store_explicit(&sl->busy, 1, memory_order_relaxed);
	if (cep_cm_create_id(S.a, &ia, &id)) {
		atomic_fetch_add(&S.errors, 1);
		atomic_store(&sl->busy, 0);
		return;
	}
	atomic_fetch_add_explicit(&S.connects, 1, memory_order_relaxed);
	sl->again = 1;
	if (cep_cm_connect(id, &p)) {
		sl->again = 0;
		cep_cm_destroy_id(id); /* the slot frees on DESTROYED */
	}
}

/* Keeps every free slot connecting until told to stop. */
static void *storm_driver(void *arg)
{
	(void)arg;
	while (!atomic_load(&S.stop)) {
		for (unsigned i = 0; i < S.nslots; i++)
			if (!atomic_load_explicit(&S.slots[i].busy, memory_order_acquire))
				storm_connect(&S.slots[i]);
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
	}
	return NULL;
}

static int storm_node(uint64_t guid, uint16_t lid, struct cep_transport **tp, struct cep_cm **cm,
		      uint32_t qbase)
{
	struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = guid, .lid = lid,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 2 };

	if (cep_fabric_port_create(S.fab, &pa, tp))
		return -1;
	ca.transport = *tp;
	if (cep_cm_create(&ca, cm))
		return -1;
	for (uint32_t i = 0; i < S.nslots; i++)
		if (cep_cm_qp_register(*cm, qbase + i))
			return -1;
	return 0;
}

static int storm_up(unsigned nslots, double loss, uint64_t seed)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = seed };
	struct cep_fabric_faults f = { .size = sizeof(f), .loss = loss };
	struct cep_cm_id_attr la = { .size = sizeof(la), .handler = storm_on_b };

	S.nslots = nslots;
	S.slots = calloc(nslots, sizeof(*S.slots));
	if (!S.slots || cep_fabric_create(&fa, &S.fab) ||
	    storm_node(0x0002c9030000d011ull, 11, &S.tpa, &S.a, STORM_QPN_A) ||
	    storm_node(0x0002c9030000d012ull, 12, &S.tpb, &S.b, STORM_QPN_B) ||
	    cep_fabric_set_faults(S.fab, &f) || cep_cm_create_id(S.b, &la, &S.listener) ||
	    cep_cm_listen(S.listener, STORM_SID, ~0ull))
		return -1;
	for (unsigned i = 0; i < nslots; i++)
		S.slots[i].index = i;
	return 0;
}

/* Stop connecting, let every slot's id end, then take the nodes down:
 * both must end with no CEP left and a clean table. */
static int storm_down(void)
{
	char msg[512];
	int ret = 0, busy = 1;

	for (int i = 0; i < 3000 && busy; i++) { /* ids end within seconds */
		struct timespec ts = { 0, 10000000 };

		busy = 0;
		for (unsigned k = 0; k < S.nslots; k++)
			busy += atomic_load(&S.slots[k].busy);
		if (busy)
			nanosleep(&ts, NULL);
	}
	if (busy) {
		fprintf(stderr, "soak: storm: %d ids never ended\n", busy);
		ret = -1;
	}
	cep_cm_destroy_id_sync(S.listener);
	for (int i = 0; i < 500; i++) { /* passive ids in timewait */
		struct cep_table_stats sa, sb;
		struct timespec ts = { 0, 10000000 };

		cep_table_stats(cep_cm_table(S.a), &sa);
		cep_table_stats(cep_cm_table(S.b), &sb);
		if (sa.live == 0 && sb.live == 0)
			break;
		nanosleep(&ts, NULL);
	}
	for (int k = 0; k < 2; k++) {
		struct cep_cm *cm = k ? S.b : S.a;
		struct cep_table_stats st;

		cep_table_stats(cep_cm_table(cm), &st);
		if (st.live || cep_table_check(cep_cm_table(cm), msg, sizeof(msg))) {
			fprintf(stderr, "soak: storm node %c: %" PRIu64 " CEPs left; %s\n", "AB"[k],
				st.live, msg);
			ret = -1;
		}
	}
	if (cep_cm_destroy(S.a) || cep_cm_destroy(S.b))
		ret = -1;
	S.tpa->ops->destroy(S.tpa);
	S.tpb->ops->destroy(S.tpb);
	if (cep_fabric_destroy(S.fab))
		ret = -1;
	free(S.slots);
	return ret;
}

/* ---- sampling ------------------------------------------------------------ */

enum { M_RSS, M_HEAP, M_CEPS, M_IDS, M_TIMERS, M_N };
static const char *const metric_names[M_N] = { "rss_kib", "heap_kib", "ceps", "ids", "timers" };
/* Growth over the steady half that counts as material whatever the level
 * (a few connections' worth of ids, 4 MiB of memory; trend_check). */
static const double metric_floor[M_N] = { 4096, 4096, 64, 64, 64 };

static pthread_mutex_t obs_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct cep_cm *obs_a, *obs_b; /* obs_mtx: the stress scenario's nodes */

static void observe(struct cep_cm *a, struct cep_cm *b)
{
	pthread_mutex_lock(&obs_mtx);
	obs_a = a;
	obs_b = b;
	pthread_mutex_unlock(&obs_mtx);
}

/* The process's resident set, after handing glibc's free heap pages back
 * to the kernel (malloc_trim): otherwise RSS keeps the high-water mark of
 * every burst (a backlog of RCU callbacks when the machine stalls) and a
 * peak looks like growth; after the trim it follows what is held. */
static uint64_t rss_kib(void)
{
	unsigned long size = 0, res = 0;
	FILE *f;

	malloc_trim(0);
	f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%lu %lu", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
}

/* Heap bytes in use (malloc'd and not freed), in KiB. */
static uint64_t heap_kib(void)
{
	struct mallinfo2 mi = mallinfo2();

	return (uint64_t)(mi.uordblks + mi.hblkhd) / 1024;
}

/* Add @cm's live CEPs, ids and armed timers to @v. Any thread. */
static void sample_cm(struct cep_cm *cm, double *v)
{
	struct cep_table_stats ts;
	struct cep_cm_stats cs = { .size = sizeof(cs) };
	struct cep_dispatch_stats ds;

	cep_table_stats(cep_cm_table(cm), &ts);
	cep_cm_get_stats(cm, &cs);
	cep_dispatch_stats(cm->d, &ds);
	v[M_CEPS] += (double)ts.live;
	v[M_IDS] += (double)cs.ids;
	v[M_TIMERS] += (double)ds.armed;
}

struct series {
	double *v[M_N];
	unsigned n, cap;
};

static double duration = 600, interval = 1;
static struct series ser;
/* --inject-leak: every sample leaks an id on the storm's node A and 16 KiB
 * of heap (both released at the end), to show the test fails on a leak. */
static int inject_leak;
static struct cep_cm_id **leaked_ids;
static void **leaked_mem;
static unsigned nleaked;

static int leak_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	(void)ev;
	return 0;
}

static void leak_one(void)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = leak_handler };

	if (nleaked >= ser.cap || cep_cm_create_id(S.a, &ia, &leaked_ids[nleaked]))
		return;
	leaked_mem[nleaked] = malloc(16384);
	if (leaked_mem[nleaked])
		memset(leaked_mem[nleaked], 1, 16384);
	nleaked++;
}

static void leak_release(void)
{
	for (unsigned i = 0; i < nleaked; i++) {
		cep_cm_destroy_id_sync(leaked_ids[i]);
		free(leaked_mem[i]);
	}
	free(leaked_ids);
	free(leaked_mem);
}
static FILE *csv;

static void *sampler(void *arg)
{
	double t0 = stress_now(), next = t0 + interval;

	(void)arg;
	while (!atomic_load(&S.stop)) {
		double now = stress_now(), v[M_N] = { 0 };
		struct timespec ts;

		if (now < next) {
			double d = next - now;

			ts.tv_sec = (time_t)d;
			ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
			nanosleep(&ts, NULL);
			continue;
		}
		next += interval;
		if (inject_leak)
			leak_one();
		v[M_RSS] = (double)rss_kib();
		v[M_HEAP] = (double)heap_kib();
		sample_cm(S.a, v);
		sample_cm(S.b, v);
		pthread_mutex_lock(&obs_mtx);
		if (obs_a) {
			sample_cm(obs_a, v);
			sample_cm(obs_b, v);
		}
		pthread_mutex_unlock(&obs_mtx);
		if (ser.n < ser.cap) {
			for (int m = 0; m < M_N; m++)
				ser.v[m][ser.n] = v[m];
			ser.n++;
		}
		if (csv)
			fprintf(csv, "%.1f,%.0f,%.0f,%.0f,%.0f,%.0f,%" PRIu64 ",%" PRIu64 "\n",
				now - t0, v[M_RSS], v[M_HEAP], v[M_CEPS], v[M_IDS], v[M_TIMERS],
				(uint64_t)atomic_load(&S.established), (uint64_t)atomic_load(&S.connects));
		if (ser.n % 60 == 0)
			printf("soak: %4.0f s  rss %6.0f KiB  heap %6.0f KiB  ceps %5.0f  ids %5.0f  "
			       "timers %5.0f  storm %" PRIu64 " established\n", now - t0, v[M_RSS],
			       v[M_HEAP], v[M_CEPS], v[M_IDS], v[M_TIMERS],
			       (uint64_t)atomic_load(&S.established));
		fflush(stdout);
	}
	return NULL;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

/* The trend test, on samples @v[0..n) taken every @dt seconds.
 * - Steady state: the second half (the first half is warm-up: heaps,
 *   tables and arenas reach their working size).
 * - Split it into 10 blocks and take each block's floor, its lowest
 *   sample. Something leaked is never freed, so it raises every later
 *   sample, the floors too; what comes and goes (a burst of RCU callbacks
 *   waiting for a grace period on a loaded machine, a heap spike, the
 *   counts of a stress round) raises peaks and medians, not floors.
 * - Fit a least-squares line to the floors; G = its slope times the
 *   steady half's length is the growth, SE its standard error (from the
 *   floors' scatter around the line).
 * - RISING if G is material, G > max(10% of the steady half's median,
 *   @abs_floor), and significant, G > 3 SE (a flat series passes this
 *   by chance about once in a hundred runs).
 * So a leak of one id a second (300 over the half) or of 16 KiB a second
 * (4.7 MiB) fails, noise around a flat level passes. */
static int trend_check(const char *name, const double *v, unsigned n, double dt,
		       double abs_floor)
{
	unsigned from = n / 2, len = n - from, k = len >= 30 ? 10 : len / 3, bl;
	double fx[10], fy[10], sx = 0, sy = 0, sxx = 0, sxy = 0, ssr = 0, b, T, G, se, lim, level;
	int bad;
	double *sorted = malloc(len * sizeof(double));

	if (!sorted || k < 3)
		return free(sorted), 1;
	memcpy(sorted, v + from, len * sizeof(double));
	qsort(sorted, len, sizeof(double), cmp_double);
	level = sorted[len / 2];
	free(sorted);
	bl = len / k;
	for (unsigned i = 0; i < k; i++) {
		double lo = v[from + i * bl];

		for (unsigned j = 1; j < bl; j++)
			lo = fmin(lo, v[from + i * bl + j]);
		fx[i] = (i + 0.5) * bl * dt;
		fy[i] = lo;
		sx += fx[i];
		sy += fy[i];
		sxx += fx[i] * fx[i];
		sxy += fx[i] * fy[i];
	}
	b = (k * sxy - sx * sy) / (k * sxx - sx * sx);
	for (unsigned i = 0; i < k; i++) {
		double r = fy[i] - (sy - b * sx) / k - b * fx[i];

		ssr += r * r;
	}
	T = len * dt;
	G = b * T;
	se = sqrt(ssr / (k - 2) / (sxx - sx * sx / k)) * T;
	lim = fmax(0.10 * level, abs_floor);
	bad = G > lim && G > 3 * se;
	printf("soak: %-8s median %9.0f  floors %9.0f .. %9.0f  slope %+9.2f/min  growth over "
	       "%.0f s %+9.0f (limit %.0f, 3 SE %.0f)  %s\n", name, level, fy[0], fy[k - 1], b * 60,
	       T, G, lim, 3 * se, bad ? "RISING" : "flat");
	return bad;
}

/* The trend test on synthetic series whose answer is known: flat noise
 * with spikes and dips passes, the same with a leak fails. */
static int self_test(void)
{
	enum { N = 600 };
	static double v[N];
	uint64_t x = 42;
	int bad = 0;

	for (int leak = 0; leak < 2; leak++) {
		for (int i = 0; i < N; i++) { /* RSS-like: 40 MiB +- 8, spikes to 70 */
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			v[i] = 40000 + (double)(x >> 40) / (1 << 24) * 16000 - 8000 +
			       (i % 97 == 0 ? 30000 : 0) + (leak ? 16.0 * i : 0);
		}
		bad |= trend_check(leak ? "rss+leak" : "rss", v, N, 1, 4096) != leak;
		for (int i = 0; i < N; i++) { /* counts: rounds that drain to ~0 */
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			v[i] = (i % 7 == 0 ? 3 : 300 + (double)(x >> 40) / (1 << 24) * 600) +
			       (leak ? 1.0 * i : 0);
		}
		bad |= trend_check(leak ? "ids+leak" : "ids", v, N, 1, 64) != leak;
	}
	printf("soak: trend self-test %s\n", bad ? "FAILED" : "passed");
	return bad;
}

static void usage(void)
{
	fprintf(stderr, "usage: cep-soak [--duration SECONDS] [--interval SECONDS] [--threads N] "
			"[--slots N] [--loss P] [--seed X] [--csv FILE] [--inject-leak] "
			"[--self-test]\n");
}

int main(int argc, char **argv)
{
	struct stress_opts o = { .threads = 4, .seed = 0, .verbose = 1 };
	unsigned nslots = 256;
	double loss = 0.2;
	const struct scenario *faults = NULL;
	pthread_t drv, smp;
	int bad = 0, r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--duration") && i + 1 < argc)
			duration = atof(argv[++i]);
		else if (!strcmp(argv[i], "--interval") && i + 1 < argc)
			interval = atof(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			o.threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--slots") && i + 1 < argc)
			nslots = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--loss") && i + 1 < argc)
			loss = atof(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			o.seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--self-test"))
			return self_test();
		else if (!strcmp(argv[i], "--inject-leak"))
			inject_leak = 1;
		else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
			csv = fopen(argv[++i], "w");
			if (!csv) {
				perror(argv[i]);
				return 2;
			}
		} else {
			usage();
			return 2;
		}
	}
	if (duration < 10 * interval || interval <= 0 || o.threads < 2 || !nslots) {
		usage();
		return 2;
	}
	for (int i = 0; i < stress_cm_count; i++)
		if (!strcmp(stress_cm_scenarios[i].name, "faults"))
			faults = &stress_cm_scenarios[i];
	if (!faults) {
		fprintf(stderr, "soak: no faults scenario in cep-stress\n");
		return 2;
	}
	if (!o.seed)
		o.seed = (uint64_t)time(NULL);
	o.duration = duration;
	ser.cap = (unsigned)(duration / interval) + 16;
	for (int m = 0; m < M_N; m++)
		if (!(ser.v[m] = calloc(ser.cap, sizeof(double))))
			return 2;
	leaked_ids = calloc(ser.cap, sizeof(*leaked_ids));
	leaked_mem = calloc(ser.cap, sizeof(*leaked_mem));
	if (!leaked_ids || !leaked_mem)
		return 2;
	if (csv)
		fprintf(csv, "t_s,rss_kib,heap_kib,ceps,ids,timers,storm_established,"
			     "storm_connects\n");
	printf("soak: %.0f s, seed %" PRIu64 ": cep-stress faults (%d threads) + a storm of %u "
	       "slots at %.0f%% loss; sampling every %.0f s\n", duration, o.seed, o.threads,
	       nslots, loss * 100, interval);
	fflush(stdout);
	if (storm_up(nslots, loss, o.seed)) {
		fprintf(stderr, "soak: storm setup failed\n");
		return 2;
	}
	stress_cm_observer = observe;
	pthread_create(&drv, NULL, storm_driver, NULL);
	pthread_create(&smp, NULL, sampler, NULL);
	r = faults->run(&o); /* the scenario's own clock: returns after duration */
	atomic_store(&S.stop, 1);
	pthread_join(drv, NULL);
	pthread_join(smp, NULL);
	leak_release();
	if (storm_down())
		bad = 1;
	printf("soak: storm: %" PRIu64 " connects, %" PRIu64 " established, %" PRIu64
	       " released, %" PRIu64 " failed (20%% loss), %" PRIu64 " errors\n",
	       (uint64_t)S.connects, (uint64_t)S.established, (uint64_t)S.released,
	       (uint64_t)S.failed, (uint64_t)S.errors);
	if (r || stress_failures()) {
		printf("soak: cep-stress faults: %d violation(s)\n", stress_failures());
		bad = 1;
	}
	if (S.errors)
		bad = 1;
	if (ser.n < 10) {
		printf("soak: only %u samples\n", ser.n);
		bad = 1;
	} else {
		for (int m = 0; m < M_N; m++)
			bad |= trend_check(metric_names[m], ser.v[m], ser.n, interval,
					   metric_floor[m]);
	}
	if (csv)
		fclose(csv);
	printf("soak: %s\n", bad ? "FAILED" : "passed: nothing grows");
	return bad;
}
