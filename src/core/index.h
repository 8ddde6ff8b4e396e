/* SPDX-License-Identifier: MIT */
/*
 * The internal interface every index implementation offers the CEP table:
 * an RCU-protected hash from a 128-bit key to an object that embeds that
 * key. Two implementations: liburcu rculfhash (index_lfht.c) and
 * ConcurrencyKit ck_rhs, sharded, one writer per shard (index_ck.c).
 *
 * Contract shared by both:
 * - lookup, insert and remove run inside the caller's RCU read-side
 *   section; lookups are lock-free; an insert has one winner per key;
 * - an entry is the address of a struct cep_ikey inside a caller object;
 *   the caller writes the key and the object before insert (publication:
 *   the implementation's insert is a release) and frees the object only
 *   through call_rcu after its remove, so a reader in a read side never
 *   touches freed memory;
 * - the same key struct may be inserted again only after a grace period
 *   following its remove (rculfhash reuses the node); the table never
 *   re-inserts one: a re-inserted key gets a fresh struct;
 * - indexes size themselves: the slots or buckets follow the live count
 *   up and down (cep_index_buckets() says how many), without the caller
 *   sizing them.
 */
#ifndef CEP_INDEX_H
#define CEP_INDEX_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Every key of every index: (a, b). Comm ID and QPN keys use b = 0.
 * 16-byte aligned wherever it lives (a lookup's key on the stack too): the
 * ck index keeps hash bits in the low 4 bits of its address. */
struct cep_ikey {
	_Alignas(16) uint64_t a;
	uint64_t b;
};

static inline int cep_ikey_eq(const struct cep_ikey *x, const struct cep_ikey *y)
{
	return x->a == y->a && x->b == y->b;
}

struct cep_index;

/* The hash of a key: the same function the table uses for lookups (an
 * implementation that rehashes, ck_rhs on a grow, calls it). */
typedef uint64_t (*cep_index_hash_fn)(const struct cep_ikey *k, const void *ctx);

struct cep_index_attr {
	size_t initial;          /* buckets / slots to start with (power of 2) */
	size_t min;              /* never shrink below (0: initial) */
	unsigned shards;         /* ck: writer shards (power of 2; 0: default) */
	/* rculfhash: where its node sits, as (node address - key address);
	 * the object reserves CEP_INDEX_NODE_SIZE bytes there. */
	long node_delta;
	cep_index_hash_fn hash;
	const void *hash_ctx;
};

/* Room an object must reserve for the rculfhash node of one of its keys. */
#define CEP_INDEX_NODE_SIZE 16

struct cep_index_ops {
	const char *name;
	/* 0 or -ENOMEM, -EINVAL. */
	int (*create)(const struct cep_index_attr *a, struct cep_index **out);
	/* The index must be empty and no reader in it (after rcu_barrier). */
	void (*destroy)(struct cep_index *ix);
	/* Read side held. The entry whose key equals *k, or NULL. */
	struct cep_ikey *(*lookup)(struct cep_index *ix, uint64_t h, const struct cep_ikey *k);
	/* Read side held. Publish @k unless its key is present: 0, or -EEXIST
	 * with *existing (valid until the read side ends), or -ENOMEM. */
	int (*insert)(struct cep_index *ix, uint64_t h, struct cep_ikey *k,
		      struct cep_ikey **existing);
	/* Read side held. Unpublish @k: 0, or -ENOENT if it was not in. */
	int (*remove)(struct cep_index *ix, uint64_t h, struct cep_ikey *k);
	/* After inserts and removes, outside the read side they took: resize
	 * if due (an implementation that resizes inside insert/remove does
	 * nothing; one that waits for grace periods skips it when the caller
	 * is itself inside a read side). */
	void (*maintain)(struct cep_index *ix);
	/* Read side held. @fn on every entry present throughout the walk
	 * (entries added or removed during it may be missed); @fn may remove
	 * entries from this index. 0 or -ENOMEM (nothing visited). */
	int (*for_each)(struct cep_index *ix, void (*fn)(struct cep_ikey *k, void *ctx),
			void *ctx);
	/* Buckets (rculfhash) or slots (ck) now, and entries (approximate
	 * while writers run). */
	size_t (*buckets)(struct cep_index *ix);
	size_t (*count)(struct cep_index *ix);
};

struct cep_index {
	const struct cep_index_ops *ops;
};

extern const struct cep_index_ops cep_index_lfht_ops;

/*
 * Tests only (tests/table/index_probe.c): when set, both implementations
 * call it from inside a lookup, each time the lookup compares its key with
 * an entry (ck_rhs's compare callback, rculfhash's match function), before
 * the comparison. That is a point between the implementation's own loads,
 * where a test performs writer operations (insert, remove, displacement,
 * grow, shrink) to prove that a key present throughout is still found.
 * NULL in every other program; relaxed: it is set before the lookups it
 * serves, on the same thread.
 */
typedef void (*cep_index_probe_fn)(const struct cep_ikey *stored, const struct cep_ikey *key);
extern _Atomic(cep_index_probe_fn) cep_index_probe_hook;

static inline void cep_index_probe(const struct cep_ikey *stored, const struct cep_ikey *key)
{
	cep_index_probe_fn f = atomic_load_explicit(&cep_index_probe_hook, memory_order_relaxed);

	if (__builtin_expect(f != NULL, 0))
		f(stored, key);
}

/* Tests only: resize an rculfhash index to @buckets now (synchronous; a
 * shrink waits for a grace period, so never from inside a read side). */
void cep_index_lfht_resize(struct cep_index *ix, size_t buckets);
extern const struct cep_index_ops cep_index_ck_ops;

static inline struct cep_ikey *cep_index_lookup(struct cep_index *ix, uint64_t h,
						const struct cep_ikey *k)
{
	return ix->ops->lookup(ix, h, k);
}

static inline int cep_index_insert(struct cep_index *ix, uint64_t h, struct cep_ikey *k,
				   struct cep_ikey **existing)
{
	return ix->ops->insert(ix, h, k, existing);
}

static inline int cep_index_remove(struct cep_index *ix, uint64_t h, struct cep_ikey *k)
{
	return ix->ops->remove(ix, h, k);
}

static inline void cep_index_maintain(struct cep_index *ix)
{
	if (ix->ops->maintain)
		ix->ops->maintain(ix);
}

#endif /* CEP_INDEX_H */
