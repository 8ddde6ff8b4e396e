/* SPDX-License-Identifier: MIT */
/*
 * The interface every `table` implementation offers to the driver in
 * table.c: libcep and the three baselines are keyed the same way (32-bit
 * local comm ID -> object with a reference count) and do the same work per
 * operation (lookup = find + get + put; insert = create with a fresh random
 * ID; delete = unpublish + drop the table's and the caller's references).
 */
#ifndef CEP_BENCH_TABLE_IMPL_H
#define CEP_BENCH_TABLE_IMPL_H

#include <stddef.h>
#include <stdint.h>

struct tbl_impl {
	const char *name;
	/* Create/destroy the table, from the main thread. @initial_buckets is
	 * a power of two; every impl still resizes itself as it grows.
	 * destroy runs after every worker has deleted its entries and exited. */
	int (*create)(size_t initial_buckets, void **tbl);
	void (*destroy)(void *tbl);
	/* Per worker thread, before its first and after its last operation. */
	void (*thread_init)(void *tbl);
	void (*thread_fini)(void *tbl);
	/* Create an entry with a fresh random ID (retrying on collision), keep
	 * one caller reference in *handle and the ID in *id. 0 or -errno.
	 * @rng is the calling thread's PRNG state, for impls that draw IDs. */
	int (*insert)(void *tbl, uint64_t *rng, void **handle, uint32_t *id);
	/* Unpublish the entry and drop the table's and the caller's references. */
	int (*remove)(void *tbl, void *handle);
	/* Find @id, take a reference, drop it. 0 (hit) or -ENOENT (miss). */
	int (*lookup)(void *tbl, uint32_t id);
};

extern const struct tbl_impl tbl_impl_libcep_ck;
extern const struct tbl_impl tbl_impl_libcep_lfht;
extern const struct tbl_impl tbl_impl_rculfhash;
extern const struct tbl_impl tbl_impl_rwlock;
extern const struct tbl_impl tbl_impl_mutex;
extern const struct tbl_impl tbl_impl_ck_rhs;
extern const struct tbl_impl tbl_impl_ck_ht;

/* A fresh ID for the baselines: never 0 nor ~0, like a libcep comm ID. */
static inline uint32_t tbl_draw_id(uint64_t *rng)
{
	uint32_t id;

	do {
		uint64_t z = (*rng += 0x9e3779b97f4a7c15ull);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		id = (uint32_t)((z ^ (z >> 31)) >> 32);
	} while (id == 0 || id == 0xffffffffu);
	return id;
}

/* The hash the baselines use for a comm ID: the one libcep's comm-ID index
 * uses (cep_hash64 in src/core/table.c, splitmix64 finaliser with a per-table
 * random seed), inline as it is there. table.c checks at start-up that the
 * two agree, so the baselines cannot drift from libcep. */
static inline uint64_t tbl_hash_comm_id(uint64_t seed, uint32_t id)
{
	uint64_t z = (uint64_t)id + seed + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A random per-table hash seed, as libcep draws one per table. */
uint64_t tbl_hash_seed(void);

#endif /* CEP_BENCH_TABLE_IMPL_H */
