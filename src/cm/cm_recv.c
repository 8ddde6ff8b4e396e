/* SPDX-License-Identifier: MIT */
/*
 * CM engine: the receive path. A transport's receive callback decodes
 * nothing but the identifiers that pick the owning worker (local comm ID %
 * N for replies; a keyed SipHash of (remote comm ID, CA GUID) for REQ and
 * SIDR_REQ, so a sender cannot aim a flood at one worker) and posts the
 * MAD to that worker's ring; the worker decodes and validates it (wire.c)
 * and calls the message's handler (cm_conn.c, cm_lap.c, cm_sidr.c). So a
 * CEP's MADs are handled in order, as one worker. On a transport's own
 * receive thread (umad) the MAD runs there, as its worker, while that
 * worker sleeps, and a full ring makes the thread wait instead of drop.
 * See docs/cm.md and docs/concurrency.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_internal.h"
#include "core/table_internal.h"
#include "transport/recv_wait.h"

/* The longest a receive thread waits for room in a full worker ring before
 * it drops the MAD (counted QUEUE_FULL): far above a worker's time for a
 * ring of MADs, so only a worker stuck in a callback reaches it, and the
 * port's other workers do not wait on that one for longer. */
#define CM_RECV_WAIT_MS 2000

/* SipHash-2-4 (Aumasson, Bernstein) of the 12-byte message (id, guid)
 * under the context's secret key: the worker of a REQ / SIDR_REQ. Without
 * the key a sender cannot choose the worker its flood lands on, e.g. the
 * worker that owns a connection it wants to starve. */
#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND(v0, v1, v2, v3) do { \
	v0 += v1; v1 = ROTL64(v1, 13); v1 ^= v0; v0 = ROTL64(v0, 32); \
	v2 += v3; v3 = ROTL64(v3, 16); v3 ^= v2; \
	v0 += v3; v3 = ROTL64(v3, 21); v3 ^= v0; \
	v2 += v1; v1 = ROTL64(v1, 17); v1 ^= v2; v2 = ROTL64(v2, 32); \
} while (0)

static uint64_t siphash_12(const uint64_t k[2], uint32_t id, uint64_t guid)
{
	uint64_t v0 = k[0] ^ 0x736f6d6570736575ull, v1 = k[1] ^ 0x646f72616e646f6dull;
	uint64_t v2 = k[0] ^ 0x6c7967656e657261ull, v3 = k[1] ^ 0x7465646279746573ull;
	/* little-endian words of the bytes id(4) guid(8), then the length */
	uint64_t m0 = (uint64_t)id | guid << 32;
	uint64_t m1 = guid >> 32 | (uint64_t)12 << 56;

	v3 ^= m0;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m0;
	v3 ^= m1;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m1;
	v2 ^= 0xff;
	for (int i = 0; i < 4; i++)
		SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

static unsigned route_hash(const struct cep_cm *cm, uint32_t id, uint64_t guid)
{
	return (unsigned)(siphash_12(cm->route_key, id, guid) % cm->nworkers);
}

/* ---- receive path ------------------------------------------------------- */

/* A REQ of a class version we do not support (cep_mad_peek checked the
 * length, base version and class): REJ 31 "unsupported class version"
 * with the highest we support in the ARI, as IBTA table 109 and
 * docs/protocol.md say. Other messages of that version are only dropped.
 * Stateless; any thread. */
static void reject_class_version(struct cep_cm *cm, const uint8_t *mad,
				 const struct cep_mad_addr *from)
{
	const uint8_t *p = mad + CEP_MAD_HDR_SIZE;
	struct cep_mad_addr to = cm_reply_addr(from);
	struct cep_msg r;

	if (mad[3] != 0x03 || ((unsigned)mad[16] << 8 | mad[17]) != 0x0010) /* Send, REQ */
		return;
	cep_msg_init(&r, CEP_MSG_REJ, cm_be64(mad + 8));
	r.u.rej.remote_comm_id = cm_be32(p); /* the REQ's local comm ID, offset 0 */
	r.u.rej.message_rejected = CEP_MSG_CODE_REQ;
	r.u.rej.reason = CEP_REJ_INVALID_CLASS_VERSION;
	r.u.rej.ari[0] = 2; /* the only class version this CM speaks */
	r.u.rej.reject_info_length = 1;
	cm_send_raw(cm, 0, &r, &to, NULL);
}

/* Transport thread, holding no libcep lock: route by the comm ID addressed
 * to us (REQ: by the remote (comm ID, CA GUID)). On a sender's thread it
 * never blocks and takes no id lock; on a transport's own receive thread
 * (cep_recv_wait_abort set) it may run the MAD as its worker (id locks,
 * events, callbacks) or wait for room in the worker's ring. */
void cm_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	struct cep_cm *cm = ctx;
	enum cep_wire_error why;
	enum cep_msg_type t;
	unsigned w = 0;

	if (atomic_load_explicit(&cm->stopping, memory_order_relaxed)) {
		cm_drop(cm, 0, CEP_CM_DROP_STOPPED);
		return;
	}
	if (cep_mad_peek(mad, len, &t, &why)) {
		if (why == CEP_WIRE_ERR_CLASS_VERSION)
			reject_class_version(cm, mad, from);
		cm_drop(cm, 0, CEP_CM_DROP_DECODE);
		return;
	}
	const uint8_t *p = mad + CEP_MAD_HDR_SIZE;

	switch (t) {
	case CEP_MSG_REQ:
		w = route_hash(cm, cm_be32(p), cm_be64(p + 16));
		break;
	case CEP_MSG_SIDR_REQ:
		w = route_hash(cm, cm_be32(p), cm_sidr_source(from));
		break;
	case CEP_MSG_SIDR_REP:
		w = cm_be32(p) % cm->nworkers;
		break;
	case CEP_MSG_REJ:
		if (cm_be32(p + 4) == 0 && (((unsigned)p[10] << 8) | p[11]) == CEP_REJ_TIMEOUT)
			w = route_hash(cm, cm_be32(p), cm_be64(p + 12));
		else
			w = cm_be32(p + 4) % cm->nworkers;
		break;
	default:
		w = cm_be32(p + 4) % cm->nworkers;
		break;
	}
	if (cep_recv_wait_abort) {
		/* The transport's own receive thread (umad): run the MAD here
		 * while its worker sleeps (no hand-off, no wake-up), else wait
		 * for room rather than drop it (the peer would wait a whole
		 * retry timeout). transport/recv_wait.h, docs/concurrency.md. */
		if (cep_dispatch_run_mad(cm->d, w, mad, len, from) == 0)
			return;
		if (cep_dispatch_post_mad_wait(cm->d, w, mad, len, from,
					       cep_recv_wait_abort, CM_RECV_WAIT_MS))
			cm_drop(cm, w, CEP_CM_DROP_QUEUE_FULL);
		return;
	}
	/* A sender's thread (the in-process fabric), maybe a worker: never
	 * waits for another worker. */
	if (cep_dispatch_post_mad(cm->d, w, mad, len, from))
		cm_drop(cm, w, CEP_CM_DROP_QUEUE_FULL);
}

