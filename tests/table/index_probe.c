/* SPDX-License-Identifier: MIT */
/*
 * A lookup never misses a key present throughout it: proved deterministically
 * for both index implementations by performing writer operations from inside
 * the lookup itself.
 *
 * Both implementations compare the lookup's key with candidate entries
 * through a callback (ck_rhs's compare, rculfhash's match) between their own
 * loads of the structure; index.h's probe hook runs there. For every shard
 * size from the smallest (16 slots) to beyond ck's 1,024 generation counters,
 * and for every kind of writer operation, the test builds an index holding a
 * cluster of entries that share the target key's home (ck) or hash
 * (rculfhash), looks the target up, and at the m-th comparison (m = 0, 1,
 * ...) performs the operation:
 *   del-before   remove a cluster entry that precedes the target (ck: the
 *                backward shift moves the target back, past the probe)
 *   del-current  remove the entry being compared
 *   del-reinsert remove a preceding entry and insert its key again
 *   insert       insert more entries of the same home / hash
 *   displace     insert entries homed just before the target's home, which
 *                robin hood places ahead of it (ck); same hash (rculfhash)
 *   grow         ck: inserts until the shard's map doubles; rculfhash: a
 *                resize to 4x in another thread, which completes meanwhile
 *   shrink       ck: removes until the shard is rebuilt smaller; rculfhash:
 *                a resize to 1/4 in another thread (its unlinks wait for
 *                our read side: they land after the lookup)
 * The target is present throughout, so every lookup must return it. The
 * test prints, per implementation, size and operation, how many of its
 * lookups missed (all zero, or it fails).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/check.h"
#include "core/index.h"
#include "core/rcu.h"

/* An indexed object: the rculfhash node just before the key. */
struct ent {
	char node[CEP_INDEX_NODE_SIZE];
	struct cep_ikey k;
};
_Static_assert(sizeof(struct ent) == CEP_INDEX_NODE_SIZE + sizeof(struct cep_ikey), "layout");

