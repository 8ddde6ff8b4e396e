/* SPDX-License-Identifier: MIT */
/*
 * Private layout of the CEP table, CEPs and QP records (table.c, binding.c).
 * Field-by-field concurrency rules are next to each field; the states and
 * transitions are in docs/concurrency.md.
 */
#ifndef CEP_TABLE_INTERNAL_H
#define CEP_TABLE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cep/table.h>

#include "rcu.h"
#include "table_keys.h"
#include "yield.h"

/* cep.state */
enum { CEP_LIVE = 1, CEP_DESTROYING = 2, CEP_FREED = 3 };

/* cep.qp_link: which QP owns the binding's reference on this CEP.
 * UNLINKED / BINDING | qpn (a bind in progress) / LINKED | qpn / DEAD
 * (destroyed: terminal). Whoever moves it away from BINDING or LINKED owns
 * (and drops) the binding's reference. BINDING keeps an unbind-and-rebind
 * on another thread from being mistaken for our own link (ABA, found by
 * tests/model/binding.pml). */
#define CEP_LINK_UNLINKED 0ull
#define CEP_LINK_LINKED   (1ull << 32)
#define CEP_LINK_DEAD     (2ull << 32)
#define CEP_LINK_BINDING  (3ull << 32)
#define CEP_LINK_KIND(l)  ((l) & ~0xffffffffull)
#define CEP_LINK_QPN(l)   ((uint32_t)((l) & 0xffffffu))

/* Secondary keys: per CEP and index, NONE -> CLAIMED -> PRESENT -> GONE.
 * CLAIMED: an inserter owns the node; PRESENT: in the hash; GONE: removed,
 * never again (a node may not be re-added before a grace period). */
enum { KEY_NONE = 0, KEY_CLAIMED = 1, KEY_PRESENT = 2, KEY_GONE = 3 };
enum { IDX_REMOTE_ID, IDX_REMOTE_QPN, IDX_LISTEN, IDX_NKEYS };

#define CEP_MAGIC_LIVE  0x43455021u /* "CEP!" */
#define CEP_MAGIC_FREED 0xdeadbeefu

struct cep {
	/* A comm-ID lookup touches only this first part: the node, the key,
	 * the count and the state (kept together for the cache). */
	struct cds_lfht_node comm_node;          /* comm-ID index */
	uint32_t local_comm_id;                  /* immutable after publish */
	_Atomic uint32_t refcnt;   /* 0 = being freed; get only if not zero */
	_Atomic uint32_t state;    /* LIVE -> DESTROYING: one winner destroys */
	uint32_t magic;                          /* LIVE until the RCU free */
	_Atomic(void *) context;   /* user pointer; relaxed: no ordering implied */
	struct cep_table *table;                 /* immutable */
	_Atomic uint64_t qp_link;  /* see CEP_LINK_*; seq_cst */
	_Atomic uint8_t key_state[IDX_NKEYS]; /* seq_cst: Dekker with state */
	struct cds_lfht_node key_node[IDX_NKEYS]; /* secondary indexes */
	/* Keys: written by the inserter while CLAIMED, before publication
	 * (release in the insert), read by match functions after it. */
	uint32_t rid_comm_id;
	uint32_t rqpn;
	uint64_t rid_guid;
	uint64_t rqpn_guid;
	uint64_t listen_sid;
	uint64_t listen_mask;
	struct rcu_head rcu;
};

struct cep_qp {
	struct cds_lfht_node node;
	uint32_t qpn;                /* immutable */
	_Atomic uint32_t binding;    /* INVALID / RESERVED / cid */
	struct rcu_head rcu;
};

/* Statistics, sharded so that hot paths on different threads do not share
 * a cache line; relaxed increments, summed on read. */
#define CEP_STAT_SHARDS 16
struct cep_stat_shard {
	_Atomic uint64_t allocated, freed, destroyed, bound, bind_fail,
		collisions, qps_added, qps_removed, refcnt_underflow, double_free;
} __attribute__((aligned(64)));

/* Masks in use by listeners: replaced copy-on-write under listen_lock,
 * read lock-free (acquire load), old copies freed after a grace period. */
struct cep_mask_set {
	struct rcu_head rcu;
	unsigned n;
	struct {
		uint64_t mask;
		unsigned users;
	} m[];
};

struct cep_table {
	struct cds_lfht *comm;       /* local comm ID -> cep */
	struct cds_lfht *qps;        /* qpn -> cep_qp */
	struct cds_lfht *keys[IDX_NKEYS];
	uint64_t hash_seed;          /* random: peers cannot aim at one bucket */
	cep_teardown_fn teardown;
	cep_release_fn release;
	void *ctx;
	pthread_mutex_t listen_lock; /* serialises mask-set updates only */
	_Atomic(struct cep_mask_set *) masks;
	struct cep_stat_shard stats[CEP_STAT_SHARDS];
};

struct cep_stat_shard *cep_stat_shard(struct cep_table *t);
#define CEP_STAT_INC(t, field) \
	atomic_fetch_add_explicit(&cep_stat_shard(t)->field, 1, memory_order_relaxed)

uint64_t cep_hash64(uint64_t seed, uint64_t key);

/* binding.c: called by cep_destroy() after it won DESTROYING and took the
 * link: clear the QP's word if it still holds our cid. In a read side. */
void cep_binding_release(struct cep_table *t, uint32_t qpn, uint32_t cid);

/* table.c: call @fn on every CEP of the comm-ID index, with a reference
 * held and inside a read-side section (@fn must not wait for a grace
 * period). For teardown paths (cep_cm_destroy). */
void cep_table_for_each(struct cep_table *t, void (*fn)(struct cep *cep, void *ctx), void *ctx);

/* table.c: make @cep's removed secondary keys (GONE) insertable again,
 * after a grace period (synchronize_rcu: not from a read side). For an id
 * that connects again. 0, -ESTALE (destroyed). */
int cep_keys_recycle(struct cep *cep);

/* binding.c: RCU callback freeing a QP record. */
void cep_qp_free_rcu(struct rcu_head *head);

/* binding.c: RCU lookup of a QP record. Caller holds the read lock. */
struct cep_qp *cep_qp_find(struct cep_table *t, uint32_t qpn);

#endif /* CEP_TABLE_INTERNAL_H */
