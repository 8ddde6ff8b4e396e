/* SPDX-License-Identifier: MIT */
/*
 * The binding word: one 32-bit atomic per registered QPN holding INVALID,
 * RESERVED (QP being destroyed, terminal) or the comm ID of the bound CEP.
 *
 * Guarantees (checked by tests/model/binding.pml and cep-stress):
 * - a QP holds at most one CEP, and never one bound after its destruction
 *   began (the seed's races 1 and 2): only a CAS from INVALID binds;
 * - the binding's reference is taken before the CEP claims its link and
 *   dropped exactly once, by whoever moves qp_link off BINDING/LINKED
 *   (bind's rollback, cep_unbind, or cep_destroy): no CEP leaks and none
 *   is freed early;
 * - every transition is one CAS or XCHG (seq_cst). A bind completes with
 *   CAS BINDING -> LINKED after its word CAS; a destroy that took the link
 *   first makes that CAS fail and the binder undoes its word, so the word
 *   never keeps a destroyed CEP's cid;
 * - a LINKED link carries the QP record it bound (cep.qp_rec, with a
 *   reference on the record), so whoever takes the link away clears the
 *   word it set without looking the QPN up: the release cannot miss.
 */
#include <errno.h>
#include <stdlib.h>

#include "table_internal.h"

struct cep_qp *cep_qp_find(struct cep_table *t, uint32_t qpn)
{
	struct cep_ikey k = { qpn, 0 };
	struct cep_ikey *got = cep_index_lookup(t->qps, cep_hash_qpn(t, qpn), &k);

	if (!got)
		return NULL;
	cep_tsan_acquire(got); /* pairs with the release in the index insert */
	return caa_container_of(got, struct cep_qp, key);
}

void cep_qp_free_rcu(struct rcu_head *head)
{
	struct cep_qp *qp = caa_container_of(head, struct cep_qp, rcu);

	cep_rcu_callback_begin(qp);
	cep_obj_free(qp->table, CEP_OBJ_QP, qp);
	cep_rcu_callback_end();
}

/* Read side held (the record was found in the index): a reference unless
 * the record is already on its way to call_rcu (the race: an unregister
 * dropping the index's reference while a bind found the record). */
static bool qp_get_unless_zero(struct cep_qp *qp)
{
	uint32_t r = atomic_load(&qp->refs);

	do {
		if (r == 0)
			return false;
	} while (!atomic_compare_exchange_weak(&qp->refs, &r, r + 1));
	return true;
}

void cep_qp_put(struct cep_qp *qp)
{
	/* seq_cst: every use of the record by this holder happens before the
	 * free that the last put starts. */
	if (atomic_fetch_sub(&qp->refs, 1) == 1)
		cep_call_rcu(&qp->rcu, qp, cep_qp_free_rcu);
}

static bool is_cid(uint32_t b)
{
	return b != CEP_BINDING_INVALID && b != CEP_BINDING_RESERVED;
}

CEP_EXPORT int cep_qp_register(struct cep_table *t, uint32_t qpn)
{
	struct cep_ikey *got;
	struct cep_qp *qp;
	int ret;

	if (!t || qpn > 0xffffff)
		return -EINVAL;
	qp = cep_obj_alloc(t, CEP_OBJ_QP);
	if (!qp)
		return -ENOMEM;
	qp->key.a = qpn;
	qp->table = t;
	atomic_init(&qp->binding, CEP_BINDING_INVALID);
	atomic_init(&qp->refs, 1); /* the index's */
	cep_rcu_read_lock();
	ret = cep_index_insert(t->qps, cep_hash_qpn(t, qpn), &qp->key, &got);
	cep_rcu_read_unlock();
	if (ret) {
		cep_obj_free(t, CEP_OBJ_QP, qp); /* never published */
		return ret;
	}
	CEP_STAT_INC(t, qps_added);
	cep_index_maintain(t->qps);
	return 0;
}

/* Move @cep's link from BINDING|qpn back to UNLINKED; if we did, the
 * binding's reference is ours to drop. */
static void link_rollback(struct cep *cep, uint32_t qpn)
{
	uint64_t l = CEP_LINK_BINDING | qpn;

	if (atomic_compare_exchange_strong(&cep->qp_link, &l, CEP_LINK_UNLINKED))
		cep_put(cep);
	/* else a destroy took the link (DEAD) and dropped the reference. */
}

