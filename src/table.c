/* SPDX-License-Identifier: MIT */
/*
 * The CEP table: CEP lifetimes (references, RCU frees), the comm-ID index
 * and the secondary indexes, all on liburcu rculfhash.
 *
 * Ordering guarantees: a CEP is fully initialised before it is published
 * (cds_lfht_add_unique is a release); a lookup that finds it sees that
 * initialisation (rcu_dereference in the hash) and takes a reference only
 * if the count is not zero. Destruction has one winner (CAS on state); the
 * last put hands the CEP to call_rcu, so readers inside a read-side
 * section never see freed memory.
 * Progress guarantees: lookups are wait-free apart from the hash's own
 * lock-free traversal; inserts and deletes are lock-free. Only listen and
 * unlisten take a mutex (listen_lock), never the MAD path.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "table_internal.h"

#define HT_FLAGS (CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING)

/* ---- helpers ----------------------------------------------------------- */

uint64_t cep_hash64(uint64_t seed, uint64_t key)
{
	/* splitmix64 finaliser: every key bit reaches every hash bit, which
	 * rculfhash needs (it orders by the bit-reversed hash). */
	uint64_t z = key + seed + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned long hash_pair(const struct cep_table *t, uint64_t a, uint64_t b)
{
	return (unsigned long)cep_hash64(t->hash_seed ^ cep_hash64(0, a), b);
}

static __thread unsigned stat_slot = ~0u;
static _Atomic unsigned stat_next;

struct cep_stat_shard *cep_stat_shard(struct cep_table *t)
{
	if (__builtin_expect(stat_slot == ~0u, 0))
		/* Spreads threads over shards; a clash only shares a line. */
		stat_slot = atomic_fetch_add_explicit(&stat_next, 1, memory_order_relaxed) %
			    CEP_STAT_SHARDS;
	return &t->stats[stat_slot];
}

/* Per-thread buffer of kernel CSPRNG output: comm IDs are unpredictable
 * without a syscall per ID and without any shared state. */
static __thread struct {
	uint32_t v[64];
	unsigned n;
} rnd;

static uint32_t random32(void)
{
	if (rnd.n == 0) {
		size_t got = 0;

		while (got < sizeof(rnd.v)) {
			ssize_t r = getrandom((char *)rnd.v + got, sizeof(rnd.v) - got, 0);

			if (r < 0) {
				if (errno == EINTR)
					continue;
				abort(); /* getrandom cannot fail on Linux >= 3.17 once seeded */
			}
			got += (size_t)r;
		}
		rnd.n = 64;
	}
	return rnd.v[--rnd.n];
}

#ifdef CEP_STRESS_YIELD
#include <sched.h>
#include <time.h>
void cep_stress_yield(void)
{
	uint32_t r = random32();

	if ((r & 7) == 0)
		sched_yield();
	else if ((r & 0xff) == 1) {
		struct timespec ts = { 0, 1000 * (long)((r >> 8) & 63) };

		nanosleep(&ts, NULL);
	}
}
#endif

/* ---- CEP lifetime ------------------------------------------------------ */

static struct cep *node_to_cep(struct cds_lfht_node *n)
{
	return caa_container_of(n, struct cep, comm_node);
}

static void cep_free_rcu(struct rcu_head *head)
{
	struct cep *cep = caa_container_of(head, struct cep, rcu);
	struct cep_table *t;

	cep_rcu_callback_begin(cep);
	t = cep->table;
	if (cep->magic != CEP_MAGIC_LIVE) {
		CEP_STAT_INC(t, double_free);
		cep_rcu_callback_end();
		return; /* never free twice */
	}
	cep->magic = CEP_MAGIC_FREED;
	atomic_store_explicit(&cep->state, CEP_FREED, memory_order_relaxed);
	if (t->release)
		t->release(cep, t->ctx);
	CEP_STAT_INC(t, freed);
	free(cep);
	cep_rcu_callback_end();
}

CEP_EXPORT void cep_get(struct cep *cep)
{
	/* Caller holds a reference, so the count cannot reach zero under us:
	 * relaxed is enough (as for any refcount increment). */
	atomic_fetch_add_explicit(&cep->refcnt, 1, memory_order_relaxed);
}

CEP_EXPORT int cep_get_unless_zero(struct cep *cep)
{
	uint32_t c = atomic_load_explicit(&cep->refcnt, memory_order_relaxed);

	do {
		if (c == 0)
			return -ENOENT; /* last put already ran: the CEP awaits its grace period */
		/* acquire: the last writer's release (put) ordered before our use. */
	} while (!atomic_compare_exchange_weak_explicit(&cep->refcnt, &c, c + 1,
							 memory_order_acquire,
							 memory_order_relaxed));
	return 0;
}

CEP_EXPORT void cep_put(struct cep *cep)
{
	/* acq_rel: every holder's accesses happen before the free below. */
	uint32_t old = atomic_fetch_sub_explicit(&cep->refcnt, 1, memory_order_acq_rel);

	if (old == 1) {
#ifdef CEP_PLANTED_BUG_B
		/* Planted bug (b): free at once, while RCU readers may still
		 * hold the pointer they found in an index. */
		cep_rcu_callback_begin(cep);
		cep_free_rcu(&cep->rcu);
#else
		cep_call_rcu(&cep->rcu, cep, cep_free_rcu);
#endif
	} else if (old == 0) {
		/* A put without a reference: count it, do not wrap around. */
		atomic_fetch_add_explicit(&cep->refcnt, 1, memory_order_relaxed);
		CEP_STAT_INC(cep->table, refcnt_underflow);
	}
}

/* ---- comm-ID index ----------------------------------------------------- */

static int match_comm(struct cds_lfht_node *n, const void *key)
{
	struct cep *cep = node_to_cep(n);

	cep_tsan_acquire(cep); /* pairs with the release before publication */
	return cep->local_comm_id == *(const uint32_t *)key;
}

static unsigned long hash_comm(const struct cep_table *t, uint32_t id)
{
	return (unsigned long)cep_hash64(t->hash_seed, id);
}

CEP_EXPORT int cep_create(struct cep_table *t, const struct cep_create_attr *attr,
			  struct cep **out)
{
	uint32_t mod = 1, rem = 0;
	void *context = NULL;
	struct cep *cep;

	if (!t || !out)
		return -EINVAL;
	if (attr) {
		if (attr->size < sizeof(*attr))
			return -EINVAL;
		if (attr->comm_id_mod > 1) {
			mod = attr->comm_id_mod;
			rem = attr->comm_id_rem;
			if (rem >= mod)
				return -EINVAL;
		}
		context = attr->context;
	}
	cep = calloc(1, sizeof(*cep));
	if (!cep)
		return -ENOMEM;
	cep->table = t;
	cep->magic = CEP_MAGIC_LIVE;
	atomic_init(&cep->refcnt, 2); /* the table's and the caller's */
	atomic_init(&cep->state, CEP_LIVE);
	atomic_init(&cep->qp_link, CEP_LINK_UNLINKED);
	for (int k = 0; k < IDX_NKEYS; k++)
		atomic_init(&cep->key_state[k], KEY_NONE);
	atomic_init(&cep->context, context);
	cds_lfht_node_init(&cep->comm_node);

	for (int tries = 0; tries < 64; tries++) {
		uint64_t id = random32();
		struct cds_lfht_node *got;

		id = id / mod * mod + rem;
		if (id == CEP_BINDING_INVALID || id >= CEP_BINDING_RESERVED)
			continue;
		cep->local_comm_id = (uint32_t)id;
		/* Publication: all fields above before any reader finds it. */
		cep_tsan_release(cep);
		cep_rcu_read_lock();
		got = cds_lfht_add_unique(t->comm, hash_comm(t, cep->local_comm_id),
					  match_comm, &cep->local_comm_id, &cep->comm_node);
		cep_rcu_read_unlock();
		if (got == &cep->comm_node) {
			CEP_STAT_INC(t, allocated);
			*out = cep;
			return 0;
		}
		CEP_STAT_INC(t, collisions);
	}
	/* Never published: free at once, no reader can hold it; not counted. */
	free(cep);
	return -EAGAIN;
}

/* Find a live CEP in @ht and take a reference. Read side held by caller. */
static struct cep *find_get(struct cds_lfht *ht, unsigned long hash,
			    cds_lfht_match_fct match, const void *key, int idx)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;
	struct cep *cep;

	CEP_YIELD();
	cds_lfht_lookup(ht, hash, match, key, &it);
	n = cds_lfht_iter_get_node(&it);
	if (!n)
		return NULL;
	cep = idx < 0 ? node_to_cep(n) : caa_container_of(n, struct cep, key_node[idx]);
	cep_tsan_acquire(cep); /* pairs with the release before publication */
	CEP_YIELD();
	if (cep_get_unless_zero(cep))
		return NULL;
	if (atomic_load(&cep->state) != CEP_LIVE) {
		cep_put(cep);
		return NULL;
	}
	return cep;
}

