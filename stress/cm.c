/* SPDX-License-Identifier: MIT */
/*
 * CM scenarios of cep-stress: connection setup and release through the
 * whole engine on the in-process fabric, while application threads destroy
 * QPs and ids at random moments. Every id created must end in exactly one
 * DESTROYED event and see no event after it; after each round everything
 * is destroyed, drained, and both nodes' tables pass the invariant checker
 * with no CEP left and every binding INVALID or RESERVED. listener-churn
 * destroys and re-creates listeners while REQs and SIDR_REQs for them are
 * handled on both of B's workers: no request event may name a listener
 * after its DESTROYED.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cep/cm.h>
#include <cep/fabric.h>
#include <cep/table.h>
#include <cep/wire.h>

#include "stress.h"

#define NSLOT 128            /* active connection slots on node A */
#define NQPB 96              /* passive QPNs on node B (fewer: some accepts collide) */
#define QPN_A 0x10000u
#define QPN_B 0x20000u
#define SID 0x5157000000000001ull
#define MAXT (1u << 17)       /* tickets per round */
#define ROUND_S 0.5
#define GUID_A 0x0002c9030000a001ull
#define GUID_B 0x0002c9030000b002ull
#define GUID_C 0x0002c9030000c003ull
#define NLIS 4               /* churned listeners: service IDs SID + 1 .. SID + NLIS */

/* One id's life. Tickets live in an arena until the round ends, so a late
 * event for a dead id is detected instead of touching freed memory. */
struct ticket {
	pthread_mutex_t mtx;        /* API calls on id vs its DESTROYED */
	struct cep_cm_id *id;       /* mtx: valid until dead */
	int destroy_called;         /* mtx */
	int dead;                   /* mtx: DESTROYED delivered */
	int side;                   /* 0: active (A), 1: passive (B), 2: listener
				       (B); before ready */
	atomic_bool ready;          /* release: mtx and side initialised */
	_Atomic int destroyed_events;
	_Atomic int after_dead;     /* events delivered after DESTROYED */
};

struct mix {
	/* Per operation, out of 1000 (the rest: connect). */
	int disconnect_a, disconnect_b, destroy_id_a, destroy_id_b, destroy_qp_a, destroy_qp_b;
	double loss, dup, reorder;
	int dup_req_storm;
	int listener_churn;         /* out of 1000: destroy + re-create a listener;
				       also REQ / SIDR_REQ floods from C and
				       connects to the churned services */
};

struct cm_run {
	const char *name;
	const struct stress_opts *o;
	const struct mix *mix;
	struct cep_fabric *fab;
	struct cep_transport *tpa, *tpb, *tpc;
	struct cep_cm *a, *b;
	struct cep_cm_id *listener;
	struct ticket *arena;
	_Atomic unsigned nt;
	pthread_mutex_t slot_mtx[NSLOT];
	struct ticket *slot[NSLOT]; /* slot_mtx */
	pthread_mutex_t qpb_mtx[NQPB];
	pthread_mutex_t lis_mtx[NLIS];
	struct ticket *lis[NLIS];   /* lis_mtx: the current listener of SID+1+k */
	_Atomic uint32_t raw_id;    /* fresh comm / request IDs of C's floods */
	atomic_bool stop;
	_Atomic uint64_t connects, established, rejected, timeouts, qp_destroys, id_destroys,
		req_received, accepts_failed, raw_req_received;
};

static struct cm_run *cur; /* the running scenario, for callbacks */

void (*stress_cm_observer)(struct cep_cm *a, struct cep_cm *b);

static struct ticket *ticket_new(struct cm_run *r, int side)
{
	unsigned i = atomic_fetch_add(&r->nt, 1);
	struct ticket *t;

	if (i >= MAXT) {
		atomic_fetch_sub(&r->nt, 1);
		return NULL;
	}
	t = &r->arena[i];
	pthread_mutex_init(&t->mtx, NULL);
	t->side = side;
	/* Other threads pick arena slots at random: publish after init. */
	atomic_store_explicit(&t->ready, true, memory_order_release);
	return t;
}

/* Claim the one destroy of @t's id; caller holds t->mtx and calls
 * destroy_claimed() on the result after dropping it: from an application
 * thread cep_cm_destroy_id waits for a running callback of the id, and
 * the callbacks take t->mtx (cm.h: do not hold a lock a callback takes). */
