/* SPDX-License-Identifier: MIT */
/*
 * cepdump --summary and --flow (report.h): what conn.c found, problems
 * first. --summary: the problem list, counts per message type with retries
 * and duplicates, REJ reasons by name, REQ->RTU setup latency percentiles.
 * --flow: each connection as a ladder between its two ports, one line per
 * MAD, in the spirit of Wireshark's flow graph.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

#define LADDER 26     /* columns between the two rails */

static const char *label(const struct group *g)
{
	if (g->sidr && g->verdict == V_NOT_ESTABLISHED)
		return "UNANSWERED";
	return verdict_name((enum verdict)g->verdict);
}

static int is_problem(const struct group *g)
{
	return g->verdict != V_OK;
}

/* Groups in the order shown: worst verdict first, then by first MAD.
 * qsort has no context argument: the tool is single-threaded. */
static const struct conns *sort_c;

static int by_verdict(const void *x, const void *y)
{
	const struct group *a = &sort_c->groups[*(const uint32_t *)x];
	const struct group *b = &sort_c->groups[*(const uint32_t *)y];

	if (a->verdict != b->verdict)
		return a->verdict < b->verdict ? -1 : 1;
	if (a->t_first != b->t_first)
		return a->t_first < b->t_first ? -1 : 1;
	return a->first < b->first ? -1 : a->first > b->first;
}

static uint32_t *ordered(const struct conns *c)
{
	uint32_t *o = malloc((c->ngroups + 1) * sizeof(*o));

	if (!o) {
		fprintf(stderr, "cepdump: out of memory\n");
		exit(2);
	}
	for (uint32_t i = 0; i < c->ngroups; i++)
		o[i] = i;
	sort_c = c;
	qsort(o, c->ngroups, sizeof(*o), by_verdict);
	return o;
}

/* "lid 1 -> lid 2, service 0x..., from +0.002621 s (frame 6)" */
static void where_str(const struct conns *c, const struct group *g, uint64_t t0, char *buf,
		      size_t n)
{
	char a[64], b[64];

	addr_str(c, g->a.addr, a, sizeof(a));
	addr_str(c, g->b.addr, b, sizeof(b));
	snprintf(buf, n, "%s -> %s, service 0x%016" PRIx64 ", from +%.6f s (frame %u)", a, b,
		 g->sid, (double)(g->t_first - t0) / 1e9, c->mads[g->first - 1].frame);
}