CEP_EXPORT int cep_lookup_comm_id(struct cep_table *t, uint32_t id, struct cep **out)
{
	struct cep *cep;

	if (!t || !out)
		return -EINVAL;
	cep_rcu_read_lock();
	cep = find_get(t->comm, hash_comm(t, id), match_comm, &id, -1);
	cep_rcu_read_unlock();
	*out = cep;
	return cep ? 0 : -ENOENT;
}

/* ---- secondary keys ---------------------------------------------------- */

struct pair_key {
	uint64_t a, b;
};

static int match_rid(struct cds_lfht_node *n, const void *key)
{
	const struct cep *cep = caa_container_of(n, struct cep, key_node[IDX_REMOTE_ID]);
	const struct pair_key *k = key;

	cep_tsan_acquire(cep);
	return cep->rid_comm_id == k->a && cep->rid_guid == k->b;
}

static int match_rqpn(struct cds_lfht_node *n, const void *key)
{
	const struct cep *cep = caa_container_of(n, struct cep, key_node[IDX_REMOTE_QPN]);
	const struct pair_key *k = key;

	cep_tsan_acquire(cep);
	return cep->rqpn == k->a && cep->rqpn_guid == k->b;
}

static int match_listen(struct cds_lfht_node *n, const void *key)
{
	const struct cep *cep = caa_container_of(n, struct cep, key_node[IDX_LISTEN]);
	const struct pair_key *k = key; /* (sid & mask, mask) */

	cep_tsan_acquire(cep);
	return (cep->listen_sid & cep->listen_mask) == k->a && cep->listen_mask == k->b;
}

