/* SPDX-License-Identifier: MIT */
/*
 * cep_cm_destroy() with ids the application never destroyed (established
 * connections, a listener, an idle id): it must free them all - no CEP left
 * referenced, return 0 - as cep/cm.h promises. Mode "qp-first": the QPs of
 * the connections were destroyed first (their CEPs left the table after
 * timewait while the application still holds the ids), which must not
 * leak either (LeakSanitizer in the ASan build).
 */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <cep/cm.h>
#include <cep/fabric.h>

#include "../common/check.h"

static atomic_int established, timewait_exits;

static int on_b(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	static _Atomic uint32_t q = 0x500;

	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = atomic_fetch_add(&q, 1),
						  .starting_psn = 1 };

		CHECK_EQ(cep_cm_accept(id, &ap), 0);
	}
	return 0;
}

static int on_a(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_ESTABLISHED)
		atomic_fetch_add(&established, 1);
	if (ev->type == CEP_CM_EV_TIMEWAIT_EXIT)
		atomic_fetch_add(&timewait_exits, 1);
	return 0;
}

int main(int argc, char **argv)
{
	int qp_first = argc > 1 && !strcmp(argv[1], "qp-first");
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	struct cep_fabric *fab;
	struct cep_transport *tp[2];
	struct cep_cm *cm[2];
	struct cep_cm_id *l, *id, *idle;
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_a };
	struct cep_cm_id_attr ib = { .size = sizeof(ib), .handler = on_b };
	enum { N = 50 };

	CHECK_EQ(cep_fabric_create(&fa, &fab), 0);
	for (int k = 0; k < 2; k++) {
		struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = 0x10 + (uint64_t)k,
						   .lid = (uint16_t)(k + 1), .port_num = 1,
						   .link_layer = CEP_FABRIC_LINK_IB };
		struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 2 };

		CHECK_EQ(cep_fabric_port_create(fab, &pa, &tp[k]), 0);
		ca.transport = tp[k];
		CHECK_EQ(cep_cm_create(&ca, &cm[k]), 0);
		for (uint32_t i = 0; i < N; i++)
			CHECK_EQ(cep_cm_qp_register(cm[k], (k ? 0x500u : 0x100u) + i), 0);
	}
	CHECK_EQ(cep_cm_create_id(cm[1], &ib, &l), 0);
	CHECK_EQ(cep_cm_listen(l, 0x42, ~0ull), 0);
	CHECK_EQ(cep_cm_create_id(cm[0], &ia, &idle), 0);
	for (uint32_t i = 0; i < N; i++) {
		struct cep_cm_conn_param p;

		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		p.service_id = 0x42;
		p.qpn = 0x100 + i;
		p.remote_cm_response_timeout = 14;
		p.local_cm_response_timeout = 14;
		p.max_cm_retries = 5;
		p.primary.local_lid = 1;
		p.primary.remote_lid = 2;
		p.primary.local_ack_timeout = 10;
		CHECK_EQ(cep_cm_create_id(cm[0], &ia, &id), 0);
		CHECK_EQ(cep_cm_connect(id, &p), 0);
	}
	for (int i = 0; i < 5000 && atomic_load(&established) < N; i++) {
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
	}
	CHECK_EQ(atomic_load(&established), N);
	if (qp_first) {
		/* DREQ, timewait, and the CEPs leave the table; ids stay */
		for (uint32_t i = 0; i < N; i++)
			CHECK_EQ(cep_cm_qp_destroy(cm[0], 0x100 + i), 0);
		for (int i = 0; i < 5000 && atomic_load(&timewait_exits) < N; i++) {
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);
		}
		CHECK_EQ(atomic_load(&timewait_exits), N);
	}
	/* No id destroyed: the contexts must still free everything. */
	CHECK_EQ(cep_cm_destroy(cm[0]), 0);
	CHECK_EQ(cep_cm_destroy(cm[1]), 0);
	tp[0]->ops->destroy(tp[0]);
	tp[1]->ops->destroy(tp[1]);
	CHECK_EQ(cep_fabric_destroy(fab), 0);
	return check_done(qp_first ? "cm-destroy-leftover-qp-first" : "cm-destroy-leftover");
}
