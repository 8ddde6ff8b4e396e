/* SPDX-License-Identifier: MIT */
/*
 * The CM message layouts typed again, for the tests only, straight from the
 * IBTA vol. 1 chapter 12 tables (byte offsets within the CM message, bit 0 =
 * MSB) and independent of src/wire/wire_fields.h: the golden vectors are built
 * from these rows with a bit-at-a-time writer that shares no code with the
 * codec, so a wrong offset, width or mask on either side shows.
 */
#ifndef CEP_TEST_GOLDEN_H
#define CEP_TEST_GOLDEN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cep/wire.h>

struct grow {
	const char *name;
	unsigned byte, bit, width;  /* width in bits; arrays: 8 * length */
	size_t off, size;           /* host member in struct cep_msg */
	int array;                  /* GID or byte array: copied as bytes */
};

#define GM_(m, mem) offsetof(struct cep_msg, u.m.mem), sizeof(((struct cep_msg *)0)->u.m.mem)
#define GU(m, mem, by, bi, w) { #mem, by, bi, w, GM_(m, mem), 0 }
#define GA(m, mem, by, len) { #mem, by, 0, (len) * 8, GM_(m, mem), 1 }

static const struct grow g_req[] = {
	GU(req, local_comm_id, 0, 0, 32), GU(req, vendor_id, 5, 0, 24), /* ECE, IBTA 1.4 */
	GU(req, service_id, 8, 0, 64),
	GU(req, local_ca_guid, 16, 0, 64), GU(req, local_qkey, 28, 0, 32),
	GU(req, local_qpn, 32, 0, 24), GU(req, responder_resources, 35, 0, 8),
	GU(req, local_eecn, 36, 0, 24), GU(req, initiator_depth, 39, 0, 8),
	GU(req, remote_eecn, 40, 0, 24), GU(req, remote_cm_response_timeout, 43, 0, 5),
	GU(req, transport_service_type, 43, 5, 2), GU(req, end_to_end_flow_control, 43, 7, 1),
	GU(req, starting_psn, 44, 0, 24), GU(req, local_cm_response_timeout, 47, 0, 5),
	GU(req, retry_count, 47, 5, 3), GU(req, partition_key, 48, 0, 16),
	GU(req, path_mtu, 50, 0, 4), GU(req, rdc_exists, 50, 4, 1),
	GU(req, rnr_retry_count, 50, 5, 3), GU(req, max_cm_retries, 51, 0, 4),
	GU(req, srq, 51, 4, 1), GU(req, extended_transport_type, 51, 5, 3),
	GU(req, primary.local_lid, 52, 0, 16), GU(req, primary.remote_lid, 54, 0, 16),
	GA(req, primary.local_gid, 56, 16), GA(req, primary.remote_gid, 72, 16),
	GU(req, primary.flow_label, 88, 0, 20), GU(req, primary.packet_rate, 91, 2, 6),
	GU(req, primary.traffic_class, 92, 0, 8), GU(req, primary.hop_limit, 93, 0, 8),
	GU(req, primary.sl, 94, 0, 4), GU(req, primary.subnet_local, 94, 4, 1),
	GU(req, primary.local_ack_timeout, 95, 0, 5),
	GU(req, alternate.local_lid, 96, 0, 16), GU(req, alternate.remote_lid, 98, 0, 16),
	GA(req, alternate.local_gid, 100, 16), GA(req, alternate.remote_gid, 116, 16),
	GU(req, alternate.flow_label, 132, 0, 20), GU(req, alternate.packet_rate, 135, 2, 6),
	GU(req, alternate.traffic_class, 136, 0, 8), GU(req, alternate.hop_limit, 137, 0, 8),
	GU(req, alternate.sl, 138, 0, 4), GU(req, alternate.subnet_local, 138, 4, 1),
	GU(req, alternate.local_ack_timeout, 139, 0, 5), GU(req, sap_supported, 139, 5, 1),
	GA(req, private_data, 140, 92),
};
static const struct grow g_mra[] = {
	GU(mra, local_comm_id, 0, 0, 32), GU(mra, remote_comm_id, 4, 0, 32),
	GU(mra, message_mraed, 8, 0, 2), GU(mra, service_timeout, 9, 0, 5),
	GA(mra, private_data, 10, 222),
};
static const struct grow g_rej[] = {
	GU(rej, local_comm_id, 0, 0, 32), GU(rej, remote_comm_id, 4, 0, 32),
	GU(rej, message_rejected, 8, 0, 2), GU(rej, reject_info_length, 9, 0, 7),
	GU(rej, reason, 10, 0, 16), GA(rej, ari, 12, 72), GA(rej, private_data, 84, 148),
};
static const struct grow g_rep[] = {
	GU(rep, local_comm_id, 0, 0, 32), GU(rep, remote_comm_id, 4, 0, 32),
	GU(rep, local_qkey, 8, 0, 32), GU(rep, local_qpn, 12, 0, 24),
	GU(rep, local_eecn, 16, 0, 24), GU(rep, starting_psn, 20, 0, 24),
	GU(rep, vendor_id_h, 15, 0, 8), GU(rep, vendor_id_m, 19, 0, 8), /* ECE, IBTA 1.4 */
	GU(rep, vendor_id_l, 23, 0, 8),
	GU(rep, responder_resources, 24, 0, 8), GU(rep, initiator_depth, 25, 0, 8),
	GU(rep, target_ack_delay, 26, 0, 5), GU(rep, failover_accepted, 26, 5, 2),
	GU(rep, end_to_end_flow_control, 26, 7, 1), GU(rep, rnr_retry_count, 27, 0, 3),
	GU(rep, srq, 27, 3, 1), GU(rep, local_ca_guid, 28, 0, 64),
	GA(rep, private_data, 36, 196),
};
static const struct grow g_rtu[] = {
	GU(rtu, local_comm_id, 0, 0, 32), GU(rtu, remote_comm_id, 4, 0, 32),
	GA(rtu, private_data, 8, 224),
};
static const struct grow g_dreq[] = {
	GU(dreq, local_comm_id, 0, 0, 32), GU(dreq, remote_comm_id, 4, 0, 32),
	GU(dreq, remote_qpn_eecn, 8, 0, 24), GA(dreq, private_data, 12, 220),
};
static const struct grow g_drep[] = {
	GU(drep, local_comm_id, 0, 0, 32), GU(drep, remote_comm_id, 4, 0, 32),
	GA(drep, private_data, 8, 224),
};
static const struct grow g_lap[] = {
	GU(lap, local_comm_id, 0, 0, 32), GU(lap, remote_comm_id, 4, 0, 32),
	GU(lap, remote_qpn_eecn, 12, 0, 24), GU(lap, remote_cm_response_timeout, 15, 0, 5),
	GU(lap, alternate.local_lid, 20, 0, 16), GU(lap, alternate.remote_lid, 22, 0, 16),
	GA(lap, alternate.local_gid, 24, 16), GA(lap, alternate.remote_gid, 40, 16),
	GU(lap, alternate.flow_label, 56, 0, 20), GU(lap, alternate.traffic_class, 59, 0, 8),
	GU(lap, alternate.hop_limit, 60, 0, 8), GU(lap, alternate.packet_rate, 61, 2, 6),
	GU(lap, alternate.sl, 62, 0, 4), GU(lap, alternate.subnet_local, 62, 4, 1),
	GU(lap, alternate.local_ack_timeout, 63, 0, 5), GA(lap, private_data, 64, 168),
};
static const struct grow g_apr[] = {
	GU(apr, local_comm_id, 0, 0, 32), GU(apr, remote_comm_id, 4, 0, 32),
	GU(apr, additional_info_length, 8, 0, 8), GU(apr, ap_status, 9, 0, 8),
	GA(apr, additional_info, 12, 72), GA(apr, private_data, 84, 148),
};
static const struct grow g_sidr_req[] = {
	GU(sidr_req, request_id, 0, 0, 32), GU(sidr_req, partition_key, 4, 0, 16),
	GU(sidr_req, service_id, 8, 0, 64), GA(sidr_req, private_data, 16, 216),
};
static const struct grow g_sidr_rep[] = {
	GU(sidr_rep, request_id, 0, 0, 32), GU(sidr_rep, status, 4, 0, 8),
	GU(sidr_rep, additional_info_length, 5, 0, 8), GU(sidr_rep, qpn, 8, 0, 24),
	GU(sidr_rep, service_id, 12, 0, 64), GU(sidr_rep, qkey, 20, 0, 32),
	GA(sidr_rep, additional_info, 24, 72), GA(sidr_rep, private_data, 96, 136),
};

