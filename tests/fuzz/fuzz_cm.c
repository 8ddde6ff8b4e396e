/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the CM engine: each input is a program (fuzz_cm.h)
 * for two CM nodes (A, B) and a raw port (C) on one in-process fabric, all
 * on one virtual clock, plus a bare core table. After every operation the
 * fuzzer settles (cep_clock_quiesce); a RACE runs two operations at once.
 * At the end it destroys every id, advances the clock past every timer and
 * checks: every destroyed id got exactly one DESTROYED and no event after
 * it (nor any event after a cep_cm_destroy_id called by the fuzzer has
 * returned), no CEP or id is left, every table passes cep_table_check, every
 * destroy returns 0; LeakSanitizer and ASan/UBSan see the rest. A broken
 * rule aborts with "fuzz-cm: VIOLATION". See docs/stress.md.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cep/clock.h>
#include <cep/cm.h>
#include <cep/fabric.h>
#include <cep/table.h>
#include <cep/wire.h>

#include "fuzz_cm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAXT 1024       /* tickets (ids) per input */
#define MAXOPS 160      /* operations per input; the rest is ignored */
#define NQP 8           /* QPNs per node: QPN0 + i */
#define QPN0 0x100u
#define NCQP 4          /* the raw port's QPNs */
#define CQPN0 0x900u
#define NSLOT 8         /* core CEP slots */
#define NCQPN 4         /* core QPNs */
#define CORE_QPN0 0x10u
#define NSEEN 64        /* MADs the raw port remembers */
#define RACE_REPS 16     /* core operations repeat in a RACE */
#define SETTLE_MS 20000 /* real time: a quiesce that takes longer is a livelock */

static const uint64_t guids[3] = { 0x0002c90300000a01ull, 0x0002c90300000b02ull,
				   0x0002c90300000c03ull };
static const uint16_t lids[3] = { 1, 2, 3 };
static const uint64_t sids[2] = { 0x1000000000000001ull, 0x1000000000000002ull };

/* One id's life, kept until the input ends so a late event is detected
 * instead of read from freed memory. */
struct ticket {
	int node;               /* FZ_A / FZ_B */
	int gen;                /* the node's CM generation (CM_RESTART) */
	struct cep_cm_id *id;   /* valid while !dead && !cm_gone */
	uint32_t comm_id;       /* local comm ID, kept after death */
	int channel;            /* events come through the node's channel */
	int listener;           /* cep_cm_listen succeeded */
	int destroy_called;     /* cep_cm_destroy_id (or a callback's verdict) */
	int strict;             /* cep_cm_destroy_id returned: no event may follow */
	int destroyed;          /* DESTROYED events */
	int dead;               /* DESTROYED delivered (and acked) */
	int cm_gone;            /* freed by cep_cm_destroy */
	int busy;               /* used by a RACE's operation: no policy destroys it */
};

struct node {
	struct cep_transport *tp;
	struct cep_cm *cm;
	struct cep_cm_channel *ch;  /* NULL: none */
	int gen;
	int auto_mra;
	uint8_t pol_req, pol_misc, pol_x; /* POLICY */
};

static struct world {
	pthread_mutex_t mtx;        /* tickets, seen, flags below */
	struct cep_clock *clk;
	struct cep_fabric *fab;
	struct node n[2];
	struct cep_transport *c;    /* the raw port */
	struct ticket t[MAXT];
	int nt;
	struct ticket overflow;     /* ids beyond MAXT: destroyed at once */
	struct cep_msg seen[NSEEN]; /* what the raw port received */
	unsigned nseen;
	struct {                    /* what it sent (one MAD per operation) */
		uint64_t tid;
		uint8_t type;
	} sent[MAXOPS];
	unsigned nsent;
	uint64_t next_tid;
	unsigned workers;
	int racing;                 /* a RACE is running */
	int draining;               /* the end: callbacks do nothing */
	int opno;
	struct cep_table *core;
	struct cep *slot[NSLOT];
	uint32_t core_ids[16];      /* comm IDs of core CEPs, for lookups */
	struct cep *grave[2 * RACE_REPS + NSLOT]; /* destroyed core CEPs still held */
	int ngrave;                 /* grave: by the RACE thread that adds */
	int race_cycles;            /* the RACE has a CORE_QP_CYCLE */
} W;

static int trace;          /* FUZZ_CM_TRACE=1: print each step */
/* The comm ID of the core CEP a RACE's operation made last, for the
 * reader to look up while that operation destroys and remakes it.
 * Relaxed: any recent value will do. */
static _Atomic uint32_t race_focus;
static int force_workers;  /* FUZZ_CM_WORKERS=1|2 overrides the header */

/* ---- reporting ------------------------------------------------------- */

__attribute__((format(printf, 1, 2), noreturn))
static void fz_fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fuzz-cm: VIOLATION (op %d): ", W.opno);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

