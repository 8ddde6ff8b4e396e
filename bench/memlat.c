/* SPDX-License-Identifier: MIT */
/*
 * cep-bench memlat: the machine's dependent-load latency against the
 * working set, with 4 KiB pages and with memory advised for huge pages
 * (MADV_HUGEPAGE). A lookup in a big table is a chain of such loads
 * (slot or bucket, then object), so this is the physical limit the table
 * and scale figures are read against. One cache line per element, a random
 * cyclic permutation, each load's address from the previous one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

#define LINE 64

static double chase_ns(size_t bytes, int huge, uint64_t *rng, uint64_t steps)
{
	size_t n = bytes / LINE, len = (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
	uint64_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t *perm;
	uint64_t p = 0, t0;

	if (a == MAP_FAILED)
		return -1;
	if (huge)
		(void)madvise(a, len, MADV_HUGEPAGE);
	else
		(void)madvise(a, len, MADV_NOHUGEPAGE);
	perm = malloc(n * sizeof(*perm));
	if (!perm) {
		munmap(a, len);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		perm[i] = (uint32_t)i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = bench_rand_below(rng, (uint32_t)(i + 1));
		uint32_t t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (size_t i = 0; i < n; i++)
		a[(size_t)perm[i] * (LINE / 8)] = (uint64_t)perm[(i + 1) % n] * (LINE / 8);
	free(perm);
	for (uint64_t i = 0; i < n && i < steps; i++) /* warm the TLB and caches alike */
		p = a[p];
	t0 = bench_now_ns();
	for (uint64_t i = 0; i < steps; i++)
		p = a[p];
	t0 = bench_now_ns() - t0;
	*(volatile uint64_t *)&a[0] = p; /* keep the chain */
	munmap(a, len);
	return (double)t0 / (double)steps;
}

int bench_memlat(const struct bench_opts *o)
{
	static const size_t mib[] = { 1, 4, 8, 16, 32, 64, 128, 256, 512 };
	size_t nsz = o->quick ? 3 : sizeof(mib) / sizeof(mib[0]);
	uint64_t rng = o->seed, steps = o->quick ? 100000 : 2000000;

	if (!o->json)
		printf("# dependent-load latency, one 64-byte line per element, random cycle; "
		       "median of %d\n%10s %14s %14s\n", o->reps, "MiB", "4K pages ns", "huge pages ns");
	for (size_t i = 0; i < nsz; i++) {
		double v[2][1000];
		struct bench_mmm m[2];

		for (int rep = 0; rep < o->reps && rep < 1000; rep++)
			for (int h = 0; h < 2; h++) {
				v[h][rep] = chase_ns(mib[i] << 20, h, &rng, steps);
				if (v[h][rep] < 0) {
					fprintf(stderr, "cep-bench: memlat: no memory for %zu MiB\n", mib[i]);
					return 1;
				}
			}
		for (int h = 0; h < 2; h++)
			m[h] = bench_median(v[h], o->reps > 1000 ? 1000 : o->reps);
		if (o->json) {
			struct bench_json j;

			bench_json_begin(&j, "memlat");
			bench_json_int(&j, "mib", (long long)mib[i]);
			bench_json_num(&j, "ns_4k", m[0].med);
			bench_json_num(&j, "ns_huge", m[1].med);
			bench_json_int(&j, "reps", o->reps);
			bench_json_end(&j);
		} else {
			printf("%10zu %14.1f %14.1f\n", mib[i], m[0].med, m[1].med);
		}
		bench_progress(o, "memlat %zu MiB: %.1f ns (4K), %.1f ns (huge)", mib[i], m[0].med,
			       m[1].med);
	}
	return 0;
}