struct gmsg {
	enum cep_msg_type type;
	uint16_t attr;
	const struct grow *rows;
	size_t n;
};

#define GMSG_(t, a, r) { t, a, r, sizeof(r) / sizeof(r[0]) }
static const struct gmsg g_msgs[] = {
	GMSG_(CEP_MSG_REQ, 0x0010, g_req), GMSG_(CEP_MSG_MRA, 0x0011, g_mra),
	GMSG_(CEP_MSG_REJ, 0x0012, g_rej), GMSG_(CEP_MSG_REP, 0x0013, g_rep),
	GMSG_(CEP_MSG_RTU, 0x0014, g_rtu), GMSG_(CEP_MSG_DREQ, 0x0015, g_dreq),
	GMSG_(CEP_MSG_DREP, 0x0016, g_drep), GMSG_(CEP_MSG_SIDR_REQ, 0x0017, g_sidr_req),
	GMSG_(CEP_MSG_SIDR_REP, 0x0018, g_sidr_rep), GMSG_(CEP_MSG_LAP, 0x0019, g_lap),
	GMSG_(CEP_MSG_APR, 0x001a, g_apr),
};
#define G_NMSGS (sizeof(g_msgs) / sizeof(g_msgs[0]))

/* Bit-at-a-time access to the CM message @cm (bit 0 = MSB of byte 0). */
static inline unsigned g_bit(const uint8_t *cm, unsigned pos)
{
	return (cm[pos / 8] >> (7 - pos % 8)) & 1u;
}

