/* SPDX-License-Identifier: MIT */
/*
 * libcep QP connection parameters: everything INIT, RTR and RTS of a
 * connected QP need, filled from what the CM exchanged (the REQ sent or
 * received, the REP received, the accept parameters), with the kernel CM's
 * mapping of every field. Plain values, no libibverbs: the CM keeps one per
 * id, and cep/verbs.h turns it into struct ibv_qp_attr.
 *
 * Guarantees: every function here is pure on caller-owned values; bad
 * input returns -EINVAL and changes nothing. See docs/real-rdma.md.
 */
#ifndef CEP_QP_H
#define CEP_QP_H

#include <stddef.h>
#include <stdint.h>

#include <cep/cm.h>
#include <cep/export.h>
#include <cep/transport.h>
#include <cep/wire.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Access flags for INIT, with libibverbs' IBV_ACCESS_* values. */
enum {
	CEP_QP_ACCESS_LOCAL_WRITE = 1,
	CEP_QP_ACCESS_REMOTE_WRITE = 2,
	CEP_QP_ACCESS_REMOTE_READ = 4,
	CEP_QP_ACCESS_REMOTE_ATOMIC = 8,
};

enum cep_qp_role {
	CEP_QP_ROLE_NONE = 0,
	CEP_QP_ROLE_ACTIVE = 1,   /* sent the REQ */
	CEP_QP_ROLE_PASSIVE = 2,  /* received the REQ */
};

/* What the params hold so far (bits of cep_qp_params.have). */
enum {
	CEP_QP_HAVE_INIT = 1u << 0, /* port, P_Key index, access flags */
	CEP_QP_HAVE_RTR = 1u << 1,  /* path, remote QPN, RQ PSN, MTU, responder res. */
	CEP_QP_HAVE_RTS = 1u << 2,  /* SQ PSN, ACK timeout, retries, initiator depth */
};

/*
 * PSNs: the starting PSN a CM message carries is where its *sender's*
 * receive queue starts (the kernel CM and rdma_cm read it so). The REQ's
 * is the active side's RQ PSN and the passive side's SQ PSN; the REP's is
 * the passive side's RQ PSN and the active side's SQ PSN.
 */

/* One path as a QP address vector (struct ibv_ah_attr) plus its ACK timeout. */
struct cep_qp_path {
	uint16_t dlid;          /* 0 on RoCE */
	uint8_t sl;             /* 4 bits */
	uint8_t src_path_bits;
	uint8_t static_rate;    /* IBTA rate encoding = enum ibv_rate; 0 = port rate */
	uint8_t is_global;      /* GRH: always on RoCE */
	uint8_t sgid_index;     /* local GID index */
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint32_t flow_label;    /* 20 bits */
	uint8_t dgid[16];       /* remote GID, network order */
	uint8_t port_num;
	uint16_t pkey_index;
	uint8_t timeout;        /* local ACK timeout, 5-bit exponent */
};

/*
 * Everything INIT, RTR and RTS need, on either side. Filled in two steps
 * per side (below); a caller may adjust fields between fill and use (for
 * instance clamp max_rd_atomic to the device's max_qp_init_rd_atom).
 */