static const cds_lfht_match_fct key_match[IDX_NKEYS] = {
	[IDX_REMOTE_ID] = match_rid,
	[IDX_REMOTE_QPN] = match_rqpn,
	[IDX_LISTEN] = match_listen,
};

static struct pair_key key_of(const struct cep *cep, int idx)
{
	switch (idx) {
	case IDX_REMOTE_ID:
		return (struct pair_key){ cep->rid_comm_id, cep->rid_guid };
	case IDX_REMOTE_QPN:
		return (struct pair_key){ cep->rqpn, cep->rqpn_guid };
	default:
		return (struct pair_key){ cep->listen_sid & cep->listen_mask, cep->listen_mask };
	}
}

static void mask_set_update(struct cep_table *t, uint64_t mask, int delta);

/* Claim the key slot (NONE -> CLAIMED); the caller then writes the key
 * fields, which no reader can see before the node is added. */
static int key_claim(struct cep *cep, int idx)
{
	uint8_t s = KEY_NONE;

	if (!atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_CLAIMED))
		return -EALREADY;
	s = KEY_CLAIMED;
	if (atomic_load(&cep->state) != CEP_LIVE) {
		/* CAS, not store: a destroy may have moved it to GONE already. */
		atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_NONE);
		return -ESTALE;
	}
	return 0;
}

static int key_insert(struct cep *cep, int idx, struct cep **existing)
{
	struct cep_table *t = cep->table;
	struct pair_key k = key_of(cep, idx);
	unsigned long h = hash_pair(t, k.a, k.b);
	struct cds_lfht_node *got;
	uint8_t s = KEY_CLAIMED;
	struct cep *other = NULL;

	if (existing)
		*existing = NULL;
	cds_lfht_node_init(&cep->key_node[idx]);
	cep_tsan_release(cep); /* key fields before publication */
	cep_rcu_read_lock();
	got = cds_lfht_add_unique(t->keys[idx], h, key_match[idx], &k, &cep->key_node[idx]);
	if (got != &cep->key_node[idx]) {
		other = caa_container_of(got, struct cep, key_node[idx]);
		cep_tsan_acquire(other);
		if (cep_get_unless_zero(other))
			other = NULL;
		cep_rcu_read_unlock();
		/* Back to NONE unless a destroy made it GONE meanwhile. */
		atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_NONE);
		if (existing)
			*existing = other;
		else if (other)
			cep_put(other);
		return -EEXIST;
	}
	CEP_YIELD();
	/* CLAIMED -> PRESENT, unless cep_destroy() ran meanwhile and took
	 * the slot (GONE): then removing the node is ours to do (seq_cst
	 * pairs with destroy's state store and key exchange). */
	if (!atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_PRESENT)) {
		cds_lfht_del(t->keys[idx], &cep->key_node[idx]);
		cep_rcu_read_unlock();
		return -ESTALE;
	}
	cep_rcu_read_unlock();
	return 0;
}

