/* SPDX-License-Identifier: MIT */
/*
 * libcep subnet administrator client (IBTA vol. 1 ch. 15): PathRecord and
 * ClassPortInfo queries over libibumad (management class 0x03, version 2),
 * with timeouts and retries of its own and a path cache shared by the
 * process, flushed when the port's SM LID, LID or state changes; and
 * MCMemberRecord Get, Set (join) and Delete (leave), never cached. Also
 * the SA MAD and record codecs, usable without a port (tests, tools).
 */
#ifndef CEP_SA_H
#define CEP_SA_H

#include <stddef.h>
#include <stdint.h>

#include <cep/cm.h>
#include <cep/export.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CEP_SA_MAD_SIZE         256
#define CEP_SA_HDR_SIZE         56   /* MAD + RMPP + SA headers */
#define CEP_SA_DATA_SIZE        200  /* one MAD's record data (no RMPP) */
#define CEP_SA_PATH_REC_SIZE    64   /* PathRecord, 15.2.5.16 */
#define CEP_SA_CPI_SIZE         72   /* ClassPortInfo, 13.4.8.1 */
#define CEP_SA_MCM_REC_SIZE     52   /* MCMemberRecord, 15.2.5.17 */

#define CEP_SA_MGMT_CLASS       0x03
#define CEP_SA_CLASS_VERSION    2
#define CEP_SA_METHOD_GET       0x01
#define CEP_SA_METHOD_SET       0x02
#define CEP_SA_METHOD_GET_RESP  0x81
#define CEP_SA_METHOD_DELETE    0x15
#define CEP_SA_METHOD_DELETE_RESP 0x95
#define CEP_SA_ATTR_CLASS_PORT_INFO 0x0001
#define CEP_SA_ATTR_PATH_REC    0x0035
#define CEP_SA_ATTR_MCMEMBER_REC 0x0038

/* PathRecord component mask bits (15.2.5.16); ServiceID takes two. */
#define CEP_SA_PR_SERVICE_ID    (UINT64_C(3) << 0)
#define CEP_SA_PR_DGID          (UINT64_C(1) << 2)
#define CEP_SA_PR_SGID          (UINT64_C(1) << 3)
#define CEP_SA_PR_DLID          (UINT64_C(1) << 4)
#define CEP_SA_PR_SLID          (UINT64_C(1) << 5)
#define CEP_SA_PR_RAW_TRAFFIC   (UINT64_C(1) << 6)
#define CEP_SA_PR_FLOW_LABEL    (UINT64_C(1) << 8)
#define CEP_SA_PR_HOP_LIMIT     (UINT64_C(1) << 9)
#define CEP_SA_PR_TCLASS        (UINT64_C(1) << 10)
#define CEP_SA_PR_REVERSIBLE    (UINT64_C(1) << 11)
#define CEP_SA_PR_NUMB_PATH     (UINT64_C(1) << 12)
#define CEP_SA_PR_PKEY          (UINT64_C(1) << 13)
#define CEP_SA_PR_QOS_CLASS     (UINT64_C(1) << 14)
#define CEP_SA_PR_SL            (UINT64_C(1) << 15)
#define CEP_SA_PR_MTU_SELECTOR  (UINT64_C(1) << 16)
#define CEP_SA_PR_MTU           (UINT64_C(1) << 17)
#define CEP_SA_PR_RATE_SELECTOR (UINT64_C(1) << 18)
#define CEP_SA_PR_RATE          (UINT64_C(1) << 19)
#define CEP_SA_PR_PLT_SELECTOR  (UINT64_C(1) << 20)
#define CEP_SA_PR_PLT           (UINT64_C(1) << 21)
#define CEP_SA_PR_PREFERENCE    (UINT64_C(1) << 22)

