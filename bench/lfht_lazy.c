/* SPDX-License-Identifier: MIT */
/*
 * cep-lfht-lazy: why liburcu 0.13's lazy resize (CDS_LFHT_AUTO_RESIZE |
 * CDS_LFHT_ACCOUNTING) left libcep's 1,000,000-entry comm-ID index at a
 * few thousand buckets. A diagnostic, not a benchmark: it fills a table
 * created as libcep created its indexes before issue 12, one thread, and
 * prints the table's private state (size, resize_target, resize_initiated,
 * count: liburcu 0.13.2's struct cds_lfht on x86_64, offsets checked at
 * start) at every power of two.
 *
 * Two things show. (1) Even when it works, liburcu grows only when its
 * committed count (in steps of 1024 per CPU, src/rculfhash.c ht_count_add)
 * lands on a power of 2 of at least 8 entries per bucket: chains reach 8.
 * (2) __cds_lfht_resize_lazy_launch queues the resize work, wakes the
 * worker, and only then stores resize_initiated = 1. If the launching
 * thread is preempted right after the wake-up and the worker completes the
 * resize (which clears the flag) before that store, the flag stays 1 with
 * no work queued, and every later launch sees "already initiated": the
 * table never resizes again. On a loaded 2-CPU machine the waker is often
 * preempted by the thread it woke. --stall N makes it deterministic: the
 * program's own syscall() (which liburcu's futex wake calls, resolved to
 * the executable's definition) sleeps N ms after a FUTEX_WAKE issued from
 * inside cds_lfht_add_unique, standing in for that preemption.
 * usage: cep-lfht-lazy [--stall MS] [--entries N]
 */
#include <dlfcn.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

#include "bench.h"

/* liburcu 0.13.2 src/rculfhash-internal.h, struct cds_lfht, x86_64. */
#define OFF_COUNT 24
#define OFF_RESIZE_TARGET 88
#define OFF_RESIZE_INITIATED 96
#define OFF_SIZE 128

#define FIELD(ht, type, off) (*(volatile type *)((char *)(ht) + (off)))

static __thread int in_add;
static long stall_ms;
static int stalls;

/* liburcu wakes its resize worker with syscall(SYS_futex, ..., FUTEX_WAKE). */
long syscall(long nr, ...)
{
	static long (*real)(long, ...);
	long a[6];
	va_list ap;
	long ret;

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "syscall"); /* POSIX's idiom */
	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	ret = real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (nr == SYS_futex && (a[1] & FUTEX_CMD_MASK) == FUTEX_WAKE && in_add && stall_ms) {
		struct timespec ts = { stall_ms / 1000, (stall_ms % 1000) * 1000000 };

		stalls++;
		nanosleep(&ts, NULL); /* the launcher, preempted after its wake-up */
	}
	return ret;
}

struct ent {
	struct cds_lfht_node node;
	uint64_t key;
};

static int match(struct cds_lfht_node *n, const void *key)
{
	return caa_container_of(n, struct ent, node)->key == *(const uint64_t *)key;
}

static uint64_t hash(uint64_t k)
{
	k += 0x9e3779b97f4a7c15ull;
	k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
	k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
	return k ^ (k >> 31);
}

/* Mean ns of lookups of absent keys: a walk of the chain a bucket holds. */
static double miss_ns(struct cds_lfht *ht, uint64_t base)
{
	uint64_t t0 = bench_now_ns();
	unsigned n = 20000;

	for (unsigned i = 0; i < n; i++) {
		struct cds_lfht_iter it;
		uint64_t k = base + i;

		urcu_memb_read_lock();
		cds_lfht_lookup(ht, hash(k), match, &k, &it);
		urcu_memb_read_unlock();
	}
	return (double)(bench_now_ns() - t0) / n;
}

int main(int argc, char **argv)
{
	unsigned long n = 1000000, next = 1024;
	struct cds_lfht *ht;
	struct ent *e;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--stall") && i + 1 < argc)
			stall_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--entries") && i + 1 < argc)
			n = strtoul(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "usage: cep-lfht-lazy [--stall MS] [--entries N]\n");
			return 2;
		}
	}
	e = calloc(n, sizeof(*e));
	if (!e)
		return 1;
	urcu_memb_register_thread();
	ht = cds_lfht_new_flavor(1024, 64, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
				 &urcu_memb_flavor, NULL);
	if (!ht || FIELD(ht, unsigned long, OFF_SIZE) != 1024 ||
	    FIELD(ht, unsigned long, OFF_RESIZE_TARGET) != 1024 ||
	    FIELD(ht, int, OFF_RESIZE_INITIATED) != 0) {
		fprintf(stderr, "cep-lfht-lazy: struct cds_lfht is not liburcu 0.13.2's layout\n");
		return 1;
	}
	printf("# liburcu rculfhash, 1024 initial buckets, AUTO_RESIZE|ACCOUNTING, 1 thread; "
	       "stall after the resize wake-up: %ld ms\n", stall_ms);
	printf("%10s %10s %14s %16s %10s %13s\n", "entries", "buckets", "resize_target",
	       "resize_initiated", "count", "miss walk ns");
	for (unsigned long i = 0; i < n; i++) {
		e[i].key = i;
		cds_lfht_node_init(&e[i].node);
		urcu_memb_read_lock();
		in_add = 1;
		cds_lfht_add_unique(ht, hash(i), match, &e[i].key, &e[i].node);
		in_add = 0;
		urcu_memb_read_unlock();
		if (i + 1 == next || i + 1 == n) {
			struct timespec ts = { 0, 50000000 };

			nanosleep(&ts, NULL); /* a lazy resize in flight lands */
			printf("%10lu %10lu %14lu %16d %10ld %13.0f\n", i + 1,
			       FIELD(ht, unsigned long, OFF_SIZE),
			       FIELD(ht, unsigned long, OFF_RESIZE_TARGET),
			       FIELD(ht, int, OFF_RESIZE_INITIATED), FIELD(ht, long, OFF_COUNT),
			       miss_ns(ht, 1ull << 40));
			next *= 2;
		}
	}
	printf("# %d stall(s); a table whose resize_target exceeds its size with "
	       "resize_initiated = 1 and nothing queued never resizes again\n", stalls);
	return 0;
}
