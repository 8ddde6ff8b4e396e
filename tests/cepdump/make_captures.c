/* SPDX-License-Identifier: MIT */
/*
 * Captures of real CM exchanges for the cepdump tests: two CM nodes (A
 * active, B passive) on the in-process fabric, each behind a tap that
 * writes every MAD its node sends to a pcap (the pcap API, LINKTYPE
 * INFINIBAND), as tcpdump on both hosts would show them, lost ones
 * included. `make-captures DIR` writes one file per scenario and
 * DIR/service.pcap with all of them in a row; DIR/expect.txt lists what
 * the CMs themselves counted (sent MADs per type, retries), for
 * check_cepdump.py to compare with cepdump --summary. One scenario,
 * duplicated.pcap, is captured where MADs are delivered instead (the
 * process-wide capture of cep/pcap.h), with the fabric copying each one.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cep/cm.h>
#include <cep/fabric.h>
#include <cep/pcap.h>
#include <cep/wire.h>

#include "../common/check.h"

#define GUID_A 0x0002c90300000a01ull
#define GUID_B 0x0002c90300000b02ull
#define LID_A 1
#define LID_B 2
#define SID 0x1000000000000001ull      /* B listens here */
#define SID_NONE 0x1000000000000099ull /* nobody listens here */
#define MAXEV 512

/* A port's tap: every MAD sent is written to the open captures first. */
struct tap {
	struct cep_transport t;          /* first: the CM sees this */
	struct cep_transport *port;      /* the fabric port behind it */
	uint16_t lid;
	atomic_ulong sent[CEP_MSG_COUNT];    /* while service.pcap is written */
	atomic_int drop;                     /* lose the next MAD of this type */
};

static pthread_mutex_t cap_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct cep_pcap *cap_scenario, *cap_service;   /* under cap_mtx */

static void gid_of(uint16_t lid, uint8_t gid[16])
{
	/* the fabric's default GID: fe80::ca_guid (cep/fabric.h) */
	uint64_t g = lid == LID_A ? GUID_A : GUID_B;

	memset(gid, 0, 16);
	gid[0] = 0xfe;
	gid[1] = 0x80;
	for (int i = 0; i < 8; i++)
		gid[8 + i] = (uint8_t)(g >> (56 - 8 * i));
}

static int tap_send(struct cep_transport *t, const uint8_t *mad, size_t len,
		    const struct cep_mad_addr *to)
{
	struct tap *tp = (struct tap *)t;
	struct cep_pcap_meta m;
	enum cep_msg_type type;

	memset(&m, 0, sizeof(m));
	m.slid = tp->lid;
	m.dlid = to->lid;
	gid_of(tp->lid, m.sgid);
	gid_of(to->lid, m.dgid);
	if (cep_mad_peek(mad, len, &type, NULL))
		type = CEP_MSG_INVALID;
	/* one lock over both files: their records are in the same order */
	pthread_mutex_lock(&cap_mtx);
	if (cap_scenario)
		CHECK_EQ(cep_pcap_write_mad(cap_scenario, mad, len, &m), 0);
	if (cap_service) {
		CHECK_EQ(cep_pcap_write_mad(cap_service, mad, len, &m), 0);
		atomic_fetch_add(&tp->sent[type], 1);
	}
	pthread_mutex_unlock(&cap_mtx);
	/* lost on the wire: sent (and captured), never delivered */
	if (type != CEP_MSG_INVALID && atomic_compare_exchange_strong(&tp->drop, &(int){ (int)type },
								      CEP_MSG_INVALID))
		return 0;
	return tp->port->ops->send(tp->port, mad, len, to);
}

static int tap_query(struct cep_transport *t, struct cep_port_info *out)
{
	struct tap *tp = (struct tap *)t;

	return tp->port->ops->query_port(tp->port, out);
}

static int tap_start(struct cep_transport *t, cep_recv_fn fn, void *ctx)
{
	struct tap *tp = (struct tap *)t;

	return tp->port->ops->start(tp->port, fn, ctx);
}

