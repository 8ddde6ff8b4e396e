/* SPDX-License-Identifier: MIT */
/*
 * Baseline: raw liburcu rculfhash (urcu-memb flavour) with no libcep layer,
 * the floor for libcep's overhead. Same key, hash, reference rule and
 * reclamation as libcep: lookups under the RCU read lock take a reference
 * with increment-if-not-zero; the last put frees through call_rcu.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

#include "table_impl.h"
#include "core/tsan.h" /* the RCU edges TSan cannot see, as libcep states them */

struct lf_entry {
	struct cds_lfht_node node;
	uint32_t id;
	/* Readers increment it if not zero while the last put may run in
	 * another thread: atomic so a reader cannot revive a dying entry. */
	atomic_uint ref;
	void *context;
	struct rcu_head rcu;
};

struct lf_tbl {
	struct cds_lfht *ht;
	uint64_t seed; /* hash seed, random per table */
};

static int lf_create(size_t initial_buckets, void **out)
{
	struct lf_tbl *t = malloc(sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->seed = tbl_hash_seed();
	/* the same sizing and flags as libcep's comm-ID index */
	t->ht = cds_lfht_new_flavor(initial_buckets, 64, 0,
				    CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
				    &urcu_memb_flavor, NULL);
	if (!t->ht) {
		free(t);
		return -ENOMEM;
	}
	*out = t;
	return 0;
}

/* Main thread, after every worker removed its entries and exited. */
static void lf_destroy(void *tbl)
{
	struct lf_tbl *t = tbl;

	urcu_memb_barrier(); /* every call_rcu free has run */
	cds_lfht_destroy(t->ht, NULL);
	free(t);
}

static void lf_thread_init(void *tbl)
{
	(void)tbl;
	urcu_memb_register_thread();
}

static void lf_thread_fini(void *tbl)
{
	(void)tbl;
	urcu_memb_unregister_thread();
}

static void lf_free_cb(struct rcu_head *head)
{
	struct lf_entry *e = caa_container_of(head, struct lf_entry, rcu);

	cep_tsan_acquire(&cep_tsan_grace_period);
	cep_tsan_acquire(e);
	free(e);
}

static inline void lf_read_unlock(void)
{
	/* Reads in the section happen before any callback freeing them. */
	cep_tsan_release(&cep_tsan_grace_period);
	urcu_memb_read_unlock();
}

static void lf_put(struct lf_entry *e)
{
	/* acq_rel: the freeing thread sees every holder's last use. */
	if (atomic_fetch_sub_explicit(&e->ref, 1, memory_order_acq_rel) == 1) {
		cep_tsan_release(e); /* our last writes before the free */
		urcu_memb_call_rcu(&e->rcu, lf_free_cb);
	}
}

static int lf_match(struct cds_lfht_node *node, const void *key)
{
	struct lf_entry *e = caa_container_of(node, struct lf_entry, node);

	cep_tsan_acquire(e); /* pairs with the release before publication */
	return e->id == *(const uint32_t *)key;
}

/* Registered thread, outside a read-side section. */
static int lf_insert(void *tbl, uint64_t *rng, void **handle, uint32_t *id)
{
	struct lf_tbl *t = tbl;
	struct lf_entry *e = malloc(sizeof(*e));
	struct cds_lfht_node *got;

	if (!e)
		return -ENOMEM;
	cds_lfht_node_init(&e->node);
	atomic_init(&e->ref, 2); /* the table's and the caller's */
	e->context = NULL;
	for (;;) {
		e->id = tbl_draw_id(rng);
		cep_tsan_release(e); /* publication: fields before readers */
		urcu_memb_read_lock();
		got = cds_lfht_add_unique(t->ht, tbl_hash_comm_id(t->seed, e->id), lf_match,
					  &e->id, &e->node);
		lf_read_unlock();
		if (got == &e->node)
			break;
	}
	*handle = e;
	*id = e->id;
	return 0;
}

/* Registered thread; once per entry (the owner's handle). */
static int lf_remove(void *tbl, void *handle)
{
	struct lf_tbl *t = tbl;
	struct lf_entry *e = handle;
	int ret;

	urcu_memb_read_lock();
	ret = cds_lfht_del(t->ht, &e->node);
	lf_read_unlock();
	if (ret == 0)
		lf_put(e); /* the table's reference */
	lf_put(e);         /* the caller's */
	return ret ? -ENOENT : 0;
}

/* Registered thread. The read section keeps a found entry's memory alive
 * until the increment-if-not-zero decides whether it is still live. */
static int lf_lookup(void *tbl, uint32_t id)
{
	struct lf_tbl *t = tbl;
	struct cds_lfht_iter iter;
	struct cds_lfht_node *node;
	struct lf_entry *e = NULL;

	urcu_memb_read_lock();
	cds_lfht_lookup(t->ht, tbl_hash_comm_id(t->seed, id), lf_match, &id, &iter);
	node = cds_lfht_iter_get_node(&iter);
	if (node) {
		unsigned int r;

		e = caa_container_of(node, struct lf_entry, node);
		r = atomic_load_explicit(&e->ref, memory_order_relaxed);
		/* CAS loop: never raise a count that reached zero (the entry
		 * is already on its way to call_rcu). */
		do {
			if (r == 0) {
				e = NULL;
				break;
			}
		} while (!atomic_compare_exchange_weak_explicit(&e->ref, &r, r + 1,
								memory_order_acquire,
								memory_order_relaxed));
	}
	lf_read_unlock();
	if (!e)
		return -ENOENT;
	lf_put(e);
	return 0;
}

const struct tbl_impl tbl_impl_rculfhash = {
	.name = "rculfhash",
	.create = lf_create,
	.destroy = lf_destroy,
	.thread_init = lf_thread_init,
	.thread_fini = lf_thread_fini,
	.insert = lf_insert,
	.remove = lf_remove,
	.lookup = lf_lookup,
};
