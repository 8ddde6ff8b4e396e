/* SPDX-License-Identifier: MIT */
/*
 * cep-bench dispatch: MADs/s through node A's receive -> worker queue ->
 * worker -> decode -> comm-ID lookup -> protocol handler, for 1..N workers
 * and 1 or 2 feeders. The MADs are duplicate RTUs for established
 * connections, sent by feeder threads through node B's fabric port (the CM
 * drops messages for a connection that come from another address than its
 * peer's, so they must come from B's LID; B's CM is idle meanwhile, and a
 * fabric port takes sends from several threads; the fabric delivers in the
 * sender's thread, so a feeder runs the receive side): each is routed,
 * queued, decoded, looked up, locked, found ESTABLISHED and counted as a
 * duplicate, so the connection set does not change while the bench runs.
 * The feeders keep a bounded number in flight (no ring overflows), so the
 * rate is the workers'; their CPU time is measured apart (a 2-CPU machine
 * runs feeders and workers on the same CPUs), giving a speed-up with the
 * receive side off the workers' CPUs. Then the receive queue alone, three
 * ways (queue.c).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
	double feeder_cpu;  /* CPU seconds of the feeder threads */
	double worker_cpu;  /* CPU seconds of everything else (the workers, mostly) */
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

static double cpu_s(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Shared by the feeders of one run. */
struct feed {
	struct cep_cm *cm;
	uint8_t (*mads)[CEP_MAD_SIZE];
	uint32_t n;
	struct cep_mad_addr to;
	uint64_t done0, limit, deadline;
	_Atomic uint64_t sent;     /* by all feeders */
};

struct feeder {
	pthread_t th;
	struct feed *f;
	struct cep_transport *port;
	unsigned idx, nfeeders;
	double cpu;
	int err;
};

/* Send duplicate RTUs, keeping the MADs in flight (sent, not yet done)
 * under the limit, until the deadline - at least one round: on a loaded
 * host a feeder may first run after a short run's deadline, and a rep
 * that sent nothing measures nothing. */
static void *feeder_main(void *arg)
{
	struct feeder *fd = arg;
	struct feed *f = fd->f;
	uint32_t i = fd->idx;
	uint64_t done = f->done0, dups;
	double c0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);

	do {
		while (atomic_load_explicit(&f->sent, memory_order_relaxed) - (done - f->done0) <
		       f->limit) {
			fd->err = fd->port->ops->send(fd->port, f->mads[i], CEP_MAD_SIZE, &f->to);
			if (fd->err)
				break;
			atomic_fetch_add_explicit(&f->sent, 1, memory_order_relaxed);
			i += fd->nfeeders;
			if (i >= f->n)
				i = fd->idx;
		}
		if (!fd->err)
			fd->err = node_done(f->cm, &done, &dups);
		if (atomic_load_explicit(&f->sent, memory_order_relaxed) - (done - f->done0) >= f->limit)
			sched_yield(); /* the workers are behind: give them the CPU */
	} while (bench_now_ns() < f->deadline && !fd->err);
	fd->cpu = cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	return NULL;
}