static void tap_stop(struct cep_transport *t)
{
	struct tap *tp = (struct tap *)t;

	tp->port->ops->stop(tp->port);
}

static void tap_destroy(struct cep_transport *t)
{
	struct tap *tp = (struct tap *)t;

	tp->port->ops->destroy(tp->port);
}

static const struct cep_transport_ops tap_ops = {
	.send = tap_send, .query_port = tap_query, .start = tap_start,
	.stop = tap_stop, .destroy = tap_destroy,
};

/* ---- nodes and their events ------------------------------------------------ */

enum on_req { ACCEPT, REJECT, IGNORE };

struct node {
	const char *name;
	struct tap tap;
	struct cep_cm *cm;
	pthread_mutex_t mtx;
	enum cep_cm_event_type ev[MAXEV];
	struct cep_cm_id *ev_id[MAXEV];
	int nev;
	atomic_int on_req;                   /* B's application: enum on_req */
	struct cep_cm_id *ids[MAXEV];        /* every id to destroy at the end */
	int nids;
};

static struct cep_fabric *fab;
static struct node A = { .name = "A" }, B = { .name = "B" };

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static void keep_id(struct node *n, struct cep_cm_id *id)
{
	pthread_mutex_lock(&n->mtx);
	if (n->nids < MAXEV)
		n->ids[n->nids++] = id;
	pthread_mutex_unlock(&n->mtx);
}

/* Callback (worker thread): log, and play B's application. */
static int on_event(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct node *n = ev->context;
	int on_req = atomic_load(&n->on_req);  /* set by main between scenarios */
	uint32_t qpn;

	pthread_mutex_lock(&n->mtx);
	if (n->nev < MAXEV) {
		n->ev[n->nev] = ev->type;
		n->ev_id[n->nev++] = id;
	}
	qpn = 0x200 + (uint32_t)n->nev % 16;
	pthread_mutex_unlock(&n->mtx);
	if (ev->type == CEP_CM_EV_REQ_RECEIVED || ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED)
		keep_id(n, id);
	if (ev->type == CEP_CM_EV_REQ_RECEIVED && on_req == ACCEPT) {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = qpn,
						  .starting_psn = 0x4242, .responder_resources = 4,
						  .initiator_depth = 4 };

		CHECK_EQ(cep_cm_accept(id, &ap), 0);
	} else if (ev->type == CEP_CM_EV_REQ_RECEIVED && on_req == REJECT) {
		static const char why[] = "service full";

		CHECK_EQ(cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, why, sizeof(why)), 0);
	} else if (ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED) {
		CHECK_EQ(cep_cm_sidr_rep(id, CEP_SIDR_SUCCESS, 0x777, 0x1234, NULL, 0), 0);
	}
	return 0;
}

static int count_ev(struct node *n, enum cep_cm_event_type type, struct cep_cm_id *id)
{
	int c = 0;

	pthread_mutex_lock(&n->mtx);
	for (int i = 0; i < n->nev; i++)
		c += n->ev[i] == type && (!id || n->ev_id[i] == id);
	pthread_mutex_unlock(&n->mtx);
	return c;
}

/* Wait (<= 10 s) until @n has logged more than @before events of @type
 * (for @id, or for any id when NULL). */
static void wait_more(struct node *n, enum cep_cm_event_type type, struct cep_cm_id *id,
		      int before)
{
	for (int i = 0; i < 10000; i++) {
		if (count_ev(n, type, id) > before)
			return;
		sleep_ms(1);
	}
	fprintf(stderr, "%s: no %s\n", n->name, cep_cm_event_name(type));
	check_failures++;
}

/* Wait for @id's first event of @type. */
static void wait_ev(struct node *n, enum cep_cm_event_type type, struct cep_cm_id *id)
{
	wait_more(n, type, id, 0);
}

static unsigned long sent_of(struct node *n, enum cep_msg_type t)
{
	return atomic_load(&n->tap.sent[t]);
}

