/* SPDX-License-Identifier: MIT */
/*
 * Lazy liburcu thread registration, the flavour switch, and reclamation in
 * batches. Guarantee: a thread is registered at most once by libcep, before
 * its first read-side section, and unregistered when it exits (pthread key
 * destructor) - so applications need not know libcep uses RCU. In QSBR mode
 * a thread that is not a dispatcher worker is offline except inside
 * libcep's read sections, so it never holds up a grace period.
 *
 * Reclamation in batches (issue 27). cep_call_rcu does not call liburcu's
 * call_rcu per object. liburcu 0.13's call_rcu thread sleeps on a futex
 * when its queue is empty, and a call_rcu that finds it asleep wakes it (a
 * futex wake; then its 10 ms nap, a grace period, the callbacks, sleep
 * again), so below its cycle's rate every connection woke it: 0.9 to 1.5
 * times a connection on cmtime's server in the guests; and cep-bench
 * connect made 8 call_rcu a connection, each an exchange on its queue's
 * shared tail.
 * (liburcu 0.13 has no start_poll_synchronize_rcu /
 * poll_state_synchronize_rcu, and a CM worker must never wait for a grace
 * period: docs/concurrency.md.) Instead:
 *
 * - each thread pushes what it frees on a list of its own (struct
 *   defer_list, linked through the objects' own rcu_head: no allocation
 *   per object), a lock-free stack whose only pusher is its thread and
 *   whose whole content any thread may take with one exchange;
 * - lists reach liburcu in carriers (struct defer_batch: one call_rcu,
 *   whose callback runs each object's callback in turn): a thread's own
 *   list when it holds DEFER_MAX objects (at once, by its thread), and
 *   every list, once the oldest object deferred is DEFER_AGE_NS old, by
 *   the first thread to notice at a quiescent point: a deferral, a
 *   dispatcher worker between batches and before it sleeps (workers wake
 *   at least once a second), cep_rcu_quiescent(); a thread that exits or
 *   unregisters, and a worker that stops, hands its own list over; and
 *   cep_rcu_barrier takes every list first, so what cep_table_check and
 *   cep_table_destroy wait for is what they waited for before: every
 *   object deferred before the call;
 * - so liburcu sees one call_rcu per DEFER_MAX objects at full speed and
 *   about one per DEFER_AGE_NS at low rates, its thread wakes once a
 *   batch (cmtime's server: 0.025 to 0.046 times a connection), no list
 *   holds more than DEFER_MAX objects, and, while a dispatcher's workers
 *   run, none waits much longer than DEFER_AGE_NS plus a worker's longest
 *   sleep.
 *
 * Why no reader touches freed memory and nothing is freed twice: a caller
 * defers an object only once nothing new can find it (removed from every
 * index, or its count at zero), as it called call_rcu before. Deferring
 * postpones the call_rcu, never advances it: liburcu runs a callback after
 * a grace period that begins after its call_rcu, which is after the
 * object became unreachable, so every read section that could hold it has
 * ended. An object sits on one list, pushed once by its own thread (each
 * caller defers an object at most once: one last put, one unpublish); a
 * list's content leaves it in one exchange, so exactly one taker gets it
 * and puts it in exactly one carrier, whose callback runs each object's
 * callback once (in any order: no callback reads another object).
 *
 * TSan (tsan.h's hand-off edge, kept per object and added per carrier):
 * the object's last writes are released on the object before its push and
 * acquired first thing in its callback, as before; the link and callback
 * a pusher writes are ordered before the exchange that takes them (a
 * release CAS and an acquire exchange: C11, which TSan sees), and the
 * taker's carrier before liburcu's callback (cep_tsan_release on the
 * carrier before call_rcu, cep_rcu_callback_begin on it in the callback).
 * cep_rcu_barrier: a take of every list hands its carriers over before it
 * lets go of defer_mtx, and an owner's own hand-off is done before
 * cep_call_rcu returns, so an object whose deferral happens before a
 * barrier's call is in liburcu's queue before the barrier waits on it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cep/table.h>

#include "rcu.h"
#include "rcu_qsbr.h"

char cep_tsan_grace_period;
char cep_tsan_callbacks_done;

bool cep_rcu_qsbr;
__thread unsigned cep_rcu_nesting;

static pthread_key_t rcu_key;
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;
__thread bool cep_rcu_registered;
static __thread bool rcu_worker;   /* QSBR: a dispatcher worker, online for good */

