/* SPDX-License-Identifier: MIT */
/*
 * The cepd protocol: what a client (libcep's attached CM context,
 * src/service/remote.c) and the service (src/service/cepd.h) say to each
 * other over one Unix SOCK_SEQPACKET connection. One message per packet,
 * at most CEPD_MSG_MAX bytes, every message opens with struct cepd_hdr.
 *
 * Guarantees: the layout is the same on both ends (one node, one ABI: the
 * hello carries the protocol version and the sizes of the libcep structs
 * copied whole, and the service refuses a client whose differ); every
 * length is explicit and checked by the receiver before anything is read
 * (cepd_req_size()); a client names only handles the service gave it
 * (never a pointer). Nothing here allocates or blocks.
 *
 * Conversation: the client sends HELLO first and waits for its reply;
 * then it sends requests (any number in flight: each carries a sequence
 * number its REPLY echoes; one flagged CEPD_F_QUIET is answered only when
 * it fails) and receives REPLY and EVENTS messages in any interleaving.
 * The service serves one client's requests one at a time, in the order
 * they came. Events of one id arrive in the order the engine delivered
 * them; an EVENTS message carries one or more events (batched when several
 * are ready).
 */
#ifndef CEP_SERVICE_PROTO_H
#define CEP_SERVICE_PROTO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cep/cm.h>

#define CEPD_MAGIC 0x43455044u   /* "CEPD" */
#define CEPD_VERSION 3u   /* 2: the HELLO carries the client's identity;
			     3: ACCEPT and RTU may be sent quiet */
#define CEPD_MSG_MAX (64u * 1024u)
#define CEPD_DEFAULT_SOCKET "/run/cep/cepd.sock"
#define CEPD_DEVICE_MAX 64       /* RDMA device name, NUL included */

enum cepd_op {
	CEPD_HELLO = 1,     /* struct cepd_hello; reply struct cepd_hello_rep */
	CEPD_CREATE_ID,     /* -; reply struct cepd_id_rep */
	CEPD_DESTROY_ID,    /* handle */
	CEPD_LISTEN,        /* handle, x = service ID, y = mask, a = backlog */
	CEPD_CONNECT,       /* handle, struct cepd_conn, pd */
	CEPD_ACCEPT,        /* handle, struct cepd_accept, pd */
	CEPD_RTU,           /* handle, pd */
	CEPD_NOTIFY_EST,    /* handle */
	CEPD_REJECT,        /* handle, a = reason, pd, aux = ARI */
	CEPD_MRA,           /* handle, a = service timeout, pd */
	CEPD_DISCONNECT,    /* handle, pd */
	CEPD_DREP,          /* handle, pd */
	CEPD_LAP,           /* handle, struct cep_path, a = response timeout, pd */
	CEPD_APR,           /* handle, a = status, pd, aux = info */
	CEPD_SIDR_REQ,      /* handle, struct cepd_sidr, pd */
	CEPD_SIDR_REP,      /* handle, a = status, b = QPN, c = Q_Key, pd */
	CEPD_QP_REGISTER,   /* a = QPN */
	CEPD_QP_DESTROY,    /* a = QPN */
	CEPD_ID_QUERY,      /* handle; reply struct cepd_query_rep */
	CEPD_CM_STATS,      /* -; reply struct cep_cm_stats */
	CEPD_QUIESCE,       /* a = timeout ms */
	CEPD_SERVICE_STATS, /* -; reply text (not NUL-terminated) */
	CEPD_INIT_QP_ATTR,  /* handle, a = enum ibv_qp_state; reply struct cepd_qp_attr_rep */
	CEPD_QP_EVENT,      /* a = QPN, b = enum ibv_event_type (COMM_EST, PATH_MIG) */
	CEPD_MC_JOIN,       /* struct cepd_mc; reply struct cepd_mc_rep */
	CEPD_MC_LEAVE,      /* struct cepd_mc */
	CEPD_PATH_QUERY,    /* struct cepd_path_q; reply the PathRecord */
	CEPD_MC_BCAST,      /* struct cepd_mc (its P_Key); reply struct cepd_mc_rep:
			       IPoIB's broadcast group of that P_Key */
	CEPD_MIGRATE,       /* handle: cep_cm_migrate */
	CEPD_OP_COUNT,
	CEPD_REPLY = 0x100, /* struct cepd_rep + payload */
	CEPD_EVENTS = 0x101,/* struct cepd_events + records */
};

struct cepd_hdr {
	uint32_t op;        /* enum cepd_op */
	uint32_t len;       /* whole message, header included */
	uint64_t seq;       /* request: the client's; REPLY: echoed; EVENTS: 0 */
};