__attribute__((format(printf, 1, 2)))
static void tr(const char *fmt, ...)
{
	va_list ap;

	if (!trace)
		return;
	fprintf(stderr, "%9.3f ", (double)cep_clock_now_ns(NULL) / 1e6);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

static void settle(void)
{
	int rc = cep_clock_quiesce(W.clk, SETTLE_MS);

	if (rc)
		fz_fail("cep_clock_quiesce: %d (a worker or the fabric never went idle)", rc);
}

/* An API result must be 0 or a negative errno. */
static int api(const char *what, int rc)
{
	tr("    %s -> %d\n", what, rc);
	if (rc > 0)
		fz_fail("%s returned %d", what, rc);
	return rc;
}

/* ---- tickets and events ------------------------------------------------- */

static int node_of_id(struct cep_cm_id *id)
{
	struct cep_table *tb = cep_table_of(cep_cm_id_cep(id));

	for (int i = 0; i < 2; i++)
		if (W.n[i].cm && cep_cm_table(W.n[i].cm) == tb)
			return i;
	fz_fail("event for an id of no live CM");
}

/* W.mtx held. */
static struct ticket *ticket_new(int node, struct cep_cm_id *id, int channel)
{
	struct ticket *t;

	if (W.nt >= MAXT)
		return NULL;
	t = &W.t[W.nt++];
	memset(t, 0, sizeof(*t));
	t->node = node;
	t->gen = W.n[node].gen;
	t->id = id;
	t->comm_id = cep_cm_id_local_comm_id(id);
	t->channel = channel;
	return t;
}

/* W.mtx held: the ticket an event belongs to. Callback ids carry their
 * ticket as context; a passive id carries its listener's until its first
 * event is seen (channel events queued before that too), so it is found
 * by pointer among the live tickets, or is new. */
static struct ticket *ticket_of_event(struct cep_cm_id *id, const struct cep_cm_event *ev,
				      int node, int channel)
{
	struct ticket *t = ev->context;

	if (t == &W.overflow)
		return t;
	if (t && t->id == id && t->node == node && t->gen == W.n[node].gen)
		return t; /* also a dead one: an event after DESTROYED */
	for (int i = W.nt - 1; i >= 0; i--)
		if (W.t[i].id == id && !W.t[i].dead && !W.t[i].cm_gone)
			return &W.t[i];
	if (ev->type == CEP_CM_EV_REQ_RECEIVED || ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED) {
		t = ticket_new(node, id, channel);
		/* The caller sets the id's context (its lock) once W.mtx is
		 * released: a send under an id lock can reach raw_recv, which
		 * takes W.mtx. */
		return t ? t : &W.overflow;
	}
	fz_fail("%s for an id the fuzzer never saw (%p)", cep_cm_event_name(ev->type), (void *)id);
}

/* What a node does by itself after an event (outside W.mtx). */
enum act { ACT_NONE, ACT_ACCEPT, ACT_REJECT, ACT_MRA, ACT_RTU, ACT_DESTROY, ACT_RETURN1,
	   ACT_DREP, ACT_APR, ACT_SIDR_REP, ACT_DISCONNECT };

/* W.mtx held: the live listener ticket of @lid, to be destroyed by the
 * caller (FZ_PX_UNLISTEN), or NULL. */
static struct ticket *unlisten_locked(struct cep_cm_id *lid)
{
	for (int i = 0; lid && i < W.nt; i++) {
		struct ticket *l = &W.t[i];

		if (l->id == lid && l->listener && !l->dead && !l->cm_gone && !l->destroy_called &&
		    !l->busy) {
			l->destroy_called = 1;
			return l;
		}
	}
	return NULL;
}

/* W.mtx held: account for @ev on @t, check the rules, choose the action
 * (and in *@also a listener to destroy). */
static enum act account(struct ticket *t, struct cep_cm_id *id, const struct cep_cm_event *ev,
			struct node *nd, struct ticket **also)
{
	int end;

	tr("    event %s id %#x (ticket %td)%s\n", cep_cm_event_name(ev->type),
	   cep_cm_id_local_comm_id(id), t == &W.overflow ? -1 : t - W.t,
	   t->dead ? " AFTER DESTROYED" : "");
	if (t == &W.overflow)
		return ev->type == CEP_CM_EV_DESTROYED ? ACT_NONE : ACT_RETURN1;
	if (t->dead)
		fz_fail("%s for id %#x after its DESTROYED", cep_cm_event_name(ev->type), t->comm_id);
	if (ev->type == CEP_CM_EV_DESTROYED) {
		if (++t->destroyed != 1 || !t->destroy_called)
			fz_fail("DESTROYED #%d for id %#x (destroy called: %d)", t->destroyed,
				t->comm_id, t->destroy_called);
		t->dead = 1;
		return ACT_NONE;
	}
	if (t->strict)
		fz_fail("%s for id %#x after cep_cm_destroy_id returned", cep_cm_event_name(ev->type),
			t->comm_id);
	if (W.draining || t->destroy_called)
		return ACT_NONE;
	end = ev->type == CEP_CM_EV_REJ_RECEIVED || ev->type == CEP_CM_EV_REQ_ERROR ||
	      ev->type == CEP_CM_EV_REP_ERROR || ev->type == CEP_CM_EV_TIMEWAIT_EXIT ||
	      ev->type == CEP_CM_EV_QP_DESTROYED || ev->type == CEP_CM_EV_DREQ_ERROR ||
	      ev->type == CEP_CM_EV_SIDR_REQ_ERROR || ev->type == CEP_CM_EV_SIDR_REP_RECEIVED;
	switch (ev->type) {
	case CEP_CM_EV_REQ_RECEIVED:
		if (nd->pol_x & FZ_PX_UNLISTEN)
			*also = unlisten_locked(ev->listen_id);
		switch ((nd->pol_req & 15) % FZ_P_REQ_N) {
		case FZ_P_REQ_ACCEPT: return ACT_ACCEPT;
		case FZ_P_REQ_REJECT: return ACT_REJECT;
		case FZ_P_REQ_MRA: return ACT_MRA;
		case FZ_P_REQ_RETURN1: return ACT_RETURN1; /* a new id: no RACE uses it */
		case FZ_P_REQ_DESTROY: return ACT_DESTROY;
		default: return ACT_NONE;
		}
	case CEP_CM_EV_REP_RECEIVED:
		switch ((nd->pol_req >> 4) % FZ_P_REP_N) {
		case FZ_P_REP_REJECT: return ACT_REJECT;
		case FZ_P_REP_MRA: return ACT_MRA;
		case FZ_P_REP_RTU: return ACT_RTU;
		case FZ_P_REP_RETURN1: return t->busy ? ACT_NONE : ACT_RETURN1;
		default: return ACT_NONE;
		}
	case CEP_CM_EV_DREQ_RECEIVED:
		return nd->pol_misc & FZ_P_DREP ? ACT_DREP : ACT_NONE;
	case CEP_CM_EV_LAP_RECEIVED:
		return nd->pol_misc & FZ_P_APR ? ACT_APR : ACT_NONE;
	case CEP_CM_EV_SIDR_REQ_RECEIVED:
		return nd->pol_misc & FZ_P_SIDR_REP ? ACT_SIDR_REP : ACT_NONE;
	case CEP_CM_EV_ESTABLISHED:
	case CEP_CM_EV_RTU_RECEIVED:
		return nd->pol_misc & FZ_P_DISCONNECT ? ACT_DISCONNECT : ACT_NONE;
	default:
		return end && (nd->pol_misc & FZ_P_END_DESTROY) && !t->busy ? ACT_RETURN1
									   : ACT_NONE;
	}
}

/* Carry out @a on @id (no lock held; the caller owns the event). Returns
 * the callback verdict. */
static int act_on(enum act a, struct ticket *t, struct cep_cm_id *id, struct node *nd,
		  int in_callback)
{
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .starting_psn = 7,
					  .responder_resources = 2, .initiator_depth = 2 };

	switch (a) {
	case ACT_NONE:
		return 0;
	case ACT_ACCEPT:
		ap.qpn = QPN0 + ((nd->pol_misc >> 5) & 7);
		api("policy accept", cep_cm_accept(id, &ap));
		return 0;
	case ACT_REJECT:
		api("policy reject", cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, "no", 2, NULL, 0));
		return 0;
	case ACT_MRA:
		api("policy mra", cep_cm_mra(id, 14, NULL, 0));
		return 0;
	case ACT_RTU:
		api("policy rtu", cep_cm_rtu(id, NULL, 0));
		return 0;
	case ACT_DREP:
		api("policy drep", cep_cm_drep(id, NULL, 0));
		return 0;
	case ACT_APR:
		api("policy apr", cep_cm_apr(id, CEP_APR_SUCCESS, NULL, 0, NULL, 0));
		return 0;
	case ACT_SIDR_REP:
		api("policy sidr_rep", cep_cm_sidr_rep(id, CEP_SIDR_SUCCESS, QPN0, 0x11, NULL, 0));
		return 0;
	case ACT_DISCONNECT:
		api("policy disconnect", cep_cm_disconnect(id, NULL, 0));
		return 0;
	case ACT_DESTROY:
	case ACT_RETURN1:
		pthread_mutex_lock(&W.mtx);
		t->destroy_called = 1;
		pthread_mutex_unlock(&W.mtx);
		if (a == ACT_RETURN1 && in_callback)
			return 1;
		if (api("policy destroy", cep_cm_destroy_id(id)))
			fz_fail("cep_cm_destroy_id refused a live id");
		if (!in_callback) { /* the application's thread: cm.h's promise holds */
			pthread_mutex_lock(&W.mtx);
			t->strict = 1;
			pthread_mutex_unlock(&W.mtx);
		}
		return 0;
	}
	return 0;
}

/* The listener @l's own destroy (FZ_PX_UNLISTEN), from an event of
 * another id. */
static void unlisten(struct ticket *l)
{
	if (l && api("policy unlisten", cep_cm_destroy_id(l->id)))
		fz_fail("cep_cm_destroy_id refused a live listener");
}

static int on_event(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	int node = node_of_id(id);
	struct ticket *t, *also = NULL;
	enum act a;
	int verdict;

	pthread_mutex_lock(&W.mtx);
	t = ticket_of_event(id, ev, node, 0);
	a = account(t, id, ev, &W.n[node], &also);
	pthread_mutex_unlock(&W.mtx);
	if (ev->context != t)
		cep_cm_id_set_context(id, t); /* a passive id's first event */
	verdict = act_on(a, t, id, &W.n[node], 1);
	unlisten(also);
	return verdict;
}

/* Main thread: take and handle @max events of node @k's channel. */
static void poll_channel(int k, int max)
{
	struct cep_cm_event *ev;

	for (int i = 0; i < max && W.n[k].ch; i++) {
		struct pollfd pfd = { .fd = cep_cm_channel_fd(W.n[k].ch), .events = POLLIN };
		struct ticket *t, *also = NULL;
		enum act a;
		int readable = poll(&pfd, 1, 0) == 1, rc = cep_cm_get_event(W.n[k].ch, &ev);

		/* All is quiet here: cm.h, the fd is readable while an event waits. */
		if (readable != (rc == 0))
			fz_fail("channel fd %s, cep_cm_get_event %d", readable ? "readable" : "not readable",
				rc);
		if (rc)
			break;

		pthread_mutex_lock(&W.mtx);
		t = ticket_of_event(ev->id, ev, k, 1);
		a = account(t, ev->id, ev, &W.n[k], &also);
		pthread_mutex_unlock(&W.mtx);
		if (ev->context != t && ev->type != CEP_CM_EV_DESTROYED)
			cep_cm_id_set_context(ev->id, t);
		if (t == &W.overflow && a == ACT_RETURN1)
			cep_cm_destroy_id(ev->id);
		else
			act_on(a, t, ev->id, &W.n[k], 0);
		unlisten(also);
		cep_cm_ack_event(ev);
		settle();
	}
}

/* ---- the world ------------------------------------------------------------ */

/* W.mtx held: the raw port sent a @type with @tid in this input. */
static int raw_sent(enum cep_msg_type type, uint64_t tid)
{
	for (unsigned i = 0; i < W.nsent; i++)
		if (W.sent[i].type == type && W.sent[i].tid == tid)
			return 1;
	return 0;
}

/* A response to the raw port must carry the TID of the request it answers
 * (IBTA vol. 1 13.4.6.4; the kernel sets it in every handler): a REP or
 * an MRA of a REQ echoes a REQ the port sent, a SIDR_REP a SIDR_REQ, a
 * DREP a DREQ, an APR or an MRA of a LAP a LAP. (REJ and an MRA of a REP
 * answer transactions the port may have answered with any TID itself.)
 * W.mtx held. */
