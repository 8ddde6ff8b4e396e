/* SPDX-License-Identifier: MIT */
/*
 * libcep wire tables (private): one row per row of the IBTA vol. 1 ch. 12
 * message tables, and the generic bit-field access that reads them.
 *
 * Guarantees: every field of every CM message is described here and only
 * here; encode, decode, cepdump -v/--json and docs/protocol.md all follow
 * these rows. Each row is checked at compile time (fits the 232-byte CM
 * payload, fits its host member, bit offset < 8) and each message's rows
 * sum to exactly 232 bytes, reserved rows included.
 *
 * Row kinds, offsets as in the spec tables (byte offset within the CM
 * message, i.e. MAD byte 24 + byte; bit 0 = most significant bit):
 *   U(msg, name, member, byte, bit, width)  unsigned big-endian bit field
 *   G(msg, name, member, byte)              128-bit GID, bytes as on the wire
 *   B(msg, name, member, byte, len)         byte array
 *   P(msg, byte, len)                       private data: ends at byte 232
 *   R(msg, byte, bit, width)                reserved: 0 on encode, ignored on decode
 */
#ifndef CEP_WIRE_FIELDS_H
#define CEP_WIRE_FIELDS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cep/wire.h>

/* Table 106: REQ */
#define CEP_FIELDS_REQ(U, G, B, P, R) \
	U(req, local_comm_id,              local_comm_id,               0, 0, 32) \
	R(req,                                                          4, 0, 8)  \
	U(req, vendor_id,                  vendor_id,                   5, 0, 24) \
	U(req, service_id,                 service_id,                  8, 0, 64) \
	U(req, local_ca_guid,              local_ca_guid,              16, 0, 64) \
	R(req,                                                         24, 0, 32) \
	U(req, local_q_key,                local_qkey,                 28, 0, 32) \
	U(req, local_qpn,                  local_qpn,                  32, 0, 24) \
	U(req, responder_resources,        responder_resources,        35, 0, 8)  \
	U(req, local_eecn,                 local_eecn,                 36, 0, 24) \
	U(req, initiator_depth,            initiator_depth,            39, 0, 8)  \
	U(req, remote_eecn,                remote_eecn,                40, 0, 24) \
	U(req, remote_cm_response_timeout, remote_cm_response_timeout, 43, 0, 5)  \
	U(req, transport_service_type,     transport_service_type,     43, 5, 2)  \
	U(req, end_to_end_flow_control,    end_to_end_flow_control,    43, 7, 1)  \
	U(req, starting_psn,               starting_psn,               44, 0, 24) \
	U(req, local_cm_response_timeout,  local_cm_response_timeout,  47, 0, 5)  \
	U(req, retry_count,                retry_count,                47, 5, 3)  \
	U(req, partition_key,              partition_key,              48, 0, 16) \
	U(req, path_packet_payload_mtu,    path_mtu,                   50, 0, 4)  \
	U(req, rdc_exists,                 rdc_exists,                 50, 4, 1)  \
	U(req, rnr_retry_count,            rnr_retry_count,            50, 5, 3)  \
	U(req, max_cm_retries,             max_cm_retries,             51, 0, 4)  \
	U(req, srq,                        srq,                        51, 4, 1)  \
	U(req, extended_transport_type,    extended_transport_type,    51, 5, 3)  \
	U(req, primary_local_port_lid,     primary.local_lid,          52, 0, 16) \
	U(req, primary_remote_port_lid,    primary.remote_lid,         54, 0, 16) \
	G(req, primary_local_port_gid,     primary.local_gid,          56)        \
	G(req, primary_remote_port_gid,    primary.remote_gid,         72)        \
	U(req, primary_flow_label,         primary.flow_label,         88, 0, 20) \
	R(req,                                                         90, 4, 6)  \
	U(req, primary_packet_rate,        primary.packet_rate,        91, 2, 6)  \
	U(req, primary_traffic_class,      primary.traffic_class,      92, 0, 8)  \
	U(req, primary_hop_limit,          primary.hop_limit,          93, 0, 8)  \
	U(req, primary_sl,                 primary.sl,                 94, 0, 4)  \
	U(req, primary_subnet_local,       primary.subnet_local,       94, 4, 1)  \
	R(req,                                                         94, 5, 3)  \
	U(req, primary_local_ack_timeout,  primary.local_ack_timeout,  95, 0, 5)  \
	R(req,                                                         95, 5, 3)  \
	U(req, alternate_local_port_lid,   alternate.local_lid,        96, 0, 16) \
	U(req, alternate_remote_port_lid,  alternate.remote_lid,       98, 0, 16) \
	G(req, alternate_local_port_gid,   alternate.local_gid,       100)        \
	G(req, alternate_remote_port_gid,  alternate.remote_gid,      116)        \
	U(req, alternate_flow_label,       alternate.flow_label,      132, 0, 20) \
	R(req,                                                        134, 4, 6)  \
	U(req, alternate_packet_rate,      alternate.packet_rate,     135, 2, 6)  \
	U(req, alternate_traffic_class,    alternate.traffic_class,   136, 0, 8)  \
	U(req, alternate_hop_limit,        alternate.hop_limit,       137, 0, 8)  \
	U(req, alternate_sl,               alternate.sl,              138, 0, 4)  \
	U(req, alternate_subnet_local,     alternate.subnet_local,    138, 4, 1)  \
	R(req,                                                        138, 5, 3)  \
	U(req, alternate_local_ack_timeout, alternate.local_ack_timeout, 139, 0, 5) \
	U(req, sap_supported,              sap_supported,             139, 5, 1)  \
	R(req,                                                        139, 6, 2)  \
	P(req,                                                        140, CEP_REQ_PRIVATE_DATA_SIZE)

