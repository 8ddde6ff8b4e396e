/* SPDX-License-Identifier: MIT */
/*
 * CM scenario harness: two CM nodes (A, B) and one raw port (C, a scripted
 * peer that sends hand-built MADs and records what it receives) on one
 * in-process fabric, all on one virtual clock (cep/clock.h): time moves
 * only when a test calls advance_ms(), and settle() waits until both nodes
 * and the fabric have nothing left to do, so every step of a scenario is
 * deterministic and no test sleeps for a timer. Events of each node are
 * logged; a missing event fails the check instead of hanging.
 */
#ifndef CEP_TEST_CM_HARNESS_H
#define CEP_TEST_CM_HARNESS_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <cep/clock.h>
#include <cep/cm.h>
#include <cep/fabric.h>
#include <cep/table.h>

#include "../common/check.h"

/* Each test program uses a different subset of these helpers. */
#pragma GCC diagnostic ignored "-Wunused-function"

#define GUID_A 0x0002c90300000a01ull
#define GUID_B 0x0002c90300000b02ull
#define GUID_C 0x0002c90300000c03ull
#define LID_A 1
#define LID_B 2
#define LID_C 3
#define LID_X 4 /* X: a stranger's raw port, for address checks */
#define GUID_X 0x0002c90300000d04ull
#define SID 0x1000000000000001ull
#define MAXLOG 8192

struct logged {
	struct cep_cm_event ev;
	struct cep_cm_id *id;
};

/* What a node does on its own, from the callback. */
struct policy {
	enum { ON_REQ_ACCEPT, ON_REQ_REJECT, ON_REQ_MRA, ON_REQ_NOTHING } on_req;
	uint32_t accept_qpn;
	const char *rep_pdata;
	unsigned rej_reason;
	int reject_rep;        /* active: reject the REP in the callback */
	int mra_rep;           /* active: MRA the REP in the callback */
	int on_sidr_answer;    /* passive SIDR: answer at once */
	int destroy_on_req;    /* return non-zero from the REQ callback */
	int destroy_on_error;  /* return non-zero from REQ_ERROR / REP_ERROR */
	int manual_drep;       /* accept with manual_drep: DREQ_RCVD stays */
	/* active: connect again from the REJ_RECEIVED callback (a worker) */
	const struct cep_cm_conn_param *reconnect;
	_Atomic int reconnects, reconnect_errors;
};

struct node {
	const char *name;
	struct cep_transport *tp;
	struct cep_cm *cm;
	pthread_mutex_t mtx;
	struct logged log[MAXLOG];
	int n;
	struct policy pol;
	struct cep_cm_id *last_req_id; /* passive id of the last REQ/SIDR_REQ */
	struct cep_cm_id *made[64];    /* ids created by the test */
	int nmade;
};

struct raw {
	struct cep_transport *tp;
	pthread_mutex_t mtx;
	struct cep_msg got[MAXLOG];
	int n;
};

static struct cep_clock *clk;
static uint8_t ack_delay_of[2]; /* CA ACK delay of A's and B's ports */
static unsigned half_open_ms_of[2]; /* A's and B's half-open limit (0: default) */
static struct cep_fabric *fab;
static struct node A = { .name = "A" }, B = { .name = "B" };
static struct raw C, X;

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Wait (real time, bounded) until both nodes and the fabric are idle at
 * the clock's current time: every MAD sent has been handled, every answer
 * to it too, every event delivered. */
static void settle(void)
{
	CHECK_EQ(cep_clock_quiesce(clk, 10000), 0);
}

/* Finish what is pending at the current time, move virtual time forward,
 * and run everything that becomes due. */
static void advance_ms(unsigned ms)
{
	settle();
	CHECK_EQ(cep_clock_advance_ns(clk, (uint64_t)ms * 1000000u), 0);
	settle();
}