static void check_tid_echo(const struct cep_msg *m)
{
	enum cep_msg_type want = CEP_MSG_INVALID;

	switch (m->type) {
	case CEP_MSG_REP: want = CEP_MSG_REQ; break;
	case CEP_MSG_SIDR_REP: want = CEP_MSG_SIDR_REQ; break;
	case CEP_MSG_DREP: want = CEP_MSG_DREQ; break;
	case CEP_MSG_APR: want = CEP_MSG_LAP; break;
	case CEP_MSG_MRA:
		if (m->u.mra.message_mraed == CEP_MSG_CODE_REQ)
			want = CEP_MSG_REQ;
		else if (m->u.mra.message_mraed == CEP_MSG_CODE_OTHER)
			want = CEP_MSG_LAP;
		break;
	default:
		break;
	}
	if (want != CEP_MSG_INVALID && !raw_sent(want, m->hdr.tid))
		fz_fail("%s to the raw port with TID %#llx: no %s it sent had that TID",
			cep_msg_name(m->type), (unsigned long long)m->hdr.tid, cep_msg_name(want));
}

static void raw_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	struct cep_msg m;
	enum cep_wire_error why;

	(void)ctx;
	(void)from;
	/* Only the CMs send to the raw port, and the fabric never corrupts. */
	if (cep_msg_decode(mad, len, &m, &why))
		fz_fail("a CM sent the raw port a MAD that does not decode: %s",
			cep_wire_error_name(why));
	pthread_mutex_lock(&W.mtx);
	W.seen[W.nseen++ % NSEEN] = m;
	check_tid_echo(&m);
	pthread_mutex_unlock(&W.mtx);
}

static void node_up(int k)
{
	struct node *nd = &W.n[k];
	struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = guids[k], .lid = lids[k],
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = W.workers, .queue_depth = 256,
				  .table_size = 16, .mra_service_timeout = 16,
				  .auto_mra = (uint8_t)nd->auto_mra, .clock = W.clk };

	if (cep_fabric_port_create(W.fab, &pa, &nd->tp))
		fz_fail("port create");
	ca.transport = nd->tp;
	if (cep_cm_create(&ca, &nd->cm))
		fz_fail("cm create");
	for (uint32_t q = 0; q < NQP; q++)
		if (cep_cm_qp_register(nd->cm, QPN0 + q))
			fz_fail("qp register");
}

static void world_up(uint8_t header)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 0x5eed0000u | header };
	struct cep_fabric_port_attr pc = { .size = sizeof(pc), .ca_guid = guids[FZ_C],
					   .lid = lids[FZ_C], .port_num = 1,
					   .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_table_attr ta = { .size = sizeof(ta), .initial_size = 16 };

	memset(&W.n, 0, sizeof(W.n));
	memset(&W.seen, 0, sizeof(W.seen));
	memset(&W.slot, 0, sizeof(W.slot));
	memset(&W.core_ids, 0, sizeof(W.core_ids));
	W.nt = W.racing = W.draining = W.opno = 0;
	W.nseen = W.nsent = 0;
	W.next_tid = 0x77000000ull;
	W.workers = force_workers ? (unsigned)force_workers : (header & FZ_H_WORKERS2) ? 2 : 1;
	W.n[FZ_A].auto_mra = !!(header & FZ_H_AUTO_MRA_A);
	W.n[FZ_B].auto_mra = !!(header & FZ_H_AUTO_MRA_B);
	if (cep_clock_create(1000000000ull, &W.clk))
		fz_fail("clock create");
	fa.clock = W.clk;
	if (cep_fabric_create(&fa, &W.fab))
		fz_fail("fabric create");
	node_up(FZ_A);
	node_up(FZ_B);
	if (cep_fabric_port_create(W.fab, &pc, &W.c) || W.c->ops->start(W.c, raw_recv, NULL))
		fz_fail("raw port");
	for (int k = 0; k < 2; k++)
		if ((header & (k ? FZ_H_CHANNEL_B : FZ_H_CHANNEL_A)) &&
		    cep_cm_channel_create(&W.n[k].ch))
			fz_fail("channel create");
	if (cep_table_create(&ta, &W.core))
		fz_fail("core table");
	for (uint32_t q = 0; q < NCQPN; q++)
		if (cep_qp_register(W.core, CORE_QPN0 + q))
			fz_fail("core qp register");
	tr("input: %u worker(s) per node, header %#x\n", W.workers, header);
}

/* ---- selecting what an operation acts on -------------------------------- */

enum pick { P_ALIVE, P_LISTENER, P_AGAIN };

/* A ticket matching @how, chosen by selector @sel (fuzz_cm.h), or NULL.
 * W.mtx held. */
static struct ticket *pick_locked(uint8_t sel, enum pick how)
{
	int idx[MAXT], n = 0;

	for (int i = 0; i < W.nt; i++) {
		struct ticket *t = &W.t[i];
		int ok = !t->dead && !t->cm_gone && t->id;

		if (how == P_AGAIN)
			ok = ok && t->destroy_called && t->channel;
		else
			ok = ok && !t->destroy_called && (how != P_LISTENER || t->listener);
		if (ok)
			idx[n++] = i;
	}
	if (!n)
		return NULL;
	int k = (sel & 0x7f) % n;

	return &W.t[idx[sel & FZ_T_LAST ? n - 1 - k : k]];
}

/* Values the raw port can use: what is live, what it has seen. Fixed
 * values first, then the newest ids and MADs first, so a selector keeps
 * its meaning while a program grows (fuzz_cm.h, gen_cm_seeds.c):
 *   comm: 0x5000..0x5003 (the raw port's own), 0, ids (newest first),
 *         IDs in received MADs (newest first);
 *   qpn:  QPN0.., CQPN0.., QPNs in received MADs;
 *   tid:  fresh, TIDs of received MADs (newest first). */
struct pools {
	uint32_t comm[5 + MAXT + NSEEN];
	unsigned ncomm;
	uint32_t qpn[NQP + NCQP + NSEEN];
	unsigned nqpn;
	uint64_t tid[NSEEN + 1];
	unsigned ntid;
};

static void pools_fill(struct pools *p)
{
	p->ncomm = p->nqpn = p->ntid = 0;
	for (uint32_t k = 0; k < 4; k++)
		p->comm[p->ncomm++] = 0x5000 + k;
	p->comm[p->ncomm++] = 0;
	for (uint32_t q = 0; q < NQP; q++)
		p->qpn[p->nqpn++] = QPN0 + q;
	for (uint32_t q = 0; q < NCQP; q++)
		p->qpn[p->nqpn++] = CQPN0 + q;
	p->tid[p->ntid++] = 0;
	pthread_mutex_lock(&W.mtx);
	for (int i = W.nt - 1; i >= 0; i--)
		p->comm[p->ncomm++] = W.t[i].comm_id;
	for (unsigned i = 0; i < NSEEN && i < W.nseen; i++) {
		const struct cep_msg *m = &W.seen[(W.nseen - 1 - i) % NSEEN];
		uint32_t c = 0, q = 0;

		switch (m->type) {
		case CEP_MSG_REQ: c = m->u.req.local_comm_id; q = m->u.req.local_qpn; break;
		case CEP_MSG_REP: c = m->u.rep.local_comm_id; q = m->u.rep.local_qpn; break;
		case CEP_MSG_DREQ: c = m->u.dreq.local_comm_id; break;
		case CEP_MSG_LAP: c = m->u.lap.local_comm_id; break;
		case CEP_MSG_MRA: c = m->u.mra.local_comm_id; break;
		case CEP_MSG_REJ: c = m->u.rej.local_comm_id; break;
		case CEP_MSG_RTU: c = m->u.rtu.local_comm_id; break;
		case CEP_MSG_DREP: c = m->u.drep.local_comm_id; break;
		case CEP_MSG_APR: c = m->u.apr.local_comm_id; break;
		case CEP_MSG_SIDR_REQ: c = m->u.sidr_req.request_id; break;
		default: break;
		}
		if (c)
			p->comm[p->ncomm++] = c;
		if (q)
			p->qpn[p->nqpn++] = q;
		p->tid[p->ntid++] = m->hdr.tid;
	}
	pthread_mutex_unlock(&W.mtx);
}

/* ---- operations --------------------------------------------------------- */

struct op {
	enum fz_op code;
	uint8_t a[8];
	struct ticket *t;   /* resolved before a RACE starts */
};

static int core_op(enum fz_op c)
{
	return c >= FZ_CORE_CREATE && c <= FZ_CORE_QP_CYCLE;
}

