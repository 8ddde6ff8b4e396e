/* SPDX-License-Identifier: MIT */
/*
 * The `table` benchmark's libcep implementations, one per index
 * (cep_table_attr.index): the public API only.
 * insert = cep_create, delete = cep_destroy + cep_put (the caller's
 * reference), lookup = cep_lookup_comm_id + cep_put. libcep registers its
 * calling threads with RCU itself, so thread_init/fini do nothing.
 */
#include <errno.h>

#include <cep/table.h>

#include "table_impl.h"

static int lc_create(int index, size_t initial_buckets, void **out)
{
	struct cep_table_attr attr = {
		.size = sizeof(attr),
		.initial_size = initial_buckets,
		.index = index,
	};
	struct cep_table *t;
	int ret = cep_table_create(&attr, &t);

	if (ret == 0)
		*out = t;
	return ret;
}

static int lc_create_ck(size_t initial_buckets, void **out)
{
	return lc_create(CEP_TABLE_INDEX_CK, initial_buckets, out);
}

static int lc_create_lfht(size_t initial_buckets, void **out)
{
	return lc_create(CEP_TABLE_INDEX_RCULFHASH, initial_buckets, out);
}

/* Main thread, after every worker destroyed and put its CEPs. */
static void lc_destroy(void *tbl)
{
	cep_table_destroy(tbl);
}

static void lc_thread_noop(void *tbl)
{
	(void)tbl;
}

/* Any thread. cep_create draws the comm ID itself; @rng is unused. */
static int lc_insert(void *tbl, uint64_t *rng, void **handle, uint32_t *id)
{
	struct cep_create_attr attr = { .size = sizeof(attr) };
	struct cep *cep;
	int ret;

	(void)rng;
	ret = cep_create(tbl, &attr, &cep);
	if (ret)
		return ret;
	*handle = cep;
	*id = cep_local_comm_id(cep);
	return 0;
}

/* Any thread, once per CEP (the owner's handle). */
static int lc_remove(void *tbl, void *handle)
{
	struct cep *cep = handle;
	int ret;

	(void)tbl;
	ret = cep_destroy(cep);
	cep_put(cep);
	return ret;
}

/* Any thread. */
static int lc_lookup(void *tbl, uint32_t id)
{
	struct cep *cep;
	int ret = cep_lookup_comm_id(tbl, id, &cep);

	if (ret)
		return ret;
	cep_put(cep);
	return 0;
}

const struct tbl_impl tbl_impl_libcep_ck = {
	.name = "libcep-ck",
	.create = lc_create_ck,
	.destroy = lc_destroy,
	.thread_init = lc_thread_noop,
	.thread_fini = lc_thread_noop,
	.insert = lc_insert,
	.remove = lc_remove,
	.lookup = lc_lookup,
};

const struct tbl_impl tbl_impl_libcep_lfht = {
	.name = "libcep-rculfhash",
	.create = lc_create_lfht,
	.destroy = lc_destroy,
	.thread_init = lc_thread_noop,
	.thread_fini = lc_thread_noop,
	.insert = lc_insert,
	.remove = lc_remove,
	.lookup = lc_lookup,
};
