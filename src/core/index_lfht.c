/* SPDX-License-Identifier: MIT */
/*
 * Index on liburcu rculfhash: lock-free lookups, inserts and removes (the
 * hash's own guarantees), and a resize policy of libcep's own.
 *
 * Why not liburcu's: 0.13's CDS_LFHT_AUTO_RESIZE asks for a bigger table
 * only at 8 entries per bucket, and its lazy launch stores
 * resize_initiated = 1 after queueing the resize work; when the resize
 * worker runs the whole resize before that store (the launching thread
 * preempted after the wake-up, common on a loaded 2-CPU machine), the flag
 * stays 1 with no work pending and the table never resizes again
 * (docs/benchmarks.md, bench/lfht-lazy.c). So libcep counts entries itself
 * and calls cds_lfht_resize (synchronous) from the writer that finds it due,
 * outside any read side: grow to the power of 2 above the count when the
 * count passes the buckets, shrink to twice the count when it falls below
 * an eighth. The bucket count is then always the last size libcep asked.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "index.h"
#include "rcu.h"
#include "yield.h"

#define CNT_SHARDS 16
#define CHECK_EVERY 64 /* writes per thread and index between resize checks */

struct lfht_count {
	/* Written by the threads of one slot (relaxed): a clash only shares
	 * the line; sums are approximate while writers run. */
	_Atomic uint64_t adds, dels, ticks;
} __attribute__((aligned(64)));

struct lfht_index {
	struct cep_index base;
	struct cds_lfht *ht;
	long node_delta;
	size_t min;
	_Atomic size_t buckets; /* the size of the last resize (or creation) */
	_Atomic int resizing;   /* one resizer at a time: exchange to 1 wins */
	struct lfht_count cnt[CNT_SHARDS];
};

static __thread unsigned cnt_slot = ~0u;
static _Atomic unsigned cnt_next;

static struct lfht_count *my_count(struct lfht_index *ix)
{
	if (__builtin_expect(cnt_slot == ~0u, 0))
		cnt_slot = atomic_fetch_add_explicit(&cnt_next, 1, memory_order_relaxed) % CNT_SHARDS;
	return &ix->cnt[cnt_slot];
}

static struct cds_lfht_node *key_node(const struct lfht_index *ix, struct cep_ikey *k)
{
	return (struct cds_lfht_node *)((char *)k + ix->node_delta);
}

static struct cep_ikey *node_key(const struct lfht_index *ix, struct cds_lfht_node *n)
{
	return (struct cep_ikey *)((char *)n - ix->node_delta);
}

/* Called by liburcu with the node of a candidate; @key is the lookup key.
 * The node's key struct follows it at a fixed distance in every entry of
 * this index, so its address is recovered from the node's. */
struct lfht_match_key {
	const struct lfht_index *ix;
	const struct cep_ikey *k;
};

static int lfht_match(struct cds_lfht_node *n, const void *key)
{
	const struct lfht_match_key *mk = key;
	struct cep_ikey *k = node_key(mk->ix, n);

	cep_index_probe(k, mk->k); /* tests: writers between liburcu's loads */
	CEP_YIELD(); /* stress builds: a reader paused mid-walk */
	cep_tsan_acquire(k); /* pairs with the release before cds_lfht_add_unique */
	return cep_ikey_eq(k, mk->k);
}