static int on_event(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct node *n = ev->context ? ev->context : NULL;
	int ret = 0;

	if (!n)
		return 0;
	pthread_mutex_lock(&n->mtx);
	if (n->n < MAXLOG) {
		n->log[n->n].ev = *ev;
		if (ev->private_data) /* points into *ev: re-point into the copy */
			n->log[n->n].ev.private_data = (const uint8_t *)&n->log[n->n].ev.msg +
				(ev->private_data - (const uint8_t *)&ev->msg);
		n->log[n->n].id = id;
		n->n++;
	}
	if (ev->type == CEP_CM_EV_REQ_RECEIVED || ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED)
		n->last_req_id = id;
	pthread_mutex_unlock(&n->mtx);
	switch (ev->type) {
	case CEP_CM_EV_REQ_RECEIVED:
		if (n->pol.destroy_on_req)
			return 1;
		if (n->pol.on_req == ON_REQ_ACCEPT) {
			struct cep_cm_accept_param ap = { .size = sizeof(ap),
				.qpn = n->pol.accept_qpn, .starting_psn = 0x4242,
				.responder_resources = 4, .initiator_depth = 4,
				.manual_drep = (uint8_t)n->pol.manual_drep };

			if (n->pol.rep_pdata) {
				ap.private_data = n->pol.rep_pdata;
				ap.private_data_len = strlen(n->pol.rep_pdata) + 1;
			}
			ret = cep_cm_accept(id, &ap);
			if (ret)
				fprintf(stderr, "%s: accept: %d\n", n->name, ret);
		} else if (n->pol.on_req == ON_REQ_REJECT) {
			static const char why[] = "go away";

			cep_cm_reject(id, n->pol.rej_reason, "ari", 3, why, sizeof(why));
		} else if (n->pol.on_req == ON_REQ_MRA) {
			cep_cm_mra(id, 16, NULL, 0); /* ~268 ms */
		}
		return 0;
	case CEP_CM_EV_REP_RECEIVED:
		if (n->pol.reject_rep)
			cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
		else if (n->pol.mra_rep)
			cep_cm_mra(id, 16, NULL, 0);
		return 0;
	case CEP_CM_EV_REQ_ERROR:
	case CEP_CM_EV_REP_ERROR:
		return n->pol.destroy_on_error;
	case CEP_CM_EV_REJ_RECEIVED:
		if (n->pol.reconnect) {
			if (cep_cm_connect(id, n->pol.reconnect))
				atomic_fetch_add(&n->pol.reconnect_errors, 1);
			else
				atomic_fetch_add(&n->pol.reconnects, 1);
		}
		return 0;
	case CEP_CM_EV_SIDR_REQ_RECEIVED:
		if (n->pol.on_sidr_answer)
			cep_cm_sidr_rep(id, CEP_SIDR_SUCCESS, 0x777, 0x1234, "sidr", 5);
		return 0;
	default:
		return 0;
	}
}

/* Count events of @type on @n (optionally for @id). */
static int count_ev(struct node *n, enum cep_cm_event_type type, struct cep_cm_id *id)
{
	int c = 0;

	pthread_mutex_lock(&n->mtx);
	for (int i = 0; i < n->n; i++)
		if (n->log[i].ev.type == type && (!id || n->log[i].id == id))
			c++;
	pthread_mutex_unlock(&n->mtx);
	return c;
}

/* Settle, then 1 if @n logged at least @count events of @type. Time does
 * not move: an event that needs a timer needs advance_ms() first. */
static int wait_ev(struct node *n, enum cep_cm_event_type type, int count)
{
	settle();
	if (count_ev(n, type, NULL) >= count)
		return 1;
	fprintf(stderr, "%s: timed out waiting for %d x %s (have %d)\n", n->name, count,
		cep_cm_event_name(type), count_ev(n, type, NULL));
	return 0;
}

/* The last logged event of @type (copy), or type COUNT when none. */
static struct logged last_ev(struct node *n, enum cep_cm_event_type type)
{
	struct logged l;

	memset(&l, 0, sizeof(l));
	l.ev.type = CEP_CM_EVENT_COUNT;
	pthread_mutex_lock(&n->mtx);
	for (int i = n->n - 1; i >= 0; i--)
		if (n->log[i].ev.type == type) {
			l = n->log[i];
			break;
		}
	pthread_mutex_unlock(&n->mtx);
	return l;
}