static void conn_param(struct cep_cm_conn_param *p, int node, const struct op *o)
{
	const struct fz_profile *pf = &fz_profiles[o->a[3] % FZ_NPROFILES];
	int peer = o->a[2] % 3;
	static const char pd[] = "fuzz-cm private data";

	memset(p, 0, sizeof(*p));
	p->size = sizeof(*p);
	p->service_id = sids[!!(o->a[4] & FZ_C_SID1)];
	p->qpn = QPN0 + o->a[1] % (NQP + 1); /* NQP: never registered */
	p->starting_psn = 0x1234;
	p->responder_resources = 4;
	p->initiator_depth = 4;
	p->remote_cm_response_timeout = pf->remote_tmo;
	p->local_cm_response_timeout = pf->local_tmo;
	p->max_cm_retries = pf->retries;
	p->packet_life_time = pf->pkt_life;
	p->transport_service_type = o->a[4] & FZ_C_UC ? CEP_TS_UC : CEP_TS_RC;
	p->manual_rtu = o->a[4] & FZ_C_MANUAL_RTU;
	p->primary.local_lid = lids[node];
	p->primary.remote_lid = lids[peer];
	p->primary.subnet_local = 1;
	p->primary.local_ack_timeout = pf->ack_tmo;
	p->primary.packet_rate = 3;
	if (o->a[4] & FZ_C_ALT_PATH) {
		p->alternate = p->primary;
		p->alternate.sl = 1;
	}
	if (o->a[4] & FZ_C_PDATA) {
		p->private_data = pd;
		p->private_data_len = sizeof(pd);
	}
}

/* Message fields from the pools; @m is initialised by the caller. */
static void raw_fill(struct cep_msg *m, const struct op *o, const struct pools *p, int to)
{
	uint32_t local = p->comm[o->a[2] % p->ncomm], remote = p->comm[o->a[3] % p->ncomm];
	uint32_t qpn = p->qpn[o->a[4] % p->nqpn];
	static const uint64_t g[5] = { 0x0002c90300000a01ull, 0x0002c90300000b02ull,
				       0x0002c90300000c03ull, 0, 0x1234 };
	uint64_t guid = g[o->a[5] % 5];
	uint8_t misc = o->a[6];

	switch (m->type) {
	case CEP_MSG_REQ: {
		const struct fz_profile *pf = &fz_profiles[(misc >> 4) % FZ_NPROFILES];

		m->u.req.local_comm_id = local;
		m->u.req.service_id = sids[misc & 1];
		m->u.req.local_ca_guid = guid;
		m->u.req.local_qpn = qpn;
		m->u.req.starting_psn = 1;
		m->u.req.remote_cm_response_timeout = pf->remote_tmo;
		m->u.req.local_cm_response_timeout = pf->local_tmo;
		m->u.req.max_cm_retries = pf->retries;
		m->u.req.transport_service_type = (misc >> 1) & 3; /* RC, UC, RD, 3 */
		m->u.req.partition_key = 0xffff;
		m->u.req.path_mtu = 5;
		m->u.req.primary.local_lid = lids[FZ_C];
		m->u.req.primary.remote_lid = lids[to];
		m->u.req.primary.subnet_local = 1;
		m->u.req.primary.local_ack_timeout = pf->ack_tmo;
		break;
	}
	case CEP_MSG_MRA:
		m->u.mra.local_comm_id = local;
		m->u.mra.remote_comm_id = remote;
		m->u.mra.message_mraed = misc % 3;
		m->u.mra.service_timeout = misc >> 3;
		break;
	case CEP_MSG_REJ:
		m->u.rej.local_comm_id = local;
		m->u.rej.remote_comm_id = misc & 0x80 ? 0 : remote;
		m->u.rej.message_rejected = (misc >> 5) % 3;
		m->u.rej.reason = (uint16_t)(1 + (misc & 31) % CEP_REJ_REASON_MAX);
		if (m->u.rej.reason == CEP_REJ_TIMEOUT) {
			m->u.rej.reject_info_length = 8;
			for (int i = 0; i < 8; i++)
				m->u.rej.ari[i] = (uint8_t)(guid >> (56 - 8 * i));
		}
		break;
	case CEP_MSG_REP:
		m->u.rep.local_comm_id = local;
		m->u.rep.remote_comm_id = remote;
		m->u.rep.local_qpn = qpn;
		m->u.rep.local_ca_guid = guid;
		m->u.rep.starting_psn = 5;
		m->u.rep.target_ack_delay = misc & 31;
		m->u.rep.failover_accepted = (misc >> 5) % 3;
		break;
	case CEP_MSG_RTU:
		m->u.rtu.local_comm_id = local;
		m->u.rtu.remote_comm_id = remote;
		break;
	case CEP_MSG_DREQ:
		m->u.dreq.local_comm_id = local;
		m->u.dreq.remote_comm_id = remote;
		m->u.dreq.remote_qpn_eecn = qpn;
		break;
	case CEP_MSG_DREP:
		m->u.drep.local_comm_id = local;
		m->u.drep.remote_comm_id = remote;
		break;
	case CEP_MSG_LAP:
		m->u.lap.local_comm_id = local;
		m->u.lap.remote_comm_id = remote;
		m->u.lap.remote_qpn_eecn = qpn;
		m->u.lap.remote_cm_response_timeout = misc & 31;
		m->u.lap.alternate.local_lid = lids[FZ_C];
		m->u.lap.alternate.remote_lid = lids[to];
		m->u.lap.alternate.subnet_local = 1;
		break;
	case CEP_MSG_APR:
		m->u.apr.local_comm_id = local;
		m->u.apr.remote_comm_id = remote;
		m->u.apr.ap_status = (uint8_t)(misc % (CEP_APR_STATUS_MAX + 1));
		break;
	case CEP_MSG_SIDR_REQ:
		m->u.sidr_req.request_id = local;
		m->u.sidr_req.service_id = sids[misc & 1];
		m->u.sidr_req.partition_key = 0xffff;
		break;
	case CEP_MSG_SIDR_REP:
		m->u.sidr_rep.request_id = remote;
		m->u.sidr_rep.status = (uint8_t)(misc % (CEP_SIDR_STATUS_MAX + 1));
		m->u.sidr_rep.qpn = qpn;
		m->u.sidr_rep.service_id = sids[misc & 1];
		break;
	default:
		break;
	}
}

static void op_raw(const struct op *o)
{
	static const enum cep_msg_type types[] = {
		CEP_MSG_INVALID, CEP_MSG_REQ, CEP_MSG_MRA, CEP_MSG_REJ, CEP_MSG_REP, CEP_MSG_RTU,
		CEP_MSG_DREQ, CEP_MSG_DREP, CEP_MSG_LAP, CEP_MSG_APR, CEP_MSG_SIDR_REQ,
		CEP_MSG_SIDR_REP };
	struct pools *p = malloc(sizeof(*p));
	struct cep_msg m;
	uint8_t mad[CEP_MAD_SIZE];
	int to = o->a[1] & 1;
	struct cep_mad_addr dst = { .lid = lids[to], .qpn = 1, .qkey = CEP_QP1_QKEY };
	enum cep_msg_type type = types[o->a[0] % 12];
	uint64_t tid;

	if (!p)
		return;
	pools_fill(p);
	tid = p->tid[o->a[7] % p->ntid];
	if (!tid)
		tid = W.next_tid++;
	/* A damaged MAD: a valid message with one byte overwritten. */
	cep_msg_init(&m, type == CEP_MSG_INVALID ? types[1 + o->a[6] % 11] : type, tid);
	raw_fill(&m, o, p, to);
	free(p);
	if (cep_msg_encode(&m, mad))
		return; /* a field out of range for the encoder: nothing sent */
	if (type == CEP_MSG_INVALID)
		mad[o->a[7] % CEP_MAD_SIZE] = o->a[2];
	tr("    raw %s to %c\n", type == CEP_MSG_INVALID ? "damaged" : cep_msg_name(type),
	   "AB"[to]);
	if (cep_msg_decode(mad, sizeof(mad), &m, NULL) == 0) { /* what the peer will see */
		pthread_mutex_lock(&W.mtx);
		if (W.nsent < MAXOPS) {
			W.sent[W.nsent].tid = m.hdr.tid;
			W.sent[W.nsent++].type = (uint8_t)m.type;
		}
		pthread_mutex_unlock(&W.mtx);
	}
	W.c->ops->send(W.c, mad, sizeof(mad), &dst);
}

