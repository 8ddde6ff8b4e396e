/* SPDX-License-Identifier: MIT */
/*
 * cep-storm: a connection storm between two simulated nodes in one process.
 * Node A connects N times to node B (REQ -> REP -> RTU), then disconnects
 * every connection (DREQ -> DREP -> timewait), then checks that no CEP is
 * left, the core invariants hold and every binding is back to INVALID.
 * Faults (loss, duplication, reordering) come from a seed, so a run
 * reproduces. Exit status 0 only if every check passed.
 * --sa CA:PORT --sa-dest LID|GID: the path of every connection comes from
 * the subnet administrator of a real (or ibsim's) InfiniBand port, asked
 * once; the two simulated nodes take its two ends' LIDs and GIDs and every
 * REQ its path (cep_sa_path_to_conn), so the CM's timers run on the SA's
 * packet life time. The CM's MADs still cross the in-process fabric.
 * --accept-rate K: node B's application takes K requests a second from a
 * queue, as cmtime's server does, with the automatic MRAs of librdmacm on
 * libcep; with --window as large as --count every REQ is sent at once
 * (cmtime's client): what node A's window of REQs per peer (src/cm/cm_pace.c)
 * does to the REQs per connection and the time to set all up.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cep/cm.h>
#include <cep/fabric.h>
#include <cep/pcap.h>
#include <cep/qp.h>
#include <cep/sa.h>
#include <cep/table.h>

#include "sa_path.h"

#define QPN_BASE 0x1000u
#define SID 0x0000000000c0ffeeull

enum { C_PENDING, C_ESTABLISHED, C_FAILED, C_RELEASED };

struct conn {
	struct cep_cm_id *a;
	uint64_t t0_ns;
	uint32_t lat_us;
	_Atomic int outcome;
};

static struct conn *conns;
static uint32_t count = 100000;
static _Atomic uint64_t established, failed, released, released_timeout, released_rej;
static _Atomic uint64_t a_destroyed, b_created, b_destroyed, b_established, accept_errors;
static _Atomic uint64_t fail_reason[CEP_REJ_REASON_MAX + 2]; /* last: timeout */
/* --sa: the path every REQ must carry, as node B receives it */
static int use_sa;
static struct cep_sa_path sa_rec;
static _Atomic uint64_t req_seen, req_off_path;
/* --accept-rate: node B's requests, queued for its accepting thread. Who
 * destroys a passive id the queue holds: its st (the id's context), one
 * exchange each, so exactly one of the accepting thread and the id's
 * callbacks does. */
enum { B_QUEUED, B_ACCEPTED, B_DEAD };
struct bconn {
	_Atomic int st;
	uint32_t conn;
};
static unsigned accept_rate;
static pthread_mutex_t acq_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct cep_cm_id **acq;
static size_t acq_head, acq_tail, acq_cap;
static _Atomic int acq_stop;

/* Does node B's REQ carry the SA's path (cm_format_req's fields)? */
static int req_matches_path(const struct cep_req *rq)
{
	uint8_t plt = sa_rec.packet_life_time ? sa_rec.packet_life_time
					      : CEP_CM_DEFAULT_PACKET_LIFE_TIME;

	return rq->primary.local_lid == sa_rec.slid &&
	       rq->primary.remote_lid == sa_rec.dlid &&
	       !memcmp(rq->primary.local_gid, sa_rec.sgid, 16) &&
	       !memcmp(rq->primary.remote_gid, sa_rec.dgid, 16) &&
	       rq->primary.sl == sa_rec.sl && rq->primary.packet_rate == sa_rec.rate &&
	       rq->primary.flow_label == sa_rec.flow_label &&
	       rq->primary.traffic_class == sa_rec.traffic_class &&
	       rq->primary.hop_limit == sa_rec.hop_limit &&
	       rq->partition_key == sa_rec.pkey && rq->path_mtu == sa_rec.mtu &&
	       /* the fabric's ports report CA ACK delay 0 */
	       rq->primary.local_ack_timeout == cep_qp_ack_timeout(0, plt);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_us(unsigned us)
{
	struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000L };

	nanosleep(&ts, NULL);
}

