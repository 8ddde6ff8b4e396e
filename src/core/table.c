/* SPDX-License-Identifier: MIT */
/*
 * The CEP table: CEP lifetimes (references, RCU frees), the comm-ID index
 * and the secondary indexes, on one index implementation (index.h:
 * rculfhash or ck_rhs, chosen per table).
 *
 * Ordering guarantees: a CEP is fully initialised before it is published
 * (every index insert is a release); a lookup that finds it sees that
 * initialisation and takes a reference only if the count is not zero.
 * Destruction has one winner (CAS on state); the last put hands the CEP to
 * call_rcu, so readers inside a read-side section never see freed memory.
 * Progress guarantees: lookups are lock-free with either index; inserts
 * and removes are lock-free with rculfhash and take one shard's mutex with
 * ck_rhs. Listen and unlisten also take listen_lock, never the MAD path.
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

/* index.h: tests only, NULL otherwise. */
_Atomic(cep_index_probe_fn) cep_index_probe_hook;

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

/* Index hashes, one per kind of key; every index rehashes with its own. */
static uint64_t hash_comm(const struct cep_ikey *k, const void *ctx)
{
	return cep_hash64(((const struct cep_table *)ctx)->hash_seed, k->a);
}

static uint64_t hash_pair(const struct cep_ikey *k, const void *ctx)
{
	return cep_hash64(((const struct cep_table *)ctx)->hash_seed ^ cep_hash64(0, k->a), k->b);
}

static uint64_t hash_qpn_key(const struct cep_ikey *k, const void *ctx)
{
	return cep_hash64(((const struct cep_table *)ctx)->hash_seed ^ 0x51504e51504e5150ull, k->a);
}

uint64_t cep_hash_qpn(const struct cep_table *t, uint32_t qpn)
{
	struct cep_ikey k = { qpn, 0 };

	return hash_qpn_key(&k, t);
}

void *cep_obj_alloc(struct cep_table *t, int kind)
{
	char *p = cep_slab_alloc(&t->slab[kind]);

	return p ? p + t->node_pre : NULL;
}

void cep_obj_free(struct cep_table *t, int kind, void *obj)
{
	if (obj)
		cep_slab_free(&t->slab[kind], (char *)obj - t->node_pre);
}

size_t cep_table_obj_bytes(struct cep_table *t)
{
	size_t n = 0;

	for (int k = 0; k < CEP_OBJ_KINDS; k++) {
		pthread_mutex_lock(&t->slab[k].lock);
		n += t->slab[k].bytes;
		pthread_mutex_unlock(&t->slab[k].lock);
	}
	return n;
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

static struct cep *comm_key_cep(struct cep_ikey *k)
{
	return caa_container_of(k, struct cep, comm_key);
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
	cep_obj_free(t, CEP_OBJ_CEP, cep);
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
	cep = cep_obj_alloc(t, CEP_OBJ_CEP);
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

	for (int tries = 0; tries < 64; tries++) {
		uint64_t id = random32();
		struct cep_ikey *got;
		int ret;

		id = id / mod * mod + rem;
		if (id == CEP_BINDING_INVALID || id >= CEP_BINDING_RESERVED)
			continue;
		cep->comm_key.a = id;
		/* Publication (the insert is a release): all fields above
		 * before any reader finds it. */
		cep_rcu_read_lock();
		ret = cep_index_insert(t->comm, hash_comm(&cep->comm_key, t), &cep->comm_key, &got);
		cep_rcu_read_unlock();
		if (ret == 0) {
			CEP_STAT_INC(t, allocated);
			cep_index_maintain(t->comm);
			*out = cep;
			return 0;
		}
		if (ret != -EEXIST)
			break;
		CEP_STAT_INC(t, collisions);
	}
	/* Never published: free at once, no reader can hold it; not counted. */
	cep_obj_free(t, CEP_OBJ_CEP, cep);
	return -EAGAIN;
}

/* The CEP an entry of index @idx belongs to (-1: the comm-ID index). */
static struct cep *entry_cep(struct cep_ikey *k, int idx)
{
	return idx < 0 ? comm_key_cep(k) : caa_container_of(k, struct cep_kentry, key)->cep;
}

/* Find a live CEP in @ix and take a reference. Read side held by caller. */
static struct cep *find_get(struct cep_index *ix, uint64_t h, const struct cep_ikey *key, int idx)
{
	struct cep_ikey *k;
	struct cep *cep;

	CEP_YIELD();
	k = cep_index_lookup(ix, h, key);
	if (!k)
		return NULL;
	cep = entry_cep(k, idx);
	cep_tsan_acquire(cep); /* pairs with the release before the comm-ID publication */
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
	struct cep_ikey k = { id, 0 };
	struct cep *cep;

	if (!t || !out)
		return -EINVAL;
	cep_rcu_read_lock();
	cep = find_get(t->comm, hash_comm(&k, t), &k, -1);
	cep_rcu_read_unlock();
	*out = cep;
	return cep ? 0 : -ENOENT;
}

/* ---- secondary keys ---------------------------------------------------- */

static void mask_set_update(struct cep_table *t, uint64_t mask, int delta);

static void kentry_free_rcu(struct rcu_head *head)
{
	struct cep_kentry *e = caa_container_of(head, struct cep_kentry, rcu);

	cep_rcu_callback_begin(e);
	cep_obj_free(e->table, CEP_OBJ_KENTRY, e); /* not through e->cep: it may be gone */
	cep_rcu_callback_end();
}

/* Claim the key slot (NONE -> CLAIMED). */
static int key_claim(struct cep *cep, int idx)
{
	uint8_t s = KEY_NONE;

	if (!atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_CLAIMED))
		return s == KEY_GONE ? -ESTALE : -EALREADY;
	s = KEY_CLAIMED;
	if (atomic_load(&cep->state) != CEP_LIVE) {
		/* CAS, not store: a destroy may have moved it to GONE already. */
		atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_NONE);
		return -ESTALE;
	}
	return 0;
}