/* Table 107: MRA */
#define CEP_FIELDS_MRA(U, G, B, P, R) \
	U(mra, local_comm_id,   local_comm_id,   0, 0, 32) \
	U(mra, remote_comm_id,  remote_comm_id,  4, 0, 32) \
	U(mra, message_mraed,   message_mraed,   8, 0, 2)  \
	R(mra,                                   8, 2, 6)  \
	U(mra, service_timeout, service_timeout, 9, 0, 5)  \
	R(mra,                                   9, 5, 3)  \
	P(mra,                                  10, CEP_MRA_PRIVATE_DATA_SIZE)

/* Table 108: REJ */
#define CEP_FIELDS_REJ(U, G, B, P, R) \
	U(rej, local_comm_id,      local_comm_id,       0, 0, 32) \
	U(rej, remote_comm_id,     remote_comm_id,      4, 0, 32) \
	U(rej, message_rejected,   message_rejected,    8, 0, 2)  \
	R(rej,                                          8, 2, 6)  \
	U(rej, reject_info_length, reject_info_length,  9, 0, 7)  \
	R(rej,                                          9, 7, 1)  \
	U(rej, reason,             reason,             10, 0, 16) \
	B(rej, ari,                ari,                12, CEP_REJ_ARI_SIZE) \
	P(rej,                                         84, CEP_REJ_PRIVATE_DATA_SIZE)

/* Table 110: REP */
#define CEP_FIELDS_REP(U, G, B, P, R) \
	U(rep, local_comm_id,           local_comm_id,            0, 0, 32) \
	U(rep, remote_comm_id,          remote_comm_id,           4, 0, 32) \
	U(rep, local_q_key,             local_qkey,               8, 0, 32) \
	U(rep, local_qpn,               local_qpn,               12, 0, 24) \
	U(rep, vendor_id_h,             vendor_id_h,             15, 0, 8)  \
	U(rep, local_ee_context_number, local_eecn,              16, 0, 24) \
	U(rep, vendor_id_m,             vendor_id_m,             19, 0, 8)  \
	U(rep, starting_psn,            starting_psn,            20, 0, 24) \
	U(rep, vendor_id_l,             vendor_id_l,             23, 0, 8)  \
	U(rep, responder_resources,     responder_resources,     24, 0, 8)  \
	U(rep, initiator_depth,         initiator_depth,         25, 0, 8)  \
	U(rep, target_ack_delay,        target_ack_delay,        26, 0, 5)  \
	U(rep, failover_accepted,       failover_accepted,       26, 5, 2)  \
	U(rep, end_to_end_flow_control, end_to_end_flow_control, 26, 7, 1)  \
	U(rep, rnr_retry_count,         rnr_retry_count,         27, 0, 3)  \
	U(rep, srq,                     srq,                     27, 3, 1)  \
	R(rep,                                                   27, 4, 4)  \
	U(rep, local_ca_guid,           local_ca_guid,           28, 0, 64) \
	P(rep,                                                   36, CEP_REP_PRIVATE_DATA_SIZE)

