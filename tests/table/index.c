/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for each index of the CEP table: insert, duplicate insert,
 * lookup, delete, lookup after delete, and resize with 100k entries.
 */
#include <errno.h>
#include <string.h>

#include <cep/table.h>

#include "../common/check.h"
#include "core/table_keys.h"

static void check_clean(struct cep_table *t)
{
	char msg[512];
	int r = cep_table_check(t, msg, sizeof(msg));

	if (r)
		fprintf(stderr, "invariants: %s\n", msg);
	CHECK_EQ(r, 0);
}

static void test_comm_id(void)
{
	struct cep_table *t;
	struct cep *a, *x;
	uint32_t id;
	int ctx;
	struct cep_create_attr ca = { .size = sizeof(ca), .context = &ctx };

	CHECK_EQ(cep_table_create(NULL, &t), 0);
	CHECK_EQ(cep_create(t, &ca, &a), 0);
	id = cep_local_comm_id(a);
	CHECK(id != CEP_BINDING_INVALID && id != CEP_BINDING_RESERVED);
	CHECK(cep_context(a) == &ctx);
	CHECK(cep_table_of(a) == t);
	CHECK_EQ(cep_lookup_comm_id(t, id, &x), 0);
	CHECK(x == a);
	cep_put(x);
	CHECK_EQ(cep_lookup_comm_id(t, id ^ 1, &x), -ENOENT);
	CHECK_EQ(cep_destroy(a), 0);
	CHECK_EQ(cep_lookup_comm_id(t, id, &x), -ENOENT);
	cep_put(a);
	check_clean(t);
	CHECK_EQ(cep_table_destroy(t), 0);
}

static void test_remote_keys(void)
{
	struct cep_table *t;
	struct cep *a, *b, *x, *ex;

	CHECK_EQ(cep_table_create(NULL, &t), 0);
	CHECK_EQ(cep_create(t, NULL, &a), 0);
	CHECK_EQ(cep_create(t, NULL, &b), 0);

	/* (remote comm ID, CA GUID) */
	CHECK_EQ(cep_insert_remote_id(a, 0xabc, 0x1122334455667788ull, &ex), 0);
	CHECK(ex == NULL);
	CHECK_EQ(cep_insert_remote_id(b, 0xabc, 0x1122334455667788ull, &ex), -EEXIST);
	CHECK(ex == a); /* "already exists" hands back the winner */
	cep_put(ex);
	CHECK_EQ(cep_insert_remote_id(a, 0xabd, 1, NULL), -EALREADY);
	CHECK_EQ(cep_insert_remote_id(b, 0xabc, 0x1122334455667789ull, NULL), 0); /* other GUID */
	CHECK_EQ(cep_lookup_remote_id(t, 0xabc, 0x1122334455667788ull, &x), 0);
	CHECK(x == a);
	cep_put(x);
	CHECK_EQ(cep_lookup_remote_id(t, 0xabc, 0x1122334455667789ull, &x), 0);
	CHECK(x == b);
	cep_put(x);
	CHECK_EQ(cep_lookup_remote_id(t, 0xabe, 0x1122334455667788ull, &x), -ENOENT);

	/* (remote QPN, CA GUID) */
	CHECK_EQ(cep_insert_remote_qpn(a, 0x4242, 9, NULL), 0);
	CHECK_EQ(cep_insert_remote_qpn(b, 0x4242, 9, &ex), -EEXIST);
	CHECK(ex == a);
	cep_put(ex);
	CHECK_EQ(cep_insert_remote_qpn(b, 0x1000000, 9, NULL), -EINVAL);
	CHECK_EQ(cep_lookup_remote_qpn(t, 0x4242, 9, &x), 0);
	CHECK(x == a);
	cep_put(x);

	/* Early removal (timewait ended); the key is gone, and the same CEP
	 * may take a key in that index again, as a CM id that connects a
	 * second time does (the kernel lets an id connect again from IDLE). */
	CHECK_EQ(cep_remove_remote_qpn(a), 0);
	CHECK_EQ(cep_remove_remote_qpn(a), -ENOENT);
	CHECK_EQ(cep_lookup_remote_qpn(t, 0x4242, 9, &x), -ENOENT);
	CHECK_EQ(cep_insert_remote_qpn(a, 0x4243, 9, NULL), 0);
	CHECK_EQ(cep_lookup_remote_qpn(t, 0x4243, 9, &x), 0);
	CHECK(x == a);
	cep_put(x);
	CHECK_EQ(cep_remove_remote_qpn(a), 0);
	CHECK_EQ(cep_insert_remote_qpn(a, 0x4242, 9, NULL), 0); /* the same key again */
	CHECK_EQ(cep_remove_remote_qpn(a), 0);
	CHECK_EQ(cep_lookup_remote_qpn(t, 0x4243, 9, &x), -ENOENT);
	CHECK_EQ(cep_insert_remote_qpn(b, 0x4242, 9, NULL), 0);

	/* Destroy removes every key, for good. */
	CHECK_EQ(cep_destroy(a), 0);
	CHECK_EQ(cep_lookup_remote_id(t, 0xabc, 0x1122334455667788ull, &x), -ENOENT);
	CHECK_EQ(cep_insert_remote_id(a, 1, 1, NULL), -ESTALE); /* GONE */
	cep_put(a);
	CHECK_EQ(cep_remove_remote_id(b), 0);
	CHECK_EQ(cep_lookup_remote_id(t, 0xabc, 0x1122334455667789ull, &x), -ENOENT);
	check_clean(t);
	cep_destroy(b);
	cep_put(b);
	CHECK_EQ(cep_table_destroy(t), 0);
}

