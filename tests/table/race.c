/* SPDX-License-Identifier: MIT */
/*
 * Concurrent test of the core: threads race bind / unbind / QP destroy /
 * unregister / re-register / lookup / cep_destroy on a small shared set of
 * QPNs, then the invariant checker runs after quiescence. Run under TSan
 * and ASan by the test command. Usage: race [seconds] [threads] [seed]
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cep/table.h>

#include "../common/check.h"

#define NQP 8

static struct cep_table *table;
static atomic_bool stop;
static _Atomic uint64_t n_bind, n_bind_ok, n_teardown, n_lookup_hit;
static _Atomic uint32_t published[64]; /* comm IDs for lookups */

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void teardown(struct cep *cep, void *ctx)
{
	(void)ctx;
	atomic_fetch_add(&n_teardown, 1);
	cep_destroy(cep);
}

struct worker {
	pthread_t th;
	uint64_t seed;
	int id;
};

static void *run(void *arg)
{
	struct worker *w = arg;
	uint64_t s = w->seed;
	struct cep *mine = NULL;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		uint64_t r = xorshift(&s);
		uint32_t qpn = 0x100 + (uint32_t)(r % NQP);
		struct cep *x;
		int ret;

		switch ((r >> 8) % 8) {
		case 0: case 1: case 2: /* bind a fresh CEP */
			if (!mine) {
				CHECK_EQ(cep_create(table, NULL, &mine), 0);
				published[(r >> 16) % 64] = cep_local_comm_id(mine);
			}
			atomic_fetch_add(&n_bind, 1);
			ret = cep_bind(mine, qpn);
			if (ret == 0) {
				atomic_fetch_add(&n_bind_ok, 1);
				/* Bound: the word names us, unless a destroy raced. */
			} else {
				CHECK(ret == -EISCONN || ret == -ESHUTDOWN || ret == -ENOENT ||
				      ret == -ESTALE || ret == -EALREADY);
			}
			if (ret != -EALREADY && ret != -EISCONN && ret != -ENOENT) {
				cep_put(mine);
				mine = NULL;
			}
			break;
		case 3: /* QP destruction begins, then (maybe) re-register */
			ret = cep_qp_destroy_begin(table, qpn, NULL);
			CHECK(ret == 0 || ret == -ENOENT);
			if ((r >> 20) & 1) {
				ret = cep_qp_unregister(table, qpn);
				CHECK(ret == 0 || ret == -ENOENT || ret == -EBUSY);
				ret = cep_qp_register(table, qpn);
				CHECK(ret == 0 || ret == -EEXIST);
			}
			break;
		case 4: /* lookups by QPN and by comm ID */
			if (cep_lookup_qpn(table, qpn, &x) == 0) {
				uint32_t q;

				atomic_fetch_add(&n_lookup_hit, 1);
				/* A CEP found by QPN was bound to it. */
				CHECK(cep_bound_qpn(x, &q) != 0 || q == qpn);
				cep_put(x);
			}
			if (cep_lookup_comm_id(table, published[(r >> 16) % 64], &x) == 0)
				cep_put(x);
			break;
		case 5: /* unbind or destroy what we hold */
			if (mine) {
				if ((r >> 20) & 1)
					cep_unbind(mine);
				cep_destroy(mine);
				cep_put(mine);
				mine = NULL;
			}
			break;
		case 6: /* destroy whatever a QP holds, via lookup */
			if (cep_lookup_qpn(table, qpn, &x) == 0) {
				/* Unbind first half the time: QP kept, CEP freed. */
				if ((r >> 20) & 1)
					cep_unbind(x);
				cep_destroy(x);
				cep_put(x);
			}
			break;
		default:
			if (!mine)
				CHECK_EQ(cep_create(table, NULL, &mine), 0);
			break;
		}
	}
	if (mine) {
		cep_destroy(mine);
		cep_put(mine);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2.0;
	int nthreads = argc > 2 ? atoi(argv[2]) : 4;
	uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : (uint64_t)time(NULL);
	struct cep_table_attr a = { .size = sizeof(a), .teardown = teardown, .initial_size = 16 };
	struct worker w[16];
	struct timespec ts;
	char msg[1024];
	struct cep_table_stats st;
	int r;

	if (nthreads < 1 || nthreads > 16)
		nthreads = 4;
	printf("race: %.1f s, %d threads, seed %llu\n", secs, nthreads, (unsigned long long)seed);
	CHECK_EQ(cep_table_create(&a, &table), 0);
	for (uint32_t q = 0; q < NQP; q++)
		CHECK_EQ(cep_qp_register(table, 0x100 + q), 0);
	for (int i = 0; i < nthreads; i++) {
		w[i].seed = seed * 2654435761u + (uint64_t)i * 0x9e3779b97f4a7c15ull + 1;
		w[i].id = i;
		pthread_create(&w[i].th, NULL, run, &w[i]);
	}
	ts.tv_sec = (time_t)secs;
	ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
	nanosleep(&ts, NULL);
	atomic_store(&stop, true);
	for (int i = 0; i < nthreads; i++)
		pthread_join(w[i].th, NULL);

	r = cep_table_check(table, msg, sizeof(msg));
	if (r)
		fprintf(stderr, "invariants violated: %s\n", msg);
	CHECK_EQ(r, 0);
	cep_table_stats(table, &st);
	printf("race: binds %llu (ok %llu), teardowns %llu, lookup hits %llu, "
	       "allocated %llu freed %llu live %llu\n",
	       (unsigned long long)n_bind, (unsigned long long)n_bind_ok,
	       (unsigned long long)n_teardown, (unsigned long long)n_lookup_hit,
	       (unsigned long long)st.allocated, (unsigned long long)st.freed,
	       (unsigned long long)st.live);
	CHECK(n_bind_ok > 0);
	CHECK(n_teardown > 0);
	/* Every QP: INVALID, RESERVED or a live CEP's CID (checker), and
	 * after tearing all QPs down nothing is left but RESERVED words. */
	for (uint32_t q = 0; q < NQP; q++) {
		uint32_t b;

		if (cep_qp_binding(table, 0x100 + q, &b) == 0)
			cep_qp_destroy_begin(table, 0x100 + q, NULL);
	}
	r = cep_table_check(table, msg, sizeof(msg));
	CHECK_EQ(r, 0);
	CHECK_EQ(cep_table_destroy(table), 0);
	return check_done("race");
}
