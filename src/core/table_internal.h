/* SPDX-License-Identifier: MIT */
/*
 * Private layout of the CEP table, CEPs and QP records (table.c, binding.c);
 * the indexes behind them are in index.h.
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

#include "index.h"
#include "rcu.h"
#include "slab.h"
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

/* Secondary keys: per CEP and index, NONE -> CLAIMED -> PRESENT, back to
 * NONE when removed (the CEP may claim a key again: a fresh entry), GONE
 * for good once the CEP is destroyed. CLAIMED: one thread owns the slot
 * (an inserter, or a remover taking PRESENT back); the owner writes
 * cep.key[] and publishes or unpublishes the entry. seq_cst throughout. */
enum { KEY_NONE = 0, KEY_CLAIMED = 1, KEY_PRESENT = 2, KEY_GONE = 3 };
enum { IDX_REMOTE_ID, IDX_REMOTE_QPN, IDX_LISTEN, IDX_NKEYS };

#define CEP_MAGIC_LIVE  0x43455021u /* "CEP!" */
#define CEP_MAGIC_FREED 0xdeadbeefu

/* Objects in an index start with their key (struct cep_ikey). With the
 * rculfhash index, each is allocated CEP_INDEX_NODE_SIZE bytes further
 * in: its node sits just before it (node_delta = -CEP_INDEX_NODE_SIZE),
 * on the key's cache line; the ck index needs no node. */

/* One secondary key of a CEP: allocated per insert, freed after a grace
 * period once removed, so a key removed and inserted again never reuses
 * memory a reader may still be comparing. */
struct cep_kentry {
	struct cep_ikey key;       /* written before publication, then const */
	struct cep *cep;           /* const */
	struct cep_table *table;   /* const: its RCU free may follow the CEP's */
	struct rcu_head rcu;
};

struct cep {
	/* A comm-ID lookup touches only this first line: the key, the count,
	 * the state. */
	struct cep_ikey comm_key;  /* .a: local comm ID; const after publish */
	_Atomic uint32_t refcnt;   /* 0 = being freed; get only if not zero */
	_Atomic uint32_t state;    /* LIVE -> DESTROYING: one winner destroys */
	uint32_t magic;            /* LIVE until the RCU free */
	_Atomic uint8_t key_state[IDX_NKEYS]; /* seq_cst: Dekker with state */
	struct cep_table *table;   /* const */
	_Atomic(void *) context;   /* user pointer; relaxed: no ordering implied */
	_Atomic uint64_t qp_link;  /* see CEP_LINK_*; seq_cst */
	/* Written by the slot's owner (CLAIMED) before PRESENT, read by whoever
	 * takes PRESENT away: ordered by key_state's RMWs. */
	struct cep_kentry *key[IDX_NKEYS];
	/* The QP record of a LINKED link, with a reference of its own: written
	 * by the binder before its CAS BINDING -> LINKED, read and cleared by
	 * whoever takes LINKED away (ordered by those RMWs on qp_link), so a
	 * release never looks the QPN up again (a lookup it cannot afford to
	 * have miss: the word would keep a destroyed CEP's cid). */
	struct cep_qp *qp_rec;
	struct rcu_head rcu;
};

struct cep_qp {
	struct cep_ikey key;         /* .a: qpn; const */
	_Atomic uint32_t binding;    /* INVALID / RESERVED / cid */
	/* One for the QPN index (dropped at unregister), one per CEP link
	 * that names this record (cep.qp_rec); the last put frees it through
	 * call_rcu. Taken only if not zero, under the read lock. */
	_Atomic uint32_t refs;
	struct cep_table *table;     /* const */
	struct rcu_head rcu;
};

/* Kinds of indexed objects, each from its own cache (slab.h). */
enum { CEP_OBJ_CEP, CEP_OBJ_KENTRY, CEP_OBJ_QP, CEP_OBJ_KINDS };

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
	struct cep_index *comm;      /* local comm ID -> cep.comm_key */
	struct cep_index *qps;       /* qpn -> cep_qp.key */
	struct cep_index *keys[IDX_NKEYS]; /* -> cep_kentry.key */
	const struct cep_index_ops *index; /* the implementation of all five */
	size_t node_pre;             /* bytes before each indexed object (rculfhash node) */
	struct cep_slab slab[CEP_OBJ_KINDS]; /* indexed objects, by kind */
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

/* binding.c: called by whoever took a LINKED link away from @cep
 * (cep_destroy, cep_unbind): clear the word of the QP record the link
 * named if it still holds our cid, and drop the link's reference on the
 * record. Any thread; no lock; the record is the CEP's own (no lookup). */
void cep_binding_release(struct cep *cep);

/* binding.c: a QP record's references (see cep_qp.refs). put: the last
 * one frees it after a grace period. Any thread. */
void cep_qp_put(struct cep_qp *qp);

/* table.c: call @fn on every CEP of the comm-ID index, with a reference
 * held and inside a read-side section (@fn must not wait for a grace
 * period). For teardown paths (cep_cm_destroy). */
void cep_table_for_each(struct cep_table *t, void (*fn)(struct cep *cep, void *ctx), void *ctx);

/* binding.c: RCU callback freeing a QP record. */
void cep_qp_free_rcu(struct rcu_head *head);

/* binding.c: RCU lookup of a QP record. Caller holds the read lock. */
struct cep_qp *cep_qp_find(struct cep_table *t, uint32_t qpn);

/* table.c: an indexed object of one kind (zeroed), with room before it
 * for the index's node; freed by cep_obj_free (after a grace period if it
 * was ever published). Any thread. */
void *cep_obj_alloc(struct cep_table *t, int kind);
void cep_obj_free(struct cep_table *t, int kind, void *obj);
/* Bytes the table's object caches hold (statistics). */
size_t cep_table_obj_bytes(struct cep_table *t);

/* table.c: index hashes (the functions each index was created with). */
uint64_t cep_hash_qpn(const struct cep_table *t, uint32_t qpn);

/* The index a table uses when its attr says CEP_TABLE_INDEX_DEFAULT and
 * CEP_INDEX is not set (docs/architecture.md: chosen by measurement). */
#ifndef CEP_TABLE_INDEX_BUILTIN
#define CEP_TABLE_INDEX_BUILTIN CEP_TABLE_INDEX_CK
#endif

/* table.c, for tests and benchmarks: the buckets (or slots) and entries
 * of one index now, and the name of the table's index implementation. */
enum { CEP_TABLE_IX_COMM, CEP_TABLE_IX_QPN, CEP_TABLE_IX_REMOTE_ID, CEP_TABLE_IX_REMOTE_QPN,
       CEP_TABLE_IX_LISTEN };
int cep_table_index_info(struct cep_table *t, int which, size_t *buckets, size_t *count);
const char *cep_table_index_name(const struct cep_table *t);

#endif /* CEP_TABLE_INTERNAL_H */