static uint64_t capture_start(const struct conns *c)
{
	uint64_t t0 = c->nmads ? c->mads[0].ns : 0;

	for (uint32_t i = 0; i < c->nmads; i++)
		if (c->mads[i].ns < t0)
			t0 = c->mads[i].ns;
	return t0;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* Nearest-rank percentile of @n sorted values: the value at rank
 * ceil(p/100 * n). */
static uint64_t percentile(const uint64_t *v, size_t n, unsigned p)
{
	size_t rank = (p * n + 99) / 100;

	return v[rank ? rank - 1 : 0];
}

void report_summary(const struct conns *c, const struct dump_reader *r)
{
	unsigned long sent[CEP_MSG_COUNT] = { 0 }, retries[CEP_MSG_COUNT] = { 0 };
	unsigned long dups[CEP_MSG_COUNT] = { 0 }, invalid[CEP_MSG_COUNT] = { 0 };
	unsigned long reasons[CEP_REJ_REASON_MAX + 2] = { 0 };   /* last: undefined values */
	unsigned long by_verdict_n[2][V_COUNT] = { { 0 } }, nconn = 0, nsidr = 0, disc = 0;
	uint64_t t0 = capture_start(c), t1 = t0, *lat;
	size_t nlat = 0;
	uint32_t *o = ordered(c);
	char w[256], d[4][32];
	int problems = 0;

	lat = malloc((c->ngroups + 1) * sizeof(*lat));
	if (!lat) {
		fprintf(stderr, "cepdump: out of memory\n");
		exit(2);
	}
	for (uint32_t i = 0; i < c->nmads; i++) {
		const struct mad *m = &c->mads[i];

		if (m->ns > t1)
			t1 = m->ns;
		sent[m->type]++;
		retries[m->type] += m->mark == MARK_RETRY;
		dups[m->type] += m->mark == MARK_DUP;
		invalid[m->type] += m->invalid != NULL;
		if (m->type == CEP_MSG_REJ && m->mark == MARK_FIRST)
			reasons[m->status <= CEP_REJ_REASON_MAX ? m->status : CEP_REJ_REASON_MAX + 1]++;
		if (m->type == CEP_MSG_DREQ && m->mark == MARK_FIRST)
			disc++;
	}
	for (uint32_t i = 0; i < c->ngroups; i++) {
		const struct group *g = &c->groups[i];

		by_verdict_n[g->sidr][g->verdict]++;
		if (g->sidr) {
			nsidr++;
			continue;
		}
		nconn++;
		if (g->established == 1 && g->have_req && g->verdict != V_REJECTED &&
		    g->verdict != V_TIMED_OUT && g->verdict != V_ABORTED)
			lat[nlat++] = g->t_rtu - g->t_first;
	}

	dur_str(t1 - t0, d[0], sizeof(d[0]));
	printf("cepdump: %s: %u CM MADs in %s: %lu connection%s, %lu SIDR lookup%s",
	       r->name, c->nmads, d[0], nconn, nconn == 1 ? "" : "s", nsidr, nsidr == 1 ? "" : "s");
	if (r->bad)
		printf("; %lu MAD%s refused (bad header, see above)", r->bad, r->bad == 1 ? "" : "s");
	printf("\n\n");

	for (uint32_t k = 0; k < c->ngroups; k++)
		problems += is_problem(&c->groups[o[k]]);
	if (!problems) {
		printf("problems: none\n");
	} else {
		printf("problems, worst first (%d; cepdump --flow draws each):\n", problems);
		for (uint32_t k = 0; k < c->ngroups && is_problem(&c->groups[o[k]]); k++) {
			const struct group *g = &c->groups[o[k]];

			where_str(c, g, t0, w, sizeof(w));
			printf("  #%u %s%s: %s\n      %s\n", o[k] + 1, g->sidr ? "SIDR " : "", label(g),
			       g->why, w);
		}
	}

	printf("\nconnections: %lu", nconn);
	for (int v = 0; v < V_COUNT; v++)
		if (by_verdict_n[0][v])
			printf(", %lu %s", by_verdict_n[0][v], verdict_name((enum verdict)v));
	printf("; %lu disconnected (DREQ)\n", disc);
	if (nsidr) {
		printf("SIDR lookups: %lu", nsidr);
		for (int v = 0; v < V_COUNT; v++)
			if (by_verdict_n[1][v])
				printf(", %lu %s", by_verdict_n[1][v],
				       v == V_NOT_ESTABLISHED ? "UNANSWERED" : verdict_name((enum verdict)v));
		printf("\n");
	}

	printf("\nmessages      sent  retries  duplicates  invalid\n");
	for (int t = 1; t < CEP_MSG_COUNT; t++)
		if (sent[t])
			printf("  %-9s %6lu  %7lu  %10lu  %7lu\n", cep_msg_name((enum cep_msg_type)t),
			       sent[t], retries[t], dups[t], invalid[t]);

	printf("\nREJ reasons (retransmitted REJs not counted):\n");
	for (unsigned k = 0, any = 0; k <= CEP_REJ_REASON_MAX + 1; k++) {
		char nm[80];

		if (reasons[k]) {
			if (k <= CEP_REJ_REASON_MAX)
				snprintf(nm, sizeof(nm), "%s (%u)", cep_rej_reason_name(k), k);
			else
				snprintf(nm, sizeof(nm), "undefined reasons (> %u)", CEP_REJ_REASON_MAX);
			printf("  %-40s %lu\n", nm, reasons[k]);
			any = 1;
		}
		if (k == CEP_REJ_REASON_MAX + 1 && !any)
			printf("  none\n");
	}

	if (nlat) {
		qsort(lat, nlat, sizeof(*lat), cmp_u64);
		dur_str(percentile(lat, nlat, 50), d[0], sizeof(d[0]));
		dur_str(percentile(lat, nlat, 90), d[1], sizeof(d[1]));
		dur_str(percentile(lat, nlat, 99), d[2], sizeof(d[2]));
		dur_str(lat[nlat - 1], d[3], sizeof(d[3]));
		printf("\nsetup latency REQ -> RTU over %zu connection%s: p50 %s, p90 %s, p99 %s, "
		       "max %s\n", nlat, nlat == 1 ? "" : "s", d[0], d[1], d[2], d[3]);
	} else {
		printf("\nsetup latency REQ -> RTU: no connection with both in the capture\n");
	}
	free(lat);
	free(o);
}

/* ---- --flow ------------------------------------------------------------------------- */

/* One rung: "|------ REQ ------>|" or "|<----- REP -------|", LADDER wide. */
static void rung(char *buf, const char *what, int to_b)
{
	int len = (int)strlen(what) + 2, left, right, o = 0;

	if (len > LADDER - 4)
		len = LADDER - 4;
	left = (LADDER - 2 - len) / 2;
	right = LADDER - 2 - len - left;
	buf[o++] = '|';
	if (!to_b)
		buf[o++] = '<', left--;
	while (left-- > 0)
		buf[o++] = '-';
	o += snprintf(buf + o, (size_t)len + 1, " %s ", what);
	if (to_b)
		right--;
	while (right-- > 0)
		buf[o++] = '-';
	if (to_b)
		buf[o++] = '>';
	buf[o++] = '|';
	buf[o] = 0;
}

/* The fields that matter for @m, after the rung. */
static void details(const struct group *g, const struct mad *m, char *buf, size_t n)
{
	const struct end *from = m->side == SIDE_A ? &g->a : &g->b;
	const struct end *to = m->side == SIDE_A ? &g->b : &g->a;
	size_t o = 0;

	buf[0] = 0;
	if (m->mark != MARK_FIRST)
		return;      /* a copy: the same fields as the first */
#define ADD(...) do { if (o < n) o += (size_t)snprintf(buf + o, n - o, __VA_ARGS__); } while (0)
	switch (m->type) {
	case CEP_MSG_REQ:
		ADD("comm 0x%08x QPN 0x%06x PSN 0x%06x", m->local, m->qpn, m->psn);
		break;
	case CEP_MSG_REP:
		ADD("comm 0x%08x QPN 0x%06x PSN 0x%06x", m->local, m->qpn, m->psn);
		break;
	case CEP_MSG_REJ:
		ADD("%s (%u), %s", cep_rej_reason_name(m->status), m->status,
		    m->code == 0 ? "REQ rejected" : m->code == 1 ? "REP rejected" : "other rejected");
		if (m->status == CEP_REJ_TIMEOUT && m->guid)
			ADD(", timed out: CA 0x%016" PRIx64, m->guid);
		break;
	case CEP_MSG_MRA:
		ADD("%s MRAed, service timeout %u", m->code == 0 ? "REQ" : m->code == 1 ? "REP" :
		    "LAP", m->timeout);
		break;
	case CEP_MSG_DREQ:
	case CEP_MSG_LAP:
		ADD("QPN 0x%06x", m->qpn);
		break;
	case CEP_MSG_APR:
		ADD("%s (%u)", cep_apr_status_name(m->status), m->status);
		break;
	case CEP_MSG_SIDR_REQ:
		ADD("request 0x%08x service 0x%016" PRIx64, m->local, m->sid);
		break;
	case CEP_MSG_SIDR_REP:
		ADD("%s (%u)", cep_sidr_status_name(m->status), m->status);
		if (!m->status)
			ADD(", QPN 0x%06x Q_Key 0x%08x", m->qpn, m->qkey);
		break;
	default:
		break;
	}
	/* comm IDs that are not the connection's (e.g. remote 0) are shown */
	if (!g->sidr && m->type != CEP_MSG_REQ &&
	    (m->local != from->comm || m->remote != to->comm))
		ADD("%scomm 0x%08x -> 0x%08x", o ? "; " : "", m->local, m->remote);
	if (m->invalid)
		ADD("%s!%s=0x%" PRIx64 " (reserved)", o ? " " : "", m->invalid, m->invalid_value);
#undef ADD
}

/* "   A active   lid 1  CA 0x...  comm 0x...  QPN 0x..." */
static void end_line(const struct conns *c, const struct group *g, int side)
{
	const struct end *e = side == SIDE_A ? &g->a : &g->b;
	uint64_t guid = e->guid;
	char a[64];

	addr_str(c, e->addr, a, sizeof(a));
	if (!guid && e->addr < c->naddrs && c->addrs[e->addr].have_guid)
		guid = c->addrs[e->addr].guid;
	static const char *const role[2][2] = { { "active", "passive" },
						{ "requester", "responder" } };

	printf("   %s %-9s %s", side == SIDE_A ? "A" : "B", g->have_req ? role[g->sidr][side] : "",
	       a);
	if (guid)
		printf("  CA 0x%016" PRIx64, guid);
	if (e->comm)
		printf(g->sidr ? "  request 0x%08x" : "  comm 0x%08x", e->comm);
	if (e->qpn)
		printf("  QPN 0x%06x", e->qpn);
	printf("\n");
}

void report_flow(const struct conns *c, const struct dump_reader *r)
{
	uint32_t *o = ordered(c);
	uint64_t t0 = capture_start(c);
	uint32_t nsidr = 0;
	int problems = 0, shown_ok = 0;

	for (uint32_t k = 0; k < c->ngroups; k++)
		problems += is_problem(&c->groups[o[k]]);
	for (uint32_t k = 0; k < c->ngroups; k++)
		nsidr += c->groups[k].sidr;
	printf("cepdump: %s: %u connection%s, %u SIDR lookup%s; %d with problems, shown first\n",
	       r->name, c->ngroups - nsidr, c->ngroups - nsidr == 1 ? "" : "s", nsidr,
	       nsidr == 1 ? "" : "s", problems);
	for (uint32_t k = 0; k < c->ngroups; k++) {
		const struct group *g = &c->groups[o[k]];
		char rg[LADDER + 8], det[200], what[40];

		if (!is_problem(g) && !shown_ok++)
			printf("\n---- no problem seen ----\n");
		printf("\n#%u %s%s: %s\n", o[k] + 1, g->sidr ? "SIDR " : "", label(g), g->why);
		end_line(c, g, SIDE_A);
		end_line(c, g, SIDE_B);
		printf("   service 0x%016" PRIx64 ", from +%.6f s (frame %u)\n", g->sid,
		       (double)(g->t_first - t0) / 1e9, c->mads[g->first - 1].frame);
		printf("   %10s  %-*s%s\n", "time", LADDER - 1, "A", "B");
		for (uint32_t j = g->first; j; j = c->mads[j - 1].next) {
			const struct mad *m = &c->mads[j - 1];

			if (m->mark == MARK_RETRY)
				snprintf(what, sizeof(what), "%s retry %u",
					 cep_msg_name((enum cep_msg_type)m->type), m->copy);
			else if (m->mark == MARK_DUP)
				snprintf(what, sizeof(what), "%s dup",
					 cep_msg_name((enum cep_msg_type)m->type));
			else
				snprintf(what, sizeof(what), "%s", cep_msg_name((enum cep_msg_type)m->type));
			rung(rg, what, m->side == SIDE_A);
			details(g, m, det, sizeof(det));
			printf("   %10.6f  %s%s%s\n", (double)(m->ns - g->t_first) / 1e9, rg,
			       det[0] ? "  " : "", det);
		}
	}
	free(o);
}
