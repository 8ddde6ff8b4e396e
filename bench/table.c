/* SPDX-License-Identifier: MIT */
/*
 * cep-bench table: lookups (hits or misses), inserts and deletes on libcep's
 * CEP table and on three baselines, 1..N threads, several mixes. All impls
 * run side by side within each repetition (rep -> threads -> mix -> impl),
 * so machine noise hits them alike and the ratios are from one run.
 *
 * Workload: N entries are preloaded, each thread owning N/T slots. A write
 * op alternates delete (oldest slot of this thread) and insert (into that
 * hole), so the size stays N within one entry per thread and inserts equal
 * deletes. A hit lookup reads a random slot of any thread; a miss lookup
 * uses a random ID (absent but for a 1 in 2^32/N chance, counted anyway).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <urcu/urcu-memb.h>

#include "bench.h"
#include "table_impl.h"
#include "core/table_internal.h" /* cep_hash64: the baselines must hash alike */

struct mix {
	char name[16];  /* "L/I/D" */
	char label[24]; /* name, plus "-miss" for miss lookups */
	unsigned lookup, insert, del; /* percentages */
	int miss;                     /* lookups of absent IDs */
};

static const char *const default_mixes[] = {
	"100/0/0", "100/0/0-miss", "90/5/5", "50/25/25",
};

static const struct tbl_impl *const all_impls[] = {
	&tbl_impl_libcep_ck, &tbl_impl_libcep_lfht, &tbl_impl_rculfhash, &tbl_impl_ck_rhs,
	&tbl_impl_ck_ht, &tbl_impl_rwlock, &tbl_impl_mutex,
};

/* libcep rows are compared with every other row (the baselines). */
static int is_libcep(const struct tbl_impl *impl)
{
	return !strncmp(impl->name, "libcep", 6);
}
#define N_ALL_IMPLS (sizeof(all_impls) / sizeof(all_impls[0]))

uint64_t tbl_hash_seed(void)
{
	uint64_t seed;

	if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
		seed = bench_now_ns();
	return seed;
}

/* The baselines' inline hash must be libcep's, bit for bit. */
static int check_hash(void)
{
	uint64_t rng = 1;

	for (int i = 0; i < 1000; i++) {
		uint64_t seed = bench_rand(&rng);
		uint32_t id = (uint32_t)bench_rand(&rng);

		if (tbl_hash_comm_id(seed, id) != cep_hash64(seed, id))
			return -1;
	}
	return 0;
}

static int parse_mix(const char *s, struct mix *m)
{
	char tail[32] = "";
	int n;

	memset(m, 0, sizeof(*m));
	n = sscanf(s, "%u/%u/%u%31s", &m->lookup, &m->insert, &m->del, tail);
	if (n < 3 || m->lookup + m->insert + m->del != 100 || m->insert != m->del)
		return -EINVAL;
	if (n == 4) {
		if (strcmp(tail, "-miss"))
			return -EINVAL;
		m->miss = 1;
	}
	if (m->lookup > 100)
		return -EINVAL;
	snprintf(m->name, sizeof(m->name), "%u/%u/%u", m->lookup, m->insert, m->del);
	snprintf(m->label, sizeof(m->label), "%s%s", m->name, m->miss ? "-miss" : "");
	return 0;
}

/* State shared by the workers of one run. ids[] is read by every thread and
 * written only by the slot's owner. */
struct run {
	const struct tbl_impl *impl;
	void *tbl;
	const struct mix *mix;
	_Atomic uint32_t *ids; /* 0 = hole */
	uint32_t nslots;
	pthread_barrier_t ready;   /* preload done */
	pthread_barrier_t stopped; /* measurement done */
	/* go/stop: set once by the main thread, polled by workers; started:
	 * counted by workers, polled by main. Atomic so no poll reads a torn
	 * or stale-forever value; only go orders data (release/acquire). */
	atomic_int go, stop;
	atomic_int started; /* workers past their first clock read */
};

