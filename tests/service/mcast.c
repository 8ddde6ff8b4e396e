/* SPDX-License-Identifier: MIT */
/*
 * cepd's multicast memberships (src/service/mcast.c, issue 28) against an
 * SA that keeps state as OpenSM does: groups, each port's JoinState bits,
 * MLIDs, the IPoIB broadcast group, a Delete of no membership refused.
 * libcep's SA client runs over it (sa_create with a fake backend), so
 * every Set and Delete cepd sends goes through the real client and the
 * test reads what the SA holds, not only what cepd counts.
 *
 *   count    two clients' joins of one group and JoinState make one Set;
 *            their leaves one Delete, after the last; a leave of what the
 *            client does not hold is EADDRNOTAVAIL and changes nothing;
 *            send-only full member is its own bit; the answer's record
 *   gone     a client's end takes its joins out of the counts: the Delete
 *            only when no other client holds the bit, and no membership at
 *            the SA once every client has gone; a join still held when
 *            the service stops ends with it
 *   refused  the SA's refusal is the join's status, no broadcast group
 *            is EADDRNOTAVAIL, an SA client that cannot open is the
 *            join's error: nothing is counted by any, and a later join
 *            works; an SA-assigned MGID is the membership's
 *   bounds   at most MC_MAX_PER_CLIENT memberships per client (ENOBUFS),
 *            the next after a leave
 *   race     four clients' threads join and leave one group at once, each
 *            checking after every join that the SA has the port as a
 *            member (no Delete while any client holds the bit), then end:
 *            as many Deletes as Sets, and nothing is left
 *
 * Usage: test-service-mcast SCENARIO
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cep/sa.h>

#include "sa/sa_backend.h"
#include "service/cepd.h"
#include "../common/check.h"
#include "../common/fake_sa.h"

/* ---- an SA that keeps state ------------------------------------------------ */

#define MAX_GROUPS 1100
#define MAX_MEMBERS 4
#define BCAST_MGID "ff12:401b:ffff::ffff:ffff"
#define PORT_GID "fe80::2:c903:a0:1"

struct sa_group {
	int used;
	struct cep_sa_mcmember rec;      /* the group's parameters */
	uint8_t member_gid[MAX_MEMBERS][16];
	uint8_t member_state[MAX_MEMBERS];
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint8_t q[16][CEP_SA_MAD_SIZE];
	unsigned head, tail;
	struct sa_group g[MAX_GROUPS];
	unsigned sets, dels, gets, assigned;
	int refuse_sets, no_bcast;
	struct cep_sa_mcmember last_set;
	uint64_t last_mask;
} fsa = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* Under fsa.lock. */
static struct sa_group *sa_find(const uint8_t mgid[16])
{
	for (int i = 0; i < MAX_GROUPS; i++)
		if (fsa.g[i].used && !memcmp(fsa.g[i].rec.mgid, mgid, 16))
			return &fsa.g[i];
	return NULL;
}

static void sa_reset(void)
{
	pthread_mutex_lock(&fsa.lock);
	memset(fsa.g, 0, sizeof(fsa.g));
	fsa.sets = fsa.dels = fsa.gets = fsa.assigned = 0;
	fsa.refuse_sets = fsa.no_bcast = 0;
	fsa.g[0].used = 1;
	inet_pton(AF_INET6, BCAST_MGID, fsa.g[0].rec.mgid);
	fsa.g[0].rec.qkey = 0xb1b;
	fsa.g[0].rec.mlid = 0xc000;
	fsa.g[0].rec.mtu_selector = fsa.g[0].rec.rate_selector = 2;
	fsa.g[0].rec.mtu = 4;
	fsa.g[0].rec.rate = 3;
	fsa.g[0].rec.sl = 3;
	fsa.g[0].rec.flow_label = 0x12345;
	fsa.g[0].rec.traffic_class = 0x40;
	fsa.g[0].rec.hop_limit = 2;
	fsa.g[0].rec.pkey = 0xffff;
	fsa.g[0].rec.scope = 2;
	pthread_mutex_unlock(&fsa.lock);
}

/* Under fsa.lock: the status of the SA's answer to MCMemberRecord
 * request @method asking @m, its record in @a. */