static struct cep_cm_id *ticket_claim(struct cm_run *r, struct ticket *t)
{
	if (t->id && !t->destroy_called && !t->dead) {
		t->destroy_called = 1;
		atomic_fetch_add_explicit(&r->id_destroys, 1, memory_order_relaxed);
		return t->id; /* alive until the DESTROYED our destroy causes */
	}
	return NULL;
}

static void destroy_claimed(struct cm_run *r, struct cep_cm_id *id)
{
	if (id && cep_cm_destroy_id(id))
		stress_fail(r->name, "cep_cm_destroy_id refused a live id");
}

static int on_event(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct cm_run *r = cur;
	struct ticket *t = ev->context;
	struct cep_cm_id *doomed = NULL;

	if ((ev->type == CEP_CM_EV_REQ_RECEIVED || ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED) &&
	    t) {
		/* The child inherits its listener's context: a churned
		 * listener's ticket, which must not be dead yet. */
		pthread_mutex_lock(&t->mtx);
		if (t->side != 2 || t->dead || t->id != ev->listen_id)
			stress_fail(r->name, "%s names listener %p after its DESTROYED (or a wrong one)",
				    cep_cm_event_name(ev->type), (void *)ev->listen_id);
		pthread_mutex_unlock(&t->mtx);
	}
	if (ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED) {
		t = ticket_new(r, 1);
		if (!t)
			return 1; /* the CM answers with a reject and destroys it */
		pthread_mutex_lock(&t->mtx);
		t->id = id;
		cep_cm_id_set_context(id, t);
		cep_cm_sidr_rep(id, CEP_SIDR_SUCCESS, QPN_B, 0x1234, NULL, 0);
		doomed = ticket_claim(r, t); /* answered: its life is over */
		pthread_mutex_unlock(&t->mtx);
		destroy_claimed(r, doomed);
		return 0;
	}
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .starting_psn = 1,
						  .responder_resources = 1, .initiator_depth = 1 };
		static _Atomic uint32_t pick;
		uint32_t k = atomic_fetch_add_explicit(&pick, 7, memory_order_relaxed) % NQPB;
		int ret;

		atomic_fetch_add_explicit(&r->req_received, 1, memory_order_relaxed);
		if (ev->msg.u.req.local_ca_guid == GUID_C)
			atomic_fetch_add_explicit(&r->raw_req_received, 1, memory_order_relaxed);
		t = ticket_new(r, 1);
		if (!t) {
			cep_cm_reject(id, CEP_REJ_NO_RESOURCES, NULL, 0, NULL, 0);
			return 1; /* no ticket: let the CM destroy it */
		}
		pthread_mutex_lock(&t->mtx);
		t->id = id;
		cep_cm_id_set_context(id, t);
		if (ev->msg.u.req.local_ca_guid == GUID_C) {
			/* The raw port's REQ: leave it in REQ_RCVD, so every
			 * duplicate must be recognised and dropped. */
			pthread_mutex_unlock(&t->mtx);
			return 0;
		}
		ap.qpn = QPN_B + k;
		ret = cep_cm_accept(id, &ap);
		if (ret) {
			/* QP destroyed or bound by another accept: refuse. */
			atomic_fetch_add_explicit(&r->accepts_failed, 1, memory_order_relaxed);
			if (ret != -ESHUTDOWN && ret != -EISCONN && ret != -ENOENT && ret != -ESTALE)
				stress_fail(r->name, "accept: unexpected %d", ret);
			cep_cm_reject(id, CEP_REJ_NO_QP, NULL, 0, NULL, 0);
			doomed = ticket_claim(r, t);
		}
		pthread_mutex_unlock(&t->mtx);
		destroy_claimed(r, doomed);
		return 0;
	}
	if (!t) {
		if (ev->type != CEP_CM_EV_DESTROYED)
			stress_fail(r->name, "event %s without a ticket", cep_cm_event_name(ev->type));
		return 0;
	}
	pthread_mutex_lock(&t->mtx);
	if (t->dead) {
		atomic_fetch_add(&t->after_dead, 1);
		stress_fail(r->name, "event %s after DESTROYED", cep_cm_event_name(ev->type));
		pthread_mutex_unlock(&t->mtx);
		return 0;
	}
	if (t->id != id)
		stress_fail(r->name, "event for id %p delivered to ticket of %p", (void *)id,
			    (void *)t->id);
	switch (ev->type) {
	case CEP_CM_EV_ESTABLISHED:
	case CEP_CM_EV_RTU_RECEIVED:
		atomic_fetch_add_explicit(&r->established, 1, memory_order_relaxed);
		break;
	case CEP_CM_EV_REJ_RECEIVED:
		atomic_fetch_add_explicit(&r->rejected, 1, memory_order_relaxed);
		doomed = ticket_claim(r, t);
		break;
	case CEP_CM_EV_REQ_ERROR:
	case CEP_CM_EV_REP_ERROR:
		atomic_fetch_add_explicit(&r->timeouts, 1, memory_order_relaxed);
		doomed = ticket_claim(r, t);
		break;
	case CEP_CM_EV_TIMEWAIT_EXIT:
		doomed = ticket_claim(r, t);
		break;
	case CEP_CM_EV_DESTROYED:
		t->dead = 1;
		t->id = NULL;
		if (atomic_fetch_add(&t->destroyed_events, 1) != 0)
			stress_fail(r->name, "second DESTROYED for one id");
		if (!t->destroy_called)
			stress_fail(r->name, "DESTROYED without a destroy");
		break;
	default:
		break;
	}
	pthread_mutex_unlock(&t->mtx);
	destroy_claimed(r, doomed);
	return 0;
}

