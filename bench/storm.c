/* SPDX-License-Identifier: MIT */
/*
 * Connection storms between two simulated nodes; see storm.h. The counters
 * of the current phase are atomics: CM callbacks on every worker of both
 * nodes update them while the main thread polls. A phase ends with both CMs
 * quiesced, so no callback of it still runs when the next one is set up.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storm.h"

#define QPN_BASE 0x100u
#define SERVICE_ID 0x0000cebe0000b001ull

enum { C_NEW, C_CONNECTING, C_ESTABLISHED, C_FAILED, C_RELEASING, C_RELEASED,
       C_RELEASE_FAILED };
enum { PH_IDLE, PH_CONNECT, PH_RELEASE };

struct conn {
	struct storm *s;
	struct cep_cm_id *id;   /* active id; NULL once destroyed */
	uint64_t t_issue;       /* written before connect; read in its callback */
	uint32_t lat_ns;        /* issue -> ESTABLISHED */
	uint32_t comm_id;
	/* Written by the issuing thread and by callbacks on any worker, read
	 * by the main thread between phases. */
	_Atomic uint8_t state;
};

struct node {
	struct cep_transport *port;
	struct cep_cm *cm;
	struct cep_port_info info;
	uint32_t qpns;          /* registered: QPN_BASE .. QPN_BASE + qpns - 1 */
};

struct storm {
	struct cep_fabric *fab;
	struct node a, b;
	struct cep_cm_id *listener;
	struct conn *conns;
	uint32_t capacity;
	uint32_t opened;        /* conns[0, opened) used (main thread) */
	uint32_t established;   /* main thread, after a phase */
	uint32_t *est_ids;      /* comm IDs of established conns (main) */
	uint32_t *est_remote;   /* their remote (node B) comm IDs (main) */
	unsigned window;
	const struct bench_opts *opts;
	const struct cep_sa_path *path; /* the SA's, or NULL */
	/* Current phase: set by the main thread before the first issue,
	 * read by callbacks; relaxed is enough because every callback of
	 * the phase runs after an issue the main thread made after these
	 * stores (the CM's own queue hand-off orders them). */
	_Atomic int phase;
	_Atomic uint32_t ph_next, ph_end;
	_Atomic uint32_t ph_ok, ph_failed;
	_Atomic uint64_t ph_last_ns;    /* latest completion time */
	_Atomic uint32_t passive_next;  /* next QPN index on node B */
	_Atomic uint32_t passive_errors;
};

static void phase_complete(struct storm *s, int ok)
{
	uint64_t now = bench_now_ns();
	uint64_t last = atomic_load_explicit(&s->ph_last_ns, memory_order_relaxed);

	/* max, not store: completions on two workers may finish out of order */
	while (last < now &&
	       !atomic_compare_exchange_weak_explicit(&s->ph_last_ns, &last, now,
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
	atomic_fetch_add_explicit(ok ? &s->ph_ok : &s->ph_failed, 1, memory_order_relaxed);
}

static int active_cb(struct cep_cm_id *id, const struct cep_cm_event *ev);

static int connect_one(struct storm *s, struct conn *c, uint32_t i)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = active_cb, .context = c };
	struct cep_cm_conn_param p;
	int ret;

	ret = cep_cm_create_id(s->a.cm, &ia, &c->id);
	if (ret)
		return ret;
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = SERVICE_ID;
	p.primary.local_lid = s->a.info.lid;
	p.primary.remote_lid = s->b.info.lid;
	memcpy(p.primary.local_gid, s->a.info.gid, 16);
	memcpy(p.primary.remote_gid, s->b.info.gid, 16);
	p.primary.subnet_local = 1;
	p.primary.packet_rate = 3;
	p.primary.local_ack_timeout = 14;
	p.qpn = QPN_BASE + i;
	p.starting_psn = i & 0xffffff;
	p.pkey = 0xffff;
	p.responder_resources = 1;
	p.initiator_depth = 1;
	/* 4.096 us * 2^16 = 268 ms per try: a lost MAD shows in the p99 */
	p.remote_cm_response_timeout = 16;
	p.local_cm_response_timeout = 16;
	p.max_cm_retries = 15;
	p.packet_life_time = 1;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	p.transport_service_type = CEP_TS_RC;
	if (s->path) {
		ret = cep_sa_path_to_conn(s->path, &p);
		if (ret) {
			cep_cm_destroy_id(c->id);
			c->id = NULL;
			return ret;
		}
	}
	c->comm_id = cep_cm_id_local_comm_id(c->id);
	atomic_store_explicit(&c->state, C_CONNECTING, memory_order_relaxed);
	c->t_issue = bench_now_ns();
	ret = cep_cm_connect(c->id, &p);
	if (ret) {
		cep_cm_destroy_id(c->id);
		c->id = NULL;
	}
	return ret;
}

