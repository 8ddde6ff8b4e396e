/* SPDX-License-Identifier: MIT */
/*
 * Baseline: a reader-writer lock around the same hash map as the mutex
 * baseline: lookups share the lock (read side), inserts and deletes
 * take it exclusively. glibc default (reader-preferring) rwlock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "base_hashmap.h"
#include "table_impl.h"

struct rwl_tbl {
	pthread_rwlock_t lock; /* protects map */
	struct hm_map map;
};

static int rwl_create(size_t initial_buckets, void **out)
{
	struct rwl_tbl *t = malloc(sizeof(*t));

	if (!t)
		return -ENOMEM;
	if (hm_init(&t->map, initial_buckets)) {
		free(t);
		return -ENOMEM;
	}
	pthread_rwlock_init(&t->lock, NULL);
	*out = t;
	return 0;
}

static void rwl_destroy(void *tbl)
{
	struct rwl_tbl *t = tbl;

	hm_fini(&t->map);
	pthread_rwlock_destroy(&t->lock);
	free(t);
}

static void rwl_thread_noop(void *tbl)
{
	(void)tbl;
}

/* Any thread. Takes the lock exclusively. */
static int rwl_insert(void *tbl, uint64_t *rng, void **handle, uint32_t *id)
{
	struct rwl_tbl *t = tbl;
	struct hm_entry *e = hm_entry_new(&t->map, tbl_draw_id(rng));
	int ret;

	if (!e)
		return -ENOMEM;
	for (;;) {
		pthread_rwlock_wrlock(&t->lock);
		ret = hm_insert_unique(&t->map, e);
		pthread_rwlock_unlock(&t->lock);
		if (ret != -EEXIST)
			break;
		e->id = tbl_draw_id(rng);
		e->hash = tbl_hash_comm_id(t->map.seed, e->id);
	}
	*handle = e;
	*id = e->id;
	return 0;
}

/* Any thread, once per entry (the owner's handle). Takes the lock exclusively. */
static int rwl_remove(void *tbl, void *handle)
{
	struct rwl_tbl *t = tbl;
	struct hm_entry *e = handle;
	int ret;

	pthread_rwlock_wrlock(&t->lock);
	ret = hm_remove(&t->map, e);
	pthread_rwlock_unlock(&t->lock);
	if (ret == 0)
		hm_entry_put(e); /* the table's reference */
	hm_entry_put(e);         /* the caller's */
	return ret;
}

/* Any thread, read side. The reference is taken under the lock, so an entry found is
 * never freed before the get: removal and the table's put happen after. */
static int rwl_lookup(void *tbl, uint32_t id)
{
	struct rwl_tbl *t = tbl;
	struct hm_entry *e;

	pthread_rwlock_rdlock(&t->lock);
	e = hm_find(&t->map, id, tbl_hash_comm_id(t->map.seed, id));
	if (e) /* relaxed: the read lock excludes removal; concurrent readers only add */
		atomic_fetch_add_explicit(&e->ref, 1, memory_order_relaxed);
	pthread_rwlock_unlock(&t->lock);
	if (!e)
		return -ENOENT;
	hm_entry_put(e);
	return 0;
}

const struct tbl_impl tbl_impl_rwlock = {
	.name = "rwlock",
	.create = rwl_create,
	.destroy = rwl_destroy,
	.thread_init = rwl_thread_noop,
	.thread_fini = rwl_thread_noop,
	.insert = rwl_insert,
	.remove = rwl_remove,
	.lookup = rwl_lookup,
};