static void conn_param(struct cep_cm_conn_param *p, uint32_t qpn, uint32_t i)
{
	memset(p, 0, sizeof(*p));
	p->size = sizeof(*p);
	p->service_id = SID;
	p->qpn = qpn;
	p->starting_psn = i & 0xffffff;
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->remote_cm_response_timeout = 12; /* ~17 ms */
	p->local_cm_response_timeout = 12;
	p->packet_life_time = 5;            /* ~131 us */
	p->max_cm_retries = 4;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->primary.local_lid = 1;
	p->primary.remote_lid = 2;
	p->primary.subnet_local = 1;
	p->primary.local_ack_timeout = 8;   /* timewait ~2 ms */
	p->primary.packet_rate = 3;
}

static void op_connect(struct cm_run *r, unsigned s, uint64_t x)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_event };
	struct cep_cm_conn_param p;
	struct ticket *t = r->slot[s];
	struct cep_cm_id *doomed = NULL;
	int ret;

	if (t) {
		pthread_mutex_lock(&t->mtx);
		if (!t->dead) {
			pthread_mutex_unlock(&t->mtx);
			return; /* slot busy */
		}
		pthread_mutex_unlock(&t->mtx);
	}
	t = ticket_new(r, 0);
	if (!t)
		return;
	r->slot[s] = t;
	ia.context = t;
	pthread_mutex_lock(&t->mtx);
	if (cep_cm_create_id(r->a, &ia, &t->id)) {
		stress_fail(r->name, "create_id failed");
		t->dead = 1;
		t->destroy_called = 1;
		atomic_store(&t->destroyed_events, 1);
		pthread_mutex_unlock(&t->mtx);
		return;
	}
	conn_param(&p, QPN_A + s, (uint32_t)x);
	if (r->mix->listener_churn) /* to a churned listener, maybe just gone */
		p.service_id = SID + 1 + (x >> 48) % NLIS;
	atomic_fetch_add_explicit(&r->connects, 1, memory_order_relaxed);
	ret = cep_cm_connect(t->id, &p);
	if (ret) {
		/* The QP is being destroyed or gone: a refused connect. */
		if (ret != -ESHUTDOWN && ret != -ENOENT && ret != -EISCONN)
			stress_fail(r->name, "connect: unexpected %d", ret);
		doomed = ticket_claim(r, t);
	}
	pthread_mutex_unlock(&t->mtx);
	destroy_claimed(r, doomed);
}

/* Call @fn on slot @s's live id under the ticket lock. */
static void on_slot(struct cm_run *r, unsigned s, int what)
{
	struct ticket *t = r->slot[s];
	struct cep_cm_id *doomed = NULL;

	if (!t)
		return;
	pthread_mutex_lock(&t->mtx);
	if (t->id && !t->dead && !t->destroy_called) {
		if (what == 0)
			cep_cm_disconnect(t->id, NULL, 0); /* -EINVAL unless established */
		else
			doomed = ticket_claim(r, t);
	}
	pthread_mutex_unlock(&t->mtx);
	destroy_claimed(r, doomed);
}

static void on_passive(struct cm_run *r, uint64_t x, int what)
{
	unsigned n = atomic_load(&r->nt), i;
	struct cep_cm_id *doomed = NULL;
	struct ticket *t;

	if (n == 0)
		return;
	i = (unsigned)(x % n);
	t = &r->arena[i];
	if (!atomic_load_explicit(&t->ready, memory_order_acquire) || t->side != 1)
		return;
	pthread_mutex_lock(&t->mtx);
	if (t->id && !t->dead && !t->destroy_called) {
		if (what == 0)
			cep_cm_disconnect(t->id, NULL, 0);
		else
			doomed = ticket_claim(r, t);
	}
	pthread_mutex_unlock(&t->mtx);
	destroy_claimed(r, doomed);
}

