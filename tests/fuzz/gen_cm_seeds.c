/* SPDX-License-Identifier: MIT */
/*
 * Writes the fuzz-cm seed corpus: the sequences of the CM scenario tests
 * (tests/cm/scenario.c, one seed per scenario, same name) and of the
 * stress harness's races, as fuzz_cm.h programs, so the fuzzer starts from
 * every protocol path the tests reach and mutates from there.
 * Usage: gen-cm-seeds DIR.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_cm.h"

/* A program being written, with the fuzzer's view of the ids: tickets in
 * creation order, "alive" until the program destroys them. */
struct gen {
	struct fz_prog p;
	int alive[256];
	int n;
};

static struct gen G;
static const char *outdir;
static int errors;

static void begin(uint8_t header)
{
	memset(&G, 0, sizeof(G));
	fz_begin(&G.p, header);
}

static void put(const char *name)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", outdir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(G.p.b, 1, G.p.n, f) != G.p.n) {
		perror(path);
		errors = 1;
	}
	if (f && fclose(f))
		errors = 1;
}

/* A new ticket: an id created by the program or a passive id the program
 * expects (a REQ or SIDR_REQ that reaches a listener). */
static int expect_id(void)
{
	G.alive[G.n] = 1;
	return G.n++;
}

/* The selector of ticket @l among the live ones (fuzz_cm.c pick_locked). */
static uint8_t sel(int l)
{
	int k = 0;

	for (int i = 0; i < l; i++)
		k += G.alive[i];
	return (uint8_t)k;
}

/* The raw port's pool index of ticket @l's comm ID (newest first after
 * 5 fixed values). */
static uint8_t comm_of(int l)
{
	return (uint8_t)(5 + (G.n - 1 - l));
}

#define C_OWN(k) ((uint8_t)(k)) /* the raw port's comm IDs 0x5000 + k */
#define C_ZERO 4
#define Q(k) ((uint8_t)(k))      /* QPN0 + k */
#define CQ(k) ((uint8_t)(8 + (k))) /* the raw port's QPNs */
enum { G_A, G_B, G_C, G_ZERO };
/* RAW message indices (fuzz_cm.c op_raw). */
enum { R_DAMAGED, R_REQ, R_MRA, R_REJ, R_REP, R_RTU, R_DREQ, R_DREP, R_LAP, R_APR,
       R_SIDR_REQ, R_SIDR_REP };

static int create(int node, int chan)
{
	FZ_EMIT(&G.p, CREATE_ID, (uint8_t)node, (uint8_t)chan);
	return expect_id();
}

static int listener(int node, int sid)
{
	int l = create(node, 0);

	FZ_EMIT(&G.p, LISTEN, FZ_T_LAST, (uint8_t)sid); /* the id just created */
	return l;
}

static void policy(int node, int req, int rep, int misc, int accept_q)
{
	FZ_EMIT(&G.p, POLICY, (uint8_t)node, (uint8_t)(req | rep << 4),
		(uint8_t)(misc | accept_q << 5), 0);
}

static void connect(int l, int q, int peer, int profile, int flags)
{
	FZ_EMIT(&G.p, CONNECT, sel(l), (uint8_t)q, (uint8_t)peer, (uint8_t)profile, (uint8_t)flags);
}

static void destroy(int l, int mode)
{
	FZ_EMIT(&G.p, DESTROY_ID, sel(l), (uint8_t)mode);
	G.alive[l] = 0;
}

static void advance(int step)
{
	FZ_EMIT(&G.p, ADVANCE, (uint8_t)step);
}

/* ADVANCE step indices (fz_steps_ms). */
enum { S1, S2, S5, S10, S17, S34, S100, S300, S1000, S5000, S60000, S3600000 };

static void raw(int type, int to, int local, int remote, int qpn, int guid, int misc, int tid)
{
	FZ_EMIT(&G.p, RAW, (uint8_t)type, (uint8_t)to, (uint8_t)local, (uint8_t)remote,
		(uint8_t)qpn, (uint8_t)guid, (uint8_t)misc, (uint8_t)tid);
}

/* A REQ from the raw port to B: comm ID 0x5000 + k, QPN CQPN0 + q, the
 * scenario harness's timers (profile 2: local response timeout 13). */
static void raw_req(int k, int q)
{
	raw(R_REQ, G_B, C_OWN(k), 0, CQ(q), G_C, 2 << 4, 0);
}