static void node_init(struct node *n, uint64_t guid, uint16_t lid)
{
	struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = guid, .lid = lid,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 2 };

	pthread_mutex_init(&n->mtx, NULL);
	CHECK_EQ(cep_fabric_port_create(fab, &pa, &n->tap.port), 0);
	n->tap.t.ops = &tap_ops;
	n->tap.lid = lid;
	ca.transport = &n->tap.t;
	CHECK_EQ(cep_cm_create(&ca, &n->cm), 0);
	for (uint32_t q = 0x100; q < 0x110; q++)
		CHECK_EQ(cep_cm_qp_register(n->cm, q), 0);
	for (uint32_t q = 0x200; q < 0x210; q++)
		CHECK_EQ(cep_cm_qp_register(n->cm, q), 0);
}

static struct cep_cm_id *new_id(struct node *n)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_event, .context = n };
	struct cep_cm_id *id = NULL;

	CHECK_EQ(cep_cm_create_id(n->cm, &ia, &id), 0);
	keep_id(n, id);
	return id;
}

/* CM response timeouts of the REQs, which also time DREQ retries:
 * 18 = 1.07 s by default, so that no timer fires however slow the run;
 * 12 = 16.8 ms where a scenario wants retries. */
#define QUICK 12
#define SLOW 18
static uint8_t resp_timeout = SLOW;

/* A connect from A to B for @sid on QP @qpn. */
static struct cep_cm_id *connect_a(uint64_t sid, uint32_t qpn, uint8_t retries)
{
	struct cep_cm_id *id = new_id(&A);
	struct cep_cm_conn_param p;

	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = sid;
	p.qpn = qpn;
	p.starting_psn = 0x1234;
	p.responder_resources = 4;
	p.initiator_depth = 4;
	p.remote_cm_response_timeout = resp_timeout;
	p.local_cm_response_timeout = resp_timeout;
	p.packet_life_time = 8;
	p.max_cm_retries = retries;
	p.primary.local_lid = LID_A;
	p.primary.remote_lid = LID_B;
	p.primary.subnet_local = 1;
	p.primary.local_ack_timeout = 10;     /* timewait = 2 x 4.2 ms */
	p.primary.packet_rate = 3;
	CHECK_EQ(cep_cm_connect(id, &p), 0);
	return id;
}

static void set_loss(double loss)
{
	struct cep_fabric_faults f = { .size = sizeof(f), .loss = loss };

	CHECK_EQ(cep_fabric_set_faults(fab, &f), 0);
}

/* Start writing @name's capture (and keep writing service.pcap). */
static void scenario_begin(const char *dir, const char *name)
{
	char path[4096];
	struct cep_pcap *pc = NULL;

	snprintf(path, sizeof(path), "%s/%s.pcap", dir, name);
	CHECK_EQ(cep_pcap_open(path, CEP_PCAP_INFINIBAND, &pc), 0);
	pthread_mutex_lock(&cap_mtx);
	cap_scenario = pc;
	pthread_mutex_unlock(&cap_mtx);
}

static void scenario_end(void)
{
	struct cep_pcap *pc;

	/* nothing is in flight once both CMs are quiet */
	CHECK_EQ(cep_cm_quiesce(A.cm, 5000), 0);
	CHECK_EQ(cep_cm_quiesce(B.cm, 5000), 0);
	pthread_mutex_lock(&cap_mtx);
	pc = cap_scenario;
	cap_scenario = NULL;
	pthread_mutex_unlock(&cap_mtx);
	CHECK_EQ(cep_pcap_close(pc), 0);
}

/* ---- scenarios ---------------------------------------------------------------- */

/* REQ -> REP -> RTU, then DREQ -> DREP. */
static void established(uint32_t qpn)
{
	int rtus = count_ev(&B, CEP_CM_EV_RTU_RECEIVED, NULL);
	struct cep_cm_id *id;

	atomic_store(&B.on_req, ACCEPT);
	id = connect_a(SID, qpn, 3);
	wait_ev(&A, CEP_CM_EV_ESTABLISHED, id);
	wait_more(&B, CEP_CM_EV_RTU_RECEIVED, NULL, rtus);
	CHECK_EQ(cep_cm_disconnect(id, NULL, 0), 0);
	wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, id);
}