/* ---- reclamation in batches (head comment) ------------------------------ */

/* Objects a thread's list holds before its thread hands it over: with 6
 * to 8 objects a connection (both sides' CEPs and keys, QP records where
 * QPs come and go), about 0.015 call_rcu a connection at full speed. */
#ifdef CEP_RCU_DEFER_MAX /* tests: 1 is a call_rcu per object, as before */
#define DEFER_MAX CEP_RCU_DEFER_MAX
#else
#define DEFER_MAX 512u
#endif
/* The oldest deferred object's wait before a quiescent point hands every
 * list over: one call_rcu a second at low rates (cmtime's server in the
 * guests sets up 50 to 200 connections a second; at 250 ms its call_rcu
 * thread still woke 0.13 times a connection), as the kernel's lazy RCU
 * holds callbacks for seconds. */
#define DEFER_AGE_NS (1000ull * 1000000u)

/* One thread's deferred objects, linked through rcu_head.next.next, the
 * latest first. head: pushed by the owner only (CAS), taken whole by any
 * thread (exchange). n: the owner's count of what it pushed since a take
 * zeroed it (relaxed; at least the list's length, defer_take_all says
 * why; more after a take, which only hands over early). Listed in
 * defer_head while its thread may push (under defer_mtx). */
struct defer_list {
	_Atomic(struct rcu_head *) head;
	_Atomic unsigned n;
	_Atomic uint64_t deferred;     /* statistics; written by the owner only */
	struct defer_list *next, **pprev;
	bool listed;                   /* owner's */
};

/* One call_rcu for several lists' chains. */
struct defer_batch {
	struct rcu_head rcu;
	unsigned n;
	struct rcu_head *chain[];
};

static __thread struct defer_list defer_self;
/* Guards defer_head, the lists' links, defer_gone; held across a take of
 * every list and its call_rcu (cep_rcu_barrier relies on it). */
static pthread_mutex_t defer_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct defer_list *defer_head;
static uint64_t defer_gone;            /* deferred counts of unlisted threads */
/* CLOCK_MONOTONIC_COARSE ns (never 0) at which an object went onto an
 * empty list since the last take of all lists; 0: none since. seq_cst with
 * the pushes' and takes' RMWs on the lists (cep_call_rcu says why). */
static _Atomic uint64_t defer_since;
static _Atomic uint64_t st_call_rcu, st_freed, st_full, st_aged, st_barrier, st_exit;
static __thread bool defer_named; /* on liburcu's call_rcu threads */

static uint64_t coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) | 1;
}

static struct rcu_head *chain_next(struct rcu_head *h)
{
	return (struct rcu_head *)(void *)h->next.next;
}

static void flavour_call_rcu(struct rcu_head *head, void (*fn)(struct rcu_head *))
{
	atomic_fetch_add_explicit(&st_call_rcu, 1, memory_order_relaxed);
	if (cep_rcu_qsbr)
		cep_qsbr_call_rcu(head, fn);
	else
		urcu_memb_call_rcu(head, fn);
}

/* RCU callback of a carrier: each object's callback, then the carrier's
 * memory. Runs on liburcu's call_rcu thread. */