/* Table 111: RTU */
#define CEP_FIELDS_RTU(U, G, B, P, R) \
	U(rtu, local_comm_id,  local_comm_id,  0, 0, 32) \
	U(rtu, remote_comm_id, remote_comm_id, 4, 0, 32) \
	P(rtu,                                 8, CEP_RTU_PRIVATE_DATA_SIZE)

/* Table 112: DREQ */
#define CEP_FIELDS_DREQ(U, G, B, P, R) \
	U(dreq, local_comm_id,   local_comm_id,    0, 0, 32) \
	U(dreq, remote_comm_id,  remote_comm_id,   4, 0, 32) \
	U(dreq, remote_qpn_eecn, remote_qpn_eecn,  8, 0, 24) \
	R(dreq,                                   11, 0, 8)  \
	P(dreq,                                   12, CEP_DREQ_PRIVATE_DATA_SIZE)

/* Table 113: DREP */
#define CEP_FIELDS_DREP(U, G, B, P, R) \
	U(drep, local_comm_id,  local_comm_id,  0, 0, 32) \
	U(drep, remote_comm_id, remote_comm_id, 4, 0, 32) \
	P(drep,                                 8, CEP_DREP_PRIVATE_DATA_SIZE)

/* Table 115: LAP */
#define CEP_FIELDS_LAP(U, G, B, P, R) \
	U(lap, local_comm_id,               local_comm_id,                0, 0, 32) \
	U(lap, remote_comm_id,              remote_comm_id,               4, 0, 32) \
	R(lap,                                                            8, 0, 32) \
	U(lap, remote_qpn_eecn,             remote_qpn_eecn,             12, 0, 24) \
	U(lap, remote_cm_response_timeout,  remote_cm_response_timeout,  15, 0, 5)  \
	R(lap,                                                           15, 5, 3)  \
	R(lap,                                                           16, 0, 32) \
	U(lap, alternate_local_port_lid,    alternate.local_lid,         20, 0, 16) \
	U(lap, alternate_remote_port_lid,   alternate.remote_lid,        22, 0, 16) \
	G(lap, alternate_local_port_gid,    alternate.local_gid,         24)        \
	G(lap, alternate_remote_port_gid,   alternate.remote_gid,        40)        \
	U(lap, alternate_flow_label,        alternate.flow_label,        56, 0, 20) \
	R(lap,                                                           58, 4, 4)  \
	U(lap, alternate_traffic_class,     alternate.traffic_class,     59, 0, 8)  \
	U(lap, alternate_hop_limit,         alternate.hop_limit,         60, 0, 8)  \
	R(lap,                                                           61, 0, 2)  \
	U(lap, alternate_packet_rate,       alternate.packet_rate,       61, 2, 6)  \
	U(lap, alternate_sl,                alternate.sl,                62, 0, 4)  \
	U(lap, alternate_subnet_local,      alternate.subnet_local,      62, 4, 1)  \
	R(lap,                                                           62, 5, 3)  \
	U(lap, alternate_local_ack_timeout, alternate.local_ack_timeout, 63, 0, 5)  \
	R(lap,                                                           63, 5, 3)  \
	P(lap,                                                           64, CEP_LAP_PRIVATE_DATA_SIZE)

/* Table 116: APR */
#define CEP_FIELDS_APR(U, G, B, P, R) \
	U(apr, local_comm_id,          local_comm_id,           0, 0, 32) \
	U(apr, remote_comm_id,         remote_comm_id,          4, 0, 32) \
	U(apr, additional_info_length, additional_info_length,  8, 0, 8)  \
	U(apr, ap_status,              ap_status,               9, 0, 8)  \
	R(apr,                                                 10, 0, 16) \
	B(apr, additional_info,        additional_info,        12, CEP_APR_INFO_SIZE) \
	P(apr,                                                 84, CEP_APR_PRIVATE_DATA_SIZE)