static uint16_t sa_mcmember(uint8_t method, const struct cep_sa_mcmember *m,
			    struct cep_sa_mcmember *a)
{
	static const uint8_t zero[16];
	struct sa_group *g;
	int i, free_slot = -1;

	*a = *m;
	if (method == CEP_SA_METHOD_GET) {
		fsa.gets++;
		g = sa_find(m->mgid);
		if (!g || (g == &fsa.g[0] && fsa.no_bcast))
			return 0x0300; /* ERR_NO_RECORDS */
		*a = g->rec;
		return 0;
	}
	if (method == CEP_SA_METHOD_SET) {
		fsa.sets++;
		fsa.last_set = *m;
		if (fsa.refuse_sets)
			return 0x0200; /* ERR_REQ_INVALID */
		g = memcmp(m->mgid, zero, 16) ? sa_find(m->mgid) : NULL;
		if (!g) {
			for (i = 1; i < MAX_GROUPS && fsa.g[i].used; i++)
				;
			CHECK(i < MAX_GROUPS);
			g = &fsa.g[i];
			memset(g, 0, sizeof(*g));
			g->used = 1;
			g->rec = *m;
			if (!memcmp(m->mgid, zero, 16)) {
				inet_pton(AF_INET6, "ff12:a01b:ffff::", g->rec.mgid);
				g->rec.mgid[15] = (uint8_t)++fsa.assigned;
			}
			g->rec.mlid = (uint16_t)(0xc000 + i);
			g->rec.join_state = 0;
		}
		for (i = 0; i < MAX_MEMBERS; i++) {
			if (g->member_state[i] && !memcmp(g->member_gid[i], m->port_gid, 16))
				break;
			if (!g->member_state[i] && free_slot < 0)
				free_slot = i;
		}
		if (i == MAX_MEMBERS) {
			CHECK(free_slot >= 0);
			i = free_slot;
			memcpy(g->member_gid[i], m->port_gid, 16);
		}
		g->member_state[i] |= m->join_state;
		*a = g->rec;
		memcpy(a->port_gid, m->port_gid, 16);
		a->join_state = g->member_state[i];
		return 0;
	}
	fsa.dels++;
	g = sa_find(m->mgid);
	if (!g)
		return 0x0200;
	for (i = 0; i < MAX_MEMBERS; i++)
		if (g->member_state[i] && !memcmp(g->member_gid[i], m->port_gid, 16))
			break;
	if (i == MAX_MEMBERS || (g->member_state[i] & m->join_state) != m->join_state)
		return 0x0200; /* not a member with those bits: OpenSM refuses */
	g->member_state[i] &= (uint8_t)~m->join_state;
	for (i = 0; i < MAX_MEMBERS && !g->member_state[i]; i++)
		;
	if (i == MAX_MEMBERS && g != &fsa.g[0])
		g->used = 0;
	return 0;
}

static int fsa_send(void *ctx, const uint8_t *mad, size_t len, uint16_t dlid, uint8_t sl)
{
	struct cep_sa_mad_hdr h;
	struct cep_sa_mcmember m, a;
	uint8_t rec[CEP_SA_MCM_REC_SIZE];

	(void)ctx, (void)dlid, (void)sl;
	if (len != CEP_SA_MAD_SIZE || cep_sa_mad_decode(mad, len, &h) ||
	    h.attr_id != CEP_SA_ATTR_MCMEMBER_REC)
		return -EINVAL;
	cep_sa_mcmember_decode(mad + CEP_SA_HDR_SIZE, &m);
	pthread_mutex_lock(&fsa.lock);
	if (h.method == CEP_SA_METHOD_SET)
		fsa.last_mask = h.comp_mask;
	h.status = sa_mcmember(h.method, &m, &a);
	h.method = h.method == CEP_SA_METHOD_DELETE ? CEP_SA_METHOD_DELETE_RESP
						    : CEP_SA_METHOD_GET_RESP;
	h.comp_mask = 0;
	CHECK_EQ(cep_sa_mcmember_encode(&a, rec), 0);
	CHECK(fsa.tail - fsa.head < 16);
	cep_sa_mad_encode(fsa.q[fsa.tail++ % 16], &h, rec, sizeof(rec));
	pthread_cond_broadcast(&fsa.cond);
	pthread_mutex_unlock(&fsa.lock);
	return 0;
}