/* The raw port connects to B, which accepts on Q(1): returns B's id. */
static int raw_establish(int k, int q)
{
	int b;

	policy(G_B, FZ_P_REQ_ACCEPT, 0, FZ_P_DREP, 1);
	raw_req(k, q);
	b = expect_id();
	raw(R_RTU, G_B, C_OWN(k), comm_of(b), 0, G_C, 0, 0);
	return b;
}

/* A connects to B (accepted on Q(1)); *passive gets B's id. */
static int establish(int *passive, int qa)
{
	int a = create(G_A, 0);

	policy(G_B, FZ_P_REQ_ACCEPT, 0, FZ_P_DREP, 1);
	connect(a, qa, G_B, 0, 0);
	*passive = expect_id();
	return a;
}

static void seeds_scenarios(void)
{
	int a, b, l, a2;

	begin(0);
	listener(G_B, 0);
	a = establish(&b, 0);
	FZ_EMIT(&G.p, DISCONNECT, sel(a));
	advance(S5);
	advance(S5);
	put("establish");

	begin(0);
	listener(G_B, 0);
	policy(G_B, FZ_P_REQ_REJECT, 0, 0, 0);
	a = create(G_A, 0);
	connect(a, 0, G_B, 0, FZ_C_PDATA);
	expect_id();
	policy(G_B, FZ_P_REQ_ACCEPT, 0, 0, 1);
	a2 = create(G_A, 0);
	connect(a2, 0, G_B, 0, 0);
	put("rej-consumer");

	begin(0);
	a = create(G_A, 0);
	connect(a, 0, G_B, 0, 0);
	listener(G_B, 0);
	raw(R_REQ, G_B, C_OWN(1), 0, CQ(0), G_C, 2 << 1, 0); /* RD */
	put("rej-no-listener");

	begin(0);
	listener(G_B, 0);
	policy(G_B, FZ_P_REQ_ACCEPT, 0, 0, 1);
	policy(G_A, 0, FZ_P_REP_REJECT, 0, 0);
	a = create(G_A, 0);
	connect(a, 0, G_B, 0, FZ_C_MANUAL_RTU);
	advance(S100);
	put("rej-rep");

	begin(0);
	listener(G_B, 0);
	policy(G_B, FZ_P_REQ_MRA, 0, 0, 0);
	a = create(G_A, 0);
	connect(a, 0, G_B, 0, 0);
	b = expect_id();
	advance(S100);
	FZ_EMIT(&G.p, ACCEPT, sel(b), Q(1), 0);
	put("mra-req");

	begin(FZ_H_AUTO_MRA_B);
	listener(G_B, 0);
	a = create(G_A, 0);
	connect(a, 0, G_B, 0, 0);
	b = expect_id();
	advance(S34);
	advance(S34);
	advance(S100);
	FZ_EMIT(&G.p, ACCEPT, sel(b), Q(1), 0);
	put("mra-auto");

	begin(0);
	listener(G_B, 0);
	policy(G_B, FZ_P_REQ_ACCEPT, 0, 0, 1);
	policy(G_A, 0, FZ_P_REP_MRA, 0, 0);
	a = create(G_A, 0);
	connect(a, 0, G_B, 2, FZ_C_MANUAL_RTU);
	expect_id();
	advance(S100);
	FZ_EMIT(&G.p, RTU, sel(a));
	put("mra-rep");

	begin(0);
	a = create(G_A, 0);
	connect(a, 0, G_C, 1, 0);
	for (int i = 0; i < 4; i++)
		advance(S5);
	put("req-timeout");

	begin(0);
	for (int i = 0; i < 3; i++)
		connect(create(G_A, 0), i, G_C, 1, 0);
	advance(S5);
	advance(S5);
	advance(S5);
	put("tid");

	begin(0);
	listener(G_B, 0);
	policy(G_B, FZ_P_REQ_ACCEPT, 0, 0, 1);
	raw_req(0, 0);
	expect_id();
	for (int i = 0; i < 4; i++)
		advance(S34);
	put("rep-timeout");

	begin(0);
	listener(G_B, 0);
	raw_req(1, 0);
	expect_id();
	raw(R_REJ, G_B, C_OWN(1), 0, 0, G_C, 0x80, 0); /* timeout, remote 0 */
	put("rej-timeout-remote");

	begin(0);
	listener(G_B, 0);
	raw_req(2, 0);
	expect_id();
	raw_req(2, 0);
	raw_req(2, 0);
	put("dup-req-rcvd");

	begin(0);
	listener(G_B, 0);
	policy(G_B, FZ_P_REQ_MRA, 0, 0, 0);
	raw_req(3, 0);
	expect_id();
	raw_req(3, 0);
	put("dup-req-mra");

	begin(0);
	listener(G_B, 0);
	b = raw_establish(0, 0);
	FZ_EMIT(&G.p, DISCONNECT, sel(b));
	raw(R_DREP, G_B, C_OWN(0), comm_of(b), 0, G_C, 0, 0);
	raw_req(0, 0);
	advance(S10);
	raw_establish(0, 0);
	put("dup-req-timewait-reuse");

	begin(0);
	listener(G_B, 0);
	raw_establish(0, 0);
	raw_req(1, 0); /* new comm ID, same QPN */
	put("stale-conn");

	begin(0);
	listener(G_B, 0);
	b = raw_establish(0, 0);
	FZ_EMIT(&G.p, DISCONNECT, sel(b));
	raw(R_DREQ, G_B, C_OWN(0), comm_of(b), Q(1), G_C, 0, 0);
	raw(R_DREP, G_B, C_OWN(0), comm_of(b), 0, G_C, 0, 0);
	advance(S10);
	put("simultaneous-dreq");

	begin(0);
	listener(G_B, 0);
	a = establish(&b, 0);
	FZ_EMIT(&G.p, RACE, 0);
	FZ_EMIT(&G.p, DISCONNECT, sel(a));
	FZ_EMIT(&G.p, DISCONNECT, sel(b));
	advance(S10);
	put("simultaneous-dreq-pair");

	begin(0);
	listener(G_B, 0);
	b = raw_establish(0, 0);
	FZ_EMIT(&G.p, DISCONNECT, sel(b));
	for (int i = 0; i < 4; i++)
		advance(S34);
	advance(S10);
	put("dreq-timeout");

	begin(0);
	listener(G_B, 0);
	b = raw_establish(0, 0);
	raw(R_DREQ, G_B, C_OWN(0), comm_of(b), Q(1), G_C, 0, 0);
	raw(R_DREQ, G_B, C_OWN(0), comm_of(b), Q(1), G_C, 0, 0);
	put("dreq-in-timewait");

	begin(0);
	listener(G_B, 0);
	b = raw_establish(0, 0);
	raw(R_DREQ, G_B, C_OWN(3), comm_of(b), Q(1), G_C, 0, 0); /* wrong remote ID */
	raw(R_DREQ, G_B, C_OWN(0), comm_of(b), Q(2), G_C, 0, 0); /* wrong QPN */
	raw(R_DREQ, G_B, C_OWN(0), C_OWN(2), Q(1), G_C, 0, 0);   /* unknown comm ID */
	raw(R_REP, G_B, C_OWN(1), C_OWN(2), CQ(1), G_C, 0, 0);
	raw(R_RTU, G_B, C_OWN(1), C_OWN(2), 0, G_C, 0, 0);
	raw(R_DAMAGED, G_B, 0x07, 0, 0, 0, 3, 2);
	raw(R_REQ, G_B, C_ZERO, 0, CQ(2), G_C, 2 << 4, 0);        /* comm ID 0 */
	put("forged-unknown");

	begin(0);
	a = create(G_A, 0);
	connect(a, 0, G_C, 0, 0);
	raw(R_REP, G_A, C_OWN(0), comm_of(a), CQ(1), G_C, 0, 0);
	raw(R_REP, G_A, C_OWN(0), comm_of(a), CQ(1), G_C, 0, 0);
	put("dup-rep-rtu");

	begin(0);
	listener(G_B, 0);
	a = establish(&b, 0);
	FZ_EMIT(&G.p, LAP, sel(a), 12);
	FZ_EMIT(&G.p, APR, sel(b), 0);
	FZ_EMIT(&G.p, LAP, sel(a), 12);
	FZ_EMIT(&G.p, APR, sel(b), 1);
	put("lap-apr");

	begin(0);
	listener(G_B, 0);
	b = raw_establish(0, 0);
	FZ_EMIT(&G.p, LAP, sel(b), 8);
	for (int i = 0; i < 4; i++)
		advance(S10);
	put("lap-timeout");

	begin(0);
	listener(G_B, 0);
	policy(G_B, 0, 0, FZ_P_SIDR_REP, 0);
	FZ_EMIT(&G.p, SIDR_REQ, sel(create(G_A, 0)), G_B, 0, 0);
	expect_id();
	FZ_EMIT(&G.p, SIDR_REQ, sel(create(G_A, 0)), G_B, 1, 0);
	FZ_EMIT(&G.p, SIDR_REQ, sel(create(G_A, 0)), G_C, 0, 1);
	for (int i = 0; i < 3; i++)
		advance(S2);
	put("sidr");

	begin(0);
	listener(G_B, 0);
	a = establish(&b, 0);
	FZ_EMIT(&G.p, QP_DESTROY, G_A, Q(0));
	advance(S10);
	connect(create(G_A, 0), 0, G_B, 0, 0);
	raw_req(2, 0);
	expect_id();
	FZ_EMIT(&G.p, QP_DESTROY, G_B, Q(1));
	FZ_EMIT(&G.p, QP_REGISTER, G_A, Q(0));
	put("qp-destroy");

	begin(0);
	l = listener(G_B, 0);
	a = establish(&b, 0);
	destroy(a, FZ_D_ASYNC);
	advance(S10);
	policy(G_B, FZ_P_REQ_NOTHING, 0, 0, 0);
	a2 = create(G_A, 0);
	connect(a2, 2, G_B, 0, 0);
	b = expect_id();
	destroy(b, FZ_D_SYNC);
	destroy(l, FZ_D_LISTENER);
	put("destroy");

	begin(FZ_H_CHANNEL_B);
	l = create(G_B, 1);
	FZ_EMIT(&G.p, LISTEN, sel(l), 0);
	policy(G_B, FZ_P_REQ_ACCEPT, 0, 0, 1);
	a = create(G_A, 0);
	connect(a, 0, G_B, 0, 0);
	FZ_EMIT(&G.p, CHANNEL, G_B, FZ_CH_POLL_ALL);
	b = expect_id();
	FZ_EMIT(&G.p, CHANNEL, G_B, FZ_CH_POLL_ALL);
	destroy(b, FZ_D_ASYNC);
	FZ_EMIT(&G.p, DESTROY_ID, 0 /* the first id destroyed and not acked */, FZ_D_AGAIN);
	destroy(l, FZ_D_ASYNC);
	FZ_EMIT(&G.p, CHANNEL, G_B, FZ_CH_DESTROY);
	FZ_EMIT(&G.p, CHANNEL, G_B, FZ_CH_POLL_ALL);
	FZ_EMIT(&G.p, CHANNEL, G_B, FZ_CH_DESTROY);
	put("channel");
}

