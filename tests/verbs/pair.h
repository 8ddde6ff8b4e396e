/* SPDX-License-Identifier: MIT */
/*
 * Two CM contexts on one in-process fabric for the verbs glue's tests
 * (test_cm_qp_attr.c, test_cm_xrc.c, test_comm_est.c): A (GUID 0x100, on
 * InfiniBand LID 1) with QP @qa registered and an id of handler @on_a, B
 * (GUID 0x101, LID 2) with QP @qb registered and a listener on @sid of
 * handler @on_b.
 * Open, test, close; test threads only.
 */
#ifndef CEP_TEST_VERBS_PAIR_H
#define CEP_TEST_VERBS_PAIR_H

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <cep/cm.h>
#include <cep/fabric.h>

#include "../common/check.h"

struct pair {
	struct cep_fabric *fab;
	struct cep_transport *ta, *tb;
	struct cep_cm *a, *b;
	struct cep_cm_id *ida, *listener;
};

/* @link: CEP_FABRIC_LINK_ROCE or _IB; @clk: a virtual clock or NULL. */
static void pair_open(struct pair *p, int link, unsigned workers, struct cep_clock *clk,
		      uint32_t qa, uint32_t qb, uint64_t sid, cep_cm_handler on_a,
		      cep_cm_handler on_b)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1, .clock = clk };
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_a };
	struct cep_cm_id_attr ib = { .size = sizeof(ib), .handler = on_b };

	memset(p, 0, sizeof(*p));
	CHECK_EQ(cep_fabric_create(&fa, &p->fab), 0);
	for (int k = 0; k < 2; k++) {
		struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = 0x100 + (uint64_t)k,
						   .port_num = 1,
						   .link_layer = (uint8_t)link };
		struct cep_cm_attr ca = { .size = sizeof(ca), .workers = workers, .clock = clk };

		if (link == CEP_FABRIC_LINK_IB)
			pa.lid = (uint16_t)(k + 1);

		CHECK_EQ(cep_fabric_port_create(p->fab, &pa, k ? &p->tb : &p->ta), 0);
		ca.transport = k ? p->tb : p->ta;
		CHECK_EQ(cep_cm_create(&ca, k ? &p->b : &p->a), 0);
	}
	CHECK_EQ(cep_cm_qp_register(p->a, qa), 0);
	CHECK_EQ(cep_cm_qp_register(p->b, qb), 0);
	CHECK_EQ(cep_cm_create_id(p->b, &ib, &p->listener), 0);
	CHECK_EQ(cep_cm_listen(p->listener, sid, ~0ull), 0);
	CHECK_EQ(cep_cm_create_id(p->a, &ia, &p->ida), 0);
}

/* The contexts (with whatever ids are left), their ports, the fabric. */
static void pair_close(struct pair *p)
{
	CHECK_EQ(cep_cm_destroy(p->a), 0);
	CHECK_EQ(cep_cm_destroy(p->b), 0);
	p->ta->ops->destroy(p->ta);
	p->tb->ops->destroy(p->tb);
	CHECK_EQ(cep_fabric_destroy(p->fab), 0);
}

/* Until a callback sets @f (5 s at most, in real time; inline: not every
 * user waits so). */
static inline void wait_flag(atomic_int *f)
{
	for (int i = 0; i < 5000 && !atomic_load(f); i++) {
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
	}
	CHECK(atomic_load(f));
}

#endif /* CEP_TEST_VERBS_PAIR_H */