/* HELLO: which port the client attaches to. Sent with sendmsg(2) and two
 * control messages (level SOL_SOCKET), in this order:
 * - SCM_CREDENTIALS: struct ucred { getpid(), geteuid(), getegid() } (the
 *   kernel refuses a pid, uid or gid an unprivileged sender does not
 *   hold; the service reads them with SO_PASSCRED set);
 * - SCM_RIGHTS: exactly one fd, a pidfd of the sending process
 *   (pidfd_open(getpid(), 0)), which the client closes once sent: a
 *   handle of the client that cannot be recycled. Absent where
 *   pidfd_open is ENOSYS (kernels before 5.3).
 * The client's sender is cmr_hello_send() (src/service/remote.h); tests
 * that speak the protocol raw may use it. A HELLO sent with plain send()
 * has neither. */
#define CEPD_HELLO_STATS 1u /* a statistics reader: no port, only SERVICE_STATS */
struct cepd_hello {
	struct cepd_hdr h;
	uint32_t magic;          /* CEPD_MAGIC */
	uint32_t version;        /* CEPD_VERSION */
	uint32_t flags;          /* CEPD_HELLO_* */
	uint32_t port_num;       /* with device: the port number; without: the
				    index in the service's port list */
	char device[CEPD_DEVICE_MAX]; /* NUL-terminated; "" = by index */
	uint32_t sizes[4];       /* sizeof cep_msg, cep_path, cep_mad_addr,
				    cep_cm_stats: the copied structs agree */
};

/* Fill @h as this build's HELLO: magic, version, the sizes of the structs
 * the protocol copies whole, @flags and @port_num (the caller copies a
 * device name into h->device when it names one). */
static inline void cepd_hello_init(struct cepd_hello *h, uint32_t flags, uint32_t port_num)
{
	memset(h, 0, sizeof(*h));
	h->h.op = CEPD_HELLO;
	h->h.len = sizeof(*h);
	h->h.seq = 1;
	h->magic = CEPD_MAGIC;
	h->version = CEPD_VERSION;
	h->flags = flags;
	h->port_num = port_num;
	h->sizes[0] = sizeof(struct cep_msg);
	h->sizes[1] = sizeof(struct cep_path);
	h->sizes[2] = sizeof(struct cep_mad_addr);
	h->sizes[3] = sizeof(struct cep_cm_stats);
}

struct cepd_hello_rep {
	uint32_t version;
	uint32_t workers;
	uint64_t ca_guid;        /* host order */
	struct cep_port_info port;
};

/* Every other request: this, then the op's fixed part (cepd_param_size),
 * then pd_len bytes of private data, then aux_len bytes (ARI, APR info). */
/* cepd_req.flags */
#define CEPD_F_CREATE 1u /* create the id first (handle 0): an id of the
			    client is made on its first request, which saves
			    a round trip; the reply's payload names it (a
			    struct cepd_id_rep, whatever the request's own
			    answer; none if the create failed: then the
			    answer is the create's error). Events about it
			    may come before that reply: the client keeps
			    them until it knows the handle */
#define CEPD_F_QUIET 2u  /* no REPLY when the request succeeds (a failure
			    is answered as always): for a request whose
			    success the client does not wait for, so that
			    no answer wakes it. Only on the ops
			    cepd_op_info gives CEPD_OPF_QUIET:
			    CEPD_QP_REGISTER, CEPD_QP_DESTROY,
			    CEPD_DESTROY_ID, CEPD_DISCONNECT, CEPD_ACCEPT
			    and CEPD_RTU */

struct cepd_req {
	struct cepd_hdr h;
	uint32_t flags;          /* CEPD_F_* */
	uint32_t handle;         /* the id (0: none) */
	uint32_t a, b, c;
	uint64_t x, y;
	uint32_t pd_len;
	uint32_t aux_len;
	uint32_t pad;
};

/* CONNECT's fixed part: struct cep_cm_conn_param without its pointers. */
struct cepd_conn {
	uint64_t service_id;
	struct cep_path primary, alternate;
	struct cep_mad_addr peer;
	uint32_t qpn, starting_psn, qkey, ece_vendor_id, ece_options;
	uint16_t pkey;
	uint8_t has_peer;
	uint8_t responder_resources, initiator_depth;
	uint8_t remote_cm_response_timeout, local_cm_response_timeout;
	uint8_t max_cm_retries, packet_life_time, retry_count, rnr_retry_count;
	uint8_t path_mtu, transport_service_type, srq, manual_rtu;
	uint8_t flow_control, manual_drep;
};

