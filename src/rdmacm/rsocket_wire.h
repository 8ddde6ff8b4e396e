/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep: the wire of stream rsockets (rsocket.c), as
 * librdmacm's rsocket.c defines it - the connection data of the REQ and
 * REP, the immediate data of every RDMA write, the grant and I/O-map
 * entries written into the peer's tables, and the sizes both sides must
 * agree on; and the two headers of datagram rsockets (rsocket_dgram.c). Pure definitions and encoders, no state: the unit test
 * (tests/rdmacm/rsocket.c) checks them byte for byte.
 */
#ifndef RCM_RSOCKET_WIRE_H
#define RCM_RSOCKET_WIRE_H

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* ---- the protocol's constants (librdmacm's, the wire depends on them) --- */

#define RSO_VERSION     1
#define RSO_FLAG_NET    (1u << 0) /* the sender is big-endian */
#define RSO_FLAG_IOMAP  (1u << 1) /* target_sgl is followed by an iomap table */
#define RSO_SGL_SIZE    2         /* grants in flight: two halves of the ring */
#define RSO_CTRL_SLOTS  4         /* send queue entries kept for control */
#define RSO_SNDLOWAT    2048      /* a write waits for this much send buffer */
#define RSO_OLAP_START  2048      /* first write of a long send; doubles */
#define RSO_MAX_XFER    65536     /* up to this */
#define RSO_QP_MIN      16
#define RSO_QP_MAX      0xfffe
#define RSO_CONN_RETRIES 6

/* The immediate: bits 31-29 the operation, 28-0 its datum. */
enum { RSO_OP_DATA = 0, RSO_OP_WRITE = 2, RSO_OP_SGL = 4, RSO_OP_IOMAP_SGL = 6, RSO_OP_CTRL = 7 };
/* (RSO_OP_WRITE never travels: riowrite's writes carry no immediate; it
 * marks their completions.) */
enum { RSO_CTRL_DISCONNECT = 0, RSO_CTRL_KEEPALIVE = 1, RSO_CTRL_SHUTDOWN = 2 };
#define RSO_MSG(op, d)  (((uint32_t)(op) << 29) | (uint32_t)(d))
#define RSO_MSG_OP(m)   ((m) >> 29)
#define RSO_MSG_DATA(m) ((m) & 0x1fffffffu)
#define RSO_WR_RECV     (1ull << 63) /* wr_id of a receive */

/* An SGE as the peer writes it into our SGL: in the writer's byte order,
 * swapped to ours when the two differ (the connection data's NET flag). */
struct rso_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

/* An I/O map entry as written into the peer's table: the peer's offset
 * for it and where it lies (writer's byte order, as the SGL). */
struct rso_iomap {
	uint64_t offset;
	struct rso_sge sge;
};
_Static_assert(sizeof(struct rso_iomap) == 24, "rsocket iomap entry");

/* The REQ's and REP's private data; every multi-byte field big-endian. */
struct rso_conn {
	uint8_t version;
	uint8_t flags;
	uint16_t credits;         /* receive queue entries */
	uint8_t reserved[3];
	uint8_t target_iomap_size; /* librdmacm's 8-bit scale; 0: none */
	struct rso_sge target_sgl; /* where grants go: addr, key, 2 entries */
	struct rso_sge data_buf;   /* the first grant: half the ring */
};
_Static_assert(sizeof(struct rso_conn) == 40, "rsocket connection data");
/* AF_IB ids carry no CMA header; the data follow room for one. */
#define RSO_IB_HDR 36

/* librdmacm's 8-bit size scale: up to 128 as is, above in units of 256. */
static inline unsigned rso_value_to_scale(unsigned v)
{
	return v <= 128 ? v : (128 | (v >> 8));
}

static inline unsigned rso_scale_to_value(unsigned s)
{
	return s <= 128 ? s : (s & ~128u) << 8;
}

/* Our connection data: version 1, the byte-order flag, the I/O-map flag
 * (librdmacm always sets it; our table has iomap_entries entries, often
 * 0), rq receive credits, the grant table (two entries at sgl_addr) and
 * the first grant (half the ring at rbuf). */
