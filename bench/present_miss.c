/* SPDX-License-Identifier: MIT */
/*
 * cep-present-miss: how often a lookup misses a key that is present, with
 * the public table API (and the CM's remote-ID key calls, table_keys.h):
 * the measurement behind issue 17. 200 CEPs (each
 * with a remote-ID key) and 200 QPNs stay in a default table the whole
 * run; reader threads look them up by comm ID, QPN and remote ID while one
 * writer thread creates and destroys other CEPs and registers and
 * unregisters other QPNs. Every lookup is checked. Prints the lookups and
 * misses per kind and the misses per 100 M lookups.
 *
 * Usage: cep-present-miss [--lookups N] [--readers N] [--index default|ck|rculfhash]
 * Exit status 1 if any lookup missed.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cep/table.h>

#include "core/table_keys.h"

enum { PRESENT = 200, CHURN = 64, KINDS = 3 };
#define QPN(i) (0x10000u + (uint32_t)(i))
#define GUID 0x5eed0000cafe0000ull

static struct cep_table *t;
static struct cep *cep[PRESENT];
static uint32_t id[PRESENT];
static atomic_bool stop;
static _Atomic uint64_t done_lookups;
static uint64_t per_reader;
static _Atomic uint64_t misses[KINDS], lookups[KINDS];
static const char *kind_name[KINDS] = { "comm ID", "QPN", "remote ID" };

static uint64_t xs(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *reader(void *arg)
{
	uint64_t rng = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1, n = 0;
	uint64_t miss[KINDS] = { 0 };

	cep_thread_register();
	while (n < per_reader) {
		unsigned i = (unsigned)(xs(&rng) % PRESENT);
		struct cep *c;
		uint32_t b;

		if (cep_lookup_comm_id(t, id[i], &c))
			miss[0]++;
		else
			cep_put(c);
		if (cep_qp_binding(t, QPN(i), &b))
			miss[1]++;
		if (cep_lookup_remote_id(t, (uint32_t)i, GUID, &c))
			miss[2]++;
		else
			cep_put(c);
		n += KINDS;
	}
	for (int k = 0; k < KINDS; k++) {
		atomic_fetch_add(&misses[k], miss[k]);
		atomic_fetch_add(&lookups[k], n / KINDS);
	}
	atomic_fetch_add(&done_lookups, n);
	cep_thread_unregister();
	return NULL;
}

static void *writer(void *arg)
{
	struct cep *mine[CHURN] = { 0 };
	bool qp_on[CHURN] = { 0 };
	uint64_t rng = 0x1234567 + (uintptr_t)arg;

	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		uint64_t x = xs(&rng);
		unsigned j = (unsigned)(x >> 32) % CHURN;

		if ((x >> 20) & 1) {
			if (!mine[j]) {
				if (cep_create(t, NULL, &mine[j]) == 0)
					cep_insert_remote_id(mine[j], (uint32_t)(x >> 40), GUID + 1, NULL);
			} else {
				cep_destroy(mine[j]);
				cep_put(mine[j]);
				mine[j] = NULL;
			}
		} else if (!qp_on[j]) {
			qp_on[j] = cep_qp_register(t, 0x20000u + j) == 0;
		} else {
			cep_qp_destroy_begin(t, 0x20000u + j, NULL);
			cep_qp_unregister(t, 0x20000u + j);
			qp_on[j] = false;
		}
	}
	for (unsigned j = 0; j < CHURN; j++) {
		if (mine[j]) {
			cep_destroy(mine[j]);
			cep_put(mine[j]);
		}
		if (qp_on[j]) {
			cep_qp_destroy_begin(t, 0x20000u + j, NULL);
			cep_qp_unregister(t, 0x20000u + j);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	uint64_t total = 100000000ull, miss = 0;
	int readers = 1;
	struct cep_table_attr a = { .size = sizeof(a) };
	pthread_t w, r[16];
	struct timespec t0, t1;
	double s;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--lookups") && i + 1 < argc)
			total = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--readers") && i + 1 < argc)
			readers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--index") && i + 1 < argc) {
			const char *v = argv[++i];

			a.index = !strcmp(v, "ck") ? CEP_TABLE_INDEX_CK :
				  !strcmp(v, "rculfhash") ? CEP_TABLE_INDEX_RCULFHASH :
				  CEP_TABLE_INDEX_DEFAULT;
		} else {
			fprintf(stderr, "usage: cep-present-miss [--lookups N] [--readers N] "
					"[--index default|ck|rculfhash]\n");
			return 2;
		}
	}
	if (readers < 1 || readers > 16)
		return 2;
	per_reader = total / (uint64_t)readers;
	if (cep_table_create(&a, &t)) {
		fprintf(stderr, "cep_table_create failed\n");
		return 2;
	}
	for (int i = 0; i < PRESENT; i++) {
		if (cep_create(t, NULL, &cep[i]) || cep_qp_register(t, QPN(i)) ||
		    cep_insert_remote_id(cep[i], (uint32_t)i, GUID, NULL)) {
			fprintf(stderr, "setup failed\n");
			return 2;
		}
		id[i] = cep_local_comm_id(cep[i]);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_create(&w, NULL, writer, NULL);
	for (int i = 0; i < readers; i++)
		pthread_create(&r[i], NULL, reader, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < readers; i++)
		pthread_join(r[i], NULL);
	atomic_store(&stop, true);
	pthread_join(w, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("index %s, %d reader(s), %.1f s, %" PRIu64 " lookups of present keys\n",
	       a.index == CEP_TABLE_INDEX_RCULFHASH ? "rculfhash" :
	       a.index == CEP_TABLE_INDEX_CK ? "ck" : "default", readers, s,
	       (uint64_t)done_lookups);
	for (int k = 0; k < KINDS; k++) {
		printf("  %-9s %12" PRIu64 " lookups, %6" PRIu64 " missed\n", kind_name[k],
		       (uint64_t)lookups[k], (uint64_t)misses[k]);
		miss += misses[k];
	}
	printf("misses per 100 M lookups: %.2f\n",
	       done_lookups ? (double)miss * 1e8 / (double)done_lookups : 0.0);
	for (int i = 0; i < PRESENT; i++) {
		cep_destroy(cep[i]);
		cep_put(cep[i]);
		cep_qp_destroy_begin(t, QPN(i), NULL);
		cep_qp_unregister(t, QPN(i));
	}
	cep_table_destroy(t);
	return miss ? 1 : 0;
}