struct cepd_accept {
	uint32_t qpn, starting_psn, qkey, ece_vendor_id, ece_options;
	uint8_t responder_resources, initiator_depth, target_ack_delay;
	uint8_t failover_accepted, rnr_retry_count, srq, manual_drep, flow_control;
};

struct cepd_sidr {
	uint64_t service_id;
	struct cep_mad_addr peer;
	uint16_t pkey;
	uint8_t timeout, max_cm_retries;
};

/* MC_JOIN, MC_LEAVE: one membership of the port at the SA (InfiniBand),
 * counted by cepd for the node as the kernel's ib_multicast counts it:
 * the first of a group's JoinState sends the SA a Set, the last leave a
 * Delete, and a client's memberships end with it. The Set is built by
 * cepd (src/sa/mc_join.h), from the fields below alone. */
#define CEPD_MC_QKEY 0x01234567u /* rdma_cm's RDMA_UDP_QKEY: the one Q_Key of a
					 client's choosing a join may name */
struct cepd_mc {
	uint8_t mgid[16];        /* JOIN: zero = the SA assigns one; LEAVE: the
				    MGID the join's answer named */
	uint8_t port_gid[16];    /* one of the port's GIDs */
	uint32_t qkey;           /* 0: the IPoIB broadcast group's (RDMA_PS_IPOIB);
				    else rdma_cm's, CEPD_MC_QKEY */
	uint16_t pkey;           /* in the port's P_Key table */
	uint8_t bit;             /* JoinState bit: 0 full, 3 send-only full */
	uint8_t pad;
};

/* MC_JOIN's reply payload (with ret 0): the SA's answer. MC_BCAST's:
 * status 0 and IPoIB's broadcast group's record (the Q_Key of an
 * RDMA_PS_IPOIB id, cma_set_qkey); its SA errors are the reply's ret
 * (-EADDRNOTAVAIL: the SA has no such group). */
struct cepd_mc_rep {
	int32_t status;          /* 0 joined; else the SA's failure as the
				    kernel's event status (-ETIMEDOUT,
				    -ENETDOWN, -EINVAL) */
	uint32_t pad;
	uint8_t rec[56];         /* status 0: the group's MCMemberRecord as on
				    the wire (CEP_SA_MCM_REC_SIZE bytes) */
};

/* PATH_QUERY: a PathRecord Get of the port's SA client in cepd (what the
 * kernel's rdma_cm asks for rdma_resolve_route on InfiniBand: the SA is
 * the kernel's to ask there, and /dev/infiniband/umad* is root's). The
 * query's fields as cep_sa_path_query takes them, encoded as a
 * PathRecord; the reply's payload is the SA's answer, encoded the same
 * way (CEP_SA_PATH_REC_SIZE bytes). */
struct cepd_path_q {
	uint64_t comp_mask;      /* CEP_SA_PR_*: SGID among them */
	uint32_t flags;          /* CEP_SA_QUERY_FRESH or 0 */
	uint32_t pad;
	uint8_t rec[64];         /* the query (CEP_SA_PATH_REC_SIZE bytes) */
};

struct cepd_rep {
	struct cepd_hdr h;       /* op CEPD_REPLY, seq of the request */
	int32_t ret;             /* 0 or -errno, as the local call's */
	uint32_t pad;
	/* payload: h.len - sizeof(struct cepd_rep) bytes */
};

struct cepd_id_rep {
	uint32_t handle;
	uint32_t local_comm_id;
};

struct cepd_query_rep {
	uint32_t state, lap_state, remote_comm_id, pad;
};

/* INIT_QP_ATTR's reply: the mask, then a struct ibv_qp_attr (libibverbs'
 * layout on this node; @attr_size tells the reader it is the same). */
struct cepd_qp_attr_rep {
	int32_t mask;
	uint32_t attr_size;
	/* struct ibv_qp_attr follows */
};

struct cepd_events {
	struct cepd_hdr h;       /* op CEPD_EVENTS */
	uint32_t count;
	uint32_t pad;
	/* count records, each struct cepd_ev then (has_msg) a struct cep_msg;
	 * each record's len includes both and is a multiple of 8 */
};

struct cepd_ev {
	uint32_t len;
	uint32_t type;           /* enum cep_cm_event_type */
	uint32_t handle;         /* the id; REQ/SIDR_REQ_RECEIVED: a new one */
	uint32_t listen_handle;  /* REQ/SIDR_REQ_RECEIVED: the listener */
	int32_t status;
	uint32_t local_comm_id;  /* of the id (a new one's is learnt here) */
	uint16_t has_msg;
	uint16_t pd_off;         /* private data: offset into the cep_msg */
	uint16_t pd_len;
	uint16_t has_pd;
	struct cep_mad_addr from;
};

