/* SPDX-License-Identifier: MIT */
/*
 * Conformance suite: the scripted raw-MAD peer (guest a, no ib_cm). It plays
 * the other end of every scenario of the catalogue with MADs built by hand
 * (cep/wire.h codec, libcep's umad transport as a raw QP1 port), drives the
 * application under test in guest b over the control channel (ctl.h), and
 * writes a transcript: per scenario, each action and what came back - the
 * MADs the CM under test sent (type and key fields, IDs and TIDs as labels)
 * and the application's events. The same script runs against the kernel CM
 * and against libcep; compare.py turns the two transcripts into verdicts.
 *
 *   conform-peer DEV SELF_IP TARGET_IP TRANSCRIPT [ALT_IP]
 *
 * ALT_IP: a second IPv4 address of this guest's port, the source of the
 * messages of scenario passive-dreq-other-address.
 *
 * Exit 0 when the catalogue ran (whatever the CM answered), 1 when the
 * harness itself failed (no control channel, no transport).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <cep/rdma_cm.h>
#include <cep/transport.h>
#include <cep/umad.h>
#include <cep/wire.h>

#include "ctl.h"

#define LISTEN_PORT 7471  /* the application listens here */
#define NOBODY_PORT 7472  /* nobody listens here */
#define PEER_PORT   7500  /* the application connects here (we answer) */
#define WIN         100   /* ms: answers collected before the barrier */
#define PEER_PDATA  "peer"

static const char *cm_name = "?";
static struct cep_transport *tp;
static struct cep_port_info port;
static uint8_t self_gid[16], target_gid[16];
static uint32_t self_ip, target_ip;
static uint64_t self_guid, target_guid;
static struct ctl ctl;
static FILE *tr;
static int alt_gid_index = -1; /* a second address of our port (ALT_IP) */

/* ---- received MADs: transport thread -> main thread ------------------- */

struct rx {
	uint8_t mad[CEP_MAD_SIZE];
	size_t len;
	struct cep_mad_addr from;
};

#define RXQ 256
static struct rx rxq[RXQ];
static unsigned rx_head, rx_tail, rx_lost;
static pthread_mutex_t rx_lock = PTHREAD_MUTEX_INITIALIZER;

/* Transport receive thread; rx_lock orders the copy before the consumer. */
static void on_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	(void)ctx;
	pthread_mutex_lock(&rx_lock);
	if (rx_tail - rx_head == RXQ) {
		rx_lost++;
	} else {
		struct rx *r = &rxq[rx_tail++ % RXQ];

		r->len = len > CEP_MAD_SIZE ? CEP_MAD_SIZE : len;
		memcpy(r->mad, mad, r->len);
		r->from = *from;
	}
	pthread_mutex_unlock(&rx_lock);
}

static int rx_pop(struct rx *out)
{
	int got = 0;

	pthread_mutex_lock(&rx_lock);
	if (rx_head != rx_tail) {
		*out = rxq[rx_head++ % RXQ];
		got = 1;
	}
	pthread_mutex_unlock(&rx_lock);
	return got;
}

/* ---- labels: values that differ from run to run become names ---------- */

struct lab {
	uint32_t v;
	char name[24];
};

#define NLAB 64
static struct lab pids[NLAB], tids[NLAB], cids[NLAB], qpns[NLAB];
static int npids, ntids, ncids, nqpns;
static int n_sent[CEP_MSG_COUNT];  /* ours, by type: p:REQ1, p:REQ2... */

static const char *lab_find(const struct lab *l, int n, uint32_t v)
{
	for (int i = 0; i < n; i++)
		if (l[i].v == v)
			return l[i].name;
	return NULL;
}