int cep_insert_remote_id(struct cep *cep, uint32_t remote_comm_id,
			 uint64_t remote_ca_guid, struct cep **existing)
{
	int ret;

	if (!cep)
		return -EINVAL;
	ret = key_claim(cep, IDX_REMOTE_ID);
	if (ret)
		return ret;
	cep->rid_comm_id = remote_comm_id;
	cep->rid_guid = remote_ca_guid;
	return key_insert(cep, IDX_REMOTE_ID, existing);
}

int cep_insert_remote_qpn(struct cep *cep, uint32_t remote_qpn,
			  uint64_t remote_ca_guid, struct cep **existing)
{
	int ret;

	if (!cep || remote_qpn > 0xffffff)
		return -EINVAL;
	ret = key_claim(cep, IDX_REMOTE_QPN);
	if (ret)
		return ret;
	cep->rqpn = remote_qpn;
	cep->rqpn_guid = remote_ca_guid;
	return key_insert(cep, IDX_REMOTE_QPN, existing);
}

int cep_insert_listener(struct cep *cep, uint64_t service_id, uint64_t mask,
			struct cep **existing)
{
	int ret;

	if (!cep || mask == 0)
		return -EINVAL;
	ret = key_claim(cep, IDX_LISTEN);
	if (ret)
		return ret;
	cep->listen_sid = service_id & mask;
	cep->listen_mask = mask;
	/* Mask first: a lookup may then probe a mask with no listener yet,
	 * which is only a miss; the reverse order could miss a listener. */
	mask_set_update(cep->table, mask, +1);
	ret = key_insert(cep, IDX_LISTEN, existing);
	if (ret)
		mask_set_update(cep->table, mask, -1);
	return ret;
}

/* Remove key @idx if PRESENT (PRESENT -> GONE). Read side not held. */
static int key_remove(struct cep *cep, int idx)
{
	uint8_t s = KEY_PRESENT;

	if (!atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_GONE))
		return -ENOENT;
	cep_rcu_read_lock();
	cds_lfht_del(cep->table->keys[idx], &cep->key_node[idx]);
	cep_rcu_read_unlock();
	if (idx == IDX_LISTEN)
		mask_set_update(cep->table, cep->listen_mask, -1);
	return 0;
}

int cep_remove_remote_id(struct cep *cep)
{
	return cep ? key_remove(cep, IDX_REMOTE_ID) : -EINVAL;
}

int cep_remove_remote_qpn(struct cep *cep)
{
	return cep ? key_remove(cep, IDX_REMOTE_QPN) : -EINVAL;
}

int cep_remove_listener(struct cep *cep)
{
	return cep ? key_remove(cep, IDX_LISTEN) : -EINVAL;
}

/* Removed keys (GONE) become insertable again (NONE) once a grace period
 * has passed since their removal: a reader may still stand on the removed
 * node, and rculfhash forbids re-adding a node before that. Blocks for one
 * grace period, and only when a key is GONE. Not from a read side. For an
 * id that connects again (the CM); a destroyed CEP keeps its keys GONE. */
int cep_keys_recycle(struct cep *cep)
{
	int gone = 0;

	for (int idx = 0; idx < IDX_NKEYS; idx++)
		gone |= atomic_load(&cep->key_state[idx]) == KEY_GONE;
	if (!gone)
		return 0;
	if (atomic_load(&cep->state) != CEP_LIVE)
		return -ESTALE;
	cep_rcu_thread_ensure();
	urcu_memb_synchronize_rcu();
	/* Readers of the removed nodes finished before this point. */
	cep_tsan_acquire(&cep_tsan_grace_period);
	for (int idx = 0; idx < IDX_NKEYS; idx++) {
		uint8_t s = KEY_GONE;

		/* CAS: a destroy racing with us leaves it GONE or NONE, and a
		 * claim on a destroyed CEP fails on its state (key_claim). */
		atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_NONE);
	}
	return 0;
}