static void finish_fail(struct conn *c, unsigned reason_slot)
{
	int exp = C_PENDING;

	if (atomic_compare_exchange_strong(&c->outcome, &exp, C_FAILED)) {
		atomic_fetch_add(&failed, 1);
		atomic_fetch_add(&fail_reason[reason_slot], 1);
	} else if (exp == C_ESTABLISHED &&
		   atomic_compare_exchange_strong(&c->outcome, &exp, C_RELEASED)) {
		atomic_fetch_add(&released, 1);
		atomic_fetch_add(&released_rej, 1);
	}
}

/* Node A: the active side. Context = struct conn. */
static int on_a(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct conn *c = ev->context;
	int exp;

	switch (ev->type) {
	case CEP_CM_EV_ESTABLISHED:
		exp = C_PENDING;
		if (atomic_compare_exchange_strong(&c->outcome, &exp, C_ESTABLISHED)) {
			uint64_t d = (now_ns() - c->t0_ns) / 1000;

			c->lat_us = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
			atomic_fetch_add(&established, 1);
		}
		return 0;
	case CEP_CM_EV_REJ_RECEIVED:
		finish_fail(c, ev->status >= 0 && ev->status <= CEP_REJ_REASON_MAX
			       ? (unsigned)ev->status : 0);
		return cep_cm_id_state(id) == CEP_CM_IDLE; /* else timewait first */
	case CEP_CM_EV_REQ_ERROR:
		finish_fail(c, CEP_REJ_REASON_MAX + 1);
		return 1;
	case CEP_CM_EV_DREP_RECEIVED:
	case CEP_CM_EV_DREQ_ERROR:
	case CEP_CM_EV_DREQ_RECEIVED:
		exp = C_ESTABLISHED;
		if (atomic_compare_exchange_strong(&c->outcome, &exp, C_RELEASED)) {
			atomic_fetch_add(&released, 1);
			if (ev->type == CEP_CM_EV_DREQ_ERROR)
				atomic_fetch_add(&released_timeout, 1);
		}
		return 0;
	case CEP_CM_EV_TIMEWAIT_EXIT:
		return 1;
	case CEP_CM_EV_DESTROYED:
		atomic_fetch_add(&a_destroyed, 1);
		return 0;
	default:
		return 0;
	}
}

/* Node B: the passive side. The REQ's private data names the connection
 * index, which picks B's QPN. */
static int on_b(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	switch (ev->type) {
	case CEP_CM_EV_REQ_RECEIVED: {
		uint32_t i;
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .starting_psn = 7,
						  .responder_resources = 4, .initiator_depth = 4,
						  .rnr_retry_count = 7 };
		int ret;

		atomic_fetch_add(&b_created, 1);
		if (use_sa) {
			atomic_fetch_add(&req_seen, 1);
			if (!req_matches_path(&ev->msg.u.req))
				atomic_fetch_add(&req_off_path, 1);
		}
		memcpy(&i, ev->private_data, sizeof(i));
		if (i >= count)
			return cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 1;
		if (accept_rate) { /* the accepting thread answers it */
			struct bconn *b = calloc(1, sizeof(*b));
			int queued = 0;

			if (b) {
				b->conn = i;
				cep_cm_id_set_context(id, b);
				pthread_mutex_lock(&acq_mtx);
				if (acq_tail < acq_cap) {
					acq[acq_tail++] = id;
					queued = 1;
				}
				pthread_mutex_unlock(&acq_mtx);
			}
			if (queued)
				return 0;
			atomic_store(&b->st, B_DEAD); /* DESTROYED frees it */
			return cep_cm_reject(id, CEP_REJ_NO_RESOURCES, NULL, 0, NULL, 0), 1;
		}
		ap.qpn = QPN_BASE + i;
		ret = cep_cm_accept(id, &ap);
		if (ret) {
			atomic_fetch_add(&accept_errors, 1);
			cep_cm_reject(id, CEP_REJ_NO_QP, NULL, 0, NULL, 0);
			return 1;
		}
		return 0;
	}
	case CEP_CM_EV_RTU_RECEIVED:
		atomic_fetch_add(&b_established, 1);
		return 0;
	case CEP_CM_EV_REQ_ERROR: /* --accept-rate: expired in the queue */
	case CEP_CM_EV_REJ_RECEIVED:
		if (accept_rate && ev->context &&
		    atomic_exchange(&((struct bconn *)ev->context)->st, B_DEAD) != B_ACCEPTED)
			return 0; /* the accepting thread destroys it */
		return cep_cm_id_state(id) == CEP_CM_IDLE;
	case CEP_CM_EV_REP_ERROR:
	case CEP_CM_EV_TIMEWAIT_EXIT:
		return 1;
	case CEP_CM_EV_DESTROYED:
		if (accept_rate) /* the listener's is NULL */
			free(ev->context);
		atomic_fetch_add(&b_destroyed, 1); /* passive ids and the listener */
		return 0;
	default:
		return 0;
	}
}