static void qp_cycle(struct cm_run *r, struct cep_cm *cm, uint32_t qpn)
{
	int ret = cep_cm_qp_destroy(cm, qpn);

	atomic_fetch_add_explicit(&r->qp_destroys, 1, memory_order_relaxed);
	if (ret && ret != -ENOENT && ret != -EBUSY)
		stress_fail(r->name, "qp destroy %#x: %d", qpn, ret);
	ret = cep_cm_qp_register(cm, qpn);
	if (ret && ret != -EEXIST)
		stress_fail(r->name, "qp register %#x: %d", qpn, ret);
}

/* A REQ from the raw port C to B for @sid: comm ID @comm, QPN @qpn, and
 * the requester's patience (response timeout, retries). */
static void raw_req_msg(struct cep_msg *m, uint32_t comm, uint64_t sid, uint32_t qpn,
			uint8_t rcrt, uint8_t retries)
{
	cep_msg_init(m, CEP_MSG_REQ, 0x5100000000ull | comm);
	m->u.req.local_comm_id = comm;
	m->u.req.service_id = sid;
	m->u.req.local_ca_guid = GUID_C;
	m->u.req.local_qpn = qpn;
	m->u.req.starting_psn = 1;
	m->u.req.remote_cm_response_timeout = rcrt;
	m->u.req.local_cm_response_timeout = 10;
	m->u.req.max_cm_retries = retries;
	m->u.req.partition_key = 0xffff;
	m->u.req.path_mtu = 5;
	m->u.req.primary.local_lid = 3;
	m->u.req.primary.remote_lid = 2;
	m->u.req.primary.subnet_local = 1;
	m->u.req.primary.local_ack_timeout = 6;
	m->u.req.primary.packet_rate = 3;
}

/* dup-req-storm: every thread sends the same few REQs many times from a
 * raw port; node B must create exactly one passive id per REQ. */
static void dup_req_burst(struct cm_run *r, uint64_t *rng, unsigned round_id)
{
	struct cep_mad_addr to = { .lid = 2, .qpn = 1, .qkey = CEP_QP1_QKEY };
	uint8_t mad[CEP_MAD_SIZE];
	struct cep_msg m;
	uint32_t comm = 0x700000u + round_id * 16 + (uint32_t)(stress_rand(rng) % 4);

	/* Its patience (16 tries of ~4.3 s) outlasts the round that repeats
	 * it: B may expire a half-open id only once the requester gave up. */
	raw_req_msg(&m, comm, SID, 0x300000u + comm % 0x1000, 20, 15);
	if (cep_msg_encode(&m, mad)) {
		stress_fail(r->name, "encode REQ");
		return;
	}
	for (int k = 0; k < 8; k++)
		r->tpc->ops->send(r->tpc, mad, sizeof(mad), &to);
}

/* listener-churn: (re)create the listener of SID+1+k (lis_mtx held). */
static void listener_up(struct cm_run *r, unsigned k)
{
	struct cep_cm_id_attr la = { .size = sizeof(la), .handler = on_event };
	struct ticket *t = ticket_new(r, 2);
	int ret;

	if (!t)
		return;
	la.context = t;
	pthread_mutex_lock(&t->mtx);
	if (cep_cm_create_id(r->b, &la, &t->id)) {
		stress_fail(r->name, "create listener");
		t->dead = t->destroy_called = 1;
		atomic_store(&t->destroyed_events, 1);
		pthread_mutex_unlock(&t->mtx);
		return;
	}
	ret = cep_cm_listen(t->id, SID + 1 + k, ~0ull);
	if (ret)
		stress_fail(r->name, "listen on SID+%u: %d", k + 1, ret);
	r->lis[k] = t;
	pthread_mutex_unlock(&t->mtx);
}

/* listener-churn: destroy listener k (from this application thread, while
 * requests for it are being handled on B's workers) and listen again. */
