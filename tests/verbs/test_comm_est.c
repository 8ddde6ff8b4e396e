/* SPDX-License-Identifier: MIT */
/*
 * The verbs glue's path for IBV_EVENT_COMM_EST (cep_cm_qp_event): the
 * passive QP received the peer's first packet but the RTU never arrived
 * (the active side here never sends it: manual_rtu). Handing the QP's
 * async event to the CM establishes the passive id, as the kernel's
 * ib_cm_notify(IB_EVENT_COMM_EST) does: no REP retry, no REJ "timeout".
 * IBV_EVENT_PATH_MIG goes the same way to cep_cm_migrate: refused before
 * the connection is up, done once it is (the REQ named an alternate path).
 * No device needed: the event names the QP by its number.
 */
#include <errno.h>
#include <string.h>

#include <cep/clock.h>
#include <cep/verbs.h>

#include "pair.h"

#define QA 0x1111
#define QB 0x2222
#define SID 0x77ull

static atomic_int est_b, rep_a, rej_a, rep_err_b;
static struct cep_cm_id *_Atomic passive;

static int on_b(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = QB };

		CHECK_EQ(cep_cm_accept(id, &ap), 0);
		atomic_store(&passive, id);
	} else if (ev->type == CEP_CM_EV_ESTABLISHED) {
		atomic_fetch_add(&est_b, 1);
	} else if (ev->type == CEP_CM_EV_REP_ERROR) {
		atomic_fetch_add(&rep_err_b, 1);
	}
	return 0;
}

static int on_a(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	if (ev->type == CEP_CM_EV_REP_RECEIVED)
		atomic_fetch_add(&rep_a, 1); /* manual_rtu: never answered */
	else if (ev->type == CEP_CM_EV_REJ_RECEIVED)
		atomic_fetch_add(&rej_a, 1);
	return 0;
}

int main(void)
{
	struct cep_clock *clk;
	struct pair pr;
	struct cep_cm *b;
	struct cep_cm_id *ida;
	struct cep_cm_conn_param p;

	CHECK_EQ(cep_clock_create(0, &clk), 0);
	pair_open(&pr, CEP_FABRIC_LINK_IB, 2, clk, QA, QB, SID, on_a, on_b);
	ida = pr.ida;
	b = pr.b;
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = SID;
	p.qpn = QA;
	p.remote_cm_response_timeout = 14;
	p.local_cm_response_timeout = 14; /* B retries its REP every 68 ms */
	p.packet_life_time = 8;
	p.max_cm_retries = 3;
	p.manual_rtu = 1;
	p.primary.local_lid = 1;
	p.primary.remote_lid = 2;
	p.primary.subnet_local = 1;
	p.alternate = p.primary;
	p.alternate.sl = 1;
	CHECK_EQ(cep_cm_connect(ida, &p), 0);
	CHECK_EQ(cep_clock_quiesce(clk, 5000), 0);
	CHECK_EQ(atomic_load(&rep_a), 1);
	CHECK(atomic_load(&passive) != NULL);
	CHECK_EQ(cep_cm_id_state(atomic_load(&passive)), CEP_CM_REP_SENT);

	/* The passive QP's async event, as ibv_get_async_event() gives it. */
	struct ibv_qp qp;
	struct ibv_async_event ev;

	memset(&qp, 0, sizeof(qp));
	memset(&ev, 0, sizeof(ev));
	qp.qp_num = QB;
	ev.element.qp = &qp;
	ev.event_type = IBV_EVENT_PATH_MIG;
	CHECK_EQ(cep_cm_qp_event(b, &ev), -EINVAL); /* REP_SENT: not up yet */
	ev.event_type = IBV_EVENT_COMM_EST;
	CHECK_EQ(cep_cm_qp_event(b, &ev), 0);
	CHECK_EQ(cep_clock_quiesce(clk, 5000), 0);
	CHECK_EQ(cep_cm_id_state(atomic_load(&passive)), CEP_CM_ESTABLISHED);
	CHECK_EQ(atomic_load(&est_b), 1);
	ev.event_type = IBV_EVENT_PATH_MIG;
	CHECK_EQ(cep_cm_qp_event(b, &ev), 0);
	ev.event_type = IBV_EVENT_COMM_EST;
	/* other QPs, other events */
	qp.qp_num = 0x3333;
	CHECK_EQ(cep_cm_qp_event(b, &ev), -ENOENT);
	ev.event_type = IBV_EVENT_QP_FATAL;
	CHECK_EQ(cep_cm_qp_event(b, &ev), -EOPNOTSUPP);
	CHECK_EQ(cep_cm_qp_event(NULL, &ev), -EINVAL);
	/* past every REP retry: nothing more, no REJ to A */
	for (int i = 0; i < 10; i++) {
		CHECK_EQ(cep_clock_advance_ns(clk, 70000000ull), 0);
		CHECK_EQ(cep_clock_quiesce(clk, 5000), 0);
	}
	CHECK_EQ(atomic_load(&rep_err_b), 0);
	CHECK_EQ(atomic_load(&rej_a), 0);
	CHECK_EQ(atomic_load(&rep_a), 1);
	CHECK_EQ(cep_cm_id_state(atomic_load(&passive)), CEP_CM_ESTABLISHED);

	pair_close(&pr);
	CHECK_EQ(cep_clock_destroy(clk), 0);
	return check_done("cm-comm-est-verbs");
}