int cep_lookup_remote_id(struct cep_table *t, uint32_t remote_comm_id,
			 uint64_t remote_ca_guid, struct cep **out)
{
	struct pair_key k = { remote_comm_id, remote_ca_guid };
	struct cep *cep;

	if (!t || !out)
		return -EINVAL;
	cep_rcu_read_lock();
	cep = find_get(t->keys[IDX_REMOTE_ID], hash_pair(t, k.a, k.b), match_rid, &k,
		       IDX_REMOTE_ID);
	cep_rcu_read_unlock();
	*out = cep;
	return cep ? 0 : -ENOENT;
}

int cep_lookup_remote_qpn(struct cep_table *t, uint32_t remote_qpn,
			  uint64_t remote_ca_guid, struct cep **out)
{
	struct pair_key k = { remote_qpn, remote_ca_guid };
	struct cep *cep;

	if (!t || !out)
		return -EINVAL;
	cep_rcu_read_lock();
	cep = find_get(t->keys[IDX_REMOTE_QPN], hash_pair(t, k.a, k.b), match_rqpn, &k,
		       IDX_REMOTE_QPN);
	cep_rcu_read_unlock();
	*out = cep;
	return cep ? 0 : -ENOENT;
}

/* ---- listeners: masks in use ------------------------------------------- */

static void mask_set_free(struct rcu_head *head)
{
	struct cep_mask_set *ms = caa_container_of(head, struct cep_mask_set, rcu);

	cep_rcu_callback_begin(ms);
	free(ms);
	cep_rcu_callback_end();
}

static int popcount64(uint64_t v)
{
	return __builtin_popcountll(v);
}

/* Add or drop one user of @mask; masks kept most specific first. Under
 * listen_lock; readers see either the old or the new set. */
static void mask_set_update(struct cep_table *t, uint64_t mask, int delta)
{
	struct cep_mask_set *old, *ms;
	unsigned i, j, n;

	pthread_mutex_lock(&t->listen_lock);
	old = atomic_load_explicit(&t->masks, memory_order_relaxed);
	n = old ? old->n : 0;
	ms = malloc(sizeof(*ms) + (n + 1) * sizeof(ms->m[0]));
	if (!ms) {
		/* Out of memory: keep the old set. A missing new mask makes a
		 * listener unreachable (REQs rejected), never a crash. */
		pthread_mutex_unlock(&t->listen_lock);
		return;
	}
	for (i = 0, j = 0; i < n; i++) {
		ms->m[j] = old->m[i];
		if (old->m[i].mask == mask) {
			ms->m[j].users += (unsigned)delta;
			delta = 0;
			if (ms->m[j].users == 0)
				continue;
		}
		j++;
	}
	if (delta > 0) {
		/* Insert by decreasing popcount: most specific match wins. */
		unsigned pos = j;

		while (pos > 0 && popcount64(ms->m[pos - 1].mask) < popcount64(mask)) {
			ms->m[pos] = ms->m[pos - 1];
			pos--;
		}
		ms->m[pos].mask = mask;
		ms->m[pos].users = 1;
		j++;
	}
	ms->n = j;
	/* release: the set's contents before readers load the pointer. */
	atomic_store_explicit(&t->masks, ms, memory_order_release);
	pthread_mutex_unlock(&t->listen_lock);
	if (old)
		cep_call_rcu(&old->rcu, old, mask_set_free);
}

int cep_lookup_listener(struct cep_table *t, uint64_t service_id, struct cep **out)
{
	struct cep_mask_set *ms;
	struct cep *cep = NULL;

	if (!t || !out)
		return -EINVAL;
	cep_rcu_read_lock();
	/* acquire: pairs with the release store in mask_set_update(). */
	ms = atomic_load_explicit(&t->masks, memory_order_acquire);
	for (unsigned i = 0; ms && i < ms->n && !cep; i++) {
		struct pair_key k = { service_id & ms->m[i].mask, ms->m[i].mask };

		cep = find_get(t->keys[IDX_LISTEN], hash_pair(t, k.a, k.b), match_listen, &k,
			       IDX_LISTEN);
	}
	cep_rcu_read_unlock();
	*out = cep;
	return cep ? 0 : -ENOENT;
}

/* ---- destroy ----------------------------------------------------------- */