static const char *lab_add(struct lab *l, int *n, uint32_t v, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static const char *lab_add(struct lab *l, int *n, uint32_t v, const char *fmt, ...)
{
	va_list ap;

	if (*n == NLAB)
		return "?";
	l[*n].v = v;
	va_start(ap, fmt);
	vsnprintf(l[*n].name, sizeof(l[*n].name), fmt, ap);
	va_end(ap);
	return l[(*n)++].name;
}

/* Target comm IDs: T1, T2... in order of appearance; 0 stays "0". */
static const char *tcid(uint32_t v)
{
	const char *s;

	if (v == 0)
		return "0";
	s = lab_find(cids, ncids, v);
	return s ? s : lab_add(cids, &ncids, v, "T%d", ncids + 1);
}

/* A comm ID the target names as ours: P-label, 0, or "?" (not ours). */
static const char *pcid(uint32_t v)
{
	const char *s;

	if (v == 0)
		return "0";
	s = lab_find(pids, npids, v);
	return s ? s : "?";
}

static struct hinfo *hget(int h);
static int hqpn_known(uint32_t v);

/* Our QPNs by label (Q1, QD), the application's as "app". */
static const char *qlab(uint32_t v)
{
	const char *s = lab_find(qpns, nqpns, v);

	return s ? s : hqpn_known(v) ? "app" : "?";
}

static const char *guid_lab(uint64_t g)
{
	return g == target_guid ? "target" : g == self_guid ? "peer" : g ? "other" : "0";
}

/* ---- the application's handles ---------------------------------------- */

struct hinfo {
	int h;
	uint32_t qpn, psn;
};

static struct hinfo hs[NLAB];
static int nhs;

static int hqpn_known(uint32_t v)
{
	for (int i = 0; i < nhs; i++)
		if (v && hs[i].qpn == v)
			return 1;
	return 0;
}

static struct hinfo *hget(int h)
{
	for (int i = 0; i < nhs; i++)
		if (hs[i].h == h)
			return &hs[i];
	if (nhs == NLAB)
		return &hs[0];
	hs[nhs].h = h;
	return &hs[nhs++];
}

/* Handles as the transcript names them: C1, C2... in order of mention in
 * the current scenario, so that one extra connection in an earlier
 * scenario does not rename the ones after it. */
static int shs[NLAB], nshs;

static const char *hdisp(int h)
{
	static char buf[8][16];
	static unsigned k;
	int i;

	for (i = 0; i < nshs && shs[i] != h; i++)
		;
	if (i == nshs && nshs < NLAB)
		shs[nshs++] = h;
	k = (k + 1) % 8;
	snprintf(buf[k], sizeof(buf[k]), "C%d", i + 1);
	return buf[k];
}

/* ---- transcript: scenarios, steps, results ---------------------------- */

#define NLINES 48
static struct {
	char action[CTL_LINE];
	char answer[CTL_LINE];
	char rx[NLINES][CTL_LINE];
	char ev[NLINES][CTL_LINE];
	int nrx, nev;
	int open;
} st;

/* What the current scenario saw, for the script's decisions. */
struct evrec {
	int h;
	char name[32];
	char extra[256];
	double t;
};

static struct evrec evs[256];
static int nevs;
static struct cep_msg last[CEP_MSG_COUNT];
static double last_t[CEP_MSG_COUNT];
static unsigned nrx_type[CEP_MSG_COUNT];
static int recording = 1;
/* Every field of REQ and REP (the scenarios about them), else their IDs. */
static int full_fields;

static void tr_line(const char *s)
{
	printf("    %s\n", s);
	if (tr)
		fprintf(tr, "%s\n", s);
}

static void step_flush(void)
{
	if (!st.open)
		return;
	tr_line(st.action);
	if (st.answer[0])
		tr_line(st.answer);
	for (int i = 0; i < st.nrx; i++)
		tr_line(st.rx[i]);
	for (int i = 0; i < st.nev; i++)
		tr_line(st.ev[i]);
	memset(&st, 0, sizeof(st));
	if (tr)
		fflush(tr);
}

/* Start a step: the action the peer takes now. */
static void act(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void act(const char *fmt, ...)
{
	va_list ap;

	step_flush();
	st.open = 1;
	st.action[0] = '>';
	st.action[1] = ' ';
	va_start(ap, fmt);
	vsnprintf(st.action + 2, sizeof(st.action) - 2, fmt, ap);
	va_end(ap);
}

/* A measured value, compared like an answer: "~ key=value". */
static void measure(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void measure(const char *fmt, ...)
{
	va_list ap;

	if (!st.open)
		act("measure");
	if (st.nrx == NLINES)
		return;
	st.rx[st.nrx][0] = '~';
	st.rx[st.nrx][1] = ' ';
	va_start(ap, fmt);
	vsnprintf(st.rx[st.nrx] + 2, CTL_LINE - 2, fmt, ap);
	va_end(ap);
	st.nrx++;
}

/* A group of scenarios shares its connections: labels (P1, T1, C1...)
 * hold from here to the next group. */
static void group(void)
{
	step_flush();
	npids = ntids = ncids = nqpns = nhs = nshs = nevs = 0;
	memset(last, 0, sizeof(last));
	memset(nrx_type, 0, sizeof(nrx_type));
	memset(n_sent, 0, sizeof(n_sent));
}

/* One scenario of the catalogue: its own section of the transcript. */
static void scenario(const char *name)
{
	step_flush();
	nshs = ncids = 0;
	printf("== %s (%s)\n", name, cm_name);
	if (tr)
		fprintf(tr, "== %s\n", name);
}

/* ---- received MADs as transcript lines -------------------------------- */

/* The TID of a received MAD: the echo of one of ours ("p:DREQ1": its low
 * 32 bits, the upper half is the kernel MAD layer's), else "own". Which
 * TID a CM gives its own requests is its business (the kernel's are the
 * local comm ID, libcep's come from one counter per CM: docs/protocol.md). */
static const char *tid_lab(const struct cep_msg *m)
{
	const char *s = lab_find(tids, ntids, (uint32_t)m->hdr.tid);

	return s ? s : "own";
}

static const char *pdata_lab(const uint8_t *p, size_t n)
{
	static const uint8_t zero[8];

	if (n >= sizeof("conform-app") && !memcmp(p, "conform-app", sizeof("conform-app")))
		return "app";
	return memcmp(p, zero, sizeof(zero)) ? "other" : "none";
}

static void ari_lab(const struct cep_rej *r, char *buf, size_t n)
{
	uint64_t g = 0;

	if (r->reject_info_length == 0) {
		snprintf(buf, n, "none");
		return;
	}
	for (int i = 0; i < 8; i++)
		g = g << 8 | r->ari[i];
	if (r->reject_info_length == 8 && (g == target_guid || g == self_guid))
		snprintf(buf, n, "%s", guid_lab(g));
	else
		snprintf(buf, n, "len%u:%02x%02x%02x%02x", r->reject_info_length,
			 r->ari[0], r->ari[1], r->ari[2], r->ari[3]);
}

static void psn_lab(uint32_t qpn, uint32_t psn, char *buf, size_t n)
{
	for (int i = 0; i < nhs; i++)
		if (hs[i].qpn == qpn) {
			snprintf(buf, n, "%s", hs[i].psn == psn ? "app" : "other");
			return;
		}
	snprintf(buf, n, "?");
}

static void format_rx(const struct cep_msg *m, char *s, size_t n)
{
	char a[64], b[64];

	switch (m->type) {
	case CEP_MSG_REQ: {
		const struct cep_req *q = &m->u.req;
		struct cep_cma_hdr h;
		enum cep_rdma_ps ps;
		uint16_t sport = 0;
		const char *cma = "bad";

		if (cep_rdma_service_id_parse(q->service_id, &ps, &sport) || ps != CEP_RDMA_PS_TCP)
			sport = 0;
		if (cep_cma_hdr_decode(q->private_data, sizeof(q->private_data), q->service_id,
				       &h) == 0 && h.ip_version == 4 &&
		    cep_cma_addr_ipv4(h.src_addr) == target_ip &&
		    cep_cma_addr_ipv4(h.dst_addr) == self_ip)
			cma = "ok";
		if (!full_fields) {
			snprintf(s, n, "rx REQ local=%s tid=%s sid=tcp:%u qpn=%s",
				 tcid(q->local_comm_id), tid_lab(m), sport, qlab(q->local_qpn));
			break;
		}
		snprintf(s, n, "rx REQ local=%s tid=%s sid=tcp:%u ca=%s qpn=%s ts=%u e2e=%u rr=%u "
			 "id=%u rcto=%u lcto=%u retries=%u retry=%u rnr=%u srq=%u mtu=%u "
			 "ack_timeout=%u cma=%s", tcid(q->local_comm_id), tid_lab(m), sport,
			 guid_lab(q->local_ca_guid), qlab(q->local_qpn), q->transport_service_type,
			 q->end_to_end_flow_control, q->responder_resources, q->initiator_depth,
			 q->remote_cm_response_timeout, q->local_cm_response_timeout,
			 q->max_cm_retries, q->retry_count, q->rnr_retry_count, q->srq, q->path_mtu,
			 q->primary.local_ack_timeout, cma);
		inet_ntop(AF_INET6, q->primary.local_gid, a, sizeof(a));
		inet_ntop(AF_INET6, q->primary.remote_gid, b, sizeof(b));
		printf("      (REQ path: lids %u/%u gids %s -> %s flow %u rate %u tclass %u hop %u "
		       "sl %u subnet_local %u pkey 0x%x psn %u)\n", q->primary.local_lid,
		       q->primary.remote_lid, a, b, q->primary.flow_label, q->primary.packet_rate,
		       q->primary.traffic_class, q->primary.hop_limit, q->primary.sl,
		       q->primary.subnet_local, q->partition_key, q->starting_psn);
		break;
	}
	case CEP_MSG_REP: {
		const struct cep_rep *r = &m->u.rep;

		psn_lab(r->local_qpn, r->starting_psn, a, sizeof(a));
		if (!full_fields) {
			snprintf(s, n, "rx REP local=%s remote=%s tid=%s qpn=%s",
				 tcid(r->local_comm_id), pcid(r->remote_comm_id), tid_lab(m),
				 qlab(r->local_qpn));
			break;
		}
		snprintf(s, n, "rx REP local=%s remote=%s tid=%s qpn=%s psn=%s ca=%s rr=%u id=%u "
			 "ack_delay=%u failover=%u e2e=%u rnr=%u srq=%u pdata=%s",
			 tcid(r->local_comm_id), pcid(r->remote_comm_id), tid_lab(m),
			 qlab(r->local_qpn), a, guid_lab(r->local_ca_guid), r->responder_resources,
			 r->initiator_depth, r->target_ack_delay, r->failover_accepted,
			 r->end_to_end_flow_control, r->rnr_retry_count, r->srq,
			 pdata_lab(r->private_data, sizeof(r->private_data)));
		break;
	}
	case CEP_MSG_RTU:
		snprintf(s, n, "rx RTU local=%s remote=%s tid=%s", tcid(m->u.rtu.local_comm_id),
			 pcid(m->u.rtu.remote_comm_id), tid_lab(m));
		break;
	case CEP_MSG_MRA:
		snprintf(s, n, "rx MRA local=%s remote=%s tid=%s msg=%u timeout=%u",
			 tcid(m->u.mra.local_comm_id), pcid(m->u.mra.remote_comm_id), tid_lab(m),
			 m->u.mra.message_mraed, m->u.mra.service_timeout);
		break;
	case CEP_MSG_REJ: {
		const struct cep_rej *r = &m->u.rej;

		ari_lab(r, a, sizeof(a));
		snprintf(s, n, "rx REJ local=%s remote=%s tid=%s msg=%u reason=%u ari=%s pdata=%s",
			 tcid(r->local_comm_id), pcid(r->remote_comm_id), tid_lab(m),
			 r->message_rejected, r->reason, a,
			 pdata_lab(r->private_data, sizeof(r->private_data)));
		break;
	}
	case CEP_MSG_DREQ:
		snprintf(s, n, "rx DREQ local=%s remote=%s tid=%s qpn=%s",
			 tcid(m->u.dreq.local_comm_id), pcid(m->u.dreq.remote_comm_id), tid_lab(m),
			 qlab(m->u.dreq.remote_qpn_eecn));
		break;
	case CEP_MSG_DREP:
		snprintf(s, n, "rx DREP local=%s remote=%s tid=%s", tcid(m->u.drep.local_comm_id),
			 pcid(m->u.drep.remote_comm_id), tid_lab(m));
		break;
	case CEP_MSG_SIDR_REP:
		snprintf(s, n, "rx SIDR_REP tid=%s status=%u", tid_lab(m), m->u.sidr_rep.status);
		break;
	default:
		snprintf(s, n, "rx %s tid=%s", cep_msg_name(m->type), tid_lab(m));
		break;
	}
}

/* The comm ID a received message addresses to us (0: none / not yet). */
static uint32_t addressed_to(const struct cep_msg *m)
{
	switch (m->type) {
	case CEP_MSG_REP: return m->u.rep.remote_comm_id;
	case CEP_MSG_RTU: return m->u.rtu.remote_comm_id;
	case CEP_MSG_MRA: return m->u.mra.remote_comm_id;
	case CEP_MSG_REJ: return m->u.rej.remote_comm_id;
	case CEP_MSG_DREQ: return m->u.dreq.remote_comm_id;
	case CEP_MSG_DREP: return m->u.drep.remote_comm_id;
	case CEP_MSG_LAP: return m->u.lap.remote_comm_id;
	case CEP_MSG_APR: return m->u.apr.remote_comm_id;
	default: return 0;
	}
}

/* The comm ID of the pending barrier probe, and whether its DREP came. */
static uint32_t probe_id;
static int probe_done;

static void take_mad(const struct rx *r)
{
	struct cep_msg m;
	enum cep_wire_error why;
	uint32_t to;

	if (cep_msg_decode(r->mad, r->len, &m, &why)) {
		if (recording && st.nrx < NLINES)
			snprintf(st.rx[st.nrx++], CTL_LINE, "rx undecodable %s",
				 cep_wire_error_str(why));
		return;
	}
	to = addressed_to(&m);
	if (m.type == CEP_MSG_DREP && to == probe_id) {
		probe_done = 1; /* barrier(): not part of any scenario */
		return;
	}
	if (!recording || (to && !lab_find(pids, npids, to))) {
		/* An earlier scenario's straggler, or the clean-up: never in
		 * the transcript, but a DREQ is answered so the target can
		 * finish. */
		if (m.type == CEP_MSG_DREQ) {
			struct cep_msg d;
			uint8_t mad[CEP_MAD_SIZE];

			cep_msg_init(&d, CEP_MSG_DREP, m.hdr.tid);
			d.u.drep.local_comm_id = m.u.dreq.remote_comm_id;
			d.u.drep.remote_comm_id = m.u.dreq.local_comm_id;
			if (cep_msg_encode(&d, mad) == 0)
				(void)tp->ops->send(tp, mad, sizeof(mad), &r->from);
		}
		printf("      (not recorded: %s to %08x)\n", cep_msg_name(m.type), to);
		return;
	}
	last[m.type] = m;
	last_t[m.type] = ctl_now_ms();
	nrx_type[m.type]++;
	if (st.nrx < NLINES) {
		if (!st.open)
			act("(unsolicited)");
		format_rx(&m, st.rx[st.nrx++], CTL_LINE);
	}
}

/* "ev H name extra" from the application. */
static void take_event(char *line)
{
	char *save = NULL, *h, *name, *extra;
	struct evrec *e;

	strtok_r(line, " ", &save);
	h = strtok_r(NULL, " ", &save);
	name = strtok_r(NULL, " ", &save);
	extra = strtok_r(NULL, "", &save);
	if (!h || !name || nevs == (int)(sizeof(evs) / sizeof(evs[0])))
		return;
	e = &evs[nevs++];
	e->h = atoi(h);
	snprintf(e->name, sizeof(e->name), "%s", name);
	snprintf(e->extra, sizeof(e->extra), "%s", extra ? extra : "");
	e->t = ctl_now_ms();
	/* TIMEWAIT_EXIT comes when the CM's timer says: timewait_step()
	 * records it, so the timer's length cannot move it between steps. */
	if (!strcmp(e->name, "timewait_exit"))
		return;
	if (recording && st.nev < NLINES) {
		if (!st.open)
			act("(unsolicited)");
		snprintf(st.ev[st.nev++], CTL_LINE, "ev %s %s%s%s", hdisp(e->h), e->name,
			 e->extra[0] ? " " : "", e->extra);
	}
}

static void settle(int ms);

/* Take in everything that arrives for @ms. */
static void collect(int ms)
{
	double end = ctl_now_ms() + ms;
	char line[CTL_LINE];
	struct rx r;

	do {
		while (rx_pop(&r))
			take_mad(&r);
		while (ctl_read(&ctl, line, sizeof(line), 0) == 1)
			if (!strncmp(line, "ev ", 3))
				take_event(line);
		if (ctl_now_ms() >= end)
			break;
		if (ctl_read(&ctl, line, sizeof(line), 2) == 1 && !strncmp(line, "ev ", 3))
			take_event(line);
	} while (ctl_now_ms() < end);
}

/* Index of the first event @name (of handle @h, or any when 0) at or after
 * @from, waiting up to @ms; then a settle window so that what follows it
 * is recorded too. -1 when none came. */
static int wait_ev(const char *name, int h, int from, int ms)
{
	double end = ctl_now_ms() + ms;

	for (;;) {
		for (int i = from; i < nevs; i++)
			if (!strcmp(evs[i].name, name) && (!h || evs[i].h == h)) {
				settle(20);
				return i;
			}
		if (ctl_now_ms() >= end)
			return -1;
		collect(5);
	}
}

/* Wait until one more message of @type than @before came, then take in
 * what follows for @settle_ms ms and wait for the barrier (0: return at
 * once, for steps that race a timer). */
static int wait_rx(enum cep_msg_type type, unsigned before, int ms, int settle_ms)
{
	double end = ctl_now_ms() + ms;
	char line[CTL_LINE];
	struct rx r;

	/* One MAD at a time: a retry right behind it belongs to the next
	 * step, however late this one was taken in. */
	while (nrx_type[type] <= before && ctl_now_ms() < end) {
		if (rx_pop(&r)) {
			take_mad(&r);
			continue;
		}
		if (ctl_read(&ctl, line, sizeof(line), 1) == 1 && !strncmp(line, "ev ", 3))
			take_event(line);
	}
	if (nrx_type[type] <= before)
		return -1;
	if (settle_ms)
		settle(settle_ms);
	return 0;
}

/* ---- commands to the application -------------------------------------- */

static int ans_h;                 /* from the last answer: h=, qpn=, psn= */
static uint32_t ans_qpn, ans_psn;

/* Send command @line and wait for its answer (into @line); events that
 * come first are taken in. */
static void exchange(char *line, size_t n)
{
	double end = ctl_now_ms() + 15000;
	int r;

	if (ctl_send(&ctl, "%s", line)) {
		printf("control channel lost\n");
		exit(1);
	}
	/* MADs wait in the queue until the answer is in: a REQ sent before
	 * "connect" answers must find its QPN label. */
	for (;;) {
		r = ctl_read(&ctl, line, n, 5);
		if (r < 0) {
			printf("control channel lost\n");
			exit(1);
		}
		if (r == 0) {
			if (ctl_now_ms() > end) {
				snprintf(line, n, "err timeout");
				return;
			}
			continue;
		}
		if (strncmp(line, "ev ", 3))
			return;
		take_event(line);
	}
}

/* Send a command and wait for its answer; the normalised answer goes into
 * the step. Returns 0 for "ok", -1 otherwise; @out gets the raw answer. */
static int cmd(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cmd(char *out, size_t n, const char *fmt, ...)
{
	char line[CTL_LINE], norm[CTL_LINE] = "=";
	va_list ap;
	int ok;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	exchange(line, sizeof(line));
	if (out)
		snprintf(out, n, "%s", line);
	ok = !strncmp(line, "ok", 2);
	/* Normalise: handles to labels; QPN and PSN kept for the caller
	 * (ans_qpn, ans_psn), not printed. */
	{
		char copy[CTL_LINE], *save = NULL, *tok;

		ans_h = 0;
		ans_qpn = ans_psn = 0;
		snprintf(copy, sizeof(copy), "%s", line);
		for (tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
			if (!strncmp(tok, "h=", 2)) {
				ans_h = atoi(tok + 2);
				strncat(norm, " h=", sizeof(norm) - strlen(norm) - 1);
				strncat(norm, hdisp(ans_h), sizeof(norm) - strlen(norm) - 1);
			} else if (!strncmp(tok, "qpn=", 4)) {
				ans_qpn = (uint32_t)strtoul(tok + 4, NULL, 10);
			} else if (!strncmp(tok, "psn=", 4)) {
				ans_psn = (uint32_t)strtoul(tok + 4, NULL, 10);
			} else if (!strncmp(tok, "cm=", 3) || !strncmp(tok, "guid=", 5)) {
				continue;
			} else {
				strncat(norm, " ", sizeof(norm) - strlen(norm) - 1);
				strncat(norm, tok, sizeof(norm) - strlen(norm) - 1);
			}
		}
		if (ans_h && ans_qpn)
			hget(ans_h)->qpn = ans_qpn;
	}
	if (recording)
		snprintf(st.answer, sizeof(st.answer), "%s", norm);
	return ok ? 0 : -1;
}

static struct cep_mad_addr target_addr(int gid_index);

/* Make "no answer" a fact, not a guess: everything the CM and the
 * application had to say about what came before is in. A DREQ for a comm
 * ID nobody has is answered at once by both CMs (cm_issue_drep; libcep's
 * unknown-comm-ID path) on the one worker that also handled the earlier
 * MADs, so its DREP follows their answers; then "sync" makes the
 * application read its CM's events before it answers. Bounded by 5 s. */
static void barrier(void)
{
	static uint32_t n;
	struct cep_mad_addr to = target_addr(port.gid_index);
	uint8_t mad[CEP_MAD_SIZE];
	char line[CTL_LINE];
	struct cep_msg m;
	double end = ctl_now_ms() + 5000;

	n++;
	probe_id = 0x0b00000u | n;
	probe_done = 0;
	cep_msg_init(&m, CEP_MSG_DREQ, 0x7e000000u | n);
	m.u.dreq.local_comm_id = probe_id;
	m.u.dreq.remote_comm_id = 0x7e5e0000u | n;
	m.u.dreq.remote_qpn_eecn = 0x7e;
	if (cep_msg_encode(&m, mad) == 0 && tp->ops->send(tp, mad, sizeof(mad), &to) == 0)
		while (!probe_done && ctl_now_ms() < end)
			collect(1);
	if (!probe_done)
		printf("      (barrier: no DREP for the probe)\n");
	snprintf(line, sizeof(line), "sync");
	exchange(line, sizeof(line));
	collect(0);
}

/* Take in what comes for @ms, then wait for the barrier. */
static void settle(int ms)
{
	collect(ms);
	barrier();
}

/* Ask the application to act on connection @h ("accept C1"...). */
static int app(const char *verb, int h)
{
	int ret;

	act("%s %s", verb, hdisp(h));
	ret = cmd(NULL, 0, "%s %d", verb, h);
	if (ans_qpn) {
		hget(h)->qpn = ans_qpn;
		hget(h)->psn = ans_psn;
	}
	return ret;
}

/* ---- sending MADs ------------------------------------------------------ */

static uint32_t tid_next = 0x5000;

static struct cep_mad_addr target_addr(int gid_index)
{
	struct cep_mad_addr to;

	memset(&to, 0, sizeof(to));
	to.qpn = 1;
	to.qkey = CEP_QP1_QKEY;
	to.grh_present = 1;
	to.hop_limit = 64;
	to.gid_index = (uint8_t)gid_index;
	memcpy(to.gid, target_gid, 16);
	return to;
}

/* Send @m with its own TID (0: a new one, labelled p:TYPEn). umad refuses
 * a TID still in its send list (EINVAL): retry briefly. */
static void xmit_from(struct cep_msg *m, int gid_index)
{
	struct cep_mad_addr to = target_addr(gid_index);
	uint8_t mad[CEP_MAD_SIZE];
	int ret = -EINVAL;

	if (!m->hdr.tid) {
		m->hdr.tid = tid_next++;
		lab_add(tids, &ntids, (uint32_t)m->hdr.tid, "p:%s%d", cep_msg_name(m->type),
			++n_sent[m->type]);
	}
	if (cep_msg_encode(m, mad)) {
		printf("FAIL: cannot encode %s\n", cep_msg_name(m->type));
		exit(1);
	}
	for (int i = 0; i < 50 && ret == -EINVAL; i++) {
		ret = tp->ops->send(tp, mad, sizeof(mad), &to);
		if (ret == -EINVAL)
			usleep(2000);
	}
	if (ret)
		printf("      (send %s: %s)\n", cep_msg_name(m->type), strerror(-ret));
}

static void xmit(struct cep_msg *m)
{
	xmit_from(m, port.gid_index);
}

static uint32_t pid_next = 0x1000;
static uint32_t qpn_next = 0xa00000;

/* A new comm ID of ours, labelled P<n>. */
static uint32_t new_pid(void)
{
	uint32_t v = pid_next++ | (uint32_t)random() << 16;

	lab_add(pids, &npids, v, "P%d", npids + 1);
	return v;
}

/* A made-up QPN of ours (no QP behind it), labelled Q<n>. */
static uint32_t new_qpn(void)
{
	uint32_t v = qpn_next++;

	lab_add(qpns, &nqpns, v, "Q%d", nqpns + 1);
	return v;
}

struct reqopt {
	uint16_t port;
	uint8_t lcto;        /* local CM response timeout: the target's REP retry */
	uint8_t rcto;        /* remote CM response timeout */
	uint8_t retries;     /* max CM retries */
	uint8_t ack_timeout; /* primary local ACK timeout: the kernel's timewait */
	uint8_t class_version;
	uint32_t psn;
	uint16_t pkey;
};

/* The REQ's timers: the target's REP is retried after ~4 s (local CM
 * response timeout 20), far beyond a step even on a loaded machine; the
 * scenarios about retries set their own. */
static const struct reqopt REQ_DEFAULT = {
	.port = LISTEN_PORT, .lcto = 20, .rcto = 18, .retries = 3, .ack_timeout = 18,
	.class_version = CEP_CM_CLASS_VERSION, .psn = 0x1234, .pkey = CEP_DEFAULT_PKEY,
};

static void build_req(struct cep_msg *m, uint32_t comm, uint32_t qpn, const struct reqopt *o)
{
	struct cep_req *q = &m->u.req;
	struct cep_cma_hdr h;

	cep_msg_init(m, CEP_MSG_REQ, 0); /* xmit() gives it a TID */
	m->hdr.class_version = o->class_version;
	q->local_comm_id = comm;
	q->service_id = cep_rdma_service_id(CEP_RDMA_PS_TCP, o->port);
	q->local_ca_guid = self_guid;
	q->local_qpn = qpn;
	q->responder_resources = 1;
	q->initiator_depth = 1;
	q->remote_cm_response_timeout = o->rcto;
	q->transport_service_type = CEP_TS_RC;
	q->end_to_end_flow_control = 1;
	q->starting_psn = o->psn;
	q->local_cm_response_timeout = o->lcto;
	q->retry_count = 7;
	q->partition_key = o->pkey;
	q->path_mtu = 3;
	q->rnr_retry_count = 7;
	q->max_cm_retries = o->retries;
	memcpy(q->primary.local_gid, self_gid, 16);
	memcpy(q->primary.remote_gid, target_gid, 16);
	q->primary.hop_limit = 64;
	q->primary.local_ack_timeout = o->ack_timeout;
	cep_cma_hdr_ipv4(&h, self_ip, (uint16_t)(30000 + (comm & 0x7fff)), target_ip, o->port);
	if (cep_cma_hdr_encode(&h, PEER_PDATA, sizeof(PEER_PDATA), q->private_data,
			       sizeof(q->private_data)) < 0)
		printf("FAIL: CMA header\n");
}

static void build_rtu(struct cep_msg *m, uint32_t local, uint32_t remote, uint64_t tid)
{
	cep_msg_init(m, CEP_MSG_RTU, tid);
	m->u.rtu.local_comm_id = local;
	m->u.rtu.remote_comm_id = remote;
}

static void build_dreq(struct cep_msg *m, uint32_t local, uint32_t remote, uint32_t qpn)
{
	cep_msg_init(m, CEP_MSG_DREQ, 0); /* xmit() gives it a TID */
	m->u.dreq.local_comm_id = local;
	m->u.dreq.remote_comm_id = remote;
	m->u.dreq.remote_qpn_eecn = qpn;
}

static void build_drep(struct cep_msg *m, uint32_t local, uint32_t remote, uint64_t tid)
{
	cep_msg_init(m, CEP_MSG_DREP, tid);
	m->u.drep.local_comm_id = local;
	m->u.drep.remote_comm_id = remote;
}

static void build_rej(struct cep_msg *m, uint32_t local, uint32_t remote, unsigned reason,
		      unsigned code, uint64_t tid)
{
	cep_msg_init(m, CEP_MSG_REJ, tid);
	m->u.rej.local_comm_id = local;
	m->u.rej.remote_comm_id = remote;
	m->u.rej.reason = (uint16_t)reason;
	m->u.rej.message_rejected = (uint8_t)code;
	if (reason == CEP_REJ_TIMEOUT) {
		for (int i = 0; i < 8; i++)
			m->u.rej.ari[i] = (uint8_t)(self_guid >> (56 - 8 * i));
		m->u.rej.reject_info_length = 8;
	}
	memcpy(m->u.rej.private_data, PEER_PDATA, sizeof(PEER_PDATA));
}

static void build_mra(struct cep_msg *m, uint32_t local, uint32_t remote, unsigned code,
		      unsigned timeout, uint64_t tid)
{
	cep_msg_init(m, CEP_MSG_MRA, tid);
	m->u.mra.local_comm_id = local;
	m->u.mra.remote_comm_id = remote;
	m->u.mra.message_mraed = (uint8_t)code;
	m->u.mra.service_timeout = (uint8_t)timeout;
}

/* REP to the target's REQ @q: our comm ID @local, QPN @qpn. */
static void build_rep(struct cep_msg *m, const struct cep_msg *q, uint32_t local, uint32_t qpn)
{
	struct cep_rep *r = &m->u.rep;

	cep_msg_init(m, CEP_MSG_REP, q->hdr.tid);
	r->local_comm_id = local;
	r->remote_comm_id = q->u.req.local_comm_id;
	r->local_qpn = qpn;
	r->starting_psn = 0x4321;
	r->responder_resources = 1;
	r->initiator_depth = 1;
	r->target_ack_delay = 15;  /* rxe's local CA ACK delay */
	r->failover_accepted = CEP_FAILOVER_ACCEPTED;
	r->end_to_end_flow_control = 1;
	r->rnr_retry_count = 7;
	r->local_ca_guid = self_guid;
	memcpy(r->private_data, PEER_PDATA, sizeof(PEER_PDATA));
}

/* ---- a real RC QP of ours, for data before the RTU ---------------------- */

static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t buf[64];
} dq;

static int dq_open(const char *dev)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr qa;

	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev))
			dq.ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!dq.ctx)
		return -1;
	dq.pd = ibv_alloc_pd(dq.ctx);
	dq.cq = dq.pd ? ibv_create_cq(dq.ctx, 8, NULL, NULL, 0) : NULL;
	dq.mr = dq.pd ? ibv_reg_mr(dq.pd, dq.buf, sizeof(dq.buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!dq.cq || !dq.mr)
		return -1;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = dq.cq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	dq.qp = ibv_create_qp(dq.pd, &qa);
	return dq.qp ? 0 : -1;
}