/* The key's b is its hash: the test places every entry exactly. */
static uint64_t thash(const struct cep_ikey *k, const void *ctx)
{
	(void)ctx;
	return k->b;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Objects are never freed while a test case runs (removed entries stay
 * valid for the lookup that may still compare them); a case's pool is
 * freed after its index is destroyed and the callbacks are done. */
#define POOL 16384
static struct ent *pool;
static size_t pool_used;
static uint64_t next_id = 1;

static struct ent *ent_new(uint64_t hash)
{
	struct ent *e;

	if (pool_used == POOL) {
		fprintf(stderr, "pool exhausted\n");
		exit(2);
	}
	e = &pool[pool_used++];
	memset(e, 0, sizeof(*e));
	e->k.a = next_id++;
	e->k.b = hash;
	return e;
}

enum op { OP_DEL_BEFORE, OP_DEL_CURRENT, OP_DEL_REINSERT, OP_INSERT, OP_DISPLACE, OP_GROW,
	  OP_SHRINK, OP_N };
static const char *op_name[OP_N] = { "del-before", "del-current", "del-reinsert", "insert",
				     "displace", "grow", "shrink" };

/* One test case's state, read by the hook (same thread). */
static struct {
	const struct cep_index_ops *ops;
	struct cep_index *ix;
	bool lfht;
	size_t slots;            /* the size the case starts at */
	uint64_t home;           /* the cluster's home slot (ck) or hash (lfht) */
	struct ent *cluster[64]; /* in insertion order; the target is last */
	unsigned ncluster;
	struct ent *filler[8192];
	unsigned nfiller;
	enum op op;
	unsigned victim;         /* index into cluster[] for del-* */
	/* the hook */
	bool armed;
	unsigned fire_at, compares;
	bool fired;
	pthread_t resizer;
	bool resizing;
	size_t resize_to;
	_Atomic int resized;
} c;

static void ins(struct ent *e)
{
	struct cep_ikey *ex;
	int r;

	cep_rcu_read_lock();
	r = c.ops->insert(c.ix, thash(&e->k, NULL), &e->k, &ex);
	cep_rcu_read_unlock();
	if (r) {
		fprintf(stderr, "insert: %d\n", r);
		exit(2);
	}
}

static int del(struct ent *e)
{
	int r;

	cep_rcu_read_lock();
	r = c.ops->remove(c.ix, thash(&e->k, NULL), &e->k);
	cep_rcu_read_unlock();
	return r;
}

/* A hash whose home slot in a map of c.slots slots is @home, with random
 * bits above it, so that (as with real hashes) its low 10 bits need not
 * equal its home slot: ck's generation counter of the hash and of the
 * home then differ whenever the map is smaller than 1,024 slots. */
static uint64_t hash_at(uint64_t home)
{
	return (rnd() & ~(uint64_t)(c.slots - 1)) | (home & (c.slots - 1));
}

static void *resize_thread(void *arg)
{
	(void)arg;
	cep_rcu_thread_ensure();
	cep_index_lfht_resize(c.ix, c.resize_to);
	atomic_store(&c.resized, 1);
	return NULL;
}

static void start_resize(size_t to, bool wait_done)
{
	struct timespec ts = { 0, 1000000 };

	c.resize_to = to;
	atomic_store(&c.resized, 0);
	if (pthread_create(&c.resizer, NULL, resize_thread, NULL)) {
		fprintf(stderr, "pthread_create failed\n");
		exit(2);
	}
	c.resizing = true;
	/* A grow completes without waiting for readers: wait for it, so the
	 * lookup goes on in the grown table. A shrink's unlinks wait for our
	 * read side: give it time to publish its smaller size, then go on. */
	for (int i = 0; i < (wait_done ? 5000 : 20) && !atomic_load(&c.resized); i++)
		nanosleep(&ts, NULL);
	if (wait_done && !atomic_load(&c.resized)) {
		fprintf(stderr, "rculfhash grow did not complete inside a lookup\n");
		check_failures++;
	}
}

static void do_op(const struct cep_ikey *stored)
{
	unsigned target = c.ncluster - 1;

	switch (c.op) {
	case OP_DEL_BEFORE:
		(void)del(c.cluster[c.victim]);
		break;
	case OP_DEL_CURRENT:
		if (stored != &c.cluster[target]->k)
			(void)del((struct ent *)((char *)stored - offsetof(struct ent, k)));
		break;
	case OP_DEL_REINSERT:
		if (del(c.cluster[c.victim]) == 0)
			ins(ent_new(c.cluster[c.victim]->k.b));
		break;
	case OP_INSERT:
		for (int i = 0; i < 3; i++)
			ins(ent_new(c.lfht ? c.home : hash_at(c.home)));
		break;
	case OP_DISPLACE:
		for (int i = 1; i <= 3; i++)
			ins(ent_new(c.lfht ? c.home : hash_at(c.home - (uint64_t)i)));
		break;
	case OP_GROW:
		if (c.lfht) {
			start_resize(c.slots * 4, true);
		} else {
			size_t b = c.ops->buckets(c.ix);

			for (size_t i = 0; i < 2 * c.slots && c.ops->buckets(c.ix) == b; i++)
				ins(ent_new(hash_at(rnd())));
			CHECK(c.ops->buckets(c.ix) > b);
		}
		break;
	case OP_SHRINK:
		if (c.lfht) {
			start_resize(c.slots / 4, false);
		} else {
			size_t b = c.ops->buckets(c.ix);

			while (c.nfiller && c.ops->buckets(c.ix) == b)
				(void)del(c.filler[--c.nfiller]);
			CHECK(c.ops->buckets(c.ix) < b);
		}
		break;
	default:
		break;
	}
}

static void hook(const struct cep_ikey *stored, const struct cep_ikey *key)
{
	if (!c.armed || key != &c.cluster[c.ncluster - 1]->k)
		return;
	if (c.compares++ != c.fire_at)
		return;
	c.armed = false; /* one shot; the operation's own probes pass by */
	c.fired = true;
	do_op(stored);
}

/* One case: returns 1 if the lookup missed the target, 0 if it found it,
 * -1 if the hook never fired (fewer comparisons than fire_at). */
static int run_case(const struct cep_index_ops *ops, size_t slots, enum op op, unsigned ncluster,
		    unsigned victim, unsigned fire_at)
{
	struct cep_index_attr a = {
		.initial = slots,
		.min = op == OP_SHRINK ? 16 : slots,
		.shards = 1,
		.node_delta = -CEP_INDEX_NODE_SIZE,
		.hash = thash,
	};
	struct cep_ikey *got;
	struct ent *target;
	size_t fill;
	int ret;

	memset(&c, 0, sizeof(c));
	pool_used = 0;
	c.ops = ops;
	c.lfht = ops == &cep_index_lfht_ops;
	c.slots = slots;
	c.op = op;
	c.victim = victim;
	c.fire_at = fire_at;
	if (ops->create(&a, &c.ix)) {
		fprintf(stderr, "create failed\n");
		exit(2);
	}
	c.home = c.lfht ? rnd() : slots / 2 + 3;
	/* Filler at random homes: 40% for a shrink to have something to
	 * remove, else 25% (below every grow threshold). */
	fill = slots * (op == OP_SHRINK ? 40 : 25) / 100;
	if (fill > sizeof(c.filler) / sizeof(c.filler[0]))
		fill = sizeof(c.filler) / sizeof(c.filler[0]);
	for (size_t i = 0; i < fill; i++) {
		c.filler[c.nfiller] = ent_new(hash_at(rnd()));
		ins(c.filler[c.nfiller++]);
	}
	for (unsigned i = 0; i < ncluster; i++)
		c.cluster[i] = ent_new(c.lfht ? c.home : hash_at(c.home));
	/* The target last in the probe: ck walks from its home in insertion
	 * order; rculfhash puts a new node first among equal hashes. */
	for (unsigned i = 0; i < ncluster; i++)
		ins(c.cluster[c.lfht ? ncluster - 1 - i : i]);
	c.ncluster = ncluster;
	target = c.cluster[ncluster - 1];

	cep_rcu_read_lock();
	c.armed = true;
	got = ops->lookup(c.ix, thash(&target->k, NULL), &target->k);
	c.armed = false;
	cep_rcu_read_unlock();
	if (c.resizing)
		pthread_join(c.resizer, NULL);

	if (!c.fired)
		ret = -1;
	else
		ret = got == &target->k ? 0 : 1;
	/* Quiescent now: the target is still there for a plain lookup. */
	cep_rcu_read_lock();
	CHECK(ops->lookup(c.ix, thash(&target->k, NULL), &target->k) == &target->k);
	cep_rcu_read_unlock();

	for (size_t i = 0; i < pool_used; i++)
		(void)del(&pool[i]);
	if (op == OP_GROW || op == OP_SHRINK)
		cep_rcu_barrier(); /* ck's deferred map and set frees */
	ops->destroy(c.ix);
	return ret;
}

int main(void)
{
	static const size_t sizes[] = { 16, 32, 64, 128, 256, 512, 1024, 2048, 4096 };
	const struct cep_index_ops *impls[] = { &cep_index_ck_ops, &cep_index_lfht_ops };
	unsigned total_missed = 0, total_cases = 0;

	pool = aligned_alloc(16, POOL * sizeof(*pool));
	if (!pool)
		return 2;
	atomic_store(&cep_index_probe_hook, hook);
	for (unsigned ii = 0; ii < 2; ii++) {
		for (unsigned si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			size_t slots = sizes[si];

			for (int op = 0; op < OP_N; op++) {
				unsigned cases = 0, missed = 0;
				unsigned ncluster = slots >= 64 ? 8 : 5;

				/* ck's smallest shard is its minimum: no shrink */
				if (op == OP_SHRINK && impls[ii] == &cep_index_ck_ops && slots <= 16)
					continue;
				for (unsigned victim = 0; victim + 1 < ncluster; victim++) {
					bool uses_victim = op == OP_DEL_BEFORE || op == OP_DEL_REINSERT;

					if (!uses_victim && victim > 0)
						break;
					for (unsigned m = 0; m < 2 * ncluster + 4; m++) {
						int r = run_case(impls[ii], slots, (enum op)op, ncluster,
								 victim, m);

						if (r < 0)
							break;
						cases++;
						missed += (unsigned)r;
					}
				}
				printf("%-9s %5zu slots %-12s %4u lookups, %u missed\n",
				       impls[ii]->name, slots, op_name[op], cases, missed);
				CHECK(cases > 0);
				CHECK_EQ(missed, 0);
				total_missed += missed;
				total_cases += cases;
			}
		}
	}
	printf("total: %u lookups with a writer inside, %u missed a present key\n", total_cases,
	       total_missed);
	atomic_store(&cep_index_probe_hook, NULL);
	free(pool);
	return check_done("index-probe");
}
