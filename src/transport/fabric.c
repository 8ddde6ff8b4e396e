/* SPDX-License-Identifier: MIT */
/*
 * In-process fabric (cep/fabric.h): ports in fixed slots owned by the fabric,
 * lock-free routing by scanning the slots, a per-port delivery gate that
 * makes stop() final, and a delivery thread for delayed and held MADs
 * (timed by the fabric's clock: CLOCK_MONOTONIC or a virtual cep_clock,
 * whose advance wakes the thread).
 *
 * Ordering guarantees: a receive function runs only between a successful
 * gate entry (inflight++ then state == RUNNING, both seq_cst) and its exit
 * (inflight--, release); stop() stores STOPPED (seq_cst) then waits for
 * inflight to drain, so by the store/load order of seq_cst either the sender
 * sees STOPPED or stop() sees its increment (Dekker), never neither.
 * Progress: send() without faults is lock-free and allocation-free; with
 * faults it takes the queue mutex once. stop() waits only for receive
 * functions already running.
 */
#include <endian.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cep/fabric.h>

#include "core/clock.h"
#include "wire/pcap.h"

#define FAB_DEFAULT_PORTS     64u
#define FAB_MAX_PORTS         4096u
#define FAB_DEFAULT_IN_FLIGHT 65536u
#define FAB_DEFAULT_HOLD_US   10000u
#define FAB_MAX_TIME_US       10000000u
#define FAB_QP1_QKEY          0x80010000u
#define FAB_CACHELINE         64

enum port_state {
	PORT_FREE = 0, /* slot unused: routes never match it */
	PORT_CREATED,  /* routable, not started: MADs dropped (dropped_stopped) */
	PORT_RUNNING,  /* MADs delivered to fn */
	PORT_STOPPED,  /* final until destroy: MADs dropped (dropped_stopped) */
};

/* Per-port counters, written by the threads that send through the port
 * (relaxed: counters only, no ordering depends on them). */
struct port_counters {
	_Atomic uint64_t sent, delivered, lost, duplicated, reordered, delayed,
		no_route, dropped_stopped, dropped_full;
};

struct fentry;

struct fport {
	/* Identity: written by create under the fabric lock, immutable until
	 * destroy. Read by the owner (send, query_port), by create's duplicate
	 * check (fabric lock) and by capture() inside the gate (which keeps
	 * the slot from being freed and reused meanwhile). */
	struct cep_transport tp;
	struct cep_fabric *fab;
	uint32_t index;
	uint64_t ca_guid;
	uint64_t stream;             /* fault PRNG key of this port */
	uint8_t port_num;
	uint8_t ll;
	uint8_t ack_delay;           /* reported by query_port */
	uint16_t my_lid;
	uint8_t my_gid[16];
	struct cep_mad_addr from;    /* template of the address receivers get */
	struct fentry *held;         /* reordered MAD waiting for the next send
				      * (fabric queue lock) */

	/* Route identity, read by every sender's scan: atomics because a
	 * stale scanner may read them while the slot is being reused. Written
	 * only while the slot is FREE (under the fabric lock). */
	_Alignas(FAB_CACHELINE) _Atomic uint16_t rt_lid;
	_Atomic uint8_t rt_ll;
	_Atomic uint64_t rt_gid_hi, rt_gid_lo;

	/* Receive gate, read-mostly half: written only by create/start/
	 * stop/destroy, read by every scan and delivery. */
	_Atomic int state;
	cep_recv_fn fn;              /* written before state becomes RUNNING */
	void *ctx;

	/* Receive gate, hot half: deliveries in progress. Its own line so
	 * the increments of deliverers do not bounce the line every sender's
	 * route() scan reads. */
	_Alignas(FAB_CACHELINE) _Atomic uint64_t inflight;

	/* Send side. */
	_Alignas(FAB_CACHELINE) _Atomic int send_ok; /* cleared by stop() */
	_Atomic uint64_t nsend;      /* index of the next send in the fault stream */
	struct port_counters c;
};

struct fentry {
	uint64_t time_ns;
	uint64_t seq;                /* FIFO among equal times */
	size_t heap_idx;
	int32_t held_by;             /* slot whose ->held this is, or -1 */
	uint8_t ll;
	uint32_t len;
	struct cep_mad_addr to, from;
	uint8_t mad[CEP_MAD_SIZE];
};

struct cep_fabric {
	uint64_t seed;
	struct cep_clock *clock;     /* immutable; NULL = CLOCK_MONOTONIC */
	struct cep_clock_sub sub;    /* on a virtual clock */
	uint32_t max_ports;
	uint32_t max_in_flight;
	struct fport *slots;
	/* Scan bound: slots >= hi were never used. Release on publish so a
	 * scanner that sees the new bound sees the slot's initialised atomics. */
	_Atomic uint32_t slots_hi;

	pthread_mutex_t lock;        /* port create/destroy */
	uint32_t nports;