static void raw_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	struct raw *r = ctx;
	struct cep_msg m;

	(void)from;
	if (cep_msg_decode(mad, len, &m, NULL))
		return;
	pthread_mutex_lock(&r->mtx);
	if (r->n < MAXLOG)
		r->got[r->n++] = m;
	pthread_mutex_unlock(&r->mtx);
}

/* Messages of type @t raw port @r received. */
static int raw_count_at(struct raw *r, enum cep_msg_type t)
{
	int c = 0;

	pthread_mutex_lock(&r->mtx);
	for (int i = 0; i < r->n; i++)
		c += r->got[i].type == t;
	pthread_mutex_unlock(&r->mtx);
	return c;
}

static int raw_count(enum cep_msg_type t)
{
	return raw_count_at(&C, t);
}

/* Settle, then 1 if C received at least @count MADs of type @t. */
static int raw_wait(enum cep_msg_type t, int count)
{
	settle();
	if (raw_count(t) >= count)
		return 1;
	fprintf(stderr, "C: timed out waiting for %d x %s (have %d)\n", count, cep_msg_name(t),
		raw_count(t));
	return 0;
}

/* The last message of type @t raw port @r received (zeroes: none). */
static struct cep_msg raw_last_at(struct raw *r, enum cep_msg_type t)
{
	struct cep_msg m;

	memset(&m, 0, sizeof(m));
	pthread_mutex_lock(&r->mtx);
	for (int i = r->n - 1; i >= 0; i--)
		if (r->got[i].type == t) {
			m = r->got[i];
			break;
		}
	pthread_mutex_unlock(&r->mtx);
	return m;
}

static struct cep_msg raw_last(enum cep_msg_type t)
{
	return raw_last_at(&C, t);
}

/* Send a hand-built message from raw port @r to the node at @lid. */
static void raw_send_from(struct raw *r, struct cep_msg *m, uint16_t lid)
{
	uint8_t mad[CEP_MAD_SIZE];
	struct cep_mad_addr to = { .lid = lid, .qpn = 1, .qkey = CEP_QP1_QKEY };

	CHECK_EQ(cep_msg_encode(m, mad), 0);
	CHECK_EQ(r->tp->ops->send(r->tp, mad, sizeof(mad), &to), 0);
}

/* Send a hand-built message from C to the node at @lid. */
static void raw_send(struct cep_msg *m, uint16_t lid)
{
	raw_send_from(&C, m, lid);
}

static void path_to(struct cep_path *p, uint16_t slid, uint16_t dlid)
{
	memset(p, 0, sizeof(*p));
	p->local_lid = slid;
	p->remote_lid = dlid;
	p->subnet_local = 1;
	p->local_ack_timeout = 10;   /* timewait = 2 x 4.2 ms */
	p->hop_limit = 0;
	p->sl = 0;
	p->packet_rate = 3;
}

/* A REQ from C (raw) to B for service SID. */
static void raw_req(struct cep_msg *m, uint32_t comm_id, uint32_t qpn)
{
	cep_msg_init(m, CEP_MSG_REQ, 0x99000000ull | comm_id);
	m->u.req.local_comm_id = comm_id;
	m->u.req.service_id = SID;
	m->u.req.local_ca_guid = GUID_C;
	m->u.req.local_qpn = qpn;
	m->u.req.starting_psn = 1;
	m->u.req.remote_cm_response_timeout = 12;
	m->u.req.local_cm_response_timeout = 13; /* B retries REP every 34 ms */
	m->u.req.max_cm_retries = 3;
	m->u.req.partition_key = 0xffff;
	m->u.req.path_mtu = 5;
	path_to(&m->u.req.primary, LID_C, LID_B);
}

/* C's REP (raw) to the last REQ C received: its TID and comm ID, our
 * comm ID @comm_id and QPN @qpn. */
static void raw_rep(struct cep_msg *m, uint32_t comm_id, uint32_t qpn)
{
	struct cep_msg q = raw_last(CEP_MSG_REQ);

	cep_msg_init(m, CEP_MSG_REP, q.hdr.tid);
	m->u.rep.local_comm_id = comm_id;
	m->u.rep.remote_comm_id = q.u.req.local_comm_id;
	m->u.rep.local_qpn = qpn;
	m->u.rep.local_ca_guid = GUID_C;
}