/* What a request of an op may carry (cepd_op_info): one list, which
 * cepd_req_check and cepd's request table both read, so a new op is
 * written down once. */
#define CEPD_OPF_ID     1u /* acts on an id of the client (its handle) */
#define CEPD_OPF_CREATE 2u /* may make that id first (CEPD_F_CREATE): not
			      on an op that ends the id or whose answer is a
			      payload the created id's would replace */
#define CEPD_OPF_QUIET  4u /* may ask for no answer (CEPD_F_QUIET) */

/* Bytes of an op's fixed part after struct cepd_req, and its CEPD_OPF_*
 * into *flags (if not NULL); -1: not a request. Pure. */
static inline long cepd_op_info(uint32_t op, unsigned *flags)
{
	const unsigned id = CEPD_OPF_ID | CEPD_OPF_CREATE;
	unsigned f = 0;
	long size = 0;

	switch (op) {
	case CEPD_CONNECT: size = (long)sizeof(struct cepd_conn); f = id; break;
	case CEPD_ACCEPT:
		size = (long)sizeof(struct cepd_accept);
		f = id | CEPD_OPF_QUIET;
		break;
	case CEPD_LAP: size = (long)sizeof(struct cep_path); f = id; break;
	case CEPD_SIDR_REQ: size = (long)sizeof(struct cepd_sidr); f = id; break;
	case CEPD_LISTEN: case CEPD_NOTIFY_EST: case CEPD_REJECT:
	case CEPD_MRA: case CEPD_DREP: case CEPD_APR: case CEPD_SIDR_REP:
		f = id;
		break;
	case CEPD_RTU: case CEPD_DISCONNECT: f = id | CEPD_OPF_QUIET; break;
	case CEPD_DESTROY_ID: f = CEPD_OPF_ID | CEPD_OPF_QUIET; break;
	case CEPD_ID_QUERY: case CEPD_INIT_QP_ATTR: case CEPD_MIGRATE: f = CEPD_OPF_ID; break;
	case CEPD_QP_REGISTER: case CEPD_QP_DESTROY: f = CEPD_OPF_QUIET; break;
	case CEPD_MC_JOIN: case CEPD_MC_LEAVE: case CEPD_MC_BCAST:
		size = (long)sizeof(struct cepd_mc);
		break;
	case CEPD_PATH_QUERY: size = (long)sizeof(struct cepd_path_q); break;
	case CEPD_CREATE_ID: case CEPD_CM_STATS: case CEPD_QUIESCE: case CEPD_SERVICE_STATS:
	case CEPD_QP_EVENT:
		break;
	default:
		return -1;
	}
	if (flags)
		*flags = f;
	return size;
}

/* Bytes of an op's fixed part after struct cepd_req; -1: not a request. */
static inline long cepd_param_size(uint32_t op)
{
	return cepd_op_info(op, NULL);
}

/* The largest private data of any message (RTU's, DREP's) and of ARI / APR info:
 * a longer field is refused here; the engine checks each call's own. */
#define CEPD_PD_MAX CEP_RTU_PRIVATE_DATA_SIZE
#define CEPD_AUX_MAX CEP_REJ_ARI_SIZE

/* Whether @len bytes hold a well-formed request: 0, -EBADMSG (the
 * lengths disagree), -EMSGSIZE (a field longer than any message carries),
 * -EOPNOTSUPP (unknown op) or -EINVAL (unknown flags, CEPD_F_CREATE with a
 * handle or on an op without CEPD_OPF_CREATE, CEPD_F_QUIET on an op
 * without CEPD_OPF_QUIET).
 * Pure. */
static inline int cepd_req_check(const struct cepd_req *r, size_t len)
{
	unsigned opf;
	long ps;

	if (len < sizeof(*r) || r->h.len != len)
		return -EBADMSG;
	ps = cepd_op_info(r->h.op, &opf);
	if (ps < 0)
		return -EOPNOTSUPP;
	if (r->pd_len > CEPD_PD_MAX || r->aux_len > CEPD_AUX_MAX)
		return -EMSGSIZE;
	if ((r->flags & ~(CEPD_F_CREATE | CEPD_F_QUIET)) ||
	    ((r->flags & CEPD_F_QUIET) && !(opf & CEPD_OPF_QUIET)) ||
	    ((r->flags & CEPD_F_CREATE) && (r->handle || !(opf & CEPD_OPF_CREATE))))
		return -EINVAL;
	if (sizeof(*r) + (size_t)ps + r->pd_len + r->aux_len != len)
		return -EBADMSG;
	return 0;
}

#endif /* CEP_SERVICE_PROTO_H */
