/* SPDX-License-Identifier: MIT */
/*
 * Index on ConcurrencyKit ck_rhs (robin hood open addressing, SPMC): a set
 * of pointers to the entries' key structs, split in shards by the hash's
 * top bits. Writers of one shard are serialised by the shard's mutex
 * (ck_rhs allows one writer at a time). A map replaced by a grow, and a
 * whole set replaced by a shrink, are freed through call_rcu (ck_malloc's
 * free with defer), so a reader probing the old map never touches freed
 * memory.
 *
 * A lookup never misses a key that is present throughout it. ck_rhs_get
 * alone does not promise that: it validates its probe with a generation
 * counter indexed by the full hash, while writers that move entries bump
 * the one of the entry's home slot, so in a map of fewer than 1,024 slots a
 * reader can walk past its key while a delete shifts it back, see no
 * change, and report a miss (docs/concurrency.md "Why a miss is real", with
 * a reproducer on ck's public API). libcep therefore trusts only ck's
 * sequential correctness and its SPMC safety (a get that races a writer
 * returns an entry that compares equal, or NULL, and touches only memory
 * our deferred frees keep valid), and certifies every miss itself: each
 * shard has a sequence count that its writer makes odd before it changes
 * the set (put, remove with its backward shift, displacement, grow,
 * shrink) and even after. A hit is always an answer; a miss is an answer
 * only when the count was even before the get and unchanged after it (no
 * writer ran); otherwise the get is retried, and after a few tries it is
 * asked under the shard's lock, where the set holds still. Hits stay
 * lock-free; a miss waits at most for the writers of its own shard.
 *
 * Ordering: ck_rhs publishes with its own store fences, which TSan cannot
 * see (inline assembly in libck, itself uninstrumented); so every entry is
 * released (cep_tsan_release on its key struct) before the put and acquired
 * in the compare callback and after each get: TSan sees the edge per entry.
 * Sizing: each shard grows (x2) when its entries pass LOAD_PCT of its slots
 * and shrinks when they fall below an eighth; ck_rhs's own load factor is
 * set to 100 so it grows by itself only when a probe sequence overflows.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <ck_rhs.h>

#include "index.h"
#include "rcu.h"
#include "yield.h"
#include "slab.h"

#ifndef CEP_CK_LOAD_PCT
#define CEP_CK_LOAD_PCT 50 /* entries per slot before a shard grows, in % */
#endif
#define DEFAULT_SHARDS 16
#define MIN_SLOTS 16

/* ---- maps, freed after a grace period when deferred ------------------- */

/*
 * A map of 2 MiB or more gets its own mapping, placed so that its slot
 * array starts on a 2 MiB boundary and advised MADV_HUGEPAGE: a lookup then
 * costs a cache miss on the slot, not a page walk too. ck_rhs asks for
 * sizeof(struct ck_rhs_map) + 16 * slots + 63 bytes and puts the slots at
 * the first 64-byte boundary after the struct (ck_rhs_map_create), so the
 * struct's size is what is left once the largest power-of-2 slot array is
 * taken out. The block starts at the last 16-byte boundary at or before
 * the slots' address minus that size (its header is 16-byte aligned, as
 * malloc's, whatever the struct's size; the slots stay at the first
 * 64-byte boundary after the struct, because the struct now ends at most
 * 15 bytes earlier). Smaller maps come from malloc.
 */
#define HUGE (2ul << 20)
#define DESC 16 /* sizeof(struct ck_rhs_entry_desc) in ck 0.7 (not read-mostly) */

struct ck_block {
	struct rcu_head rcu;
	void *base;          /* the mapping, or NULL: malloc'd */
	size_t len;
	max_align_t data[];  /* what ck sees */
};