static size_t pow2_at_least(size_t n)
{
	size_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static int lfht_create(const struct cep_index_attr *a, struct cep_index **out)
{
	struct lfht_index *ix;
	size_t init = a->initial ? pow2_at_least(a->initial) : 1024;

	ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	ix->base.ops = &cep_index_lfht_ops;
	ix->node_delta = a->node_delta;
	ix->min = a->min ? pow2_at_least(a->min) : init;
	atomic_init(&ix->buckets, init);
	cep_rcu_thread_ensure();
	/* No CDS_LFHT_AUTO_RESIZE nor ACCOUNTING: libcep resizes (above). */
	ix->ht = cds_lfht_new_flavor(init, init < 64 ? init : 64, 0, 0, cep_rcu_flavor(), NULL);
	if (!ix->ht) {
		free(ix);
		return -ENOMEM;
	}
	*out = &ix->base;
	return 0;
}

static void lfht_destroy(struct cep_index *base)
{
	struct lfht_index *ix = (struct lfht_index *)base;

	cds_lfht_destroy(ix->ht, NULL);
	free(ix);
}

static struct cep_ikey *lfht_lookup(struct cep_index *base, uint64_t h, const struct cep_ikey *k)
{
	struct lfht_index *ix = (struct lfht_index *)base;
	struct lfht_match_key mk = { ix, k };
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;

	cds_lfht_lookup(ix->ht, (unsigned long)h, lfht_match, &mk, &it);
	n = cds_lfht_iter_get_node(&it);
	return n ? node_key(ix, n) : NULL;
}

static int lfht_insert(struct cep_index *base, uint64_t h, struct cep_ikey *k,
		       struct cep_ikey **existing)
{
	struct lfht_index *ix = (struct lfht_index *)base;
	struct lfht_match_key mk = { ix, k };
	struct cds_lfht_node *n = key_node(ix, k), *got;

	cds_lfht_node_init(n);
	cep_tsan_release(k); /* publication: the entry's fields before readers */
	got = cds_lfht_add_unique(ix->ht, (unsigned long)h, lfht_match, &mk, n);
	if (got != n) {
		*existing = node_key(ix, got);
		return -EEXIST;
	}
	atomic_fetch_add_explicit(&my_count(ix)->adds, 1, memory_order_relaxed);
	return 0;
}

static int lfht_remove(struct cep_index *base, uint64_t h, struct cep_ikey *k)
{
	struct lfht_index *ix = (struct lfht_index *)base;

	(void)h;
	if (cds_lfht_del(ix->ht, key_node(ix, k)))
		return -ENOENT;
	atomic_fetch_add_explicit(&my_count(ix)->dels, 1, memory_order_relaxed);
	return 0;
}

static size_t lfht_count(struct cep_index *base)
{
	struct lfht_index *ix = (struct lfht_index *)base;
	uint64_t adds = 0, dels = 0;

	for (int i = 0; i < CNT_SHARDS; i++) {
		adds += atomic_load_explicit(&ix->cnt[i].adds, memory_order_relaxed);
		dels += atomic_load_explicit(&ix->cnt[i].dels, memory_order_relaxed);
	}
	/* Shards are read one by one while others write: clamp, never wrap. */
	return adds > dels ? (size_t)(adds - dels) : 0;
}

/* After a write. cds_lfht_resize may wait for a grace period, so a writer
 * inside a read side (a table walk destroying CEPs) leaves it to the next. */
static void lfht_maintain(struct cep_index *base)
{
	struct lfht_index *ix = (struct lfht_index *)base;
	size_t n, b, want;

	if (cep_rcu_read_ongoing())
		return;
	if (atomic_fetch_add_explicit(&my_count(ix)->ticks, 1, memory_order_relaxed) %
	    CHECK_EVERY != CHECK_EVERY - 1)
		return;
	n = lfht_count(base);
	b = atomic_load_explicit(&ix->buckets, memory_order_relaxed);
	if (n > b)
		want = pow2_at_least(n);
	/* A shrink waits for a grace period inside the resize. With QSBR a
	 * worker blocked on a CM lock (online, silent) holds that up, and the
	 * writer may hold the lock: shrink only with urcu-memb. */
	else if (n < b / 8 && b > ix->min && !cep_rcu_qsbr)
		want = pow2_at_least(2 * n) > ix->min ? pow2_at_least(2 * n) : ix->min;
	else
		return;
	/* One resizer; the others go on (lookups and writes stay lock-free
	 * during a resize). Relaxed: the flag orders nothing but itself. */
	if (atomic_exchange_explicit(&ix->resizing, 1, memory_order_relaxed))
		return;
	cds_lfht_resize(ix->ht, want);
	atomic_store_explicit(&ix->buckets, want, memory_order_relaxed);
	atomic_store_explicit(&ix->resizing, 0, memory_order_relaxed);
}

void cep_index_lfht_resize(struct cep_index *base, size_t buckets)
{
	struct lfht_index *ix = (struct lfht_index *)base;

	cds_lfht_resize(ix->ht, buckets);
	atomic_store_explicit(&ix->buckets, buckets, memory_order_relaxed);
}

static int lfht_for_each(struct cep_index *base, void (*fn)(struct cep_ikey *k, void *ctx),
			 void *ctx)
{
	struct lfht_index *ix = (struct lfht_index *)base;
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;

	cds_lfht_for_each(ix->ht, &it, n) {
		struct cep_ikey *k = node_key(ix, n);

		cep_tsan_acquire(k);
		fn(k, ctx);
	}
	return 0;
}

static size_t lfht_buckets(struct cep_index *base)
{
	return atomic_load_explicit(&((struct lfht_index *)base)->buckets, memory_order_relaxed);
}

const struct cep_index_ops cep_index_lfht_ops = {
	.name = "rculfhash",
	.create = lfht_create,
	.destroy = lfht_destroy,
	.lookup = lfht_lookup,
	.insert = lfht_insert,
	.remove = lfht_remove,
	.maintain = lfht_maintain,
	.for_each = lfht_for_each,
	.buckets = lfht_buckets,
	.count = lfht_count,
};