static void listener_cycle(struct cm_run *r, unsigned k)
{
	struct ticket *t;
	struct cep_cm_id *doomed = NULL;

	pthread_mutex_lock(&r->lis_mtx[k]);
	t = r->lis[k];
	if (t) {
		pthread_mutex_lock(&t->mtx);
		doomed = ticket_claim(r, t);
		pthread_mutex_unlock(&t->mtx);
	}
	r->lis[k] = NULL;
	destroy_claimed(r, doomed);
	listener_up(r, k);
	pthread_mutex_unlock(&r->lis_mtx[k]);
}

/* listener-churn: a REQ or SIDR_REQ with fresh IDs from C to a churned
 * service: the keyed routing spreads them over B's workers. */
static void request_flood(struct cm_run *r, uint64_t x)
{
	struct cep_mad_addr to = { .lid = 2, .qpn = 1, .qkey = CEP_QP1_QKEY };
	uint8_t mad[CEP_MAD_SIZE];
	struct cep_msg m;
	uint32_t n = atomic_fetch_add(&r->raw_id, 1) + 0x800000u;
	uint64_t sid = SID + 1 + (x >> 40) % NLIS;

	if (x & 1) {
		cep_msg_init(&m, CEP_MSG_SIDR_REQ, 0x5200000000ull | n);
		m.u.sidr_req.request_id = n;
		m.u.sidr_req.service_id = sid;
		m.u.sidr_req.partition_key = 0xffff;
	} else {
		raw_req_msg(&m, n, sid, 0x400000u + n % 0x100000, 12, 2); /* expires soon */
	}
	if (cep_msg_encode(&m, mad)) {
		stress_fail(r->name, "encode");
		return;
	}
	r->tpc->ops->send(r->tpc, mad, sizeof(mad), &to);
}

struct cm_thread {
	pthread_t th;
	struct cm_run *r;
	uint64_t rng;
	int id;
	pthread_barrier_t *bar;
	unsigned round;
};

static void *cm_thread_run(void *arg)
{
	struct cm_thread *ct = arg;
	struct cm_run *r = ct->r;
	const struct mix *m = r->mix;
	double end = stress_now() + ROUND_S;

	while (stress_now() < end && !atomic_load(&r->stop)) {
		uint64_t x = stress_rand(&ct->rng);
		unsigned s = (unsigned)(x % NSLOT), op = (unsigned)((x >> 16) % 1000);
		unsigned acc = 0;

		if (m->dup_req_storm && (op & 1)) {
			dup_req_burst(r, &ct->rng, ct->round);
			continue;
		}
		if (m->listener_churn) {
			if (op < (unsigned)m->listener_churn) {
				listener_cycle(r, (unsigned)(x >> 32) % NLIS);
				continue;
			}
			if (op & 1) {
				request_flood(r, x);
				continue;
			}
		}
		if (op < (acc += (unsigned)m->destroy_qp_a)) {
			pthread_mutex_lock(&r->slot_mtx[s]);
			qp_cycle(r, r->a, QPN_A + s);
			pthread_mutex_unlock(&r->slot_mtx[s]);
		} else if (op < (acc += (unsigned)m->destroy_qp_b)) {
			unsigned k = (unsigned)((x >> 32) % NQPB);

			pthread_mutex_lock(&r->qpb_mtx[k]);
			qp_cycle(r, r->b, QPN_B + k);
			pthread_mutex_unlock(&r->qpb_mtx[k]);
		} else if (op < (acc += (unsigned)m->destroy_id_a)) {
			pthread_mutex_lock(&r->slot_mtx[s]);
			on_slot(r, s, 1);
			pthread_mutex_unlock(&r->slot_mtx[s]);
		} else if (op < (acc += (unsigned)m->destroy_id_b)) {
			on_passive(r, x >> 24, 1);
		} else if (op < (acc += (unsigned)m->disconnect_a)) {
			pthread_mutex_lock(&r->slot_mtx[s]);
			on_slot(r, s, 0);
			pthread_mutex_unlock(&r->slot_mtx[s]);
		} else if (op < (acc += (unsigned)m->disconnect_b)) {
			on_passive(r, x >> 24, 0);
		} else {
			pthread_mutex_lock(&r->slot_mtx[s]);
			op_connect(r, s, x);
			pthread_mutex_unlock(&r->slot_mtx[s]);
		}
		if ((x >> 40) % 64 == 0)
			sched_yield();
	}
	return NULL;
}

static int wait_for(struct cm_run *r, const char *what, int (*done)(struct cm_run *),
		    double secs)
{
	double end = stress_now() + secs;

	while (!done(r)) {
		if (stress_now() > end) {
			stress_fail(r->name, "timed out waiting for %s", what);
			return -1;
		}
		struct timespec ts = { 0, 2000000 };

		nanosleep(&ts, NULL);
	}
	return 0;
}

