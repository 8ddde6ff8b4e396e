/* SPDX-License-Identifier: MIT */
/*
 * A ck index grown to maps of 2 MiB and more, the path of index_ck.c that
 * maps them itself with the slots on a 2 MiB boundary (issue 26). Its
 * block header was placed at the slots' address minus ck's map struct, so
 * it was 16-byte aligned only if that struct's size was a multiple of 16:
 * under UBSan every grow past 2 MiB stored to a misaligned struct ck_block.
 * The listener index has one shard, so 40,000 listeners grow one map past
 * 65,536 slots (past 50% load at 32,768: 131,072 slots of 16 bytes); every
 * listener is still found, and every map is freed on the way down.
 * Meant for the ASan + UBSan build, where the misaligned access is the
 * failure; the other builds check the lookups and the sizes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cep/table.h>

#include "core/table_internal.h"
#include "core/table_keys.h"
#include "../common/check.h"

#define N 40000u
#define SID(i) (0x1000000ull + (i))

int main(void)
{
	struct cep_table_attr a = { .size = sizeof(a), .index = CEP_TABLE_INDEX_CK };
	struct cep **ceps = calloc(N, sizeof(*ceps));
	struct cep_table *t;
	size_t slots, count;
	char msg[512];

	CHECK(ceps != NULL);
	if (!ceps)
		return 1;
	CHECK_EQ(cep_table_create(&a, &t), 0);
	CHECK(!strcmp(cep_table_index_name(t), "ck_rhs"));
	for (uint32_t i = 0; i < N; i++) {
		CHECK_EQ(cep_create(t, NULL, &ceps[i]), 0);
		CHECK_EQ(cep_insert_listener(ceps[i], SID(i), ~0ull, NULL), 0);
	}
	CHECK_EQ(cep_table_index_info(t, CEP_TABLE_IX_LISTEN, &slots, &count), 0);
	printf("huge-map: %zu listeners in one shard of %zu slots (%zu KiB)\n", count, slots,
	       slots * 16 / 1024);
	CHECK_EQ(count, N);
	CHECK(slots * 16 >= (2u << 20)); /* the huge-map path */
	for (uint32_t i = 0; i < N; i += 7) {
		struct cep *x = NULL;

		CHECK_EQ(cep_lookup_listener(t, SID(i), &x), 0);
		CHECK(x == ceps[i]);
		if (x)
			cep_put(x);
	}
	/* Down again: each shrink frees a huge map after a grace period. */
	for (uint32_t i = 0; i < N; i++) {
		CHECK_EQ(cep_remove_listener(ceps[i]), 0);
		CHECK_EQ(cep_destroy(ceps[i]), 0);
		cep_put(ceps[i]);
	}
	CHECK_EQ(cep_table_index_info(t, CEP_TABLE_IX_LISTEN, &slots, &count), 0);
	CHECK_EQ(count, 0);
	if (cep_table_check(t, msg, sizeof(msg))) {
		fprintf(stderr, "invariants: %s\n", msg);
		check_failures++;
	}
	CHECK_EQ(cep_table_destroy(t), 0);
	free(ceps);
	return check_done("huge-map");
}
