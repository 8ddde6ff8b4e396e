/* SPDX-License-Identifier: MIT */
/*
 * cep-bench dispatch, queue rows: the receive queue alone, three ways, with
 * 1..N producer threads and one consumer. Each producer copies a 256-byte
 * MAD and its address in (as the CM's receive function does); the consumer
 * reads every MAD (a checksum over its words: the cache lines cross CPUs
 * as in the dispatcher) and drops it.
 *  ring      the dispatcher's own bounded MPSC ring (src/cm/dispatch.c), through
 *            cep_dispatch_post_mad, consumed by its worker thread
 *  ck_ring   ConcurrencyKit ck_ring, MPSC, MADs copied into the ring's slots
 *  wfcqueue  liburcu wait-free concurrent queue: a node per MAD (malloc by the
 *            producer, free by the consumer), the consumer splicing batches
 * A full bounded queue makes the producer yield and retry (nothing lost).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <ck_ring.h>
#include <urcu/wfcqueue.h>

#include "bench.h"
#include "cm/dispatch.h" /* the library's dispatcher (internal) */

#define QDEPTH 4096

struct qmad {
	uint16_t len;
	struct cep_mad_addr from;
	uint8_t mad[CEP_MAD_SIZE];
};

CK_RING_PROTOTYPE(qmad, qmad)

struct wnode {
	struct cds_wfcq_node node;
	struct qmad m;
};

struct qrun {
	int kind;                      /* 0 ring, 1 ck_ring, 2 wfcqueue */
	atomic_int stop;               /* producers: stop producing */
	_Atomic uint64_t consumed;     /* by the consumer (relaxed, read at the end) */
	_Atomic uint64_t sum;          /* checksum, so the reads are not optimised away */
	/* ring */
	struct cep_dispatch *d;
	/* ck_ring: one consumer, producers serialised by ck's own protocol */
	struct ck_ring ck;
	struct qmad *ckbuf;
	/* wfcqueue */
	struct cds_wfcq_head wh;
	struct cds_wfcq_tail wt;
	atomic_int cstop;              /* consumer: producers done, drain and stop */
};

static uint64_t touch(const uint8_t *mad, size_t len)
{
	uint64_t s = 0, w;

	for (size_t i = 0; i + 8 <= len; i += 8) {
		memcpy(&w, mad + i, 8);
		s += w;
	}
	return s;
}

/* The dispatcher's worker calls this for each MAD of its ring. */
static void ring_mad(void *ctx, unsigned worker, const uint8_t *mad, size_t len,
		     const struct cep_mad_addr *from)
{
	struct qrun *q = ctx;

	(void)worker;
	(void)from;
	atomic_fetch_add_explicit(&q->sum, touch(mad, len), memory_order_relaxed);
	atomic_fetch_add_explicit(&q->consumed, 1, memory_order_relaxed);
}

static void *consumer_main(void *arg)
{
	struct qrun *q = arg;
	uint64_t n = 0, sum = 0;
	unsigned idle = 0;
	int last = 0;

	for (;;) {
		int got = 0;

		if (q->kind == 1) {
			struct qmad m;

			while (ck_ring_dequeue_mpsc_qmad(&q->ck, q->ckbuf, &m)) {
				sum += touch(m.mad, m.len);
				n++;
				got = 1;
			}
		} else {
			struct cds_wfcq_head h;
			struct cds_wfcq_tail t;
			struct cds_wfcq_node *node, *next;

			cds_wfcq_init(&h, &t);
			if (__cds_wfcq_splice_blocking(&h, &t, &q->wh, &q->wt) != CDS_WFCQ_RET_SRC_EMPTY) {
				__cds_wfcq_for_each_blocking_safe(&h, &t, node, next) {
					struct wnode *w = caa_container_of(node, struct wnode, node);

					sum += touch(w->m.mad, w->m.len);
					free(w);
					n++;
				}
				got = 1;
			}
		}
		if (got) {
			idle = 0;
			continue;
		}
		if (last)
			break; /* empty after the producers stopped */
		/* acquire: the producers' enqueues (they were joined first) are
		 * visible to the drain after this load */
		if (atomic_load_explicit(&q->cstop, memory_order_acquire)) {
			last = 1;
			continue;
		}
		if (++idle > 64)
			sched_yield();
	}
	atomic_store_explicit(&q->consumed, n, memory_order_relaxed);
	atomic_store_explicit(&q->sum, sum, memory_order_relaxed);
	return NULL;
}

struct producer {
	pthread_t th;
	struct qrun *q;
	uint64_t sent;
	int err;
};

static void *producer_main(void *arg)
{
	struct producer *p = arg;
	struct qrun *q = p->q;
	struct cep_mad_addr from;
	uint8_t mad[CEP_MAD_SIZE];

	memset(&from, 0, sizeof(from));
	for (size_t i = 0; i < sizeof(mad); i++)
		mad[i] = (uint8_t)(i * 7);
	/* At least one MAD per producer: on a loaded host a producer may
	 * first run after a short repetition's stop (the smoke test read 0
	 * MADs/s for "ring" once in CI and failed on x_ring). */
	for (;;) {
		int ok;

		if (q->kind == 0) {
			ok = cep_dispatch_post_mad(q->d, 0, mad, sizeof(mad), &from) == 0;
		} else if (q->kind == 1) {
			struct qmad m;

			m.len = sizeof(mad);
			m.from = from;
			memcpy(m.mad, mad, sizeof(mad));
			ok = ck_ring_enqueue_mpsc_qmad(&q->ck, q->ckbuf, &m);
		} else {
			struct wnode *w = malloc(sizeof(*w));

			if (!w) {
				p->err = -ENOMEM;
				break;
			}
			cds_wfcq_node_init(&w->node);
			w->m.len = sizeof(mad);
			w->m.from = from;
			memcpy(w->m.mad, mad, sizeof(mad));
			cds_wfcq_enqueue(&q->wh, &q->wt, &w->node);
			ok = 1;
		}
		if (ok)
			p->sent++;
		else
			sched_yield(); /* full: let the consumer run */
		if (p->sent && atomic_load_explicit(&q->stop, memory_order_relaxed))
			break;
	}
	return NULL;
}