/* MCMemberRecord component mask bits (15.2.5.17). */
#define CEP_SA_MCM_MGID          (UINT64_C(1) << 0)
#define CEP_SA_MCM_PORT_GID      (UINT64_C(1) << 1)
#define CEP_SA_MCM_QKEY          (UINT64_C(1) << 2)
#define CEP_SA_MCM_MLID          (UINT64_C(1) << 3)
#define CEP_SA_MCM_MTU_SELECTOR  (UINT64_C(1) << 4)
#define CEP_SA_MCM_MTU           (UINT64_C(1) << 5)
#define CEP_SA_MCM_TCLASS        (UINT64_C(1) << 6)
#define CEP_SA_MCM_PKEY          (UINT64_C(1) << 7)
#define CEP_SA_MCM_RATE_SELECTOR (UINT64_C(1) << 8)
#define CEP_SA_MCM_RATE          (UINT64_C(1) << 9)
#define CEP_SA_MCM_PLT_SELECTOR  (UINT64_C(1) << 10)
#define CEP_SA_MCM_PLT           (UINT64_C(1) << 11)
#define CEP_SA_MCM_SL            (UINT64_C(1) << 12)
#define CEP_SA_MCM_FLOW_LABEL    (UINT64_C(1) << 13)
#define CEP_SA_MCM_HOP_LIMIT     (UINT64_C(1) << 14)
#define CEP_SA_MCM_SCOPE         (UINT64_C(1) << 15)
#define CEP_SA_MCM_JOIN_STATE    (UINT64_C(1) << 16)
#define CEP_SA_MCM_PROXY_JOIN    (UINT64_C(1) << 17)

/* JoinState bits (15.2.5.17; the last one is IBTA 1.3's send-only full
 * member, which rdma_cm's RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER asks). */
#define CEP_SA_JOIN_FULL          0x1u
#define CEP_SA_JOIN_NON           0x2u
#define CEP_SA_JOIN_SENDONLY_NON  0x4u
#define CEP_SA_JOIN_SENDONLY_FULL 0x8u

/* Selectors of MTU, rate and packet life time (15.2.5.16). */
enum cep_sa_selector {
	CEP_SA_SEL_GT = 0,
	CEP_SA_SEL_LT = 1,
	CEP_SA_SEL_EQ = 2,
	CEP_SA_SEL_BEST = 3,
};

/* A PathRecord. Numbers in host order, GIDs as on the wire; mtu, rate and
 * packet_life_time are the spec's encodings (IB_MTU_*: 1 = 256 .. 5 = 4096;
 * rate 2 = 2.5 Gb/s, 3 = 10 Gb/s, ...; life time 4.096 us * 2^value). */
struct cep_sa_path {
	uint64_t service_id;
	uint8_t dgid[16];
	uint8_t sgid[16];
	uint16_t dlid;
	uint16_t slid;
	uint8_t raw_traffic;               /* 1 bit */
	uint32_t flow_label;               /* 20 bits */
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t reversible;                /* 1 bit */
	uint8_t numb_path;                 /* 7 bits */
	uint16_t pkey;
	uint16_t qos_class;                /* 12 bits */
	uint8_t sl;                        /* 4 bits */
	uint8_t mtu_selector;              /* 2 bits each selector */
	uint8_t mtu;                       /* 6 bits */
	uint8_t rate_selector;
	uint8_t rate;                      /* 6 bits */
	uint8_t packet_life_time_selector;
	uint8_t packet_life_time;          /* 6 bits */
	uint8_t preference;
};

/* An MCMemberRecord: a port's membership of a multicast group, or the
 * group's parameters (Q_Key, MLID, MTU, rate, ...) as the SA answers them.
 * Encodings as in struct cep_sa_path; GIDs as on the wire. */
struct cep_sa_mcmember {
	uint8_t mgid[16];
	uint8_t port_gid[16];
	uint32_t qkey;
	uint16_t mlid;
	uint8_t mtu_selector;              /* 2 bits each selector */
	uint8_t mtu;                       /* 6 bits */
	uint8_t traffic_class;
	uint16_t pkey;
	uint8_t rate_selector;
	uint8_t rate;                      /* 6 bits */
	uint8_t packet_life_time_selector;
	uint8_t packet_life_time;          /* 6 bits */
	uint8_t sl;                        /* 4 bits */
	uint32_t flow_label;               /* 20 bits */
	uint8_t hop_limit;
	uint8_t scope;                     /* 4 bits */
	uint8_t join_state;                /* 4 bits: CEP_SA_JOIN_* */
	uint8_t proxy_join;                /* 1 bit */
};

/* The SA's ClassPortInfo (13.4.8.1), the fields a client uses. */
struct cep_sa_class_port_info {
	uint8_t base_version;
	uint8_t class_version;
	uint16_t capability_mask;
	uint32_t capability_mask2;         /* 27 bits */
	uint8_t resp_time_value;           /* 5 bits: 4.096 us * 2^value */
	uint8_t redirect_gid[16];
	uint16_t redirect_lid;
	uint16_t redirect_pkey;
	uint32_t redirect_qp;              /* 24 bits */
	uint32_t redirect_qkey;
};