CEP_EXPORT int cep_bind(struct cep *cep, uint32_t qpn)
{
	struct cep_table *t;
	struct cep_qp *qp;
	uint64_t link = CEP_LINK_UNLINKED;
	uint32_t cid, old = CEP_BINDING_INVALID;
	bool ok;

	if (!cep || qpn > 0xffffff)
		return -EINVAL;
	t = cep->table;
	cid = (uint32_t)cep->comm_key.a;
#ifndef CEP_PLANTED_BUG_C
	/* The binding's reference, before anything can see our claim: a
	 * destroy that finds BINDING drops it (model flaw 1: taken after the
	 * claim, a concurrent destroy dropped a reference not yet taken). */
	cep_get(cep);
#endif
	/* One QP per CEP: claim our own link first. */
	if (!atomic_compare_exchange_strong(&cep->qp_link, &link, CEP_LINK_BINDING | qpn)) {
#ifndef CEP_PLANTED_BUG_C
		cep_put(cep); /* never the last: the caller holds one */
#endif
		CEP_STAT_INC(t, bind_fail);
		return link == CEP_LINK_DEAD ? -ESTALE : -EALREADY;
	}
	CEP_YIELD();
	cep_rcu_read_lock();
	qp = cep_qp_find(t, qpn);
	/* The link's reference on the record, before the word names us: a
	 * record whose count is zero is being freed (unregistered). */
	if (!qp || !qp_get_unless_zero(qp)) {
		cep_rcu_read_unlock();
#ifdef CEP_PLANTED_BUG_C
		cep_get(cep);
#endif
		link_rollback(cep, qpn);
		CEP_STAT_INC(t, bind_fail);
		return -ENOENT;
	}
	cep_rcu_read_unlock(); /* the reference keeps the record */
#ifdef CEP_PLANTED_BUG_A
	/* Planted bug (a): load then store, the race IBAL had. */
	old = atomic_load(&qp->binding);
	CEP_YIELD();
	ok = old == CEP_BINDING_INVALID;
	if (ok)
		atomic_store(&qp->binding, cid);
#else
	/* INVALID -> cid: the only way a QP gets a CEP. */
	ok = atomic_compare_exchange_strong(&qp->binding, &old, cid);
#endif
	CEP_YIELD();
#ifdef CEP_PLANTED_BUG_C
	/* Planted bug (c): the reference after the CAS - a QP destruction in
	 * between can destroy the CEP and drop a reference not yet taken. */
	cep_get(cep);
#endif
	if (!ok) {
		cep_qp_put(qp);
		link_rollback(cep, qpn);
		CEP_STAT_INC(t, bind_fail);
		if (old == CEP_BINDING_RESERVED) {
			/* The QP is going away: the caller's CEP must not survive
			 * it half-bound (seed race 1). */
			cep_destroy(cep);
			return -ESHUTDOWN;
		}
		return -EISCONN;
	}
	/* BINDING -> LINKED, with the record for whoever releases the link
	 * (written while BINDING makes the field ours; the seq_cst CAS
	 * publishes it to the RMW that later takes LINKED away). Only
	 * cep_destroy() can have moved the link (to DEAD): it does not touch
	 * the word of a BINDING link, so undo it ourselves. */
	cep->qp_rec = qp;
	link = CEP_LINK_BINDING | qpn;
	if (!atomic_compare_exchange_strong(&cep->qp_link, &link, CEP_LINK_LINKED | qpn)) {
		uint32_t c = cid;

		cep->qp_rec = NULL;
		atomic_compare_exchange_strong(&qp->binding, &c, CEP_BINDING_INVALID);
		cep_qp_put(qp);
		CEP_STAT_INC(t, bind_fail);
		return -ESTALE;
	}
	CEP_STAT_INC(t, bound);
	return 0;
}

void cep_binding_release(struct cep *cep)
{
	struct cep_qp *qp = cep->qp_rec;
	uint32_t c = (uint32_t)cep->comm_key.a;

	cep->qp_rec = NULL;
	/* cid -> INVALID; fails harmlessly if RESERVED (QP dying). */
	atomic_compare_exchange_strong(&qp->binding, &c, CEP_BINDING_INVALID);
	cep_qp_put(qp);
}