/* Table 119: SIDR_REQ */
#define CEP_FIELDS_SIDR_REQ(U, G, B, P, R) \
	U(sidr_req, request_id,    request_id,    0, 0, 32) \
	U(sidr_req, partition_key, partition_key, 4, 0, 16) \
	R(sidr_req,                               6, 0, 16) \
	U(sidr_req, service_id,    service_id,    8, 0, 64) \
	P(sidr_req,                              16, CEP_SIDR_REQ_PRIVATE_DATA_SIZE)

/* Table 120: SIDR_REP */
#define CEP_FIELDS_SIDR_REP(U, G, B, P, R) \
	U(sidr_rep, request_id,             request_id,              0, 0, 32) \
	U(sidr_rep, status,                 status,                  4, 0, 8)  \
	U(sidr_rep, additional_info_length, additional_info_length,  5, 0, 8)  \
	R(sidr_rep,                                                  6, 0, 16) \
	U(sidr_rep, qpn,                    qpn,                     8, 0, 24) \
	R(sidr_rep,                                                 11, 0, 8)  \
	U(sidr_rep, service_id,             service_id,             12, 0, 64) \
	U(sidr_rep, q_key,                  qkey,                   20, 0, 32) \
	B(sidr_rep, additional_info,        additional_info,        24, CEP_SIDR_REP_INFO_SIZE) \
	P(sidr_rep,                                                 96, CEP_SIDR_REP_PRIVATE_DATA_SIZE)

/* Every message: X(TYPE, lower-case name, table macro). */
#define CEP_MSG_TABLES(X) \
	X(REQ,      req,      CEP_FIELDS_REQ)      \
	X(MRA,      mra,      CEP_FIELDS_MRA)      \
	X(REJ,      rej,      CEP_FIELDS_REJ)      \
	X(REP,      rep,      CEP_FIELDS_REP)      \
	X(RTU,      rtu,      CEP_FIELDS_RTU)      \
	X(DREQ,     dreq,     CEP_FIELDS_DREQ)     \
	X(DREP,     drep,     CEP_FIELDS_DREP)     \
	X(LAP,      lap,      CEP_FIELDS_LAP)      \
	X(APR,      apr,      CEP_FIELDS_APR)      \
	X(SIDR_REQ, sidr_req, CEP_FIELDS_SIDR_REQ) \
	X(SIDR_REP, sidr_rep, CEP_FIELDS_SIDR_REP)

/* Common MAD header (offsets within the MAD). Same row kinds, the host
 * member is in struct cep_mad_hdr. */
#define CEP_FIELDS_HDR(U, R) \
	U(base_version,   base_version,    0, 0, 8)  \
	U(mgmt_class,     mgmt_class,      1, 0, 8)  \
	U(class_version,  class_version,   2, 0, 8)  \
	U(method,         method,          3, 0, 8)  \
	U(status,         status,          4, 0, 16) \
	U(class_specific, class_specific,  6, 0, 16) \
	U(transaction_id, tid,             8, 0, 64) \
	U(attribute_id,   attr_id,        16, 0, 16) \
	R(                                18, 0, 16) \
	U(attribute_modifier, attr_mod,   20, 0, 32)

enum cep_field_kind {
	CEP_FIELD_UINT = 0,
	CEP_FIELD_GID,
	CEP_FIELD_BYTES,
	CEP_FIELD_RESERVED,
};

/* One row, instantiated from the macros above. */
struct cep_field {
	const char *name;      /* spec name in snake_case (JSON key); "reserved" */
	uint16_t byte;         /* offset in the CM message (header: in the MAD) */
	uint8_t bit;           /* first bit, 0 = MSB */
	uint8_t kind;          /* enum cep_field_kind */
	uint16_t width;        /* bits */
	uint16_t host_off;     /* offset of the host member in struct cep_msg */
	uint16_t host_size;    /* its size in bytes */
};

/* The rows of one message in spec order, reserved rows included; NULL and
 * *n = 0 for an invalid type. Static tables; any thread. */
const struct cep_field *cep_wire_fields(enum cep_msg_type type, size_t *n);
/* The rows of the common MAD header. */
const struct cep_field *cep_wire_hdr_fields(size_t *n);

