/* SPDX-License-Identifier: MIT */
/*
 * cep-bench: runs the same work through libcep and through the designs it
 * replaces, in one process, and prints medians of several repetitions.
 * Usage: cep-bench table|connect|dispatch|scale [options]; see usage().
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cep/table.h>

#include "bench.h"
#include "sa_path.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cep-bench SUBCOMMAND [options]\n"
		"subcommands:\n"
		"  table     lookups/inserts/deletes on the CEP table vs baselines\n"
		"            (global mutex map, rwlock map, raw rculfhash)\n"
		"  connect   connection storms through the CM on the in-process fabric\n"
		"  dispatch  MADs/s through receive -> queue -> worker -> lookup -> handler\n"
		"  scale     bytes per CEP, lookup latency and connect rate vs live CEPs\n"
		"  memlat    the machine's dependent-load latency vs working set (4K / huge pages)\n"
		"options:\n"
		"  --json              one JSON object per line on stdout instead of a table\n"
		"  --reps N            repetitions per row (median reported; default 5)\n"
		"  --duration S        seconds per repetition (default 1.0)\n"
		"  --threads LIST      thread/worker counts, e.g. 1,2 (default 1,2)\n"
		"  --workers LIST      same as --threads\n"
		"  --mix LIST          table: L/I/D percentages, suffix -miss for lookups\n"
		"                      of absent IDs (default 100/0/0,100/0/0-miss,90/5/5,50/25/25)\n"
		"  --impl LIST         table: libcep-ck,libcep-rculfhash (libcep on each index),\n"
		"                      rculfhash,ck_rhs,ck_ht (raw indexes), rwlock,mutex\n"
		"                      (locked maps); default all;\n"
		"                      connect/scale: libcep-ck, libcep-rculfhash (CM tables on\n"
		"                      that index at libcep's default size), -presized (a\n"
		"                      bucket per connection), -qsbr (CM workers as urcu-qsbr\n"
		"                      threads, run as a child process: the flavour is\n"
		"                      process-wide); default: connect all but\n"
		"                      libcep-rculfhash-qsbr, scale libcep-ck,libcep-ck-presized\n"
		"  --size N            table: live entries preloaded (default 1000000)\n"
		"  --initial-buckets N table: buckets every impl starts with, a power of 2\n"
		"                      (default: the smallest >= --size, so none must grow)\n"
		"  --sizes LIST        scale: live CEP counts (default 1000,10000,100000,1000000)\n"
		"  --conns N           connect/scale: connections per storm\n"
		"                      (default 100000 x duration; scale: 10000)\n"
		"  --window N          connect/scale: connections in flight (default 128)\n"
		"  --seed N            PRNG seed (default from the clock)\n"
		"  --quick             smoke-test sizes: 1 rep, short runs, small tables\n"
		"  --quiet             no progress on stderr\n"
		"  --sa CA:PORT        connect: the path of every connection from the subnet\n"
		"  --sa-dest LID|GID   administrator of that InfiniBand port (CA empty: the\n"
		"                      default), asked once for the path to --sa-dest; the\n"
		"                      nodes take its LIDs and GIDs, each REQ its path and\n"
		"                      packet life time; the MADs stay on the in-process fabric\n");
}

static int parse_long_list(const char *s, long *out, int max, long lo, long hi)
{
	int n = 0;
	char *end;

	while (*s) {
		long v;

		if (n == max)
			return -E2BIG;
		errno = 0;
		v = strtol(s, &end, 10);
		if (errno || end == s || v < lo || v > hi)
			return -EINVAL;
		out[n++] = v;
		if (*end == ',')
			end++;
		else if (*end)
			return -EINVAL;
		s = end;
	}
	return n ? n : -EINVAL;
}

static int parse_str_list(const char *s, char out[][32], int max)
{
	int n = 0;

	while (*s) {
		size_t len = strcspn(s, ",");

		if (n == max || len == 0 || len >= 32)
			return -EINVAL;
		memcpy(out[n], s, len);
		out[n][len] = '\0';
		n++;
		s += len;
		if (*s == ',')
			s++;
	}
	return n ? n : -EINVAL;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	const char *cmd;
	int i, reps_set = 0, dur_set = 0, size_set = 0, sizes_set = 0;

	memset(&o, 0, sizeof(o));
	o.reps = 5;
	o.duration = 1.0;
	o.nthreads = 2;
	o.threads[0] = 1;
	o.threads[1] = 2;
	o.size = 1000000;
	o.window = 128;
	o.seed = bench_now_ns();

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	cmd = argv[1];
	for (i = 2; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		long tmp[BENCH_MAX_LIST];
		int n;

		if (!strcmp(a, "--json")) {
			o.json = 1;
			continue;
		}
		if (!strcmp(a, "--quick")) {
			o.quick = 1;
			continue;
		}
		if (!strcmp(a, "--quiet")) {
			o.quiet = 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!v) {
			fprintf(stderr, "cep-bench: %s: missing value or unknown option\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--reps")) {
			n = parse_long_list(v, tmp, 1, 1, 1000);
			if (n != 1)
				goto bad;
			o.reps = (int)tmp[0];
			reps_set = 1;
		} else if (!strcmp(a, "--duration")) {
			char *end;

			o.duration = strtod(v, &end);
			if (*end || !(o.duration > 0.0) || o.duration > 3600.0)
				goto bad;
			dur_set = 1;
		} else if (!strcmp(a, "--threads") || !strcmp(a, "--workers")) {
			n = parse_long_list(v, tmp, BENCH_MAX_LIST, 1, 1024);
			if (n < 0)
				goto bad;
			o.nthreads = n;
			for (int k = 0; k < n; k++)
				o.threads[k] = (int)tmp[k];
		} else if (!strcmp(a, "--mix")) {
			n = parse_str_list(v, o.mix, BENCH_MAX_LIST);
			if (n < 0)
				goto bad;
			o.nmix = n;
		} else if (!strcmp(a, "--impl")) {
			n = parse_str_list(v, o.impl, BENCH_MAX_LIST);
			if (n < 0)
				goto bad;
			o.nimpl = n;
		} else if (!strcmp(a, "--size")) {
			n = parse_long_list(v, tmp, 1, 1, 100000000);
			if (n != 1)
				goto bad;
			o.size = tmp[0];
			size_set = 1;
		} else if (!strcmp(a, "--initial-buckets")) {
			n = parse_long_list(v, tmp, 1, 1, 1L << 30);
			if (n != 1 || (tmp[0] & (tmp[0] - 1)))
				goto bad;
			o.initial_buckets = tmp[0];
		} else if (!strcmp(a, "--sizes")) {
			n = parse_long_list(v, o.sizes, BENCH_MAX_LIST, 1, 100000000);
			if (n < 0)
				goto bad;
			o.nsizes = n;
			sizes_set = 1;
		} else if (!strcmp(a, "--conns")) {
			n = parse_long_list(v, tmp, 1, 1, 10000000);
			if (n != 1)
				goto bad;
			o.conns = tmp[0];
		} else if (!strcmp(a, "--window")) {
			n = parse_long_list(v, tmp, 1, 1, 1000000);
			if (n != 1)
				goto bad;
			o.window = (int)tmp[0];
		} else if (!strcmp(a, "--sa")) {
			o.sa_port = v;
		} else if (!strcmp(a, "--sa-dest")) {
			o.sa_dest = v;
		} else if (!strcmp(a, "--seed")) {
			char *end;

			o.seed = strtoull(v, &end, 0);
			if (*end)
				goto bad;
		} else {
			fprintf(stderr, "cep-bench: unknown option %s\n", a);
			return 2;
		}
		continue;
bad:
		fprintf(stderr, "cep-bench: bad value for %s: '%s'\n", a, v);
		return 2;
	}
	if (o.quick) {
		if (!reps_set)
			o.reps = 1;
		if (!dur_set)
			o.duration = 0.03;
		if (!size_set)
			o.size = 5000;
		if (!sizes_set) {
			o.nsizes = 2;
			o.sizes[0] = 1000;
			o.sizes[1] = 10000;
		}
	}
	if (!o.nsizes) {
		o.nsizes = 4;
		o.sizes[0] = 1000;
		o.sizes[1] = 10000;
		o.sizes[2] = 100000;
		o.sizes[3] = 1000000;
	}

	if (!strcmp(cmd, "table"))
		return bench_table(&o);
	if (!strcmp(cmd, "connect")) {
		static struct cep_sa_path rec;
		struct sa_path_opt sa_opt;
		char why[256];

		if (o.sa_port || o.sa_dest) {
			if (sa_path_parse(o.sa_port, o.sa_dest, &sa_opt)) {
				fprintf(stderr, "cep-bench: --sa CA:PORT and --sa-dest LID|GID go together\n");
				return 2;
			}
			if (sa_path_fetch(&sa_opt, &rec, why, sizeof(why))) {
				fprintf(stderr, "cep-bench: --sa: %s\n", why);
				return 1;
			}
			o.sa_path = &rec;
			if (!o.quiet)
				sa_path_print(stderr, "cep-bench", &sa_opt, &rec);
		}
		return bench_connect(&o);
	}
	if (!strcmp(cmd, "dispatch"))
		return bench_dispatch(&o);
	if (!strcmp(cmd, "scale"))
		return bench_scale(&o);
	if (!strcmp(cmd, "memlat"))
		return bench_memlat(&o);
	fprintf(stderr, "cep-bench: unknown subcommand '%s'\n", cmd);
	usage(stderr);
	return 2;
}

/* --- helpers declared in bench.h ------------------------------------------ */