/* A raw MRA: TID @tid, our comm ID @local, the MRAed side's @remote, for
 * message @mraed (CEP_MSG_CODE_*), service timeout @st. */
static void raw_mra(struct cep_msg *m, uint64_t tid, uint32_t local, uint32_t remote, uint8_t mraed,
		    uint8_t st)
{
	cep_msg_init(m, CEP_MSG_MRA, tid);
	m->u.mra.local_comm_id = local;
	m->u.mra.remote_comm_id = remote;
	m->u.mra.message_mraed = mraed;
	m->u.mra.service_timeout = st;
}

static void node_init(struct node *n, uint64_t guid, uint16_t lid, unsigned workers, int auto_mra)
{
	struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = guid, .lid = lid,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB,
					   .ca_ack_delay = ack_delay_of[n == &B] };
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = workers, .auto_mra = (uint8_t)auto_mra,
				  .mra_service_timeout = 16, .clock = clk,
				  .half_open_timeout_ms = half_open_ms_of[n == &B] };

	pthread_mutex_init(&n->mtx, NULL);
	CHECK_EQ(cep_fabric_port_create(fab, &pa, &n->tp), 0);
	ca.transport = n->tp;
	CHECK_EQ(cep_cm_create(&ca, &n->cm), 0);
}

static void setup(unsigned workers, int auto_mra_b)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	struct cep_fabric_port_attr pc = { .size = sizeof(pc), .ca_guid = GUID_C, .lid = LID_C,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };

	CHECK_EQ(cep_clock_create(1000000000ull, &clk), 0);
	fa.clock = clk;
	CHECK_EQ(cep_fabric_create(&fa, &fab), 0);
	node_init(&A, GUID_A, LID_A, workers, 0);
	node_init(&B, GUID_B, LID_B, workers, auto_mra_b);
	pthread_mutex_init(&C.mtx, NULL);
	CHECK_EQ(cep_fabric_port_create(fab, &pc, &C.tp), 0);
	CHECK_EQ(C.tp->ops->start(C.tp, raw_recv, &C), 0);
	pc.ca_guid = GUID_X;
	pc.lid = LID_X;
	pthread_mutex_init(&X.mtx, NULL);
	CHECK_EQ(cep_fabric_port_create(fab, &pc, &X.tp), 0);
	CHECK_EQ(X.tp->ops->start(X.tp, raw_recv, &X), 0);
	for (uint32_t q = 0x100; q < 0x110; q++) {
		CHECK_EQ(cep_cm_qp_register(A.cm, q), 0);
		CHECK_EQ(cep_cm_qp_register(B.cm, q), 0);
	}
}

static struct cep_cm_id *make_id(struct node *n)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_event, .context = n };
	struct cep_cm_id *id = NULL;

	CHECK_EQ(cep_cm_create_id(n->cm, &ia, &id), 0);
	pthread_mutex_lock(&n->mtx);
	if (n->nmade < 64)
		n->made[n->nmade++] = id;
	pthread_mutex_unlock(&n->mtx);
	return id;
}

static struct cep_cm_id *listen_on(struct node *n, uint64_t sid)
{
	struct cep_cm_id *l = make_id(n);

	CHECK_EQ(cep_cm_listen(l, sid, ~0ull), 0);
	return l;
}

/* The common start: @workers per node, B listens on SID and accepts on
 * its QPN 0x101. */
static void setup_accepting(unsigned workers)
{
	setup(workers, 0);
	listen_on(&B, SID);
	B.pol.on_req = ON_REQ_ACCEPT;
	B.pol.accept_qpn = 0x101;
}

static void conn_param(struct cep_cm_conn_param *p, uint32_t qpn, uint16_t slid, uint16_t dlid)
{
	memset(p, 0, sizeof(*p));
	p->size = sizeof(*p);
	p->service_id = SID;
	p->qpn = qpn;
	p->starting_psn = 0x1234;
	p->responder_resources = 4;
	p->initiator_depth = 4;
	p->remote_cm_response_timeout = 15; /* ~134 ms: no retry even on a loaded box */
	p->local_cm_response_timeout = 15;
	p->packet_life_time = 8;            /* ~1 ms */
	p->max_cm_retries = 3;
	path_to(&p->primary, slid, dlid);
}

