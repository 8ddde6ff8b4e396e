/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the binding word: every row of DESIGN.md's binding table,
 * success and failure, plus the reference counts each row implies.
 */
#include <errno.h>
#include <string.h>

#include <cep/table.h>

#include "../common/check.h"
#include "core/table_internal.h" /* refcnt, to check the binding's reference */

static unsigned refs(struct cep *cep)
{
	return atomic_load(&cep->refcnt);
}

static struct cep_table *new_table(cep_teardown_fn td, void *ctx)
{
	struct cep_table_attr a = { .size = sizeof(a), .teardown = td, .ctx = ctx };
	struct cep_table *t = NULL;

	CHECK_EQ(cep_table_create(&a, &t), 0);
	return t;
}

static void check_clean(struct cep_table *t)
{
	char msg[512];
	int r = cep_table_check(t, msg, sizeof(msg));

	if (r)
		fprintf(stderr, "invariants: %s\n", msg);
	CHECK_EQ(r, 0);
}

static void test_bind_unbind(void)
{
	struct cep_table *t = new_table(NULL, NULL);
	struct cep *a, *b, *found;
	uint32_t w;

	CHECK_EQ(cep_qp_register(t, 0x1234), 0);
	CHECK_EQ(cep_qp_register(t, 0x1234), -EEXIST);
	CHECK_EQ(cep_qp_register(t, 0x1000000), -EINVAL);
	CHECK_EQ(cep_qp_binding(t, 0x1234, &w), 0);
	CHECK_EQ(w, CEP_BINDING_INVALID);
	CHECK_EQ(cep_create(t, NULL, &a), 0);
	CHECK_EQ(cep_create(t, NULL, &b), 0);
	CHECK_EQ(refs(a), 2);

	/* bind: CAS INVALID -> cid; the binding holds one reference. */
	CHECK_EQ(cep_bind(a, 0x1234), 0);
	CHECK_EQ(cep_qp_binding(t, 0x1234, &w), 0);
	CHECK_EQ(w, cep_local_comm_id(a));
	CHECK_EQ(refs(a), 3);
	CHECK_EQ(cep_lookup_qpn(t, 0x1234, &found), 0);
	CHECK(found == a);
	cep_put(found);

	/* Another CID: QP already connected; b untouched, no reference kept. */
	CHECK_EQ(cep_bind(b, 0x1234), -EISCONN);
	CHECK_EQ(refs(b), 2);
	CHECK(!cep_is_destroyed(b));
	CHECK_EQ(cep_bound_qpn(b, &w), -ENOENT);
	/* A CEP binds one QP. */
	CHECK_EQ(cep_qp_register(t, 0x99), 0);
	CHECK_EQ(cep_bind(a, 0x99), -EALREADY);
	/* Unknown QPN. */
	CHECK_EQ(cep_bind(b, 0x777), -ENOENT);
	CHECK_EQ(refs(b), 2);

	/* unbind: CAS cid -> INVALID, reference dropped, QP free again. */
	CHECK_EQ(cep_unbind(a), 0);
	CHECK_EQ(cep_unbind(a), -ENOENT);
	CHECK_EQ(refs(a), 2);
	CHECK_EQ(cep_qp_binding(t, 0x1234, &w), 0);
	CHECK_EQ(w, CEP_BINDING_INVALID);
	CHECK_EQ(cep_lookup_qpn(t, 0x1234, &found), -ENOENT);
	CHECK_EQ(cep_bind(b, 0x1234), 0);
	CHECK_EQ(cep_qp_binding(t, 0x1234, &w), 0);
	CHECK_EQ(w, cep_local_comm_id(b));

	/* Destroying a bound CEP unbinds it (QP kept). */
	CHECK_EQ(cep_destroy(b), 0);
	CHECK_EQ(cep_destroy(b), -EALREADY);
	CHECK_EQ(refs(b), 1); /* only ours */
	CHECK_EQ(cep_qp_binding(t, 0x1234, &w), 0);
	CHECK_EQ(w, CEP_BINDING_INVALID);
	CHECK_EQ(cep_bind(b, 0x99), -ESTALE);
	CHECK_EQ(refs(b), 1);
	cep_put(b);

	cep_destroy(a);
	cep_put(a);
	/* Unregister needs RESERVED first. */
	CHECK_EQ(cep_qp_unregister(t, 0x1234), -EBUSY);
	CHECK_EQ(cep_qp_destroy_begin(t, 0x1234, &w), 0);
	CHECK_EQ(w, CEP_BINDING_INVALID);
	CHECK_EQ(cep_qp_unregister(t, 0x1234), 0);
	CHECK_EQ(cep_qp_unregister(t, 0x1234), -ENOENT);
	CHECK_EQ(cep_qp_destroy_begin(t, 0x1234, NULL), -ENOENT);
	/* The QPN can live again. */
	CHECK_EQ(cep_qp_register(t, 0x1234), 0);
	check_clean(t);
	CHECK_EQ(cep_table_destroy(t), 0);
}

static int teardowns;

static void count_teardown(struct cep *cep, void *ctx)
{
	CHECK(ctx == &teardowns);
	teardowns++;
	CHECK_EQ(cep_destroy(cep), 0);
}