CEP_EXPORT int cep_destroy(struct cep *cep)
{
	struct cep_table *t;
	uint32_t s = CEP_LIVE;
	uint64_t link;
	bool had_listener = false;

	if (!cep)
		return -EINVAL;
	t = cep->table;
	/* One winner; seq_cst: key_claim/key_insert read state after their
	 * own store (Dekker), so either they see DESTROYING or we see their
	 * claim. */
	if (!atomic_compare_exchange_strong(&cep->state, &s, CEP_DESTROYING))
		return -EALREADY;
	CEP_STAT_INC(t, destroyed);
	CEP_YIELD();

	/* Take the link: whoever moves it off BINDING/LINKED owns the
	 * binding's reference. A bind caught in BINDING sees DEAD when it
	 * tries to complete, and undoes its word. */
	link = atomic_exchange(&cep->qp_link, CEP_LINK_DEAD);
	if (CEP_LINK_KIND(link) == CEP_LINK_LINKED || CEP_LINK_KIND(link) == CEP_LINK_BINDING) {
		cep_rcu_read_lock();
		cep_binding_release(t, CEP_LINK_QPN(link), cep->local_comm_id);
		cep_rcu_read_unlock();
		cep_put(cep); /* the binding's reference */
	}
	CEP_YIELD();

	cep_rcu_read_lock();
	for (int idx = 0; idx < IDX_NKEYS; idx++) {
		/* PRESENT: ours to delete. CLAIMED: the inserter sees GONE and
		 * deletes its own node. NONE: nothing. */
		uint8_t ks = atomic_exchange(&cep->key_state[idx], KEY_GONE);

		if (ks == KEY_PRESENT) {
			cds_lfht_del(t->keys[idx], &cep->key_node[idx]);
			if (idx == IDX_LISTEN)
				had_listener = true;
		}
	}
	cds_lfht_del(t->comm, &cep->comm_node);
	cep_rcu_read_unlock();
	if (had_listener)
		mask_set_update(t, cep->listen_mask, -1);
	cep_put(cep); /* the table's reference */
	return 0;
}

/* ---- accessors --------------------------------------------------------- */

CEP_EXPORT uint32_t cep_local_comm_id(const struct cep *cep)
{
	return cep->local_comm_id;
}

CEP_EXPORT void *cep_context(const struct cep *cep)
{
	return atomic_load_explicit(&((struct cep *)cep)->context, memory_order_relaxed);
}

CEP_EXPORT void cep_set_context(struct cep *cep, void *context)
{
	atomic_store_explicit(&cep->context, context, memory_order_relaxed);
}

CEP_EXPORT struct cep_table *cep_table_of(const struct cep *cep)
{
	return cep->table;
}

CEP_EXPORT int cep_is_destroyed(const struct cep *cep)
{
	return atomic_load(&((struct cep *)cep)->state) != CEP_LIVE;
}

CEP_EXPORT int cep_bound_qpn(const struct cep *cep, uint32_t *qpn)
{
	uint64_t l = atomic_load(&((struct cep *)cep)->qp_link);

	if (CEP_LINK_KIND(l) != CEP_LINK_LINKED)
		return -ENOENT;
	if (qpn)
		*qpn = CEP_LINK_QPN(l);
	return 0;
}

/* ---- table ------------------------------------------------------------- */

