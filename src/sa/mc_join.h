/* SPDX-License-Identifier: MIT */
/*
 * A port's join of a multicast group at the SA, as the kernel's rdma_cm
 * asks it (cma_join_ib_multicast, its broadcast-group lookup
 * cma_ib_mc_handler's parameters from ib_sa_get_mcmember_rec), and its
 * leave. Shared by the two that count memberships: librdmacm's mcast.c
 * for a process of its own, cepd's mcast.c for the node's clients. Uses
 * <cep/sa.h> only (cepd is built on libcep's public API), so each
 * includer gets its own copy of these few functions.
 *
 * What a join sends: first a Get of IPoIB's broadcast group of the P_Key
 * (ff12:401b:P_Key::ffff:ffff, the full-member bit set), whose SL, flow
 * label and traffic class the new group takes - and, when the join asks
 * the broadcast group's Q_Key (RDMA_PS_IPOIB), its rate, MTU and hop
 * limit too; then the Set: MGID (zero: the SA assigns one), port GID,
 * P_Key, Q_Key, JoinState. Nothing else of the caller's reaches the SA.
 *
 * Contract: any thread; blocks on the SA (cep_sa_mcmember's bounds).
 */
#ifndef CEP_SA_MC_JOIN_H
#define CEP_SA_MC_JOIN_H

#include <errno.h>
#include <string.h>

#include <cep/sa.h>

#define CEP_MC_BCAST_SCOPE 0x2   /* IPoIB's broadcast group: link-local */
#define CEP_MC_JOIN_MASK (CEP_SA_MCM_MGID | CEP_SA_MCM_PORT_GID | CEP_SA_MCM_PKEY |     \
			  CEP_SA_MCM_JOIN_STATE | CEP_SA_MCM_QKEY | CEP_SA_MCM_SL |      \
			  CEP_SA_MCM_FLOW_LABEL | CEP_SA_MCM_TCLASS)
#define CEP_MC_JOIN_MASK_IPOIB (CEP_SA_MCM_RATE | CEP_SA_MCM_RATE_SELECTOR |           \
				CEP_SA_MCM_MTU_SELECTOR | CEP_SA_MCM_MTU |                   \
				CEP_SA_MCM_HOP_LIMIT)
#define CEP_MC_LEAVE_MASK (CEP_SA_MCM_MGID | CEP_SA_MCM_PORT_GID | CEP_SA_MCM_JOIN_STATE)

static inline int cep_mc_zero16(const uint8_t *b)
{
	static const uint8_t z[16];

	return !memcmp(b, z, 16);
}

/* The first 6 bytes of an MGID of IPoIB's form (ipoib's broadcast
 * address, ip_ib_mc_map, ipv6_ib_mc_map): ff, 1 | scope 2, the signature
 * @sig (0x401b IPv4, 0x601b IPv6; rdma_cm's replaces the low byte by
 * 0x01), the P_Key with the full-member bit. */
static inline void cep_mc_ipoib_prefix(uint8_t mgid[16], uint16_t sig, uint16_t pkey)
{
	pkey |= 0x8000;
	mgid[0] = 0xff;
	mgid[1] = 0x10 | CEP_MC_BCAST_SCOPE;
	mgid[2] = (uint8_t)(sig >> 8);
	mgid[3] = (uint8_t)sig;
	mgid[4] = (uint8_t)(pkey >> 8);
	mgid[5] = (uint8_t)pkey;
}

/* IPoIB's broadcast group's record for P_Key @pkey from the SA: what the
 * kernel reads from its cache of the groups IPoIB joined.
 * -EADDRNOTAVAIL when the SA has none (the kernel's cache miss), else
 * cep_sa_mcmember's errors. */
static inline int cep_mc_bcast_rec(struct cep_sa *sa, uint16_t pkey, struct cep_sa_mcmember *out)
{
	struct cep_sa_mcmember q;
	int ret;

	memset(&q, 0, sizeof(q));
	cep_mc_ipoib_prefix(q.mgid, 0x401b, pkey);
	memset(q.mgid + 12, 0xff, 4);
	ret = cep_sa_mcmember(sa, CEP_SA_METHOD_GET, CEP_SA_MCM_MGID, &q, out);
	return ret == -EHOSTUNREACH ? -EADDRNOTAVAIL : ret;
}

/*
 * Make port GID @port_gid a member of group @mgid (zero: one the SA
 * assigns) with JoinState bit @bit (0-3), P_Key @pkey and Q_Key @qkey
 * (0: the broadcast group's, with its rate, MTU and hop limit). Returns 0
 * with *status 0 and the SA's record in @rec (its mgid the group asked
 * for when one was), or 0 with the SA's failure in *status as the
 * kernel's event status (-ETIMEDOUT, -ENETDOWN, else -EINVAL); or
 * -EADDRNOTAVAIL (no broadcast group to take the parameters from) or
 * another error of the broadcast group's Get.
 */
static inline int cep_mc_sa_join(struct cep_sa *sa, const uint8_t mgid[16],
				 const uint8_t port_gid[16], uint16_t pkey, uint32_t qkey,
				 unsigned bit, int *status, struct cep_sa_mcmember *rec)
{
	struct cep_sa_mcmember q;
	int ret;

	*status = 0;
	ret = cep_mc_bcast_rec(sa, pkey, &q);
	if (ret)
		return ret;
	memcpy(q.mgid, mgid, 16);
	memcpy(q.port_gid, port_gid, 16);
	if (qkey)
		q.qkey = qkey;
	q.pkey = pkey;
	q.join_state = (uint8_t)(1u << bit);
	ret = cep_sa_mcmember(sa, CEP_SA_METHOD_SET, CEP_MC_JOIN_MASK |
			      (qkey ? 0 : CEP_MC_JOIN_MASK_IPOIB), &q, rec);
	if (ret) {
		*status = ret == -ETIMEDOUT || ret == -ENETDOWN ? ret : -EINVAL;
		return 0;
	}
	if (!cep_mc_zero16(mgid))
		memcpy(rec->mgid, mgid, 16); /* the group asked for, whatever came */
	return 0;
}

/* End port GID @port_gid's JoinState bit @bit of group @mgid (a Delete;
 * its answer changes nothing for the caller: the membership is not the
 * caller's any more either way). */
static inline void cep_mc_sa_leave(struct cep_sa *sa, const uint8_t mgid[16],
				   const uint8_t port_gid[16], unsigned bit)
{
	struct cep_sa_mcmember q;

	memset(&q, 0, sizeof(q));
	memcpy(q.mgid, mgid, 16);
	memcpy(q.port_gid, port_gid, 16);
	q.join_state = (uint8_t)(1u << bit);
	(void)cep_sa_mcmember(sa, CEP_SA_METHOD_DELETE, CEP_MC_LEAVE_MASK, &q, NULL);
}

#endif /* CEP_SA_MC_JOIN_H */