static void check_binding(struct node *n, uint32_t qpn, uint32_t want)
{
	uint32_t b = 0xdead;

	CHECK_EQ(cep_qp_binding(cep_cm_table(n->cm), qpn, &b), 0);
	CHECK_EQ(b, want);
}

/* Destroy every id the test made or was given that is not destroyed yet.
 * Call when quiescent: the DESTROYED log entry is written before the id's
 * user reference is dropped, so an id without one is still valid. */
static void destroy_all_ids(struct node *n)
{
	static struct cep_cm_id *todo[MAXLOG + 64];
	int k = 0;

	CHECK_EQ(cep_cm_quiesce(n->cm, 5000), 0);
	pthread_mutex_lock(&n->mtx);
	for (int i = 0; i < n->nmade + n->n; i++) {
		struct cep_cm_id *id;
		int gone = 0, seen = 0;

		if (i < n->nmade) {
			id = n->made[i];
		} else {
			struct cep_cm_event *ev = &n->log[i - n->nmade].ev;

			if (ev->type != CEP_CM_EV_REQ_RECEIVED &&
			    ev->type != CEP_CM_EV_SIDR_REQ_RECEIVED)
				continue;
			id = n->log[i - n->nmade].id;
		}
		for (int j = 0; j < n->n; j++)
			if (n->log[j].id == id && n->log[j].ev.type == CEP_CM_EV_DESTROYED)
				gone = 1;
		for (int j = 0; j < k; j++)
			seen |= todo[j] == id;
		if (!gone && !seen)
			todo[k++] = id;
	}
	pthread_mutex_unlock(&n->mtx);
	for (int i = 0; i < k; i++)
		CHECK_EQ(cep_cm_destroy_id_sync(todo[i]), 0);
}

/* The event carried private data starting with the string @want. */
static int pd_eq(struct logged l, const char *want)
{
	return l.ev.private_data && !strcmp((const char *)l.ev.private_data, want);
}

static struct cep_cm_stats stats_of(struct node *n)
{
	struct cep_cm_stats s = { .size = sizeof(s) };

	CHECK_EQ(cep_cm_get_stats(n->cm, &s), 0);
	return s;
}

/* A connects to B; returns A's id (ESTABLISHED) and B's passive id. */
static struct cep_cm_id *establish(struct cep_cm_id **passive, uint32_t qa, uint32_t qb)
{
	struct cep_cm_conn_param p;
	struct cep_cm_id *a = make_id(&A);
	int est = count_ev(&A, CEP_CM_EV_ESTABLISHED, NULL);
	int rtu = count_ev(&B, CEP_CM_EV_RTU_RECEIVED, NULL);

	B.pol.on_req = ON_REQ_ACCEPT;
	B.pol.accept_qpn = qb;
	conn_param(&p, qa, LID_A, LID_B);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(&A, CEP_CM_EV_ESTABLISHED, est + 1));
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, rtu + 1));
	*passive = last_ev(&B, CEP_CM_EV_RTU_RECEIVED).id;
	return a;
}

/* C (raw) sends a REQ that B accepts on qb: B's id, in REP_SENT (the
 * REP is the @nrep-th C received). */
static struct cep_cm_id *raw_to_rep_sent(uint32_t comm_id, uint32_t qpn, uint32_t qb, int nrep)
{
	struct cep_msg m;
	struct cep_cm_id *b;

	B.pol.on_req = ON_REQ_ACCEPT;
	B.pol.accept_qpn = qb;
	raw_req(&m, comm_id, qpn);
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REP, nrep));
	b = last_ev(&B, CEP_CM_EV_REQ_RECEIVED).id;
	CHECK_EQ(cep_cm_id_state(b), CEP_CM_REP_SENT);
	return b;
}