static void defer_batch_run(struct rcu_head *head)
{
	struct defer_batch *b = caa_container_of(head, struct defer_batch, rcu);
	uint64_t freed = 0;

	cep_rcu_callback_begin(b); /* pairs with the release in defer_hand */
	if (!defer_named) {
		/* Named for per-thread counts (/proc/PID/task/TID/comm); it
		 * inherits its creator's name otherwise, e.g. cep-worker0. */
		defer_named = true;
		(void)pthread_setname_np(pthread_self(), "urcu-call-rcu");
	}
	for (unsigned i = 0; i < b->n; i++) {
		struct rcu_head *h = b->chain[i], *next;

		for (; h; h = next, freed++) {
			next = chain_next(h); /* before the callback frees h */
			h->func(h);
		}
	}
	free(b);
	atomic_fetch_add_explicit(&st_freed, freed, memory_order_relaxed);
	cep_rcu_callback_end();
}

/* Hand @n chains (taken lists; NULL entries skipped) to liburcu in one
 * call_rcu, counted in @why. Without memory for the carrier, each object
 * goes alone, as before batching. Registered thread. */
static void defer_hand(struct rcu_head **chains, unsigned n, _Atomic uint64_t *why)
{
	struct defer_batch *b;
	unsigned k = 0;

	for (unsigned i = 0; i < n; i++)
		if (chains[i])
			chains[k++] = chains[i];
	if (k == 0)
		return;
	atomic_fetch_add_explicit(why, 1, memory_order_relaxed);
	b = malloc(sizeof(*b) + k * sizeof(b->chain[0]));
	if (!b) {
		for (unsigned i = 0; i < k; i++)
			for (struct rcu_head *h = chains[i], *next; h; h = next) {
				next = chain_next(h); /* call_rcu rewrites the link */
				flavour_call_rcu(h, h->func);
			}
		return;
	}
	b->n = k;
	memcpy(b->chain, chains, k * sizeof(b->chain[0]));
	/* Pairs with defer_batch_run's acquire: the chains' links and
	 * callbacks (ordered before our exchange by the pushers' release
	 * CAS) and the carrier happen before the callback reads them. */
	cep_tsan_release(b);
	flavour_call_rcu(&b->rcu, defer_batch_run);
}

/* Take every list and hand them over, up to DEFER_CARRY lists a call_rcu,
 * counted in @why; done under defer_mtx, so a barrier that takes the lists
 * after us finds our carriers queued (head comment). Registered thread. */
#define DEFER_CARRY 32u
static void defer_take_all(_Atomic uint64_t *why)
{
	struct rcu_head *chains[DEFER_CARRY];
	unsigned n = 0;

	pthread_mutex_lock(&defer_mtx);
	for (struct defer_list *l = defer_head; l; l = l->next) {
		/* n before the exchange: an object the owner pushes after
		 * the exchange is counted after this 0 (its CAS reads our
		 * exchange's NULL and so synchronises with it), so n never
		 * counts fewer objects than the list holds. seq_cst: see
		 * cep_call_rcu (the empty-list stamp). */
		atomic_store_explicit(&l->n, 0, memory_order_relaxed);
		chains[n] = atomic_exchange(&l->head, NULL);
		if (chains[n] && ++n == DEFER_CARRY) {
			defer_hand(chains, n, why);
			n = 0;
		}
	}
	defer_hand(chains, n, why);
	pthread_mutex_unlock(&defer_mtx);
}

/* The owner hands its own list over (full, or its thread is leaving). */
static void defer_take_own(struct defer_list *l, _Atomic uint64_t *why)
{
	struct rcu_head *chain;

	/* The exchange races a taker's only: each object goes to one of us.
	 * Relaxed: the owner pushed all of it, nothing else to order. */
	atomic_store_explicit(&l->n, 0, memory_order_relaxed);
	chain = atomic_exchange_explicit(&l->head, NULL, memory_order_relaxed);
	defer_hand(&chain, 1, why);
}

/* A quiescent point: if the oldest deferred object waited DEFER_AGE_NS,
 * the first thread to see it takes every list (registered first: call_rcu
 * wants it). Any thread. */
