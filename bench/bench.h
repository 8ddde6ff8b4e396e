/* SPDX-License-Identifier: MIT */
/*
 * cep-bench common helpers (private to bench/): options, clocks, a per-thread
 * PRNG, latency samples and percentiles, medians of repetitions, and the two
 * output forms (readable table on stdout, or one JSON object per line).
 * Nothing here is shared between threads unless its comment says so.
 */
#ifndef CEP_BENCH_H
#define CEP_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define BENCH_MAX_LIST 16

/* Options common to every subcommand (parsed once in main.c). */
struct cep_sa_path;

struct bench_opts {
	int json;                        /* --json: JSON lines instead of the table */
	int quick;                       /* --quick: smoke-test sizes */
	int reps;                        /* --reps: repetitions per row */
	double duration;                 /* --duration: seconds per repetition */
	int nthreads;                    /* --threads 1,2 (also --workers) */
	int threads[BENCH_MAX_LIST];
	int nmix;                        /* --mix 90/5/5,... (table) */
	char mix[BENCH_MAX_LIST][32];
	int nimpl;                       /* --impl libcep,mutex,... (table) */
	char impl[BENCH_MAX_LIST][32];
	int nsizes;                      /* --sizes 1000,10000 (scale) */
	long sizes[BENCH_MAX_LIST];
	long size;                       /* --size: preloaded entries (table) */
	long initial_buckets;            /* --initial-buckets (table; 0: >= size) */
	long conns;                      /* --conns: per storm (0: from duration) */
	int window;                      /* --window: connects in flight */
	uint64_t seed;                   /* --seed */
	int quiet;                       /* --quiet: no progress on stderr */
	const char *sa_port, *sa_dest;   /* connect: --sa CA:PORT --sa-dest LID|GID */
	const struct cep_sa_path *sa_path; /* connect: their PathRecord, asked once */
};

/* --- time ------------------------------------------------------------- */

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_sleep_s(double s);

/* --- PRNG: xoshiro-style splitmix64, one state per thread ---------------- */

static inline uint64_t bench_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, n) without a division (Lemire's multiply-shift). */
static inline uint32_t bench_rand_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(((bench_rand(s) >> 32) * (uint64_t)n) >> 32);
}

/* --- latency samples ----------------------------------------------------- */

/* Ops sampled for latency: one in BENCH_SAMPLE_EVERY (a power of two). */
#define BENCH_SAMPLE_EVERY 64

struct bench_samples {
	uint32_t *ns;      /* latencies in ns, saturated at UINT32_MAX */
	size_t n, cap;
};

int bench_samples_init(struct bench_samples *s, size_t cap);
void bench_samples_fini(struct bench_samples *s);
static inline void bench_samples_add(struct bench_samples *s, uint64_t ns)
{
	if (s->n < s->cap)
		s->ns[s->n++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}
/* Append @src to @dst (grows @dst). 0 or -ENOMEM. */
int bench_samples_merge(struct bench_samples *dst, const struct bench_samples *src);
/* Sorts @s and returns the q-quantile (0..1) in microseconds; 0 if empty. */
double bench_samples_quantile_us(struct bench_samples *s, double q);

/* --- repetitions --------------------------------------------------------- */

/* Median, min and max of @n doubles (sorts a copy). */
struct bench_mmm {
	double med, min, max;
};
struct bench_mmm bench_median(const double *v, int n);

/* --- output ---------------------------------------------------------------- */

/* Progress line on stderr (unless --quiet); printf-style. */
void bench_progress(const struct bench_opts *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A JSON line is built field by field into a fixed buffer, then printed. */
struct bench_json {
	char buf[2048];
	size_t len;
};
void bench_json_begin(struct bench_json *j, const char *bench);
void bench_json_str(struct bench_json *j, const char *key, const char *val);
void bench_json_int(struct bench_json *j, const char *key, long long val);
void bench_json_num(struct bench_json *j, const char *key, double val);
void bench_json_end(struct bench_json *j); /* prints the line on stdout */

/* Machine description for the header of the readable tables. */
void bench_print_header(const struct bench_opts *o, const char *bench);

/* connect/scale configurations (--impl): which index the CM tables use,
 * at libcep's default size or presized (a bucket per connection of the
 * run), and the RCU flavour of the CM workers. */
struct bench_cm_cfg {
	const char *name;
	int index;     /* CEP_TABLE_INDEX_* */
	int presized;
	int qsbr;      /* CM workers as urcu-qsbr threads (else urcu-memb) */
};
#define BENCH_MAX_CM_CFG 8
/* Fills @cfg from --impl (or @defaults, a comma-separated list, if none
 * was given); returns how many, or -1 on an unknown name. */
int bench_cm_impls(const struct bench_opts *o, const char *defaults,
		   struct bench_cm_cfg cfg[BENCH_MAX_CM_CFG]);
/* The names bench_cm_impls knows, for usage lines. */
extern const char bench_cm_impl_names[];

/* Subcommands. Return a process exit status. */
int bench_table(const struct bench_opts *o);
int bench_connect(const struct bench_opts *o);
int bench_dispatch(const struct bench_opts *o);
int bench_dispatch_queues(const struct bench_opts *o); /* queue.c */
int bench_scale(const struct bench_opts *o);
int bench_memlat(const struct bench_opts *o);

#endif /* CEP_BENCH_H */