struct cep_qp_params {
	size_t size;                /* sizeof(struct cep_qp_params) */
	uint8_t role;               /* enum cep_qp_role */
	uint8_t have;               /* CEP_QP_HAVE_* */
	uint8_t transport;          /* enum cep_transport_service: RC, UC, or
				       CEP_TS_EXTENDED for XRC (the active
				       side's QP an XRC initiator, the
				       passive side's a target) */
	uint8_t link_layer;         /* 1 InfiniBand, 2 Ethernet (RoCE) */
	uint8_t port_num;
	uint16_t pkey_index;
	uint32_t access_flags;      /* CEP_QP_ACCESS_* (= IBV_ACCESS_*) for INIT */
	struct cep_qp_path primary;
	struct cep_qp_path alternate;
	uint8_t has_alternate;      /* alternate path present and accepted */
	uint32_t local_qpn;
	uint32_t dest_qpn;          /* remote QPN (24 bits) */
	uint32_t rq_psn;            /* our starting PSN (the one we sent) */
	uint32_t sq_psn;            /* the peer's starting PSN */
	uint8_t path_mtu;           /* enum ibv_mtu, 1..5 */
	uint8_t max_rd_atomic;      /* RTS: our initiator depth */
	uint8_t max_dest_rd_atomic; /* RTR: our responder resources */
	uint8_t min_rnr_timer;      /* RTR: 5-bit RNR NAK timer code */
	uint8_t retry_count;        /* RTS: 3 bits */
	uint8_t rnr_retry;          /* RTS: 3 bits (7 = infinite) */
	uint8_t packet_life_time;   /* active: of the path, for the ACK timeout */
};

/*
 * The combined ACK timeout (5-bit exponent) for a path of packet life time
 * @packet_life_time and a remote CA ACK delay @ack_delay: about
 * 2 * packet life + ACK delay, as the kernel CM computes it. Pure.
 */
CEP_EXPORT uint8_t cep_qp_ack_timeout(uint8_t ack_delay, uint8_t packet_life_time);

/*
 * Active side, step 1: from the parameters given to cep_cm_connect() and
 * the local port (transport query_port). Fills the INIT half (have =
 * INIT). @port gives port number, link layer, GID index and active MTU
 * (used when conn->path_mtu is 0, as cep_cm_connect does). 0 or -EINVAL.
 */
CEP_EXPORT int cep_qp_params_active(struct cep_qp_params *p,
				    const struct cep_port_info *port,
				    const struct cep_cm_conn_param *conn);

/*
 * Active side, step 2: from the REP received (REP_RECEIVED event,
 * ev->msg.u.rep). Adds RTR and RTS: remote QPN, SQ PSN, responder
 * resources = REP initiator depth, initiator depth = REP responder
 * resources, RNR retry = REP RNR retry count, ACK timeout from the REP's
 * target ACK delay and the path's packet life time. -EINVAL if step 1 was
 * not done (role) or the REP is invalid (QPN 0/1, PSN wider than 24 bits).
 * XRC (transport CEP_TS_EXTENDED): the remote QPN is the target QP the
 * REP's local EECN names, and its local QPN must be 0.
 */
CEP_EXPORT int cep_qp_params_active_rep(struct cep_qp_params *p,
					const struct cep_rep *rep);

/*
 * Passive side, step 1: from the REQ received (REQ_RECEIVED event,
 * ev->msg.u.req) and the local port. The path is the REQ's primary path
 * reversed (remote = the REQ's local GID/LID); the local GID index is
 * @port->gid_index. Fills INIT (and the path, remote QPN, SQ PSN, MTU;
 * RTR also needs our RQ PSN, which the accept gives). 0 or -EINVAL (bad
 * REQ: QPN, MTU, type - RD, or an extended transport other than XRC). An
 * XRC REQ makes the parameters an XRC target's: RTR sets the responder's
 * limits, RTS the ACK timeout alone (the kernel's cm_init_qp_rts_attr).
 */
CEP_EXPORT int cep_qp_params_passive(struct cep_qp_params *p,
				     const struct cep_port_info *port,
				     const struct cep_req *req);

/*
 * Passive side, step 2: from the parameters given to cep_cm_accept().
 * Sets RQ PSN, responder resources and initiator depth from @acc, and the
 * alternate path only if @acc->failover_accepted is 0 (accepted); adds
 * RTR and RTS. -EINVAL if step 1 was not done or @acc is invalid.
 */
CEP_EXPORT int cep_qp_params_passive_accept(struct cep_qp_params *p,
					    const struct cep_cm_accept_param *acc);

#ifdef __cplusplus
}
#endif

#endif /* CEP_QP_H */