/* Slot CLAIMED by us: publish a fresh entry with key (a, b). */
static int key_insert(struct cep *cep, int idx, uint64_t a, uint64_t b, struct cep **existing)
{
	struct cep_table *t = cep->table;
	struct cep_ikey *got;
	struct cep_kentry *e;
	uint8_t s = KEY_CLAIMED;
	struct cep *other = NULL;
	uint64_t h;
	int ret;

	if (existing)
		*existing = NULL;
	e = cep_obj_alloc(t, CEP_OBJ_KENTRY);
	if (!e) {
		atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_NONE);
		return -ENOMEM;
	}
	e->key.a = a;
	e->key.b = b;
	e->cep = cep;
	e->table = t;
	h = hash_pair(&e->key, t);
	cep->key[idx] = e; /* read by whoever takes PRESENT away (after our CAS) */
	cep_rcu_read_lock();
	ret = cep_index_insert(t->keys[idx], h, &e->key, &got);
	if (ret) {
		if (ret == -EEXIST) {
			other = entry_cep(got, idx);
			cep_tsan_acquire(other);
			if (cep_get_unless_zero(other))
				other = NULL;
		}
		cep_rcu_read_unlock();
		cep->key[idx] = NULL;
		cep_obj_free(t, CEP_OBJ_KENTRY, e); /* never published */
		/* Back to NONE unless a destroy made it GONE meanwhile. */
		atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_NONE);
		if (existing)
			*existing = other;
		else if (other)
			cep_put(other);
		return ret;
	}
	CEP_YIELD();
	/* CLAIMED -> PRESENT, unless cep_destroy() ran meanwhile and took
	 * the slot (GONE): then removing the entry is ours to do (seq_cst
	 * pairs with destroy's state store and key exchange). */
	if (!atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_PRESENT)) {
		cep_index_remove(t->keys[idx], h, &e->key);
		cep_rcu_read_unlock();
		cep_call_rcu(&e->rcu, e, kentry_free_rcu);
		return -ESTALE;
	}
	cep_rcu_read_unlock();
	cep_index_maintain(t->keys[idx]);
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
	return key_insert(cep, IDX_REMOTE_ID, remote_comm_id, remote_ca_guid, existing);
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
	return key_insert(cep, IDX_REMOTE_QPN, remote_qpn, remote_ca_guid, existing);
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
	/* Mask first: a lookup may then probe a mask with no listener yet,
	 * which is only a miss; the reverse order could miss a listener. */
	mask_set_update(cep->table, mask, +1);
	ret = key_insert(cep, IDX_LISTEN, service_id & mask, mask, existing);
	if (ret)
		mask_set_update(cep->table, mask, -1);
	return ret;
}

/* Unpublish the entry of slot @idx, which the caller took from PRESENT
 * (to CLAIMED or GONE); it is freed after a grace period. */