CEP_EXPORT int cep_unbind(struct cep *cep)
{
	uint64_t l;

	if (!cep)
		return -EINVAL;
	l = atomic_load(&cep->qp_link);
	if (CEP_LINK_KIND(l) != CEP_LINK_LINKED)
		return -ENOENT; /* BINDING is the binder's, not ours to undo */
	/* Take the link to BINDING, not straight to UNLINKED: while it is
	 * BINDING the record (cep.qp_rec) is ours and no bind of this CEP can
	 * start (the race: an unbind that gave the link back first would read
	 * qp_rec while a rebind on another thread writes its new record). A
	 * destroy meanwhile treats it as a bind in progress: it drops the
	 * binding's reference and leaves the word to us. */
	if (!atomic_compare_exchange_strong(&cep->qp_link, &l, CEP_LINK_BINDING | CEP_LINK_QPN(l)))
		return -ENOENT;
	CEP_YIELD();
	cep_binding_release(cep);
	link_rollback(cep, CEP_LINK_QPN(l)); /* BINDING -> UNLINKED, and the reference */
	return 0;
}

CEP_EXPORT int cep_qp_destroy_begin(struct cep_table *t, uint32_t qpn, uint32_t *old_binding)
{
	struct cep_qp *qp;
	struct cep *cep;
	uint32_t old;

	if (!t || qpn > 0xffffff)
		return -EINVAL;
	cep_rcu_read_lock();
	qp = cep_qp_find(t, qpn);
	if (!qp) {
		cep_rcu_read_unlock();
		return -ENOENT;
	}
	/* Terminal: no bind can succeed from here on (seed race 1). */
	old = atomic_exchange(&qp->binding, CEP_BINDING_RESERVED);
	cep_rcu_read_unlock();
	if (old_binding)
		*old_binding = old;
	CEP_YIELD();
	if (!is_cid(old))
		return 0;
	/* The CEP still holds the binding's reference until it is destroyed;
	 * if the lookup misses, a concurrent cep_destroy() owns it. */
	if (cep_lookup_comm_id(t, old, &cep) == 0) {
		uint64_t l = atomic_load(&cep->qp_link);

		/* The ID may have been freed and drawn again by a CEP of
		 * another QP since our exchange (model flaw 3): tear down only
		 * the CEP that names this QP. */
		if (CEP_LINK_QPN(l) != qpn || (CEP_LINK_KIND(l) != CEP_LINK_LINKED &&
					       CEP_LINK_KIND(l) != CEP_LINK_BINDING)) {
			cep_put(cep);
			return 0;
		}
		if (t->teardown)
			t->teardown(cep, t->ctx);
		else
			cep_destroy(cep);
		cep_put(cep);
	}
	return 0;
}

CEP_EXPORT int cep_qp_unregister(struct cep_table *t, uint32_t qpn)
{
	struct cep_qp *qp;
	int ret;

	if (!t || qpn > 0xffffff)
		return -EINVAL;
	cep_rcu_read_lock();
	qp = cep_qp_find(t, qpn);
	if (!qp) {
		cep_rcu_read_unlock();
		return -ENOENT;
	}
	if (atomic_load(&qp->binding) != CEP_BINDING_RESERVED) {
		cep_rcu_read_unlock();
		return -EBUSY;
	}
	ret = cep_index_remove(t->qps, cep_hash_qpn(t, qpn), &qp->key);
	cep_rcu_read_unlock();
	if (ret)
		return -ENOENT; /* a concurrent unregister won */
	CEP_STAT_INC(t, qps_removed);
	cep_index_maintain(t->qps);
	cep_qp_put(qp); /* the index's; a CEP still linked keeps the record */
	return 0;
}

CEP_EXPORT int cep_qp_binding(struct cep_table *t, uint32_t qpn, uint32_t *binding)
{
	struct cep_qp *qp;

	if (!t || !binding)
		return -EINVAL;
	cep_rcu_read_lock();
	qp = cep_qp_find(t, qpn);
	if (qp)
		*binding = atomic_load(&qp->binding);
	cep_rcu_read_unlock();
	return qp ? 0 : -ENOENT;
}

CEP_EXPORT int cep_lookup_qpn(struct cep_table *t, uint32_t qpn, struct cep **out)
{
	struct cep_qp *qp;
	struct cep *cep;
	uint32_t b;

	if (!t || !out)
		return -EINVAL;
	*out = NULL;
	cep_rcu_read_lock();
	qp = cep_qp_find(t, qpn);
	b = qp ? atomic_load(&qp->binding) : CEP_BINDING_INVALID;
	cep_rcu_read_unlock();
	if (!qp || b == CEP_BINDING_INVALID)
		return -ENOENT;
	if (b == CEP_BINDING_RESERVED)
		return -ESHUTDOWN;
	if (cep_lookup_comm_id(t, b, &cep))
		return -ENOENT;
	if (atomic_load(&cep->qp_link) != (CEP_LINK_LINKED | qpn)) {
		cep_put(cep); /* unbound since we read the word */
		return -ENOENT;
	}
	*out = cep;
	return 0;
}