static void op_faults(const struct op *o)
{
	static const double loss[] = { 0, 0.05, 0.2, 0.5, 1.0 }, dup[] = { 0, 0.05, 0.2, 0.5 },
			    reo[] = { 0, 0.1, 0.3, 0.7 };
	static const uint32_t delay[] = { 0, 500, 5000, 50000 };
	struct cep_fabric_faults f = { .size = sizeof(f), .loss = loss[o->a[0] % 5],
				       .duplicate = dup[o->a[1] % 4], .reorder = reo[o->a[2] % 4],
				       .delay_max_us = delay[o->a[3] % 4], .hold_max_us = 2000 };

	api("set faults", cep_fabric_set_faults(W.fab, &f));
}

static void advance_ms(uint64_t ms)
{
	settle();
	tr("    advance %llu ms\n", (unsigned long long)ms);
	if (cep_clock_advance_ns(W.clk, ms * 1000000ull))
		fz_fail("clock advance");
	settle();
}

/* Drop every event queued on node @k's channel (the application reads
 * them), e.g. before its CM goes away. */
static void drain_channel(int k)
{
	poll_channel(k, 1 << 20);
}

static void op_cm_restart(int k)
{
	struct node *nd = &W.n[k];
	int rc, had_ch = nd->ch != NULL;

	drain_channel(k);
	settle();
	pthread_mutex_lock(&W.mtx);
	for (int i = 0; i < W.nt; i++)
		if (W.t[i].node == k && W.t[i].gen == nd->gen)
			W.t[i].cm_gone = 1;
	pthread_mutex_unlock(&W.mtx);
	rc = cep_cm_destroy(nd->cm);
	tr("    cep_cm_destroy(%c) -> %d\n", "AB"[k], rc);
	if (rc)
		fz_fail("cep_cm_destroy(%c) returned %d (ids or CEPs leaked)", "AB"[k], rc);
	nd->cm = NULL;
	nd->tp->ops->destroy(nd->tp);
	if (had_ch) {
		rc = cep_cm_channel_destroy(nd->ch);
		if (rc)
			fz_fail("channel of a destroyed CM still busy: %d", rc);
		nd->ch = NULL;
	}
	nd->gen++;
	node_up(k);
	if (had_ch && cep_cm_channel_create(&nd->ch))
		fz_fail("channel create");
}

/* A reader: an application thread looking CEPs up in every table while
 * the other operation of a RACE runs and settles (lookups are allowed from
 * any thread, cep/table.h). Its keys are taken before the race starts;
 * the ones the other operation touches come first, four times a round. */
struct reader {
	struct cep_table *tb[3];
	uint32_t comm[4 + 16 + MAXT];
	unsigned ncomm, nfocus;
	uint32_t qpn[NQP];
	_Atomic int stop;
	unsigned long rounds;
};

static void reader_prepare(struct reader *r, const struct op *x)
{
	uint32_t focus = 0;

	memset(r, 0, sizeof(*r));
	r->tb[0] = cep_cm_table(W.n[0].cm);
	r->tb[1] = cep_cm_table(W.n[1].cm);
	r->tb[2] = W.core;
	if (x->t)
		focus = x->t->comm_id;
	else if (core_op(x->code) && x->code != FZ_CORE_QP_CYCLE && W.slot[x->a[0] % NSLOT])
		atomic_store(&race_focus, cep_local_comm_id(W.slot[x->a[0] % NSLOT]));
	for (int i = 0; focus && i < 4; i++)
		r->comm[r->ncomm++] = focus;
	r->nfocus = r->ncomm;
	for (int i = 0; i < 16; i++)
		if (W.core_ids[i])
			r->comm[r->ncomm++] = W.core_ids[i];
	pthread_mutex_lock(&W.mtx);
	for (int i = W.nt - 1; i >= 0; i--)
		r->comm[r->ncomm++] = W.t[i].comm_id;
	pthread_mutex_unlock(&W.mtx);
}

/* The two sides of a RACE meet here before their operation: without it
 * the new thread (pthread_create takes about a millisecond under ASan)
 * starts after the other side's operation is over, and nothing races. */
static atomic_int race_gate;

static void race_meet(void)
{
	atomic_fetch_add(&race_gate, 1); /* seq_cst: each side sees the other's arrival */
	while (atomic_load(&race_gate) < 2)
		sched_yield();
}

static void *reader_thread(void *arg)
{
	struct reader *r = arg;
	struct cep *cep;
	uint32_t b;

	race_meet();
	while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		uint32_t f = atomic_load_explicit(&race_focus, memory_order_relaxed);

		for (int i = 0; i < 4; i++)
			if (cep_lookup_comm_id(r->tb[2], f, &cep) == 0)
				cep_put(cep);
		for (unsigned i = 0; i < r->ncomm; i++)
			for (int k = 0; k < 3; k++)
				if ((i < r->nfocus || (r->rounds & 3) == 0) &&
				    cep_lookup_comm_id(r->tb[k], r->comm[i], &cep) == 0)
					cep_put(cep);
		for (uint32_t q = 0; q < NQP; q++)
			for (int k = 0; k < 3; k++) {
				uint32_t qpn = k == 2 ? CORE_QPN0 + q % NCQPN : QPN0 + q;

				if (cep_lookup_qpn(r->tb[k], qpn, &cep) == 0)
					cep_put(cep);
				cep_qp_binding(r->tb[k], qpn, &b);
			}
		r->rounds++;
	}
	return NULL;
}

/* ---- the bare core table -------------------------------------------------
 * The CM binds under the id's lock, which every path that destroys a CM
 * CEP also holds, so some races of the binding protocol (planted bug c)
 * cannot happen through the CM at all; these operations reach them. */

static void core_destroy(int s);

static void core_create(int s)
{
	struct cep *cep;

	if (W.slot[s] || cep_create(W.core, NULL, &cep))
		return;
	W.slot[s] = cep;
	W.core_ids[(unsigned)s * 2 % 16] = cep_local_comm_id(cep);
	atomic_store_explicit(&race_focus, cep_local_comm_id(cep), memory_order_relaxed);
	tr("    core create %d -> %#x\n", s, cep_local_comm_id(cep));
}

/* Bind slot @s to core QPN @q. In a RACE, @reps times: each bind that
 * succeeds but the last is undone, and a CEP that a QP destruction
 * destroyed is replaced by a new one, so the race with the other
 * operation is tried many times (as cep-stress bind-vs-destroy does) and
 * the last bind stays for the check after the race. A replaced CEP is
 * kept (W.grave) and put only after that check, which counts it as held:
 * a bind that lost a reference (planted bug c) shows there as a CEP
 * freed while held, and as a use after free when it is put. @cycles: a
 * QP destruction may run at the same time (else a successful bind must
 * find its own comm ID in the QP's word). */
static void core_bind(int s, uint32_t q, int reps, int cycles)
{
	for (int i = 0; i < reps && W.slot[s]; i++) {
		int rc = cep_bind(W.slot[s], CORE_QPN0 + q);

		tr("    core bind %d %#x -> %d\n", s, CORE_QPN0 + q, rc);
		if (rc && rc != -ENOENT && rc != -ESHUTDOWN && rc != -EISCONN && rc != -EALREADY &&
		    rc != -ESTALE)
			fz_fail("cep_bind: %d", rc);
		if (rc == 0 && !cycles) {
			uint32_t b = 0;

			/* Ours until we unbind it, or RESERVED (cep/table.h); no QP
			 * destruction races with us, so no newer QP record either. */
			if (cep_qp_binding(W.core, CORE_QPN0 + q, &b) == 0 &&
			    b != cep_local_comm_id(W.slot[s]) && b != CEP_BINDING_RESERVED)
				fz_fail("bind of %#x to qpn %#x succeeded but the word holds %#x",
					cep_local_comm_id(W.slot[s]), CORE_QPN0 + q, b);
		}
		if (i == reps - 1)
			break;
		if (rc == 0) {
			cep_unbind(W.slot[s]);
		} else if (cep_is_destroyed(W.slot[s])) {
			pthread_mutex_lock(&W.mtx);
			W.grave[W.ngrave++] = W.slot[s];
			pthread_mutex_unlock(&W.mtx);
			W.slot[s] = NULL;
			core_create(s);
		}
	}
}

/* Put the CEPs kept by core_bind (after the check that counts them). */
static void grave_release(void)
{
	for (int i = 0; i < W.ngrave; i++) {
		cep_destroy(W.grave[i]);
		cep_put(W.grave[i]);
	}
	W.ngrave = 0;
}

static void core_destroy(int s)
{
	if (!W.slot[s])
		return;
	W.core_ids[((unsigned)s * 2 + 1) % 16] = cep_local_comm_id(W.slot[s]);
	cep_destroy(W.slot[s]);
	cep_put(W.slot[s]);
	W.slot[s] = NULL;
}