static void test_listeners(void)
{
	struct cep_table *t;
	struct cep *exact, *prefix, *other, *x, *ex;
	const uint64_t full = ~0ull, top = 0xffffffffffff0000ull;

	CHECK_EQ(cep_table_create(NULL, &t), 0);
	CHECK_EQ(cep_create(t, NULL, &exact), 0);
	CHECK_EQ(cep_create(t, NULL, &prefix), 0);
	CHECK_EQ(cep_create(t, NULL, &other), 0);
	CHECK_EQ(cep_insert_listener(exact, 0x1000000000001234ull, full, NULL), 0);
	CHECK_EQ(cep_insert_listener(prefix, 0x1000000000000000ull, top, NULL), 0);
	CHECK_EQ(cep_insert_listener(other, 0x1000000000001234ull, full, &ex), -EEXIST);
	CHECK(ex == exact);
	cep_put(ex);
	CHECK_EQ(cep_insert_listener(other, 5, 0, NULL), -EINVAL);

	/* The most specific mask wins; the prefix catches the rest. */
	CHECK_EQ(cep_lookup_listener(t, 0x1000000000001234ull, &x), 0);
	CHECK(x == exact);
	cep_put(x);
	CHECK_EQ(cep_lookup_listener(t, 0x100000000000abcdull, &x), 0);
	CHECK(x == prefix);
	cep_put(x);
	CHECK_EQ(cep_lookup_listener(t, 0x2000000000001234ull, &x), -ENOENT);

	/* Unlisten exact: the prefix now takes its service ID too. */
	CHECK_EQ(cep_remove_listener(exact), 0);
	CHECK_EQ(cep_lookup_listener(t, 0x1000000000001234ull, &x), 0);
	CHECK(x == prefix);
	cep_put(x);
	CHECK_EQ(cep_destroy(prefix), 0);
	CHECK_EQ(cep_lookup_listener(t, 0x100000000000abcdull, &x), -ENOENT);
	CHECK_EQ(cep_insert_listener(other, 0x1000000000001234ull, full, NULL), 0);
	CHECK_EQ(cep_lookup_listener(t, 0x1000000000001234ull, &x), 0);
	CHECK(x == other);
	cep_put(x);
	cep_put(prefix);
	cep_destroy(exact);
	cep_put(exact);
	cep_destroy(other);
	cep_put(other);
	check_clean(t);
	CHECK_EQ(cep_table_destroy(t), 0);
}

/* 100k CEPs and QPs from a small initial size: the tables resize under
 * inserts and again under deletes; every lookup stays exact. */
static void test_resize(void)
{
	enum { N = 100000 };
	struct cep_table_attr a = { .size = sizeof(a), .initial_size = 16 };
	struct cep_table *t;
	static struct cep *ceps[N];
	struct cep_table_stats st;
	struct cep *x;
	int misses = 0;

	CHECK_EQ(cep_table_create(&a, &t), 0);
	for (uint32_t i = 0; i < N; i++) {
		CHECK_EQ(cep_create(t, NULL, &ceps[i]), 0);
		CHECK_EQ(cep_qp_register(t, i + 2), 0);
		CHECK_EQ(cep_bind(ceps[i], i + 2), 0);
		CHECK_EQ(cep_insert_remote_id(ceps[i], i, 77, NULL), 0);
		CHECK_EQ(cep_insert_remote_qpn(ceps[i], i, 77, NULL), 0);
	}
	check_clean(t);
	for (uint32_t i = 0; i < N; i++) {
		if (cep_lookup_comm_id(t, cep_local_comm_id(ceps[i]), &x) || x != ceps[i])
			misses++;
		else
			cep_put(x);
		if (cep_lookup_qpn(t, i + 2, &x) || x != ceps[i])
			misses++;
		else
			cep_put(x);
		if (cep_lookup_remote_id(t, i, 77, &x) || x != ceps[i])
			misses++;
		else
			cep_put(x);
	}
	CHECK_EQ(misses, 0);
	cep_table_stats(t, &st);
	CHECK_EQ(st.live, N);
	CHECK_EQ(st.bound, N);
	CHECK_EQ(st.qps, N);
	for (uint32_t i = 0; i < N; i++) {
		if (i % 2)
			CHECK_EQ(cep_qp_destroy_begin(t, i + 2, NULL), 0);
		else
			CHECK_EQ(cep_destroy(ceps[i]), 0);
		cep_put(ceps[i]);
	}
	for (uint32_t i = 0; i < N; i += 1000)
		CHECK_EQ(cep_lookup_remote_qpn(t, i, 77, &x), -ENOENT);
	check_clean(t);
	cep_table_stats(t, &st);
	CHECK_EQ(st.live, 0);
	CHECK_EQ(st.freed, N);
	CHECK_EQ(cep_table_destroy(t), 0);
}

/* cep_table_destroy cleans up what the user left, and refuses to free a
 * CEP that is still referenced. */
static void test_table_destroy(void)
{
	struct cep_table *t;
	struct cep *a;

	CHECK_EQ(cep_table_create(NULL, &t), 0);
	for (int i = 0; i < 100; i++) {
		CHECK_EQ(cep_create(t, NULL, &a), 0);
		cep_put(a); /* leave it to the table */
	}
	CHECK_EQ(cep_qp_register(t, 1), 0);
	CHECK_EQ(cep_table_destroy(t), 0);
}

int main(void)
{
	test_comm_id();
	test_remote_keys();
	test_listeners();
	test_resize();
	test_table_destroy();
	return check_done("index");
}
