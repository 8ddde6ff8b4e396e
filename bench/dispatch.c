/* SPDX-License-Identifier: MIT */
/*
 * cep-bench dispatch: MADs/s through node A's receive -> worker queue ->
 * worker -> decode -> comm-ID lookup -> protocol handler, for 1..N workers.
 * The MADs are duplicate RTUs for established connections, sent by one
 * feeder thread through node B's fabric port (the CM drops messages for a
 * connection that come from another address than its peer's, so they must
 * come from B's LID; B's CM is idle meanwhile): each is routed, queued, decoded,
 * looked up, locked, found ESTABLISHED and counted as a duplicate, so the
 * connection set does not change while the bench runs. The feeder keeps a
 * bounded number in flight (no ring overflows), so the rate is the workers'.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cep/cm.h>
#include <cep/fabric.h>
#include <cep/wire.h>

#include "bench.h"
#include "storm.h"

/* MADs in flight per worker: well under the default 4096-deep ring. */
#define INFLIGHT_PER_WORKER 1024

struct dispatch_rep {
	double mads_per_s;
	double handled;     /* fraction counted as duplicates by the handler */
};

/* MADs node A has finished with: decoded RTUs (counted as received whether
 * the handler then counts them as duplicates or drops them) plus those
 * dropped before decoding. */
static int node_done(struct cep_cm *cm, uint64_t *done, uint64_t *dups)
{
	struct cep_cm_stats st;
	int ret;

	memset(&st, 0, sizeof(st));
	st.size = sizeof(st);
	ret = cep_cm_get_stats(cm, &st);
	if (ret)
		return ret;
	*done = st.received[CEP_MSG_RTU];
	*done += st.drops[CEP_CM_DROP_DECODE] + st.drops[CEP_CM_DROP_QUEUE_FULL] +
		 st.drops[CEP_CM_DROP_STOPPED];
	*dups = st.duplicates;
	return 0;
}

static int dispatch_once(const struct bench_opts *o, unsigned workers, uint32_t nconn,
			 struct dispatch_rep *r)
{
	struct storm_attr sa = {
		.workers = workers, .capacity = nconn, .window = (unsigned)o->window, .opts = o,
	};
	struct cep_mad_addr to;
	struct storm_phase ph;
	struct cep_transport *feeder = NULL;
	struct storm *s = NULL;
	struct cep_cm *cm;
	uint8_t (*mads)[CEP_MAD_SIZE] = NULL;
	uint64_t done0, dups0, done, dups, sent = 0, limit, t0, t1, deadline;
	uint32_t n, i;
	int ret;

	memset(&ph, 0, sizeof(ph));
	ret = bench_samples_init(&ph.lat, nconn);
	if (!ret)
		ret = storm_create(&sa, &s);
	if (!ret)
		ret = storm_connect(s, nconn, &ph);
	if (ret)
		goto out;
	cm = storm_cm(s, 0);
	n = storm_established(s);
	mads = calloc(n, sizeof(*mads));
	if (!mads || !n) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++) {
		struct cep_msg m;

		cep_msg_init(&m, CEP_MSG_RTU, 0x5000000000000000ull + i);
		m.u.rtu.local_comm_id = storm_remote_comm_id(s, i); /* the sender's: B */
		m.u.rtu.remote_comm_id = storm_comm_id(s, i);       /* A's */
		ret = cep_msg_encode(&m, mads[i]);
		if (ret)
			goto out;
	}
	feeder = storm_port_b(s);
	memset(&to, 0, sizeof(to));
	to.lid = storm_lid_a(s);
	to.qpn = 1;
	to.qkey = 0x80010000u;

	ret = node_done(cm, &done0, &dups0);
	if (ret)
		goto out;
	limit = (uint64_t)INFLIGHT_PER_WORKER * workers;
	t0 = bench_now_ns();
	deadline = t0 + (uint64_t)(o->duration * 1e9);
	done = done0;
	i = 0;
	while (bench_now_ns() < deadline) {
		/* Refill up to the in-flight bound, then re-read the counters. */
		while (sent - (done - done0) < limit) {
			ret = feeder->ops->send(feeder, mads[i], CEP_MAD_SIZE, &to);
			if (ret)
				goto out;
			sent++;
			i = i + 1 == n ? 0 : i + 1;
		}
		ret = node_done(cm, &done, &dups);
		if (ret)
			goto out;
		if (sent - (done - done0) >= limit)
			sched_yield(); /* the workers are behind: give them the CPU */
	}
	ret = cep_cm_quiesce(cm, 20000);
	t1 = bench_now_ns();
	if (!ret)
		ret = node_done(cm, &done, &dups);
	if (ret)
		goto out;
	r->mads_per_s = (double)(done - done0) * 1e9 / (double)(t1 - t0);
	r->handled = done > done0 ? (double)(dups - dups0) / (double)(done - done0) : 0;
	if (done - done0 != sent) {
		fprintf(stderr, "cep-bench: dispatch: %llu sent, %llu seen by node A\n",
			(unsigned long long)sent, (unsigned long long)(done - done0));
		ret = -EPROTO;
	}
