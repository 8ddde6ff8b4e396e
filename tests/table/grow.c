/* SPDX-License-Identifier: MIT */
/*
 * Default tables size themselves (issue 12): with no size given, every
 * index's bucket (or slot) count follows its live count, up while CEPs and
 * keys are added and down when they go, with each index implementation.
 * The bound is the one a presized table has, a bucket or more per entry;
 * liburcu 0.13's own lazy resize held 1,000,000 comm IDs in 1,024 buckets
 * (docs/benchmarks.md), and even when it runs it lets chains reach 8.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cep/table.h>

#include "core/table_internal.h"
#include "../common/check.h"

#define N (1u << 17)
#define CHECK_SLACK 64 /* rculfhash: writes between two checks of one thread */

static void check_index(struct cep_table *t, int which, const char *impl, const char *when)
{
	size_t buckets, count;

	CHECK_EQ(cep_table_index_info(t, which, &buckets, &count), 0);
	/* Up: never more than one entry per bucket (beyond one check's slack);
	 * not oversized either. Down: back within 16x of the count, or at the
	 * size the table started with. */
	if (count > buckets + CHECK_SLACK || (count >= 1024 && buckets > 8 * count) ||
	    (count < 1024 && buckets > 1024 && buckets > 16 * count)) {
		fprintf(stderr, "%s index %d %s: %zu entries in %zu buckets\n", impl, which, when,
			count, buckets);
		check_failures++;
	}
}

static void run(int index, const char *impl)
{
	struct cep_table_attr a = { .size = sizeof(a), .index = index };
	struct cep **ceps = calloc(N, sizeof(*ceps));
	struct cep_table *t;
	char msg[512];
	size_t buckets0;

	CHECK(ceps != NULL);
	CHECK_EQ(cep_table_create(&a, &t), 0);
	CHECK(!strcmp(cep_table_index_name(t), index == CEP_TABLE_INDEX_CK ? "ck_rhs" : "rculfhash"));
	CHECK_EQ(cep_table_index_info(t, CEP_TABLE_IX_COMM, &buckets0, NULL), 0);
	for (uint32_t i = 0; i < N; i++) {
		CHECK_EQ(cep_create(t, NULL, &ceps[i]), 0);
		CHECK_EQ(cep_insert_remote_id(ceps[i], i, 0x1234, NULL), 0);
		CHECK_EQ(cep_qp_register(t, i), 0);
		if (i + 1 >= 2048 && !((i + 1) & i)) { /* every power of 2 */
			check_index(t, CEP_TABLE_IX_COMM, impl, "growing");
			check_index(t, CEP_TABLE_IX_REMOTE_ID, impl, "growing");
			check_index(t, CEP_TABLE_IX_QPN, impl, "growing");
		}
	}
	{
		size_t b;

		CHECK_EQ(cep_table_index_info(t, CEP_TABLE_IX_COMM, &b, NULL), 0);
		CHECK(b >= N); /* it did grow, from buckets0 */
		CHECK(buckets0 < N);
	}
	/* Every entry is still found after the resizes. */
	for (uint32_t i = 0; i < N; i += 97) {
		struct cep *x;

		CHECK_EQ(cep_lookup_comm_id(t, cep_local_comm_id(ceps[i]), &x), 0);
		CHECK(x == ceps[i]);
		cep_put(x);
		CHECK_EQ(cep_lookup_remote_id(t, i, 0x1234, &x), 0);
		CHECK(x == ceps[i]);
		cep_put(x);
	}
	/* Down to 1 in 64. */
	for (uint32_t i = 0; i < N; i++) {
		if (i % 64 == 0)
			continue;
		CHECK_EQ(cep_destroy(ceps[i]), 0);
		cep_put(ceps[i]);
		ceps[i] = NULL;
		CHECK_EQ(cep_qp_destroy_begin(t, i, NULL), 0);
		CHECK_EQ(cep_qp_unregister(t, i), 0);
	}
	/* rculfhash shrinks only with urcu-memb (index_lfht.c says why). */
	if (index == CEP_TABLE_INDEX_CK || !cep_rcu_qsbr) {
		check_index(t, CEP_TABLE_IX_COMM, impl, "shrunk");
		check_index(t, CEP_TABLE_IX_REMOTE_ID, impl, "shrunk");
		check_index(t, CEP_TABLE_IX_QPN, impl, "shrunk");
	}
	for (uint32_t i = 0; i < N; i += 64) {
		struct cep *x;

		CHECK_EQ(cep_lookup_remote_id(t, i, 0x1234, &x), 0);
		CHECK(x == ceps[i]);
		cep_put(x);
	}
	if (cep_table_check(t, msg, sizeof(msg))) {
		fprintf(stderr, "%s: %s\n", impl, msg);
		check_failures++;
	}
	for (uint32_t i = 0; i < N; i += 64) {
		cep_destroy(ceps[i]);
		cep_put(ceps[i]);
	}
	CHECK_EQ(cep_table_destroy(t), 0);
	free(ceps);
}

int main(void)
{
	run(CEP_TABLE_INDEX_RCULFHASH, "rculfhash");
	run(CEP_TABLE_INDEX_CK, "ck");
	return check_done("grow");
}