/* Issue the next operation of the phase, skipping those that fail at once.
 * Any thread: the main thread primes the window, callbacks refill it. */
static void storm_issue(struct storm *s)
{
	int phase = atomic_load_explicit(&s->phase, memory_order_relaxed);

	for (;;) {
		uint32_t i = atomic_fetch_add_explicit(&s->ph_next, 1, memory_order_relaxed);
		struct conn *c;

		if (i >= atomic_load_explicit(&s->ph_end, memory_order_relaxed))
			return;
		c = &s->conns[i];
		if (phase == PH_CONNECT) {
			if (connect_one(s, c, i) == 0)
				return;
			atomic_store_explicit(&c->state, C_FAILED, memory_order_relaxed);
			phase_complete(s, 0);
		} else if (phase == PH_RELEASE) {
			if (atomic_load_explicit(&c->state, memory_order_relaxed) != C_ESTABLISHED)
				continue;
			atomic_store_explicit(&c->state, C_RELEASING, memory_order_relaxed);
			if (cep_cm_disconnect(c->id, NULL, 0) == 0)
				return;
			atomic_store_explicit(&c->state, C_RELEASE_FAILED, memory_order_relaxed);
			phase_complete(s, 0);
		} else {
			return;
		}
	}
}

/* Active ids' events, on node A's workers. */
static int active_cb(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct conn *c = ev->context;
	struct storm *s = c->s;

	(void)id;
	switch (ev->type) {
	case CEP_CM_EV_ESTABLISHED: {
		uint64_t lat = bench_now_ns() - c->t_issue;

		c->lat_ns = lat > UINT32_MAX ? UINT32_MAX : (uint32_t)lat;
		atomic_store_explicit(&c->state, C_ESTABLISHED, memory_order_relaxed);
		phase_complete(s, 1);
		storm_issue(s);
		return 0;
	}
	case CEP_CM_EV_REJ_RECEIVED:
	case CEP_CM_EV_REQ_ERROR:
	case CEP_CM_EV_REP_ERROR:
		atomic_store_explicit(&c->state, C_FAILED, memory_order_relaxed);
		c->id = NULL;
		phase_complete(s, 0);
		storm_issue(s);
		return 1; /* destroy the id after this call */
	case CEP_CM_EV_DREP_RECEIVED:
		atomic_store_explicit(&c->state, C_RELEASED, memory_order_relaxed);
		phase_complete(s, 1);
		storm_issue(s);
		return 0;
	case CEP_CM_EV_DREQ_ERROR:
		atomic_store_explicit(&c->state, C_RELEASE_FAILED, memory_order_relaxed);
		phase_complete(s, 0);
		storm_issue(s);
		return 0;
	default:
		return 0;
	}
}

/* The listener's and passive ids' events, on node B's workers: accept
 * every REQ on a fresh registered QPN; DREQs are answered by the CM. */
static int passive_cb(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct storm *s = ev->type == CEP_CM_EV_REQ_RECEIVED && ev->listen_id ?
			  cep_cm_id_context(ev->listen_id) : ev->context;
	struct cep_cm_accept_param p;
	uint32_t k;

	if (ev->type != CEP_CM_EV_REQ_RECEIVED || !s)
		return 0;
	cep_cm_id_set_context(id, s);
	k = atomic_fetch_add_explicit(&s->passive_next, 1, memory_order_relaxed);
	if (k >= s->b.qpns) { /* cannot happen: B registers as many as A */
		atomic_fetch_add_explicit(&s->passive_errors, 1, memory_order_relaxed);
		cep_cm_reject(id, CEP_REJ_NO_QP, NULL, 0, NULL, 0);
		return 1;
	}
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.qpn = QPN_BASE + k;
	p.starting_psn = k & 0xffffff;
	p.responder_resources = 1;
	p.initiator_depth = 1;
	p.rnr_retry_count = 7;
	if (cep_cm_accept(id, &p)) {
		atomic_fetch_add_explicit(&s->passive_errors, 1, memory_order_relaxed);
		cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
		return 1;
	}
	return 0;
}