/* The common MAD, RMPP and SA headers of one SA MAD (15.2.1.1). */
struct cep_sa_mad_hdr {
	uint8_t base_version;              /* 1 */
	uint8_t mgmt_class;                /* CEP_SA_MGMT_CLASS */
	uint8_t class_version;             /* CEP_SA_CLASS_VERSION */
	uint8_t method;
	uint16_t status;
	uint64_t tid;
	uint16_t attr_id;
	uint32_t attr_mod;
	uint64_t sm_key;
	uint16_t attr_offset;              /* in 8-byte words */
	uint64_t comp_mask;
};

/* Codecs: pure functions, any thread. Encoders return -EINVAL for a value
 * wider than its field (nothing is truncated silently). */
CEP_EXPORT int cep_sa_path_encode(const struct cep_sa_path *p,
				  uint8_t rec[CEP_SA_PATH_REC_SIZE]);
CEP_EXPORT void cep_sa_path_decode(const uint8_t rec[CEP_SA_PATH_REC_SIZE],
				   struct cep_sa_path *p);
CEP_EXPORT void cep_sa_cpi_decode(const uint8_t rec[CEP_SA_CPI_SIZE],
				  struct cep_sa_class_port_info *c);
CEP_EXPORT int cep_sa_mcmember_encode(const struct cep_sa_mcmember *m,
				      uint8_t rec[CEP_SA_MCM_REC_SIZE]);
CEP_EXPORT void cep_sa_mcmember_decode(const uint8_t rec[CEP_SA_MCM_REC_SIZE],
				       struct cep_sa_mcmember *m);
/* Write headers and @data_len bytes of @data (<= CEP_SA_DATA_SIZE) into a
 * zeroed 256-byte @mad. */
CEP_EXPORT int cep_sa_mad_encode(uint8_t mad[CEP_SA_MAD_SIZE],
				 const struct cep_sa_mad_hdr *h,
				 const void *data, size_t data_len);
/* Read the headers; -EINVAL if @len < CEP_SA_HDR_SIZE, -EPROTO if base
 * version, class or class version are not the SA's. */
CEP_EXPORT int cep_sa_mad_decode(const uint8_t *mad, size_t len,
				 struct cep_sa_mad_hdr *h);

/* ---- the client ---- */

struct cep_sa;

/* The port as the SA client last read it (libibumad, sysfs). */
struct cep_sa_port {
	uint16_t lid;
	uint8_t lmc;
	uint16_t sm_lid;
	uint8_t sm_sl;
	uint8_t state;                     /* 4: ACTIVE */
	uint8_t port_num;
	uint16_t pkey;                     /* P_Key index 0 */
	uint8_t gid[16];                   /* GID index 0: prefix + port GUID */
};

struct cep_sa_attr {
	size_t size;            /* sizeof(struct cep_sa_attr) */
	const char *dev_name;   /* NULL: libibumad's default CA */
	uint8_t port_num;       /* 0 means 1 */
	uint32_t timeout_ms;    /* per attempt; 0: 1000 */
	uint32_t attempts;      /* sends per query; 0: 4 */
	uint32_t cache_ttl_ms;  /* a cached path's life; 0: 300000 */
	uint32_t port_check_ms; /* max age of the port snapshot; 0: 1000 */
	uint32_t flags;         /* CEP_SA_ATTR_* */
};

#define CEP_SA_ATTR_NO_CACHE 0x1u  /* never cache paths */

/*
 * Take a reference on the process's SA client of @attr's port, opening it
 * (libibumad only: no verbs, so it runs under ibsim's preload) on first use.
 * Every later cep_sa_get of the same port shares the client, its cache and
 * its receive thread; the first caller's timeouts, attempts and TTL apply.
 * Errors: -EINVAL bad attr; -ENODEV no such device or port; -EACCES no
 * permission on /dev/infiniband/umad*; -ENOMEM; other -errno from
 * libibumad.
 */
CEP_EXPORT int cep_sa_get(const struct cep_sa_attr *attr, struct cep_sa **out);
/* Drop a reference; the last one stops the receive thread (bounded: it
 * polls in 100 ms steps) and closes the port. Not concurrently with calls
 * on @sa made under the same reference. */
CEP_EXPORT void cep_sa_put(struct cep_sa *sa);

#define CEP_SA_QUERY_FRESH 0x1u    /* skip the cache lookup (still stores) */

