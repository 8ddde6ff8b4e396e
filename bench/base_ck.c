/* SPDX-License-Identifier: MIT */
/*
 * Baselines: raw ConcurrencyKit hash tables with no libcep layer, the floor
 * for libcep's overhead over its ck index. ck_rhs (robin hood set of object
 * pointers, SPMC) and ck_ht (direct mode: the comm ID and the object
 * pointer inline in the slot, SPMC). Readers are lock-free under the urcu-memb
 * read lock; writers take one mutex (ck allows one writer at a time); maps
 * replaced by a grow are freed through call_rcu (ck_malloc's free with
 * defer); the last put of an entry frees it through call_rcu, as libcep does.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <ck_ht.h>
#include <ck_rhs.h>
#include <urcu/urcu-memb.h>

#include "table_impl.h"
#include "core/tsan.h" /* the edges TSan cannot see, as libcep states them */

struct ck_entry {
	uint32_t id; /* first: ck_rhs's compare reads a lookup key the same way */
	/* Readers increment it if not zero while the last put may run in
	 * another thread: atomic so a reader cannot revive a dying entry. */
	atomic_uint ref;
	void *context;
	struct rcu_head rcu;
};

/* ---- ck_malloc with deferred frees through call_rcu ------------------- */

struct ck_block {
	struct rcu_head rcu;
	max_align_t data[]; /* what ck sees */
};

static void *ckb_malloc(size_t size)
{
	struct ck_block *b = malloc(sizeof(*b) + size);

	return b ? b->data : NULL;
}

static void ckb_free_cb(struct rcu_head *head)
{
	struct ck_block *b = caa_container_of(head, struct ck_block, rcu);

	cep_tsan_acquire(&cep_tsan_grace_period);
	free(b);
}

/* defer: readers may still probe the old map; free it after a grace period. */
static void ckb_free(void *p, size_t size, bool defer)
{
	struct ck_block *b;

	(void)size;
	if (!p)
		return;
	b = caa_container_of((max_align_t *)p, struct ck_block, data[0]);
	if (defer)
		urcu_memb_call_rcu(&b->rcu, ckb_free_cb);
	else
		free(b);
}

static void *ckb_realloc(void *p, size_t old, size_t size, bool defer)
{
	(void)p, (void)old, (void)size, (void)defer;
	return NULL; /* ck_rhs and ck_ht never realloc */
}

static struct ck_malloc ckb_alloc = { ckb_malloc, ckb_realloc, ckb_free };

/* ---- shared entry life ------------------------------------------------ */

struct ck_tbl {
	pthread_mutex_t wlock; /* one writer at a time (ck's SPMC contract) */
	uint64_t seed;
	union {
		ck_rhs_t rhs;
		ck_ht_t ht;
	};
};

static void ck_entry_free_cb(struct rcu_head *head)
{
	struct ck_entry *e = caa_container_of(head, struct ck_entry, rcu);

	cep_tsan_acquire(&cep_tsan_grace_period);
	cep_tsan_acquire(e);
	free(e);
}

static void ck_entry_put(struct ck_entry *e)
{
	/* acq_rel: the freeing thread sees every holder's last use. */
	if (atomic_fetch_sub_explicit(&e->ref, 1, memory_order_acq_rel) == 1) {
		cep_tsan_release(e);
		urcu_memb_call_rcu(&e->rcu, ck_entry_free_cb);
	}
}

/* Increment-if-not-zero on an entry found under the read lock. */
static int ck_entry_get(struct ck_entry *e)
{
	unsigned int r = atomic_load_explicit(&e->ref, memory_order_relaxed);

	do {
		if (r == 0)
			return -ENOENT;
	} while (!atomic_compare_exchange_weak_explicit(&e->ref, &r, r + 1, memory_order_acquire,
							 memory_order_relaxed));
	return 0;
}

static inline void ck_read_unlock(void)
{
	cep_tsan_release(&cep_tsan_grace_period);
	urcu_memb_read_unlock();
}

