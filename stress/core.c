/* SPDX-License-Identifier: MIT */
/*
 * Core scenarios of cep-stress: the seed's races on the binding word and
 * table churn, with the invariant checker at quiescent points (every
 * round all threads drop what they hold and meet at a barrier).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cep/table.h>

#include "bindcheck.h"
#include "stress.h"
#include "core/table_keys.h"

#define ROUND_S 0.1
#define NQP 4

struct core_run {
	const char *name;
	const struct stress_opts *o;
	struct cep_table *t;
	pthread_barrier_t bar;
	atomic_bool stop;
	_Atomic uint64_t binds_ok, shutdowns, teardowns, ops;
	/* Per QPN: replacements begun / in progress, so a binder can tell
	 * the record it read is the one it bound (stress/bindcheck.h). */
	struct bind_watch watch[NQP];
};

struct core_thread {
	pthread_t th;
	struct core_run *run;
	int id;
	uint64_t rng;
};

static void teardown(struct cep *cep, void *ctx)
{
	struct core_run *r = ctx;

	atomic_fetch_add_explicit(&r->teardowns, 1, memory_order_relaxed);
	cep_destroy(cep);
}

static void check_quiescent(struct core_run *r, const char *when)
{
	char msg[1024];

	if (cep_table_check(r->t, msg, sizeof(msg)))
		stress_fail(r->name, "invariants %s: %s", when, msg);
}

/* Quiescent point: everyone drops what it holds, the main thread checks. */
static bool round_end(struct core_run *r)
{
	pthread_barrier_wait(&r->bar); /* all workers idle */
	pthread_barrier_wait(&r->bar); /* main checked */
	return !atomic_load(&r->stop);
}

/* bind-vs-destroy: half the threads bind fresh CEPs to a few QPNs, half
 * begin QP destruction, unregister and re-register the same QPNs. After a
 * successful bind the word must hold our CID, or RESERVED, or our CEP must
 * already be torn down: never another CEP's CID (no QP holds two). */
static void *bind_vs_destroy_thread(void *arg)
{
	struct core_thread *ct = arg;
	struct core_run *r = ct->run;
	const char *name = r->name;

	do {
		double end = stress_now() + ROUND_S;

		while (stress_now() < end) {
			uint64_t x = stress_rand(&ct->rng);
			uint32_t qpn = 0x200 + (uint32_t)(x % NQP), w;
			struct bind_watch *bw = &r->watch[qpn - 0x200];
			struct bind_snap snap;
			struct cep *c;
			int ret;

			atomic_fetch_add_explicit(&r->ops, 1, memory_order_relaxed);
			if (ct->id % 2 == 1) {
				cep_qp_destroy_begin(r->t, qpn, NULL);
				if ((x >> 12) & 1) {
					bind_watch_replace_begin(bw);
					ret = cep_qp_unregister(r->t, qpn);
					/* -EBUSY/-ENOENT: another destroyer already
					 * unregistered (and maybe re-registered) it. */
					if (ret && ret != -ENOENT && ret != -EBUSY)
						stress_fail(name, "unregister after destroy_begin: %d", ret);
					ret = cep_qp_register(r->t, qpn);
					if (ret && ret != -EEXIST)
						stress_fail(name, "register: %d", ret);
					bind_watch_replace_end(bw);
				}
				continue;
			}
			if (cep_create(r->t, NULL, &c)) {
				stress_fail(name, "cep_create failed");
				continue;
			}
			snap = bind_watch_snapshot(bw);
			ret = cep_bind(c, qpn);
			if (ret == 0) {
				atomic_fetch_add_explicit(&r->binds_ok, 1, memory_order_relaxed);
				if (cep_qp_binding(r->t, qpn, &w) == 0 && w != cep_local_comm_id(c) &&
				    w != CEP_BINDING_RESERVED && !cep_is_destroyed(c) &&
				    bind_watch_same_record(bw, snap)) {
					/* Another CEP's CID in the very record we bound,
					 * while ours is alive and linked: a QP holding
					 * two CEPs (seed race 2). */
					uint32_t q;

					if (cep_bound_qpn(c, &q) == 0 && q == qpn)
						stress_fail(name, "qpn %#x holds %#x while %#x is bound to it",
							    qpn, w, cep_local_comm_id(c));
				}
				switch ((x >> 16) % 3) {
				case 0:
					cep_unbind(c);
					cep_destroy(c);
					break;
				case 1:
					cep_destroy(c);
					break;
				default: /* left to the QP's destruction */
					break;
				}
			} else if (ret == -ESHUTDOWN) {
				atomic_fetch_add_explicit(&r->shutdowns, 1, memory_order_relaxed);
				if (!cep_is_destroyed(c))
					stress_fail(name, "bind to a dying QP left the CEP alive");
			} else if (ret == -EISCONN || ret == -ENOENT || ret == -ESTALE) {
				cep_destroy(c);
			} else {
				stress_fail(name, "cep_bind: unexpected %d", ret);
				cep_destroy(c);
			}
			cep_put(c);
		}
	} while (round_end(r));
	return NULL;
}