static void core_qp_cycle(uint32_t q)
{
	uint32_t qpn = CORE_QPN0 + q;
	int rc = cep_qp_destroy_begin(W.core, qpn, NULL);

	if (rc && rc != -ENOENT)
		fz_fail("cep_qp_destroy_begin: %d", rc);
	rc = cep_qp_unregister(W.core, qpn);
	if (rc && rc != -ENOENT && rc != -EBUSY)
		fz_fail("cep_qp_unregister: %d", rc);
	rc = cep_qp_register(W.core, qpn);
	if (rc && rc != -EEXIST)
		fz_fail("cep_qp_register: %d", rc);
}

/* ---- one operation ---------------------------------------------------------- */

/* Which ticket @o acts on (W.mtx held), or NULL: resolved once, before a
 * RACE starts, so both threads know what the other touches. */
static struct ticket *resolve(const struct op *o)
{
	switch (o->code) {
	case FZ_LISTEN: case FZ_CONNECT: case FZ_ACCEPT: case FZ_REJECT: case FZ_MRA:
	case FZ_RTU: case FZ_DISCONNECT: case FZ_DREP: case FZ_LAP: case FZ_APR:
	case FZ_SIDR_REQ: case FZ_SIDR_REP:
		return pick_locked(o->a[0], P_ALIVE);
	case FZ_DESTROY_ID:
		switch (o->a[1] % 4) {
		case FZ_D_LISTENER: return pick_locked(o->a[0], P_LISTENER);
		case FZ_D_AGAIN: return pick_locked(o->a[0], P_AGAIN);
		default: return pick_locked(o->a[0], P_ALIVE);
		}
	default:
		return NULL;
	}
}

static void op_destroy_id(struct ticket *t, int mode)
{
	int rc;

	pthread_mutex_lock(&W.mtx);
	if (mode == FZ_D_AGAIN) {
		pthread_mutex_unlock(&W.mtx);
		rc = api("destroy_id again", cep_cm_destroy_id(t->id));
		if (rc != -EALREADY)
			fz_fail("second cep_cm_destroy_id returned %d, not -EALREADY", rc);
		return;
	}
	if (mode == FZ_D_SYNC && t->channel) {
		pthread_mutex_unlock(&W.mtx);
		if (api("destroy_id_sync (channel id)", cep_cm_destroy_id_sync(t->id)) != -EINVAL)
			fz_fail("cep_cm_destroy_id_sync accepted a channel id");
		return;
	}
	t->destroy_called = 1;
	pthread_mutex_unlock(&W.mtx);
	rc = mode == FZ_D_SYNC ? api("destroy_id_sync", cep_cm_destroy_id_sync(t->id))
			       : api("destroy_id", cep_cm_destroy_id(t->id));
	if (rc)
		fz_fail("destroying a live id returned %d", rc);
	/* cm.h: once it has returned (called from a thread that is not a
	 * worker), no event of the id but DESTROYED reaches the user, in a
	 * RACE too (it waits for a running callback; a channel's queued events
	 * are dropped, and channels are polled only when all is quiet). */
	pthread_mutex_lock(&W.mtx);
	t->strict = 1;
	pthread_mutex_unlock(&W.mtx);
}

static void exec_op(const struct op *o)
{
	struct ticket *t = o->t;
	struct cep_cm_id *id = t ? t->id : NULL;
	int node = t ? t->node : o->a[0] & 1;
	struct node *nd = &W.n[node];
	static const char pd[] = "pdata";

	if (t)
		tr("  %s ticket %td (%c id %#x)\n", fz_op_names[o->code], t - W.t, "AB"[t->node],
		   t->comm_id);
	else
		tr("  %s %02x %02x %02x %02x %02x\n", fz_op_names[o->code], o->a[0], o->a[1],
		   o->a[2], o->a[3], o->a[4]);
	switch (o->code) {
	case FZ_CREATE_ID: {
		struct cep_cm_id_attr ia = { .size = sizeof(ia) };
		int chan = (o->a[1] & 1) && nd->ch;
		struct ticket *nt;

		pthread_mutex_lock(&W.mtx);
		nt = W.nt < MAXT ? &W.t[W.nt] : NULL; /* filled in below */
		pthread_mutex_unlock(&W.mtx);
		if (!nt)
			return;
		if (chan)
			ia.channel = nd->ch;
		else
			ia.handler = on_event;
		ia.context = NULL; /* set once the ticket exists */
		if (api("create_id", cep_cm_create_id(nd->cm, &ia, &id)))
			fz_fail("create_id failed");
		pthread_mutex_lock(&W.mtx);
		nt = ticket_new(node, id, chan);
		pthread_mutex_unlock(&W.mtx);
		if (!nt)
			fz_fail("tickets ran out under a race");
		cep_cm_id_set_context(id, nt);
		return;
	}
	case FZ_LISTEN: {
		uint64_t mask = o->a[1] & 0x80 ? 0xffffffffffff0000ull : ~0ull;

		if (t && api("listen", cep_cm_listen(id, sids[o->a[1] & 1], mask)) == 0) {
			pthread_mutex_lock(&W.mtx);
			t->listener = 1;
			pthread_mutex_unlock(&W.mtx);
		}
		return;
	}
	case FZ_CONNECT: {
		struct cep_cm_conn_param p;

		if (!t)
			return;
		conn_param(&p, node, o);
		api("connect", cep_cm_connect(id, &p));
		return;
	}
	case FZ_ACCEPT: {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .starting_psn = 9,
						  .responder_resources = 2, .initiator_depth = 2,
						  .manual_drep = o->a[2] & FZ_A_MANUAL_DREP,
						  .failover_accepted = (o->a[2] >> 1) % 3 };

		if (!t)
			return;
		ap.qpn = QPN0 + o->a[1] % (NQP + 1);
		api("accept", cep_cm_accept(id, &ap));
		return;
	}
	case FZ_REJECT:
		if (t)
			api("reject", cep_cm_reject(id, o->a[1] % (CEP_REJ_REASON_MAX + 2), "ari", 3,
						    pd, sizeof(pd)));
		return;
	case FZ_MRA:
		if (t)
			api("mra", cep_cm_mra(id, o->a[1] % 33, NULL, 0));
		return;
	case FZ_RTU:
		if (t)
			api("rtu", cep_cm_rtu(id, pd, sizeof(pd)));
		return;
	case FZ_DISCONNECT:
		if (t)
			api("disconnect", cep_cm_disconnect(id, pd, sizeof(pd)));
		return;
	case FZ_DREP:
		if (t)
			api("drep", cep_cm_drep(id, NULL, 0));
		return;
	case FZ_LAP: {
		struct cep_path alt = { .local_lid = lids[node], .remote_lid = lids[!node],
					.subnet_local = 1, .sl = 2, .local_ack_timeout = 10 };

		if (t)
			api("lap", cep_cm_lap(id, &alt, o->a[1] % 33, NULL, 0));
		return;
	}
	case FZ_APR:
		if (t)
			api("apr", cep_cm_apr(id, o->a[1] % (CEP_APR_STATUS_MAX + 2), NULL, 0, NULL, 0));
		return;
	case FZ_SIDR_REQ: {
		struct cep_mad_addr to = { .lid = lids[o->a[1] % 3] };
		const struct fz_profile *pf = &fz_profiles[o->a[3] % FZ_NPROFILES];
		struct cep_cm_sidr_param sp = { .size = sizeof(sp), .service_id = sids[o->a[2] & 1],
						.timeout = pf->remote_tmo,
						.max_cm_retries = pf->retries, .peer = &to };

		if (t)
			api("sidr_req", cep_cm_sidr_req(id, &sp));
		return;
	}
	case FZ_SIDR_REP:
		if (t)
			api("sidr_rep", cep_cm_sidr_rep(id, o->a[1] % (CEP_SIDR_STATUS_MAX + 2),
							QPN0, 0x1111, NULL, 0));
		return;
	case FZ_DESTROY_ID:
		if (t)
			op_destroy_id(t, o->a[1] % 4);
		return;
	case FZ_QP_DESTROY:
		api("qp_destroy", cep_cm_qp_destroy(nd->cm, QPN0 + o->a[1] % NQP));
		return;
	case FZ_QP_REGISTER:
		api("qp_register", cep_cm_qp_register(nd->cm, QPN0 + o->a[1] % NQP));
		return;
	case FZ_CHANNEL:
		switch (o->a[1] % 4) {
		case FZ_CH_POLL_ALL: drain_channel(node); return;
		case FZ_CH_POLL_ONE: poll_channel(node, 1); return;
		case FZ_CH_DESTROY:
			if (nd->ch && api("channel_destroy", cep_cm_channel_destroy(nd->ch)) == 0)
				nd->ch = NULL;
			return;
		default:
			if (!nd->ch && cep_cm_channel_create(&nd->ch))
				fz_fail("channel create");
			return;
		}
	case FZ_CM_RESTART:
		op_cm_restart(node);
		return;
	case FZ_RAW:
		op_raw(o);
		return;
	case FZ_FAULTS:
		op_faults(o);
		return;
	case FZ_ADVANCE:
		advance_ms(fz_steps_ms[o->a[0] % FZ_NSTEPS]);
		return;
	case FZ_POLICY:
		pthread_mutex_lock(&W.mtx);
		nd->pol_req = o->a[1];
		nd->pol_misc = o->a[2];
		nd->pol_x = o->a[3];
		pthread_mutex_unlock(&W.mtx);
		return;
	case FZ_LOOKUPS:
		return; /* a reader only in a RACE */
	case FZ_CORE_CREATE:
		core_create(o->a[0] % NSLOT);
		return;
	case FZ_CORE_BIND:
		core_bind(o->a[0] % NSLOT, o->a[1] % NCQPN, W.racing ? RACE_REPS : 1,
			  W.racing && W.race_cycles);
		return;
	case FZ_CORE_UNBIND:
		if (W.slot[o->a[0] % NSLOT])
			cep_unbind(W.slot[o->a[0] % NSLOT]);
		return;
	case FZ_CORE_DESTROY:
		/* In a RACE (next to a reader), destroy and make again. */
		for (int i = 0; i < (W.racing ? RACE_REPS : 1); i++) {
			if (i)
				core_create(o->a[0] % NSLOT);
			core_destroy(o->a[0] % NSLOT);
		}
		return;
	case FZ_CORE_QP_CYCLE:
		for (int i = 0; i < (W.racing ? RACE_REPS : 1); i++)
			core_qp_cycle(o->a[0] % NCQPN);
		return;
	case FZ_RACE:
	case FZ_NOPS:
		return;
	}
}