static const char *const queue_names[] = { "ring", "ck_ring", "wfcqueue" };

/* One repetition: MADs/s through queue @kind with @np producers. */
static int queue_once(const struct bench_opts *o, int kind, int np, double *rate)
{
	struct qrun q;
	struct producer p[BENCH_MAX_LIST];
	pthread_t consumer;
	uint64_t t0, t1, sent = 0;
	int ret = 0;

	memset(&q, 0, sizeof(q));
	q.kind = kind;
	if (kind == 0) {
		struct cep_dispatch_attr da = {
			.workers = 1, .queue_depth = QDEPTH, .ops.mad = ring_mad, .ctx = &q,
		};

		ret = cep_dispatch_create(&da, &q.d);
	} else if (kind == 1) {
		q.ckbuf = calloc(QDEPTH, sizeof(*q.ckbuf));
		ret = q.ckbuf ? 0 : -ENOMEM;
		ck_ring_init(&q.ck, QDEPTH);
	} else {
		cds_wfcq_init(&q.wh, &q.wt);
	}
	if (ret)
		return ret;
	if (kind != 0)
		pthread_create(&consumer, NULL, consumer_main, &q);
	t0 = bench_now_ns();
	for (int i = 0; i < np; i++) {
		p[i].q = &q;
		p[i].sent = 0;
		p[i].err = 0;
		pthread_create(&p[i].th, NULL, producer_main, &p[i]);
	}
	bench_sleep_s(o->duration);
	atomic_store_explicit(&q.stop, 1, memory_order_relaxed);
	for (int i = 0; i < np; i++) {
		pthread_join(p[i].th, NULL);
		sent += p[i].sent;
		if (p[i].err)
			ret = p[i].err;
	}
	if (kind == 0) {
		if (cep_dispatch_quiesce(q.d, 20000))
			ret = -ETIMEDOUT;
	} else {
		/* release: the producers' last enqueues before the consumer's
		 * final drain */
		atomic_store_explicit(&q.cstop, 1, memory_order_release);
		pthread_join(consumer, NULL);
	}
	t1 = bench_now_ns();
	if (kind == 0)
		cep_dispatch_destroy(q.d);
	free(q.ckbuf);
	if (!ret && atomic_load(&q.consumed) != sent)
		ret = -EPROTO; /* lost or duplicated */
	*rate = (double)sent * 1e9 / (double)(t1 - t0);
	return ret;
}

int bench_dispatch_queues(const struct bench_opts *o)
{
	int nq = 3, np = o->nthreads;
	double *res = calloc((size_t)nq * (size_t)np * (size_t)o->reps, sizeof(*res));

	if (!res)
		return 1;
	for (int rep = 0; rep < o->reps; rep++)
		for (int pi = 0; pi < np; pi++)
			for (int k = 0; k < nq; k++) {
				double *r = &res[((size_t)pi * (size_t)nq + (size_t)k) * (size_t)o->reps +
						 (size_t)rep];
				int ret = queue_once(o, k, o->threads[pi], r);

				if (ret) {
					fprintf(stderr, "cep-bench: queue %s with %d producers failed: %s\n",
						queue_names[k], o->threads[pi], strerror(-ret));
					free(res);
					return 1;
				}
				bench_progress(o, "queue rep %d/%d %s producers=%d: %.0f MADs/s", rep + 1,
					       o->reps, queue_names[k], o->threads[pi], *r);
			}
	if (!o->json)
		printf("# the receive queue alone: N producers copy 256-byte MADs in, 1 consumer "
		       "reads them\n%-9s %9s %12s %25s %7s %4s\n", "queue", "producers", "MADs/s",
		       "[min .. max]", "x ring", "reps");
	for (int pi = 0; pi < np; pi++) {
		struct bench_mmm m[3];

		for (int k = 0; k < nq; k++)
			m[k] = bench_median(&res[((size_t)pi * (size_t)nq + (size_t)k) * (size_t)o->reps],
					    o->reps);
		for (int k = 0; k < nq; k++) {
			if (o->json) {
				struct bench_json j;

				bench_json_begin(&j, "dispatch-queue");
				bench_json_str(&j, "impl", queue_names[k]);
				bench_json_int(&j, "producers", o->threads[pi]);
				bench_json_num(&j, "mads_per_s", m[k].med);
				bench_json_num(&j, "mads_per_s_min", m[k].min);
				bench_json_num(&j, "mads_per_s_max", m[k].max);
				bench_json_num(&j, "x_ring", m[k].med / m[0].med);
				bench_json_int(&j, "reps", o->reps);
				bench_json_end(&j);
			} else {
				char range[64];

				snprintf(range, sizeof(range), "[%.4g .. %.4g]", m[k].min, m[k].max);
				printf("%-9s %9d %12.4g %25s %6.2fx %4d\n", queue_names[k], o->threads[pi],
				       m[k].med, range, m[k].med / m[0].med, o->reps);
			}
		}
	}
	free(res);
	return 0;
}