struct worker {
	pthread_t th;
	struct run *run;
	uint64_t rng;
	uint32_t first, count;   /* owned slots */
	void **handles;          /* per owned slot; valid unless a hole */
	uint64_t ops, lookups, hits, t_start, t_end;
	struct bench_samples samp;
	int err;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct run *r = w->run;
	const struct tbl_impl *impl = r->impl;
	const struct mix *m = r->mix;
	uint32_t cursor = 0, hole = UINT32_MAX, i;
	uint64_t ops = 0, lookups = 0, hits = 0;

	impl->thread_init(r->tbl);
	for (i = 0; i < w->count && !w->err; i++) {
		uint32_t id;

		w->err = impl->insert(r->tbl, &w->rng, &w->handles[i], &id);
		/* relaxed: readers only need some recent ID of this slot */
		atomic_store_explicit(&r->ids[w->first + i], w->err ? 0 : id,
				      memory_order_relaxed);
	}
	if (w->err)
		w->count = i - 1;
	pthread_barrier_wait(&r->ready);
	/* acquire: pairs with the release that starts the clock */
	while (!atomic_load_explicit(&r->go, memory_order_acquire))
		sched_yield();

	w->t_start = bench_now_ns();
	atomic_fetch_add_explicit(&r->started, 1, memory_order_relaxed);
	/* At least one op: a thread descheduled past the stop still counts. */
	if (!w->err) do {
		uint32_t dice = bench_rand_below(&w->rng, 100);
		int sample = (ops & (BENCH_SAMPLE_EVERY - 1)) == 0;
		uint64_t t0 = sample ? bench_now_ns() : 0;

		if (dice < m->lookup) {
			uint32_t id;

			if (m->miss) {
				id = tbl_draw_id(&w->rng);
			} else {
				uint32_t s = bench_rand_below(&w->rng, r->nslots), k = 0;

				/* at most one hole per thread: a few steps find an ID */
				while (!(id = atomic_load_explicit(&r->ids[s], memory_order_relaxed))
				       && ++k < r->nslots)
					s = s + 1 == r->nslots ? 0 : s + 1;
				if (!id) /* every slot empty: only after failed preloads */
					id = tbl_draw_id(&w->rng);
			}
			hits += impl->lookup(r->tbl, id) == 0;
			lookups++;
		} else if (hole == UINT32_MAX) {
			hole = cursor;
			/* relaxed: a reader that still sees the old ID just misses */
			atomic_store_explicit(&r->ids[w->first + hole], 0, memory_order_relaxed);
			w->err = impl->remove(r->tbl, w->handles[hole]);
		} else {
			uint32_t id = 0;

			w->err = impl->insert(r->tbl, &w->rng, &w->handles[hole], &id);
			if (w->err)
				break;
			atomic_store_explicit(&r->ids[w->first + hole], id, memory_order_relaxed);
			hole = UINT32_MAX;
			cursor = cursor + 1 == w->count ? 0 : cursor + 1;
		}
		if (sample)
			bench_samples_add(&w->samp, bench_now_ns() - t0);
		ops++;
	} while (!atomic_load_explicit(&r->stop, memory_order_relaxed) && !w->err);
	w->t_end = bench_now_ns();
	w->ops = ops;
	w->lookups = lookups;
	w->hits = hits;
	pthread_barrier_wait(&r->stopped);

	for (i = 0; i < w->count; i++)
		if (i != hole)
			impl->remove(r->tbl, w->handles[i]);
	impl->thread_fini(r->tbl);
	return NULL;
}

struct rep_result {
	double ops_per_s, p50, p99, p999, hit_ratio;
};