static void test_destroy_begin(void)
{
	struct cep_table *t = new_table(count_teardown, &teardowns);
	struct cep *a, *b, *x;
	uint32_t w, cid;
	struct cep_table_stats st;

	CHECK_EQ(cep_qp_register(t, 7), 0);
	CHECK_EQ(cep_create(t, NULL, &a), 0);
	cid = cep_local_comm_id(a);
	CHECK_EQ(cep_bind(a, 7), 0);

	/* XCHG -> RESERVED, old CID torn down through the callback. */
	CHECK_EQ(cep_qp_destroy_begin(t, 7, &w), 0);
	CHECK_EQ(w, cid);
	CHECK_EQ(teardowns, 1);
	CHECK(cep_is_destroyed(a));
	CHECK_EQ(refs(a), 1); /* binding's and table's references gone */
	CHECK_EQ(cep_lookup_comm_id(t, cid, &x), -ENOENT);
	CHECK_EQ(cep_qp_binding(t, 7, &w), 0);
	CHECK_EQ(w, CEP_BINDING_RESERVED);
	CHECK_EQ(cep_lookup_qpn(t, 7, &x), -ESHUTDOWN);
	/* Idempotent: a second call finds RESERVED and tears nothing down. */
	CHECK_EQ(cep_qp_destroy_begin(t, 7, &w), 0);
	CHECK_EQ(w, CEP_BINDING_RESERVED);
	CHECK_EQ(teardowns, 1);
	cep_put(a);

	/* Bind to a RESERVED QP: the caller's CEP is destroyed, its
	 * reference dropped, the word stays RESERVED (seed race 1). */
	CHECK_EQ(cep_create(t, NULL, &b), 0);
	CHECK_EQ(cep_bind(b, 7), -ESHUTDOWN);
	CHECK(cep_is_destroyed(b));
	CHECK_EQ(refs(b), 1);
	CHECK_EQ(cep_qp_binding(t, 7, &w), 0);
	CHECK_EQ(w, CEP_BINDING_RESERVED);
	cep_put(b);
	CHECK_EQ(cep_qp_unregister(t, 7), 0);

	/* Destroy begin on an INVALID word: nothing to tear down. */
	CHECK_EQ(cep_qp_register(t, 8), 0);
	CHECK_EQ(cep_qp_destroy_begin(t, 8, &w), 0);
	CHECK_EQ(w, CEP_BINDING_INVALID);
	CHECK_EQ(teardowns, 1);

	check_clean(t);
	cep_table_stats(t, &st);
	CHECK_EQ(st.allocated, 2);
	CHECK_EQ(st.freed, 2);
	CHECK_EQ(st.live, 0);
	CHECK_EQ(st.bound, 1);
	CHECK_EQ(st.qps, 1);
	CHECK_EQ(cep_table_destroy(t), 0);
}

/* Default teardown (no callback): cep_destroy at once. */
static void test_default_teardown(void)
{
	struct cep_table *t = new_table(NULL, NULL);
	struct cep *a;

	CHECK_EQ(cep_qp_register(t, 3), 0);
	CHECK_EQ(cep_create(t, NULL, &a), 0);
	CHECK_EQ(cep_bind(a, 3), 0);
	CHECK_EQ(cep_qp_destroy_begin(t, 3, NULL), 0);
	CHECK(cep_is_destroyed(a));
	cep_put(a);
	check_clean(t);
	CHECK_EQ(cep_table_destroy(t), 0);
}

/* The checker must see violations: a binding pointing at no CEP. */
static void test_checker_catches(void)
{
	struct cep_table *t = new_table(NULL, NULL);
	struct cep *a;
	char msg[256];
	struct cep_qp *qp;

	CHECK_EQ(cep_qp_register(t, 5), 0);
	CHECK_EQ(cep_create(t, NULL, &a), 0);
	cep_thread_register();
	urcu_memb_read_lock();
	qp = cep_qp_find(t, 5);
	atomic_store(&qp->binding, 0x1234567u); /* forge a dangling CID */
	urcu_memb_read_unlock();
	CHECK_EQ(cep_table_check(t, msg, sizeof(msg)), -EPROTO);
	CHECK(strstr(msg, "no such live CEP") != NULL);
	atomic_store(&qp->binding, CEP_BINDING_INVALID);
	/* A reference held past quiescence on a destroyed CEP is a leak. */
	cep_destroy(a);
	CHECK_EQ(cep_table_check(t, msg, sizeof(msg)), -EPROTO);
	CHECK(strstr(msg, "reachable") != NULL);
	cep_put(a);
	CHECK_EQ(cep_table_check(t, msg, sizeof(msg)), 0);
	CHECK_EQ(cep_table_destroy(t), 0);
}

static void test_bad_args(void)
{
	struct cep_table *t = NULL;
	struct cep_table_attr bad = { .size = 1 };
	struct cep_create_attr ca = { .size = sizeof(ca), .comm_id_mod = 4, .comm_id_rem = 4 };
	struct cep *c;

	CHECK_EQ(cep_table_create(&bad, &t), -EINVAL);
	CHECK_EQ(cep_table_create(NULL, NULL), -EINVAL);
	bad.size = sizeof(bad);
	bad.initial_size = 1000; /* not a power of 2 */
	CHECK_EQ(cep_table_create(&bad, &t), -EINVAL);
	CHECK_EQ(cep_table_create(NULL, &t), 0);
	CHECK_EQ(cep_create(t, &ca, &c), -EINVAL);
	ca.comm_id_rem = 3;
	for (int i = 0; i < 1000; i++) {
		CHECK_EQ(cep_create(t, &ca, &c), 0);
		CHECK_EQ(cep_local_comm_id(c) % 4, 3);
		CHECK(cep_local_comm_id(c) != CEP_BINDING_RESERVED);
		cep_destroy(c);
		cep_put(c);
	}
	CHECK_EQ(cep_bind(NULL, 1), -EINVAL);
	CHECK_EQ(cep_destroy(NULL), -EINVAL);
	CHECK_EQ(cep_table_destroy(t), 0);
}

int main(void)
{
	test_bind_unbind();
	test_destroy_begin();
	test_default_teardown();
	test_checker_catches();
	test_bad_args();
	return check_done("binding");
}