static int dispatch_once(const struct bench_opts *o, unsigned workers, unsigned nfeeders,
			 uint32_t nconn, struct dispatch_rep *r)
{
	struct storm_attr sa = {
		.workers = workers, .capacity = nconn, .window = (unsigned)o->window, .opts = o,
	};
	struct feeder fd[4];
	struct feed f;
	struct storm_phase ph;
	struct storm *s = NULL;
	uint64_t done, dups, dups0, t0, t1;
	double p0, p1;
	uint32_t i;
	int ret;

	memset(&f, 0, sizeof(f));
	memset(fd, 0, sizeof(fd));
	memset(&ph, 0, sizeof(ph));
	if (nfeeders < 1 || nfeeders > 4)
		return -EINVAL;
	ret = bench_samples_init(&ph.lat, nconn);
	if (!ret)
		ret = storm_create(&sa, &s);
	if (!ret)
		ret = storm_connect(s, nconn, &ph);
	if (ret)
		goto out;
	f.cm = storm_cm(s, 0);
	f.n = storm_established(s);
	f.mads = calloc(f.n, sizeof(*f.mads));
	if (!f.mads || !f.n) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < f.n; i++) {
		struct cep_msg m;

		cep_msg_init(&m, CEP_MSG_RTU, 0x5000000000000000ull + i);
		m.u.rtu.local_comm_id = storm_remote_comm_id(s, i); /* the sender's: B */
		m.u.rtu.remote_comm_id = storm_comm_id(s, i);       /* A's */
		ret = cep_msg_encode(&m, f.mads[i]);
		if (ret)
			goto out;
	}
	for (unsigned k = 0; k < nfeeders; k++)
		fd[k].port = storm_port_b(s);
	f.to.lid = storm_lid_a(s);
	f.to.qpn = 1;
	f.to.qkey = 0x80010000u;

	ret = node_done(f.cm, &f.done0, &dups0);
	if (ret)
		goto out;
	f.limit = (uint64_t)INFLIGHT_PER_WORKER * workers;
	t0 = bench_now_ns();
	p0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
	f.deadline = t0 + (uint64_t)(o->duration * 1e9);
	for (unsigned k = 0; k < nfeeders; k++) {
		fd[k].f = &f;
		fd[k].idx = k;
		fd[k].nfeeders = nfeeders;
		pthread_create(&fd[k].th, NULL, feeder_main, &fd[k]);
	}
	r->feeder_cpu = 0;
	for (unsigned k = 0; k < nfeeders; k++) {
		pthread_join(fd[k].th, NULL);
		if (fd[k].err && !ret)
			ret = fd[k].err;
		r->feeder_cpu += fd[k].cpu;
	}
	if (!ret)
		ret = cep_cm_quiesce(f.cm, 20000);
	t1 = bench_now_ns();
	p1 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
	if (!ret)
		ret = node_done(f.cm, &done, &dups);
	if (ret)
		goto out;
	r->worker_cpu = p1 - p0 - r->feeder_cpu;
	r->mads_per_s = (double)(done - f.done0) * 1e9 / (double)(t1 - t0);
	r->handled = done > f.done0 ? (double)(dups - dups0) / (double)(done - f.done0) : 0;
	if (done - f.done0 != atomic_load(&f.sent)) {
		fprintf(stderr, "cep-bench: dispatch: %llu sent, %llu seen by node A\n",
			(unsigned long long)atomic_load(&f.sent),
			(unsigned long long)(done - f.done0));
		ret = -EPROTO;
	}
out:
	if (s)
		storm_destroy(s);
	free(f.mads);
	bench_samples_fini(&ph.lat);
	return ret;
}