static size_t pow2_at_least(size_t n)
{
	size_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static int run_once(const struct bench_opts *o, const struct tbl_impl *impl,
		    const struct mix *m, int nthreads, uint64_t seed,
		    struct rep_result *res)
{
	struct run r;
	struct worker *w;
	struct bench_samples all;
	uint64_t lookups = 0, hits = 0, total_ops = 0, t_first = UINT64_MAX, t_last = 0;
	uint32_t n = (uint32_t)o->size, per, extra, first = 0;
	size_t cap;
	int t, ret = 0;

	if ((long)n < nthreads)
		n = (uint32_t)nthreads;
	memset(&r, 0, sizeof(r));
	r.impl = impl;
	r.mix = m;
	r.nslots = n;
	r.ids = calloc(n, sizeof(*r.ids));
	w = calloc((size_t)nthreads, sizeof(*w));
	if (!r.ids || !w || bench_samples_init(&all, 0)) {
		free(r.ids);
		free(w);
		return -ENOMEM;
	}
	ret = impl->create(o->initial_buckets ? (size_t)o->initial_buckets : pow2_at_least(n),
			   &r.tbl);
	if (ret) {
		free(r.ids);
		free(w);
		return ret;
	}
	pthread_barrier_init(&r.ready, NULL, (unsigned)nthreads + 1);
	pthread_barrier_init(&r.stopped, NULL, (unsigned)nthreads);
	per = n / (uint32_t)nthreads;
	extra = n % (uint32_t)nthreads;
	/* ops/s per thread stays under ~100M: enough room for 1 in 64 */
	cap = (size_t)(o->duration * 100e6 / BENCH_SAMPLE_EVERY) + 1024;
	for (t = 0; t < nthreads; t++) {
		w[t].run = &r;
		w[t].rng = seed + 0x1000193u * (uint64_t)(t + 1);
		w[t].first = first;
		w[t].count = per + ((uint32_t)t < extra);
		first += w[t].count;
		w[t].handles = calloc(w[t].count, sizeof(void *));
		if (!w[t].handles || bench_samples_init(&w[t].samp, cap)) {
			fprintf(stderr, "cep-bench: out of memory\n");
			exit(1);
		}
	}
	for (t = 0; t < nthreads; t++)
		if (pthread_create(&w[t].th, NULL, worker_main, &w[t])) {
			fprintf(stderr, "cep-bench: pthread_create failed\n");
			exit(1);
		}
	pthread_barrier_wait(&r.ready);
	/* Lazy rculfhash resizes triggered by the preload run in call_rcu
	 * workers: let them finish before the clock starts. */
	urcu_memb_barrier();
	/* release: workers see the preloaded ids[] before they start */
	atomic_store_explicit(&r.go, 1, memory_order_release);
	/* The window opens when every worker runs (a loaded machine may not
	 * schedule one for a while). */
	while (atomic_load_explicit(&r.started, memory_order_relaxed) < nthreads)
		sched_yield();
	bench_sleep_s(o->duration);
	/* relaxed: workers only need to see it eventually; their results are
	 * read after pthread_join, which orders them */
	atomic_store_explicit(&r.stop, 1, memory_order_relaxed);

	for (t = 0; t < nthreads; t++) {
		pthread_join(w[t].th, NULL);
		if (w[t].err && !ret)
			ret = w[t].err;
		/* Aggregate over the wall-clock window all threads spanned:
		 * summing per-thread rates would double count threads that
		 * the scheduler ran one after the other. */
		total_ops += w[t].ops;
		if (w[t].t_start < t_first)
			t_first = w[t].t_start;
		if (w[t].t_end > t_last)
			t_last = w[t].t_end;
		lookups += w[t].lookups;
		hits += w[t].hits;
		if (bench_samples_merge(&all, &w[t].samp))
			ret = -ENOMEM;
		bench_samples_fini(&w[t].samp);
		free(w[t].handles);
	}
	res->ops_per_s = t_last > t_first ? (double)total_ops * 1e9 / (double)(t_last - t_first) : 0;
	impl->destroy(r.tbl);
	res->p50 = bench_samples_quantile_us(&all, 0.50);
	res->p99 = bench_samples_quantile_us(&all, 0.99);
	res->p999 = bench_samples_quantile_us(&all, 0.999);
	res->hit_ratio = lookups ? (double)hits / (double)lookups : 0.0;
	bench_samples_fini(&all);
	pthread_barrier_destroy(&r.ready);
	pthread_barrier_destroy(&r.stopped);
	free(r.ids);
	free(w);
	return ret;
}

int bench_table(const struct bench_opts *o)
{
	const struct tbl_impl *impls[N_ALL_IMPLS];
	struct mix mixes[BENCH_MAX_LIST];
	int nimpl = 0, nmix = 0, rep, ti, mi, ii;
	struct rep_result *res;
	size_t nrows;

	if (o->nimpl) {
		for (int k = 0; k < o->nimpl; k++) {
			size_t j;

			for (j = 0; j < N_ALL_IMPLS; j++)
				if (!strcmp(o->impl[k], all_impls[j]->name))
					break;
			if (j == N_ALL_IMPLS) {
				fprintf(stderr, "cep-bench: unknown impl '%s'\n", o->impl[k]);
				return 2;
			}
			impls[nimpl++] = all_impls[j];
		}
	} else {
		for (size_t j = 0; j < N_ALL_IMPLS; j++)
			impls[nimpl++] = all_impls[j];
	}
	if (o->nmix) {
		for (int k = 0; k < o->nmix; k++)
			if (parse_mix(o->mix[k], &mixes[nmix++])) {
				fprintf(stderr, "cep-bench: bad mix '%s' (want L/I/D summing to 100, "
					"I == D, optional -miss)\n", o->mix[k]);
				return 2;
			}
	} else {
		for (size_t k = 0; k < sizeof(default_mixes) / sizeof(*default_mixes); k++)
			parse_mix(default_mixes[k], &mixes[nmix++]);
	}

	if (check_hash()) {
		fprintf(stderr, "cep-bench: bench/table_impl.h hash differs from libcep's\n");
		return 1;
	}
	nrows = (size_t)o->nthreads * (size_t)nmix * (size_t)nimpl;
	res = calloc(nrows * (size_t)o->reps, sizeof(*res));
	if (!res)
		return 1;
#define ROW(t, m, i) (((size_t)(t) * (size_t)nmix + (size_t)(m)) * (size_t)nimpl + (size_t)(i))
	for (rep = 0; rep < o->reps; rep++)
		for (ti = 0; ti < o->nthreads; ti++)
			for (mi = 0; mi < nmix; mi++)
				for (ii = 0; ii < nimpl; ii++) {
					struct rep_result *rr =
						&res[ROW(ti, mi, ii) * (size_t)o->reps + (size_t)rep];
					uint64_t seed = o->seed + 7919u * (uint64_t)rep;
					int ret = run_once(o, impls[ii], &mixes[mi], o->threads[ti],
							   seed, rr);

					if (ret) {
						fprintf(stderr, "cep-bench: table %s failed: %s\n",
							impls[ii]->name, strerror(-ret));
						free(res);
						return 1;
					}
					bench_progress(o, "table rep %d/%d threads=%d mix=%s impl=%s: "
						       "%.3g ops/s", rep + 1, o->reps, o->threads[ti],
						       mixes[mi].label,
						       impls[ii]->name, rr->ops_per_s);
				}

	bench_print_header(o, "table");
	if (!o->json)
		printf("# %ld live entries preloaded into %ld initial buckets; latency sampled 1 op "
		       "in %d\n"
		       "%-16s %3s %-14s %12s %25s %8s %8s %8s %6s %4s\n", o->size,
		       o->initial_buckets ? o->initial_buckets : (long)pow2_at_least((size_t)o->size),
		       BENCH_SAMPLE_EVERY, "impl", "thr", "mix", "ops/s", "[min .. max]",
		       "p50_us", "p99_us", "p999_us", "hit%", "reps");
	for (ti = 0; ti < o->nthreads; ti++)
		for (mi = 0; mi < nmix; mi++) {
			struct bench_mmm med[N_ALL_IMPLS];

			for (ii = 0; ii < nimpl; ii++) {
				struct rep_result *rr = &res[ROW(ti, mi, ii) * (size_t)o->reps];
				double v[1000], p50[1000], p99[1000], p999[1000], hit[1000];
				struct bench_mmm mp50, mp99, mp999, mhit;
				int nr = o->reps > 1000 ? 1000 : o->reps;

				for (rep = 0; rep < nr; rep++) {
					v[rep] = rr[rep].ops_per_s;
					p50[rep] = rr[rep].p50;
					p99[rep] = rr[rep].p99;
					p999[rep] = rr[rep].p999;
					hit[rep] = rr[rep].hit_ratio;
				}
				med[ii] = bench_median(v, nr);
				mp50 = bench_median(p50, nr);
				mp99 = bench_median(p99, nr);
				mp999 = bench_median(p999, nr);
				mhit = bench_median(hit, nr);
				if (o->json) {
					struct bench_json j;

					bench_json_begin(&j, "table");
					bench_json_str(&j, "impl", impls[ii]->name);
					bench_json_int(&j, "threads", o->threads[ti]);
					bench_json_str(&j, "mix", mixes[mi].name);
					bench_json_str(&j, "lookup", mixes[mi].miss ? "miss" : "hit");
					bench_json_int(&j, "size", o->size);
					bench_json_int(&j, "initial_buckets",
						       o->initial_buckets ? o->initial_buckets :
						       (long long)pow2_at_least((size_t)o->size));
					bench_json_num(&j, "ops_per_s", med[ii].med);
					bench_json_num(&j, "ops_per_s_min", med[ii].min);
					bench_json_num(&j, "ops_per_s_max", med[ii].max);
					bench_json_num(&j, "p50_us", mp50.med);
					bench_json_num(&j, "p99_us", mp99.med);
					bench_json_num(&j, "p999_us", mp999.med);
					bench_json_num(&j, "hit_ratio", mhit.med);
					bench_json_int(&j, "reps", o->reps);
					bench_json_num(&j, "duration_s", o->duration);
					bench_json_end(&j);
				} else {
					char range[64];

					snprintf(range, sizeof(range), "[%.4g .. %.4g]", med[ii].min,
						 med[ii].max);
					printf("%-16s %3d %-14s %12.4g %25s %8.3f %8.3f %8.3f %6.2f %4d\n",
					       impls[ii]->name, o->threads[ti], mixes[mi].label, med[ii].med,
					       range, mp50.med, mp99.med, mp999.med, 100.0 * mhit.med,
					       o->reps);
				}
			}
			/* each libcep row against each baseline present, from this
			 * same run */
			for (int li = 0; li < nimpl; li++) {
				if (!is_libcep(impls[li]))
					continue;
				if (o->json) {
					struct bench_json j;

					bench_json_begin(&j, "table-ratio");
					bench_json_str(&j, "impl", impls[li]->name);
					bench_json_int(&j, "threads", o->threads[ti]);
					bench_json_str(&j, "mix", mixes[mi].name);
					bench_json_str(&j, "lookup", mixes[mi].miss ? "miss" : "hit");
					bench_json_int(&j, "initial_buckets",
						       o->initial_buckets ? o->initial_buckets :
						       (long long)pow2_at_least((size_t)o->size));
					for (ii = 0; ii < nimpl; ii++) {
						char key[48];

						if (is_libcep(impls[ii]))
							continue;
						snprintf(key, sizeof(key), "x_%s", impls[ii]->name);
						bench_json_num(&j, key, med[li].med / med[ii].med);
					}
					bench_json_int(&j, "reps", o->reps);
					bench_json_end(&j);
				} else {
					printf("  %s x %d thr:", impls[li]->name, o->threads[ti]);
					for (ii = 0; ii < nimpl; ii++)
						if (!is_libcep(impls[ii]))
							printf("  %.2fx %s", med[li].med / med[ii].med,
							       impls[ii]->name);
					printf("\n");
				}
			}
		}
#undef ROW
	free(res);
	return 0;
}