static int fsa_recv(void *ctx, uint8_t *mad, size_t len, int timeout_ms)
{
	(void)ctx;
	return fake_sa_take(&fsa.lock, &fsa.cond, &fsa.head, &fsa.tail, fsa.q, 16, mad, len,
			    timeout_ms);
}

static int fsa_port(void *ctx, struct cep_sa_port *out)
{
	(void)ctx;
	memset(out, 0, sizeof(*out));
	out->lid = 1;
	out->sm_lid = 1;
	out->state = 4;
	out->port_num = 1;
	out->pkey = 0xffff;
	inet_pton(AF_INET6, PORT_GID, out->gid);
	return 0;
}

static const struct sa_backend_ops fsa_ops = { .send = fsa_send, .recv = fsa_recv,
					       .port = fsa_port };
static int sa_opens, sa_open_fails;

static int fake_sa_open(struct port *p, struct cep_sa **out)
{
	/* 2 s per attempt: a loaded machine (sanitizers) needs it */
	struct cep_sa_attr a = { .size = sizeof(a), .timeout_ms = 2000, .attempts = 2 };

	(void)p;
	sa_opens++;
	if (sa_open_fails) {
		sa_open_fails--;
		return -EACCES; /* as cep_sa_get without permission on umad */
	}
	return sa_create(&fsa_ops, NULL, &a, out);
}

/* The SA's JoinState of the port in group @mgid (0: none). */
static unsigned sa_state(const uint8_t mgid[16])
{
	uint8_t gid[16];
	unsigned st = 0;
	struct sa_group *g;

	inet_pton(AF_INET6, PORT_GID, gid);
	pthread_mutex_lock(&fsa.lock);
	g = sa_find(mgid);
	for (int i = 0; g && i < MAX_MEMBERS; i++)
		if (!memcmp(g->member_gid[i], gid, 16))
			st |= g->member_state[i];
	pthread_mutex_unlock(&fsa.lock);
	return st;
}

static unsigned sa_count(const unsigned *c)
{
	unsigned n;

	pthread_mutex_lock(&fsa.lock);
	n = *c;
	pthread_mutex_unlock(&fsa.lock);
	return n;
}

/* ---- cepd's side ------------------------------------------------------------- */

static struct port port;

static void port_up(void)
{
	memset(&port, 0, sizeof(port));
	snprintf(port.dev, sizeof(port.dev), "ib0");
	port.port_num = 1;
	port.info.link_layer = 1;
	port_sa_open = fake_sa_open;
	mc_port_init(&port);
	sa_port_init(&port, NULL);
	sa_reset();
}

static void port_down(void)
{
	CHECK_EQ(port.nmc, 0);
	CHECK(port.groups == NULL);
	mc_port_fini(&port);
	sa_port_fini(&port);
}

static struct client *client_new(void)
{
	struct client *c = calloc(1, sizeof(*c));

	CHECK(c != NULL);
	c->port = &port;
	return c;
}

static void client_end(struct client *c)
{
	mc_client_gone(c);
	CHECK(c->mcs == NULL);
	CHECK_EQ(c->nmcs, 0);
	free(c);
}

static struct cepd_mc req_of(const char *mgid, unsigned bit)
{
	struct cepd_mc m;

	memset(&m, 0, sizeof(m));
	if (mgid)
		inet_pton(AF_INET6, mgid, m.mgid);
	inet_pton(AF_INET6, PORT_GID, m.port_gid);
	m.qkey = 0x01234567u;
	m.pkey = 0xffff;
	m.bit = (uint8_t)bit;
	return m;
}

#define GRP "ff12:4001:ffff::1:203"