CEP_EXPORT int cep_table_create(const struct cep_table_attr *attr, struct cep_table **out)
{
	struct cep_table *t;
	unsigned long init = 1024;
	uint64_t seed;

	if (!out || (attr && attr->size < sizeof(*attr)))
		return -EINVAL;
	if (attr && attr->initial_size) {
		if (attr->initial_size & (attr->initial_size - 1))
			return -EINVAL;
		init = attr->initial_size;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	seed = ((uint64_t)random32() << 32) | random32();
	t->hash_seed = seed;
	if (attr) {
		t->teardown = attr->teardown;
		t->release = attr->release;
		t->ctx = attr->ctx;
	}
	pthread_mutex_init(&t->listen_lock, NULL);
	atomic_init(&t->masks, NULL);
	cep_rcu_thread_ensure();
	t->comm = cds_lfht_new_flavor(init, 64, 0, HT_FLAGS, &urcu_memb_flavor, NULL);
	t->qps = cds_lfht_new_flavor(init, 64, 0, HT_FLAGS, &urcu_memb_flavor, NULL);
	for (int i = 0; i < IDX_NKEYS; i++)
		t->keys[i] = cds_lfht_new_flavor(i == IDX_LISTEN ? 16 : init, 16, 0, HT_FLAGS,
						 &urcu_memb_flavor, NULL);
	if (!t->comm || !t->qps || !t->keys[0] || !t->keys[1] || !t->keys[2]) {
		if (t->comm)
			cds_lfht_destroy(t->comm, NULL);
		if (t->qps)
			cds_lfht_destroy(t->qps, NULL);
		for (int i = 0; i < IDX_NKEYS; i++)
			if (t->keys[i])
				cds_lfht_destroy(t->keys[i], NULL);
		free(t);
		return -ENOMEM;
	}
	*out = t;
	return 0;
}

CEP_EXPORT int cep_table_destroy(struct cep_table *t)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;
	struct cep_table_stats st;
	int ret = 0;

	if (!t)
		return -EINVAL;
	/* Destroy every CEP; take a reference across cep_destroy so it is
	 * not freed under the iteration's feet (the read side keeps the
	 * memory, the reference keeps it from being handed to call_rcu
	 * while we still use it). */
	cep_rcu_read_lock();
	cds_lfht_for_each(t->comm, &it, n) {
		struct cep *cep = node_to_cep(n);

		cep_tsan_acquire(cep);
		if (cep_get_unless_zero(cep) == 0) {
			cep_destroy(cep);
			cep_put(cep);
		}
	}
	cds_lfht_for_each(t->qps, &it, n) {
		struct cep_qp *qp = caa_container_of(n, struct cep_qp, node);

		cep_tsan_acquire(qp);
		if (cds_lfht_del(t->qps, n) == 0)
			cep_call_rcu(&qp->rcu, qp, cep_qp_free_rcu);
	}
	cep_rcu_read_unlock();
	cep_rcu_barrier();
	cep_table_stats(t, &st);
	if (st.allocated != st.freed) {
		fprintf(stderr, "libcep: table destroyed with %" PRIu64
			" CEPs still referenced: leaking them\n", st.allocated - st.freed);
		return -EBUSY; /* never free under a holder; the table stays */
	}
	if (cds_lfht_destroy(t->comm, NULL) || cds_lfht_destroy(t->qps, NULL))
		ret = -EBUSY;
	for (int i = 0; i < IDX_NKEYS; i++)
		if (cds_lfht_destroy(t->keys[i], NULL))
			ret = -EBUSY;
	free(atomic_load(&t->masks));
	pthread_mutex_destroy(&t->listen_lock);
	free(t);
	return ret;
}

CEP_EXPORT void cep_table_stats(struct cep_table *t, struct cep_table_stats *st)
{
	uint64_t dest = 0, qa = 0, qr = 0;

	memset(st, 0, sizeof(*st));
	for (int i = 0; i < CEP_STAT_SHARDS; i++) {
		struct cep_stat_shard *s = &t->stats[i];

		st->allocated += atomic_load_explicit(&s->allocated, memory_order_relaxed);
		st->freed += atomic_load_explicit(&s->freed, memory_order_relaxed);
		dest += atomic_load_explicit(&s->destroyed, memory_order_relaxed);
		st->bound += atomic_load_explicit(&s->bound, memory_order_relaxed);
		st->bind_fail += atomic_load_explicit(&s->bind_fail, memory_order_relaxed);
		st->comm_id_collisions += atomic_load_explicit(&s->collisions, memory_order_relaxed);
		qa += atomic_load_explicit(&s->qps_added, memory_order_relaxed);
		qr += atomic_load_explicit(&s->qps_removed, memory_order_relaxed);
	}
	st->destroyed = dest;
	/* Shards are read one by one while others run: clamp, never wrap. */
	st->live = st->allocated >= dest ? st->allocated - dest : 0;
	st->qps = qa - qr;
}

void cep_table_for_each(struct cep_table *t, void (*fn)(struct cep *cep, void *ctx), void *ctx)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;

	cep_rcu_read_lock();
	cds_lfht_for_each(t->comm, &it, n) {
		struct cep *cep = node_to_cep(n);

		cep_tsan_acquire(cep);
		if (cep_get_unless_zero(cep) == 0) {
			fn(cep, ctx);
			cep_put(cep);
		}
	}
	cep_rcu_read_unlock();
}

/* ---- invariant checker ------------------------------------------------- */

struct check_out {
	char *buf;
	size_t len, used;
	int violations;
};

__attribute__((format(printf, 2, 3)))
static void violation(struct check_out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->violations++ >= 8 || !o->buf || o->used + 1 >= o->len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->used, o->len - o->used, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->used += (size_t)n < o->len - o->used ? (size_t)n : o->len - o->used - 1;
}