static void key_unpublish(struct cep *cep, int idx)
{
	struct cep_table *t = cep->table;
	struct cep_kentry *e = cep->key[idx];
	uint64_t mask = e->key.b;

	cep_rcu_read_lock();
	cep_index_remove(t->keys[idx], hash_pair(&e->key, t), &e->key);
	cep_rcu_read_unlock();
	cep->key[idx] = NULL;
	cep_call_rcu(&e->rcu, e, kentry_free_rcu);
	if (idx == IDX_LISTEN)
		mask_set_update(t, mask, -1);
	cep_index_maintain(t->keys[idx]);
}

/* Remove key @idx if PRESENT: PRESENT -> CLAIMED (ours), unpublish, then
 * NONE so the CEP may take a key in this index again. Read side not held. */
static int key_remove(struct cep *cep, int idx)
{
	uint8_t s = KEY_PRESENT;

	if (!atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_CLAIMED))
		return -ENOENT;
	key_unpublish(cep, idx);
	s = KEY_CLAIMED;
	/* A destroy that found CLAIMED made it GONE and left it to us: done. */
	atomic_compare_exchange_strong(&cep->key_state[idx], &s, KEY_NONE);
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

static int lookup_pair(struct cep_table *t, int idx, uint64_t a, uint64_t b, struct cep **out)
{
	struct cep_ikey k = { a, b };
	struct cep *cep;

	if (!t || !out)
		return -EINVAL;
	cep_rcu_read_lock();
	cep = find_get(t->keys[idx], hash_pair(&k, t), &k, idx);
	cep_rcu_read_unlock();
	*out = cep;
	return cep ? 0 : -ENOENT;
}

int cep_lookup_remote_id(struct cep_table *t, uint32_t remote_comm_id,
			 uint64_t remote_ca_guid, struct cep **out)
{
	return lookup_pair(t, IDX_REMOTE_ID, remote_comm_id, remote_ca_guid, out);
}

int cep_lookup_remote_qpn(struct cep_table *t, uint32_t remote_qpn,
			  uint64_t remote_ca_guid, struct cep **out)
{
	return lookup_pair(t, IDX_REMOTE_QPN, remote_qpn, remote_ca_guid, out);
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
		struct cep_ikey k = { service_id & ms->m[i].mask, ms->m[i].mask };

		cep = find_get(t->keys[IDX_LISTEN], hash_pair(&k, t), &k, IDX_LISTEN);
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
	if (CEP_LINK_KIND(link) == CEP_LINK_LINKED)
		cep_binding_release(cep); /* the word, through the link's own record */
	/* BINDING: the binder's CAS to LINKED fails on DEAD and it undoes its
	 * own word with the record it holds. */
	if (CEP_LINK_KIND(link) == CEP_LINK_LINKED || CEP_LINK_KIND(link) == CEP_LINK_BINDING)
		cep_put(cep); /* the binding's reference */
	CEP_YIELD();

	for (int idx = 0; idx < IDX_NKEYS; idx++) {
		/* PRESENT: ours to unpublish. CLAIMED: its owner (an inserter or
		 * a remover) sees GONE and cleans up its own entry. NONE:
		 * nothing. */
		if (atomic_exchange(&cep->key_state[idx], KEY_GONE) == KEY_PRESENT)
			key_unpublish(cep, idx);
	}
	cep_rcu_read_lock();
	cep_index_remove(t->comm, hash_comm(&cep->comm_key, t), &cep->comm_key);
	cep_rcu_read_unlock();
	cep_index_maintain(t->comm);
	cep_put(cep); /* the table's reference */
	return 0;
}

/* ---- accessors --------------------------------------------------------- */

