/* SPDX-License-Identifier: MIT */
/*
 * Chained hash map for the locked baselines; see base_hashmap.h. A resize
 * rehashes every entry at once, under the caller's (write) lock, as a
 * kernel-style table behind one lock must.
 */
#include <errno.h>
#include <stdlib.h>

#include "base_hashmap.h"
#include "table_impl.h"

int hm_init(struct hm_map *m, size_t initial_buckets)
{
	size_t n = 1;

	while (n < initial_buckets)
		n <<= 1;
	m->buckets = calloc(n, sizeof(*m->buckets));
	if (!m->buckets)
		return -ENOMEM;
	m->mask = n - 1;
	m->count = 0;
	m->seed = tbl_hash_seed();
	return 0;
}

void hm_fini(struct hm_map *m)
{
	for (size_t i = 0; i <= m->mask; i++) {
		struct hm_entry *e = m->buckets[i];

		while (e) {
			struct hm_entry *next = e->next;

			free(e);
			e = next;
		}
	}
	free(m->buckets);
	m->buckets = NULL;
}

struct hm_entry *hm_find(const struct hm_map *m, uint32_t id, uint64_t hash)
{
	struct hm_entry *e = m->buckets[hash & m->mask];

	while (e && e->id != id)
		e = e->next;
	return e;
}

static void hm_grow(struct hm_map *m)
{
	size_t n = (m->mask + 1) * 2;
	struct hm_entry **b = calloc(n, sizeof(*b));

	if (!b)
		return;
	for (size_t i = 0; i <= m->mask; i++) {
		struct hm_entry *e = m->buckets[i];

		while (e) {
			struct hm_entry *next = e->next;
			size_t k = e->hash & (n - 1);

			e->next = b[k];
			b[k] = e;
			e = next;
		}
	}
	free(m->buckets);
	m->buckets = b;
	m->mask = n - 1;
}

int hm_insert_unique(struct hm_map *m, struct hm_entry *e)
{
	struct hm_entry **head;

	if (hm_find(m, e->id, e->hash))
		return -EEXIST;
	if (m->count + 1 > m->mask + 1)
		hm_grow(m);
	head = &m->buckets[e->hash & m->mask];
	e->next = *head;
	*head = e;
	m->count++;
	return 0;
}

int hm_remove(struct hm_map *m, struct hm_entry *e)
{
	struct hm_entry **pp = &m->buckets[e->hash & m->mask];

	while (*pp && *pp != e)
		pp = &(*pp)->next;
	if (!*pp)
		return -ENOENT;
	*pp = e->next;
	e->next = NULL;
	m->count--;
	return 0;
}

struct hm_entry *hm_entry_new(const struct hm_map *m, uint32_t id)
{
	struct hm_entry *e = malloc(sizeof(*e));

	if (!e)
		return NULL;
	e->next = NULL;
	e->id = id;
	e->hash = tbl_hash_comm_id(m->seed, id);
	atomic_init(&e->ref, 2);
	e->context = NULL;
	return e;
}

void hm_entry_put(struct hm_entry *e)
{
	/* acq_rel: the thread that frees must see every other holder's last
	 * use of the entry before its decrement. */
	if (atomic_fetch_sub_explicit(&e->ref, 1, memory_order_acq_rel) == 1)
		free(e);
}