static inline void g_setbit(uint8_t *cm, unsigned pos, unsigned v)
{
	if (v)
		cm[pos / 8] = (uint8_t)(cm[pos / 8] | (0x80u >> (pos % 8)));
	else
		cm[pos / 8] = (uint8_t)(cm[pos / 8] & ~(0x80u >> (pos % 8)));
}

static inline uint64_t g_get(const uint8_t *cm, unsigned byte, unsigned bit, unsigned width)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < width; i++)
		v = (v << 1) | g_bit(cm, byte * 8 + bit + i);
	return v;
}

static inline void g_put(uint8_t *cm, unsigned byte, unsigned bit, unsigned width, uint64_t v)
{
	for (unsigned i = 0; i < width; i++)
		g_setbit(cm, byte * 8 + bit + i, (unsigned)(v >> (width - 1 - i)) & 1u);
}

static inline uint64_t g_host(const struct cep_msg *m, const struct grow *r)
{
	const uint8_t *p = (const uint8_t *)m + r->off;
	uint8_t a; uint16_t b; uint32_t c; uint64_t d;

	switch (r->size) {
	case 1: memcpy(&a, p, 1); return a;
	case 2: memcpy(&b, p, 2); return b;
	case 4: memcpy(&c, p, 4); return c;
	default: memcpy(&d, p, 8); return d;
	}
}

/* Mark the bits of @g's rows in @used (232 bytes). */
static inline void g_used(const struct gmsg *g, uint8_t *used)
{
	memset(used, 0, CEP_CM_DATA_SIZE);
	for (size_t i = 0; i < g->n; i++)
		for (unsigned k = 0; k < g->rows[i].width; k++)
			g_setbit(used, g->rows[i].byte * 8 + g->rows[i].bit + k, 1);
}

/* Write a CM header by hand: version 1, class 7, class version 2, Send. */
static inline void g_hdr(uint8_t *mad, uint16_t attr, uint64_t tid)
{
	memset(mad, 0, CEP_MAD_HDR_SIZE);
	mad[0] = 1; mad[1] = 0x07; mad[2] = 2; mad[3] = 0x03;
	for (int i = 0; i < 8; i++)
		mad[8 + i] = (uint8_t)(tid >> (56 - 8 * i));
	mad[16] = (uint8_t)(attr >> 8); mad[17] = (uint8_t)attr;
}

/* Force the fields whose values the spec constrains to legal values, so a
 * pattern image stays a valid MAD. */
static inline void g_legalise(enum cep_msg_type t, uint8_t *cm)
{
	switch (t) {
	case CEP_MSG_REQ:
		if (g_get(cm, 32, 0, 24) < 2) g_put(cm, 32, 0, 24, 2);
		{
			uint64_t mtu = g_get(cm, 50, 0, 4);
			if (mtu < 1 || mtu > 5) g_put(cm, 50, 0, 4, mtu % 5 + 1);
		}
		if (g_get(cm, 43, 5, 2) == 3) g_put(cm, 51, 5, 3, 1); /* XRC */
		break;
	case CEP_MSG_REP:
		if (g_get(cm, 12, 0, 24) < 2) g_put(cm, 12, 0, 24, 2);
		if (g_get(cm, 26, 5, 2) == 3) g_put(cm, 26, 5, 2, 2);
		break;
	case CEP_MSG_MRA:
		if (g_get(cm, 8, 0, 2) == 3) g_put(cm, 8, 0, 2, 2);
		break;
	case CEP_MSG_REJ:
		if (g_get(cm, 8, 0, 2) == 3) g_put(cm, 8, 0, 2, 2);
		if (g_get(cm, 9, 0, 7) > 72) g_put(cm, 9, 0, 7, 72);
		break;
	case CEP_MSG_APR:
		if (g_get(cm, 8, 0, 8) > 72) g_put(cm, 8, 0, 8, 72);
		if (g_get(cm, 9, 0, 8) > 13) g_put(cm, 9, 0, 8, 13);
		break;
	case CEP_MSG_SIDR_REP:
		if (g_get(cm, 5, 0, 8) > 72) g_put(cm, 5, 0, 8, 72);
		if (g_get(cm, 4, 0, 8) > 5) g_put(cm, 4, 0, 8, 5);
		break;
	default:
		break;
	}
}

/* A golden MAD of type @g: every field bit copied from @pattern (e.g. all
 * ones: every field at its maximum), reserved bits 0, constrained fields
 * made legal. */
static inline void g_build(const struct gmsg *g, const uint8_t *pattern, uint64_t tid,
			   uint8_t *mad)
{
	uint8_t used[CEP_CM_DATA_SIZE];
	uint8_t *cm = mad + CEP_MAD_HDR_SIZE;

	g_hdr(mad, g->attr, tid);
	g_used(g, used);
	for (unsigned i = 0; i < CEP_CM_DATA_SIZE; i++)
		cm[i] = pattern[i] & used[i];
	g_legalise(g->type, cm);
}

#endif /* CEP_TEST_GOLDEN_H */