	/* Faults: individually atomic; faults_on is stored last (release) so a
	 * sender that sees it on (acquire) sees the fields of that call. */
	_Atomic int faults_on;
	_Atomic uint64_t loss_thr, dup_thr, reorder_thr; /* p * 2^32 */
	_Atomic uint32_t delay_min_us, delay_max_us, hold_us;

	/* Delivery queue (faulted path only). */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;        /* queue changed / stop */
	pthread_cond_t idle_cond;    /* in_flight dropped to 0 */
	struct fentry **heap;
	size_t heap_len, heap_cap;
	uint32_t in_flight;          /* queued + being delivered by the thread */
	uint64_t next_seq;
	uint64_t enqueued;           /* MADs ever queued (clock quiesce) */
	bool thread_started, thread_stop;
	pthread_t thread;

	/* Outcomes of MADs delivered by the thread (relaxed: counters). */
	struct port_counters tc;
};

/* Innermost port whose fn runs on this thread: lets stop() called from a
 * port's own fn skip waiting for itself. */
static _Thread_local struct fport *tls_in_recv;

static inline void cnt(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed); /* counter only */
}

static uint64_t mono_ns(void)
{
	return cep_clock_now_ns(NULL);
}

/* The fabric's time: injected delays and holds. */
static uint64_t fab_ns(const struct cep_fabric *f)
{
	return cep_clock_now_ns(f->clock);
}

static struct timespec ns_to_ts(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u) };
	return ts;
}

/* splitmix64 finaliser: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* Draw k of the n-th send of a port: a pure function of its inputs. */
static uint64_t draw(uint64_t stream, uint64_t n, unsigned k)
{
	return mix64(stream + mix64(n * 0x9e3779b97f4a7c15ull + k + 1));
}

static bool chance(uint64_t r, uint64_t thr)
{
	return (r >> 32) < thr;
}

static void gid_words(const uint8_t gid[16], uint64_t *hi, uint64_t *lo)
{
	memcpy(hi, gid, 8);
	memcpy(lo, gid + 8, 8);
}

static inline struct fport *to_port(struct cep_transport *t)
{
	return (struct fport *)((char *)t - offsetof(struct fport, tp));
}

/* --- routing and delivery (lock-free) ---------------------------------- */

/* Find the port a MAD to @to goes to, or NULL. The result may be stale by
 * the time it is used; deliver() re-checks identity under the gate. */
static struct fport *route(struct cep_fabric *f, uint8_t ll, const struct cep_mad_addr *to)
{
	uint32_t hi = atomic_load_explicit(&f->slots_hi, memory_order_acquire);
	uint64_t ghi = 0, glo = 0;

	if (!to->lid)
		gid_words(to->gid, &ghi, &glo);
	for (uint32_t i = 0; i < hi; i++) {
		struct fport *p = &f->slots[i];

		/* acquire: pairs with create's release so the identity read next
		 * is the one published with this state (or a later one). */
		if (atomic_load_explicit(&p->state, memory_order_acquire) == PORT_FREE)
			continue;
		if (atomic_load_explicit(&p->rt_ll, memory_order_relaxed) != ll)
			continue;
		if (to->lid) {
			if (atomic_load_explicit(&p->rt_lid, memory_order_relaxed) == to->lid)
				return p;
		} else if (atomic_load_explicit(&p->rt_gid_hi, memory_order_relaxed) == ghi &&
			   atomic_load_explicit(&p->rt_gid_lo, memory_order_relaxed) == glo) {
			return p;
		}
	}
	return NULL;
}

static bool identity_matches(struct fport *p, uint8_t ll, const struct cep_mad_addr *to)
{
	uint64_t ghi, glo;

	if (atomic_load_explicit(&p->rt_ll, memory_order_relaxed) != ll)
		return false;
	if (to->lid)
		return atomic_load_explicit(&p->rt_lid, memory_order_relaxed) == to->lid;
	gid_words(to->gid, &ghi, &glo);
	return atomic_load_explicit(&p->rt_gid_hi, memory_order_relaxed) == ghi &&
	       atomic_load_explicit(&p->rt_gid_lo, memory_order_relaxed) == glo;
}

enum outcome { OUT_DELIVERED, OUT_STOPPED, OUT_NO_ROUTE };

/* Record a delivered MAD in the process-wide capture (src/wire/pcap.h). */
static void capture(const struct fport *dst, const uint8_t *mad, size_t len,
		    const struct cep_mad_addr *from)
{
	struct cep_pcap_meta m;

	/* Relaxed, as in cep_capture_mad(): skip building the metadata when
	 * capture is known to be off (the fast path's common case). */
	if (atomic_load_explicit(&cep_capture_state, memory_order_relaxed) == CEP_CAPTURE_OFF)
		return;
	memset(&m, 0, sizeof(m));
	memcpy(m.sgid, from->gid, 16);
	memcpy(m.dgid, dst->my_gid, 16);
	m.slid = from->lid;
	m.dlid = dst->my_lid;
	m.src_qpn = 1;
	m.dst_qpn = 1;
	m.qkey = FAB_QP1_QKEY;
	m.pkey = 0xffff;
	m.sl = from->sl;
	m.grh = from->grh_present;
	cep_capture_mad(mad, len, &m);
}

