/* SPDX-License-Identifier: MIT */
/*
 * cepdump's connection view (conn.h): MADs grouped into connections and
 * SIDR lookups by the keys IBTA vol. 1 ch. 12 gives them, then a verdict
 * per group. Two passes: every address's CA GUID is learned first, so a
 * message finds its connection whichever port of the CA sent it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "conn.h"
#include "wire/wire_fields.h"

#define NONE UINT32_MAX

/* ---- a small hash map: 24-byte keys -> uint32 ----------------------------------- */

struct hent {
	uint8_t key[24];
	uint32_t val;
	uint32_t used;
};

struct hmap {
	struct hent *e;
	size_t cap, n;
};

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p) {
		fprintf(stderr, "cepdump: out of memory\n");
		exit(2);
	}
	return p;
}

static size_t hslot(const uint8_t *k, size_t cap)
{
	uint64_t h = 0xcbf29ce484222325ull;    /* FNV-1a */

	for (int i = 0; i < 24; i++)
		h = (h ^ k[i]) * 0x100000001b3ull;
	return (size_t)(h ^ h >> 29) & (cap - 1);
}

static uint32_t hget(const struct hmap *m, const uint8_t *k)
{
	if (!m->cap)
		return NONE;
	for (size_t i = hslot(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (!m->e[i].used)
			return NONE;
		if (memcmp(m->e[i].key, k, 24) == 0)
			return m->e[i].val;
	}
}

static void hput(struct hmap *m, const uint8_t *k, uint32_t val)
{
	size_t i;

	if (2 * (m->n + 1) > m->cap) {
		struct hmap bigger = { NULL, m->cap ? 2 * m->cap : 64, 0 };

		bigger.e = xrealloc(NULL, bigger.cap * sizeof(*bigger.e));
		memset(bigger.e, 0, bigger.cap * sizeof(*bigger.e));
		for (size_t j = 0; j < m->cap; j++)
			if (m->e[j].used)
				hput(&bigger, m->e[j].key, m->e[j].val);
		free(m->e);
		*m = bigger;
	}
	for (i = hslot(k, m->cap); m->e[i].used; i = (i + 1) & (m->cap - 1))
		if (memcmp(m->e[i].key, k, 24) == 0) {
			m->e[i].val = val;
			return;
		}
	memcpy(m->e[i].key, k, 24);
	m->e[i].val = val;
	m->e[i].used = 1;
	m->n++;
}

static struct hmap *map_of(void **p)
{
	if (!*p) {
		*p = xrealloc(NULL, sizeof(struct hmap));
		memset(*p, 0, sizeof(struct hmap));
	}
	return *p;
}

/* ---- addresses -------------------------------------------------------------------- */

/* A port is its LID on IB (GRH or not), its GID on RoCE. */
static uint32_t intern_addr(struct conns *c, const struct dump_where *w, int source)
{
	uint8_t k[24];
	uint32_t i;

	memset(k, 0, sizeof(k));
	if (w->have_lid) {
		uint16_t lid = source ? w->slid : w->dlid;

		k[0] = 1;
		memcpy(k + 2, &lid, 2);
	} else {
		memcpy(k + 2, source ? w->sgid : w->dgid, 16);
	}
	i = hget(map_of(&c->addr_map), k);
	if (i != NONE)
		return i;
	if (c->naddrs == c->capaddrs) {
		c->capaddrs = c->capaddrs ? 2 * c->capaddrs : 16;
		c->addrs = xrealloc(c->addrs, c->capaddrs * sizeof(*c->addrs));
	}
	i = c->naddrs++;
	memset(&c->addrs[i], 0, sizeof(c->addrs[i]));
	c->addrs[i].ib = (uint8_t)w->have_lid;
	c->addrs[i].lid = source ? w->slid : w->dlid;
	if (w->have_gid) {
		memcpy(c->addrs[i].gid, source ? w->sgid : w->dgid, 16);
		c->addrs[i].have_gid = 1;
	}
	hput(c->addr_map, k, i);
	return i;
}

void addr_str(const struct conns *c, uint32_t addr, char *buf, size_t n)
{
	const struct addr *a;
	char g[64];

	if (addr == NONE || addr >= c->naddrs) {
		snprintf(buf, n, "?");
		return;
	}
	a = &c->addrs[addr];
	if (!a->ib && inet_ntop(AF_INET6, a->gid, g, sizeof(g)))
		snprintf(buf, n, "%s", g);
	else
		snprintf(buf, n, "lid %u", a->lid);
}

/* The CA an address belongs to: its CA GUID once learned, else itself. */
static void node_key(const struct conns *c, uint32_t addr, uint8_t out[9])
{
	const struct addr *a = &c->addrs[addr];
	uint64_t v = a->have_guid ? a->guid : addr;

	out[0] = a->have_guid ? 1 : 2;
	memcpy(out + 1, &v, 8);
}

static int same_node(const struct conns *c, uint32_t x, uint32_t y)
{
	uint8_t kx[9], ky[9];

	if (x == NONE || y == NONE)
		return 0;
	node_key(c, x, kx);
	node_key(c, y, ky);
	return memcmp(kx, ky, 9) == 0;
}

/* ---- endpoints: (kind, CA, comm ID or request ID) -> group ---------------------- */

static void ep_key(const struct conns *c, int sidr, uint32_t addr, uint32_t id, uint8_t k[24])
{
	memset(k, 0, 24);
	k[0] = sidr ? 2 : 1;
	memcpy(k + 4, &id, 4);
	node_key(c, addr, k + 8);
}

static uint32_t ep_get(struct conns *c, int sidr, uint32_t addr, uint32_t id)
{
	uint8_t k[24];

	if (!id || addr == NONE)
		return NONE;
	ep_key(c, sidr, addr, id, k);
	return hget(map_of(&c->end_map), k);
}

static void ep_put(struct conns *c, int sidr, uint32_t addr, uint32_t id, uint32_t g)
{
	uint8_t k[24];

	if (!id || addr == NONE)
		return;
	ep_key(c, sidr, addr, id, k);
	hput(map_of(&c->end_map), k, g);
}

/* ---- adding MADs ------------------------------------------------------------------- */

/* What the views keep of a MAD, by role, and the codec rows that fill
 * each role in the messages that have one (spec names, wire_fields.h). */
enum role { R_LOCAL, R_REMOTE, R_SID, R_GUID, R_QPN, R_PSN, R_QKEY, R_STATUS, R_CODE,
	    R_TIMEOUT, R_TIMEOUT2, R_COUNT };

static const char *const role_rows[R_COUNT][3] = {
	[R_LOCAL] = { "local_comm_id", "request_id" },
	[R_REMOTE] = { "remote_comm_id" },
	[R_SID] = { "service_id" },
	[R_GUID] = { "local_ca_guid" },
	[R_QPN] = { "local_qpn", "remote_qpn_eecn", "qpn" },
	[R_PSN] = { "starting_psn" },
	[R_QKEY] = { "q_key" },
	[R_STATUS] = { "reason", "ap_status", "status" },
	[R_CODE] = { "message_rejected", "message_mraed" },
	[R_TIMEOUT] = { "remote_cm_response_timeout", "service_timeout" },
	[R_TIMEOUT2] = { "local_cm_response_timeout" },
};

/* role -> row, per message type, looked up once */
static const struct cep_field *role_row[CEP_MSG_COUNT][R_COUNT];
static int role_rows_found;

static void find_role_rows(void)
{
	for (int t = 1; t < CEP_MSG_COUNT; t++) {
		size_t n;
		const struct cep_field *f = cep_wire_fields((enum cep_msg_type)t, &n);

		for (int r = 0; r < R_COUNT; r++)
			for (int k = 0; k < 3 && role_rows[r][k] && !role_row[t][r]; k++)
				for (size_t i = 0; i < n; i++)
					if (strcmp(f[i].name, role_rows[r][k]) == 0)
						role_row[t][r] = &f[i];
	}
	role_rows_found = 1;
}

static uint64_t role(const struct cep_msg *m, enum role r)
{
	const struct cep_field *f = role_row[m->type][r];

	return f ? cep_field_host_get(m, f) : 0;
}

void conns_add(struct conns *c, unsigned long frame, uint64_t ns, const struct dump_where *w,
	       const struct cep_msg *m, const char *invalid_field, uint64_t invalid_value)
{
	struct mad *d;

	if (!role_rows_found)
		find_role_rows();
	if (c->nmads == c->capmads) {
		c->capmads = c->capmads ? 2 * c->capmads : 256;
		c->mads = xrealloc(c->mads, (size_t)c->capmads * sizeof(*c->mads));
	}
	d = &c->mads[c->nmads++];
	memset(d, 0, sizeof(*d));
	d->ns = ns;
	d->tid = m->hdr.tid;
	d->frame = (uint32_t)frame;
	d->type = (uint8_t)m->type;
	d->src = intern_addr(c, w, 1);
	d->dst = intern_addr(c, w, 0);
	d->invalid = invalid_field;
	d->invalid_value = invalid_value;
	d->local = (uint32_t)role(m, R_LOCAL);
	d->remote = (uint32_t)role(m, R_REMOTE);
	d->sid = role(m, R_SID);
	d->guid = role(m, R_GUID);
	d->qpn = (uint32_t)role(m, R_QPN);
	d->psn = (uint32_t)role(m, R_PSN);
	d->qkey = (uint32_t)role(m, R_QKEY);
	d->status = (uint16_t)role(m, R_STATUS);
	d->code = (uint8_t)role(m, R_CODE);
	d->timeout = (uint8_t)role(m, R_TIMEOUT);
	d->timeout2 = (uint8_t)role(m, R_TIMEOUT2);
	/* REJ Timeout: the ARI holds the CA GUID of the node that timed out */
	if (m->type == CEP_MSG_REJ && m->u.rej.reason == CEP_REJ_TIMEOUT &&
	    m->u.rej.reject_info_length >= 8)
		for (int i = 0; i < 8; i++)
			d->guid = d->guid << 8 | m->u.rej.ari[i];
	/* REQ and REP name the sender's CA: learned for every address */
	if ((m->type == CEP_MSG_REQ || m->type == CEP_MSG_REP) && !c->addrs[d->src].have_guid) {
		c->addrs[d->src].guid = d->guid;
		c->addrs[d->src].have_guid = 1;
	}
}

/* ---- grouping ---------------------------------------------------------------------- */

static uint32_t new_group(struct conns *c, int sidr, uint32_t a_addr, uint32_t b_addr)
{
	struct group *g;

	if (c->ngroups == c->capgroups) {
		c->capgroups = c->capgroups ? 2 * c->capgroups : 64;
		c->groups = xrealloc(c->groups, (size_t)c->capgroups * sizeof(*c->groups));
	}
	g = &c->groups[c->ngroups];
	memset(g, 0, sizeof(*g));
	g->sidr = (uint8_t)sidr;
	g->a.addr = a_addr;
	g->b.addr = b_addr;
	return c->ngroups++;
}

/* Who sent @d in @g: by comm IDs, then by CA. */
static uint8_t side_of(const struct conns *c, const struct group *g, const struct mad *d)
{
	if (d->local && d->local == g->a.comm && same_node(c, d->src, g->a.addr))
		return SIDE_A;
	if (d->local && d->local == g->b.comm && same_node(c, d->src, g->b.addr))
		return SIDE_B;
	if (d->remote && d->remote == g->a.comm && same_node(c, d->dst, g->a.addr))
		return SIDE_B;
	if (d->remote && d->remote == g->b.comm && same_node(c, d->dst, g->b.addr))
		return SIDE_A;
	return same_node(c, d->src, g->a.addr) ? SIDE_A : SIDE_B;
}

/* Timer-driven messages: a copy is a retry (IBTA 12.7.x: REQ, REP, DREQ,
 * LAP and SIDR_REQ are resent when their response timer expires). */
static int resent_by_timer(uint8_t type)
{
	return type == CEP_MSG_REQ || type == CEP_MSG_REP || type == CEP_MSG_DREQ ||
	       type == CEP_MSG_LAP || type == CEP_MSG_SIDR_REQ;
}

static uint64_t cm_time_ns(unsigned t)
{
	return (uint64_t)4096 << (t > 31 ? 31 : t);     /* 4.096 us * 2^t */
}

/* Link mad @i into group @gi as sent by @side; mark it a retry or a
 * duplicate when the same side sent the same type and TID before. */
static void attach(struct conns *c, uint32_t gi, uint32_t i, uint8_t side)
{
	struct group *g = &c->groups[gi];
	struct mad *d = &c->mads[i], *prev = NULL;
	uint16_t copies = 0;

	d->group = gi;
	d->side = side;
	for (uint32_t j = g->first; j; j = c->mads[j - 1].next) {
		struct mad *e = &c->mads[j - 1];

		if (e->side == side && e->type == d->type && e->tid == d->tid) {
			copies++;
			prev = e;
		}
	}
	if (prev) {
		/* A resends (REQ, DREQ, LAP) after the REQ's remote CM response
		 * timeout, B (REP, DREQ, LAP) after its local CM response
		 * timeout (IBTA 12.7.3x; the kernel's cm_id timeout_ms): a copy
		 * sooner than half of that is a network copy, not a timer's */
		uint64_t min_gap = !g->have_req || g->sidr ? 0 :
				   cm_time_ns(side == SIDE_A ? g->a_timeout : g->b_timeout) / 2;

		d->copy = copies;
		d->mark = resent_by_timer(d->type) && d->ns - prev->ns >= min_gap ? MARK_RETRY
										  : MARK_DUP;
	}
	if (g->last)
		c->mads[g->last - 1].next = i + 1;
	else
		g->first = i + 1;
	g->last = i + 1;
	if (!g->n++)
		g->t_first = d->ns;
	g->t_last = d->ns;
}

/* The sender's and the receiver's ends learn the comm IDs they show. */
static void learn_ends(struct conns *c, uint32_t gi, const struct mad *d, uint8_t side)
{
	struct group *g = &c->groups[gi];
	struct end *from = side == SIDE_A ? &g->a : &g->b, *to = side == SIDE_A ? &g->b : &g->a;

	if (from->addr == NONE)
		from->addr = d->src;
	if (to->addr == NONE)
		to->addr = d->dst;
	if (!from->comm && d->local) {
		from->comm = d->local;
		ep_put(c, g->sidr, from->addr, from->comm, gi);
	}
	if (!to->comm && d->remote) {
		to->comm = d->remote;
		ep_put(c, g->sidr, to->addr, to->comm, gi);
	}
}

static void group_req(struct conns *c, uint32_t i)
{
	struct mad *d = &c->mads[i];
	uint32_t gi = ep_get(c, 0, d->src, d->local);
	struct group *g;

	if (gi != NONE && c->groups[gi].have_req && c->groups[gi].req_tid == d->tid) {
		attach(c, gi, i, SIDE_A);
		return;
	}
	/* a new REQ (new TID) from a known comm ID starts a new connection */
	gi = new_group(c, 0, d->src, d->dst);
	g = &c->groups[gi];
	g->have_req = 1;
	g->req_tid = d->tid;
	g->sid = d->sid;
	g->a_timeout = d->timeout;
	g->b_timeout = d->timeout2;
	g->a.comm = d->local;
	g->a.qpn = d->qpn;
	g->a.psn = d->psn;
	g->a.guid = d->guid;
	ep_put(c, 0, d->src, d->local, gi);
	attach(c, gi, i, SIDE_A);
}

static void group_sidr(struct conns *c, uint32_t i)
{
	struct mad *d = &c->mads[i];
	uint32_t gi;
	struct group *g;

	if (d->type == CEP_MSG_SIDR_REQ) {
		gi = ep_get(c, 1, d->src, d->local);
		if (gi == NONE || c->groups[gi].req_tid != d->tid) {
			gi = new_group(c, 1, d->src, d->dst);
			g = &c->groups[gi];
			g->have_req = 1;
			g->req_tid = d->tid;
			g->sid = d->sid;
			g->a.comm = d->local;
			ep_put(c, 1, d->src, d->local, gi);
		}
		attach(c, gi, i, SIDE_A);
		return;
	}
	gi = ep_get(c, 1, d->dst, d->local);
	if (gi == NONE) {                /* the SIDR_REQ is not in the capture */
		gi = new_group(c, 1, d->dst, d->src);
		c->groups[gi].a.comm = d->local;
		c->groups[gi].sid = d->sid;
		ep_put(c, 1, d->dst, d->local, gi);
	}
	g = &c->groups[gi];
	if (!g->b.qpn) {
		g->b.qpn = d->qpn;
		g->b.qkey = d->qkey;
	}
	attach(c, gi, i, SIDE_B);
}

static void group_other(struct conns *c, uint32_t i)
{
	struct mad *d = &c->mads[i];
	uint32_t gi = ep_get(c, 0, d->src, d->local);
	uint8_t side;

	if (gi == NONE)
		gi = ep_get(c, 0, d->dst, d->remote);
	if (gi == NONE) {
		/* began before the capture: the REP's sender is passive; for
		 * anything else the roles are unknown and A is the sender */
		if (d->type == CEP_MSG_REP)
			gi = new_group(c, 0, d->dst, d->src);
		else
			gi = new_group(c, 0, d->src, d->dst);
	}
	side = d->type == CEP_MSG_REP ? SIDE_B : side_of(c, &c->groups[gi], d);
	learn_ends(c, gi, d, side);
	if (d->type == CEP_MSG_REP && !c->groups[gi].b.qpn) {
		c->groups[gi].b.qpn = d->qpn;
		c->groups[gi].b.psn = d->psn;
		c->groups[gi].b.guid = d->guid;
	}
	attach(c, gi, i, side);
}

/* ---- verdicts ---------------------------------------------------------------------- */

const char *verdict_name(enum verdict v)
{
	static const char *const names[V_COUNT] = {
		[V_REJECTED] = "REJECTED", [V_TIMED_OUT] = "TIMED OUT", [V_ABORTED] = "ABORTED",
		[V_NOT_ESTABLISHED] = "NOT ESTABLISHED", [V_FAILED] = "FAILED",
		[V_INVALID] = "INVALID FIELD", [V_RETRIED] = "RETRIED", [V_OK] = "OK",
	};

	return (unsigned)v < V_COUNT ? names[v] : "?";
}

void dur_str(uint64_t ns, char *buf, size_t n)
{
	if (ns >= 1000000000u)
		snprintf(buf, n, "%.3f s", (double)ns / 1e9);
	else
		snprintf(buf, n, "%.3f ms", (double)ns / 1e6);
}

static const char *side_name(uint8_t side)
{
	return side == SIDE_A ? "A" : "B";
}

static const char *rejected_what(uint8_t code)
{
	static const char *const w[] = { "to the REQ", "to the REP", "to a LAP or other", "?" };

	return w[code & 3];
}

/* What a group's MADs add up to. */
struct tally {
	unsigned sent[2][CEP_MSG_COUNT];   /* copies included, per side */
	unsigned retried[2][CEP_MSG_COUNT];
	const struct mad *rej, *rej_after, *mra, *apr, *sidr_rep, *invalid;
	uint64_t last_sent[2][CEP_MSG_COUNT]; /* time of each side's last copy */
	int rep, dreq, drep, lap;
	uint8_t dreq_side, lap_side;
};

static void tally(const struct conns *c, struct group *g, struct tally *t)
{
	memset(t, 0, sizeof(*t));
	for (uint32_t j = g->first; j; j = c->mads[j - 1].next) {
		const struct mad *d = &c->mads[j - 1];

		t->sent[d->side][d->type]++;
		t->last_sent[d->side][d->type] = d->ns;
		t->retried[d->side][d->type] += d->mark == MARK_RETRY;
		g->retries += d->mark == MARK_RETRY;
		g->dups += d->mark == MARK_DUP;
		if (d->invalid) {
			g->invalid++;
			if (!t->invalid)
				t->invalid = d;
		}
		switch (d->type) {
		case CEP_MSG_REP:
			t->rep = 1;
			break;
		case CEP_MSG_RTU:
			if (!g->established) {
				g->established = 1;
				g->t_rtu = d->ns;
			}
			break;
		case CEP_MSG_REJ:
			if (!g->established && !t->rej)
				t->rej = d;
			else if (g->established && !t->rej_after)
				t->rej_after = d;
			break;
		case CEP_MSG_MRA:
			t->mra = d;
			break;
		case CEP_MSG_DREQ:
		case CEP_MSG_LAP:
			/* the RTU was lost or not captured: the connection was used */
			if (t->rep && !t->rej && !g->established)
				g->established = 2;
			if (d->type == CEP_MSG_DREQ && !t->dreq++)
				t->dreq_side = d->side;
			if (d->type == CEP_MSG_LAP && !t->lap++)
				t->lap_side = d->side;
			break;
		case CEP_MSG_DREP:
			t->drep = 1;
			break;
		case CEP_MSG_APR:
			t->apr = d;
			break;
		case CEP_MSG_SIDR_REP:
			if (!t->sidr_rep)
				t->sidr_rep = d;
			break;
		default:
			break;
		}
	}
}

/* "; REQ sent 3 times" for every type a timer resent, then "; 2
 * duplicates", into @buf. */
static void retries_str(const struct group *g, const struct tally *t, char *buf, size_t n)
{
	size_t o = 0;

	buf[0] = 0;
	for (int s = 0; s < 2; s++)
		for (int ty = 1; ty < CEP_MSG_COUNT; ty++)
			if (t->retried[s][ty] && o < n)
				o += (size_t)snprintf(buf + o, n - o, "; %s sent %u times",
						      cep_msg_name((enum cep_msg_type)ty),
						      t->retried[s][ty] + 1);
	if (g->dups && o < n)
		snprintf(buf + o, n - o, "; %u duplicate%s", g->dups, g->dups == 1 ? "" : "s");
}

/* "1 REQ", "3 REQs" */
static const char *times(unsigned n, const char *what, char *buf, size_t len)
{
	snprintf(buf, len, "%u %s%s", n, what, n == 1 ? "" : "s");
	return buf;
}

static void verdict_sidr(struct group *g, const struct tally *t, const char *rs)
{
	char d[32], n1[32];

	if (t->sidr_rep && t->sidr_rep->status) {
		g->verdict = V_REJECTED;
		snprintf(g->why, sizeof(g->why), "SIDR_REP %s (%u)%s",
			 cep_sidr_status_name(t->sidr_rep->status), t->sidr_rep->status, rs);
	} else if (!t->sidr_rep) {
		g->verdict = V_NOT_ESTABLISHED;
		snprintf(g->why, sizeof(g->why), "no SIDR_REP to %s in the capture",
			 times(t->sent[SIDE_A][CEP_MSG_SIDR_REQ], "SIDR_REQ", n1, sizeof(n1)));
	} else {
		g->established = 1;
		g->t_rtu = t->sidr_rep->ns;
		dur_str(t->sidr_rep->ns - g->t_first, d, sizeof(d));
		g->verdict = g->retries ? V_RETRIED : V_OK;
		snprintf(g->why, sizeof(g->why), "answered in %s: QPN 0x%06x, Q_Key 0x%08x%s", d,
			 g->b.qpn, g->b.qkey, rs);
	}
}

/* A REJ Timeout from the side that sent @what (REQ or REP) and got no
 * answer: that side's CM sends it when its retries run out, each retry
 * after the response timeout the REQ gave it (REQ: remote CM response
 * timeout; REP: local CM response timeout), or longer after an MRA. A REJ
 * sooner than one such timeout after the last copy is not a timeout: the
 * application destroyed or rejected the id (the CM sends REJ Timeout from
 * REQ_SENT, as the kernel does, since the peer's comm ID is unknown). */
static int rej_is_abort(const struct group *g, const struct tally *t, const struct mad *r,
			int what, uint64_t *waited, uint64_t *timeout)
{
	uint64_t last = t->last_sent[r->side][what];
	uint64_t to = cm_time_ns(what == CEP_MSG_REQ ? g->a_timeout : g->b_timeout);

	if (t->mra && t->mra->side != r->side && cm_time_ns(t->mra->timeout) > to)
		to = cm_time_ns(t->mra->timeout);
	*waited = r->ns > last ? r->ns - last : 0;
	*timeout = to;
	return g->have_req && last && *waited < to;
}

static void verdict(const struct conns *c, struct group *g)
{
	struct tally t;
	char rs[120], d[32], n1[32];
	const struct mad *r;
	uint64_t waited = 0, timeout = 0;

	tally(c, g, &t);
	retries_str(g, &t, rs, sizeof(rs));
	if (g->sidr) {
		verdict_sidr(g, &t, rs);
	} else if ((r = t.rej) && r->status != CEP_REJ_TIMEOUT) {
		g->verdict = V_REJECTED;
		snprintf(g->why, sizeof(g->why), "%s (%u) from %s, %s%s", cep_rej_reason_name(r->status),
			 r->status, side_name(r->side), rejected_what(r->code), rs);
	} else if (r && ((r->side == SIDE_A && !t.rep &&
			  rej_is_abort(g, &t, r, CEP_MSG_REQ, &waited, &timeout)) ||
			 (r->side == SIDE_B && t.rep &&
			  rej_is_abort(g, &t, r, CEP_MSG_REP, &waited, &timeout)))) {
		char w[32], to[32];

		g->verdict = V_ABORTED;
		dur_str(waited, w, sizeof(w));
		dur_str(timeout, to, sizeof(to));
		snprintf(g->why, sizeof(g->why), "%s gave up %s after its %s, sooner than the %s's "
			 "response timeout (%s) lets a timer expire: the application ended it "
			 "(REJ Timeout)%s",
			 side_name(r->side), w, r->side == SIDE_A ? "REQ" : "REP",
			 r->side == SIDE_A ? "REQ" : "REP", to, rs);
	} else if (r) {
		g->verdict = V_TIMED_OUT;
		if (r->side == SIDE_A && g->have_req && !t.rep)
			snprintf(g->why, sizeof(g->why), "no REP to %s: A gave up, REJ Timeout",
				 times(t.sent[SIDE_A][CEP_MSG_REQ], "REQ", n1, sizeof(n1)));
		else if (r->side == SIDE_B && t.rep)
			snprintf(g->why, sizeof(g->why), "no RTU to %s: B gave up, REJ Timeout",
				 times(t.sent[SIDE_B][CEP_MSG_REP], "REP", n1, sizeof(n1)));
		else
			snprintf(g->why, sizeof(g->why), "REJ Timeout from %s%s", side_name(r->side), rs);
	} else if (!g->established && g->have_req) {
		g->verdict = V_NOT_ESTABLISHED;
		if (t.rep)
			snprintf(g->why, sizeof(g->why), "%s, no RTU in the capture",
				 times(t.sent[SIDE_B][CEP_MSG_REP], "REP", n1, sizeof(n1)));
		else if (t.mra)
			snprintf(g->why, sizeof(g->why), "%s MRAed by B (service timeout %u), no REP "
				 "in the capture%s", t.mra->code == 1 ? "REP" : "REQ",
				 t.mra->timeout, rs);
		else
			snprintf(g->why, sizeof(g->why), "no answer to %s in the capture",
				 times(t.sent[SIDE_A][CEP_MSG_REQ], "REQ", n1, sizeof(n1)));
	} else if ((r = t.rej_after)) {
		g->verdict = V_FAILED;
		snprintf(g->why, sizeof(g->why), "REJ %s (%u) from %s after the connection was made",
			 cep_rej_reason_name(r->status), r->status, side_name(r->side));
	} else if (t.dreq && !t.drep) {
		g->verdict = V_FAILED;
		snprintf(g->why, sizeof(g->why), "%s from %s, no DREP",
			 times(t.sent[t.dreq_side][CEP_MSG_DREQ], "DREQ", n1, sizeof(n1)),
			 side_name(t.dreq_side));
	} else if (t.apr && t.apr->status) {
		g->verdict = V_FAILED;
		snprintf(g->why, sizeof(g->why), "alternate path rejected: APR %s (%u)",
			 cep_apr_status_name(t.apr->status), t.apr->status);
	} else if (t.lap && !t.apr) {
		g->verdict = V_FAILED;
		snprintf(g->why, sizeof(g->why), "LAP from %s, no APR", side_name(t.lap_side));
	} else if (t.invalid) {
		g->verdict = V_INVALID;
		snprintf(g->why, sizeof(g->why), "%s %s = %" PRIu64 " is reserved (frame %u)",
			 cep_msg_name((enum cep_msg_type)t.invalid->type), t.invalid->invalid,
			 t.invalid->invalid_value, t.invalid->frame);
	} else {
		g->verdict = g->retries ? V_RETRIED : V_OK;
		if (!g->have_req)
			snprintf(g->why, sizeof(g->why), "began before the capture (no REQ)%s", rs);
		else if (g->established == 2)
			snprintf(g->why, sizeof(g->why), "established (RTU not in the capture)%s%s",
				 t.dreq ? ", disconnected" : "", rs);
		else {
			dur_str(g->t_rtu - g->t_first, d, sizeof(d));
			snprintf(g->why, sizeof(g->why), "established in %s%s%s", d,
				 t.dreq ? ", disconnected" : "", rs);
		}
	}
	/* a worse verdict hides the invalid field: say it too */
	if (t.invalid && g->verdict != V_INVALID) {
		size_t o = strlen(g->why);

		snprintf(g->why + o, sizeof(g->why) - o, "; %s %s = %" PRIu64 " is reserved",
			 cep_msg_name((enum cep_msg_type)t.invalid->type), t.invalid->invalid,
			 t.invalid->invalid_value);
	}
}

void conns_finish(struct conns *c)
{
	for (uint32_t i = 0; i < c->nmads; i++) {
		switch (c->mads[i].type) {
		case CEP_MSG_REQ:
			group_req(c, i);
			break;
		case CEP_MSG_SIDR_REQ:
		case CEP_MSG_SIDR_REP:
			group_sidr(c, i);
			break;
		default:
			group_other(c, i);
			break;
		}
	}
	for (uint32_t gi = 0; gi < c->ngroups; gi++)
		verdict(c, &c->groups[gi]);
}

void conns_free(struct conns *c)
{
	struct hmap *m;

	if ((m = c->addr_map))
		free(m->e);
	if ((m = c->end_map))
		free(m->e);
	free(c->addr_map);
	free(c->end_map);
	free(c->mads);
	free(c->addrs);
	free(c->groups);
	memset(c, 0, sizeof(*c));
}