/* Generic big-endian bit-field access: the field starting at bit @bit (0 =
 * MSB) of @p, @width bits, bit + width <= 64. */
uint64_t cep_bits_get(const uint8_t *p, unsigned bit, unsigned width);
void cep_bits_set(uint8_t *p, unsigned bit, unsigned width, uint64_t v);

/* The value of a UINT row in a host message (0 for other kinds). */
uint64_t cep_field_host_get(const struct cep_msg *m, const struct cep_field *f);

/* For tools that show what a peer sent (cepdump), never for the CM: as
 * cep_msg_decode(), but a MAD whose header passes every check and which
 * breaks only field-value rules (-EBADMSG) is still unpacked into *out;
 * *why names the first rule broken. Other refusals leave *out untouched.
 * Pure; any thread. */
int cep_msg_decode_lax(const uint8_t *mad, size_t len, struct cep_msg *out,
		       enum cep_wire_error *why);

/* The validation rule that row @f's value in @m breaks (docs/protocol.md,
 * "Validation on receive"), or CEP_WIRE_ERR_OK. The XRC rules are reported
 * on the REQ's transport_service_type row and the REP's local_qpn row.
 * Pure; any thread. */
enum cep_wire_error cep_field_rule_broken(const struct cep_msg *m, const struct cep_field *f);

/* Validation rules on host messages: X(TYPE, msg, member, min, max, error).
 * A value outside [min, max] is refused with CEP_WIRE_ERR_<error>. Two rules
 * are not ranges and live in code: REQ transport service type 3 requires
 * extended transport type XRC (1); a REP's local QPN is 2..0xffffff except
 * in an XRC target's REP, which names its QP in the local EECN (QPN 0, SRQ
 * set, EECN 2..0xffffff: the kernel's cm_format_rep for IB_QPT_XRC_TGT). */
#define CEP_WIRE_RULES(X) \
	X(REQ,      req,      local_qpn,              2, 0xffffff, QPN)              \
	X(REQ,      req,      path_mtu,               1, 5,        PATH_MTU)         \
	X(REP,      rep,      failover_accepted,      0, 2,        FAILOVER)         \
	X(MRA,      mra,      message_mraed,          0, 2,        MSG_MRAED)        \
	X(REJ,      rej,      message_rejected,       0, 2,        MSG_REJECTED)     \
	X(REJ,      rej,      reject_info_length,     0, 72,       REJ_INFO_LENGTH)  \
	X(APR,      apr,      additional_info_length, 0, 72,       APR_INFO_LENGTH)  \
	X(APR,      apr,      ap_status,              0, 13,       AP_STATUS)        \
	X(SIDR_REP, sidr_rep, additional_info_length, 0, 72,       SIDR_INFO_LENGTH) \
	X(SIDR_REP, sidr_rep, status,                 0, 5,        SIDR_STATUS)

/* ---- decode statistics (private: the CM and the tests count decodes) ---- */

/* Counters a caller owns (embed it, zero it) and passes to
 * cep_msg_decode_counted(). Each decode adds one, with a relaxed atomic
 * add, to exactly one counter: decoded[type] on success, refused[why] on
 * failure; refused[CEP_WIRE_ERR_OK] stays 0. Many threads may decode into
 * one struct at once; readers use the two functions below. */
struct cep_wire_stats {
	_Atomic uint64_t decoded[CEP_MSG_COUNT];
	_Atomic uint64_t refused[CEP_WIRE_ERR_COUNT];
};

/* As cep_msg_decode(); also counts the outcome in *stats if not NULL
 * (lock-free, safe from many threads on one stats). */
int cep_msg_decode_counted(const uint8_t *mad, size_t len, struct cep_msg *out,
			   enum cep_wire_error *why, struct cep_wire_stats *stats);

/* Read one counter of *stats (relaxed). */
uint64_t cep_wire_stats_refused(const struct cep_wire_stats *stats,
				enum cep_wire_error why);
uint64_t cep_wire_stats_decoded(const struct cep_wire_stats *stats,
				enum cep_msg_type type);

#endif /* CEP_WIRE_FIELDS_H */
