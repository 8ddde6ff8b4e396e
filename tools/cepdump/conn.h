/* SPDX-License-Identifier: MIT */
/*
 * cepdump's connection view (--flow, --summary): the CM MADs of a capture
 * grouped into connections and SIDR lookups, each with a verdict.
 *
 * A connection is what IBTA vol. 1 ch. 12 keys it by: each side's
 * (communication ID, CA GUID). REQ and REP carry the sender's CA GUID; an
 * address (LID on IB, GID on RoCE) seen sending one stands for that CA
 * GUID everywhere in the capture, so later messages, which carry comm IDs
 * only, find their connection by (sender's CA, local comm ID) or
 * (receiver's CA, remote comm ID). A SIDR lookup is keyed by (requester's
 * CA, request ID). A MAD sent again with the same sender, type and
 * transaction ID is a retry when a timer resends that type (REQ, REP,
 * DREQ, LAP, SIDR_REQ) and it came no sooner than half the sender's
 * response timeout from the REQ, else a duplicate (a network copy, or an
 * answer sent again to a retried request). Single-threaded.
 */
#ifndef CEPDUMP_CONN_H
#define CEPDUMP_CONN_H

#include <stdint.h>

#include <cep/wire.h>

#include "capture.h"

enum { SIDE_A, SIDE_B };     /* A: active (sent the REQ / SIDR_REQ) */

enum mark { MARK_FIRST, MARK_RETRY, MARK_DUP };

/* One CM MAD, reduced to what the views show. */
struct mad {
	uint64_t ns, tid;
	uint64_t sid;            /* REQ, SIDR_REQ, SIDR_REP: service ID */
	uint64_t guid;           /* REQ, REP: local CA GUID; REJ Timeout: ARI */
	uint32_t frame;
	uint32_t local, remote;  /* comm IDs; SIDR: request ID in local */
	uint32_t qpn;            /* REQ/REP local, DREQ/LAP remote, SIDR_REP QPN */
	uint32_t psn;            /* REQ, REP starting PSN */
	uint32_t qkey;           /* SIDR_REP Q_Key */
	uint32_t src, dst;       /* address indexes */
	uint32_t next;           /* next MAD of the group, index + 1; 0 = last */
	uint32_t group;
	const char *invalid;     /* first field holding a reserved value, or NULL */
	uint64_t invalid_value;
	uint16_t status;         /* REJ reason, APR AP status, SIDR_REP status */
	uint8_t type;            /* enum cep_msg_type */
	uint8_t code;            /* REJ message rejected, MRA message MRAed */
	uint8_t timeout;         /* REQ/LAP remote CM response timeout, MRA service timeout */
	uint8_t timeout2;        /* REQ local CM response timeout */
	uint8_t side;            /* SIDE_A / SIDE_B: who sent it */
	uint8_t mark;            /* enum mark */
	uint16_t copy;           /* 0 first, n: n-th copy sent again */
};

struct addr {
	uint8_t gid[16];
	uint16_t lid;
	uint8_t ib;              /* keyed by LID (IB framing), else by GID */
	uint8_t have_gid;
	uint8_t have_guid;
	uint64_t guid;           /* CA GUID learned from a REQ/REP it sent */
};

enum verdict {
	V_REJECTED,              /* REJ (not Timeout) before RTU; SIDR status != 0 */
	V_TIMED_OUT,             /* REJ Timeout before RTU, once the retries ran out */
	V_ABORTED,               /* REJ Timeout before RTU, sooner than a timer
				    could have expired: the application ended it */
	V_NOT_ESTABLISHED,       /* REQ seen, no RTU and no REJ; SIDR unanswered */
	V_FAILED,                /* after RTU: REJ, DREQ or LAP unanswered, APR != 0 */
	V_INVALID,               /* a field holds a value the spec reserves */
	V_RETRIED,               /* established, but something was sent again */
	V_OK,
	V_COUNT
};

struct end {
	uint32_t addr;           /* address index; UINT32_MAX: not seen */
	uint32_t comm;           /* comm ID (SIDR: request ID on A); 0: not seen */
	uint32_t qpn;
	uint32_t psn;
	uint32_t qkey;           /* SIDR: the SIDR_REP's Q_Key */
	uint64_t guid;           /* 0: not known */
};

struct group {
	uint8_t sidr;
	uint8_t have_req;        /* the REQ / SIDR_REQ is in the capture */
	uint8_t established;     /* 1: RTU (SIDR: SIDR_REP) seen; 2: no RTU, but a
				    REP and then DREQ/LAP: the connection was used */
	uint8_t verdict;         /* enum verdict */
	struct end a, b;
	uint64_t sid, req_tid;
	uint8_t a_timeout;       /* REQ remote CM response timeout: A's resend period */
	uint8_t b_timeout;       /* REQ local CM response timeout: B's resend period */
	uint32_t first, last;    /* MAD index + 1 */
	uint32_t n, retries, dups, invalid;
	uint64_t t_first, t_last, t_rtu;
	char why[200];           /* the verdict in words */
};

struct conns {
	struct mad *mads;
	uint32_t nmads, capmads;
	struct addr *addrs;
	uint32_t naddrs, capaddrs;
	struct group *groups;
	uint32_t ngroups, capgroups;
	void *addr_map, *end_map;  /* hash maps (conn.c) */
};

/* Add one decoded MAD (@invalid_field: a row whose value breaks a rule,
 * or NULL). Exits the program with a message when memory runs out. */
void conns_add(struct conns *c, unsigned long frame, uint64_t ns, const struct dump_where *w,
	       const struct cep_msg *m, const char *invalid_field, uint64_t invalid_value);

/* Group every MAD added and give each group its verdict. Once. */
void conns_finish(struct conns *c);

void conns_free(struct conns *c);

/* "REJECTED", "TIMED OUT", ... */
const char *verdict_name(enum verdict v);

/* The address as text: "lid 1", "fe80::2:c903:0:a01". */
void addr_str(const struct conns *c, uint32_t addr, char *buf, size_t n);

/* Format @ns as "0.783 ms" / "1.204 s". */
void dur_str(uint64_t ns, char *buf, size_t n);

#endif /* CEPDUMP_CONN_H */