CEP_EXPORT int cep_table_check(struct cep_table *t, char *msg, size_t msglen)
{
	struct check_out o = { msg, msglen, 0, 0 };
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;
	struct cep_table_stats st;
	uint64_t reachable = 0, underflow = 0, dfree = 0;

	if (!t)
		return -EINVAL;
	if (msg && msglen)
		msg[0] = '\0';
	cep_rcu_barrier(); /* pending frees done: freed is final */

	cep_rcu_read_lock();
	cds_lfht_for_each(t->comm, &it, n) {
		struct cep *cep = node_to_cep(n);
		uint64_t l;

		cep_tsan_acquire(cep);
		reachable++;
		if (cep->magic != CEP_MAGIC_LIVE)
			violation(&o, "cep %#x in index but not live (magic %#x); ",
				  cep->local_comm_id, cep->magic);
		if (atomic_load(&cep->state) != CEP_LIVE)
			violation(&o, "cep %#x destroyed but still indexed; ", cep->local_comm_id);
		l = atomic_load(&cep->qp_link);
		if (CEP_LINK_KIND(l) == CEP_LINK_BINDING)
			violation(&o, "cep %#x in the middle of a bind at quiescence; ",
				  cep->local_comm_id);
		if (atomic_load(&cep->refcnt) < 1u + (CEP_LINK_KIND(l) == CEP_LINK_LINKED))
			violation(&o, "cep %#x refcount %u below its holders; ",
				  cep->local_comm_id, atomic_load(&cep->refcnt));
		if (CEP_LINK_KIND(l) == CEP_LINK_LINKED) {
			struct cep_qp *qp = cep_qp_find(t, CEP_LINK_QPN(l));
			uint32_t b = qp ? atomic_load(&qp->binding) : CEP_BINDING_RESERVED;

			if (b != cep->local_comm_id && b != CEP_BINDING_RESERVED)
				violation(&o, "cep %#x linked to qpn %#x whose binding is %#x; ",
					  cep->local_comm_id, CEP_LINK_QPN(l), b);
		}
		for (int idx = 0; idx < IDX_NKEYS; idx++) {
			struct pair_key k;
			struct cds_lfht_iter ki;

			if (atomic_load(&cep->key_state[idx]) != KEY_PRESENT)
				continue;
			k = key_of(cep, idx);
			cds_lfht_lookup(t->keys[idx], hash_pair(t, k.a, k.b), key_match[idx], &k, &ki);
			if (cds_lfht_iter_get_node(&ki) != &cep->key_node[idx])
				violation(&o, "cep %#x key %d not found by lookup; ",
					  cep->local_comm_id, idx);
		}
	}
	cds_lfht_for_each(t->qps, &it, n) {
		struct cep_qp *qp = caa_container_of(n, struct cep_qp, node);
		uint32_t b = atomic_load(&qp->binding);
		struct cds_lfht_iter ci;
		struct cep *cep;

		cep_tsan_acquire(qp);
		if (b == CEP_BINDING_INVALID || b == CEP_BINDING_RESERVED)
			continue;
		cds_lfht_lookup(t->comm, hash_comm(t, b), match_comm, &b, &ci);
		if (!cds_lfht_iter_get_node(&ci)) {
			violation(&o, "qpn %#x bound to cid %#x: no such live CEP; ", qp->qpn, b);
			continue;
		}
		cep = node_to_cep(cds_lfht_iter_get_node(&ci));
		if (atomic_load(&cep->qp_link) != (CEP_LINK_LINKED | qp->qpn))
			violation(&o, "qpn %#x bound to cid %#x whose link is %#" PRIx64 "; ",
				  qp->qpn, b, (uint64_t)atomic_load(&cep->qp_link));
	}
	cep_rcu_read_unlock();

	cep_table_stats(t, &st);
	for (int i = 0; i < CEP_STAT_SHARDS; i++) {
		underflow += atomic_load(&t->stats[i].refcnt_underflow);
		dfree += atomic_load(&t->stats[i].double_free);
	}
	if (st.allocated - st.freed != reachable)
		violation(&o, "allocated %" PRIu64 " - freed %" PRIu64 " != %" PRIu64
			  " reachable (leak or CEP held past quiescence); ",
			  st.allocated, st.freed, reachable);
	if (st.live != reachable)
		violation(&o, "live %" PRIu64 " != reachable %" PRIu64 "; ", st.live, reachable);
	if (underflow)
		violation(&o, "%" PRIu64 " puts without a reference; ", underflow);
	if (dfree)
		violation(&o, "%" PRIu64 " CEPs freed twice; ", dfree);
	return o.violations ? -EPROTO : 0;
}