/* A lookup's end: @e found under the read lock (or NULL); take and drop a
 * reference as every impl's lookup does. Leaves the read side. */
static int ck_lookup_done(struct ck_entry *e)
{
	if (e) {
		cep_tsan_acquire(e); /* pairs with the release before the put */
		if (ck_entry_get(e))
			e = NULL;
	}
	ck_read_unlock();
	if (!e)
		return -ENOENT;
	ck_entry_put(e);
	return 0;
}

static void ck_thread_init(void *tbl)
{
	(void)tbl;
	urcu_memb_register_thread();
}

static void ck_thread_fini(void *tbl)
{
	(void)tbl;
	urcu_memb_unregister_thread();
}

static struct ck_tbl *ck_tbl_new(void)
{
	struct ck_tbl *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	pthread_mutex_init(&t->wlock, NULL);
	t->seed = tbl_hash_seed();
	return t;
}

static struct ck_entry *ck_entry_new(void)
{
	struct ck_entry *e = malloc(sizeof(*e));

	if (e) {
		atomic_init(&e->ref, 2); /* the table's and the caller's */
		e->context = NULL;
	}
	return e;
}

/* ---- ck_rhs ------------------------------------------------------------- */

static unsigned long rhs_hash(const void *obj, unsigned long seed)
{
	return (unsigned long)tbl_hash_comm_id(seed, ((const struct ck_entry *)obj)->id);
}

/* @stored: an entry in the set; @key: an entry or a lookup key (a uint32_t
 * where an entry has its id). */
static bool rhs_compare(const void *stored, const void *key)
{
	cep_tsan_acquire(stored); /* pairs with the release before the put */
	return ((const struct ck_entry *)stored)->id == *(const uint32_t *)key;
}

static int rhs_create(size_t initial_buckets, void **out)
{
	struct ck_tbl *t = ck_tbl_new();

	if (!t)
		return -ENOMEM;
	if (!ck_rhs_init(&t->rhs, CK_RHS_MODE_SPMC | CK_RHS_MODE_OBJECT, rhs_hash, rhs_compare,
			 &ckb_alloc, initial_buckets * 2, t->seed)) {
		free(t);
		return -ENOMEM;
	}
	*out = t;
	return 0;
}

static void rhs_destroy(void *tbl)
{
	struct ck_tbl *t = tbl;

	urcu_memb_barrier(); /* every deferred free has run */
	ck_rhs_destroy(&t->rhs);
	free(t);
}

static int rhs_insert(void *tbl, uint64_t *rng, void **handle, uint32_t *id)
{
	struct ck_tbl *t = tbl;
	struct ck_entry *e = ck_entry_new();
	bool ok;

	if (!e)
		return -ENOMEM;
	do {
		e->id = tbl_draw_id(rng);
		cep_tsan_release(e); /* publication: fields before readers */
		pthread_mutex_lock(&t->wlock);
		/* ck_rhs_put refuses a present key (put_unique would not look) */
		ok = ck_rhs_put(&t->rhs, tbl_hash_comm_id(t->seed, e->id), e);
		pthread_mutex_unlock(&t->wlock);
	} while (!ok); /* a duplicate ID (or no memory: retried alike here) */
	*handle = e;
	*id = e->id;
	return 0;
}

static int rhs_remove(void *tbl, void *handle)
{
	struct ck_tbl *t = tbl;
	struct ck_entry *e = handle;
	void *got;

	pthread_mutex_lock(&t->wlock);
	got = ck_rhs_remove(&t->rhs, tbl_hash_comm_id(t->seed, e->id), e);
	pthread_mutex_unlock(&t->wlock);
	if (got == e)
		ck_entry_put(e); /* the table's reference */
	ck_entry_put(e);
	return got == e ? 0 : -ENOENT;
}

static int rhs_lookup(void *tbl, uint32_t id)
{
	struct ck_tbl *t = tbl;
	struct ck_entry *e;

	urcu_memb_read_lock();
	e = ck_rhs_get(&t->rhs, tbl_hash_comm_id(t->seed, id), &id);
	return ck_lookup_done(e);
}

