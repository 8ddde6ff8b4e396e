/* SPDX-License-Identifier: MIT */
/*
 * Replays, single-threaded and through the public API only, the
 * interleaving behind the false "qpn X holds 0 while Y is bound to it"
 * report of cep-stress bind-vs-destroy (issue 12), on a correct library.
 * The harness's old check (a generation bumped before each unregister,
 * "unchanged" taken as proof the record read is the one bound) reports a
 * violation here; the fixed check (stress/bindcheck.h) does not, and the
 * table's own invariant checker confirms nothing is wrong.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cep/table.h>

#include "bindcheck.h"

#define QPN 0x200

static int failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			failures++;                                          \
		}                                                            \
	} while (0)

/* A QP destruction whose teardown stalls: the CEP is kept (with a
 * reference) and destroyed later, as the CM does after DREQ and timewait
 * (table.h allows teardown to destroy later). */
static struct cep *stalled;

static void stall_teardown(struct cep *cep, void *ctx)
{
	(void)ctx;
	cep_get(cep);
	stalled = cep;
}

/* The check as stress/core.c had it: gen unchanged = same record. */
static bool old_same_record(struct bind_watch *w, struct bind_snap s)
{
	return atomic_load(&w->gen) == s.gen;
}

/* What the binder concludes from word @w after its bind of @c. */
static bool reports_violation(struct cep *c, uint32_t w, bool same_record)
{
	uint32_t q;

	return w != cep_local_comm_id(c) && w != CEP_BINDING_RESERVED && !cep_is_destroyed(c) &&
	       same_record && cep_bound_qpn(c, &q) == 0 && q == QPN;
}

int main(void)
{
	struct cep_table_attr a = { .size = sizeof(a), .teardown = stall_teardown };
	struct bind_watch watch = { 0 };
	struct bind_snap snap;
	struct cep_table *t;
	struct cep *c;
	uint32_t w, old;
	char msg[512];

	if (cep_table_create(&a, &t) || cep_qp_register(t, QPN)) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}
	/* Destroyer 2 begins destroying R0 and bumps gen, then stalls before
	 * its unregister. */
	CHECK(cep_qp_destroy_begin(t, QPN, NULL) == 0, "d2 destroy_begin R0");
	bind_watch_replace_begin(&watch);
	/* Destroyer 1 begins on R0, bumps, unregisters R0, registers R. */
	CHECK(cep_qp_destroy_begin(t, QPN, NULL) == 0, "d1 destroy_begin R0");
	bind_watch_replace_begin(&watch);
	CHECK(cep_qp_unregister(t, QPN) == 0, "d1 unregister R0");
	CHECK(cep_qp_register(t, QPN) == 0, "d1 register R");
	bind_watch_replace_end(&watch);
	/* The binder snapshots gen and binds R. */
	snap = bind_watch_snapshot(&watch);
	CHECK(cep_create(t, NULL, &c) == 0, "create");
	CHECK(cep_bind(c, QPN) == 0, "bind R");
	/* Destroyer 1 begins destroying R (word RESERVED); its teardown
	 * stalls, so the CEP stays live and linked. */
	CHECK(cep_qp_destroy_begin(t, QPN, &old) == 0 && old == cep_local_comm_id(c),
	      "d1 destroy_begin R: old %#x", old);
	CHECK(stalled == c, "teardown called for the bound CEP");
	/* Destroyer 2 resumes: unregisters R (destruction began: legal) and
	 * registers R'. */
	CHECK(cep_qp_unregister(t, QPN) == 0, "d2 unregister R");
	CHECK(cep_qp_register(t, QPN) == 0, "d2 register R'");
	bind_watch_replace_end(&watch);
	/* The binder reads R' = INVALID while its CEP is live and linked. */
	CHECK(cep_qp_binding(t, QPN, &w) == 0 && w == CEP_BINDING_INVALID, "word of R' %#x", w);
	CHECK(reports_violation(c, w, old_same_record(&watch, snap)),
	      "the old check should report this interleaving (the false report)");
	CHECK(!reports_violation(c, w, bind_watch_same_record(&watch, snap)),
	      "the fixed check reports a correct library");

	/* Destroyer 1's teardown completes; nothing was ever wrong. */
	CHECK(cep_destroy(stalled) == 0, "stalled teardown");
	cep_put(stalled);
	cep_put(c);
	CHECK(cep_qp_destroy_begin(t, QPN, NULL) == 0, "final destroy_begin");
	CHECK(cep_table_check(t, msg, sizeof(msg)) == 0, "table check: %s", msg);
	CHECK(cep_table_destroy(t) == 0, "table destroy");
	if (failures)
		return 1;
	printf("replay: the old check reports the interleaving, the fixed one does not, "
	       "the table checks clean\n");
	return 0;
}