static void t_count(void)
{
	struct client *a, *b;
	struct cepd_mc m = req_of(GRP, 0), so = req_of(GRP, 3);
	struct cepd_mc_rep r;
	struct cep_sa_mcmember rec;

	port_up();
	a = client_new();
	b = client_new();
	/* the first join: the broadcast group's parameters, then the Set */
	CHECK_EQ(mc_join(a, &m, &r), 0);
	CHECK_EQ(r.status, 0);
	CHECK_EQ(sa_count(&fsa.sets), 1);
	CHECK_EQ(sa_count(&fsa.gets), 1);
	CHECK(fsa.last_mask == (CEP_SA_MCM_MGID | CEP_SA_MCM_PORT_GID | CEP_SA_MCM_PKEY |
				CEP_SA_MCM_JOIN_STATE | CEP_SA_MCM_QKEY | CEP_SA_MCM_SL |
				CEP_SA_MCM_FLOW_LABEL | CEP_SA_MCM_TCLASS));
	CHECK_EQ(fsa.last_set.qkey, 0x01234567u);
	CHECK_EQ(fsa.last_set.sl, 3);
	CHECK_EQ(fsa.last_set.flow_label, 0x12345);
	CHECK_EQ(fsa.last_set.join_state, CEP_SA_JOIN_FULL);
	cep_sa_mcmember_decode(r.rec, &rec);
	CHECK(!memcmp(rec.mgid, m.mgid, 16));
	CHECK(rec.mlid >= 0xc001);
	CHECK_EQ(rec.qkey, 0x01234567u);
	CHECK_EQ(sa_state(m.mgid), CEP_SA_JOIN_FULL);
	/* another client, and the first again: the port is a member */
	CHECK_EQ(mc_join(b, &m, &r), 0);
	CHECK_EQ(mc_join(a, &m, &r), 0);
	CHECK_EQ(sa_count(&fsa.sets), 1);
	CHECK_EQ(sa_count(&fsa.gets), 1);
	CHECK_EQ(port.nmc, 3);
	CHECK_EQ(a->nmcs, 1);
	CHECK_EQ(b->nmcs, 1);
	cep_sa_mcmember_decode(r.rec, &rec);
	CHECK(!memcmp(rec.mgid, m.mgid, 16));
	/* send-only full member: its own bit, its own Set */
	CHECK_EQ(mc_join(b, &so, &r), 0);
	CHECK_EQ(sa_count(&fsa.sets), 2);
	CHECK_EQ(fsa.last_set.join_state, CEP_SA_JOIN_SENDONLY_FULL);
	CHECK_EQ(sa_state(m.mgid), CEP_SA_JOIN_FULL | CEP_SA_JOIN_SENDONLY_FULL);
	CHECK_EQ(b->nmcs, 2);
	/* a leave of what a does not hold changes nothing */
	CHECK_EQ(mc_leave(a, &so), -EADDRNOTAVAIL);
	CHECK_EQ(sa_state(m.mgid), CEP_SA_JOIN_FULL | CEP_SA_JOIN_SENDONLY_FULL);
	/* leaves: the Delete after the last of the bit */
	CHECK_EQ(mc_leave(a, &m), 0);
	CHECK_EQ(mc_leave(b, &m), 0);
	CHECK_EQ(sa_count(&fsa.dels), 0);
	CHECK_EQ(mc_leave(b, &m), -EADDRNOTAVAIL); /* b's one join is over */
	CHECK_EQ(mc_leave(a, &m), 0);
	CHECK_EQ(sa_count(&fsa.dels), 1);
	CHECK_EQ(sa_state(m.mgid), CEP_SA_JOIN_SENDONLY_FULL);
	CHECK_EQ(mc_leave(a, &m), -EADDRNOTAVAIL);
	CHECK_EQ(mc_leave(b, &so), 0);
	CHECK_EQ(sa_count(&fsa.dels), 2);
	CHECK_EQ(sa_state(m.mgid), 0);
	CHECK_EQ(a->nmcs, 0);
	CHECK_EQ(b->nmcs, 0);
	client_end(a);
	client_end(b);
	CHECK_EQ(sa_count(&fsa.dels), 2);
	CHECK_EQ(sa_opens, 1);
	port_down();
}