const struct tbl_impl tbl_impl_ck_rhs = {
	.name = "ck_rhs",
	.create = rhs_create,
	.destroy = rhs_destroy,
	.thread_init = ck_thread_init,
	.thread_fini = ck_thread_fini,
	.insert = rhs_insert,
	.remove = rhs_remove,
	.lookup = rhs_lookup,
};

/* ---- ck_ht (direct: key = comm ID, value = entry) ----------------------- */

static void ht_hash(ck_ht_hash_t *h, const void *key, size_t len, uint64_t seed)
{
	(void)len;
	h->value = tbl_hash_comm_id(seed, (uint32_t)*(const uintptr_t *)key);
}

static int ht_create(size_t initial_buckets, void **out)
{
	struct ck_tbl *t = ck_tbl_new();

	if (!t)
		return -ENOMEM;
	if (!ck_ht_init(&t->ht, CK_HT_MODE_DIRECT, ht_hash, &ckb_alloc, initial_buckets * 2,
			t->seed)) {
		free(t);
		return -ENOMEM;
	}
	*out = t;
	return 0;
}

static void ht_destroy(void *tbl)
{
	struct ck_tbl *t = tbl;

	urcu_memb_barrier();
	ck_ht_destroy(&t->ht);
	free(t);
}

static int ht_insert(void *tbl, uint64_t *rng, void **handle, uint32_t *id)
{
	struct ck_tbl *t = tbl;
	struct ck_entry *e = ck_entry_new();
	bool ok;

	if (!e)
		return -ENOMEM;
	do {
		ck_ht_entry_t ent;
		ck_ht_hash_t h;

		e->id = tbl_draw_id(rng);
		cep_tsan_release(e);
		pthread_mutex_lock(&t->wlock);
		ck_ht_hash_direct(&h, &t->ht, e->id);
		ck_ht_entry_key_set_direct(&ent, e->id);
		ok = !ck_ht_get_spmc(&t->ht, h, &ent);
		if (ok) {
			ck_ht_entry_set_direct(&ent, h, e->id, (uintptr_t)e);
			ok = ck_ht_put_spmc(&t->ht, h, &ent);
		}
		pthread_mutex_unlock(&t->wlock);
	} while (!ok);
	*handle = e;
	*id = e->id;
	return 0;
}

static int ht_remove(void *tbl, void *handle)
{
	struct ck_tbl *t = tbl;
	struct ck_entry *e = handle;
	ck_ht_entry_t ent;
	ck_ht_hash_t h;
	bool ok;

	pthread_mutex_lock(&t->wlock);
	ck_ht_hash_direct(&h, &t->ht, e->id);
	ck_ht_entry_key_set_direct(&ent, e->id);
	ok = ck_ht_remove_spmc(&t->ht, h, &ent);
	pthread_mutex_unlock(&t->wlock);
	if (ok)
		ck_entry_put(e);
	ck_entry_put(e);
	return ok ? 0 : -ENOENT;
}

static int ht_lookup(void *tbl, uint32_t id)
{
	struct ck_tbl *t = tbl;
	struct ck_entry *e = NULL;
	ck_ht_entry_t ent;
	ck_ht_hash_t h;

	urcu_memb_read_lock();
	ck_ht_hash_direct(&h, &t->ht, id);
	ck_ht_entry_key_set_direct(&ent, id);
	if (ck_ht_get_spmc(&t->ht, h, &ent))
		e = (struct ck_entry *)ck_ht_entry_value_direct(&ent);
	return ck_lookup_done(e);
}

const struct tbl_impl tbl_impl_ck_ht = {
	.name = "ck_ht",
	.create = ht_create,
	.destroy = ht_destroy,
	.thread_init = ck_thread_init,
	.thread_fini = ck_thread_fini,
	.insert = ht_insert,
	.remove = ht_remove,
	.lookup = ht_lookup,
};