/* Deliver one MAD to @dst through its gate. Any thread, no lock held. */
static enum outcome deliver(struct fport *dst, uint8_t ll, const struct cep_mad_addr *to,
			    const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	enum outcome o = OUT_DELIVERED;
	struct fport *outer;
	int st;

	/* seq_cst increment then seq_cst state load: with stop()'s seq_cst
	 * store then load, one of the two sees the other (Dekker), so fn never
	 * starts after stop() has seen inflight == 0. */
	atomic_fetch_add_explicit(&dst->inflight, 1, memory_order_seq_cst);
	st = atomic_load_explicit(&dst->state, memory_order_seq_cst);
	/* While we hold the gate and saw a non-FREE state, destroy cannot free
	 * the slot, so the identity re-read here is the port's. */
	if (st == PORT_FREE || !identity_matches(dst, ll, to)) {
		o = OUT_NO_ROUTE;
	} else if (st != PORT_RUNNING) {
		o = OUT_STOPPED;
	} else {
		capture(dst, mad, len, from);
		outer = tls_in_recv;
		tls_in_recv = dst;
		dst->fn(dst->ctx, mad, len, from);
		tls_in_recv = outer;
	}
	/* release: fn's effects happen before stop() returns (its acquire
	 * load of inflight). */
	atomic_fetch_sub_explicit(&dst->inflight, 1, memory_order_release);
	return o;
}

static void count_outcome(struct port_counters *c, enum outcome o)
{
	switch (o) {
	case OUT_DELIVERED: cnt(&c->delivered); break;
	case OUT_STOPPED: cnt(&c->dropped_stopped); break;
	case OUT_NO_ROUTE: cnt(&c->no_route); break;
	}
}

static void make_from(const struct fport *p, const struct cep_mad_addr *to,
		      struct cep_mad_addr *from)
{
	*from = p->from;
	from->sl = to->sl;
	from->hop_limit = to->hop_limit;
	from->traffic_class = to->traffic_class;
	from->flow_label = to->flow_label;
	if (p->ll != CEP_FABRIC_LINK_ROCE)
		from->grh_present = to->grh_present ? 1 : 0;
}

/* --- the delivery queue (faulted path) --------------------------------- */

static bool entry_before(const struct fentry *a, const struct fentry *b)
{
	return a->time_ns < b->time_ns || (a->time_ns == b->time_ns && a->seq < b->seq);
}

static void heap_set(struct cep_fabric *f, size_t i, struct fentry *e)
{
	f->heap[i] = e;
	e->heap_idx = i;
}