static void t_gone(void)
{
	struct client *a, *b;
	struct cepd_mc m = req_of(GRP, 0), h = req_of("ff12:4001:ffff::2:1", 0);
	struct cepd_mc so = req_of(GRP, 3);
	struct cepd_mc_rep r;

	port_up();
	a = client_new();
	b = client_new();
	CHECK_EQ(mc_join(a, &m, &r), 0);
	CHECK_EQ(mc_join(a, &m, &r), 0);
	CHECK_EQ(mc_join(a, &so, &r), 0);
	CHECK_EQ(mc_join(a, &h, &r), 0);
	CHECK_EQ(mc_join(b, &h, &r), 0);
	CHECK_EQ(sa_count(&fsa.sets), 3);
	CHECK_EQ(port.nmc, 5);
	/* a ends (killed, or its socket closed): its joins go; h's bit stays
	 * the port's, b holds it */
	client_end(a);
	CHECK_EQ(sa_count(&fsa.dels), 2);
	CHECK_EQ(sa_state(m.mgid), 0);
	CHECK_EQ(sa_state(h.mgid), CEP_SA_JOIN_FULL);
	CHECK_EQ(port.nmc, 1);
	/* a new client's join of the group a held: a new Set */
	a = client_new();
	CHECK_EQ(mc_join(a, &m, &r), 0);
	CHECK_EQ(r.status, 0);
	CHECK_EQ(sa_count(&fsa.sets), 4);
	client_end(b);
	client_end(a);
	CHECK_EQ(sa_count(&fsa.dels), 4);
	CHECK_EQ(sa_state(m.mgid), 0);
	CHECK_EQ(sa_state(h.mgid), 0);
	/* the service stops while a client still holds a join (its thread
	 * did not end within the wait): the port's membership ends with it */
	a = client_new();
	CHECK_EQ(mc_join(a, &so, &r), 0);
	CHECK_EQ(sa_state(so.mgid), CEP_SA_JOIN_SENDONLY_FULL);
	mc_port_fini(&port);
	CHECK_EQ(sa_state(so.mgid), 0);
	CHECK_EQ(sa_count(&fsa.dels), 5);
	sa_port_fini(&port);
	while (a->mcs) { /* what its end would have freed */
		struct mc_ent *e = a->mcs;

		a->mcs = e->next;
		free(e);
	}
	free(a);
}

static void t_refused(void)
{
	struct client *a;
	struct cepd_mc m = req_of(GRP, 0), z = req_of(NULL, 0), ipoib = req_of(GRP, 0);
	struct cepd_mc_rep r;
	struct cep_sa_mcmember rec;

	port_up();
	a = client_new();
	/* the SA client cannot open: the join's error, nothing held; the
	 * next join opens it */
	sa_opens = 0;
	sa_open_fails = 1;
	CHECK_EQ(mc_join(a, &m, &r), -EACCES);
	CHECK_EQ(a->nmcs, 0);
	CHECK_EQ(port.nmc, 0);
	CHECK_EQ(sa_count(&fsa.sets), 0);
	/* the SA refuses the Set: the join's status, nothing counted */
	fsa.refuse_sets = 1;
	CHECK_EQ(mc_join(a, &m, &r), 0);
	CHECK_EQ(r.status, -EINVAL);
	CHECK_EQ(sa_opens, 2);
	CHECK_EQ(a->nmcs, 0);
	CHECK_EQ(port.nmc, 0);
	CHECK(port.groups == NULL);
	fsa.refuse_sets = 0;
	/* no broadcast group to take the parameters from */
	fsa.no_bcast = 1;
	CHECK_EQ(mc_join(a, &m, &r), -EADDRNOTAVAIL);
	CHECK_EQ(a->nmcs, 0);
	fsa.no_bcast = 0;
	/* now it works */
	CHECK_EQ(mc_join(a, &m, &r), 0);
	CHECK_EQ(r.status, 0);
	CHECK_EQ(sa_state(m.mgid), CEP_SA_JOIN_FULL);
	/* the IPoIB broadcast group's Q_Key: its rate, MTU and hop limit too */
	ipoib.qkey = 0;
	ipoib.mgid[15] = 9;
	CHECK_EQ(mc_join(a, &ipoib, &r), 0);
	CHECK_EQ(fsa.last_set.qkey, 0xb1b);
	CHECK(fsa.last_mask & CEP_SA_MCM_MTU);
	CHECK_EQ(fsa.last_set.mtu, 4);
	/* a zero MGID: the SA's, which names the membership */
	CHECK_EQ(mc_join(a, &z, &r), 0);
	CHECK_EQ(r.status, 0);
	cep_sa_mcmember_decode(r.rec, &rec);
	CHECK_EQ(rec.mgid[0], 0xff);
	CHECK_EQ(rec.mgid[15], 1);
	CHECK_EQ(sa_state(rec.mgid), CEP_SA_JOIN_FULL);
	CHECK_EQ(a->nmcs, 3);
	memcpy(z.mgid, rec.mgid, 16);
	CHECK_EQ(mc_leave(a, &z), 0);
	CHECK_EQ(sa_state(rec.mgid), 0);
	client_end(a);
	CHECK_EQ(sa_state(m.mgid), 0);
	CHECK_EQ(sa_state(ipoib.mgid), 0);
	port_down();
}