static int all_destroyed(struct cm_run *r)
{
	unsigned n = atomic_load(&r->nt);

	for (unsigned i = 0; i < n; i++)
		if (!atomic_load_explicit(&r->arena[i].ready, memory_order_acquire) ||
		    atomic_load(&r->arena[i].destroyed_events) == 0)
			return 0;
	return 1;
}

static int tables_empty(struct cm_run *r)
{
	struct cep_table_stats sa, sb;

	cep_table_stats(cep_cm_table(r->a), &sa);
	cep_table_stats(cep_cm_table(r->b), &sb);
	/* B keeps its listener. */
	return sa.live == 0 && sb.live == 1;
}

static void destroy_all(struct cm_run *r)
{
	unsigned n = atomic_load(&r->nt);

	for (unsigned s = 0; s < NSLOT; s++) {
		pthread_mutex_lock(&r->slot_mtx[s]);
		on_slot(r, s, 1);
		pthread_mutex_unlock(&r->slot_mtx[s]);
	}
	for (unsigned i = 0; i < n; i++) {
		struct ticket *t = &r->arena[i];

		if (!atomic_load_explicit(&t->ready, memory_order_acquire))
			continue; /* being created: the next pass gets it */
		pthread_mutex_lock(&t->mtx);
		struct cep_cm_id *doomed = ticket_claim(r, t);

		pthread_mutex_unlock(&t->mtx);
		destroy_claimed(r, doomed);
	}
}

/* End of a round: let what is in flight land, destroy every id left (again
 * while MADs still in flight create passive ids), drain, check. */
static void round_drain(struct cm_run *r)
{
	unsigned n;
	char msg[1024];

	for (int pass = 0;; pass++) {
		n = atomic_load(&r->nt);
		destroy_all(r);
		if (wait_for(r, "every id's DESTROYED", all_destroyed, 30))
			return;
		cep_fabric_quiesce(r->fab, 5000);
		cep_cm_quiesce(r->a, 5000);
		cep_cm_quiesce(r->b, 5000);
		if (atomic_load(&r->nt) == n && all_destroyed(r))
			break;
		if (pass > 100) {
			stress_fail(r->name, "ids keep appearing after the round ended");
			return;
		}
	}
	if (wait_for(r, "timewait to end (no CEP left)", tables_empty, 30))
		return;
	n = atomic_load(&r->nt);
	for (unsigned i = 0; i < n; i++) {
		struct ticket *t = &r->arena[i];

		if (atomic_load(&t->destroyed_events) != 1 || atomic_load(&t->after_dead))
			stress_fail(r->name, "id %u: %d DESTROYED, %d events after", i,
				    atomic_load(&t->destroyed_events), atomic_load(&t->after_dead));
	}
	if (cep_table_check(cep_cm_table(r->a), msg, sizeof(msg)))
		stress_fail(r->name, "node A invariants: %s", msg);
	if (cep_table_check(cep_cm_table(r->b), msg, sizeof(msg)))
		stress_fail(r->name, "node B invariants: %s", msg);
	for (unsigned s = 0; s < NSLOT + NQPB; s++) {
		struct cep_table *tb = cep_cm_table(s < NSLOT ? r->a : r->b);
		uint32_t q = s < NSLOT ? QPN_A + s : QPN_B + (s - NSLOT), w;

		if (cep_qp_binding(tb, q, &w) == 0 && w != CEP_BINDING_INVALID &&
		    w != CEP_BINDING_RESERVED)
			stress_fail(r->name, "qpn %#x still bound to %#x after drain", q, w);
	}
	/* Reset the arena for the next round. */
	for (unsigned i = 0; i < n; i++)
		pthread_mutex_destroy(&r->arena[i].mtx);
	memset(r->arena, 0, sizeof(*r->arena) * n);
	atomic_store(&r->nt, 0);
	memset(r->slot, 0, sizeof(r->slot));
	memset(r->lis, 0, sizeof(r->lis));
}

static int node_up(struct cm_run *r, uint64_t guid, uint16_t lid, struct cep_transport **tp,
		   struct cep_cm **cm, uint32_t qbase, unsigned nq)
{
	struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = guid, .lid = lid,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 2, .table_size = 16 };

	if (cep_fabric_port_create(r->fab, &pa, tp))
		return -1;
	ca.transport = *tp;
	if (cep_cm_create(&ca, cm))
		return -1;
	for (uint32_t i = 0; i < nq; i++)
		if (cep_cm_qp_register(*cm, qbase + i))
			return -1;
	return 0;
}

