/* SPDX-License-Identifier: MIT */
/*
 * libcep core: the lock-free table of connection endpoints (CEPs), its
 * indexes, and the per-QP binding word.
 *
 * Guarantees: every lookup is lock-free and returns a CEP with a reference
 * held; inserts into an index have exactly one winner per key; a QP's
 * binding word is INVALID, RESERVED or the comm ID of one live CEP, and no
 * interleaving of bind / unbind / QP destruction leaks a CEP or binds two.
 * The last reference on a CEP frees it through call_rcu, after a grace
 * period, so no reader ever touches freed memory.
 *
 * Threads: every function here may be called from any thread. libcep
 * registers a calling thread with liburcu (urcu-memb flavour) on its first
 * call and unregisters it when the thread exits. No function here may be
 * called from inside an RCU callback; see docs/concurrency.md.
 */
#ifndef CEP_TABLE_H
#define CEP_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include <cep/export.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cep_table;
struct cep;

/* Binding word values. A CID is a local comm ID: never 0, never ~0. */
#define CEP_BINDING_INVALID  0x00000000u /* free: may be bound */
#define CEP_BINDING_RESERVED 0xffffffffu /* QP being destroyed: terminal */

/* Called when cep_qp_destroy_begin() finds a CEP bound to the QP. It runs in
 * the caller's thread, outside any RCU read side, with a reference on @cep
 * held for the duration of the call (do not put it). It must eventually
 * lead to cep_destroy(@cep) (at once, or after a DREQ and timewait). */
typedef void (*cep_teardown_fn)(struct cep *cep, void *ctx);

/* Called once per CEP, in an RCU callback after the last cep_put(), just
 * before the memory is freed. It must not block nor call into the table. */
typedef void (*cep_release_fn)(struct cep *cep, void *ctx);

struct cep_table_attr {
	size_t size;              /* sizeof(struct cep_table_attr): lets the struct grow */
	size_t initial_size;      /* buckets per index at start; 0 = 1024; power of 2 */
	cep_teardown_fn teardown; /* NULL: cep_destroy() at once */
	cep_release_fn release;   /* NULL: nothing */
	void *ctx;                /* passed to teardown and release */
};

/* Create a table. 0 or -EINVAL (bad attr), -ENOMEM. */
CEP_EXPORT int cep_table_create(const struct cep_table_attr *attr,
				struct cep_table **out);

/* Destroy a table: destroys every remaining CEP, drops the table's
 * references, waits for the RCU callbacks and frees the indexes. Callers
 * must have stopped every other use of the table and put every reference
 * they held; a CEP still referenced is reported (-EBUSY) and leaked rather
 * than freed under a user. Must not be called from an RCU callback or a
 * CM callback. */
CEP_EXPORT int cep_table_destroy(struct cep_table *table);

/* --- Threads ----------------------------------------------------------- */

/* libcep registers a calling thread with urcu-memb on its first call and
 * unregisters it at thread exit. A thread that also uses urcu-memb directly
 * must register through these instead (liburcu forbids registering twice);
 * unregister only outside any libcep call and with no reference held that
 * it still needs to look up through. Both are idempotent. */
CEP_EXPORT void cep_thread_register(void);
CEP_EXPORT void cep_thread_unregister(void);

/* --- CEPs -------------------------------------------------------------- */

struct cep_create_attr {
	size_t size;       /* sizeof(struct cep_create_attr) */
	/* Chosen local comm ID c satisfies c % comm_id_mod == comm_id_rem
	 * (the dispatcher routes by it). comm_id_mod 0 or 1: no constraint. */
	uint32_t comm_id_mod;
	uint32_t comm_id_rem;
	void *context;     /* user pointer, returned by cep_context() */
};

/* Create a CEP with a fresh, unpredictable local comm ID, fully initialised,
 * then publish it in the comm-ID index. On success *out holds the caller's
 * reference (the table keeps its own until cep_destroy()).
 * 0, -EINVAL, -ENOMEM, -EAGAIN (no free comm ID found in the residue class
 * after many random draws). */
CEP_EXPORT int cep_create(struct cep_table *table,
			  const struct cep_create_attr *attr, struct cep **out);

/* Destroy: the first caller moves the CEP to DESTROYING, unbinds it from
 * its QP (CAS cid -> INVALID; a RESERVED word is left alone), drops the
 * binding's reference, removes it from every index and drops the table's
 * reference. The caller's own reference stays valid until cep_put().
 * 0, or -EALREADY if another caller already destroyed it. */
CEP_EXPORT int cep_destroy(struct cep *cep);

/* Take a reference: the caller must already hold one. */
CEP_EXPORT void cep_get(struct cep *cep);
/* Take a reference only if the count is not zero (for RCU readers that
 * found @cep in an index). 0 or -ENOENT. */
