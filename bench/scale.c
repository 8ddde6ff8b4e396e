/* SPDX-License-Identifier: MIT */
/*
 * cep-bench scale: live connections from 1,000 up to 1,000,000 between two
 * simulated nodes, a fresh pair of nodes per size. At each size: heap bytes
 * per CEP from glibc's own accounting (mallinfo2: in-use arena bytes plus
 * mmapped blocks) plus libcep's own mappings (its object caches and big
 * index maps), growth from the empty nodes to the live ones, divided by
 * the CEPs of both nodes), the whole heap of both nodes (growth from before
 * they were created: rings, tables, CEPs; the bench's own arrays excluded),
 * comm-ID lookup latency on node A's table (every lookup timed), and the connect and release rates of a further storm of
 * min(--conns, size) connections with that many live (released again after
 * each repetition, so every repetition starts from the same live count).
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cep/table.h>

#include "bench.h"
#include "core/slab.h" /* cep_mapped_bytes */
#include "storm.h"

struct scale_row {
	const struct bench_cm_cfg *cfg;
	long live;                /* connections (CEPs per node) */
	uint32_t m;               /* connections per rate storm */
	double bytes_per_cep;     /* heap growth from the empty nodes / CEPs */
	double heap_mib;          /* heap growth from before the nodes existed */
	double p50[1000], p99[1000], rate[1000], rel[1000];
};

/* malloc's in-use bytes plus libcep's own mappings (object caches, big
 * index maps: src/core/slab.h), which mallinfo2 does not see. */
static uint64_t heap_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();

	return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd +
	       atomic_load_explicit(&cep_mapped_bytes, memory_order_relaxed);
}

/* Time @n lookups of random live comm IDs on node A, each one. */
static int lookup_latency(struct storm *s, uint32_t n, uint64_t *rng, double *p50,
			  double *p99)
{
	struct cep_table *t = storm_table(s);
	uint32_t live = storm_established(s);
	struct bench_samples smp;
	int ret = bench_samples_init(&smp, n);

	if (ret)
		return ret;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = storm_comm_id(s, bench_rand_below(rng, live));
		struct cep *cep;
		uint64_t t0 = bench_now_ns();

		ret = cep_lookup_comm_id(t, id, &cep);
		if (ret == 0)
			cep_put(cep);
		bench_samples_add(&smp, bench_now_ns() - t0);
		if (ret) {
			fprintf(stderr, "cep-bench: scale: live comm ID %#x not found\n", id);
			break;
		}
	}
	*p50 = bench_samples_quantile_us(&smp, 0.50);
	*p99 = bench_samples_quantile_us(&smp, 0.99);
	bench_samples_fini(&smp);
	return ret;
}

/* One size: fresh nodes, populate, measure, tear down. */
static int scale_size(const struct bench_opts *o, unsigned workers, uint32_t m,
		      uint32_t nlookup, int nr, uint64_t *rng, struct scale_row *row)
{
	uint32_t live = (uint32_t)row->live;
	struct storm_attr sa;
	struct storm_phase ph, rel;
	struct storm *s;
	uint64_t heap_before, heap0, heap;
	int ret, rep;

	memset(&sa, 0, sizeof(sa));
	sa.workers = workers;
	sa.capacity = live + (uint32_t)nr * m;
	sa.window = (unsigned)o->window;
	sa.cfg = row->cfg;
	sa.opts = o;
	memset(&ph, 0, sizeof(ph));
	memset(&rel, 0, sizeof(rel));
	ret = bench_samples_init(&ph.lat, sa.capacity);
	if (ret)
		return ret;
	heap_before = heap_in_use();
	ret = storm_create(&sa, &s);
	if (ret) {
		bench_samples_fini(&ph.lat);
		return ret;
	}
	heap0 = heap_in_use();
	bench_progress(o, "scale %s: opening %u connections", row->cfg->name,
		       live);
	ret = storm_connect(s, live, &ph);
	if (!ret && ph.failed)
		ret = -EPROTO;
	if (ret)
		goto out;
	heap = heap_in_use();
	/* Both nodes live in this process: a connection is one CEP on each,
	 * so the heap grew by 2 * live CEPs (with their QPs and index nodes). */
	row->bytes_per_cep = (double)(heap - heap0) / (2.0 * (double)live);
	row->heap_mib = (double)(heap - heap_before - storm_bench_bytes(s)) / (1024.0 * 1024.0);
	for (rep = 0; rep < nr; rep++) {
		uint32_t first = storm_opened(s);

		ret = lookup_latency(s, nlookup, rng, &row->p50[rep], &row->p99[rep]);
		if (ret)
			break;
		ph.lat.n = 0;
		ret = storm_connect(s, m, &ph);
		if (!ret && ph.failed)
			ret = -EPROTO;
		if (!ret)
			ret = storm_release(s, first, &rel);
		if (!ret && (rel.failed || rel.ok != m))
			ret = -EPROTO;
		if (ret)
			break;
		row->rate[rep] = ph.per_s;
		row->rel[rep] = rel.per_s;
		bench_progress(o, "scale %s rep %d/%d live=%u: %.0f bytes/CEP, lookup p50 "
			       "%.3f us, %.0f conn/s, %.0f released/s",
			       row->cfg->name, rep + 1, nr, live,
			       row->bytes_per_cep, row->p50[rep], row->rate[rep], row->rel[rep]);
	}
out:
	storm_destroy(s);
	bench_samples_fini(&ph.lat);
	return ret;
}