static void raw_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	(void)ctx; (void)mad; (void)len; (void)from; /* C ignores B's answers */
}

static int run_cm(const char *name, const struct stress_opts *o, const struct mix *m)
{
	struct cm_run *r = calloc(1, sizeof(*r));
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = o->seed };
	struct cep_cm_id_attr la = { .size = sizeof(la), .handler = on_event };
	struct cm_thread *th = calloc((size_t)o->threads, sizeof(*th));
	double end;
	unsigned round = 0;
	int ret = 0;

	if (!r || !th)
		return -ENOMEM;
	r->name = name;
	r->o = o;
	r->mix = m;
	r->arena = calloc(MAXT, sizeof(*r->arena));
	for (unsigned s = 0; s < NSLOT; s++)
		pthread_mutex_init(&r->slot_mtx[s], NULL);
	for (unsigned k = 0; k < NQPB; k++)
		pthread_mutex_init(&r->qpb_mtx[k], NULL);
	for (unsigned k = 0; k < NLIS; k++)
		pthread_mutex_init(&r->lis_mtx[k], NULL);
	cur = r;
	if (!r->arena || cep_fabric_create(&fa, &r->fab) ||
	    node_up(r, GUID_A, 1, &r->tpa, &r->a, QPN_A, NSLOT) ||
	    node_up(r, GUID_B, 2, &r->tpb, &r->b, QPN_B, NQPB)) {
		stress_fail(name, "setting up two CM nodes failed");
		return -1;
	}
	if (m->dup_req_storm || m->listener_churn) {
		struct cep_fabric_port_attr pc = { .size = sizeof(pc), .ca_guid = GUID_C, .lid = 3,
						   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };

		if (cep_fabric_port_create(r->fab, &pc, &r->tpc) ||
		    r->tpc->ops->start(r->tpc, raw_recv, r)) {
			stress_fail(name, "raw port");
			return -1;
		}
	}
	if (m->loss > 0 || m->dup > 0 || m->reorder > 0) {
		struct cep_fabric_faults f = { .size = sizeof(f), .loss = m->loss,
					       .duplicate = m->dup, .reorder = m->reorder,
					       .hold_max_us = 1000 };

		cep_fabric_set_faults(r->fab, &f);
	}
	if (cep_cm_create_id(r->b, &la, &r->listener) ||
	    cep_cm_listen(r->listener, SID, ~0ull)) {
		stress_fail(name, "listen");
		return -1;
	}
	if (stress_cm_observer)
		stress_cm_observer(r->a, r->b);
	end = stress_now() + o->duration;
	do {
		uint64_t req_before = atomic_load(&r->raw_req_received);

		for (unsigned k = 0; m->listener_churn && k < NLIS; k++) {
			pthread_mutex_lock(&r->lis_mtx[k]);
			listener_up(r, k); /* the last round's were destroyed */
			pthread_mutex_unlock(&r->lis_mtx[k]);
		}

		for (int i = 0; i < o->threads; i++) {
			th[i].r = r;
			th[i].id = i;
			th[i].round = round;
			th[i].rng = o->seed ^ ((uint64_t)i << 40) ^ ((uint64_t)round << 20) ^ 0xc3;
			pthread_create(&th[i].th, NULL, cm_thread_run, &th[i]);
		}
		for (int i = 0; i < o->threads; i++)
			pthread_join(th[i].th, NULL);
		if (m->dup_req_storm) {
			/* Every copy delivered and handled before counting. */
			cep_fabric_quiesce(r->fab, 5000);
			cep_cm_quiesce(r->b, 5000);
		}
		if (m->dup_req_storm && !m->loss) {
			/* 4 distinct REQs per round, each sent 8x per burst by every
			 * thread, left in REQ_RCVD: exactly one passive id per REQ
			 * (at most 4, at least 1) - never a second. */
			uint64_t got = atomic_load(&r->raw_req_received) - req_before;

			if (got == 0 || got > 4)
				stress_fail(name, "round %u: %" PRIu64 " REQ_RECEIVED for 4 distinct REQs",
					    round, got);
		}
		round_drain(r);
		stress_progress();
		round++;
	} while (stress_now() < end && stress_failures() == 0);

	if (o->verbose)
		printf("  %s: %u rounds, %" PRIu64 " connects, %" PRIu64 " established, %" PRIu64
		       " rejected, %" PRIu64 " timeouts, %" PRIu64 " REQs received, %" PRIu64
		       " accepts refused, %" PRIu64 " QP destroys, %" PRIu64 " id destroys\n",
		       name, round, (uint64_t)r->connects, (uint64_t)r->established,
		       (uint64_t)r->rejected, (uint64_t)r->timeouts, (uint64_t)r->req_received,
		       (uint64_t)r->accepts_failed, (uint64_t)r->qp_destroys,
		       (uint64_t)r->id_destroys);
	if (stress_cm_observer)
		stress_cm_observer(NULL, NULL);
	if (cep_cm_destroy_id_sync(r->listener))
		stress_fail(name, "listener destroy");
	if (cep_cm_destroy(r->a) || cep_cm_destroy(r->b)) {
		stress_fail(name, "CM destroy reported CEPs still referenced");
		ret = -1;
	}
	r->tpa->ops->destroy(r->tpa);
	r->tpb->ops->destroy(r->tpb);
	if (r->tpc) {
		r->tpc->ops->stop(r->tpc);
		r->tpc->ops->destroy(r->tpc);
	}
	if (cep_fabric_destroy(r->fab))
		stress_fail(name, "fabric destroy");
	cur = NULL;
	free(r->arena);
	free(r);
	free(th);
	return ret;
}