static void defer_poll(void)
{
	uint64_t since = atomic_load_explicit(&defer_since, memory_order_relaxed);

	/* The CAS picks one taker among the threads that saw the age. */
	if (since && coarse_ns() - since >= DEFER_AGE_NS &&
	    atomic_compare_exchange_strong(&defer_since, &since, 0)) {
		cep_rcu_thread_ensure();
		defer_take_all(&st_aged);
	}
}

void cep_rcu_quiescent(void)
{
	defer_poll();
}

static void defer_list_add(struct defer_list *l)
{
	pthread_mutex_lock(&defer_mtx);
	l->next = defer_head;
	l->pprev = &defer_head;
	if (defer_head)
		defer_head->pprev = &l->next;
	defer_head = l;
	pthread_mutex_unlock(&defer_mtx);
	l->listed = true;
}

/* The calling thread leaves: its list goes to liburcu, and out of the
 * registry (its memory is the thread's). Registered thread. */
static void defer_list_leave(void)
{
	struct defer_list *l = &defer_self;

	if (!l->listed)
		return;
	defer_take_own(l, &st_exit);
	pthread_mutex_lock(&defer_mtx);
	*l->pprev = l->next;
	if (l->next)
		l->next->pprev = l->pprev;
	defer_gone += atomic_load_explicit(&l->deferred, memory_order_relaxed);
	atomic_store_explicit(&l->deferred, 0, memory_order_relaxed);
	pthread_mutex_unlock(&defer_mtx);
	l->listed = false;
}

void cep_rcu_get_stats(struct cep_rcu_stats *st)
{
	uint64_t deferred;

	pthread_mutex_lock(&defer_mtx);
	deferred = defer_gone;
	for (struct defer_list *l = defer_head; l; l = l->next)
		deferred += atomic_load_explicit(&l->deferred, memory_order_relaxed);
	pthread_mutex_unlock(&defer_mtx);
	st->deferred = deferred;
	st->call_rcu = atomic_load_explicit(&st_call_rcu, memory_order_relaxed);
	st->freed = atomic_load_explicit(&st_freed, memory_order_relaxed);
	st->full = atomic_load_explicit(&st_full, memory_order_relaxed);
	st->aged = atomic_load_explicit(&st_aged, memory_order_relaxed);
	st->barrier = atomic_load_explicit(&st_barrier, memory_order_relaxed);
	st->exited = atomic_load_explicit(&st_exit, memory_order_relaxed);
}

static void rcu_thread_exit(void *arg)
{
	(void)arg;
	if (!cep_rcu_registered)
		return;
	defer_list_leave(); /* call_rcu wants a registered thread */
	cep_rcu_registered = false;
	if (!cep_rcu_qsbr) {
		urcu_memb_unregister_thread();
		return;
	}
	/* liburcu-qsbr unregisters an online thread only: be online. */
	if (!rcu_worker)
		cep_qsbr_online();
	cep_qsbr_unregister();
	rcu_worker = false;
}

/* Once per process, before any registration: the flavour. */
static void rcu_init(void)
{
	const char *env = getenv("CEP_RCU");

	cep_rcu_qsbr = env && !strcmp(env, "qsbr");
	(void)pthread_key_create(&rcu_key, rcu_thread_exit);
}

void cep_rcu_thread_register_slow(void)
{
	pthread_once(&rcu_once, rcu_init);
	if (cep_rcu_qsbr) {
		cep_qsbr_register(); /* registers online */
		if (!rcu_worker)
			cep_qsbr_offline(); /* online only in read sections */
	} else {
		urcu_memb_register_thread();
	}
	cep_rcu_registered = true;
	/* Non-NULL value so the destructor runs at thread exit. */
	(void)pthread_setspecific(rcu_key, &cep_rcu_registered);
}

void cep_rcu_qsbr_enter(void)
{
	if (!rcu_worker)
		cep_qsbr_online();
}

void cep_rcu_qsbr_leave(void)
{
	if (!rcu_worker)
		cep_qsbr_offline();
}

CEP_EXPORT void cep_thread_register(void)
{
	cep_rcu_thread_ensure();
}

