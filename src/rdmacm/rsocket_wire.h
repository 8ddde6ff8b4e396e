/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep: the wire of stream rsockets (rsocket.c), as
 * librdmacm's rsocket.c defines it - the connection data of the REQ and
 * REP, the immediate data of every RDMA write, the grant and I/O-map
 * entries written into the peer's tables, and the sizes both sides must
 * agree on. Pure definitions and encoders, no state: the unit test
 * (tests/rdmacm/rsocket.c) checks them byte for byte.
 */
#ifndef RCM_RSOCKET_WIRE_H
#define RCM_RSOCKET_WIRE_H

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

#endif /* RCM_RSOCKET_WIRE_H */