static inline void rso_conn_encode(struct rso_conn *c, uint16_t rq, unsigned iomap_entries,
				   uint64_t sgl_addr, uint32_t sgl_key, uint64_t rbuf,
				   uint32_t half, uint32_t rbuf_key)
{
	memset(c, 0, sizeof(*c));
	c->version = RSO_VERSION;
	c->flags = RSO_FLAG_IOMAP | (__BYTE_ORDER == __BIG_ENDIAN ? RSO_FLAG_NET : 0);
	c->credits = htobe16(rq);
	c->target_iomap_size = (uint8_t)rso_value_to_scale(iomap_entries);
	c->target_sgl.addr = htobe64(sgl_addr);
	c->target_sgl.length = htobe32(RSO_SGL_SIZE);
	c->target_sgl.key = htobe32(sgl_key);
	c->data_buf.addr = htobe64(rbuf);
	c->data_buf.length = htobe32(half);
	c->data_buf.key = htobe32(rbuf_key);
}

/* The peer's connection data, checked before anything is made for it:
 * -EPROTO short or without a grant table, -EPROTONOSUPPORT another
 * version. */
static inline int rso_conn_parse(const void *pdata, size_t len, size_t off, struct rso_conn *c)
{
	if (!pdata || len < off + sizeof(*c))
		return -EPROTO;
	memcpy(c, (const uint8_t *)pdata + off, sizeof(*c));
	if (c->version != RSO_VERSION)
		return -EPROTONOSUPPORT;
	if (!c->target_sgl.length || !c->data_buf.length)
		return -EPROTO;
	return 0;
}

/* ---- datagram rsockets (rsocket_dgram.c) ---------------------------------
 *
 * Every datagram carries one of two headers. Over a UD QP (Q_Key
 * RDMA_UDP_QKEY) the sender's address goes in front of the data: version
 * 4 or 6, the header's own length (8 or 24), the UDP port and the IP
 * address of the sending rsocket, as the receiver's rrecvfrom reports
 * it. Over the companion UDP socket (the first datagrams to a
 * destination whose QP number is not known yet, and the answer that
 * tells it) a tagged header: tag 0x55555555, version, operation (data or
 * control), its length (16 or 28), the sending QP's number in the low 24
 * bits, the sender's IP address. Layouts byte for byte as librdmacm's
 * struct ds_header and struct ds_udp_header. */

#define RDS_MSG_SIZE      2048 /* one message slot, as librdmacm's RS_SNDLOWAT */
#define RDS_GRH_SIZE      40   /* in front of every UD receive */
#define RDS_UDP_TAG       0x55555555u
#define RDS_HDR4_LEN      8
#define RDS_HDR6_LEN      24
#define RDS_UDP_HDR4_LEN  16
#define RDS_UDP_HDR6_LEN  28
/* the UDP header's operations: librdmacm's RS_OP_DATA and RS_OP_CTRL */
enum { RDS_UDP_OP_DATA = RSO_OP_DATA, RDS_UDP_OP_CTRL = RSO_OP_CTRL };

struct rds_hdr {
	uint8_t version; /* 4 or 6 */
	uint8_t length;  /* RDS_HDR4_LEN or RDS_HDR6_LEN */
	uint16_t port;   /* big-endian */
	union {
		uint32_t ipv4; /* big-endian */
		struct {
			uint32_t flowinfo; /* as sin6_flowinfo */
			uint8_t addr[16];
		} ipv6;
	} addr;
};
_Static_assert(sizeof(struct rds_hdr) == RDS_HDR6_LEN, "datagram rsocket header");
_Static_assert(offsetof(struct rds_hdr, addr) == 4, "datagram rsocket header");

struct rds_udp_hdr {
	uint32_t tag; /* big-endian RDS_UDP_TAG */
	uint8_t version;
	uint8_t op;
	uint8_t length;
	uint8_t reserved;
	uint32_t qpn; /* big-endian, low 24 bits */
	union {
		uint32_t ipv4;
		uint8_t ipv6[16];
	} addr;
};
_Static_assert(sizeof(struct rds_udp_hdr) == RDS_UDP_HDR6_LEN, "datagram rsocket UDP header");
_Static_assert(offsetof(struct rds_udp_hdr, qpn) == 8, "datagram rsocket UDP header");