static void *ckb_malloc(size_t size)
{
	struct ck_block *b;
	size_t slots = 1, hdr, len;
	char *base, *a, *end;

	if (size < HUGE + 4096) {
		b = malloc(sizeof(*b) + size);
		if (!b)
			return NULL;
		b->base = NULL;
		return b->data;
	}
	while (slots * 2 * DESC <= size - 63)
		slots <<= 1;
	hdr = size - 63 - slots * DESC;
	len = sizeof(*b) + size + 2 * HUGE;
	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		return NULL;
	/* a: the slots' 2 MiB boundary, with room for the header (and up to
	 * 15 bytes of alignment) before it */
	a = (char *)(((uintptr_t)base + sizeof(*b) + hdr + 15 + HUGE - 1) & ~(HUGE - 1));
	/* Rounded down to the block's alignment: a - hdr is 16-byte aligned
	 * only when ck's struct is a multiple of 16 bytes, and it is not in
	 * ck 0.7 (issue 26: UBSan, misaligned struct ck_block). */
	b = (struct ck_block *)(((uintptr_t)(a - hdr) & ~(uintptr_t)(_Alignof(struct ck_block) - 1)) -
				sizeof(*b));
	end = (char *)b->data + size;
	b->base = (char *)((uintptr_t)b & ~(uintptr_t)4095);
	b->len = (size_t)(((uintptr_t)end + 4095) & ~(uintptr_t)4095) - (uintptr_t)b->base;
	if ((char *)b->base > base)
		munmap(base, (size_t)((char *)b->base - base));
	if (base + len > (char *)b->base + b->len)
		munmap((char *)b->base + b->len, (size_t)(base + len - ((char *)b->base + b->len)));
	(void)madvise(a, slots * DESC, MADV_HUGEPAGE); /* a hint; ignored without THP */
	atomic_fetch_add_explicit(&cep_mapped_bytes, b->len, memory_order_relaxed);
	return b->data;
}

static void ckb_release(struct ck_block *b)
{
	if (b->base) {
		atomic_fetch_sub_explicit(&cep_mapped_bytes, b->len, memory_order_relaxed);
		munmap(b->base, b->len);
	} else
		free(b);
}

static void ckb_free_rcu(struct rcu_head *head)
{
	struct ck_block *b = caa_container_of(head, struct ck_block, rcu);

	cep_rcu_callback_begin(b);
	ckb_release(b);
	cep_rcu_callback_end();
}

/* ck calls this with defer = true for a map it just replaced: readers in a
 * read side may still probe it. */
static void ckb_free(void *p, size_t size, bool defer)
{
	struct ck_block *b;

	(void)size;
	if (!p)
		return;
	b = caa_container_of((max_align_t *)p, struct ck_block, data[0]);
	if (defer)
		cep_call_rcu(&b->rcu, b, ckb_free_rcu);
	else
		ckb_release(b);
}

static void *ckb_realloc(void *p, size_t old, size_t size, bool defer)
{
	(void)p, (void)old, (void)size, (void)defer;
	return NULL; /* ck_rhs never reallocates */
}

static struct ck_malloc ck_alloc = { ckb_malloc, ckb_realloc, ckb_free };

/* ---- shards ------------------------------------------------------------- */

struct ck_set {
	ck_rhs_t rhs;
	struct rcu_head rcu;
};

struct ck_shard {
	pthread_mutex_t lock;           /* writers of this shard */
	struct ck_set *_Atomic set;     /* acquire: pairs with the release of a shrink */
	/* Odd while the shard's writer changes its set (under lock); a
	 * reader's miss counts only if it saw the same even value before and
	 * after its probe (the race: an entry shifted back past the probe).
	 * On the line a lookup reads anyway (set). */
	_Atomic unsigned seq;
	size_t slots;                   /* under lock: the set's capacity */
	_Atomic size_t count;           /* written under lock, read relaxed anywhere */
	_Atomic size_t slots_seen;      /* slots, for readers outside the lock */
} __attribute__((aligned(64)));
_Static_assert(offsetof(struct ck_shard, seq) + sizeof(unsigned) <= 64,
	       "a lookup's set pointer and sequence count share one cache line");

struct ck_index {
	struct cep_index base;
	cep_index_hash_fn hash;
	const void *hash_ctx;
	unsigned shift;                 /* shard = hash >> shift */
	unsigned nshards;
	size_t min_slots;               /* per shard */
	struct ck_shard shard[];
};