/* The stress harness's races and the planted bugs' shapes, as programs. */
static void seeds_races(void)
{
	int a, a2, b, l;

	/* two connects on one QPN at once (planted a); accept vs QP destroy */
	begin(FZ_H_WORKERS2);
	listener(G_B, 0);
	policy(G_B, FZ_P_REQ_ACCEPT, 0, FZ_P_DREP, 1);
	a = create(G_A, 0);
	a2 = create(G_A, 0);
	FZ_EMIT(&G.p, RACE, 0);
	connect(a, 3, G_B, 0, 0);
	connect(a2, 3, G_B, 0, 0);
	FZ_EMIT(&G.p, RACE, 0);
	FZ_EMIT(&G.p, QP_DESTROY, G_B, Q(1));
	raw_req(0, 0);
	put("race-bind-bind");

	/* the core table: bind vs QP destruction (planted c), destroy vs
	 * lookups (planted b), bind vs bind (planted a) */
	begin(0);
	for (int s = 0; s < 4; s++)
		FZ_EMIT(&G.p, CORE_CREATE, (uint8_t)s);
	for (int r = 0; r < 4; r++) {
		FZ_EMIT(&G.p, RACE, 0);
		FZ_EMIT(&G.p, CORE_BIND, 0, 1);
		FZ_EMIT(&G.p, CORE_QP_CYCLE, 1);
		FZ_EMIT(&G.p, RACE, 0);
		FZ_EMIT(&G.p, CORE_BIND, 1, 2);
		FZ_EMIT(&G.p, CORE_BIND, 2, 2);
		FZ_EMIT(&G.p, RACE, 0);
		FZ_EMIT(&G.p, CORE_DESTROY, 3);
		FZ_EMIT(&G.p, LOOKUPS, 7);
		FZ_EMIT(&G.p, CORE_DESTROY, 0);
		FZ_EMIT(&G.p, CORE_DESTROY, 1);
		FZ_EMIT(&G.p, CORE_DESTROY, 2);
		for (int s = 0; s < 4; s++)
			FZ_EMIT(&G.p, CORE_CREATE, (uint8_t)s);
	}
	put("race-core");

	/* bind against QP destruction only, on every slot and QPN in turn:
	 * the window of planted (c) is a few instructions wide, so one input
	 * tries it many times */
	begin(0);
	for (int s = 0; s < 4; s++)
		FZ_EMIT(&G.p, CORE_CREATE, (uint8_t)s);
	for (int r = 0; r < 12; r++) {
		FZ_EMIT(&G.p, RACE, 0);
		FZ_EMIT(&G.p, CORE_BIND, (uint8_t)(r & 3), (uint8_t)(r % 3));
		FZ_EMIT(&G.p, CORE_QP_CYCLE, (uint8_t)(r % 3));
	}
	put("race-bind-qp");

	/* ids destroyed while a reader looks them up (planted b) */
	begin(0);
	l = listener(G_B, 0);
	a = establish(&b, 0);
	a2 = create(G_A, 0);
	FZ_EMIT(&G.p, RACE, 0);
	destroy(a2, FZ_D_ASYNC);
	FZ_EMIT(&G.p, LOOKUPS, 0);
	FZ_EMIT(&G.p, RACE, 0);
	destroy(a, FZ_D_SYNC);
	FZ_EMIT(&G.p, LOOKUPS, 0);
	advance(S10);
	FZ_EMIT(&G.p, RACE, 0);
	destroy(l, FZ_D_LISTENER);
	FZ_EMIT(&G.p, LOOKUPS, 0);
	put("race-destroy-lookup");

	/* the application stops listening on its first REQ while more REQs
	 * for the listener are handled on the other worker */
	begin(FZ_H_WORKERS2);
	for (int r = 0; r < 4; r++) {
		listener(G_B, 0);
		FZ_EMIT(&G.p, POLICY, G_B, FZ_P_REQ_ACCEPT, FZ_P_DREP | 1 << 5, FZ_PX_UNLISTEN);
		FZ_EMIT(&G.p, RACE, 0);
		raw_req((r * 2) & 3, 0);
		raw_req((r * 2 + 1) & 3, 1);
		expect_id(); /* and the other REQ's id when it came first: the
				model is off by one then, harmless for a seed */
		G.alive[G.n - 2] = 0; /* the listener, destroyed by the policy */
		advance(S100);
	}
	put("race-unlisten");

	/* churn with destroys racing MADs, over a lossy fabric */
	begin(FZ_H_WORKERS2 | FZ_H_AUTO_MRA_B);
	listener(G_B, 0);
	policy(G_B, FZ_P_REQ_ACCEPT, 0, FZ_P_DREP | FZ_P_END_DESTROY, 2);
	policy(G_A, 0, 0, FZ_P_END_DESTROY, 0);
	FZ_EMIT(&G.p, FAULTS, 2, 1, 1, 0);
	for (int i = 0; i < 4; i++) {
		a = create(G_A, 0);
		connect(a, i, G_B, 0, 0);
		b = expect_id();
		advance(S5);
		FZ_EMIT(&G.p, RACE, 0);
		destroy(a, FZ_D_ASYNC);
		FZ_EMIT(&G.p, QP_DESTROY, G_B, Q(2));
		FZ_EMIT(&G.p, QP_REGISTER, G_B, Q(2));
		(void)b;
	}
	advance(S100);
	put("race-churn-faults");

	/* a node goes away with connections and channels in use */
	begin(FZ_H_CHANNEL_A | FZ_H_CHANNEL_B);
	listener(G_B, 1);
	a = establish(&b, 0);
	FZ_EMIT(&G.p, CREATE_ID, G_A, 1);
	expect_id();
	FZ_EMIT(&G.p, CM_RESTART, G_B);
	advance(S1000);
	FZ_EMIT(&G.p, CM_RESTART, G_A);
	put("cm-restart");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gen-cm-seeds DIR\n");
		return 2;
	}
	outdir = argv[1];
	mkdir(outdir, 0755);
	seeds_scenarios();
	seeds_races();
	return errors;
}