/* B's application rejects: REJ "consumer reject" (28) to the REQ. */
static void rejected(void)
{
	struct cep_cm_id *id;

	atomic_store(&B.on_req, REJECT);
	id = connect_a(SID, 0x101, 3);
	wait_ev(&A, CEP_CM_EV_REJ_RECEIVED, id);
}

/* No listener for the service: B's CM answers REJ "invalid service ID". */
static void no_listener(void)
{
	wait_ev(&A, CEP_CM_EV_REJ_RECEIVED, connect_a(SID_NONE, 0x102, 3));
}

/* Every MAD lost until A has sent its REQ twice: one retry, then the
 * connection is made. */
static void retried(void)
{
	struct cep_cm_id *id;
	unsigned long before = sent_of(&A, CEP_MSG_REQ);

	atomic_store(&B.on_req, ACCEPT);
	set_loss(1.0);
	resp_timeout = QUICK;
	id = connect_a(SID, 0x103, 3);
	resp_timeout = SLOW;
	for (int i = 0; i < 10000 && sent_of(&A, CEP_MSG_REQ) < before + 2; i++)
		sleep_ms(1);
	set_loss(0);
	CHECK(sent_of(&A, CEP_MSG_REQ) >= before + 2);
	wait_ev(&A, CEP_CM_EV_ESTABLISHED, id);
	CHECK_EQ(cep_cm_disconnect(id, NULL, 0), 0);
	wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, id);
}

/* Every MAD lost: A sends 1 + 2 REQs, gives up with REJ "timeout". */
static void timed_out(void)
{
	struct cep_cm_id *id;

	atomic_store(&B.on_req, ACCEPT);
	set_loss(1.0);
	resp_timeout = QUICK;
	id = connect_a(SID, 0x104, 2);
	resp_timeout = SLOW;
	wait_ev(&A, CEP_CM_EV_REQ_ERROR, id);
	set_loss(0);
}

/* SIDR: one answered, one for a service nobody offers. */
static void sidr(void)
{
	struct cep_mad_addr to = { .lid = LID_B, .qpn = 1, .qkey = CEP_QP1_QKEY };
	struct cep_cm_sidr_param p = { .size = sizeof(p), .pkey = 0xffff, .timeout = SLOW,
				       .max_cm_retries = 2, .peer = &to };
	struct cep_cm_id *id;

	p.service_id = SID;
	id = new_id(&A);
	CHECK_EQ(cep_cm_sidr_req(id, &p), 0);
	wait_ev(&A, CEP_CM_EV_SIDR_REP_RECEIVED, id);
	p.service_id = SID_NONE;
	id = new_id(&A);
	CHECK_EQ(cep_cm_sidr_req(id, &p), 0);
	wait_ev(&A, CEP_CM_EV_SIDR_REP_RECEIVED, id);
}

/* A's RTU is lost: B resends its REP when its timer expires, A answers
 * the duplicate REP with the RTU again (docs/protocol.md coverage 24). */
static void rtu_lost(void)
{
	int rtus = count_ev(&B, CEP_CM_EV_RTU_RECEIVED, NULL);
	struct cep_cm_id *id;

	atomic_store(&B.on_req, ACCEPT);
	atomic_store(&A.tap.drop, CEP_MSG_RTU);
	resp_timeout = QUICK;
	id = connect_a(SID, 0x109, 3);
	resp_timeout = SLOW;
	wait_more(&B, CEP_CM_EV_RTU_RECEIVED, NULL, rtus);
	CHECK_EQ(atomic_load(&A.tap.drop), CEP_MSG_INVALID);
	CHECK_EQ(cep_cm_disconnect(id, NULL, 0), 0);
	wait_ev(&A, CEP_CM_EV_DREP_RECEIVED, id);
}