static void t_bounds(void)
{
	struct client *a = NULL;
	struct cepd_mc m = req_of(GRP, 0);
	struct cepd_mc_rep r;
	unsigned i;

	port_up();
	a = client_new();
	for (i = 0; i < 1024; i++) {
		m.mgid[14] = (uint8_t)(i >> 8);
		m.mgid[15] = (uint8_t)i;
		CHECK_EQ(mc_join(a, &m, &r), 0);
	}
	CHECK_EQ(a->nmcs, 1024);
	m.mgid[14] = 0x10;
	CHECK_EQ(mc_join(a, &m, &r), -ENOBUFS);
	CHECK_EQ(sa_count(&fsa.sets), 1024);
	CHECK_EQ(sa_state(m.mgid), 0);
	/* another join of one it holds is no new membership */
	m.mgid[14] = 0;
	m.mgid[15] = 7;
	CHECK_EQ(mc_join(a, &m, &r), 0);
	CHECK_EQ(mc_leave(a, &m), 0);
	CHECK_EQ(mc_leave(a, &m), 0);
	m.mgid[14] = 0x10;
	CHECK_EQ(mc_join(a, &m, &r), 0);
	CHECK_EQ(port.nmc, 1024);
	client_end(a);
	CHECK_EQ(sa_count(&fsa.dels), 1025);
	port_down();
}

/* ---- race ---------------------------------------------------------------------- */

#define RACERS 4
#define ROUNDS 150

static void *racer(void *arg)
{
	struct client *c = arg;
	struct cepd_mc m = req_of(GRP, 0);
	struct cepd_mc_rep r;

	for (int i = 0; i < ROUNDS; i++) {
		CHECK_EQ(mc_join(c, &m, &r), 0);
		CHECK_EQ(r.status, 0);
		/* while this client holds a join the port is a member */
		CHECK_EQ(sa_state(m.mgid), CEP_SA_JOIN_FULL);
		if (i % 3 != 2)
			CHECK_EQ(mc_leave(c, &m), 0);
	}
	return NULL;
}

static void t_race(void)
{
	struct client *c[RACERS];
	pthread_t t[RACERS];
	struct cepd_mc m = req_of(GRP, 0);

	port_up();
	for (int i = 0; i < RACERS; i++) {
		c[i] = client_new();
		CHECK_EQ(pthread_create(&t[i], NULL, racer, c[i]), 0);
	}
	for (int i = 0; i < RACERS; i++)
		CHECK_EQ(pthread_join(t[i], NULL), 0);
	CHECK_EQ(port.nmc, RACERS * (ROUNDS / 3));
	CHECK_EQ(sa_state(m.mgid), CEP_SA_JOIN_FULL);
	for (int i = 0; i < RACERS; i++)
		client_end(c[i]);
	CHECK_EQ(sa_state(m.mgid), 0);
	/* each Set followed by its one Delete, none refused by the SA */
	CHECK_EQ(sa_count(&fsa.sets), sa_count(&fsa.dels));
	CHECK(sa_count(&fsa.sets) >= 1);
	port_down();
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} t[] = {
		{ "count", t_count }, { "gone", t_gone }, { "refused", t_refused },
		{ "bounds", t_bounds }, { "race", t_race },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (argc > 1 && !strcmp(argv[1], t[i].name)) {
			t[i].fn();
			return check_done(argv[1]);
		}
	fprintf(stderr, "usage: %s count|gone|refused|bounds|race\n", argv[0]);
	return 2;
}