/* ---- RACE: two operations at once ------------------------------------------ */

/* Operations that may run next to another one. */
static int raceable(enum fz_op c)
{
	switch (c) {
	case FZ_CHANNEL: case FZ_CM_RESTART: case FZ_POLICY: case FZ_RACE: case FZ_ADVANCE:
	case FZ_NOPS:
		return 0;
	default:
		return 1;
	}
}

/* Two operations may not race when the fuzzer itself would misuse the API:
 * an id used by one while the other destroys it, a core CEP put while the
 * other uses it, two ids created at once (tickets are appended). */
static int conflict(const struct op *x, const struct op *y)
{
	if (x->t && x->t == y->t &&
	    (x->code == FZ_DESTROY_ID || y->code == FZ_DESTROY_ID))
		return 1;
	if (x->code == FZ_CREATE_ID && y->code == FZ_CREATE_ID)
		return 1;
	if ((x->code == FZ_CORE_DESTROY || y->code == FZ_CORE_DESTROY ||
	     x->code == FZ_CORE_CREATE || y->code == FZ_CORE_CREATE) &&
	    (x->code >= FZ_CORE_CREATE && x->code <= FZ_CORE_DESTROY) &&
	    (y->code >= FZ_CORE_CREATE && y->code <= FZ_CORE_DESTROY) &&
	    x->a[0] % NSLOT == y->a[0] % NSLOT)
		return 1;
	return 0;
}

static void *race_thread(void *arg)
{
	race_meet();
	exec_op(arg);
	return NULL;
}

/* Check a table at a quiet point in the middle of a run. A table may
 * hold destroyed CEPs that the application still references: for the core
 * table, the slots whose CEP a QP destruction destroyed (counted here);
 * for a CM table, ids whose QP was destroyed and events queued on a
 * channel, so there the checker's "allocated - freed != reachable" clause
 * is left to the end of the input, when nothing is held. Every other
 * clause must hold at once. */
static void check_table_midrun(struct cep_table *tb, const char *name, int cm)
{
	char msg[1024], copy[1024], *clause, *save = NULL;
	unsigned long long held = 0, al, fr, re;

	if (cep_table_check(tb, msg, sizeof(msg)) == 0)
		return;
	for (int s = 0; !cm && s < NSLOT; s++)
		held += W.slot[s] && cep_is_destroyed(W.slot[s]);
	if (!cm)
		held += (unsigned long long)W.ngrave;
	memcpy(copy, msg, sizeof(copy));
	for (clause = strtok_r(copy, ";", &save); clause; clause = strtok_r(NULL, ";", &save)) {
		while (*clause == ' ')
			clause++;
		if (!*clause)
			continue;
		if (sscanf(clause, "allocated %llu - freed %llu != %llu reachable", &al, &fr, &re) == 3 &&
		    (cm || al - fr - re == held))
			continue;
		fz_fail("table %s: %s", name, msg);
	}
}

static void *check_midrun_thread(void *arg)
{
	int k = (int)(long)arg;

	if (k == 2)
		check_table_midrun(W.core, "core", 0);
	else
		check_table_midrun(cep_cm_table(W.n[k].cm), k ? "B" : "A", 1);
	return NULL;
}

/* After a RACE: check the tables its operations used (both CM nodes for a
 * CM operation, which reaches the peer too; the core table for a core
 * one), in parallel, since each check waits for the RCU callbacks. */
static void check_tables_midrun(const struct op *x, const struct op *y)
{
	pthread_t th[3];
	int use[3] = { 0, 0, 0 };

	for (int i = 0; i < 2; i++) {
		enum fz_op c = (i ? y : x)->code;

		if (core_op(c))
			use[2] = 1;
		else if (c != FZ_LOOKUPS)
			use[0] = use[1] = 1;
	}
	for (long k = 0; k < 3; k++)
		if (use[k] && pthread_create(&th[k], NULL, check_midrun_thread, (void *)k))
			check_midrun_thread((void *)k), use[k] = 0;
	for (int k = 0; k < 3; k++)
		if (use[k])
			pthread_join(th[k], NULL);
}

static void run_race(struct op *x, struct op *y)
{
	pthread_t th;

	pthread_mutex_lock(&W.mtx);
	x->t = resolve(x);
	y->t = resolve(y);
	pthread_mutex_unlock(&W.mtx);
	if (!raceable(x->code) || !raceable(y->code) || conflict(x, y)) {
		exec_op(x);
		settle();
		pthread_mutex_lock(&W.mtx);
		y->t = resolve(y);
		pthread_mutex_unlock(&W.mtx);
		exec_op(y);
		return;
	}
	tr("  RACE\n");
	pthread_mutex_lock(&W.mtx);
	W.racing = 1;
	W.race_cycles = x->code == FZ_CORE_QP_CYCLE || y->code == FZ_CORE_QP_CYCLE;
	if (x->t)
		x->t->busy = 1;
	if (y->t)
		y->t->busy = 1;
	pthread_mutex_unlock(&W.mtx);
	atomic_store(&race_gate, 0);
	if (x->code == FZ_LOOKUPS || y->code == FZ_LOOKUPS) {
		const struct op *other = x->code == FZ_LOOKUPS ? y : x;
		struct reader *r = malloc(sizeof(*r));

		if (r)
			reader_prepare(r, other);
		if (!r || pthread_create(&th, NULL, reader_thread, r)) {
			exec_op(other);
		} else {
			race_meet();
			exec_op(other);
			settle(); /* what the operation set off on the workers too */
			atomic_store(&r->stop, 1);
			pthread_join(th, NULL);
			tr("    reader: %lu rounds\n", r->rounds);
		}
		free(r);
	} else if (pthread_create(&th, NULL, race_thread, x)) {
		exec_op(x);
		exec_op(y);
	} else {
		race_meet();
		exec_op(y);
		pthread_join(th, NULL);
	}
	settle();
	pthread_mutex_lock(&W.mtx);
	W.racing = 0;
	if (x->t)
		x->t->busy = 0;
	if (y->t)
		y->t->busy = 0;
	pthread_mutex_unlock(&W.mtx);
	check_tables_midrun(x, y);
	grave_release();
}

/* At a quiet point: a QP bound to an id that is not connecting, connected
 * or in timewait (IDLE, LISTEN, SIDR) is a binding the engine forgot to
 * release (cm.c: reset to IDLE and timewait exit unbind). Bindings to
 * CEPs of ids the application destroyed are not checked here (no ticket
 * holds them); cep_table_check sees those. */