static const struct mix mix_accept = { .destroy_qp_b = 150, .destroy_id_b = 20 };
static const struct mix mix_rep = { .destroy_qp_a = 100, .destroy_id_a = 100 };
static const struct mix mix_rtu = { .destroy_qp_b = 60, .destroy_id_b = 120, .destroy_id_a = 30 };
static const struct mix mix_release = { .disconnect_a = 250, .disconnect_b = 250,
					.destroy_id_a = 30, .destroy_id_b = 30,
					.destroy_qp_a = 20, .destroy_qp_b = 20 };
/* No passive destroys here: a destroyed (rejected) REQ_RCVD id leaves no
 * record, so a later duplicate would rightly make a new id. */
static const struct mix mix_dup = { .dup_req_storm = 1, .disconnect_a = 100 };
static const struct mix mix_churn = { .disconnect_a = 150, .disconnect_b = 50,
				      .destroy_id_a = 50, .destroy_id_b = 20,
				      .destroy_qp_a = 10, .destroy_qp_b = 10 };
/* Listeners destroyed and re-created (5% of operations) while connects and
 * C's REQ / SIDR_REQ floods for them arrive on both of B's workers. */
static const struct mix mix_listener = { .listener_churn = 50, .destroy_id_a = 30,
					 .destroy_id_b = 60, .disconnect_a = 100 };
static const struct mix mix_faults = { .disconnect_a = 150, .disconnect_b = 100,
				       .destroy_id_a = 40, .destroy_id_b = 40,
				       .destroy_qp_a = 20, .destroy_qp_b = 20, .dup_req_storm = 0,
				       .loss = 0.20, .dup = 0.05, .reorder = 0.05 };

#define SCEN(fn, m) \
	static int fn(const struct stress_opts *o) { return run_cm(#fn, o, &m); }
SCEN(accept_vs_destroy, mix_accept)
SCEN(rep_vs_destroy, mix_rep)
SCEN(rtu_vs_destroy, mix_rtu)
SCEN(simultaneous_release, mix_release)
SCEN(dup_req_storm, mix_dup)
SCEN(churn, mix_churn)
SCEN(faults, mix_faults)
SCEN(listener_churn, mix_listener)

const struct scenario stress_cm_scenarios[] = {
	{ "accept-vs-destroy", "passive side accepts (REP) while its QP or id is destroyed",
	  accept_vs_destroy },
	{ "rep-vs-destroy", "REPs arrive while the active QP or id is destroyed", rep_vs_destroy },
	{ "rtu-vs-destroy", "RTUs arrive while the passive QP or id is destroyed", rtu_vs_destroy },
	{ "simultaneous-release", "both sides DREQ at once, destroy racing DREP and timewait",
	  simultaneous_release },
	{ "dup-req-storm", "the same REQ sent many times by many threads", dup_req_storm },
	{ "churn", "connect/disconnect/destroy at random over tables that resize", churn },
	{ "faults", "20% loss, 5% duplication and reordering, with all of the above", faults },
	{ "listener-churn", "listeners and ids destroyed while REQs / SIDR_REQs for them "
	  "arrive on several workers", listener_churn },
};
const int stress_cm_count = sizeof(stress_cm_scenarios) / sizeof(stress_cm_scenarios[0]);