/*
 * One PathRecord Get: the fields of @query named in @comp_mask, sent to the
 * SM LID on QP1, answered with the SA's one best record in @out. Blocks for
 * at most attempts * timeout_ms (plus scheduling); any thread, concurrently.
 * A cached answer to the same (comp_mask, masked fields) returns at once.
 * Returns 0; -ETIMEDOUT no answer; -ENETDOWN port not active or no SM;
 * -EHOSTUNREACH the SA has no such path (ERR_NO_RECORDS); -EINVAL bad
 * query or the SA found it invalid; -EBUSY the SA stayed busy; -EAGAIN
 * the SA lacked resources; -EOPNOTSUPP the SA does not support the method
 * or attribute; -EPROTO any other error status; or the send's -errno.
 */
CEP_EXPORT int cep_sa_path_query(struct cep_sa *sa, uint64_t comp_mask,
				 const struct cep_sa_path *query,
				 uint32_t flags, struct cep_sa_path *out);
/* The SA's ClassPortInfo, kept until the next invalidation. Errors as
 * cep_sa_path_query. */
CEP_EXPORT int cep_sa_class_port_info(struct cep_sa *sa,
				      struct cep_sa_class_port_info *out);
/*
 * One MCMemberRecord request: @method CEP_SA_METHOD_GET (the group's one
 * record matching the fields of @rec named in @comp_mask), _SET (join:
 * the port in rec->port_gid becomes a member with rec->join_state; the SA
 * creates the group when the mask names what a new group needs, 15.2.5.17)
 * or _DELETE (leave: those join-state bits of that port end). The SA's
 * answer, the record as it now stands, goes to @out (may be NULL). Never
 * cached. Blocks as cep_sa_path_query; any thread, concurrently. A Set or
 * Delete is sent again, with the same TID, when no answer came within the
 * timeout, so a Delete whose first answer was lost may come back with the
 * SA's error for a membership that is already gone (-EINVAL).
 * Returns 0; -EINVAL bad arguments (method, mask beyond bit 17, a value
 * wider than its field) or the SA refused the request (ERR_REQ_INVALID,
 * e.g. a join with parameters that do not match the group, or a Delete of
 * no membership); -EHOSTUNREACH no such group (ERR_NO_RECORDS);
 * -ETIMEDOUT, -ENETDOWN, -EBUSY, -EAGAIN, -EOPNOTSUPP, -EPROTO as
 * cep_sa_path_query.
 */
CEP_EXPORT int cep_sa_mcmember(struct cep_sa *sa, uint8_t method, uint64_t comp_mask,
			       const struct cep_sa_mcmember *rec,
			       struct cep_sa_mcmember *out);
/* Re-read the port now (flushing the cache if SM LID, LID or state
 * changed) and copy it to @out. */
CEP_EXPORT int cep_sa_port_info(struct cep_sa *sa, struct cep_sa_port *out);
/* Flush the path cache and the ClassPortInfo. Any thread. */
CEP_EXPORT void cep_sa_invalidate(struct cep_sa *sa);

/*
 * Fill the REQ's side of @p from a PathRecord, as the kernel's
 * cm_format_req does with rdma_cm's route: the primary path (LIDs, GIDs,
 * flow label, rate, traffic class, hop limit, SL; subnet local when the
 * hop limit is at most 1), the P_Key, the path MTU and the packet life
 * time (which the CM's timers then use). Other members of @p are left as
 * they are. -EINVAL for NULL arguments or a record without an MTU.
 */
CEP_EXPORT int cep_sa_path_to_conn(const struct cep_sa_path *rec,
				   struct cep_cm_conn_param *p);

/* Counters since open; each read atomically, the set is not a snapshot. */
struct cep_sa_stats {
	uint64_t queries;        /* path, ClassPortInfo and MCMemberRecord calls */
	uint64_t cache_hits;
	uint64_t cache_misses;
	uint64_t sent;           /* MADs sent, retries included */
	uint64_t send_errors;
	uint64_t retries;        /* sends after a query's first */
	uint64_t timeouts;       /* queries that ended in -ETIMEDOUT */
	uint64_t answers;        /* GetResp/DeleteResp MADs matched to a query */
	uint64_t errors;         /* answers with a non-zero status */
	uint64_t dropped;        /* received MADs that matched no query */
	uint64_t invalidations;  /* cache flushes (port change or on demand) */
	uint64_t cache_entries;  /* paths cached now */
};

CEP_EXPORT int cep_sa_get_stats(struct cep_sa *sa, struct cep_sa_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* CEP_SA_H */