/*
 * What the set stores: the address of an entry's key struct with 21 bits
 * of its hash in bits it does not use (x86-64 user addresses are below
 * 2^47 and key structs are 16-byte aligned): the hash's low 17 bits in bits
 * 47-63, 4 more (40-43) in bits 0-3. ck_rhs in OBJECT mode without its own
 * pointer packing (off in Debian's build) treats entries as opaque and only
 * hands them to the callbacks below, so:
 * - the compare callback tells almost every other entry apart by the tag,
 *   without reading it (a cache miss each); a lookup's key is tagged alike;
 * - the hash callback, which ck calls only to rehash into a map of a given
 *   capacity and uses only modulo it (ck_rhs_grow), answers from the tag
 *   while that capacity is at most 2^17 slots, without reading the entry.
 */
_Static_assert(_Alignof(struct cep_ikey) >= 16, "the tag's low bits need 16-byte keys");
#define HI_SHIFT 47
#define HI_BITS 17
#define LO_MASK ((uintptr_t)0xf)
#define ADDR_MASK ((((uintptr_t)1 << HI_SHIFT) - 1) & ~LO_MASK)

/* The capacity the map being built (or grown into) may reach, in bits:
 * set under the shard's lock before every call that may rehash. */
static __thread unsigned ck_rehash_bits;

static uintptr_t tag_of(uint64_t h)
{
	return (uintptr_t)(h & ((1u << HI_BITS) - 1)) << HI_SHIFT | ((uintptr_t)(h >> 40) & LO_MASK);
}

static void *tagged(const struct cep_ikey *k, uint64_t h)
{
	return (void *)((uintptr_t)k | tag_of(h));
}

static struct cep_ikey *untag(const void *p)
{
	return (struct cep_ikey *)((uintptr_t)p & ADDR_MASK);
}

/* ck_rhs hands its seed to the hash callback: ours is the index. */
static unsigned long ck_hash_cb(const void *entry, unsigned long seed)
{
	const struct ck_index *ix = (const struct ck_index *)(uintptr_t)seed;

	if (ck_rehash_bits <= HI_BITS)
		return (unsigned long)((uintptr_t)entry >> HI_SHIFT); /* the hash's low bits */
	return (unsigned long)ix->hash(untag(entry), ix->hash_ctx);
}

/* @stored: an entry in the set; @key: the lookup key, or the entry being
 * inserted or removed (all tagged). */
static bool ck_compare_cb(const void *stored, const void *key)
{
	const struct cep_ikey *s = untag(stored);

	cep_index_probe(s, untag(key)); /* tests: writers between ck's loads */
	CEP_YIELD(); /* stress builds: a reader paused mid-probe */
	if (((uintptr_t)stored ^ (uintptr_t)key) & ~ADDR_MASK)
		return false; /* different hashes: no need to read the entry */
	cep_tsan_acquire(s); /* pairs with the release before the put */
	return cep_ikey_eq(s, untag(key));
}

/* Under the shard's lock, before a call that may rehash into a map of up
 * to @slots slots (ck doubles by itself on a probe overflow: allow for 4x). */
static void rehash_limit(size_t slots)
{
	unsigned b = 0;

	while (((size_t)1 << b) < slots)
		b++;
	ck_rehash_bits = b + 2;
}