/* C (raw) connects to B; B accepts on qb. Returns B's id. */
static struct cep_cm_id *raw_establish(uint32_t comm_id, uint32_t qpn, uint32_t qb,
				       uint32_t *b_comm)
{
	struct cep_msg m;
	int reps = raw_count(CEP_MSG_REP);
	int rtus = count_ev(&B, CEP_CM_EV_RTU_RECEIVED, NULL);

	B.pol.on_req = ON_REQ_ACCEPT;
	B.pol.accept_qpn = qb;
	raw_req(&m, comm_id, qpn);
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REP, reps + 1));
	struct cep_msg rep = raw_last(CEP_MSG_REP);

	CHECK_EQ(rep.u.rep.remote_comm_id, comm_id);
	CHECK_EQ(rep.u.rep.local_qpn, qb);
	*b_comm = rep.u.rep.local_comm_id;
	cep_msg_init(&m, CEP_MSG_RTU, 1);
	m.u.rtu.local_comm_id = comm_id;
	m.u.rtu.remote_comm_id = *b_comm;
	raw_send(&m, LID_B);
	CHECK(wait_ev(&B, CEP_CM_EV_RTU_RECEIVED, rtus + 1));
	return last_ev(&B, CEP_CM_EV_RTU_RECEIVED).id;
}

static void raw_dreq(uint32_t local, uint32_t remote, uint32_t qpn)
{
	struct cep_msg m;

	cep_msg_init(&m, CEP_MSG_DREQ, 7);
	m.u.dreq.local_comm_id = local;
	m.u.dreq.remote_comm_id = remote;
	m.u.dreq.remote_qpn_eecn = qpn;
	raw_send(&m, LID_B);
}

/* Wait for timewaits to end, check both tables, tear everything down. */
static void teardown_all(void)
{
	char msg[512];
	struct cep_table_stats st;
	struct cep_cm_stats cs = { .size = sizeof(cs) };

	destroy_all_ids(&A);
	destroy_all_ids(&B);
	for (int i = 0; i < 100; i++) { /* timewaits end (virtual minutes) */
		struct cep_table_stats sa, sb;

		settle();
		cep_table_stats(cep_cm_table(A.cm), &sa);
		cep_table_stats(cep_cm_table(B.cm), &sb);
		if (sa.live == 0 && sb.live == 0)
			break;
		advance_ms(60000);
	}
	struct node *nodes[2] = { &A, &B };

	for (int k = 0; k < 2; k++) {
		struct node *n = nodes[k];

		CHECK_EQ(cep_cm_quiesce(n->cm, 5000), 0);
		cep_table_stats(cep_cm_table(n->cm), &st);
		if (st.live)
			fprintf(stderr, "%s: %llu CEPs still live\n", n->name,
				(unsigned long long)st.live);
		CHECK_EQ(st.live, 0);
		msg[0] = 0;
		int rc = cep_table_check(cep_cm_table(n->cm), msg, sizeof(msg));

		CHECK_EQ(rc, 0);
		if (rc)
			fprintf(stderr, "%s: table check: %s\n", n->name, msg);
		cep_cm_get_stats(n->cm, &cs);
		for (uint32_t q = 0x100; q < 0x110; q++) {
			uint32_t b = 1;

			if (cep_qp_binding(cep_cm_table(n->cm), q, &b) == 0)
				CHECK(b == CEP_BINDING_INVALID || b == CEP_BINDING_RESERVED);
		}
		CHECK_EQ(cep_cm_destroy(n->cm), 0);
		n->tp->ops->destroy(n->tp);
	}
	C.tp->ops->destroy(C.tp);
	X.tp->ops->destroy(X.tp);
	CHECK_EQ(cep_fabric_destroy(fab), 0);
	CHECK_EQ(cep_clock_destroy(clk), 0);
}

/* A test program of named cases: no argument lists the names, one runs
 * that case; the exit code is check_done()'s (2: usage or unknown name). */
struct named_test {
	const char *name;
	void (*fn)(void);
};

static inline int run_named_test(int argc, char **argv, const struct named_test *t, size_t n)
{
	if (argc != 2) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", t[i].name);
		return argc == 1 ? 0 : 2;
	}
	for (size_t i = 0; i < n; i++)
		if (!strcmp(argv[1], t[i].name)) {
			t[i].fn();
			return check_done(argv[1]);
		}
	fprintf(stderr, "unknown test %s\n", argv[1]);
	return 2;
}

#endif /* CEP_TEST_CM_HARNESS_H */