/* table-churn: create, key, look up and destroy over a working set far
 * larger than the initial table, so every index grows and shrinks. */
static void *churn_thread(void *arg)
{
	struct core_thread *ct = arg;
	struct core_run *r = ct->run;
	enum { SET = 4096 };
	struct cep **set = calloc(SET, sizeof(*set));
	uint32_t *ids = calloc(SET, sizeof(*ids));

	do {
		double end = stress_now() + ROUND_S;

		while (stress_now() < end) {
			uint64_t x = stress_rand(&ct->rng);
			unsigned i = (unsigned)(x % SET);
			struct cep *c;

			atomic_fetch_add_explicit(&r->ops, 1, memory_order_relaxed);
			if (!set[i]) {
				if (cep_create(r->t, NULL, &set[i]))
					continue;
				ids[i] = cep_local_comm_id(set[i]);
				cep_insert_remote_id(set[i], (uint32_t)x, (uint64_t)ct->id << 32 | i, NULL);
				cep_insert_remote_qpn(set[i], i, (uint64_t)ct->id, NULL);
			} else if ((x >> 20) % 4 == 0) {
				cep_destroy(set[i]);
				cep_put(set[i]);
				set[i] = NULL;
				if (cep_lookup_comm_id(r->t, ids[i], &c) == 0) {
					stress_fail(r->name, "destroyed CEP %#x still found", ids[i]);
					cep_put(c);
				}
			} else if (cep_lookup_comm_id(r->t, ids[i], &c) == 0) {
				if (c != set[i])
					stress_fail(r->name, "comm ID %#x found the wrong CEP", ids[i]);
				cep_put(c);
			} else {
				stress_fail(r->name, "live CEP %#x not found", ids[i]);
			}
		}
		/* Quiescence: drop our references (the CEPs stay in the table). */
		for (unsigned i = 0; i < SET; i++)
			if (set[i] && (stress_rand(&ct->rng) & 1)) {
				cep_destroy(set[i]);
				cep_put(set[i]);
				set[i] = NULL;
			}
		for (unsigned i = 0; i < SET; i++)
			if (set[i])
				cep_put(set[i]);
		pthread_barrier_wait(&r->bar);
		pthread_barrier_wait(&r->bar);
		/* Take the survivors' references back after the check (the
		 * stale pointer only marks the slot as used). */
		for (unsigned i = 0; i < SET; i++) {
			struct cep *c;

			if (set[i] && cep_lookup_comm_id(r->t, ids[i], &c) == 0)
				set[i] = c;
			else
				set[i] = NULL;
		}
	} while (!atomic_load(&r->stop));
	for (unsigned i = 0; i < SET; i++)
		if (set[i]) {
			cep_destroy(set[i]);
			cep_put(set[i]);
		}
	free(set);
	free(ids);
	return NULL;
}