CEP_EXPORT void cep_thread_unregister(void)
{
	rcu_thread_exit(NULL);
	pthread_once(&rcu_once, rcu_init);
	(void)pthread_setspecific(rcu_key, NULL);
}

void cep_call_rcu(struct rcu_head *head, void *obj, void (*fn)(struct rcu_head *))
{
	struct defer_list *l = &defer_self;
	struct rcu_head *old;
	unsigned n;

	cep_rcu_thread_ensure();
	if (__builtin_expect(!l->listed, 0))
		defer_list_add(l);
	/* Pairs with cep_rcu_callback_begin(): our writes before the free. */
	cep_tsan_release(obj);
	head->func = fn;
	/* seq_cst, with the stamp below, the takers' exchanges and their
	 * reset of defer_since: a push that finds the list empty stamps
	 * after any take that emptied it, so no list stays non-empty with
	 * no stamp (a stale stamp only hands over early). The CAS releases
	 * the link and the object's last writes to the exchange that takes
	 * it (TSan sees C11 atomics). */
	old = atomic_load_explicit(&l->head, memory_order_relaxed);
	do
		head->next.next = (struct cds_wfcq_node *)(void *)old;
	while (!atomic_compare_exchange_weak(&l->head, &old, head));
	atomic_store_explicit(&l->deferred,
			      atomic_load_explicit(&l->deferred, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	if (!old) {
		uint64_t zero = 0;

		(void)atomic_compare_exchange_strong(&defer_since, &zero, coarse_ns());
	}
	n = atomic_load_explicit(&l->n, memory_order_relaxed) + 1;
	atomic_store_explicit(&l->n, n, memory_order_relaxed);
	if (n >= DEFER_MAX)
		defer_take_own(l, &st_full);
	else
		defer_poll();
}

void cep_rcu_barrier(void)
{
	cep_rcu_thread_ensure();
	/* Every object deferred before this call: into liburcu's queue
	 * first (a take in progress holds defer_mtx until its call_rcu). */
	atomic_store(&defer_since, 0);
	defer_take_all(&st_barrier);
	/* qsbr: liburcu puts an online caller offline for the wait. */
	if (cep_rcu_qsbr)
		cep_qsbr_barrier();
	else
		urcu_memb_barrier();
	cep_tsan_acquire(&cep_tsan_callbacks_done);
}

const struct rcu_flavor_struct *cep_rcu_flavor(void)
{
	pthread_once(&rcu_once, rcu_init);
	return cep_rcu_qsbr ? cep_qsbr_flavor() : &urcu_memb_flavor;
}

void cep_rcu_worker_begin(void)
{
	pthread_once(&rcu_once, rcu_init);
	if (!cep_rcu_qsbr)
		return;
	if (cep_rcu_registered && !rcu_worker)
		cep_qsbr_online(); /* registered earlier, offline */
	rcu_worker = true;
	cep_rcu_thread_ensure();
}

void cep_rcu_worker_quiescent(void)
{
	cep_rcu_quiescent(); /* both flavours: batches of frees (head comment) */
	if (rcu_worker) {
		/* Our reads before this point happen before any callback of a
		 * grace period this ends (the memb flavour's unlock does it). */
		cep_tsan_release(&cep_tsan_grace_period);
		cep_qsbr_quiescent();
	}
}

void cep_rcu_worker_idle_begin(void)
{
	cep_rcu_quiescent();
	if (rcu_worker) {
		cep_tsan_release(&cep_tsan_grace_period);
		cep_qsbr_offline();
	}
}

void cep_rcu_worker_idle_end(void)
{
	if (rcu_worker)
		cep_qsbr_online();
}

void cep_rcu_worker_end(void)
{
	if (defer_self.listed) /* listed: registered */
		defer_take_own(&defer_self, &st_exit);
	if (rcu_worker) {
		cep_tsan_release(&cep_tsan_grace_period);
		cep_qsbr_offline();
		rcu_worker = false;
	}
}