static size_t pow2_at_least(size_t n)
{
	size_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static struct ck_set *set_new(struct ck_index *ix, size_t slots)
{
	struct ck_set *s = malloc(sizeof(*s));

	if (!s)
		return NULL;
	if (!ck_rhs_init(&s->rhs, CK_RHS_MODE_SPMC | CK_RHS_MODE_OBJECT, ck_hash_cb,
			 ck_compare_cb, &ck_alloc, slots, (unsigned long)(uintptr_t)ix)) {
		free(s);
		return NULL;
	}
	/* Our policy grows first; ck grows by itself only on a probe overflow. */
	ck_rhs_set_load_factor(&s->rhs, 100);
	return s;
}

static void set_free_rcu(struct rcu_head *head)
{
	struct ck_set *s = caa_container_of(head, struct ck_set, rcu);

	cep_rcu_callback_begin(s);
	ck_rhs_destroy(&s->rhs); /* frees its map at once (defer = false) */
	free(s);
	cep_rcu_callback_end();
}

static struct ck_set *shard_set(struct ck_shard *sh)
{
	return atomic_load_explicit(&sh->set, memory_order_acquire);
}

static struct ck_shard *shard_of(struct ck_index *ix, uint64_t h)
{
	return &ix->shard[ix->shift < 64 ? h >> ix->shift : 0];
}

static int ck_create(const struct cep_index_attr *a, struct cep_index **out)
{
	unsigned n = a->shards ? a->shards : DEFAULT_SHARDS;
	size_t init = a->initial ? a->initial : 1024, per;
	struct ck_index *ix;

	if (n & (n - 1))
		return -EINVAL;
	ix = calloc(1, sizeof(*ix) + n * sizeof(ix->shard[0]));
	if (!ix)
		return -ENOMEM;
	ix->base.ops = &cep_index_ck_ops;
	ix->hash = a->hash;
	ix->hash_ctx = a->hash_ctx;
	ix->nshards = n;
	ix->shift = 64 - (unsigned)__builtin_ctz(n);
	per = pow2_at_least(init / n);
	ix->min_slots = pow2_at_least((a->min ? a->min : init) / n);
	if (ix->min_slots < MIN_SLOTS)
		ix->min_slots = MIN_SLOTS;
	if (per < ix->min_slots)
		per = ix->min_slots;
	for (unsigned i = 0; i < n; i++) {
		struct ck_shard *sh = &ix->shard[i];
		struct ck_set *s = set_new(ix, per);

		if (!s) {
			while (i--) {
				s = atomic_load_explicit(&ix->shard[i].set, memory_order_relaxed);
				ck_rhs_destroy(&s->rhs);
				free(s);
				pthread_mutex_destroy(&ix->shard[i].lock);
			}
			free(ix);
			return -ENOMEM;
		}
		pthread_mutex_init(&sh->lock, NULL);
		sh->slots = per;
		atomic_init(&sh->slots_seen, per);
		atomic_init(&sh->count, 0);
		atomic_init(&sh->seq, 0);
		atomic_init(&sh->set, s);
	}
	*out = &ix->base;
	return 0;
}

static void ck_destroy(struct cep_index *base)
{
	struct ck_index *ix = (struct ck_index *)base;

	for (unsigned i = 0; i < ix->nshards; i++) {
		struct ck_set *s = atomic_load_explicit(&ix->shard[i].set, memory_order_relaxed);

		ck_rhs_destroy(&s->rhs);
		free(s);
		pthread_mutex_destroy(&ix->shard[i].lock);
	}
	free(ix);
}

/* Under the shard's lock, around every change of its set. Writer side of
 * the sequence count: odd, then (release fence) the set's stores, then
 * even with release, so a reader whose probe saw any of those stores sees
 * the count moved (the race: a miss reported while an entry moved). */
static void shard_write_begin(struct ck_shard *sh)
{
	atomic_store_explicit(&sh->seq, atomic_load_explicit(&sh->seq, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void shard_write_end(struct ck_shard *sh)
{
	atomic_store_explicit(&sh->seq, atomic_load_explicit(&sh->seq, memory_order_relaxed) + 1,
			      memory_order_release);
}

/* Optimistic probes before a miss is asked under the lock: each failed
 * one means a writer of this shard made progress meanwhile. */
#define LOOKUP_TRIES 4

static struct cep_ikey *set_get(struct ck_set *s, uint64_t h, const struct cep_ikey *k)
{
	struct cep_ikey *e = untag(ck_rhs_get(&s->rhs, (unsigned long)h, tagged(k, h)));

	if (e)
		cep_tsan_acquire(e);
	return e;
}

/* Read side held; any thread; never called with the shard's lock held.
 * An entry whose key equals @k, or NULL if @k was absent at some instant
 * of the call (the contract in index.h; the argument above). */
static struct cep_ikey *ck_lookup(struct cep_index *base, uint64_t h, const struct cep_ikey *k)
{
	struct ck_index *ix = (struct ck_index *)base;
	struct ck_shard *sh = shard_of(ix, h);
	struct cep_ikey *e;

	for (int i = 0; i < LOOKUP_TRIES; i++) {
		/* acquire: a set published by a shrink, and every store of the
		 * writes that ended before this value, are seen by the probe. */
		unsigned s0 = atomic_load_explicit(&sh->seq, memory_order_acquire);

		e = set_get(shard_set(sh), h, k);
		if (e)
			return e; /* compared equal: present when its slot was read */
		/* The probe's loads before the second read of the count: a
		 * writer whose stores the probe saw (or missed because they
		 * moved the key) has made the count differ. */
		atomic_thread_fence(memory_order_acquire);
		if (!(s0 & 1) && atomic_load_explicit(&sh->seq, memory_order_relaxed) == s0)
			return NULL; /* no writer ran during the probe: a real miss */
	}
	/* Writers kept changing this shard: ask where the set holds still. */
	pthread_mutex_lock(&sh->lock);
	e = set_get(atomic_load_explicit(&sh->set, memory_order_relaxed), h, k);
	pthread_mutex_unlock(&sh->lock);
	return e;
}

/* Under the shard's lock: the set after a grow (ck may also have grown it
 * by itself on a probe overflow, always doubling). */
static void shard_grow(struct ck_shard *sh, struct ck_set *s, const void *map_before)
{
	if (s->rhs.map != map_before)
		sh->slots <<= 1; /* ck's own grow */
	if (atomic_load_explicit(&sh->count, memory_order_relaxed) * 100 >
	    sh->slots * CEP_CK_LOAD_PCT &&
	    ck_rhs_grow(&s->rhs, sh->slots << 1))
		sh->slots <<= 1;
	atomic_store_explicit(&sh->slots_seen, sh->slots, memory_order_relaxed);
}

static int ck_insert(struct cep_index *base, uint64_t h, struct cep_ikey *k,
		     struct cep_ikey **existing)
{
	struct ck_index *ix = (struct ck_index *)base;
	struct ck_shard *sh = shard_of(ix, h);
	struct cep_ikey *got;
	struct ck_set *s;
	const void *map;
	int ret = 0;

	if ((uintptr_t)k & ~ADDR_MASK)
		return -EOVERFLOW; /* never with Linux's default address space */
	pthread_mutex_lock(&sh->lock);
	s = atomic_load_explicit(&sh->set, memory_order_relaxed); /* ours under lock */
	got = untag(ck_rhs_get(&s->rhs, (unsigned long)h, tagged(k, h)));
	if (got) {
		cep_tsan_acquire(got);
		*existing = got;
		ret = -EEXIST;
	} else {
		map = s->rhs.map;
		cep_tsan_release(k); /* publication: the entry's fields before readers */
		rehash_limit(sh->slots * 2); /* put may grow, shard_grow grows x2 */
		shard_write_begin(sh); /* the put may displace entries; the grow swaps maps */
		if (!ck_rhs_put_unique(&s->rhs, (unsigned long)h, tagged(k, h))) {
			ret = -ENOMEM; /* no duplicate (checked above): the grow failed */
		} else {
			atomic_store_explicit(&sh->count,
					      atomic_load_explicit(&sh->count, memory_order_relaxed) + 1,
					      memory_order_relaxed);
			shard_grow(sh, s, map);
		}
		shard_write_end(sh);
	}
	pthread_mutex_unlock(&sh->lock);
	return ret;
}

/* Under the shard's lock: a set an eighth full or less is rebuilt at four
 * times its entries (never below the minimum) and published; the old one
 * is freed after a grace period. */
static void shard_shrink(struct ck_index *ix, struct ck_shard *sh, struct ck_set *s)
{
	size_t n = atomic_load_explicit(&sh->count, memory_order_relaxed), want;
	ck_rhs_iterator_t it = CK_RHS_ITERATOR_INITIALIZER;
	struct ck_set *ns;
	void *e;

	if (n * 8 >= sh->slots || sh->slots <= ix->min_slots)
		return;
	want = pow2_at_least(4 * n);
	if (want < ix->min_slots)
		want = ix->min_slots;
	if (want >= sh->slots)
		return;
	ns = set_new(ix, want);
	if (!ns)
		return; /* keep the big one: slower to walk, never wrong */
	rehash_limit(want);
	while (ck_rhs_next(&s->rhs, &it, &e)) {
		const void *map = ns->rhs.map;

		/* e is stored tagged already */
		if (!ck_rhs_put_unique(&ns->rhs, ck_hash_cb(e, (unsigned long)(uintptr_t)ix), e)) {
			ck_rhs_destroy(&ns->rhs);
			free(ns);
			return;
		}
		if (ns->rhs.map != map)
			want <<= 1; /* ck's own grow on a probe overflow */
	}
	sh->slots = want;
	atomic_store_explicit(&sh->slots_seen, want, memory_order_relaxed);
	/* release: the new set's contents before readers load the pointer. */
	atomic_store_explicit(&sh->set, ns, memory_order_release);
	cep_call_rcu(&s->rcu, s, set_free_rcu);
}

static int ck_remove(struct cep_index *base, uint64_t h, struct cep_ikey *k)
{
	struct ck_index *ix = (struct ck_index *)base;
	struct ck_shard *sh = shard_of(ix, h);
	struct ck_set *s;
	int ret = -ENOENT;

	pthread_mutex_lock(&sh->lock);
	s = atomic_load_explicit(&sh->set, memory_order_relaxed);
	rehash_limit(sh->slots); /* a shrink rebuilds smaller */
	/* Remove @k itself, never another entry with an equal key. */
	if (untag(ck_rhs_get(&s->rhs, (unsigned long)h, tagged(k, h))) == k) {
		shard_write_begin(sh); /* backward shift, then maybe a new set */
		if (untag(ck_rhs_remove(&s->rhs, (unsigned long)h, tagged(k, h))) == k) {
			atomic_store_explicit(&sh->count,
					      atomic_load_explicit(&sh->count, memory_order_relaxed) - 1,
					      memory_order_relaxed);
			shard_shrink(ix, sh, s);
			ret = 0;
		}
		shard_write_end(sh);
	}
	pthread_mutex_unlock(&sh->lock);
	return ret;
}

static int ck_for_each(struct cep_index *base, void (*fn)(struct cep_ikey *k, void *ctx),
		       void *ctx)
{
	struct ck_index *ix = (struct ck_index *)base;

	for (unsigned i = 0; i < ix->nshards; i++) {
		struct ck_shard *sh = &ix->shard[i];
		ck_rhs_iterator_t it = CK_RHS_ITERATOR_INITIALIZER;
		struct cep_ikey **snap;
		size_t n = 0, cap;
		void *e;

		/* Snapshot under the lock, visit outside it: @fn may remove,
		 * and a removal shifts entries under a live iterator. */
		pthread_mutex_lock(&sh->lock);
		cap = atomic_load_explicit(&sh->count, memory_order_relaxed);
		snap = malloc((cap ? cap : 1) * sizeof(*snap));
		if (!snap) {
			pthread_mutex_unlock(&sh->lock);
			return -ENOMEM;
		}
		while (n < cap && ck_rhs_next(&atomic_load_explicit(&sh->set,
				memory_order_relaxed)->rhs, &it, &e))
			snap[n++] = untag(e);
		pthread_mutex_unlock(&sh->lock);
		for (size_t j = 0; j < n; j++) {
			cep_tsan_acquire(snap[j]);
			fn(snap[j], ctx);
		}
		free(snap);
	}
	return 0;
}

/* Sum of one per-shard figure (relaxed: approximate while writers run). */
static size_t shard_sum(struct cep_index *base, bool slots)
{
	struct ck_index *ix = (struct ck_index *)base;
	size_t n = 0;

	for (unsigned i = 0; i < ix->nshards; i++)
		n += atomic_load_explicit(slots ? &ix->shard[i].slots_seen : &ix->shard[i].count,
					  memory_order_relaxed);
	return n;
}

static size_t ck_buckets(struct cep_index *base)
{
	return shard_sum(base, true);
}

static size_t ck_count(struct cep_index *base)
{
	return shard_sum(base, false);
}

const struct cep_index_ops cep_index_ck_ops = {
	.name = "ck_rhs",
	.create = ck_create,
	.destroy = ck_destroy,
	.lookup = ck_lookup,
	.insert = ck_insert,
	.remove = ck_remove,
	.maintain = NULL,
	.for_each = ck_for_each,
	.buckets = ck_buckets,
	.count = ck_count,
};