static int run_threads(const char *name, const struct stress_opts *o, void *(*fn)(void *),
		       uint64_t salt)
{
	struct cep_table_attr a = { .size = sizeof(a), .initial_size = 16 };
	struct core_run r = { .name = name, .o = o };
	struct core_thread *th = calloc((size_t)o->threads, sizeof(*th));
	double end;
	int rounds = 0;

	a.teardown = teardown;
	a.ctx = &r;
	if (!th || cep_table_create(&a, &r.t)) {
		free(th);
		return -ENOMEM;
	}
	for (uint32_t q = 0; q < NQP; q++)
		cep_qp_register(r.t, 0x200 + q);
	pthread_barrier_init(&r.bar, NULL, (unsigned)o->threads + 1);
	for (int i = 0; i < o->threads; i++) {
		th[i].run = &r;
		th[i].id = i;
		th[i].rng = o->seed ^ salt ^ ((uint64_t)i << 48);
		pthread_create(&th[i].th, NULL, fn, &th[i]);
	}
	end = stress_now() + o->duration;
	do {
		pthread_barrier_wait(&r.bar); /* workers quiescent */
		check_quiescent(&r, "at a quiescent point");
		stress_progress();
		rounds++;
		/* Stop at the deadline, or at the first violation (fail fast)
		 * unless asked to see which checks fire (--keep-going). */
		if (stress_now() >= end || (stress_failures() > 0 && !o->keep_going))
			atomic_store(&r.stop, true);
		pthread_barrier_wait(&r.bar);
	} while (!atomic_load(&r.stop));
	for (int i = 0; i < o->threads; i++)
		pthread_join(th[i].th, NULL);
	/* Tear every QP down: nothing may survive but RESERVED words. */
	for (uint32_t q = 0; q < NQP; q++)
		cep_qp_destroy_begin(r.t, 0x200 + q, NULL);
	check_quiescent(&r, "at the end");
	if (o->verbose)
		printf("  %s: %d rounds, %" PRIu64 " ops, %" PRIu64 " binds, %" PRIu64
		       " refused (QP dying), %" PRIu64 " teardowns\n",
		       name, rounds, (uint64_t)r.ops, (uint64_t)r.binds_ok,
		       (uint64_t)r.shutdowns, (uint64_t)r.teardowns);
	if (cep_table_destroy(r.t))
		stress_fail(name, "table destroy found CEPs still referenced");
	pthread_barrier_destroy(&r.bar);
	free(th);
	return 0;
}

static int bind_vs_destroy(const struct stress_opts *o)
{
	return run_threads("bind-vs-destroy", o, bind_vs_destroy_thread, 0xb1d);
}

static int table_churn(const struct stress_opts *o)
{
	return run_threads("table-churn", o, churn_thread, 0xc4a);
}

/*
 * present-keys: keys that stay in the table the whole run are looked up
 * again and again while other threads insert and remove other keys of the
 * same indexes, in the default configuration (default table size and
 * index, so every shard stays small); every single lookup is checked, not
 * only at quiescent points: a miss of a present key is the race that left
 * a destroyed CEP's CID in a binding word (issue 17).
 */
enum { PRESENT = 200, CHURN = 64 };

struct present_run {
	struct cep_table *t;
	struct cep *cep[PRESENT];
	uint32_t id[PRESENT];
	atomic_bool stop;
	_Atomic uint64_t lookups, writes, misses;
};

struct present_thread {
	pthread_t th;
	struct present_run *run;
	int id;
	bool writer;
	uint64_t rng;
};

#define PRESENT_QPN(i) (0x10000u + (uint32_t)(i))
#define PRESENT_GUID 0x5eed0000cafe0000ull

static void present_miss(struct present_run *r, const char *what, uint32_t key)
{
	/* Report the first few; count all. */
	if (atomic_fetch_add(&r->misses, 1) < 5)
		stress_fail("present-keys", "%s %#x present throughout, lookup missed it", what, key);
}

static void *present_thread(void *arg)
{
	struct present_thread *pt = arg;
	struct present_run *r = pt->run;
	struct cep *mine[CHURN] = { 0 };
	uint32_t qpn_base = 0x20000u + (uint32_t)pt->id * CHURN;
	bool qp_on[CHURN] = { 0 };
	uint64_t n = 0;

	while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		uint64_t x = stress_rand(&pt->rng);
		unsigned i = (unsigned)(x % PRESENT);

		if (pt->writer) {
			unsigned j = (unsigned)(x >> 32) % CHURN;

			if ((x >> 20) & 1) {
				if (!mine[j]) {
					if (cep_create(r->t, NULL, &mine[j]) == 0)
						cep_insert_remote_id(mine[j], (uint32_t)(x >> 40),
								     PRESENT_GUID + 1 + (uint64_t)pt->id, NULL);
				} else {
					cep_destroy(mine[j]);
					cep_put(mine[j]);
					mine[j] = NULL;
				}
			} else if (!qp_on[j]) {
				qp_on[j] = cep_qp_register(r->t, qpn_base + j) == 0;
			} else {
				cep_qp_destroy_begin(r->t, qpn_base + j, NULL);
				if (cep_qp_unregister(r->t, qpn_base + j))
					stress_fail("present-keys", "unregister of a churned QPN failed");
				qp_on[j] = false;
			}
			n++;
		} else {
			struct cep *c;
			uint32_t b;

			if (cep_lookup_comm_id(r->t, r->id[i], &c))
				present_miss(r, "comm ID", r->id[i]);
			else {
				if (c != r->cep[i])
					stress_fail("present-keys", "comm ID %#x found another CEP", r->id[i]);
				cep_put(c);
			}
			if (cep_qp_binding(r->t, PRESENT_QPN(i), &b))
				present_miss(r, "QPN", PRESENT_QPN(i));
			if (cep_lookup_remote_id(r->t, (uint32_t)i, PRESENT_GUID, &c))
				present_miss(r, "remote ID", i);
			else
				cep_put(c);
			n += 3;
		}
	}
	for (unsigned j = 0; j < CHURN; j++) {
		if (mine[j]) {
			cep_destroy(mine[j]);
			cep_put(mine[j]);
		}
		if (qp_on[j]) {
			cep_qp_destroy_begin(r->t, qpn_base + j, NULL);
			cep_qp_unregister(r->t, qpn_base + j);
		}
	}
	atomic_fetch_add(pt->writer ? &r->writes : &r->lookups, n);
	return NULL;
}