/* --accept-rate: node B's application, K requests a second from its queue
 * (real time). A request that expired meanwhile (REQ_ERROR, the id IDLE)
 * fails to accept and is destroyed here, where its queue entry was. */
static void *acceptor(void *arg)
{
	uint64_t t0 = now_ns(), done = 0;

	(void)arg;
	while (!atomic_load(&acq_stop)) {
		uint64_t due = (now_ns() - t0) / 1000000u * accept_rate / 1000u;

		while (done < due) {
			struct cep_cm_accept_param ap = { .size = sizeof(ap), .starting_psn = 7,
							  .responder_resources = 4, .initiator_depth = 4,
							  .rnr_retry_count = 7 };
			struct cep_cm_id *id = NULL;
			struct bconn *b;
			int st = B_QUEUED;

			pthread_mutex_lock(&acq_mtx);
			if (acq_head < acq_tail)
				id = acq[acq_head++];
			pthread_mutex_unlock(&acq_mtx);
			if (!id)
				break;
			done++;
			b = cep_cm_id_context(id);
			ap.qpn = QPN_BASE + b->conn;
			if (!atomic_compare_exchange_strong(&b->st, &st, B_ACCEPTED)) {
				cep_cm_destroy_id(id); /* expired or rejected in the queue */
				continue;
			}
			st = B_ACCEPTED;
			if (cep_cm_accept(id, &ap)) {
				atomic_fetch_add(&accept_errors, 1);
				if (atomic_compare_exchange_strong(&b->st, &st, B_DEAD))
					cep_cm_destroy_id(id);
			}
		}
		sleep_us(1000);
	}
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [--count N] [--workers W] [--window N] [--loss P] [--dup P]\n"
		"          [--reorder P] [--seed S] [--pcap FILE] [--sa CA:PORT --sa-dest LID|GID]\n"
		"          [--accept-rate K]\n"
		"  A connection storm between two simulated nodes: N connections\n"
		"  (default 100000) established, then all released; prints rates, setup\n"
		"  latency and a leak check. --workers: per node (default: half the\n"
		"  online CPUs, the two nodes share the machine); --window: connections\n"
		"  in setup (or release) at once (default 256). Faults are probabilities\n"
		"  in [0,1] drawn from --seed; --pcap FILE captures every MAD.\n"
		"  --sa: ask the subnet administrator of InfiniBand port CA:PORT (CA\n"
		"  empty: the default) once for the path to --sa-dest; the nodes take\n"
		"  its LIDs and GIDs, every REQ its path, P_Key, MTU and packet life\n"
		"  time. The CM's MADs stay on the in-process fabric (under ibsim's\n"
		"  libumad2sim.so only the SA query goes to the simulator).\n"
		"  --accept-rate K: node B's application takes K requests a second\n"
		"  from a queue, with librdmacm on libcep's automatic MRAs.\n",
		argv0);
}

static int wait_until(_Atomic uint64_t *a, _Atomic uint64_t *b, uint64_t target,
		      unsigned timeout_s, const char *what)
{
	uint64_t end = now_ns() + (uint64_t)timeout_s * 1000000000ull;

	while (atomic_load(a) + (b ? atomic_load(b) : 0) < target) {
		if (now_ns() > end) {
			fprintf(stderr, "storm: timed out waiting for %s (%" PRIu64 "/%" PRIu64 ")\n",
				what, atomic_load(a) + (b ? atomic_load(b) : 0), target);
			return -1;
		}
		sleep_us(200);
	}
	return 0;
}

struct node {
	const char *name;
	struct cep_transport *tp;
	struct cep_cm *cm;
};