static void check_bindings(void)
{
	for (int k = 0; k < 2; k++)
		for (uint32_t q = 0; q < NQP; q++) {
			struct cep_cm_id *id = NULL;
			enum cep_cm_state st;
			uint32_t b;

			if (cep_qp_binding(cep_cm_table(W.n[k].cm), QPN0 + q, &b) ||
			    b == CEP_BINDING_INVALID || b == CEP_BINDING_RESERVED)
				continue;
			pthread_mutex_lock(&W.mtx);
			for (int i = 0; i < W.nt && !id; i++) {
				struct ticket *t = &W.t[i];

				if (t->comm_id == b && t->node == k && !t->dead && !t->cm_gone &&
				    !t->destroy_called)
					id = t->id;
			}
			pthread_mutex_unlock(&W.mtx);
			if (!id)
				continue;
			/* outside W.mtx: the state takes the id's lock */
			st = cep_cm_id_state(id);
			if (st == CEP_CM_IDLE || st == CEP_CM_LISTEN || st == CEP_CM_SIDR_REQ_SENT ||
			    st == CEP_CM_SIDR_REQ_RCVD)
				fz_fail("node %c: qpn %#x still bound to id %#x in %s", "AB"[k],
					QPN0 + q, b, cep_cm_state_name(st));
		}
}

/* ---- the end -------------------------------------------------------------- */

static int all_dead(void)
{
	int done = 1;

	pthread_mutex_lock(&W.mtx);
	for (int i = 0; i < W.nt; i++)
		if (!W.t[i].dead && !W.t[i].cm_gone)
			done = 0;
	pthread_mutex_unlock(&W.mtx);
	return done;
}

static int tables_empty(void)
{
	struct cep_table_stats st;

	for (int k = 0; k < 2; k++) {
		cep_table_stats(cep_cm_table(W.n[k].cm), &st);
		if (st.live)
			return 0;
	}
	return 1;
}

/* Destroy every id the application holds (as it would before exiting). */
static void destroy_all(void)
{
	pthread_mutex_lock(&W.mtx);
	for (int i = 0; i < W.nt; i++) {
		struct ticket *t = &W.t[i];

		if (t->dead || t->cm_gone || t->destroy_called || !t->id)
			continue;
		t->destroy_called = 1;
		pthread_mutex_unlock(&W.mtx);
		if (api("drain destroy_id", cep_cm_destroy_id(t->id)))
			fz_fail("cep_cm_destroy_id refused a live id");
		pthread_mutex_lock(&W.mtx);
		t->strict = 1;
	}
	pthread_mutex_unlock(&W.mtx);
}

/* Check table @arg (0: A, 1: B, 2: the core) once nothing is left in it,
 * then destroy it with its CM. */
static void *table_down(void *arg)
{
	int k = (int)(long)arg, rc;
	char msg[1024];

	if (k == 2) {
		grave_release();
		for (int s = 0; s < NSLOT; s++)
			core_destroy(s);
		for (uint32_t q = 0; q < NCQPN; q++)
			cep_qp_destroy_begin(W.core, CORE_QPN0 + q, NULL);
		if (cep_table_check(W.core, msg, sizeof(msg)))
			fz_fail("core table: %s", msg);
		if ((rc = cep_table_destroy(W.core)))
			fz_fail("core table destroy: %d", rc);
		return NULL;
	}
	struct cep_cm_stats cs = { .size = sizeof(cs) };
	struct cep_table *tb = cep_cm_table(W.n[k].cm);

	if (cep_table_check(tb, msg, sizeof(msg)))
		fz_fail("node %c after the drain: %s", "AB"[k], msg);
	cep_cm_get_stats(W.n[k].cm, &cs);
	if (cs.ids)
		fz_fail("node %c: %llu ids still allocated after the drain", "AB"[k],
			(unsigned long long)cs.ids);
	for (int st = 0; st < CEP_CM_STATE_COUNT; st++)
		if (cs.states[st]) /* cm.h: ids per state now; there are none */
			fz_fail("node %c: stats count %lld ids in %s after the drain", "AB"[k],
				(long long)cs.states[st], cep_cm_state_name((unsigned)st));
	for (uint32_t q = 0; q < NQP; q++) {
		uint32_t b;

		if (cep_qp_binding(tb, QPN0 + q, &b) == 0 && b != CEP_BINDING_INVALID &&
		    b != CEP_BINDING_RESERVED)
			fz_fail("node %c: qpn %#x still bound to %#x", "AB"[k], QPN0 + q, b);
	}
	if ((rc = cep_cm_destroy(W.n[k].cm)))
		fz_fail("cep_cm_destroy(%c): %d", "AB"[k], rc);
	W.n[k].tp->ops->destroy(W.n[k].tp);
	if (W.n[k].ch && (rc = cep_cm_channel_destroy(W.n[k].ch)))
		fz_fail("channel destroy: %d", rc);
	return NULL;
}

static void world_down(void)
{
	struct cep_fabric_faults none = { .size = sizeof(none) };
	uint64_t step = 1;
	int rc;

	tr("drain\n");
	W.draining = 1;
	settle();
	for (int round = 0;; round++) {
		drain_channel(FZ_A);
		drain_channel(FZ_B);
		destroy_all();
		settle();
		drain_channel(FZ_A);
		drain_channel(FZ_B);
		if (all_dead() && tables_empty())
			break;
		if (round == 12)
			cep_fabric_set_faults(W.fab, &none); /* a lossy fabric may eat every DREQ */
		if (round > 60)
			fz_fail("ids or CEPs still live after %d drain rounds (%llu ms of "
				"virtual time each)", round, (unsigned long long)step);
		advance_ms(step);
		if (step < 100000000ull)
			step *= 10;
	}
	tr("drained\n");
	for (int i = 0; i < W.nt; i++) {
		struct ticket *t = &W.t[i];

		if (!t->cm_gone && (t->destroyed != 1 || !t->dead))
			fz_fail("id %#x: %d DESTROYED events", t->comm_id, t->destroyed);
	}
	/* Each check and destroy waits for the RCU callbacks (liburcu's
	 * call_rcu thread sleeps 10 ms after a wake-up): the three tables in
	 * parallel wait for the same batches. */
	pthread_t th[3];

	for (long k = 0; k < 3; k++)
		if (pthread_create(&th[k], NULL, table_down, (void *)k))
			table_down((void *)k), th[k] = 0;
	for (int k = 0; k < 3; k++)
		if (th[k])
			pthread_join(th[k], NULL);
	struct cep_fabric_stats fs = { .size = sizeof(fs) };

	/* cep/fabric.h: once quiescent, every copy of every MAD ended one way
	 * (those still delayed or held reach the destroyed ports: dropped). */
	advance_ms(100);
	if (cep_fabric_stats(W.fab, &fs) ||
	    fs.delivered + fs.lost + fs.no_route + fs.dropped_stopped + fs.dropped_full !=
	    fs.sent + fs.duplicated)
		fz_fail("fabric: %llu delivered + %llu lost + %llu no route + %llu stopped + %llu "
			"full != %llu sent + %llu duplicated", (unsigned long long)fs.delivered,
			(unsigned long long)fs.lost, (unsigned long long)fs.no_route,
			(unsigned long long)fs.dropped_stopped, (unsigned long long)fs.dropped_full,
			(unsigned long long)fs.sent, (unsigned long long)fs.duplicated);
	W.c->ops->destroy(W.c);
	if ((rc = cep_fabric_destroy(W.fab)))
		fz_fail("fabric destroy: %d", rc);
	if ((rc = cep_clock_destroy(W.clk)))
		fz_fail("clock destroy: %d", rc);
	tr("down\n");
}

/* ---- libFuzzer ---------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *e = getenv("FUZZ_CM_TRACE");

	(void)argc;
	(void)argv;
	trace = e && *e == '1';
	e = getenv("FUZZ_CM_WORKERS");
	if (e && (*e == '1' || *e == '2'))
		force_workers = *e - '0';
	pthread_mutex_init(&W.mtx, NULL);
	return 0;
}

/* Read one operation at @*pos (missing bytes are 0). */
static int next_op(const uint8_t *data, size_t size, size_t *pos, struct op *o)
{
	if (*pos >= size)
		return 0;
	memset(o, 0, sizeof(*o));
	o->code = (enum fz_op)(data[(*pos)++] % FZ_NOPS);
	for (unsigned i = 0; i < fz_op_args[o->code]; i++)
		o->a[i] = *pos < size ? data[(*pos)++] : 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t pos = 1;
	struct op o, o2;

	if (size < 1)
		return 0;
	world_up(data[0]);
	for (int n = 0; n < MAXOPS && next_op(data, size, &pos, &o); n++) {
		check_bindings();
		W.opno = n;
		if (o.code == FZ_RACE) {
			if (!next_op(data, size, &pos, &o) || !next_op(data, size, &pos, &o2))
				break;
			run_race(&o, &o2);
		} else {
			pthread_mutex_lock(&W.mtx);
			o.t = resolve(&o);
			pthread_mutex_unlock(&W.mtx);
			exec_op(&o);
		}
		settle();
	}
	check_bindings();
	world_down();
	return 0;
}