static int node_create(struct storm *s, struct node *n, uint64_t guid, uint16_t lid,
		       const uint8_t *gid, const struct storm_attr *attr,
		       cep_cm_handler listen_cb)
{
	struct cep_fabric_port_attr pa = {
		.size = sizeof(pa), .ca_guid = guid, .lid = lid, .port_num = 1,
		.link_layer = CEP_FABRIC_LINK_IB,
	};
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = attr->workers };

	int ret;

	if (gid)
		memcpy(pa.gid, gid, 16);
	if (attr->cfg && attr->cfg->presized)
		for (ca.table_size = 1024; ca.table_size < attr->capacity; ca.table_size <<= 1)
			;
	/* The CM's table takes its index from CEP_INDEX (cep_table_attr.index
	 * for a table of one's own); the bench is single-threaded here. */
	if (!attr->cfg || attr->cfg->index == CEP_TABLE_INDEX_DEFAULT)
		unsetenv("CEP_INDEX");
	else
		setenv("CEP_INDEX", attr->cfg->index == CEP_TABLE_INDEX_RCULFHASH ? "rculfhash" : "ck",
		       1);
	ret = cep_fabric_port_create(s->fab, &pa, &n->port);
	if (ret)
		return ret;
	ret = n->port->ops->query_port(n->port, &n->info);
	if (ret)
		return ret;
	ca.transport = n->port;
	ret = cep_cm_create(&ca, &n->cm);
	if (ret)
		return ret;
	if (listen_cb) {
		struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = listen_cb,
					     .context = s };

		ret = cep_cm_create_id(n->cm, &ia, &s->listener);
		if (!ret)
			ret = cep_cm_listen(s->listener, SERVICE_ID, ~0ull);
	}
	return ret;
}

static uint64_t guid_of(const uint8_t gid[16])
{
	uint64_t g = 0;

	for (int i = 8; i < 16; i++)
		g = g << 8 | gid[i];
	return g;
}

int storm_create(const struct storm_attr *attr, struct storm **out)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	struct storm *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	s->capacity = attr->capacity;
	s->window = attr->window ? attr->window : 1;
	s->opts = attr->opts;
	s->conns = calloc(s->capacity, sizeof(*s->conns));
	s->est_ids = calloc(s->capacity, sizeof(*s->est_ids));
	s->est_remote = calloc(s->capacity, sizeof(*s->est_remote));
	if (!s->conns || !s->est_ids || !s->est_remote) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = cep_fabric_create(&fa, &s->fab);
	if (ret)
		goto fail;
	s->path = attr->path;
	if (s->path) /* the SA's two ends; a CA GUID from each GID's interface ID */
		ret = node_create(s, &s->a, guid_of(s->path->sgid), s->path->slid,
				  s->path->sgid, attr, NULL);
	else
		ret = node_create(s, &s->a, 0x0002c90300a0000aull, 1, NULL, attr, NULL);
	if (!ret && s->path)
		ret = node_create(s, &s->b, guid_of(s->path->dgid), s->path->dlid,
				  s->path->dgid, attr, passive_cb);
	else if (!ret)
		ret = node_create(s, &s->b, 0x0002c90300b0000bull, 2, NULL, attr, passive_cb);
	if (ret)
		goto fail;
	*out = s;
	return 0;
fail:
	storm_destroy(s);
	return ret;
}

void storm_destroy(struct storm *s)
{
	if (s->a.cm)
		cep_cm_destroy(s->a.cm);
	if (s->b.cm)
		cep_cm_destroy(s->b.cm);
	if (s->a.port)
		s->a.port->ops->destroy(s->a.port);
	if (s->b.port)
		s->b.port->ops->destroy(s->b.port);
	if (s->fab)
		cep_fabric_destroy(s->fab);
	free(s->conns);
	free(s->est_ids);
	free(s->est_remote);
	free(s);
}

static uint64_t mads_sent(const struct storm *s)
{
	uint64_t sum = 0;
	const struct node *nodes[2] = { &s->a, &s->b };

	for (int k = 0; k < 2; k++) {
		struct cep_cm_stats st;

		memset(&st, 0, sizeof(st));
		st.size = sizeof(st);
		if (cep_cm_get_stats(nodes[k]->cm, &st) == 0)
			for (int m = 0; m < CEP_MSG_COUNT; m++)
				sum += st.sent[m];
	}
	return sum;
}

static int register_qpns(struct node *n, uint32_t upto)
{
	while (n->qpns < upto) {
		int ret = cep_cm_qp_register(n->cm, QPN_BASE + n->qpns);

		if (ret)
			return ret;
		n->qpns++;
	}
	return 0;
}