/* Worker thread: one MAD of this worker's ring. */
void cm_mad(void *ctx, unsigned w, const uint8_t *mad, size_t len,
		   const struct cep_mad_addr *from)
{
	struct cep_cm *cm = ctx;
	struct cep_msg m;

	if (atomic_load_explicit(&cm->stopping, memory_order_relaxed)) {
		cm_drop(cm, w, CEP_CM_DROP_STOPPED);
		return;
	}
	if (cep_msg_decode(mad, len, &m, NULL)) {
		cm_drop(cm, w, CEP_CM_DROP_DECODE);
		return;
	}
	/* Comm ID 0 names nobody: a REQ or REP offering it cannot be answered
	 * or matched later, so it is refused like a malformed MAD. */
	if ((m.type == CEP_MSG_REQ && m.u.req.local_comm_id == 0) ||
	    (m.type == CEP_MSG_REP && m.u.rep.local_comm_id == 0)) {
		cm_drop(cm, w, CEP_CM_DROP_DECODE);
		return;
	}
	STAT_ADD(cm, w, received[m.type]);
	switch (m.type) {
	case CEP_MSG_REQ: cm_handle_req(cm, w, &m, from); break;
	case CEP_MSG_REP: cm_handle_rep(cm, w, &m, from); break;
	case CEP_MSG_RTU: cm_handle_rtu(cm, w, &m, from); break;
	case CEP_MSG_MRA: cm_handle_mra(cm, w, &m, from); break;
	case CEP_MSG_REJ: cm_handle_rej(cm, w, &m, from); break;
	case CEP_MSG_DREQ: cm_handle_dreq(cm, w, &m, from); break;
	case CEP_MSG_DREP: cm_handle_drep(cm, w, &m, from); break;
	case CEP_MSG_LAP: cm_handle_lap(cm, w, &m, from); break;
	case CEP_MSG_APR: cm_handle_apr(cm, w, &m, from); break;
	case CEP_MSG_SIDR_REQ: cm_handle_sidr_req(cm, w, &m, from); break;
	case CEP_MSG_SIDR_REP: cm_handle_sidr_rep(cm, w, &m, from); break;
	default: cm_drop(cm, w, CEP_CM_DROP_UNSUPPORTED); break;
	}
}
