/* SPDX-License-Identifier: MIT */
/*
 * The hash map under the two locked baselines (global mutex, rwlock): open
 * hashing with intrusive chains, power-of-two buckets, doubled when the load
 * factor passes 1. Not thread-safe: the caller's lock protects every call.
 * Entries carry an atomic reference count so a reference outlives the lock.
 */
#ifndef CEP_BENCH_BASE_HASHMAP_H
#define CEP_BENCH_BASE_HASHMAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct hm_entry {
	struct hm_entry *next;
	uint32_t id;
	uint64_t hash;
	/* Taken under the map's lock, dropped without it: atomic so a put
	 * outside the lock cannot race a get inside it. */
	atomic_uint ref;
	void *context; /* the same user pointer a CEP carries */
};

struct hm_map {
	struct hm_entry **buckets;
	size_t mask;  /* buckets - 1 */
	size_t count;
	uint64_t seed;  /* hash seed, random per map */
};

int hm_init(struct hm_map *m, size_t initial_buckets);
/* Frees the bucket array and any entries still linked. */
void hm_fini(struct hm_map *m);
struct hm_entry *hm_find(const struct hm_map *m, uint32_t id, uint64_t hash);
/* 0, -EEXIST (id present: nothing changes). Grows the table first when
 * the load factor would pass 1; a failed grow only keeps chains longer. */
int hm_insert_unique(struct hm_map *m, struct hm_entry *e);
/* 0 or -ENOENT. */
int hm_remove(struct hm_map *m, struct hm_entry *e);

/* A new entry with two references (the table's and the caller's). */
struct hm_entry *hm_entry_new(const struct hm_map *m, uint32_t id);
/* Drop a reference; the last frees the entry (it is unlinked by then:
 * the table's reference is dropped only after hm_remove). */
void hm_entry_put(struct hm_entry *e);

#endif /* CEP_BENCH_BASE_HASHMAP_H */