CEP_EXPORT int cep_get_unless_zero(struct cep *cep);
/* Drop a reference; the last one hands the CEP to call_rcu. */
CEP_EXPORT void cep_put(struct cep *cep);

CEP_EXPORT uint32_t cep_local_comm_id(const struct cep *cep);
CEP_EXPORT void *cep_context(const struct cep *cep);
CEP_EXPORT void cep_set_context(struct cep *cep, void *context);
CEP_EXPORT struct cep_table *cep_table_of(const struct cep *cep);
/* 1 if cep_destroy() has run on @cep, 0 otherwise. */
CEP_EXPORT int cep_is_destroyed(const struct cep *cep);
/* The QPN this CEP is (or was last) bound to, or -ENOENT. */
CEP_EXPORT int cep_bound_qpn(const struct cep *cep, uint32_t *qpn);

/* --- Lookups: lock-free, return a reference (cep_put() it) ------------ */

/* 0, -ENOENT. A CEP found is live at the instant of the lookup; it may be
 * destroyed by another thread right after (cep_is_destroyed()). */
CEP_EXPORT int cep_lookup_comm_id(struct cep_table *table, uint32_t local_comm_id,
				  struct cep **out);
/* The CEP bound to @qpn: 0, -ENOENT (unknown QPN or nothing bound),
 * -ESHUTDOWN (QP being destroyed). */
CEP_EXPORT int cep_lookup_qpn(struct cep_table *table, uint32_t qpn,
			      struct cep **out);

/* --- QPs and the binding word ------------------------------------------ */

/* Register @qpn (24 bits): creates its binding word, INVALID.
 * 0, -EINVAL (qpn > 0xffffff), -EEXIST, -ENOMEM. */
CEP_EXPORT int cep_qp_register(struct cep_table *table, uint32_t qpn);

/* Bind: reference taken, then CAS INVALID -> cid. Errors (nothing changes
 * unless said):
 *   -ENOENT     @qpn not registered
 *   -ESHUTDOWN  the QP is being destroyed (RESERVED): @cep is destroyed
 *               (cep_destroy) and the binding's reference dropped
 *   -EISCONN    the QP is bound to another CEP
 *   -EALREADY   @cep is already bound to a QP
 *   -ESTALE     @cep is being destroyed */
CEP_EXPORT int cep_bind(struct cep *cep, uint32_t qpn);

/* Unbind @cep from its QP (CAS cid -> INVALID), drop the binding's
 * reference; the QP may be bound again. 0, -ENOENT (not bound). */
CEP_EXPORT int cep_unbind(struct cep *cep);

/* QP destruction begins: XCHG -> RESERVED. If a CEP was bound, the table's
 * teardown callback runs for it before this returns. Idempotent.
 * 0, -ENOENT (not registered). *old_binding (may be NULL) gets the word's
 * previous value. */
CEP_EXPORT int cep_qp_destroy_begin(struct cep_table *table, uint32_t qpn,
				    uint32_t *old_binding);

/* Forget @qpn once its destruction began. 0, -ENOENT, -EBUSY (not
 * RESERVED: call cep_qp_destroy_begin first). The QPN may then be
 * registered again. */
CEP_EXPORT int cep_qp_unregister(struct cep_table *table, uint32_t qpn);

/* Read the binding word of @qpn. 0 or -ENOENT. */
CEP_EXPORT int cep_qp_binding(struct cep_table *table, uint32_t qpn,
			      uint32_t *binding);

/* --- Statistics and invariants ----------------------------------------- */

struct cep_table_stats {
	uint64_t allocated;  /* CEPs ever created */
	uint64_t freed;      /* CEPs whose memory was released */
	uint64_t live;       /* created and not yet destroyed */
	uint64_t destroyed;  /* cep_destroy() winners */
	uint64_t qps;        /* registered QPNs */
	uint64_t bound;      /* successful binds */
	uint64_t bind_fail;  /* failed binds (any reason) */
	uint64_t comm_id_collisions; /* random comm IDs drawn twice */
};
CEP_EXPORT void cep_table_stats(struct cep_table *table, struct cep_table_stats *st);

/* After quiescence (no other thread using the table), wait for pending RCU
 * callbacks and check: every binding is INVALID, RESERVED or the comm ID of
 * a live CEP bound to that QPN; every live CEP is in the comm-ID index and
 * its secondary keys find it; allocated - freed equals the CEPs reachable;
 * live equals allocated - destroyed; no CEP was freed twice.
 * 0 or -EPROTO; a description of the first violations goes to @msg. */
CEP_EXPORT int cep_table_check(struct cep_table *table, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif

#endif /* CEP_TABLE_H */
