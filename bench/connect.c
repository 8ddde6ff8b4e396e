/* SPDX-License-Identifier: MIT */
/*
 * cep-bench connect: the full stack. Connection storms between two
 * simulated nodes on the in-process fabric (REQ/REP/RTU through both CMs'
 * dispatchers and protocol engines), then a release storm (DREQ/DREP), for
 * each worker count. Reports established/s, released/s, setup latency
 * percentiles over every connection, and MADs/s over both storms.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "core/rcu.h" /* cep_rcu_qsbr: this process's flavour */
#include "storm.h"

struct connect_rep {
	double est_per_s, rel_per_s, mads_per_s, p50, p99, p999;
	uint32_t failed;
};

static double json_field(const char *line, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(line, pat);
	return p ? strtod(p + strlen(pat), NULL) : -1;
}

/* The RCU flavour is process-wide (rcu.h): a configuration of the other
 * flavour runs as a child process, one repetition at a time, so it still
 * alternates with the others. */
static int connect_child(const struct bench_opts *o, const struct bench_cm_cfg *cfg,
			 unsigned workers, uint32_t n, struct connect_rep *r)
{
	char cmd[512], line[2048];
	FILE *f;
	int ret = -EPROTO;

	/* --sa: the child asks the SA again (once, in its process) */
	snprintf(cmd, sizeof(cmd), "CEP_RCU=%s /proc/%d/exe connect --impl %s --threads %u "
		 "--reps 1 --conns %u --window %d --json --quiet%s%s%s%s",
		 cfg->qsbr ? "qsbr" : "memb", (int)getpid(), cfg->name, workers, n, o->window,
		 o->sa_path ? " --sa '" : "", o->sa_path ? o->sa_port : "",
		 o->sa_path ? "' --sa-dest " : "", o->sa_path ? o->sa_dest : "");
	f = popen(cmd, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "\"bench\": \"connect\"")) {
			r->est_per_s = json_field(line, "conn_per_s");
			r->rel_per_s = json_field(line, "rel_per_s");
			r->mads_per_s = json_field(line, "mads_per_s");
			r->p50 = json_field(line, "p50_us");
			r->p99 = json_field(line, "p99_us");
			r->p999 = json_field(line, "p999_us");
			r->failed = 0;
			ret = 0;
		}
	if (pclose(f) != 0)
		ret = -EPROTO;
	return ret;
}

static int connect_once(const struct bench_opts *o, const struct bench_cm_cfg *cfg,
			unsigned workers, uint32_t n, struct connect_rep *r)
{
	struct storm_attr sa = {
		.workers = workers, .capacity = n, .window = (unsigned)o->window,
		.cfg = cfg, .opts = o, .path = o->sa_path,
	};
	struct storm_phase est, rel;
	struct storm *s;
	int ret;

	(void)cep_rcu_flavor(); /* decides this process's flavour */
	if (cfg->qsbr != cep_rcu_qsbr)
		return connect_child(o, cfg, workers, n, r);
	memset(&est, 0, sizeof(est));
	memset(&rel, 0, sizeof(rel));
	ret = bench_samples_init(&est.lat, n);
	if (ret)
		return ret;
	ret = storm_create(&sa, &s);
	if (ret) {
		bench_samples_fini(&est.lat);
		return ret;
	}
	ret = storm_connect(s, n, &est);
	if (!ret)
		ret = storm_release(s, 0, &rel);
	storm_destroy(s);
	if (!ret && (est.failed || rel.failed || est.ok != n || rel.ok != n)) {
		fprintf(stderr, "cep-bench: connect: %u/%u established, %u failed; "
			"%u released, %u failed\n", est.ok, n, est.failed, rel.ok, rel.failed);
		ret = -EPROTO;
	}
	r->est_per_s = est.per_s;
	r->rel_per_s = rel.per_s;
	r->mads_per_s = est.seconds + rel.seconds > 0 ?
			(double)(est.mads + rel.mads) / (est.seconds + rel.seconds) : 0;
	r->p50 = bench_samples_quantile_us(&est.lat, 0.50);
	r->p99 = bench_samples_quantile_us(&est.lat, 0.99);
	r->p999 = bench_samples_quantile_us(&est.lat, 0.999);
	r->failed = est.failed + rel.failed;
	bench_samples_fini(&est.lat);
	return ret;
}