/* The network copies every MAD: captured where it is delivered (the
 * process-wide capture, as CEP_PCAP does), each copy right after its
 * original. service.pcap and the counters for it pause meanwhile. */
static void duplicated(const char *dir, struct cep_cm_stats *before)
{
	struct cep_fabric_faults f = { .size = sizeof(f), .duplicate = 1.0 };
	struct cep_cm_stats sa = { .size = sizeof(sa) }, sb = { .size = sizeof(sb) };
	struct cep_pcap *service;
	char path[4096];

	CHECK_EQ(cep_cm_get_stats(A.cm, &sa), 0);
	CHECK_EQ(cep_cm_get_stats(B.cm, &sb), 0);
	pthread_mutex_lock(&cap_mtx);
	service = cap_service;
	cap_service = NULL;
	pthread_mutex_unlock(&cap_mtx);
	snprintf(path, sizeof(path), "%s/duplicated.pcap", dir);
	CHECK_EQ(cep_capture_start(path, CEP_PCAP_INFINIBAND), 0);
	CHECK_EQ(cep_fabric_set_faults(fab, &f), 0);
	established(0x10a);
	CHECK_EQ(cep_cm_quiesce(A.cm, 5000), 0);
	CHECK_EQ(cep_cm_quiesce(B.cm, 5000), 0);
	CHECK_EQ(cep_fabric_quiesce(fab, 5000), 0);
	set_loss(0);
	CHECK_EQ(cep_capture_stop(), 0);
	pthread_mutex_lock(&cap_mtx);
	cap_service = service;
	pthread_mutex_unlock(&cap_mtx);
	/* the retries of this scenario are not in service.pcap */
	before->retries = sa.retries + sb.retries;
	CHECK_EQ(cep_cm_get_stats(A.cm, &sa), 0);
	CHECK_EQ(cep_cm_get_stats(B.cm, &sb), 0);
	before->retries = sa.retries + sb.retries - before->retries;
}

/* B's application never answers; the capture ends before any timer. */
static void unanswered(void)
{
	int reqs = count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL);

	atomic_store(&B.on_req, IGNORE);
	connect_a(SID, 0x105, 3);
	wait_more(&B, CEP_CM_EV_REQ_RECEIVED, NULL, reqs);
}

/* A's application gives up on its connect 0 ms after it: it destroys the
 * id, whose CM then sends REJ "timeout" (the only REJ it can send before
 * the peer's REP, as the kernel's cm_destroy_id does) long before the
 * REQ's response timeout (SLOW: 1.07 s) could have expired. cepdump must
 * call this an abort, not a timeout. */
static void aborted(void)
{
	int rejs = count_ev(&B, CEP_CM_EV_REJ_RECEIVED, NULL);
	int reqs = count_ev(&B, CEP_CM_EV_REQ_RECEIVED, NULL);
	struct cep_cm_id *id;

	atomic_store(&B.on_req, IGNORE);
	id = connect_a(SID, 0x10b, 3);
	wait_more(&B, CEP_CM_EV_REQ_RECEIVED, NULL, reqs);
	pthread_mutex_lock(&A.mtx);             /* not A's to destroy at the end */
	for (int i = 0; i < A.nids; i++)
		if (A.ids[i] == id)
			A.ids[i] = A.ids[--A.nids];
	pthread_mutex_unlock(&A.mtx);
	CHECK_EQ(cep_cm_destroy_id(id), 0);
	wait_ev(&A, CEP_CM_EV_DESTROYED, id);
	wait_more(&B, CEP_CM_EV_REJ_RECEIVED, NULL, rejs);
}

static void destroy_ids(struct node *n)
{
	struct cep_cm_id *ids[MAXEV];
	int k;

	pthread_mutex_lock(&n->mtx);
	k = n->nids;
	memcpy(ids, n->ids, (size_t)k * sizeof(ids[0]));
	n->nids = 0;
	pthread_mutex_unlock(&n->mtx);
	for (int i = 0; i < k; i++)
		CHECK_EQ(cep_cm_destroy_id_sync(ids[i]), 0);
}