void bench_sleep_s(double s)
{
	struct timespec ts;

	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

int bench_samples_init(struct bench_samples *s, size_t cap)
{
	s->n = 0;
	s->cap = cap;
	s->ns = cap ? malloc(cap * sizeof(*s->ns)) : NULL;
	return cap && !s->ns ? -ENOMEM : 0;
}

void bench_samples_fini(struct bench_samples *s)
{
	free(s->ns);
	s->ns = NULL;
	s->n = s->cap = 0;
}

int bench_samples_merge(struct bench_samples *dst, const struct bench_samples *src)
{
	if (dst->n + src->n > dst->cap) {
		size_t cap = dst->n + src->n;
		uint32_t *p = realloc(dst->ns, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		dst->ns = p;
		dst->cap = cap;
	}
	memcpy(dst->ns + dst->n, src->ns, src->n * sizeof(*src->ns));
	dst->n += src->n;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_samples_quantile_us(struct bench_samples *s, double q)
{
	size_t idx;

	if (!s->n)
		return 0.0;
	qsort(s->ns, s->n, sizeof(*s->ns), cmp_u32);
	idx = (size_t)ceil(q * (double)s->n);
	idx = idx ? idx - 1 : 0; /* nearest-rank definition */
	if (idx >= s->n)
		idx = s->n - 1;
	return s->ns[idx] / 1000.0;
}

struct bench_mmm bench_median(const double *v, int n)
{
	struct bench_mmm r = { 0, 0, 0 };
	double tmp[1000];

	if (n <= 0)
		return r;
	if (n > 1000)
		n = 1000;
	memcpy(tmp, v, (size_t)n * sizeof(*v));
	qsort(tmp, (size_t)n, sizeof(*tmp), cmp_dbl);
	r.min = tmp[0];
	r.max = tmp[n - 1];
	r.med = n & 1 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2.0;
	return r;
}

void bench_progress(const struct bench_opts *o, const char *fmt, ...)
{
	va_list ap;

	if (o->quiet)
		return;
	va_start(ap, fmt);
	fputs("cep-bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void json_raw(struct bench_json *j, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void json_raw(struct bench_json *j, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (j->len >= sizeof(j->buf))
		return;
	va_start(ap, fmt);
	n = vsnprintf(j->buf + j->len, sizeof(j->buf) - j->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		j->len += (size_t)n;
}

/* Keys and values here are ours (impl names, mixes): no escaping beyond
 * refusing the two characters that would break the line. */
static void json_key(struct bench_json *j, const char *key)
{
	json_raw(j, "%s\"%s\": ", j->len > 1 ? ", " : "", key);
}

void bench_json_begin(struct bench_json *j, const char *bench)
{
	j->len = 0;
	json_raw(j, "{");
	bench_json_str(j, "bench", bench);
}

void bench_json_str(struct bench_json *j, const char *key, const char *val)
{
	json_key(j, key);
	json_raw(j, "\"");
	for (; *val; val++)
		json_raw(j, "%c", (*val == '"' || *val == '\\') ? '_' : *val);
	json_raw(j, "\"");
}

void bench_json_int(struct bench_json *j, const char *key, long long val)
{
	json_key(j, key);
	json_raw(j, "%lld", val);
}

void bench_json_num(struct bench_json *j, const char *key, double val)
{
	json_key(j, key);
	if (isfinite(val))
		json_raw(j, "%.6g", val);
	else
		json_raw(j, "null");
}

void bench_json_end(struct bench_json *j)
{
	json_raw(j, "}");
	fputs(j->buf, stdout);
	fputc('\n', stdout);
	fflush(stdout);
}

void bench_print_header(const struct bench_opts *o, const char *bench)
{
	struct utsname u;

	if (o->json)
		return;
	uname(&u);
	printf("# cep-bench %s: %s %s, %ld online CPUs; %d rep(s) x %.2f s, median [min..max]\n",
	       bench, u.sysname, u.release, sysconf(_SC_NPROCESSORS_ONLN), o->reps,
	       o->duration);
}

static const struct bench_cm_cfg cm_cfgs[] = {
	{ "libcep-ck", CEP_TABLE_INDEX_CK, 0, 0 },
	{ "libcep-ck-presized", CEP_TABLE_INDEX_CK, 1, 0 },
	{ "libcep-rculfhash", CEP_TABLE_INDEX_RCULFHASH, 0, 0 },
	{ "libcep-rculfhash-presized", CEP_TABLE_INDEX_RCULFHASH, 1, 0 },
	{ "libcep-ck-qsbr", CEP_TABLE_INDEX_CK, 0, 1 },
	{ "libcep-rculfhash-qsbr", CEP_TABLE_INDEX_RCULFHASH, 0, 1 },
};

const char bench_cm_impl_names[] =
	"libcep-ck, libcep-ck-presized, libcep-rculfhash, libcep-rculfhash-presized, "
	"libcep-ck-qsbr, libcep-rculfhash-qsbr";

int bench_cm_impls(const struct bench_opts *o, const char *defaults,
		   struct bench_cm_cfg cfg[BENCH_MAX_CM_CFG])
{
	char names[BENCH_MAX_LIST][32];
	int n = o->nimpl, k;

	if (n)
		memcpy(names, o->impl, sizeof(names));
	else
		n = parse_str_list(defaults, names, BENCH_MAX_LIST);
	if (n < 0 || n > BENCH_MAX_CM_CFG)
		return -1;
	for (k = 0; k < n; k++) {
		size_t j;

		for (j = 0; j < sizeof(cm_cfgs) / sizeof(cm_cfgs[0]); j++)
			if (!strcmp(names[k], cm_cfgs[j].name))
				break;
		if (j == sizeof(cm_cfgs) / sizeof(cm_cfgs[0]))
			return -1;
		for (int d = 0; d < k; d++)
			if (cfg[d].name == cm_cfgs[j].name)
				return -1; /* twice */
		cfg[k] = cm_cfgs[j];
	}
	return n;
}