int bench_connect(const struct bench_opts *o)
{
	uint32_t n = (uint32_t)(o->conns ? o->conns : (long)(o->duration * 100000));
	struct connect_rep *res;
	struct bench_cm_cfg cfg[BENCH_MAX_CM_CFG];
	int nimpl, rep, wi, ii;
	size_t ncell;

	nimpl = bench_cm_impls(o, "libcep-ck,libcep-ck-presized,libcep-rculfhash,"
			       "libcep-rculfhash-presized,libcep-ck-qsbr", cfg);
	if (nimpl < 0) {
		fprintf(stderr, "cep-bench: connect: --impl takes %s\n", bench_cm_impl_names);
		return 2;
	}
	if (n < 1)
		n = 1;
	ncell = (size_t)nimpl * (size_t)o->nthreads;
	res = calloc(ncell * (size_t)o->reps, sizeof(*res));
	if (!res)
		return 1;
#define CELL(i, w) (((size_t)(i) * (size_t)o->nthreads + (size_t)(w)) * (size_t)o->reps)
	/* rep outermost: both configurations and all worker counts see the
	 * same machine noise */
	for (rep = 0; rep < o->reps; rep++)
		for (ii = 0; ii < nimpl; ii++)
			for (wi = 0; wi < o->nthreads; wi++) {
				struct connect_rep *r = &res[CELL(ii, wi) + (size_t)rep];
				int ret = connect_once(o, &cfg[ii], (unsigned)o->threads[wi], n, r);

				if (ret) {
					fprintf(stderr, "cep-bench: connect %s with %d workers failed: %s\n",
						cfg[ii].name, o->threads[wi], strerror(-ret));
					free(res);
					return 1;
				}
				bench_progress(o, "connect rep %d/%d %s workers=%d: %.0f established/s, "
					       "%.0f released/s, p99 %.0f us", rep + 1, o->reps,
					       cfg[ii].name, o->threads[wi],
					       r->est_per_s, r->rel_per_s, r->p99);
			}

	bench_print_header(o, "connect");
	if (!o->json)
		printf("# two nodes on the in-process fabric, %u connections per storm, "
		       "%d in flight; latency: connect() -> ESTABLISHED, every connection\n"
		       "%-26s %7s %10s %21s %10s %8s %8s %8s %10s %4s\n", n, o->window,
		       "impl", "workers", "estab/s", "[min .. max]", "released/s", "p50_us",
		       "p99_us", "p999_us", "MADs/s", "reps");
	for (ii = 0; ii < nimpl; ii++)
		for (wi = 0; wi < o->nthreads; wi++) {
			struct connect_rep *rr = &res[CELL(ii, wi)];
			double v[1000], rel[1000], mads[1000], p50[1000], p99[1000], p999[1000];
			struct bench_mmm mv, mrel, mmads, m50, m99, m999;
			int nr = o->reps > 1000 ? 1000 : o->reps;
			const char *name = cfg[ii].name;

			for (rep = 0; rep < nr; rep++) {
				v[rep] = rr[rep].est_per_s;
				rel[rep] = rr[rep].rel_per_s;
				mads[rep] = rr[rep].mads_per_s;
				p50[rep] = rr[rep].p50;
				p99[rep] = rr[rep].p99;
				p999[rep] = rr[rep].p999;
			}
			mv = bench_median(v, nr);
			mrel = bench_median(rel, nr);
			mmads = bench_median(mads, nr);
			m50 = bench_median(p50, nr);
			m99 = bench_median(p99, nr);
			m999 = bench_median(p999, nr);
			if (o->json) {
				struct bench_json j;

				bench_json_begin(&j, "connect");
				bench_json_str(&j, "impl", name);
				bench_json_int(&j, "workers", o->threads[wi]);
				bench_json_int(&j, "conns", n);
				bench_json_int(&j, "window", o->window);
				bench_json_num(&j, "conn_per_s", mv.med);
				bench_json_num(&j, "conn_per_s_min", mv.min);
				bench_json_num(&j, "conn_per_s_max", mv.max);
				bench_json_num(&j, "rel_per_s", mrel.med);
				bench_json_num(&j, "rel_per_s_min", mrel.min);
				bench_json_num(&j, "rel_per_s_max", mrel.max);
				bench_json_num(&j, "p50_us", m50.med);
				bench_json_num(&j, "p99_us", m99.med);
				bench_json_num(&j, "p999_us", m999.med);
				bench_json_num(&j, "mads_per_s", mmads.med);
				bench_json_int(&j, "reps", o->reps);
				bench_json_end(&j);
			} else {
				char range[64];

				snprintf(range, sizeof(range), "[%.0f .. %.0f]", mv.min, mv.max);
				printf("%-26s %7d %10.0f %21s %10.0f %8.1f %8.1f %8.1f %10.0f %4d\n",
				       name, o->threads[wi], mv.med, range, mrel.med, m50.med,
				       m99.med, m999.med, mmads.med, o->reps);
			}
		}
#undef CELL
	free(res);
	return 0;
}