/* Prime the window, then poll until @expected completions arrived. */
static int run_phase(struct storm *s, int phase, uint32_t first, uint32_t end,
		     uint32_t expected, struct storm_phase *ph, const char *what)
{
	uint64_t t0, last_change, last_print;
	uint32_t done = 0, seen = 0;
	uint64_t mads0 = mads_sent(s);
	int ret = 0;

	atomic_store_explicit(&s->ph_ok, 0, memory_order_relaxed);
	atomic_store_explicit(&s->ph_failed, 0, memory_order_relaxed);
	atomic_store_explicit(&s->ph_last_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&s->ph_next, first, memory_order_relaxed);
	atomic_store_explicit(&s->ph_end, end, memory_order_relaxed);
	atomic_store_explicit(&s->phase, phase, memory_order_relaxed);
	t0 = last_change = last_print = bench_now_ns();
	for (unsigned k = 0; k < s->window; k++)
		storm_issue(s);
	while ((done = atomic_load_explicit(&s->ph_ok, memory_order_relaxed) +
		       atomic_load_explicit(&s->ph_failed, memory_order_relaxed)) < expected) {
		uint64_t now;

		bench_sleep_s(0.0005);
		now = bench_now_ns();
		if (done != seen) {
			seen = done;
			last_change = now;
		} else if (now - last_change > 20000000000ull) {
			fprintf(stderr, "cep-bench: %s stalled at %u/%u for 20 s\n", what, done,
				expected);
			ret = -ETIMEDOUT;
			break;
		}
		if (now - last_print > 1000000000ull) {
			bench_progress(s->opts, "%s: %u/%u", what, done, expected);
			last_print = now;
		}
	}
	/* Let the tail (passive RTUs, DREPs, callbacks still refilling)
	 * finish so nothing of this phase runs into the next. */
	if (cep_cm_quiesce(s->a.cm, 20000) || cep_cm_quiesce(s->b.cm, 20000))
		ret = ret ? ret : -ETIMEDOUT;
	atomic_store_explicit(&s->phase, PH_IDLE, memory_order_relaxed);
	ph->ok = atomic_load_explicit(&s->ph_ok, memory_order_relaxed);
	ph->failed = atomic_load_explicit(&s->ph_failed, memory_order_relaxed);
	{
		uint64_t last = atomic_load_explicit(&s->ph_last_ns, memory_order_relaxed);

		ph->seconds = last > t0 ? (double)(last - t0) / 1e9 : 0.0;
	}
	ph->per_s = ph->seconds > 0 ? ph->ok / ph->seconds : 0.0;
	ph->mads = mads_sent(s) - mads0;
	return ret;
}

int storm_connect(struct storm *s, uint32_t n, struct storm_phase *ph)
{
	uint32_t first = s->opened, i;
	int ret;

	if (n > s->capacity - s->opened)
		return -ENOSPC;
	for (i = first; i < first + n; i++)
		s->conns[i].s = s;
	ret = register_qpns(&s->a, first + n);
	if (!ret)
		ret = register_qpns(&s->b, first + n);
	if (ret)
		return ret;
	s->opened = first + n;
	ret = run_phase(s, PH_CONNECT, first, first + n, n, ph, "connect");
	for (i = first; i < first + n; i++) {
		struct conn *c = &s->conns[i];

		if (atomic_load_explicit(&c->state, memory_order_relaxed) != C_ESTABLISHED)
			continue;
		bench_samples_add(&ph->lat, c->lat_ns);
		s->est_remote[s->established] = cep_cm_id_remote_comm_id(c->id);
		s->est_ids[s->established++] = c->comm_id;
	}
	if (!ret && atomic_load_explicit(&s->passive_errors, memory_order_relaxed))
		ret = -EPROTO;
	return ret;
}

int storm_release(struct storm *s, uint32_t first, struct storm_phase *ph)
{
	uint32_t expected = 0, i;
	int ret;

	for (i = first; i < s->opened; i++)
		expected += atomic_load_explicit(&s->conns[i].state, memory_order_relaxed) ==
			    C_ESTABLISHED;
	ret = run_phase(s, PH_RELEASE, first, s->opened, expected, ph, "release");
	/* The established list keeps only what is still established. */
	s->established = 0;
	for (i = 0; i < s->opened; i++) {
		struct conn *c = &s->conns[i];

		if (atomic_load_explicit(&c->state, memory_order_relaxed) != C_ESTABLISHED)
			continue;
		s->est_remote[s->established] = cep_cm_id_remote_comm_id(c->id);
		s->est_ids[s->established++] = c->comm_id;
	}
	return ret;
}

uint32_t storm_opened(const struct storm *s)
{
	return s->opened;
}

uint32_t storm_established(const struct storm *s)
{
	return s->established;
}

uint32_t storm_comm_id(const struct storm *s, uint32_t i)
{
	return s->est_ids[i];
}

uint32_t storm_remote_comm_id(const struct storm *s, uint32_t i)
{
	return s->est_remote[i];
}

size_t storm_bench_bytes(const struct storm *s)
{
	return sizeof(*s) + (size_t)s->capacity * (sizeof(*s->conns) + sizeof(*s->est_ids) +
						   sizeof(*s->est_remote));
}

struct cep_table *storm_table(const struct storm *s)
{
	return cep_cm_table(s->a.cm);
}

struct cep_cm *storm_cm(const struct storm *s, int node)
{
	return node ? s->b.cm : s->a.cm;
}

struct cep_fabric *storm_fabric(const struct storm *s)
{
	return s->fab;
}

uint16_t storm_lid_a(const struct storm *s)
{
	return s->a.info.lid;
}

struct cep_transport *storm_port_b(const struct storm *s)
{
	return s->b.port;
}
