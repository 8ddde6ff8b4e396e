/* SPDX-License-Identifier: MIT */
/*
 * Baseline: one global mutex around a hash map, the design of the kernel
 * CM's cm.lock and IBAL's manager lock. Every lookup, insert and delete
 * takes the same lock; references are taken under it and dropped after.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "base_hashmap.h"
#include "table_impl.h"

struct mtx_tbl {
	pthread_mutex_t lock; /* protects map */
	struct hm_map map;
};

static int mtx_create(size_t initial_buckets, void **out)
{
	struct mtx_tbl *t = malloc(sizeof(*t));

	if (!t)
		return -ENOMEM;
	if (hm_init(&t->map, initial_buckets)) {
		free(t);
		return -ENOMEM;
	}
	pthread_mutex_init(&t->lock, NULL);
	*out = t;
	return 0;
}

static void mtx_destroy(void *tbl)
{
	struct mtx_tbl *t = tbl;

	hm_fini(&t->map);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

static void mtx_thread_noop(void *tbl)
{
	(void)tbl;
}

/* Any thread. Takes the lock. */
static int mtx_insert(void *tbl, uint64_t *rng, void **handle, uint32_t *id)
{
	struct mtx_tbl *t = tbl;
	struct hm_entry *e = hm_entry_new(&t->map, tbl_draw_id(rng));
	int ret;

	if (!e)
		return -ENOMEM;
	for (;;) {
		pthread_mutex_lock(&t->lock);
		ret = hm_insert_unique(&t->map, e);
		pthread_mutex_unlock(&t->lock);
		if (ret != -EEXIST)
			break;
		e->id = tbl_draw_id(rng);
		e->hash = tbl_hash_comm_id(t->map.seed, e->id);
	}
	*handle = e;
	*id = e->id;
	return 0;
}

/* Any thread, once per entry (the owner's handle). Takes the lock. */
static int mtx_remove(void *tbl, void *handle)
{
	struct mtx_tbl *t = tbl;
	struct hm_entry *e = handle;
	int ret;

	pthread_mutex_lock(&t->lock);
	ret = hm_remove(&t->map, e);
	pthread_mutex_unlock(&t->lock);
	if (ret == 0)
		hm_entry_put(e); /* the table's reference */
	hm_entry_put(e);         /* the caller's */
	return ret;
}

/* Any thread. The reference is taken under the lock, so an entry found is
 * never freed before the get: removal and the table's put happen after. */
static int mtx_lookup(void *tbl, uint32_t id)
{
	struct mtx_tbl *t = tbl;
	struct hm_entry *e;

	pthread_mutex_lock(&t->lock);
	e = hm_find(&t->map, id, tbl_hash_comm_id(t->map.seed, id));
	if (e) /* relaxed: the lock orders it against removal */
		atomic_fetch_add_explicit(&e->ref, 1, memory_order_relaxed);
	pthread_mutex_unlock(&t->lock);
	if (!e)
		return -ENOENT;
	hm_entry_put(e);
	return 0;
}

const struct tbl_impl tbl_impl_mutex = {
	.name = "mutex",
	.create = mtx_create,
	.destroy = mtx_destroy,
	.thread_init = mtx_thread_noop,
	.thread_fini = mtx_thread_noop,
	.insert = mtx_insert,
	.remove = mtx_remove,
	.lookup = mtx_lookup,
};