/* One run on a table of @index (CEP_TABLE_INDEX_DEFAULT: the default
 * configuration, attr NULL) for @duration seconds. */
static int present_keys_on(const struct stress_opts *o, int index, double duration)
{
	struct cep_table_attr a = { .size = sizeof(a), .index = index };
	struct present_run r = { 0 };
	int nth = o->threads < 2 ? 2 : o->threads;
	struct present_thread *th = calloc((size_t)nth, sizeof(*th));
	double end;
	int ret = 0;

	if (!th || cep_table_create(index == CEP_TABLE_INDEX_DEFAULT ? NULL : &a, &r.t)) {
		free(th);
		return -ENOMEM;
	}
	for (int i = 0; i < PRESENT; i++) {
		if (cep_create(r.t, NULL, &r.cep[i]) || cep_qp_register(r.t, PRESENT_QPN(i)) ||
		    cep_insert_remote_id(r.cep[i], (uint32_t)i, PRESENT_GUID, NULL)) {
			ret = -ENOMEM;
			goto out;
		}
		r.id[i] = cep_local_comm_id(r.cep[i]);
	}
	/* Half the threads look up, half write (at least one of each). */
	for (int i = 0; i < nth; i++) {
		th[i].run = &r;
		th[i].id = i;
		th[i].writer = i % 2 == 1;
		th[i].rng = o->seed ^ 0x9e5e ^ ((uint64_t)i << 48);
		pthread_create(&th[i].th, NULL, present_thread, &th[i]);
	}
	end = stress_now() + duration;
	while (stress_now() < end && (stress_failures() == 0 || o->keep_going)) {
		struct timespec ts = { 0, 50 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		stress_progress();
	}
	atomic_store(&r.stop, true);
	for (int i = 0; i < nth; i++)
		pthread_join(th[i].th, NULL);
	check_quiescent(&(struct core_run){ .name = "present-keys", .t = r.t }, "at the end");
	if (o->verbose || r.misses)
		printf("  present-keys (%s): %" PRIu64 " lookups of present keys, %" PRIu64
		       " missed; %" PRIu64 " writes of other keys\n",
		       index == CEP_TABLE_INDEX_DEFAULT ? "default index" : "rculfhash",
		       (uint64_t)r.lookups, (uint64_t)r.misses, (uint64_t)r.writes);
out:
	for (int i = 0; i < PRESENT; i++) {
		if (r.cep[i]) {
			cep_destroy(r.cep[i]);
			cep_put(r.cep[i]);
		}
		cep_qp_destroy_begin(r.t, PRESENT_QPN(i), NULL);
		cep_qp_unregister(r.t, PRESENT_QPN(i));
	}
	if (cep_table_destroy(r.t))
		stress_fail("present-keys", "table destroy found CEPs still referenced");
	free(th);
	return ret;
}

/* The default configuration for most of the time, then rculfhash. */
static int present_keys(const struct stress_opts *o)
{
	int ret = present_keys_on(o, CEP_TABLE_INDEX_DEFAULT, o->duration * 2 / 3);

	if (ret == 0 && (stress_failures() == 0 || o->keep_going))
		ret = present_keys_on(o, CEP_TABLE_INDEX_RCULFHASH, o->duration / 3);
	return ret;
}

const struct scenario stress_core_scenarios[] = {
	{ "bind-vs-destroy", "bind fresh CEPs while the same QPs are destroyed (seed races 1, 2)",
	  bind_vs_destroy },
	{ "table-churn", "create/key/lookup/destroy over a working set that resizes the indexes",
	  table_churn },
	{ "present-keys", "keys present throughout are never missed while other keys churn "
	  "(default table; every lookup checked)", present_keys },
};
const int stress_core_count = sizeof(stress_core_scenarios) / sizeof(stress_core_scenarios[0]);