static int node_check(struct node *n, int *bindings_ok)
{
	struct cep_table_stats ts;
	char msg[512] = "";
	int rc;

	rc = cep_table_check(cep_cm_table(n->cm), msg, sizeof(msg));
	cep_table_stats(cep_cm_table(n->cm), &ts);
	printf("  node %s: CEPs allocated %" PRIu64 " freed %" PRIu64 " live %" PRIu64
	       ", table check %s%s%s\n", n->name, ts.allocated, ts.freed, ts.live,
	       rc ? "FAILED: " : "ok", rc ? msg : "", "");
	for (uint32_t i = 0; i < count; i++) {
		uint32_t b = 1;

		if (cep_qp_binding(cep_cm_table(n->cm), QPN_BASE + i, &b) || b != CEP_BINDING_INVALID)
			(*bindings_ok) = 0;
	}
	return rc == 0 && ts.live == 0 && ts.allocated == ts.freed ? 0 : -1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, 'n' },
		{ "workers", required_argument, NULL, 'w' },
		{ "window", required_argument, NULL, 'W' },
		{ "loss", required_argument, NULL, 'l' },
		{ "dup", required_argument, NULL, 'd' },
		{ "reorder", required_argument, NULL, 'r' },
		{ "seed", required_argument, NULL, 's' },
		{ "pcap", required_argument, NULL, 'p' },
		{ "sa", required_argument, NULL, 'a' },
		{ "sa-dest", required_argument, NULL, 'D' },
		{ "accept-rate", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned workers = 0, window = 256;
	double loss = 0, dup = 0, reorder = 0;
	uint64_t seed = 1;
	const char *pcap = NULL, *sa_port = NULL, *sa_dest = NULL;
	struct sa_path_opt sa_opt;
	int opt, ok = 1;

	while ((opt = getopt_long(argc, argv, "n:w:W:l:d:r:s:p:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'n': count = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'w': workers = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'W': window = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'l': loss = strtod(optarg, NULL); break;
		case 'd': dup = strtod(optarg, NULL); break;
		case 'r': reorder = strtod(optarg, NULL); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'p': pcap = optarg; break;
		case 'a': sa_port = optarg; break;
		case 'D': sa_dest = optarg; break;
		case 'k': accept_rate = (unsigned)strtoul(optarg, NULL, 0); break;
		default: usage(argv[0]); return opt == 'h' ? 0 : 2;
		}
	}
	if (count == 0 || count > 0xe00000 || window == 0 ||
	    ((sa_port || sa_dest) && sa_path_parse(sa_port, sa_dest, &sa_opt))) {
		usage(argv[0]);
		return 2;
	}
	if (sa_port) {
		char why[256];
		int ret = sa_path_fetch(&sa_opt, &sa_rec, why, sizeof(why));

		if (ret) {
			fprintf(stderr, "storm: --sa: %s\n", why);
			return 1;
		}
		use_sa = 1;
		sa_path_print(stdout, "cep-storm", &sa_opt, &sa_rec);
	}
	if (workers == 0) {
		/* both nodes share this machine: half the CPUs each */
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

		workers = ncpu > 1 ? (unsigned)ncpu / 2 : 1;
	}
	if (pcap && cep_capture_start(pcap, 0)) {
		fprintf(stderr, "storm: cannot capture to %s\n", pcap);
		return 1;
	}

	struct cep_fabric *fab;
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = seed,
				      .max_in_flight = 1u << 20 };
	struct node A = { .name = "A" }, B = { .name = "B" };
	struct node *nodes[2] = { &A, &B };

	if (cep_fabric_create(&fa, &fab)) {
		fprintf(stderr, "storm: fabric\n");
		return 1;
	}
	for (int k = 0; k < 2; k++) {
		struct cep_fabric_port_attr pa = { .size = sizeof(pa),
			.ca_guid = 0x0002c90300000000ull + (uint64_t)k + 1, .lid = (uint16_t)(k + 1),
			.port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
		struct cep_cm_attr ca = { .size = sizeof(ca), .workers = workers,
					  .queue_depth = 1u << 15, .table_size = 1u << 17 };
		int ret;

		if (accept_rate) { /* librdmacm on libcep's MRAs (src/rdmacm/device.c) */
			ca.auto_mra = 1;
			ca.mra_service_timeout = 24;
		}

		if (use_sa) { /* the SA's two ends: A the source, B the destination */
			const uint8_t *gid = k ? sa_rec.dgid : sa_rec.sgid;

			pa.lid = k ? sa_rec.dlid : sa_rec.slid;
			memcpy(pa.gid, gid, 16);
			pa.ca_guid = sa_path_guid(gid);
		}
		ret = cep_fabric_port_create(fab, &pa, &nodes[k]->tp);

		ca.transport = nodes[k]->tp;
		if (ret || (ret = cep_cm_create(&ca, &nodes[k]->cm))) {
			fprintf(stderr, "storm: node %s: %s\n", nodes[k]->name, strerror(-ret));
			return 1;
		}
		for (uint32_t i = 0; i < count; i++)
			if (cep_cm_qp_register(nodes[k]->cm, QPN_BASE + i)) {
				fprintf(stderr, "storm: qp register\n");
				return 1;
			}
	}
	if (loss > 0 || dup > 0 || reorder > 0) {
		struct cep_fabric_faults f = { .size = sizeof(f), .loss = loss, .duplicate = dup,
					       .reorder = reorder, .hold_max_us = 2000 };

		if (cep_fabric_set_faults(fab, &f)) {
			fprintf(stderr, "storm: bad fault settings\n");
			return 2;
		}
	}
	workers = cep_cm_workers(A.cm);
	conns = calloc(count, sizeof(*conns));
	if (!conns)
		return 1;

	struct cep_cm_id *listener;
	struct cep_cm_id_attr la = { .size = sizeof(la), .handler = on_b };

	if (cep_cm_create_id(B.cm, &la, &listener) || cep_cm_listen(listener, SID, ~0ull)) {
		fprintf(stderr, "storm: listen\n");
		return 1;
	}
	printf("cep-storm: %u connections, %u workers per node, window %u, "
	       "loss %.2f dup %.2f reorder %.2f seed %" PRIu64 "\n",
	       count, workers, window, loss, dup, reorder, seed);

	pthread_t acceptor_thread;

	if (accept_rate) {
		acq_cap = 4 * (size_t)count; /* a request repeated after it expired */
		acq = calloc(acq_cap, sizeof(*acq));
		if (!acq || pthread_create(&acceptor_thread, NULL, acceptor, NULL)) {
			fprintf(stderr, "storm: accept-rate\n");
			return 1;
		}
		printf("node B accepts %u requests a second\n", accept_rate);
	}

	/* ---- setup ---- */
	struct cep_cm_conn_param p;

	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = SID;
	p.responder_resources = 4;
	p.initiator_depth = 4;
	/* 67 ms per try when the fabric loses MADs (retries recover them
	 * fast); without faults every connection must establish, so a try
	 * gets 1.07 s: a loaded machine (TSan, 2 cores) must not turn a slow
	 * answer into 15 retries and a REQ timeout. */
	p.remote_cm_response_timeout = loss > 0 || dup > 0 || reorder > 0 ? 14 : 18;
	p.local_cm_response_timeout = p.remote_cm_response_timeout;
	p.packet_life_time = 8;            /* 1 ms */
	p.max_cm_retries = 15;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	p.primary.local_lid = 1;
	p.primary.remote_lid = 2;
	p.primary.subnet_local = 1;
	/* the path's ACK timeout (and so timewait) the CM computes from the
	 * packet life and the CA ACK delay */
	p.primary.packet_rate = 3;
	if (use_sa && cep_sa_path_to_conn(&sa_rec, &p)) {
		fprintf(stderr, "storm: the SA's path has no MTU\n");
		return 1;
	}

	uint64_t t_start = now_ns();

	for (uint32_t i = 0; i < count; i++) {
		struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_a,
					     .context = &conns[i] };
		int ret;

		while (i - (atomic_load_explicit(&established, memory_order_relaxed) +
			    atomic_load_explicit(&failed, memory_order_relaxed)) >= window)
			sched_yield();
		if ((ret = cep_cm_create_id(A.cm, &ia, &conns[i].a))) {
			fprintf(stderr, "storm: create_id: %s\n", strerror(-ret));
			return 1;
		}
		p.qpn = QPN_BASE + i;
		p.starting_psn = i & 0xffffff;
		p.private_data = &i;
		p.private_data_len = sizeof(i);
		conns[i].t0_ns = now_ns();
		if ((ret = cep_cm_connect(conns[i].a, &p))) {
			fprintf(stderr, "storm: connect %u: %s\n", i, strerror(-ret));
			return 1;
		}
	}
	if (wait_until(&established, &failed, count, 120, "setup"))
		ok = 0;
	uint64_t t_setup = now_ns() - t_start;

	if (accept_rate) {
		atomic_store(&acq_stop, 1);
		pthread_join(acceptor_thread, NULL);
		/* requests left in the queue: repeats of connections that
		 * were set up meanwhile */
		for (size_t k = acq_head; k < acq_tail; k++) {
			struct bconn *b = cep_cm_id_context(acq[k]);
			int st = B_QUEUED;

			if (atomic_compare_exchange_strong(&b->st, &st, B_DEAD) || st == B_DEAD)
				cep_cm_destroy_id(acq[k]);
		}
	}

	/* ---- teardown ---- */
	uint64_t est = atomic_load(&established);
	uint64_t t_tear0 = now_ns(), issued = 0;

	for (uint32_t i = 0; i < count; i++) {
		if (atomic_load(&conns[i].outcome) != C_ESTABLISHED)
			continue;
		while (issued - (atomic_load_explicit(&released, memory_order_relaxed)) >= window)
			sched_yield();
		if (cep_cm_disconnect(conns[i].a, NULL, 0) == 0)
			issued++;
	}
	if (wait_until(&released, NULL, est, 120, "release"))
		ok = 0;
	uint64_t t_tear = now_ns() - t_tear0;

	/* ---- timewait, destruction, leak check ---- */
	if (wait_until(&a_destroyed, NULL, count, 120, "A ids destroyed"))
		ok = 0;
	for (int i = 0; i < 60000; i++) {
		struct cep_table_stats sb;

		cep_table_stats(cep_cm_table(B.cm), &sb);
		if (sb.live <= 1) /* the listener */
			break;
		sleep_us(1000);
	}
	cep_cm_destroy_id_sync(listener);
	for (int k = 0; k < 2; k++)
		cep_cm_quiesce(nodes[k]->cm, 5000);

	uint32_t *lat = malloc(sizeof(*lat) * (est ? est : 1));
	uint64_t nl = 0;

	for (uint32_t i = 0; i < count && lat; i++)
		if (atomic_load(&conns[i].outcome) == C_RELEASED && conns[i].lat_us)
			lat[nl++] = conns[i].lat_us;
	if (lat && nl)
		qsort(lat, nl, sizeof(*lat), cmp_u32);

	struct cep_cm_stats sa = { .size = sizeof(sa) }, sb = { .size = sizeof(sb) };
	uint64_t mads = 0, retries = 0, dups = 0, drops = 0;

	cep_cm_get_stats(A.cm, &sa);
	cep_cm_get_stats(B.cm, &sb);
	for (int t = 0; t < CEP_MSG_COUNT; t++)
		mads += sa.sent[t] + sb.sent[t];
	retries = sa.retries + sb.retries;
	dups = sa.duplicates + sb.duplicates;
	for (int d = 0; d < CEP_CM_DROP_COUNT; d++)
		drops += sa.drops[d] + sb.drops[d];

	printf("workers:                 %u per node (2 nodes)\n", workers);
	printf("established:             %" PRIu64 " of %u (failed %" PRIu64 ")\n",
	       est, count, atomic_load(&failed));
	printf("setup:                   %.0f connections/s (%.3f s)\n",
	       est / (t_setup / 1e9), t_setup / 1e9);
	printf("teardown:                %.0f releases/s (%.3f s)\n",
	       atomic_load(&released) / (t_tear / 1e9), t_tear / 1e9);
	if (nl)
		printf("setup latency:           p50 %.3f ms, p99 %.3f ms (max %.3f ms)\n",
		       lat[nl / 2] / 1e3, lat[(nl * 99) / 100] / 1e3, lat[nl - 1] / 1e3);
	printf("REQs per connection:     %.3f (%" PRIu64 " REQs, %" PRIu64 " MRAs received)\n",
	       (double)sa.sent[CEP_MSG_REQ] / count, sa.sent[CEP_MSG_REQ],
	       sa.received[CEP_MSG_MRA]);
	printf("MADs sent:               %" PRIu64 " (REQ %" PRIu64 " REP %" PRIu64
	       " RTU %" PRIu64 " DREQ %" PRIu64 " DREP %" PRIu64 " REJ %" PRIu64 " MRA %" PRIu64 ")\n",
	       mads, sa.sent[CEP_MSG_REQ], sb.sent[CEP_MSG_REP], sa.sent[CEP_MSG_RTU],
	       sa.sent[CEP_MSG_DREQ] + sb.sent[CEP_MSG_DREQ], sb.sent[CEP_MSG_DREP] + sa.sent[CEP_MSG_DREP],
	       sa.sent[CEP_MSG_REJ] + sb.sent[CEP_MSG_REJ], sa.sent[CEP_MSG_MRA] + sb.sent[CEP_MSG_MRA]);
	printf("retries / dups / drops:  %" PRIu64 " / %" PRIu64 " / %" PRIu64
	       " (queue full %" PRIu64 ")\n", retries, dups, drops,
	       sa.drops[CEP_CM_DROP_QUEUE_FULL] + sb.drops[CEP_CM_DROP_QUEUE_FULL]);
	if (drops) {
		printf("drops by reason:        ");
		for (int d = 0; d < CEP_CM_DROP_COUNT; d++)
			if (sa.drops[d] + sb.drops[d])
				printf(" %s=%" PRIu64 "/%" PRIu64, cep_cm_drop_name((unsigned)d),
				       sa.drops[d], sb.drops[d]);
		printf(" (A/B)\n");
	}
	if (atomic_load(&failed)) {
		printf("failures by reason:     ");
		for (int r = 0; r <= CEP_REJ_REASON_MAX + 1; r++)
			if (atomic_load(&fail_reason[r]))
				printf(" %s=%" PRIu64, r == CEP_REJ_REASON_MAX + 1 ? "REQ timeout"
					: cep_rej_reason_name((unsigned)r), atomic_load(&fail_reason[r]));
		printf("\n");
	}

	/* every connection ends established-then-released or failed */
	uint64_t ended = 0;

	for (uint32_t i = 0; i < count; i++) {
		int o = atomic_load(&conns[i].outcome);

		ended += o == C_RELEASED || o == C_FAILED;
	}
	if (ended != count) {
		printf("outcomes:                %" PRIu64 " of %u ended (FAILED)\n", ended, count);
		ok = 0;
	}
	if (loss == 0 && dup == 0 && reorder == 0 && atomic_load(&failed)) {
		printf("without faults every connection must establish: FAILED\n");
		ok = 0;
	}

	if (use_sa) {
		uint64_t seen = atomic_load(&req_seen), off = atomic_load(&req_off_path);

		printf("REQs on the SA's path:   %" PRIu64 " of %" PRIu64 " (local ACK timeout %u "
		       "from packet life time %u)%s\n", seen - off, seen,
		       cep_qp_ack_timeout(0, sa_rec.packet_life_time ? sa_rec.packet_life_time
					  : CEP_CM_DEFAULT_PACKET_LIFE_TIME),
		       sa_rec.packet_life_time, off || !seen ? " FAILED" : "");
		if (off || !seen)
			ok = 0;
	}
	printf("leak check:\n");
	int bindings_ok = 1;

	for (int k = 0; k < 2; k++)
		if (node_check(nodes[k], &bindings_ok))
			ok = 0;
	printf("  bindings: %s\n", bindings_ok ? "all INVALID" : "NOT all INVALID (FAILED)");
	if (!bindings_ok)
		ok = 0;
	for (int k = 0; k < 2; k++) {
		int r = cep_cm_destroy(nodes[k]->cm);

		if (r) {
			printf("  node %s: cep_cm_destroy: %s (FAILED)\n", nodes[k]->name, strerror(-r));
			ok = 0;
		}
		nodes[k]->tp->ops->destroy(nodes[k]->tp);
	}
	cep_fabric_destroy(fab);
	if (pcap)
		cep_capture_stop();
	free(lat);
	free(conns);
	free(acq);
	printf("result: %s\n", ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}