out:
	if (s)
		storm_destroy(s);
	free(mads);
	bench_samples_fini(&ph.lat);
	return ret;
}

int bench_dispatch(const struct bench_opts *o)
{
	uint32_t nconn = (uint32_t)(o->conns ? o->conns : (o->quick ? 1000 : 10000));
	struct dispatch_rep *res;
	int rep, wi;

	res = calloc((size_t)o->nthreads * (size_t)o->reps, sizeof(*res));
	if (!res)
		return 1;
	for (rep = 0; rep < o->reps; rep++)
		for (wi = 0; wi < o->nthreads; wi++) {
			struct dispatch_rep *r = &res[(size_t)wi * (size_t)o->reps + (size_t)rep];
			int ret = dispatch_once(o, (unsigned)o->threads[wi], nconn, r);

			if (ret) {
				fprintf(stderr, "cep-bench: dispatch with %d workers failed: %s\n",
					o->threads[wi], strerror(-ret));
				free(res);
				return 1;
			}
			bench_progress(o, "dispatch rep %d/%d workers=%d: %.0f MADs/s", rep + 1,
				       o->reps, o->threads[wi], r->mads_per_s);
		}

	bench_print_header(o, "dispatch");
	if (!o->json)
		printf("# duplicate RTUs to %u established connections, 1 feeder thread, "
		       "%d MADs in flight per worker\n%-7s %7s %12s %25s %9s %10s %4s\n", nconn,
		       INFLIGHT_PER_WORKER, "impl", "workers", "MADs/s", "[min .. max]",
		       "handled%", "x 1 worker", "reps");
	for (wi = 0; wi < o->nthreads; wi++) {
		struct dispatch_rep *rr = &res[(size_t)wi * (size_t)o->reps];
		double v[1000], h[1000], v0[1000];
		struct bench_mmm mv, mh, m0 = { 0, 0, 0 };
		int nr = o->reps > 1000 ? 1000 : o->reps;
		int base = -1;

		for (int k = 0; k < o->nthreads; k++)
			if (o->threads[k] == 1)
				base = k;
		for (rep = 0; rep < nr; rep++) {
			v[rep] = rr[rep].mads_per_s;
			h[rep] = rr[rep].handled;
			if (base >= 0)
				v0[rep] = res[(size_t)base * (size_t)o->reps + (size_t)rep].mads_per_s;
		}
		mv = bench_median(v, nr);
		mh = bench_median(h, nr);
		if (base >= 0)
			m0 = bench_median(v0, nr);
		if (o->json) {
			struct bench_json j;

			bench_json_begin(&j, "dispatch");
			bench_json_str(&j, "impl", "libcep");
			bench_json_int(&j, "workers", o->threads[wi]);
			bench_json_int(&j, "conns", nconn);
			bench_json_int(&j, "feeders", 1);
			bench_json_num(&j, "mads_per_s", mv.med);
			bench_json_num(&j, "mads_per_s_min", mv.min);
			bench_json_num(&j, "mads_per_s_max", mv.max);
			bench_json_num(&j, "handled_ratio", mh.med);
			if (base >= 0)
				bench_json_num(&j, "x_1_worker", mv.med / m0.med);
			bench_json_int(&j, "reps", o->reps);
			bench_json_num(&j, "duration_s", o->duration);
			bench_json_end(&j);
		} else {
			char range[64];

			snprintf(range, sizeof(range), "[%.4g .. %.4g]", mv.min, mv.max);
			char x[32] = "-";

			if (base >= 0)
				snprintf(x, sizeof(x), "%.2f", mv.med / m0.med);
			printf("%-7s %7d %12.4g %25s %9.2f %10s %4d\n", "libcep", o->threads[wi],
			       mv.med, range, 100.0 * mh.med, x, o->reps);
		}
	}
	free(res);
	return 0;
}