/* Restore the heap order around index i (after insert or re-key). qlock. */
static void heap_fix(struct cep_fabric *f, size_t i)
{
	struct fentry *e = f->heap[i];

	while (i > 0 && entry_before(e, f->heap[(i - 1) / 2])) {
		heap_set(f, i, f->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		struct fentry *best = e;

		if (l < f->heap_len && entry_before(f->heap[l], best)) {
			m = l;
			best = f->heap[l];
		}
		if (l + 1 < f->heap_len && entry_before(f->heap[l + 1], best))
			m = l + 1;
		if (m == i)
			break;
		heap_set(f, i, f->heap[m]);
		i = m;
	}
	heap_set(f, i, e);
}

static struct fentry *heap_pop(struct cep_fabric *f)
{
	struct fentry *top = f->heap[0];

	f->heap_len--;
	if (f->heap_len) {
		heap_set(f, 0, f->heap[f->heap_len]);
		heap_fix(f, 0);
	}
	return top;
}

static void *fabric_thread(void *arg)
{
	struct cep_fabric *f = arg;

	pthread_mutex_lock(&f->qlock);
	while (!f->thread_stop) {
		struct fentry *e;
		struct fport *dst;
		enum outcome o;
		uint64_t now;

		if (!f->heap_len) {
			pthread_cond_wait(&f->qcond, &f->qlock);
			continue;
		}
		now = fab_ns(f);
		if (f->heap[0]->time_ns > now) {
			struct timespec ts = ns_to_ts(f->heap[0]->time_ns);

			if (f->clock) /* only an advance (which signals) moves time */
				pthread_cond_wait(&f->qcond, &f->qlock);
			else
				pthread_cond_timedwait(&f->qcond, &f->qlock, &ts);
			continue;
		}
		e = heap_pop(f);
		if (e->held_by >= 0 && f->slots[e->held_by].held == e)
			f->slots[e->held_by].held = NULL;
		pthread_mutex_unlock(&f->qlock);

		dst = route(f, e->ll, &e->to);
		o = dst ? deliver(dst, e->ll, &e->to, e->mad, e->len, &e->from) : OUT_NO_ROUTE;
		count_outcome(&f->tc, o);
		free(e);

		pthread_mutex_lock(&f->qlock);
		if (--f->in_flight == 0)
			pthread_cond_broadcast(&f->idle_cond);
	}
	pthread_mutex_unlock(&f->qlock);
	return NULL;
}

/* Queue @e (qlock held). false: cap reached or no memory; caller counts
 * dropped_full and frees @e. */
static bool enqueue_locked(struct cep_fabric *f, struct fentry *e)
{
	if (f->in_flight >= f->max_in_flight)
		return false;
	if (f->heap_len == f->heap_cap) {
		size_t cap = f->heap_cap ? f->heap_cap * 2 : 64;
		struct fentry **h = realloc(f->heap, cap * sizeof(*h));

		if (!h)
			return false;
		f->heap = h;
		f->heap_cap = cap;
	}
	if (!f->thread_started) {
		if (pthread_create(&f->thread, NULL, fabric_thread, f))
			return false;
		f->thread_started = true;
	}
	e->seq = f->next_seq++;
	f->enqueued++;
	f->heap_len++;
	heap_set(f, f->heap_len - 1, e);
	heap_fix(f, f->heap_len - 1);
	f->in_flight++;
	if (f->heap[0] == e)
		pthread_cond_signal(&f->qcond);
	return true;
}

static struct fentry *entry_new(const struct fport *p, const struct cep_mad_addr *to,
				const struct cep_mad_addr *from,
				const uint8_t *mad, size_t len, uint64_t time_ns)
{
	struct fentry *e = malloc(sizeof(*e));

	if (!e)
		return NULL;
	e->time_ns = time_ns;
	e->held_by = -1;
	e->ll = p->ll;
	e->len = (uint32_t)len;
	e->to = *to;
	e->from = *from;
	memcpy(e->mad, mad, len);
	return e;
}

/* send() with faults on. See cep_fabric_faults for the semantics. */
static int send_faulted(struct cep_fabric *f, struct fport *p, const uint8_t *mad,
			size_t len, const struct cep_mad_addr *to)
{
	/* Index of this send in the port's stream: concurrent senders on one
	 * port each get a distinct index (atomic RMW). */
	uint64_t n = atomic_fetch_add_explicit(&p->nsend, 1, memory_order_relaxed);
	uint64_t loss = atomic_load_explicit(&f->loss_thr, memory_order_relaxed);
	uint64_t dup = atomic_load_explicit(&f->dup_thr, memory_order_relaxed);
	uint64_t reo = atomic_load_explicit(&f->reorder_thr, memory_order_relaxed);
	uint32_t dmin = atomic_load_explicit(&f->delay_min_us, memory_order_relaxed);
	uint32_t dmax = atomic_load_explicit(&f->delay_max_us, memory_order_relaxed);
	uint32_t hold = atomic_load_explicit(&f->hold_us, memory_order_relaxed);
	struct fentry *q[2] = { NULL, NULL };
	struct fentry *prev;
	bool held = false;
	unsigned ncopies = 1;
	struct cep_mad_addr from;
	uint64_t now = fab_ns(f), last_ns = now;
	struct fport *dst;

	if (dmin > dmax)          /* torn read across a concurrent set_faults */
		dmin = dmax;
	cnt(&p->c.sent);
	make_from(p, to, &from);
	dst = route(f, p->ll, to);
	if (!dst) {
		cnt(&p->c.no_route);
		ncopies = 0;
	} else if (chance(draw(p->stream, n, 0), loss)) {
		cnt(&p->c.lost);
		ncopies = 0;
	} else if (chance(draw(p->stream, n, 1), dup)) {
		cnt(&p->c.duplicated);
		ncopies = 2;
	}
	if (ncopies && chance(draw(p->stream, n, 2), reo))
		held = true;

	for (unsigned c = 0; c < ncopies; c++) {
		uint64_t delay_us = 0, at;

		if (dmax)
			delay_us = dmin + draw(p->stream, n, 3 + c) % ((uint64_t)dmax - dmin + 1);
		if (delay_us)
			cnt(&p->c.delayed);
		if (c == 0 && held) {
			cnt(&p->c.reordered);
			at = now + (delay_us + hold) * 1000u;
		} else if (delay_us) {
			at = now + delay_us * 1000u;
		} else {
			enum outcome o = deliver(dst, p->ll, to, mad, len, &from);

			count_outcome(&p->c, o);
			continue;
		}
		if (at > last_ns && !(c == 0 && held))
			last_ns = at;
		q[c] = entry_new(p, to, &from, mad, len, at);
		if (!q[c])
			cnt(&p->c.dropped_full);
	}

	pthread_mutex_lock(&f->qlock);
	prev = p->held;
	p->held = NULL;
	for (unsigned c = 0; c < 2; c++) {
		if (!q[c])
			continue;
		if (!enqueue_locked(f, q[c])) {
			cnt(&p->c.dropped_full);
			free(q[c]);
			continue;
		}
		if (c == 0 && held) {
			q[c]->held_by = (int32_t)p->index;
			p->held = q[c];
		}
	}
	/* Release the MAD held by the previous send behind this one: after
	 * this send's copies in (time, seq) order. */
	if (prev) {
		prev->held_by = -1;
		prev->time_ns = last_ns;
		prev->seq = f->next_seq++;
		heap_fix(f, prev->heap_idx);
		pthread_cond_signal(&f->qcond);
	}
	pthread_mutex_unlock(&f->qlock);
	return 0;
}

/* --- port operations --------------------------------------------------- */

static int port_send(struct cep_transport *t, const uint8_t *mad, size_t len,
		     const struct cep_mad_addr *to)
{
	struct fport *p;
	struct cep_fabric *f;
	struct cep_mad_addr from;
	struct fport *dst;

	if (!t || !mad || !to || len == 0 || len > CEP_MAD_SIZE)
		return -EINVAL;
	p = to_port(t);
	f = p->fab;
	/* relaxed: a send racing stop() may go either way; stop() only
	 * promises about this port's receive side. */
	if (!atomic_load_explicit(&p->send_ok, memory_order_relaxed))
		return -ESHUTDOWN;
	/* acquire: pairs with set_faults' release of the fields. */
	if (atomic_load_explicit(&f->faults_on, memory_order_acquire))
		return send_faulted(f, p, mad, len, to);

	cnt(&p->c.sent);
	dst = route(f, p->ll, to);
	if (!dst) {
		cnt(&p->c.no_route);
		return 0;
	}
	make_from(p, to, &from);
	count_outcome(&p->c, deliver(dst, p->ll, to, mad, len, &from));
	return 0;
}

static int port_query(struct cep_transport *t, struct cep_port_info *out)
{
	struct fport *p;

	if (!t || !out)
		return -EINVAL;
	p = to_port(t);
	memset(out, 0, sizeof(*out));
	out->ca_guid_net = htobe64(p->ca_guid);
	memcpy(out->gid, p->my_gid, 16);
	out->lid = p->my_lid;
	out->port_num = p->port_num;
	out->link_layer = p->ll;
	out->gid_index = 0;
	out->active_mtu = p->ll == CEP_FABRIC_LINK_IB ? 5 : 3;
	out->pkey = 0xffff;
	out->ca_ack_delay = p->ack_delay;
	return 0;
}

static int port_start(struct cep_transport *t, cep_recv_fn fn, void *ctx)
{
	struct fport *p;
	int expect = PORT_CREATED;

	if (!t || !fn)
		return -EINVAL;
	p = to_port(t);
	pthread_mutex_lock(&p->fab->lock);
	if (atomic_load_explicit(&p->state, memory_order_relaxed) != PORT_CREATED) {
		pthread_mutex_unlock(&p->fab->lock);
		return -EALREADY;
	}
	p->fn = fn;
	p->ctx = ctx;
	/* seq_cst (includes release): a sender that sees RUNNING sees fn/ctx. */
	atomic_compare_exchange_strong(&p->state, &expect, PORT_RUNNING);
	pthread_mutex_unlock(&p->fab->lock);
	return 0;
}

static void port_stop(struct cep_transport *t)
{
	struct fport *p;
	uint64_t self;

	if (!t)
		return;
	p = to_port(t);
	atomic_store_explicit(&p->send_ok, 0, memory_order_relaxed); /* advisory */
	pthread_mutex_lock(&p->fab->lock);
	if (atomic_load_explicit(&p->state, memory_order_relaxed) != PORT_FREE)
		/* seq_cst: the Dekker store of the gate (see deliver()). */
		atomic_store_explicit(&p->state, PORT_STOPPED, memory_order_seq_cst);
	pthread_mutex_unlock(&p->fab->lock);
	/* The caller's own delivery (stop from inside fn) cannot drain. */
	self = tls_in_recv == p ? 1 : 0;
	/* seq_cst load: the other half of the Dekker pair; also acquires the
	 * release decrements, so every finished fn happens before we return. */
	while (atomic_load_explicit(&p->inflight, memory_order_seq_cst) > self)
		sched_yield();
}

static void port_destroy(struct cep_transport *t)
{
	struct fport *p;
	struct cep_fabric *f;

	if (!t)
		return;
	p = to_port(t);
	f = p->fab;
	port_stop(t);
	pthread_mutex_lock(&f->lock);
	if (atomic_load_explicit(&p->state, memory_order_relaxed) == PORT_FREE) {
		pthread_mutex_unlock(&f->lock); /* destroyed twice: a caller bug */
		return;
	}
	pthread_mutex_lock(&f->qlock);
	if (p->held) {          /* it stays queued until its hold time */
		p->held->held_by = -1;
		p->held = NULL;
	}
	pthread_mutex_unlock(&f->qlock);
	/* release: a scanner that sees FREE skips the slot; nothing else. */
	atomic_store_explicit(&p->state, PORT_FREE, memory_order_release);
	f->nports--;
	pthread_mutex_unlock(&f->lock);
}

static const struct cep_transport_ops fabric_port_ops = {
	.send = port_send,
	.query_port = port_query,
	.start = port_start,
	.stop = port_stop,
	.destroy = port_destroy,
};

/* --- fabric ------------------------------------------------------------ */

/* --- virtual clock (cep/clock.h) --------------------------------------- */

static struct cep_fabric *sub_fabric(struct cep_clock_sub *s)
{
	return (struct cep_fabric *)((char *)s - offsetof(struct cep_fabric, sub));
}

/* Time moved (clock mutex held): the thread re-reads it. */
static void fabric_clock_wake(struct cep_clock_sub *s)
{
	struct cep_fabric *f = sub_fabric(s);

	pthread_mutex_lock(&f->qlock);
	pthread_cond_signal(&f->qcond);
	pthread_mutex_unlock(&f->qlock);
}

/* qlock held: a MAD is due or being delivered by the thread. */
static bool fabric_busy_locked(struct cep_fabric *f)
{
	return (f->heap_len && f->heap[0]->time_ns <= fab_ns(f)) || f->in_flight > f->heap_len;
}

static int fabric_clock_busy(struct cep_clock_sub *s, uint64_t *activity)
{
	struct cep_fabric *f = sub_fabric(s);
	bool busy;

	pthread_mutex_lock(&f->qlock);
	busy = fabric_busy_locked(f);
	*activity = f->enqueued;
	pthread_mutex_unlock(&f->qlock);
	/* Synchronous deliveries run in the senders' threads (CM workers),
	 * which their own subscriptions cover. */
	return busy;
}

static int fabric_clock_is_self(struct cep_clock_sub *s)
{
	(void)s;
	return tls_in_recv != NULL;
}

/* Does the caller's struct (of its ->size) reach @field? */
#define ATTR_HAS(a, type, field) \
	((a)->size >= offsetof(type, field) + sizeof((a)->field))

int cep_fabric_create(const struct cep_fabric_attr *attr, struct cep_fabric **out)
{
	struct cep_fabric *f;
	pthread_condattr_t ca;
	uint32_t max_ports = FAB_DEFAULT_PORTS, max_in_flight = FAB_DEFAULT_IN_FLIGHT;
	uint64_t seed = 0;
	struct cep_clock *clock = NULL;

	if (!out || !attr || !ATTR_HAS(attr, struct cep_fabric_attr, seed))
		return -EINVAL;
	seed = attr->seed;
	if (ATTR_HAS(attr, struct cep_fabric_attr, max_ports) && attr->max_ports)
		max_ports = attr->max_ports;
	if (ATTR_HAS(attr, struct cep_fabric_attr, max_in_flight) && attr->max_in_flight)
		max_in_flight = attr->max_in_flight;
	if (ATTR_HAS(attr, struct cep_fabric_attr, clock))
		clock = attr->clock;
	if (max_ports > FAB_MAX_PORTS)
		return -EINVAL;
	if (!seed) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		seed = mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
		       mix64((uint64_t)getpid());
		if (!seed)
			seed = 1;
	}

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->slots = aligned_alloc(FAB_CACHELINE, max_ports * sizeof(struct fport));
	if (!f->slots) {
		free(f);
		return -ENOMEM;
	}
	memset(f->slots, 0, max_ports * sizeof(struct fport));
	for (uint32_t i = 0; i < max_ports; i++) {
		struct fport *p = &f->slots[i];

		p->tp.ops = &fabric_port_ops;
		p->fab = f;
		p->index = i;
		atomic_init(&p->state, PORT_FREE);
		atomic_init(&p->inflight, 0);
		atomic_init(&p->rt_lid, 0);
		atomic_init(&p->rt_ll, 0);
		atomic_init(&p->rt_gid_hi, 0);
		atomic_init(&p->rt_gid_lo, 0);
		atomic_init(&p->send_ok, 0);
		atomic_init(&p->nsend, 0);
	}
	f->seed = seed;
	f->max_ports = max_ports;
	f->max_in_flight = max_in_flight;
	atomic_init(&f->slots_hi, 0);
	atomic_init(&f->faults_on, 0);
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->qlock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->qcond, &ca);
	pthread_cond_init(&f->idle_cond, &ca);
	pthread_condattr_destroy(&ca);
	f->clock = clock;
	if (clock) {
		f->sub.wake = fabric_clock_wake;
		f->sub.busy = fabric_clock_busy;
		f->sub.is_self = fabric_clock_is_self;
		cep_clock_subscribe(clock, &f->sub);
	}
	*out = f;
	return 0;
}