int bench_scale(const struct bench_opts *o)
{
	uint32_t nlookup = o->quick ? 10000 : 200000;
	uint32_t conns = (uint32_t)(o->conns ? o->conns : (o->quick ? 500 : 10000));
	unsigned workers = (unsigned)o->threads[o->nthreads - 1];
	int si, nr = o->reps > 1000 ? 1000 : o->reps;
	uint64_t rng = o->seed;
	struct scale_row *rows;
	struct bench_cm_cfg cfg[BENCH_MAX_CM_CFG];
	int nimpl = bench_cm_impls(o, "libcep-ck,libcep-ck-presized", cfg), nrows;

	if (nimpl < 0) {
		fprintf(stderr, "cep-bench: scale: --impl takes %s\n", bench_cm_impl_names);
		return 2;
	}
	nrows = nimpl * o->nsizes;
	rows = calloc((size_t)nrows, sizeof(*rows));
	if (!rows)
		return 1;
	for (si = 0; si < nrows; si++) {
		struct scale_row *row = &rows[si];
		int ret;

		/* sizes outer, configurations inner: side by side in time */
		row->cfg = &cfg[si % nimpl];
		row->live = o->sizes[si / nimpl];
		row->m = conns < (uint32_t)row->live ? conns : (uint32_t)row->live;
		if (row->live > 16000000 - (long)nr * row->m) {
			fprintf(stderr, "cep-bench: scale: size %ld too large\n", row->live);
			free(rows);
			return 2;
		}
		ret = scale_size(o, workers, row->m, nlookup, nr, &rng, row);
		if (ret) {
			fprintf(stderr, "cep-bench: scale %s at %ld live failed: %s\n",
				row->cfg->name, row->live, strerror(-ret));
			free(rows);
			return 1;
		}
	}

	bench_print_header(o, "scale");
	if (!o->json)
		printf("# %u workers per node; bytes/CEP = heap growth (mallinfo2) from empty nodes "
		       "/ CEPs of both nodes;\n# heap_MiB: both nodes' whole heap (from before they "
		       "existed);\n# rates: min(%u, live) more connections opened and released with "
		       "that many live, %d in flight\n"
		       "%-26s %9s %9s %9s %10s %10s %10s %21s %10s %4s\n", workers, conns, o->window,
		       "impl", "live", "bytes/CEP", "heap_MiB", "lookup_p50", "lookup_p99",
		       "conn/s", "[min .. max]", "released/s", "reps");
	for (si = 0; si < nrows; si++) {
		struct scale_row *row = &rows[(si % o->nsizes) * nimpl + si / o->nsizes];
		struct bench_mmm m50 = bench_median(row->p50, nr), m99 = bench_median(row->p99, nr);
		struct bench_mmm mr = bench_median(row->rate, nr), mrel = bench_median(row->rel, nr);

		if (o->json) {
			struct bench_json j;

			bench_json_begin(&j, "scale");
			bench_json_str(&j, "impl", row->cfg->name);
			bench_json_int(&j, "live_ceps", row->live);
			bench_json_int(&j, "workers", workers);
			bench_json_num(&j, "bytes_per_cep", row->bytes_per_cep);
			bench_json_num(&j, "heap_mib", row->heap_mib);
			bench_json_num(&j, "lookup_p50_us", m50.med);
			bench_json_num(&j, "lookup_p99_us", m99.med);
			bench_json_num(&j, "conn_per_s", mr.med);
			bench_json_num(&j, "conn_per_s_min", mr.min);
			bench_json_num(&j, "conn_per_s_max", mr.max);
			bench_json_num(&j, "rel_per_s", mrel.med);
			bench_json_int(&j, "conns", row->m);
			bench_json_int(&j, "reps", o->reps);
			bench_json_end(&j);
		} else {
			char range[64];

			snprintf(range, sizeof(range), "[%.0f .. %.0f]", mr.min, mr.max);
			printf("%-26s %9ld %9.0f %9.1f %10.3f %10.3f %10.0f %21s %10.0f %4d\n",
			       row->cfg->name, row->live, row->bytes_per_cep, row->heap_mib, m50.med,
			       m99.med, mr.med, range, mrel.med, o->reps);
		}
	}
	free(rows);
	return 0;
}