/* The UD header for an IPv4 or IPv6 socket address (network order kept);
 * -EAFNOSUPPORT for another family. */
static inline int rds_hdr_encode(struct rds_hdr *h, const struct sockaddr *sa)
{
	memset(h, 0, sizeof(*h));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		h->version = 4;
		h->length = RDS_HDR4_LEN;
		h->port = in->sin_port;
		h->addr.ipv4 = in->sin_addr.s_addr;
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		h->version = 6;
		h->length = RDS_HDR6_LEN;
		h->port = in6->sin6_port;
		h->addr.ipv6.flowinfo = in6->sin6_flowinfo;
		memcpy(h->addr.ipv6.addr, &in6->sin6_addr, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* A received UD message of len bytes (after the GRH): its header checked
 * against the family the rsocket is of, the sender's address written to
 * *sa. The header's length, or -EPROTO (short, unknown version, a length
 * that is not its version's, another family). */
static inline int rds_hdr_parse(const void *buf, size_t len, int family,
				struct sockaddr_storage *sa)
{
	const uint8_t *b = (const uint8_t *)buf;
	struct rds_hdr h;

	memset(sa, 0, sizeof(*sa));
	memset(&h, 0, sizeof(h));
	if (len < RDS_HDR4_LEN)
		return -EPROTO;
	memcpy(&h, b, len < sizeof(h) ? len : sizeof(h));
	if (h.version == 4 && h.length == RDS_HDR4_LEN && family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)sa;

		in->sin_family = AF_INET;
		in->sin_port = h.port;
		in->sin_addr.s_addr = h.addr.ipv4;
		return RDS_HDR4_LEN;
	}
	if (h.version == 6 && h.length == RDS_HDR6_LEN && family == AF_INET6 &&
	    len >= RDS_HDR6_LEN) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = h.port;
		in6->sin6_flowinfo = h.addr.ipv6.flowinfo;
		memcpy(&in6->sin6_addr, h.addr.ipv6.addr, 16);
		return RDS_HDR6_LEN;
	}
	return -EPROTO;
}

/* The UDP header from a QP's UD header (its version and address) and
 * its number; returns the header's length. */
static inline size_t rds_udp_hdr_encode(struct rds_udp_hdr *u, const struct rds_hdr *h,
					uint8_t op, uint32_t qpn)
{
	memset(u, 0, sizeof(*u));
	u->tag = htobe32(RDS_UDP_TAG);
	u->version = h->version;
	u->op = op;
	u->qpn = htobe32(qpn & 0xffffff);
	if (h->version == 4) {
		u->length = RDS_UDP_HDR4_LEN;
		u->addr.ipv4 = h->addr.ipv4;
	} else {
		u->length = RDS_UDP_HDR6_LEN;
		memcpy(u->addr.ipv6, h->addr.ipv6.addr, 16);
	}
	return u->length;
}

/* A UDP datagram of len bytes from a peer of family from_family: its
 * header checked (tag, version of that family, its length, no longer
 * than the datagram, a known operation); the header's length, or
 * -EPROTO. *op and *qpn (24 bits) set on success. */
static inline int rds_udp_hdr_parse(const void *buf, size_t len, int from_family,
				    uint8_t *op, uint32_t *qpn)
{
	struct rds_udp_hdr u;

	if (len < RDS_UDP_HDR4_LEN)
		return -EPROTO;
	memcpy(&u, buf, len < sizeof(u) ? len : sizeof(u));
	if (be32toh(u.tag) != RDS_UDP_TAG)
		return -EPROTO;
	if (!((u.version == 4 && from_family == AF_INET && u.length == RDS_UDP_HDR4_LEN) ||
	      (u.version == 6 && from_family == AF_INET6 && u.length == RDS_UDP_HDR6_LEN)))
		return -EPROTO;
	if (len < u.length || (u.op != RDS_UDP_OP_DATA && u.op != RDS_UDP_OP_CTRL))
		return -EPROTO;
	*op = u.op;
	*qpn = be32toh(u.qpn) & 0xffffff;
	return u.length;
}

#endif /* RCM_RSOCKET_WIRE_H */