int bench_dispatch(const struct bench_opts *o)
{
	uint32_t nconn = (uint32_t)(o->conns ? o->conns : (o->quick ? 1000 : 10000));
	static const unsigned feeders[] = { 1, 2 };
	const int nf = 2, nw = o->nthreads, nr = o->reps > 1000 ? 1000 : o->reps;
	struct dispatch_rep *res;
	int rep, wi, fi, base = -1;

#define CELL(f, w) (((size_t)(f) * (size_t)nw + (size_t)(w)) * (size_t)o->reps)
	res = calloc((size_t)nf * (size_t)nw * (size_t)o->reps, sizeof(*res));
	if (!res)
		return 1;
	for (rep = 0; rep < o->reps; rep++)
		for (fi = 0; fi < nf; fi++)
			for (wi = 0; wi < nw; wi++) {
				struct dispatch_rep *r = &res[CELL(fi, wi) + (size_t)rep];
				int ret = dispatch_once(o, (unsigned)o->threads[wi], feeders[fi], nconn, r);

				if (ret) {
					fprintf(stderr, "cep-bench: dispatch with %d workers, %u feeders "
						"failed: %s\n", o->threads[wi], feeders[fi], strerror(-ret));
					free(res);
					return 1;
				}
				bench_progress(o, "dispatch rep %d/%d feeders=%u workers=%d: %.0f MADs/s, "
					       "feeder CPU %.2f s, other CPU %.2f s", rep + 1, o->reps,
					       feeders[fi], o->threads[wi], r->mads_per_s, r->feeder_cpu,
					       r->worker_cpu);
			}

	bench_print_header(o, "dispatch");
	if (!o->json)
		printf("# duplicate RTUs to %u established connections, %d MADs in flight per "
		       "worker;\n# feeder/worker CPU: CPU-seconds per second of the feeder threads "
		       "and of the rest (the workers);\n# x 1 worker (cpu): speed-up with each worker "
		       "on a CPU of its own, = W x MADs per worker CPU-second / the same for 1\n"
		       "%-7s %7s %7s %12s %25s %9s %7s %7s %10s %12s %4s\n", nconn,
		       INFLIGHT_PER_WORKER, "impl", "feeders", "workers", "MADs/s", "[min .. max]",
		       "handled%", "feedCPU", "wrkCPU", "x 1 worker", "x 1 wkr(cpu)", "reps");
	for (int k = 0; k < nw; k++)
		if (o->threads[k] == 1)
			base = k;
	for (fi = 0; fi < nf; fi++)
		for (wi = 0; wi < nw; wi++) {
			struct dispatch_rep *rr = &res[CELL(fi, wi)];
			double v[1000], h[1000], x[1000], xc[1000], fc[1000], wc[1000];
			struct bench_mmm mv, mh, mx = { 0, 0, 0 }, mxc = { 0, 0, 0 }, mfc, mwc;

			for (rep = 0; rep < nr; rep++) {
				double secs = o->duration;

				v[rep] = rr[rep].mads_per_s;
				h[rep] = rr[rep].handled;
				fc[rep] = rr[rep].feeder_cpu / secs;
				wc[rep] = rr[rep].worker_cpu / secs;
				if (base >= 0) {
					struct dispatch_rep *b = &res[CELL(fi, base) + (size_t)rep];
					double e = rr[rep].mads_per_s / (rr[rep].worker_cpu > 0 ?
								     rr[rep].worker_cpu : 1);
					double e1 = b->mads_per_s / (b->worker_cpu > 0 ? b->worker_cpu : 1);

					/* ratios per repetition (side by side), then the median */
					x[rep] = rr[rep].mads_per_s / b->mads_per_s;
					xc[rep] = o->threads[wi] * e / e1;
				}
			}
			mv = bench_median(v, nr);
			mh = bench_median(h, nr);
			mfc = bench_median(fc, nr);
			mwc = bench_median(wc, nr);
			if (base >= 0) {
				mx = bench_median(x, nr);
				mxc = bench_median(xc, nr);
			}
			if (o->json) {
				struct bench_json j;

				bench_json_begin(&j, "dispatch");
				bench_json_str(&j, "impl", "libcep");
				bench_json_int(&j, "workers", o->threads[wi]);
				bench_json_int(&j, "feeders", (long long)feeders[fi]);
				bench_json_int(&j, "conns", nconn);
				bench_json_num(&j, "mads_per_s", mv.med);
				bench_json_num(&j, "mads_per_s_min", mv.min);
				bench_json_num(&j, "mads_per_s_max", mv.max);
				bench_json_num(&j, "handled_ratio", mh.med);
				bench_json_num(&j, "feeder_cpu", mfc.med);
				bench_json_num(&j, "worker_cpu", mwc.med);
				if (base >= 0) {
					bench_json_num(&j, "x_1_worker", mx.med);
					bench_json_num(&j, "x_1_worker_cpu", mxc.med);
				}
				bench_json_int(&j, "reps", o->reps);
				bench_json_num(&j, "duration_s", o->duration);
				bench_json_end(&j);
			} else {
				char range[64], xs[32] = "-", xcs[32] = "-";

				snprintf(range, sizeof(range), "[%.4g .. %.4g]", mv.min, mv.max);
				if (base >= 0) {
					snprintf(xs, sizeof(xs), "%.2f", mx.med);
					snprintf(xcs, sizeof(xcs), "%.2f", mxc.med);
				}
				printf("%-7s %7u %7d %12.4g %25s %9.2f %7.2f %7.2f %10s %12s %4d\n",
				       "libcep", feeders[fi], o->threads[wi], mv.med, range, 100.0 * mh.med,
				       mfc.med, mwc.med, xs, xcs, o->reps);
			}
		}
#undef CELL
	free(res);
	return bench_dispatch_queues(o);
}