CEP_EXPORT uint32_t cep_local_comm_id(const struct cep *cep)
{
	return (uint32_t)cep->comm_key.a;
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

/* The implementation a table asks for; DEFAULT follows CEP_INDEX in the
 * environment ("rculfhash" or "ck"), then the built-in default. */
static const struct cep_index_ops *index_impl(int which)
{
	if (which == CEP_TABLE_INDEX_DEFAULT) {
		const char *env = getenv("CEP_INDEX");

		if (env && !strcmp(env, "rculfhash"))
			which = CEP_TABLE_INDEX_RCULFHASH;
		else if (env && !strcmp(env, "ck"))
			which = CEP_TABLE_INDEX_CK;
		else
			which = CEP_TABLE_INDEX_BUILTIN;
	}
	switch (which) {
	case CEP_TABLE_INDEX_RCULFHASH:
		return &cep_index_lfht_ops;
	case CEP_TABLE_INDEX_CK:
		return &cep_index_ck_ops;
	default:
		return NULL;
	}
}

static void table_free_indexes(struct cep_table *t)
{
	struct cep_index *all[] = { t->comm, t->qps, t->keys[0], t->keys[1], t->keys[2] };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (all[i])
			all[i]->ops->destroy(all[i]);
}

CEP_EXPORT int cep_table_create(const struct cep_table_attr *attr, struct cep_table **out)
{
	struct cep_index_attr ia = { .node_delta = -CEP_INDEX_NODE_SIZE };
	const size_t v1 = offsetof(struct cep_table_attr, index); /* the first layout */
	struct cep_table *t;
	unsigned long init = 1024;
	int which = CEP_TABLE_INDEX_DEFAULT;
	uint64_t seed;
	int ret;

	if (!out || (attr && attr->size < v1))
		return -EINVAL;
	if (attr && attr->initial_size) {
		if (attr->initial_size & (attr->initial_size - 1))
			return -EINVAL;
		init = attr->initial_size;
	}
	if (attr && attr->size >= v1 + sizeof(attr->index))
		which = attr->index;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->index = index_impl(which);
	if (!t->index) {
		free(t);
		return -EINVAL;
	}
	t->node_pre = t->index == &cep_index_lfht_ops ? CEP_INDEX_NODE_SIZE : 0;
	cep_slab_init(&t->slab[CEP_OBJ_CEP], t->node_pre + sizeof(struct cep));
	cep_slab_init(&t->slab[CEP_OBJ_KENTRY], t->node_pre + sizeof(struct cep_kentry));
	cep_slab_init(&t->slab[CEP_OBJ_QP], t->node_pre + sizeof(struct cep_qp));
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
	ia.initial = init;
	ia.hash_ctx = t;
	ia.hash = hash_comm;
	ret = t->index->create(&ia, &t->comm);
	ia.hash = hash_qpn_key;
	if (!ret)
		ret = t->index->create(&ia, &t->qps);
	ia.hash = hash_pair;
	for (int i = 0; i < IDX_NKEYS && !ret; i++) {
		ia.initial = i == IDX_LISTEN ? 16 : init;
		ia.shards = i == IDX_LISTEN ? 1 : 0; /* listeners: few, rarely written */
		ret = t->index->create(&ia, &t->keys[i]);
	}
	if (ret) {
		table_free_indexes(t);
		for (int k = 0; k < CEP_OBJ_KINDS; k++)
			cep_slab_fini(&t->slab[k]);
		pthread_mutex_destroy(&t->listen_lock);
		free(t);
		return ret;
	}
	*out = t;
	return 0;
}

static void destroy_one(struct cep_ikey *k, void *ctx)
{
	struct cep *cep = comm_key_cep(k);

	(void)ctx;
	if (cep_get_unless_zero(cep) == 0) {
		cep_destroy(cep);
		cep_put(cep);
	}
}

static void unregister_one(struct cep_ikey *k, void *ctx)
{
	struct cep_table *t = ctx;
	struct cep_qp *qp = caa_container_of(k, struct cep_qp, key);

	if (cep_index_remove(t->qps, cep_hash_qpn(t, (uint32_t)k->a), k) == 0)
		cep_qp_put(qp); /* the index's reference */
}

CEP_EXPORT int cep_table_destroy(struct cep_table *t)
{
	struct cep_table_stats st;
	int ret;

	if (!t)
		return -EINVAL;
	/* Destroy every CEP; take a reference across cep_destroy so it is
	 * not freed under the walk's feet (the read side keeps the memory,
	 * the reference keeps it from being handed to call_rcu while we
	 * still use it). */
	cep_rcu_read_lock();
	ret = t->comm->ops->for_each(t->comm, destroy_one, NULL);
	if (!ret)
		ret = t->qps->ops->for_each(t->qps, unregister_one, t);
	cep_rcu_read_unlock();
	if (ret)
		return ret; /* out of memory for the walk: the table stays */
	cep_rcu_barrier();
	cep_table_stats(t, &st);
	if (st.allocated != st.freed) {
		fprintf(stderr, "libcep: table destroyed with %" PRIu64
			" CEPs still referenced: leaking them\n", st.allocated - st.freed);
		return -EBUSY; /* never free under a holder; the table stays */
	}
	table_free_indexes(t);
	for (int k = 0; k < CEP_OBJ_KINDS; k++)
		cep_slab_fini(&t->slab[k]);
	free(atomic_load(&t->masks));
	pthread_mutex_destroy(&t->listen_lock);
	free(t);
	return 0;
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

struct for_each_ctx {
	void (*fn)(struct cep *cep, void *ctx);
	void *ctx;
};

static void for_each_one(struct cep_ikey *k, void *arg)
{
	struct for_each_ctx *c = arg;
	struct cep *cep = comm_key_cep(k);

	if (cep_get_unless_zero(cep) == 0) {
		c->fn(cep, c->ctx);
		cep_put(cep);
	}
}

void cep_table_for_each(struct cep_table *t, void (*fn)(struct cep *cep, void *ctx), void *ctx)
{
	struct for_each_ctx c = { fn, ctx };

	cep_rcu_read_lock();
	t->comm->ops->for_each(t->comm, for_each_one, &c);
	cep_rcu_read_unlock();
}

/* ---- invariant checker ------------------------------------------------- */

struct check_out {
	struct cep_table *t;
	char *buf;
	size_t len, used;
	int violations;
	uint64_t reachable;
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

/* One CEP of the comm-ID index, at quiescence, in a read side. */
static void check_cep(struct cep_ikey *ck, void *arg)
{
	struct check_out *o = arg;
	struct cep_table *t = o->t;
	struct cep *cep = comm_key_cep(ck);
	uint32_t id = (uint32_t)cep->comm_key.a;
	uint64_t l;

	o->reachable++;
	if (cep->magic != CEP_MAGIC_LIVE)
		violation(o, "cep %#x in index but not live (magic %#x); ", id, cep->magic);
	if (atomic_load(&cep->state) != CEP_LIVE)
		violation(o, "cep %#x destroyed but still indexed; ", id);
	l = atomic_load(&cep->qp_link);
	if (CEP_LINK_KIND(l) == CEP_LINK_BINDING)
		violation(o, "cep %#x in the middle of a bind at quiescence; ", id);
	if (atomic_load(&cep->refcnt) < 1u + (CEP_LINK_KIND(l) == CEP_LINK_LINKED))
		violation(o, "cep %#x refcount %u below its holders; ", id,
			  atomic_load(&cep->refcnt));
	if (CEP_LINK_KIND(l) == CEP_LINK_LINKED) {
		struct cep_qp *qp = cep->qp_rec;
		uint32_t b = qp ? atomic_load(&qp->binding) : CEP_BINDING_RESERVED;

		if (!qp || (uint32_t)qp->key.a != CEP_LINK_QPN(l))
			violation(o, "cep %#x linked to qpn %#x holds the record of %#x; ", id,
				  CEP_LINK_QPN(l), qp ? (uint32_t)qp->key.a : 0u);
		else if (atomic_load(&qp->refs) < 1)
			violation(o, "cep %#x linked to qpn %#x whose record is being freed; ",
				  id, CEP_LINK_QPN(l));
		if (b != id && b != CEP_BINDING_RESERVED)
			violation(o, "cep %#x linked to qpn %#x whose binding is %#x; ", id,
				  CEP_LINK_QPN(l), b);
	}
	if (cep_index_lookup(t->comm, hash_comm(ck, t), ck) != ck)
		violation(o, "cep %#x not found by its comm ID; ", id);
	for (int idx = 0; idx < IDX_NKEYS; idx++) {
		uint8_t ks = atomic_load(&cep->key_state[idx]);
		struct cep_kentry *e = cep->key[idx];

		if (ks == KEY_CLAIMED)
			violation(o, "cep %#x key %d claimed at quiescence; ", id, idx);
		if (ks != KEY_PRESENT)
			continue;
		if (!e || e->cep != cep)
			violation(o, "cep %#x key %d present without its entry; ", id, idx);
		else if (cep_index_lookup(t->keys[idx], hash_pair(&e->key, t), &e->key) != &e->key)
			violation(o, "cep %#x key %d not found by lookup; ", id, idx);
	}
}

/* One QP record, at quiescence, in a read side. */
static void check_qp(struct cep_ikey *k, void *arg)
{
	struct check_out *o = arg;
	struct cep_table *t = o->t;
	struct cep_qp *qp = caa_container_of(k, struct cep_qp, key);
	uint32_t b = atomic_load(&qp->binding), qpn = (uint32_t)k->a;
	struct cep_ikey ck = { b, 0 };
	struct cep_ikey *got;
	struct cep *cep;

	if (b == CEP_BINDING_INVALID || b == CEP_BINDING_RESERVED)
		return;
	got = cep_index_lookup(t->comm, hash_comm(&ck, t), &ck);
	if (!got) {
		violation(o, "qpn %#x bound to cid %#x: no such live CEP; ", qpn, b);
		return;
	}
	cep = comm_key_cep(got);
	if (atomic_load(&cep->qp_link) != (CEP_LINK_LINKED | qpn))
		violation(o, "qpn %#x bound to cid %#x whose link is %#" PRIx64 "; ", qpn, b,
			  (uint64_t)atomic_load(&cep->qp_link));
}

/* Entries of a secondary index whose CEP does not hold them as PRESENT. */
static void check_kentry(struct cep_ikey *k, void *arg)
{
	struct check_out *o = arg;
	struct cep_kentry *e = caa_container_of(k, struct cep_kentry, key);
	struct cep *cep = e->cep;
	int idx;

	for (idx = 0; idx < IDX_NKEYS; idx++)
		if (cep->key[idx] == e)
			break;
	if (idx == IDX_NKEYS || atomic_load(&cep->key_state[idx]) != KEY_PRESENT)
		violation(o, "cep %#x: an indexed key it does not hold; ",
			  (uint32_t)cep->comm_key.a);
}

CEP_EXPORT int cep_table_check(struct cep_table *t, char *msg, size_t msglen)
{
	struct check_out o = { t, msg, msglen, 0, 0, 0 };
	struct cep_table_stats st;
	uint64_t underflow = 0, dfree = 0;
	int ret;

	if (!t)
		return -EINVAL;
	if (msg && msglen)
		msg[0] = '\0';
	cep_rcu_barrier(); /* pending frees done: freed is final */

	cep_rcu_read_lock();
	ret = t->comm->ops->for_each(t->comm, check_cep, &o);
	if (!ret)
		ret = t->qps->ops->for_each(t->qps, check_qp, &o);
	for (int idx = 0; idx < IDX_NKEYS && !ret; idx++)
		ret = t->keys[idx]->ops->for_each(t->keys[idx], check_kentry, &o);
	cep_rcu_read_unlock();
	if (ret)
		return ret;

	cep_table_stats(t, &st);
	for (int i = 0; i < CEP_STAT_SHARDS; i++) {
		underflow += atomic_load(&t->stats[i].refcnt_underflow);
		dfree += atomic_load(&t->stats[i].double_free);
	}
	if (st.allocated - st.freed != o.reachable)
		violation(&o, "allocated %" PRIu64 " - freed %" PRIu64 " != %" PRIu64
			  " reachable (leak or CEP held past quiescence); ",
			  st.allocated, st.freed, o.reachable);
	if (st.live != o.reachable)
		violation(&o, "live %" PRIu64 " != reachable %" PRIu64 "; ", st.live, o.reachable);
	if (underflow)
		violation(&o, "%" PRIu64 " puts without a reference; ", underflow);
	if (dfree)
		violation(&o, "%" PRIu64 " CEPs freed twice; ", dfree);
	return o.violations ? -EPROTO : 0;
}

/* ---- index introspection (tests, benchmarks) ---------------------------- */

int cep_table_index_info(struct cep_table *t, int which, size_t *buckets, size_t *count)
{
	struct cep_index *ix;

	switch (which) {
	case CEP_TABLE_IX_COMM: ix = t->comm; break;
	case CEP_TABLE_IX_QPN: ix = t->qps; break;
	case CEP_TABLE_IX_REMOTE_ID: ix = t->keys[IDX_REMOTE_ID]; break;
	case CEP_TABLE_IX_REMOTE_QPN: ix = t->keys[IDX_REMOTE_QPN]; break;
	case CEP_TABLE_IX_LISTEN: ix = t->keys[IDX_LISTEN]; break;
	default: return -EINVAL;
	}
	if (buckets)
		*buckets = ix->ops->buckets(ix);
	if (count)
		*count = ix->ops->count(ix);
	return 0;
}

const char *cep_table_index_name(const struct cep_table *t)
{
	return t->index->name;
}