/* INIT, RTR and RTS towards the target's QP (from its REP), then one SEND.
 * Our REQ's starting PSN is what we receive with; the REP's is what we
 * send with (IBTA 12.7.x; the kernel's cm_init_qp_r*_attr). */
static int dq_send(uint32_t dest_qpn, uint32_t sq_psn, uint32_t rq_psn)
{
	struct ibv_qp_attr at;
	struct ibv_sge sge = { (uintptr_t)dq.buf, 16, dq.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	double end;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	if (ibv_modify_qp(dq.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = dest_qpn;
	at.rq_psn = rq_psn;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.hop_limit = 64;
	at.ah_attr.grh.sgid_index = port.gid_index;
	memcpy(at.ah_attr.grh.dgid.raw, target_gid, 16);
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(dq.qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return -2;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.sq_psn = sq_psn;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(dq.qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		return -3;
	memcpy(dq.buf, "peer data       ", 16);
	if (ibv_post_send(dq.qp, &wr, &bad))
		return -4;
	end = ctl_now_ms() + 3000;
	while (ctl_now_ms() < end) {
		int n = ibv_poll_cq(dq.cq, 1, &wc);

		if (n > 0)
			return wc.status == IBV_WC_SUCCESS ? 0 : -5;
		collect(5);
	}
	return -6;
}

/* ---- scenario helpers --------------------------------------------------- */

/* The handle of the newest event @name since @from, or 0. */
static int ev_handle(const char *name, int from)
{
	for (int i = nevs - 1; i >= from; i--)
		if (!strcmp(evs[i].name, name))
			return evs[i].h;
	return 0;
}

/* Passive set-up: REQ, the application accepts, REP (then @settle ms).
 * Returns the handle (0 when no request reached the application) and fills
 * *req and *rep (rep->type 0 when no REP came). */
static int p_connect(uint32_t pid, uint32_t qpn, const struct reqopt *o, int settle,
		     struct cep_msg *req, struct cep_msg *rep)
{
	unsigned reps = nrx_type[CEP_MSG_REP];
	int e0 = nevs, i, h;

	memset(rep, 0, sizeof(*rep));
	build_req(req, pid, qpn, o);
	act("REQ %s %s port=%u", pcid(pid), qlab(qpn), o->port);
	xmit(req);
	i = wait_ev("connect_request", 0, e0, 5000);
	if (i < 0)
		return 0;
	h = evs[i].h;
	app("accept", h);
	if (wait_rx(CEP_MSG_REP, reps, 3000, settle) == 0)
		*rep = last[CEP_MSG_REP];
	return h;
}

/* Passive: our RTU for @rep (with @req's TID, as the kernel's RTU carries
 * its REQ's), then the application's ESTABLISHED. */
static void p_rtu(int h, uint32_t pid, const struct cep_msg *req, const struct cep_msg *rep)
{
	struct cep_msg m;
	int e0 = nevs;

	build_rtu(&m, pid, rep->u.rep.local_comm_id, req->hdr.tid);
	act("RTU");
	xmit(&m);
	wait_ev("established", h, e0, 3000);
}

/* Passive: a connection up to ESTABLISHED (REQ, accept, REP, RTU). */
static int p_establish(uint32_t pid, uint32_t qpn, struct cep_msg *req, struct cep_msg *rep)
{
	int h = p_connect(pid, qpn, &REQ_DEFAULT, 150, req, rep);

	if (!h || rep->type != CEP_MSG_REP)
		return 0;
	p_rtu(h, pid, req, rep);
	return h;
}

/* Send @m again, TID and all (a retransmission), and record the answers. */
static void again(struct cep_msg *m, const char *what)
{
	act("%s again (same TID)", what);
	xmit(m);
	settle(WIN);
}

/* Active: the application connects to PEER_PORT (on the QP of @reuse when
 * not 0); returns its handle and the REQ in *req (type 0 when none). */
static int a_connect(int reuse, struct cep_msg *req)
{
	unsigned reqs = nrx_type[CEP_MSG_REQ];
	int ret, h;

	memset(req, 0, sizeof(*req));
	if (reuse) {
		act("connect %d reuse=%s", PEER_PORT, hdisp(reuse));
		ret = cmd(NULL, 0, "connect %d reuse=%d", PEER_PORT, reuse);
		/* rdma_cm needs a new id, libcep connects the same one: the
		 * handle is not part of the comparison here. */
		snprintf(st.answer, sizeof(st.answer), "= %s", ret ? "err" : "ok");
	} else {
		act("connect %d", PEER_PORT);
		ret = cmd(NULL, 0, "connect %d", PEER_PORT);
	}
	h = ans_h;
	if (ret || !h)
		return 0;
	if (wait_rx(CEP_MSG_REQ, reqs, 8000, 150) == 0)
		*req = last[CEP_MSG_REQ];
	return h;
}

/* Active: the application connects and we accept: REQ, REP, RTU. */
static int a_establish(uint32_t pid, uint32_t qpn, struct cep_msg *req)
{
	struct cep_msg m;
	int h = a_connect(0, req), e0 = nevs;

	if (!h || req->type != CEP_MSG_REQ)
		return 0;
	build_rep(&m, req, pid, qpn);
	act("REP %s %s", pcid(pid), qlab(qpn));
	xmit(&m);
	wait_ev("established", h, e0, 3000);
	return h;
}

/* Answer the newest DREQ (if one came after @before) with a DREP. */
static void answer_dreq(unsigned before, const char *why)
{
	struct cep_msg d, *q = &last[CEP_MSG_DREQ];

	if (nrx_type[CEP_MSG_DREQ] <= before)
		return;
	build_drep(&d, q->u.dreq.remote_comm_id, q->u.dreq.local_comm_id, q->hdr.tid);
	act("DREP (%s)", why);
	xmit(&d);
	settle(WIN);
}

/* Destroy everything on the application and let the stragglers pass
 * (DREQs are answered, nothing is recorded). */
static void cleanup(void)
{
	step_flush();
	recording = 0;
	cmd(NULL, 0, "destroyall");
	collect(300);
	barrier();
	recording = 1;
	memset(&st, 0, sizeof(st));
}

static int log2_ms(double ms)
{
	return ms < 1 ? 0 : (int)lround(log2(ms));
}

/* Wait for TIMEWAIT_EXIT of @h and measure it from @t0 (ms; 0: unknown).
 * TIMEWAIT_EXIT is recorded here only, so its timer cannot move events
 * between the other steps. */
static void timewait_step(int h, double t0, int max_ms)
{
	int i;

	act("wait for TIMEWAIT_EXIT");
	i = wait_ev("timewait_exit", h, 0, max_ms);
	if (i >= 0 && st.nev < NLINES)
		snprintf(st.ev[st.nev++], CTL_LINE, "ev %s timewait_exit", hdisp(h));
	if (i >= 0 && t0 > 0)
		measure("timewait=2^%d", log2_ms(evs[i].t - t0));
	else
		measure("timewait=%s", i >= 0 ? "unmeasured" : "none");
}

/* ---- the catalogue ------------------------------------------------------ */

/* Passive life cycle: REQ/REP/RTU, DREQ/DREP and its TID, duplicates in
 * timewait, timewait length, the remote identifiers reused after it. The
 * REQ's ACK timeout 19 makes the kernel's timewait 2 s (cm_enter_timewait:
 * the path's timeout), long enough for the steps inside it. */
static void c_passive_lifecycle(void)
{
	struct reqopt o = REQ_DEFAULT;
	struct cep_msg req, rep, m, dreq;
	uint32_t p1, q1;
	double t_drep = 0;
	unsigned dreps;
	int h, h2, e0;

	group();
	p1 = new_pid();
	q1 = new_qpn();
	o.ack_timeout = 19;
	scenario("passive-accept");
	full_fields = 1;
	h = p_connect(p1, q1, &o, 150, &req, &rep);
	step_flush();
	full_fields = 0;
	if (!h || rep.type != CEP_MSG_REP) {
		cleanup();
		return;
	}

	scenario("passive-dup-req-in-rep-sent");
	again(&req, "REQ");

	scenario("passive-rtu");
	p_rtu(h, p1, &req, &rep);
	scenario("passive-dup-req-established");
	again(&req, "REQ");
	scenario("passive-dup-rtu");
	build_rtu(&m, p1, rep.u.rep.local_comm_id, req.hdr.tid);
	again(&m, "RTU");

	scenario("passive-dreq");
	build_dreq(&dreq, p1, rep.u.rep.local_comm_id, rep.u.rep.local_qpn);
	act("DREQ");
	dreps = nrx_type[CEP_MSG_DREP];
	e0 = nevs;
	xmit(&dreq);
	wait_ev("disconnected", h, e0, 3000);
	settle(WIN);
	scenario("passive-dup-dreq-in-dreq-rcvd");
	again(&dreq, "DREQ");

	/* The application answers its DISCONNECTED as librdmacm programs do. */
	scenario("passive-disconnect-in-dreq-rcvd");
	app("disconnect", h);
	wait_rx(CEP_MSG_DREP, dreps, 2000, 150);
	if (nrx_type[CEP_MSG_DREP] > dreps)
		t_drep = last_t[CEP_MSG_DREP];

	scenario("passive-dup-dreq-in-timewait");
	again(&dreq, "DREQ");

	scenario("passive-dup-req-in-timewait");
	act("REQ %s again (same IDs, QPN and TID)", pcid(p1));
	e0 = nevs;
	xmit(&req);
	settle(WIN);
	h2 = ev_handle("connect_request", e0);
	if (h2) {
		app("reject", h2);
		settle(WIN);
	}

	scenario("passive-timewait");
	timewait_step(h, t_drep, 10000);

	scenario("passive-reuse-after-timewait");
	h2 = p_connect(p1, q1, &o, 150, &m, &rep);
	if (h2 && rep.type == CEP_MSG_REP)
		p_rtu(h2, p1, &m, &rep);
	cleanup();
}

/* A REQ for a port nobody listens on. */
static void c_passive_no_listener(void)
{
	struct reqopt o = REQ_DEFAULT;
	struct cep_msg req;

	group();
	scenario("passive-no-listener");
	o.port = NOBODY_PORT;
	build_req(&req, new_pid(), new_qpn(), &o);
	act("REQ %s port=%u", pcid(req.u.req.local_comm_id), o.port);
	xmit(&req);
	settle(WIN);
	cleanup();
}

/* Issue 10 item 16: a REQ whose path the target cannot use - a P_Key
 * not in its table. The kernel checks the path (cm_init_av_by_path) and
 * answers REJ 12 with its GID; the application never hears of it. */
static void c_passive_bad_path(void)
{
	struct reqopt o = REQ_DEFAULT;
	struct cep_msg req;

	group();
	scenario("passive-req-unknown-pkey");
	o.pkey = 0x1234;
	build_req(&req, new_pid(), new_qpn(), &o);
	act("REQ %s with P_Key 0x1234", pcid(req.u.req.local_comm_id));
	xmit(&req);
	settle(WIN);
	cleanup();
}

/* A duplicate REQ while the application holds the request, then REJ. */
static void c_passive_dup_req(void)
{
	struct cep_msg req;
	uint32_t p;
	int e0, i;

	group();
	scenario("passive-dup-req-before-accept");
	p = new_pid();
	build_req(&req, p, new_qpn(), &REQ_DEFAULT);
	act("REQ %s", pcid(p));
	e0 = nevs;
	xmit(&req);
	i = wait_ev("connect_request", 0, e0, 5000);
	if (i >= 0) {
		again(&req, "REQ");
		scenario("passive-reject");
		app("reject", evs[i].h);
		settle(WIN);
	}
	cleanup();
}

/* The application rejects (@verb "reject") or destroys its id: before it
 * accepts (@stage 0), after its REP went out (1, REP_SENT), or once
 * established (2). */
static void c_passive_abandon(const char *name, const char *verb, int stage)
{
	struct cep_msg req, rep;
	uint32_t p;
	int h = 0, e0, i;

	group();
	scenario(name);
	p = new_pid();
	if (stage == 2) {
		h = p_establish(p, new_qpn(), &req, &rep);
	} else if (stage == 1) {
		h = p_connect(p, new_qpn(), &REQ_DEFAULT, 150, &req, &rep);
		if (rep.type != CEP_MSG_REP)
			h = 0;
	} else {
		build_req(&req, p, new_qpn(), &REQ_DEFAULT);
		act("REQ %s", pcid(p));
		e0 = nevs;
		xmit(&req);
		i = wait_ev("connect_request", 0, e0, 5000);
		h = i >= 0 ? evs[i].h : 0;
	}
	if (h) {
		app(verb, h);
		settle(WIN);
	}
	cleanup();
}

/* Messages for comm IDs the target never gave out; a REQ of class
 * version 1. */
static void c_passive_strays(void)
{
	struct reqopt o = REQ_DEFAULT;
	struct cep_msg req, m;
	uint32_t p, q;

	group();
	p = new_pid();
	q = new_qpn();
	scenario("passive-unknown-dreq");
	build_dreq(&m, p, 0x7e570001u, q);
	act("DREQ to an unknown comm ID");
	xmit(&m);
	settle(WIN);
	scenario("passive-unknown-rtu");
	build_rtu(&m, p, 0x7e570002u, 0);
	act("RTU to an unknown comm ID");
	xmit(&m);
	settle(WIN);
	scenario("passive-unknown-rep");
	memset(&req, 0, sizeof(req));
	req.type = CEP_MSG_REQ;
	req.u.req.local_comm_id = 0x7e570003u;
	build_rep(&m, &req, p, q);
	m.hdr.tid = 0;
	act("REP to an unknown comm ID");
	xmit(&m);
	settle(WIN);

	scenario("passive-req-class-version-1");
	o.class_version = 1;
	p = new_pid();
	build_req(&req, p, new_qpn(), &o);
	act("REQ %s with class version 1", pcid(p));
	xmit(&req);
	settle(WIN);
	cleanup();
}

/* MRA for the REP stops the REP's retries; a duplicate REQ then. */
static void c_passive_mra(void)
{
	struct reqopt o = REQ_DEFAULT;
	struct cep_msg req, rep, m;
	uint32_t p;
	int h;

	group();
	scenario("passive-mra-rep");
	p = new_pid();
	o.lcto = 17; /* REP retried after ~540 ms unless the MRA arrives */
	h = p_connect(p, new_qpn(), &o, 0, &req, &rep);
	if (!h || rep.type != CEP_MSG_REP) {
		cleanup();
		return;
	}
	build_mra(&m, p, rep.u.rep.local_comm_id, CEP_MSG_CODE_REP, 20, req.hdr.tid);
	act("MRA for the REP (service timeout 20)");
	xmit(&m);
	settle(1300);

	scenario("passive-dup-req-after-mra");
	again(&req, "REQ");

	scenario("passive-rtu-after-mra");
	p_rtu(h, p, &req, &rep);
	cleanup();
}

/* No RTU at all: REP retries, then what each CM does. */
static void c_passive_rep_timeout(void)
{
	struct reqopt o = REQ_DEFAULT;
	struct cep_msg req, rep;
	int h, e0;

	group();
	scenario("passive-rep-timeout");
	o.lcto = 16;   /* ~270 ms */
	o.retries = 2;
	h = p_connect(new_pid(), new_qpn(), &o, 0, &req, &rep);
	if (h && rep.type == CEP_MSG_REP) {
		act("no RTU");
		e0 = nevs;
		wait_ev("unreachable", h, e0, 3000);
		settle(WIN);
	}
	cleanup();
}

/* Issue 10 item 10: the RTU is lost but data flows on the QP. rxe raises
 * no IBV_EVENT_COMM_EST, so the script tells the application, standing in
 * for the HCA's event, and the application notifies its CM. */
static void c_passive_lost_rtu(void)
{
	struct reqopt o = REQ_DEFAULT;
	struct cep_msg req, rep;
	uint32_t qd;
	int h, e0, ret;

	group();
	scenario("passive-lost-rtu-data");
	if (!dq.qp) {
		act("skipped: no RC QP on the peer");
		return;
	}
	qd = dq.qp->qp_num;
	lab_add(qpns, &nqpns, qd, "QD");
	o.lcto = 19;   /* REP retried after ~2.1 s: time for the data and
			  the notify in a slow guest */
	o.retries = 1;
	o.psn = 0x2222;
	h = p_connect(new_pid(), qd, &o, 0, &req, &rep);
	if (!h || rep.type != CEP_MSG_REP) {
		cleanup();
		return;
	}
	act("data on the QP instead of the RTU");
	e0 = nevs;
	ret = dq_send(rep.u.rep.local_qpn, rep.u.rep.starting_psn, o.psn);
	if (ret)
		printf("      (data send failed: %d)\n", ret);
	if (wait_ev("recv", h, e0, 3000) >= 0)
		app("notify", h);
	act("no RTU");
	settle(4700);  /* past the retry and the timeout (2 x 2.1 s) */
	cleanup();
}

/* Stale connection: a new REQ names the QPN of an established one. */
static void c_passive_stale(int listener)
{
	struct reqopt o = REQ_DEFAULT;
	struct cep_msg req, rep, m;
	uint32_t p1, q1, p2;
	unsigned dreqs;

	group();
	scenario(listener ? "passive-stale-req" : "passive-stale-req-no-listener");
	p1 = new_pid();
	q1 = new_qpn();
	if (p_establish(p1, q1, &req, &rep)) {
		p2 = new_pid();
		if (!listener)
			o.port = NOBODY_PORT;
		build_req(&m, p2, q1, &o);
		act("REQ %s %s port=%u (the QPN of %s's connection)", pcid(p2), qlab(q1), o.port,
		    pcid(p1));
		dreqs = nrx_type[CEP_MSG_DREQ];
		xmit(&m);
		settle(WIN);
		answer_dreq(dreqs, "the stale connection's DREQ");
	}
	cleanup();
}

/* REJ "timeout" with remote comm ID 0 (the active side gave up before it
 * learnt ours): legitimate before the RTU, forged once established
 * (issue 10 item 5). */
static void c_passive_rej_timeout(int established)
{
	struct cep_msg req, rep, m;
	uint32_t p;
	int h;

	group();
	scenario(established ? "passive-rej-timeout-established" : "passive-rej-timeout-rep-sent");
	p = new_pid();
	if (established)
		h = p_establish(p, new_qpn(), &req, &rep);
	else
		h = p_connect(p, new_qpn(), &REQ_DEFAULT, 150, &req, &rep);
	if (h && rep.type == CEP_MSG_REP) {
		build_rej(&m, p, 0, CEP_REJ_TIMEOUT, CEP_MSG_CODE_OTHER, 0);
		act("REJ Timeout, remote comm ID 0, ARI = our CA GUID");
		xmit(&m);
		settle(WIN);
	}
	cleanup();
}

/* Messages that only pretend to belong to a connection. */
static void c_passive_forged(void)
{
	struct cep_msg req, rep, m;
	uint32_t p;
	int h;

	group();
	p = new_pid();
	scenario("passive-dreq-wrong-qpn");
	h = p_establish(p, new_qpn(), &req, &rep);
	if (!h) {
		cleanup();
		return;
	}
	build_dreq(&m, p, rep.u.rep.local_comm_id, rep.u.rep.local_qpn ^ 0x5a);
	act("DREQ naming another QPN");
	xmit(&m);
	settle(WIN);

	/* Issue 10 item 14: the right IDs from another address of the
	 * peer's port (a second IPv4 address, so a second RoCE GID). */
	scenario("passive-dreq-other-address");
	if (alt_gid_index < 0) {
		act("skipped: no second source GID");
	} else {
		build_dreq(&m, p, rep.u.rep.local_comm_id, rep.u.rep.local_qpn);
		act("DREQ from another GID of the peer's port");
		xmit_from(&m, alt_gid_index);
		settle(WIN);
	}
	cleanup();
}

/* Active life cycle: REQ fields, REP/RTU, duplicates, DREQ/DREP, timewait,
 * and a second connection on the same QP (libcep: the same id). */
static void c_active_lifecycle(void)
{
	struct cep_msg req, rep, m;
	uint32_t p1, q1;
	double t_drep = 0;
	unsigned dreqs;
	int h, e0;

	group();
	scenario("active-connect");
	full_fields = 1;
	h = a_connect(0, &req);
	step_flush();
	full_fields = 0;
	if (!h || req.type != CEP_MSG_REQ) {
		cleanup();
		return;
	}
	scenario("active-rep");
	p1 = new_pid();
	q1 = new_qpn();
	build_rep(&rep, &req, p1, q1);
	act("REP %s %s", pcid(p1), qlab(q1));
	e0 = nevs;
	xmit(&rep);
	wait_ev("established", h, e0, 3000);

	scenario("active-dup-rep");
	again(&rep, "REP");

	scenario("active-disconnect");
	dreqs = nrx_type[CEP_MSG_DREQ];
	app("disconnect", h);
	wait_rx(CEP_MSG_DREQ, dreqs, 3000, 150);
	if (nrx_type[CEP_MSG_DREQ] > dreqs) {
		build_drep(&m, p1, last[CEP_MSG_DREQ].u.dreq.local_comm_id,
			   last[CEP_MSG_DREQ].hdr.tid);
		act("DREP");
		e0 = nevs;
		xmit(&m);
		/* timewait began when the target took the DREP: measure from
		 * its DISCONNECTED, as passive-timewait does from the DREP it
		 * sent, not from our send (a slow guest's way to the CM would
		 * count, ~0.5 s under TCG) */
		int i = wait_ev("disconnected", h, e0, 3000);

		t_drep = i >= 0 ? evs[i].t : 0;
	}

	scenario("active-dup-rep-in-timewait");
	again(&rep, "REP");

	scenario("active-timewait");
	timewait_step(h, t_drep, 10000);

	/* Issue 10 item 1. */
	scenario("active-reconnect");
	h = a_connect(h, &req);
	if (h && req.type == CEP_MSG_REQ) {
		uint32_t p2 = new_pid(), q2 = new_qpn();

		build_rep(&m, &req, p2, q2);
		act("REP %s %s", pcid(p2), qlab(q2));
		e0 = nevs;
		xmit(&m);
		wait_ev("established", h, e0, 2000);
		settle(WIN);
	}
	cleanup();
}

/* DREQ crossing DREQ, and disconnect in DREQ_RCVD and TIMEWAIT (item 15). */
static void c_active_crossing(void)
{
	struct cep_msg req, m, theirs;
	uint32_t p;
	unsigned dreqs;
	int h, e0;

	group();
	scenario("active-dreq-crossing-dreq");
	p = new_pid();
	h = a_establish(p, new_qpn(), &req);
	if (!h) {
		cleanup();
		return;
	}
	dreqs = nrx_type[CEP_MSG_DREQ];
	app("disconnect", h);
	if (wait_rx(CEP_MSG_DREQ, dreqs, 3000, 150)) {
		cleanup();
		return;
	}
	theirs = last[CEP_MSG_DREQ];
	build_dreq(&m, p, req.u.req.local_comm_id, req.u.req.local_qpn);
	act("DREQ crossing the application's");
	e0 = nevs;
	xmit(&m);
	wait_ev("disconnected", h, e0, 2000);
	settle(WIN);

	scenario("active-disconnect-in-dreq-rcvd");
	app("disconnect", h);
	settle(WIN);

	scenario("active-drep-after-crossing");
	build_drep(&m, p, theirs.u.dreq.local_comm_id, theirs.hdr.tid);
	act("DREP for the application's DREQ");
	xmit(&m);
	settle(WIN);

	scenario("active-disconnect-in-timewait");
	app("disconnect", h);
	settle(WIN);
	cleanup();
}

/* The application's REQ answered with REJ (@code) or MRA. */
static void c_active_answer(const char *name, int what)
{
	struct cep_msg req, m;
	uint32_t p, q;
	int h, e0;

	group();
	scenario(name);
	h = a_connect(0, &req);
	if (!h || req.type != CEP_MSG_REQ) {
		cleanup();
		return;
	}
	p = new_pid();
	switch (what) {
	case 'R':
		build_rej(&m, p, req.u.req.local_comm_id, CEP_REJ_CONSUMER_DEFINED,
			  CEP_MSG_CODE_REQ, req.hdr.tid);
		act("REJ 28 (message REQ)");
		e0 = nevs;
		xmit(&m);
		wait_ev("rejected", h, e0, 2000);
		break;
	case 'O':
		/* Issue 10 item 14: the kernel drops a REJ of the "other"
		 * code for an id that has no remote comm ID yet
		 * (cm_acquire_rejected_id). */
		build_rej(&m, p, req.u.req.local_comm_id, CEP_REJ_CONSUMER_DEFINED,
			  CEP_MSG_CODE_OTHER, req.hdr.tid);
		act("REJ 28 (message Other, our comm ID set)");
		xmit(&m);
		settle(WIN);
		break;
	case 'M':
		q = new_qpn();
		build_mra(&m, p, req.u.req.local_comm_id, CEP_MSG_CODE_REQ, 18, req.hdr.tid);
		act("MRA for the REQ (service timeout 18)");
		xmit(&m);
		settle(WIN);
		build_rep(&m, &req, p, q);
		act("REP %s %s", pcid(p), qlab(q));
		e0 = nevs;
		xmit(&m);
		wait_ev("established", h, e0, 2000);
		break;
	}
	cleanup();
}

/* The application gives up its connect: destroys the id, or first its QP
 * (issue 10 item 7). */
static void c_active_abandon(int qp_first)
{
	struct cep_msg req;
	int h;

	group();
	scenario(qp_first ? "active-qp-destroy-in-req-sent" : "active-destroy-in-req-sent");
	h = a_connect(0, &req);
	if (h && req.type == CEP_MSG_REQ) {
		if (qp_first) {
			app("destroyqp", h);
			settle(WIN);
		}
		app("destroy", h);
		settle(WIN);
	}
	cleanup();
}

/* A REP whose IDs or QPN belong to another, established connection:
 * issue 10 item 6 (same remote comm ID) and the stale QPN. */
static void c_active_other_conn(int same_id)
{
	struct cep_msg req1, req2, m;
	uint32_t p1, q1;
	unsigned dreqs;
	int h1, h2 = 0;

	group();
	scenario(same_id ? "active-rep-reusing-remote-id" : "active-stale-rep");
	p1 = new_pid();
	q1 = new_qpn();
	h1 = a_establish(p1, q1, &req1);
	if (h1)
		h2 = a_connect(0, &req2);
	if (h2 && req2.type == CEP_MSG_REQ) {
		uint32_t p2 = same_id ? p1 : new_pid(), q2 = same_id ? new_qpn() : q1;

		build_rep(&m, &req2, p2, q2);
		act("REP %s %s to the second connection", pcid(p2), qlab(q2));
		dreqs = nrx_type[CEP_MSG_DREQ];
		xmit(&m);
		settle(WIN);
		answer_dreq(dreqs, "the first connection's DREQ");
	}
	cleanup();
}

/* The index of the RoCE GID ::ffff:@ip on @dev port 1: rxe adds it a
 * moment after the address; wait up to 10 s. -1 when it never shows. */
static int gid_index_of(const char *dev, uint32_t ip)
{
	char want[64], path[128], buf[64];
	const uint8_t *b = (const uint8_t *)&ip;
	double end = ctl_now_ms() + 10000;

	snprintf(want, sizeof(want), "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x",
		 b[0], b[1], b[2], b[3]);
	do {
		for (int i = 0; i < 16; i++) {
			FILE *f;

			snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gids/%d",
				 dev, i);
			f = fopen(path, "r");
			if (!f)
				continue;
			if (!fgets(buf, sizeof(buf), f))
				buf[0] = '\0';
			fclose(f);
			if (!strncmp(buf, want, strlen(want)))
				return i;
		}
		usleep(50000);
	} while (ctl_now_ms() < end);
	return -1;
}

int main(int argc, char **argv)
{
	struct cep_umad_attr ua = { .size = sizeof(ua), .port_num = 1,
				    .gid_index = CEP_UMAD_GID_AUTO };
	char ans[CTL_LINE], *g;
	struct in_addr ip;
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 5) {
		fprintf(stderr, "usage: %s DEV SELF_IP TARGET_IP TRANSCRIPT [ALT_IP]\n", argv[0]);
		return 2;
	}
	srandom((unsigned)time(NULL));
	ua.dev_name = argv[1];
	if (inet_pton(AF_INET, argv[2], &ip) != 1)
		return 2;
	self_ip = ip.s_addr;
	if (inet_pton(AF_INET, argv[3], &ip) != 1)
		return 2;
	target_ip = ip.s_addr;
	target_gid[10] = target_gid[11] = 0xff;
	memcpy(target_gid + 12, &target_ip, 4);
	ret = cep_umad_open(&ua, &tp);
	if (!ret)
		ret = tp->ops->query_port(tp, &port);
	if (!ret)
		ret = tp->ops->start(tp, on_recv, NULL);
	if (ret) {
		printf("FAIL: umad transport on %s: %s\n", argv[1], strerror(-ret));
		return 1;
	}
	memcpy(self_gid, port.gid, 16);
	self_guid = be64toh(port.ca_guid_net);
	if (argc > 5 && inet_pton(AF_INET, argv[5], &ip) == 1)
		alt_gid_index = gid_index_of(argv[1], ip.s_addr);
	if (dq_open(argv[1]))
		printf("no RC QP for data (scenario passive-lost-rtu-data skips)\n");
	if (ctl_connect(&ctl, argv[3], CTL_PORT, 120000)) {
		printf("FAIL: no control channel to %s\n", argv[3]);
		return 1;
	}
	if (cmd(ans, sizeof(ans), "hello")) {
		printf("FAIL: hello: %s\n", ans);
		return 1;
	}
	g = strstr(ans, "guid=");
	target_guid = g ? strtoull(g + 5, NULL, 16) : 0;
	g = strstr(ans, "cm=");
	cm_name = g ? strndup(g + 3, strcspn(g + 3, " ")) : "?";
	if (cmd(ans, sizeof(ans), "listen %d", LISTEN_PORT)) {
		printf("FAIL: listen: %s\n", ans);
		return 1;
	}
	memset(&st, 0, sizeof(st));
	tr = fopen(argv[4], "w");
	if (!tr) {
		printf("FAIL: cannot write %s\n", argv[4]);
		return 1;
	}
	fprintf(tr, "# conformance transcript: cm=%s\n", cm_name);
	printf("peer: CM under test %s, CA GUID %016" PRIx64 ", second GID index %d\n", cm_name,
	       target_guid, alt_gid_index);

	c_passive_lifecycle();
	c_passive_no_listener();
	c_passive_bad_path();
	c_passive_dup_req();
	c_passive_abandon("passive-reject-after-accept", "reject", 1);
	c_passive_abandon("passive-destroy-after-accept", "destroy", 1);
	c_passive_abandon("passive-destroy-before-accept", "destroy", 0);
	c_passive_abandon("passive-destroy-established", "destroy", 2);
	c_passive_strays();
	c_passive_mra();
	c_passive_rep_timeout();
	c_passive_lost_rtu();
	c_passive_stale(1);
	c_passive_stale(0);
	c_passive_rej_timeout(0);
	c_passive_rej_timeout(1);
	c_passive_forged();
	c_active_lifecycle();
	c_active_crossing();
	c_active_answer("active-rej-req", 'R');
	c_active_answer("active-rej-other-code", 'O');
	c_active_answer("active-mra-req", 'M');
	c_active_abandon(0);
	c_active_abandon(1);
	c_active_other_conn(1);
	c_active_other_conn(0);

	step_flush();
	fprintf(tr, "# end\n");
	fclose(tr);
	tr = NULL;
	cmd(NULL, 0, "quit");
	ctl_close(&ctl);
	tp->ops->stop(tp);
	tp->ops->destroy(tp);
	printf("peer: catalogue done against %s (%u MADs lost in the queue)\n", cm_name, rx_lost);
	return 0;
}