int cep_fabric_destroy(struct cep_fabric *f)
{
	if (!f)
		return -EINVAL;
	pthread_mutex_lock(&f->lock);
	if (f->nports) {
		pthread_mutex_unlock(&f->lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&f->lock);

	if (f->clock)
		cep_clock_unsubscribe(f->clock, &f->sub);
	pthread_mutex_lock(&f->qlock);
	f->thread_stop = true;
	pthread_cond_signal(&f->qcond);
	pthread_mutex_unlock(&f->qlock);
	if (f->thread_started)
		pthread_join(f->thread, NULL);
	for (size_t i = 0; i < f->heap_len; i++)
		free(f->heap[i]);
	free(f->heap);
	pthread_cond_destroy(&f->qcond);
	pthread_cond_destroy(&f->idle_cond);
	pthread_mutex_destroy(&f->qlock);
	pthread_mutex_destroy(&f->lock);
	free(f->slots);
	free(f);
	return 0;
}

int cep_fabric_get_seed(const struct cep_fabric *f, uint64_t *out)
{
	if (!f || !out)
		return -EINVAL;
	*out = f->seed;
	return 0;
}

int cep_fabric_port_create(struct cep_fabric *f, const struct cep_fabric_port_attr *attr,
			   struct cep_transport **out)
{
	static const uint8_t zero[16];
	uint8_t gid[16];
	uint64_t ghi, glo;
	struct fport *p = NULL;
	uint32_t hi;

	if (!f || !out || !attr || !ATTR_HAS(attr, struct cep_fabric_port_attr, link_layer))
		return -EINVAL;
	if (!attr->ca_guid || attr->port_num == 0 || attr->port_num == 255)
		return -EINVAL;
	if (ATTR_HAS(attr, struct cep_fabric_port_attr, ca_ack_delay) && attr->ca_ack_delay > 31)
		return -EINVAL;
	if (attr->link_layer == CEP_FABRIC_LINK_IB) {
		if (attr->lid == 0 || attr->lid >= 0xc000)
			return -EINVAL;
	} else if (attr->link_layer == CEP_FABRIC_LINK_ROCE) {
		if (attr->lid != 0)
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	memcpy(gid, attr->gid, 16);
	if (!memcmp(gid, zero, 16)) {
		uint64_t g = attr->ca_guid + attr->port_num - 1;

		gid[0] = 0xfe;
		gid[1] = 0x80;
		for (int i = 0; i < 8; i++)
			gid[8 + i] = (uint8_t)(g >> (56 - 8 * i));
	}
	gid_words(gid, &ghi, &glo);

	pthread_mutex_lock(&f->lock);
	hi = atomic_load_explicit(&f->slots_hi, memory_order_relaxed);
	for (uint32_t i = 0; i < hi; i++) {
		struct fport *q = &f->slots[i];

		if (atomic_load_explicit(&q->state, memory_order_relaxed) == PORT_FREE) {
			if (!p)
				p = q;
			continue;
		}
		if ((attr->lid && q->my_lid == attr->lid) || !memcmp(q->my_gid, gid, 16)) {
			pthread_mutex_unlock(&f->lock);
			return -EEXIST;
		}
	}
	if (!p) {
		if (hi == f->max_ports) {
			pthread_mutex_unlock(&f->lock);
			return -ENOSPC;
		}
		p = &f->slots[hi];
	}
	/* The slot is FREE: scanners skip it, and a stale deliver() that holds
	 * its gate only reads the atomics below. */
	p->ca_guid = attr->ca_guid;
	p->port_num = attr->port_num;
	p->ll = attr->link_layer;
	p->ack_delay = ATTR_HAS(attr, struct cep_fabric_port_attr, ca_ack_delay) ?
		       attr->ca_ack_delay : 0;
	p->my_lid = attr->lid;
	memcpy(p->my_gid, gid, 16);
	p->stream = mix64(f->seed ^ mix64(attr->ca_guid ^ ((uint64_t)attr->port_num << 56)));
	memset(&p->from, 0, sizeof(p->from));
	p->from.lid = attr->lid;
	p->from.qpn = 1;
	p->from.qkey = FAB_QP1_QKEY;
	p->from.pkey_index = 0;
	p->from.grh_present = attr->link_layer == CEP_FABRIC_LINK_ROCE;
	memcpy(p->from.gid, gid, 16);
	p->held = NULL;
	p->fn = NULL;
	p->ctx = NULL;
	atomic_store_explicit(&p->nsend, 0, memory_order_relaxed);
	atomic_store_explicit(&p->send_ok, 1, memory_order_relaxed);
	atomic_store_explicit(&p->rt_lid, attr->lid, memory_order_relaxed);
	atomic_store_explicit(&p->rt_ll, attr->link_layer, memory_order_relaxed);
	atomic_store_explicit(&p->rt_gid_hi, ghi, memory_order_relaxed);
	atomic_store_explicit(&p->rt_gid_lo, glo, memory_order_relaxed);
	/* release: a scanner that sees CREATED sees the identity above. */
	atomic_store_explicit(&p->state, PORT_CREATED, memory_order_release);
	if (p->index >= hi)
		/* release: a scanner that reads the new bound sees the slot. */
		atomic_store_explicit(&f->slots_hi, p->index + 1, memory_order_release);
	f->nports++;
	pthread_mutex_unlock(&f->lock);
	*out = &p->tp;
	return 0;
}

static uint64_t prob_thr(double p)
{
	return (uint64_t)(p * 4294967296.0 + 0.5); /* p in [0,1]: no overflow */
}

static bool prob_ok(double p)
{
	return !isnan(p) && p >= 0.0 && p <= 1.0;
}

int cep_fabric_set_faults(struct cep_fabric *f, const struct cep_fabric_faults *x)
{
	uint32_t hold;
	bool on;

	if (!f || !x || !ATTR_HAS(x, struct cep_fabric_faults, delay_max_us))
		return -EINVAL;
	hold = ATTR_HAS(x, struct cep_fabric_faults, hold_max_us) ? x->hold_max_us : 0;
	if (!prob_ok(x->loss) || !prob_ok(x->duplicate) || !prob_ok(x->reorder) ||
	    x->delay_min_us > x->delay_max_us || x->delay_max_us > FAB_MAX_TIME_US ||
	    hold > FAB_MAX_TIME_US)
		return -EINVAL;
	if (!hold)
		hold = FAB_DEFAULT_HOLD_US;
	on = x->loss > 0 || x->duplicate > 0 || x->reorder > 0 || x->delay_max_us > 0;
	atomic_store_explicit(&f->loss_thr, prob_thr(x->loss), memory_order_relaxed);
	atomic_store_explicit(&f->dup_thr, prob_thr(x->duplicate), memory_order_relaxed);
	atomic_store_explicit(&f->reorder_thr, prob_thr(x->reorder), memory_order_relaxed);
	atomic_store_explicit(&f->delay_min_us, x->delay_min_us, memory_order_relaxed);
	atomic_store_explicit(&f->delay_max_us, x->delay_max_us, memory_order_relaxed);
	atomic_store_explicit(&f->hold_us, hold, memory_order_relaxed);
	/* release: a sender that sees faults on sees the fields above. */
	atomic_store_explicit(&f->faults_on, on, memory_order_release);
	return 0;
}

static void add_counters(struct cep_fabric_stats *s, struct port_counters *c)
{
#define RD(x) atomic_load_explicit(&c->x, memory_order_relaxed)
	s->sent += RD(sent);
	s->delivered += RD(delivered);
	s->lost += RD(lost);
	s->duplicated += RD(duplicated);
	s->reordered += RD(reordered);
	s->delayed += RD(delayed);
	s->no_route += RD(no_route);
	s->dropped_stopped += RD(dropped_stopped);
	s->dropped_full += RD(dropped_full);
#undef RD
}

int cep_fabric_stats(struct cep_fabric *f, struct cep_fabric_stats *out)
{
	struct cep_fabric_stats s;
	size_t n;

	if (!f || !out ||
	    !ATTR_HAS(out, struct cep_fabric_stats, dropped_stopped))
		return -EINVAL;
	memset(&s, 0, sizeof(s));
	for (uint32_t i = 0; i < f->max_ports; i++)
		add_counters(&s, &f->slots[i].c);
	add_counters(&s, &f->tc);
	n = out->size < sizeof(s) ? out->size : sizeof(s);
	s.size = out->size;
	memcpy(out, &s, n);
	return 0;
}

int cep_fabric_quiesce(struct cep_fabric *f, unsigned timeout_ms)
{
	uint64_t deadline;
	struct timespec ts;
	int rc = 0;

	if (!f)
		return -EINVAL;
	deadline = mono_ns() + (uint64_t)timeout_ms * 1000000u;
	ts = ns_to_ts(deadline);
	pthread_mutex_lock(&f->qlock);
	if (f->clock) {
		/* MADs due later wait for an advance: poll for the due ones. */
		while (fabric_busy_locked(f) && mono_ns() <= deadline) {
			struct timespec nap = { 0, 100000 };

			pthread_mutex_unlock(&f->qlock);
			nanosleep(&nap, NULL);
			pthread_mutex_lock(&f->qlock);
		}
		rc = fabric_busy_locked(f) ? -ETIMEDOUT : 0;
	} else {
		while (f->in_flight && rc == 0)
			rc = pthread_cond_timedwait(&f->idle_cond, &f->qlock, &ts);
		rc = f->in_flight ? -ETIMEDOUT : 0;
	}
	pthread_mutex_unlock(&f->qlock);
	if (rc)
		return rc;
	/* Synchronous deliveries in other threads. */
	for (uint32_t i = 0; i < f->max_ports; i++) {
		/* acquire: their fn effects happen before we return. */
		while (atomic_load_explicit(&f->slots[i].inflight, memory_order_acquire)) {
			if (mono_ns() > deadline)
				return -ETIMEDOUT;
			sched_yield();
		}
	}
	return 0;
}