int main(int argc, char **argv)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 4791 };
	struct cep_cm_stats dup_stats = { .size = sizeof(dup_stats) };
	struct cep_cm_id *listener;
	char path[4096];
	FILE *ex;

	if (argc != 2) {
		fprintf(stderr, "usage: make-captures DIR\n");
		return 2;
	}
	CHECK_EQ(cep_fabric_create(&fa, &fab), 0);
	node_init(&A, GUID_A, LID_A);
	node_init(&B, GUID_B, LID_B);
	listener = new_id(&B);
	CHECK_EQ(cep_cm_listen(listener, SID, ~0ull), 0);
	snprintf(path, sizeof(path), "%s/service.pcap", argv[1]);
	CHECK_EQ(cep_pcap_open(path, CEP_PCAP_INFINIBAND, &cap_service), 0);

	scenario_begin(argv[1], "normal");
	established(0x100);
	scenario_end();
	scenario_begin(argv[1], "rejected");
	rejected();
	scenario_end();
	scenario_begin(argv[1], "no-listener");
	no_listener();
	scenario_end();
	scenario_begin(argv[1], "retried");
	retried();
	scenario_end();
	scenario_begin(argv[1], "timed-out");
	timed_out();
	scenario_end();
	scenario_begin(argv[1], "sidr");
	sidr();
	scenario_end();
	scenario_begin(argv[1], "more");     /* three more good ones */
	for (uint32_t q = 0x106; q < 0x109; q++)
		established(q);
	scenario_end();
	scenario_begin(argv[1], "rtu-lost");
	rtu_lost();
	scenario_end();
	duplicated(argv[1], &dup_stats);
	scenario_begin(argv[1], "unanswered");
	unanswered();
	scenario_end();

	/* What the CMs counted while service.pcap was written. */
	pthread_mutex_lock(&cap_mtx);
	CHECK_EQ(cep_pcap_close(cap_service), 0);
	cap_service = NULL;
	pthread_mutex_unlock(&cap_mtx);
	snprintf(path, sizeof(path), "%s/expect.txt", argv[1]);
	ex = fopen(path, "w");
	CHECK(ex != NULL);
	if (ex) {
		struct cep_cm_stats sa = { .size = sizeof(sa) }, sb = { .size = sizeof(sb) };

		CHECK_EQ(cep_cm_get_stats(A.cm, &sa), 0);
		CHECK_EQ(cep_cm_get_stats(B.cm, &sb), 0);
		for (int t = 1; t < CEP_MSG_COUNT; t++)
			fprintf(ex, "sent %s %lu\n", cep_msg_name((enum cep_msg_type)t),
				sent_of(&A, (enum cep_msg_type)t) + sent_of(&B, (enum cep_msg_type)t));
		fprintf(ex, "retries %llu\n",
			(unsigned long long)(sa.retries + sb.retries - dup_stats.retries));
		fclose(ex);
	}
	/* after expect.txt: its counts are those of service.pcap */
	scenario_begin(argv[1], "aborted");
	aborted();
	scenario_end();

	destroy_ids(&A);
	destroy_ids(&B);
	for (int i = 0; i < 400; i++) {   /* timewaits end */
		struct cep_table_stats sa, sb;

		cep_table_stats(cep_cm_table(A.cm), &sa);
		cep_table_stats(cep_cm_table(B.cm), &sb);
		if (sa.live == 0 && sb.live == 0)
			break;
		sleep_ms(5);
	}
	CHECK_EQ(cep_cm_destroy(A.cm), 0);
	CHECK_EQ(cep_cm_destroy(B.cm), 0);
	A.tap.t.ops->destroy(&A.tap.t);
	B.tap.t.ops->destroy(&B.tap.t);
	CHECK_EQ(cep_fabric_destroy(fab), 0);
	return check_done("make-captures");
}
