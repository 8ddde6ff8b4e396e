/* SPDX-License-Identifier: MIT */
/*
 * libcep wire format: the eleven Communication Manager MADs of IBTA vol. 1
 * chapter 12 and their common MAD header, as host structures.
 *
 * Guarantees: cep_msg_decode() validates every byte it is given (header,
 * attribute, spec-constrained field values) before it writes *out; a bad MAD
 * is refused with a distinct negative errno per class of fault and a precise
 * enum cep_wire_error, and *out is left untouched. cep_msg_encode() writes
 * every field from the same declarative tables the decoder reads (see
 * src/wire/wire_fields.h and docs/protocol.md) and zeroes reserved bits, so
 * encode(decode(b)) == b for every valid MAD b apart from reserved bits.
 * All functions here are pure (no global state) and safe from any thread,
 * including CM callbacks and RCU read-side sections.
 */
#ifndef CEP_WIRE_H
#define CEP_WIRE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <cep/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- MAD constants --------------------------------------------------- */

#define CEP_MAD_SIZE          256  /* same value as cep/transport.h */
#define CEP_MAD_HDR_SIZE      24   /* common MAD header */
#define CEP_CM_DATA_SIZE      232  /* CM message: MAD bytes 24..255 */

#define CEP_MAD_BASE_VERSION  1
#define CEP_MGMT_CLASS_CM     0x07
#define CEP_CM_CLASS_VERSION  2
#define CEP_MAD_METHOD_GET      0x01
#define CEP_MAD_METHOD_SET      0x02
#define CEP_MAD_METHOD_SEND     0x03 /* every CM message uses Send */
#define CEP_MAD_METHOD_GET_RESP 0x81

#define CEP_QP1_QKEY          0x80010000u /* Q_Key of QP1 (GSI) */
#define CEP_DEFAULT_PKEY      0xffffu

/* Attribute IDs of the CM class (host order). */
enum cep_attr_id {
	CEP_ATTR_CLASS_PORT_INFO = 0x0001,
	CEP_ATTR_REQ      = 0x0010,
	CEP_ATTR_MRA      = 0x0011,
	CEP_ATTR_REJ      = 0x0012,
	CEP_ATTR_REP      = 0x0013,
	CEP_ATTR_RTU      = 0x0014,
	CEP_ATTR_DREQ     = 0x0015,
	CEP_ATTR_DREP     = 0x0016,
	CEP_ATTR_SIDR_REQ = 0x0017,
	CEP_ATTR_SIDR_REP = 0x0018,
	CEP_ATTR_LAP      = 0x0019,
	CEP_ATTR_APR      = 0x001a,
};

/* Message types. 0 is never a valid message (zeroed structs are invalid). */
enum cep_msg_type {
	CEP_MSG_INVALID = 0,
	CEP_MSG_REQ,
	CEP_MSG_MRA,
	CEP_MSG_REJ,
	CEP_MSG_REP,
	CEP_MSG_RTU,
	CEP_MSG_DREQ,
	CEP_MSG_DREP,
	CEP_MSG_LAP,
	CEP_MSG_APR,
	CEP_MSG_SIDR_REQ,
	CEP_MSG_SIDR_REP,
	CEP_MSG_COUNT
};

/* Private data lengths (bytes) and additional-information lengths. */
#define CEP_REQ_PRIVATE_DATA_SIZE      92
#define CEP_MRA_PRIVATE_DATA_SIZE      222
#define CEP_REJ_PRIVATE_DATA_SIZE      148
#define CEP_REP_PRIVATE_DATA_SIZE      196
#define CEP_RTU_PRIVATE_DATA_SIZE      224
#define CEP_DREQ_PRIVATE_DATA_SIZE     220
#define CEP_DREP_PRIVATE_DATA_SIZE     224
#define CEP_LAP_PRIVATE_DATA_SIZE      168
#define CEP_APR_PRIVATE_DATA_SIZE      148
#define CEP_SIDR_REQ_PRIVATE_DATA_SIZE 216
#define CEP_SIDR_REP_PRIVATE_DATA_SIZE 136
#define CEP_REJ_ARI_SIZE               72
#define CEP_APR_INFO_SIZE              72
#define CEP_SIDR_REP_INFO_SIZE         72 /* ClassPortInfo on redirect */

/* REQ transport service type (2 bits) and extended transport type. */
enum cep_transport_service {
	CEP_TS_RC = 0,
	CEP_TS_UC = 1,
	CEP_TS_RD = 2,
	CEP_TS_EXTENDED = 3, /* see extended_transport_type */
};
#define CEP_EXT_TRANSPORT_XRC 1

/* "Message MRAed" (MRA) and "Message Rejected" (REJ) codes, 2 bits. */
enum cep_msg_code {
	CEP_MSG_CODE_REQ = 0,
	CEP_MSG_CODE_REP = 1,
	CEP_MSG_CODE_OTHER = 2, /* MRA: LAP; REJ: any other message */
};

/* REP "failover accepted", 2 bits. */
enum cep_failover {
	CEP_FAILOVER_ACCEPTED = 0,
	CEP_FAILOVER_NOT_SUPPORTED = 1,
	CEP_FAILOVER_REJECTED = 2,
};

/* REJ reasons (table 109). X(value, C name, spec name, what the ARI carries). */
#define CEP_REJ_REASON_MAP(X) \
	X(1,  NO_QP,                    "No QP available", "nothing") \
	X(2,  NO_EEC,                   "No EE context available", "nothing") \
	X(3,  NO_RESOURCES,             "No resources available", "nothing") \
	X(4,  TIMEOUT,                  "Timeout", "CA GUID of the node that timed out (8 bytes)") \
	X(5,  UNSUPPORTED,              "Unsupported request", "nothing") \
	X(6,  INVALID_COMM_ID,          "Invalid Communication ID", "nothing") \
	X(7,  INVALID_COMM_INSTANCE,    "Invalid Communication Instance", "nothing") \
	X(8,  INVALID_SERVICE_ID,       "Invalid Service ID", "nothing") \
	X(9,  INVALID_TRANSPORT_TYPE,   "Invalid Transport Service Type", "nothing") \
	X(10, STALE_CONN,               "Stale connection", "nothing") \
	X(11, RDC_NOT_EXIST,            "RDC does not exist", "nothing") \
	X(12, INVALID_GID,              "Primary Remote Port GID rejected", "acceptable GID (16 bytes)") \
	X(13, INVALID_LID,              "Primary Remote Port LID rejected", "acceptable LID (16 bits)") \
	X(14, INVALID_SL,               "Invalid Primary SL", "acceptable SL (4 bits)") \
	X(15, INVALID_TRAFFIC_CLASS,    "Invalid Primary Traffic Class", "acceptable traffic class (8 bits)") \
	X(16, INVALID_HOP_LIMIT,        "Invalid Primary Hop Limit", "acceptable hop limit (8 bits)") \
	X(17, INVALID_PACKET_RATE,      "Invalid Primary Packet Rate", "acceptable packet rate (6 bits)") \
	X(18, INVALID_ALT_GID,          "Alternate Remote Port GID rejected", "acceptable GID (16 bytes)") \
	X(19, INVALID_ALT_LID,          "Alternate Remote Port LID rejected", "acceptable LID (16 bits)") \
	X(20, INVALID_ALT_SL,           "Invalid Alternate SL", "acceptable SL (4 bits)") \
	X(21, INVALID_ALT_TRAFFIC_CLASS, "Invalid Alternate Traffic Class", "acceptable traffic class (8 bits)") \
	X(22, INVALID_ALT_HOP_LIMIT,    "Invalid Alternate Hop Limit", "acceptable hop limit (8 bits)") \
	X(23, INVALID_ALT_PACKET_RATE,  "Invalid Alternate Packet Rate", "acceptable packet rate (6 bits)") \
	X(24, PORT_CM_REDIRECT,         "Port and CM Redirection", "ClassPortInfo of the redirect target (72 bytes)") \
	X(25, PORT_REDIRECT,            "Port Redirection", "GID of the port to redirect to (16 bytes)") \
	X(26, INVALID_MTU,              "Invalid Path MTU", "acceptable MTU (4 bits)") \
	X(27, INSUFFICIENT_RESP_RESOURCES, "Insufficient Responder Resources", "acceptable responder resources (8 bits)") \
	X(28, CONSUMER_DEFINED,         "Consumer Reject", "consumer-defined (up to 72 bytes)") \
	X(29, INVALID_RNR_RETRY,        "Invalid RNR Retry Count", "acceptable RNR retry count (3 bits)") \
	X(30, DUPLICATE_LOCAL_COMM_ID,  "Duplicate Local Communication ID", "nothing") \
	X(31, INVALID_CLASS_VERSION,    "Unsupported Class Version", "highest supported class version (8 bits)") \
	X(32, INVALID_FLOW_LABEL,       "Invalid Primary Flow Label", "acceptable flow label (20 bits)") \
	X(33, INVALID_ALT_FLOW_LABEL,   "Invalid Alternate Flow Label", "acceptable flow label (20 bits)")

enum cep_rej_reason {
#define CEP_REJ_ENUM_(v, n, s, a) CEP_REJ_##n = v,
	CEP_REJ_REASON_MAP(CEP_REJ_ENUM_)
#undef CEP_REJ_ENUM_
	CEP_REJ_REASON_MAX = 33
};
/* IBTA 1.4 (ECE), the kernel's IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED: sent
 * by cep_cm_reject; outside the map so that the counters indexed by
 * reason keep their size (counted as an undefined reason). */
#define CEP_REJ_VENDOR_OPTION_NOT_SUPPORTED 35

/* APR AP status (table 117). */
#define CEP_APR_STATUS_MAP(X) \
	X(0,  SUCCESS,           "Alternate path accepted") \
	X(1,  INVALID_COMM_ID,   "Invalid Communication ID") \
	X(2,  UNSUPPORTED,       "Unsupported request") \
	X(3,  REJECT,            "Rejected") \
	X(4,  REDIRECT,          "Redirect (ClassPortInfo in additional information)") \
	X(5,  IS_CURRENT,        "Path is the current primary path") \
	X(6,  INVALID_QPN_EECN,  "Invalid QPN/EECN") \
	X(7,  INVALID_LID,       "Invalid alternate LID") \
	X(8,  INVALID_GID,       "Invalid alternate GID") \
	X(9,  INVALID_FLOW_LABEL, "Invalid alternate flow label") \
	X(10, INVALID_TCLASS,    "Invalid alternate traffic class") \
	X(11, INVALID_HOP_LIMIT, "Invalid alternate hop limit") \
	X(12, INVALID_PACKET_RATE, "Invalid alternate packet rate") \
	X(13, INVALID_SL,        "Invalid alternate SL")

enum cep_apr_status {
#define CEP_APR_ENUM_(v, n, s) CEP_APR_##n = v,
	CEP_APR_STATUS_MAP(CEP_APR_ENUM_)
#undef CEP_APR_ENUM_
	CEP_APR_STATUS_MAX = 13
};

/* SIDR_REP status (table 121). */
#define CEP_SIDR_STATUS_MAP(X) \
	X(0, SUCCESS,             "Success") \
	X(1, UNSUPPORTED,         "Service ID not supported") \
	X(2, REJECT,              "Rejected by the service provider") \
	X(3, NO_QP,               "No QP available") \
	X(4, REDIRECT,            "Redirect (ClassPortInfo in additional information)") \
	X(5, UNSUPPORTED_VERSION, "Unsupported class version")

enum cep_sidr_status {
#define CEP_SIDR_ENUM_(v, n, s) CEP_SIDR_##n = v,
	CEP_SIDR_STATUS_MAP(CEP_SIDR_ENUM_)
#undef CEP_SIDR_ENUM_
	CEP_SIDR_STATUS_MAX = 5
};

/* ---- host structures ---------------------------------------------------
 * Integers are host order and hold exactly the spec field (a 24-bit QPN in
 * the low 24 bits of a uint32_t; encode refuses wider values with -ERANGE).
 * GIDs are 16 bytes in wire (network) order. Byte arrays are copied as is.
 */

/* Common MAD header (MAD bytes 0..23). The transaction ID is the whole
 * 64-bit field as read big-endian; do not rely on its upper 32 bits: the
 * Linux kernel's MAD layer rewrites them on the way in and out. */
struct cep_mad_hdr {
	uint8_t base_version;   /* 1 */
	uint8_t mgmt_class;     /* 0x07 */
	uint8_t class_version;  /* 2 */
	uint8_t method;         /* with the response bit 0x80; CM uses 0x03 */
	uint16_t status;
	uint16_t class_specific;
	uint64_t tid;
	uint16_t attr_id;       /* decode: from the MAD; encode: ignored, the
	                           attribute of cep_msg.type is written */
	uint32_t attr_mod;
};

/* One path as carried by REQ (primary and alternate) and LAP (alternate). */
struct cep_path {
	uint16_t local_lid;        /* <x>_local_port_lid */
	uint16_t remote_lid;       /* <x>_remote_port_lid */
	uint8_t local_gid[16];     /* <x>_local_port_gid */
	uint8_t remote_gid[16];    /* <x>_remote_port_gid */
	uint32_t flow_label;       /* 20 bits */
	uint8_t packet_rate;       /* 6 bits */
	uint8_t traffic_class;
	uint8_t hop_limit;
	uint8_t sl;                /* 4 bits */
	uint8_t subnet_local;      /* 1 bit */
	uint8_t local_ack_timeout; /* 5 bits */
};

struct cep_req {
	uint32_t local_comm_id;
	uint32_t vendor_id;                  /* 24 bits: ECE (IBTA 1.4), 0 none */
	uint64_t service_id;
	uint64_t local_ca_guid;
	uint32_t local_qkey;
	uint32_t local_qpn;                  /* 24 bits; not 0 or 1 */
	uint8_t responder_resources;
	uint32_t local_eecn;                 /* 24 bits */
	uint8_t initiator_depth;
	uint32_t remote_eecn;                /* 24 bits */
	uint8_t remote_cm_response_timeout;  /* 5 bits */
	uint8_t transport_service_type;      /* 2 bits, enum cep_transport_service */
	uint8_t end_to_end_flow_control;     /* 1 bit */
	uint32_t starting_psn;               /* 24 bits */
	uint8_t local_cm_response_timeout;   /* 5 bits */
	uint8_t retry_count;                 /* 3 bits */
	uint16_t partition_key;
	uint8_t path_mtu;                    /* 4 bits, 1 (256) .. 5 (4096) */
	uint8_t rdc_exists;                  /* 1 bit */
	uint8_t rnr_retry_count;             /* 3 bits */
	uint8_t max_cm_retries;              /* 4 bits */
	uint8_t srq;                         /* 1 bit */
	uint8_t extended_transport_type;     /* 3 bits */
	struct cep_path primary;
	struct cep_path alternate;           /* all zero: no alternate path */
	uint8_t sap_supported;               /* 1 bit */
	uint8_t private_data[CEP_REQ_PRIVATE_DATA_SIZE];
};

struct cep_mra {
	uint32_t local_comm_id;
	uint32_t remote_comm_id;
	uint8_t message_mraed;     /* 2 bits, enum cep_msg_code */
	uint8_t service_timeout;   /* 5 bits */
	uint8_t private_data[CEP_MRA_PRIVATE_DATA_SIZE];
};

struct cep_rej {
	uint32_t local_comm_id;
	uint32_t remote_comm_id;
	uint8_t message_rejected;     /* 2 bits, enum cep_msg_code */
	uint8_t reject_info_length;   /* 7 bits, <= CEP_REJ_ARI_SIZE */
	uint16_t reason;              /* enum cep_rej_reason */
	uint8_t ari[CEP_REJ_ARI_SIZE];
	uint8_t private_data[CEP_REJ_PRIVATE_DATA_SIZE];
};

struct cep_rep {
	uint32_t local_comm_id;
	uint32_t remote_comm_id;
	uint32_t local_qkey;
	uint32_t local_qpn;                /* 24 bits; not 0 or 1 */
	uint32_t local_eecn;               /* 24 bits */
	uint32_t starting_psn;             /* 24 bits */
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t target_ack_delay;          /* 5 bits */
	uint8_t failover_accepted;         /* 2 bits, enum cep_failover */
	uint8_t end_to_end_flow_control;   /* 1 bit */
	uint8_t rnr_retry_count;           /* 3 bits */
	uint8_t srq;                       /* 1 bit */
	uint64_t local_ca_guid;
	uint8_t private_data[CEP_REP_PRIVATE_DATA_SIZE];
	/* ECE vendor ID (IBTA 1.4), 24 bits in three bytes as on the wire
	 * (high, middle, low); all 0: none. In the tail padding: the
	 * struct's size and the offsets above are unchanged. */
	uint8_t vendor_id_h;
	uint8_t vendor_id_m;
	uint8_t vendor_id_l;
};

struct cep_rtu {
	uint32_t local_comm_id;
	uint32_t remote_comm_id;
	uint8_t private_data[CEP_RTU_PRIVATE_DATA_SIZE];
};

struct cep_dreq {
	uint32_t local_comm_id;
	uint32_t remote_comm_id;
	uint32_t remote_qpn_eecn;   /* 24 bits */
	uint8_t private_data[CEP_DREQ_PRIVATE_DATA_SIZE];
};

struct cep_drep {
	uint32_t local_comm_id;
	uint32_t remote_comm_id;
	uint8_t private_data[CEP_DREP_PRIVATE_DATA_SIZE];
};

struct cep_lap {
	uint32_t local_comm_id;
	uint32_t remote_comm_id;
	uint32_t remote_qpn_eecn;              /* 24 bits */
	uint8_t remote_cm_response_timeout;    /* 5 bits */
	struct cep_path alternate;
	uint8_t private_data[CEP_LAP_PRIVATE_DATA_SIZE];
};

struct cep_apr {
	uint32_t local_comm_id;
	uint32_t remote_comm_id;
	uint8_t additional_info_length;   /* <= CEP_APR_INFO_SIZE */
	uint8_t ap_status;                /* enum cep_apr_status */
	uint8_t additional_info[CEP_APR_INFO_SIZE];
	uint8_t private_data[CEP_APR_PRIVATE_DATA_SIZE];
};

struct cep_sidr_req {
	uint32_t request_id;
	uint16_t partition_key;
	uint64_t service_id;
	uint8_t private_data[CEP_SIDR_REQ_PRIVATE_DATA_SIZE];
};

struct cep_sidr_rep {
	uint32_t request_id;
	uint8_t status;                   /* enum cep_sidr_status */
	uint8_t additional_info_length;   /* <= CEP_SIDR_REP_INFO_SIZE */
	uint32_t qpn;                     /* 24 bits */
	uint64_t service_id;
	uint32_t qkey;
	uint8_t additional_info[CEP_SIDR_REP_INFO_SIZE];
	uint8_t private_data[CEP_SIDR_REP_PRIVATE_DATA_SIZE];
};

/* One CM MAD: header, type, and the message selected by type. */
struct cep_msg {
	struct cep_mad_hdr hdr;
	enum cep_msg_type type;
	union {
		struct cep_req req;
		struct cep_mra mra;
		struct cep_rej rej;
		struct cep_rep rep;
		struct cep_rtu rtu;
		struct cep_dreq dreq;
		struct cep_drep drep;
		struct cep_lap lap;
		struct cep_apr apr;
		struct cep_sidr_req sidr_req;
		struct cep_sidr_rep sidr_rep;
	} u;
};

/* ---- validation errors and counters ------------------------------------
 * X(C name, errno the decoder returns, description). The errno names the
 * class of fault; enum cep_wire_error names the exact rule broken.
 */
#define CEP_WIRE_ERROR_MAP(X) \
	X(OK,               0,                "valid") \
	X(LENGTH,           EMSGSIZE,         "MAD is not 256 bytes") \
	X(BASE_VERSION,     EPROTONOSUPPORT,  "MAD base version is not 1") \
	X(MGMT_CLASS,       EPFNOSUPPORT,     "management class is not CM (0x07)") \
	X(CLASS_VERSION,    ENOPROTOOPT,      "CM class version is not 2") \
	X(METHOD,           EOPNOTSUPP,       "method is not Send (0x03)") \
	X(ATTR_ID,          ENOMSG,           "attribute ID is not a CM message") \
	X(TRANSPORT_TYPE,   EBADMSG,          "REQ transport service type reserved (3 without XRC)") \
	X(QPN,              EBADMSG,          "REQ/REP local QPN is 0 or 1 (connected QP required; an XRC target's REP: 0 with SRQ and its QP in the local EECN)") \
	X(PATH_MTU,         EBADMSG,          "REQ path MTU not in 1..5") \
	X(MSG_MRAED,        EBADMSG,          "MRA message MRAed is reserved (3)") \
	X(MSG_REJECTED,     EBADMSG,          "REJ message rejected is reserved (3)") \
	X(REJ_INFO_LENGTH,  EBADMSG,          "REJ reject info length > 72") \
	X(FAILOVER,         EBADMSG,          "REP failover accepted is reserved (3)") \
	X(APR_INFO_LENGTH,  EBADMSG,          "APR additional info length > 72") \
	X(AP_STATUS,        EBADMSG,          "APR AP status > 13") \
	X(SIDR_INFO_LENGTH, EBADMSG,          "SIDR_REP additional info length > 72") \
	X(SIDR_STATUS,      EBADMSG,          "SIDR_REP status > 5")

enum cep_wire_error {
#define CEP_WIRE_ENUM_(n, e, s) CEP_WIRE_ERR_##n,
	CEP_WIRE_ERROR_MAP(CEP_WIRE_ENUM_)
#undef CEP_WIRE_ENUM_
	CEP_WIRE_ERR_COUNT
};

/* ---- codec --------------------------------------------------------------- */

/* Decode and validate one received MAD. On success returns 0 and fills
 * *out (hdr, type, u.<type>); reserved bits are ignored. On failure
 * returns the errno of CEP_WIRE_ERROR_MAP, negated (-EMSGSIZE,
 * -EPROTONOSUPPORT, -EPFNOSUPPORT, -ENOPROTOOPT, -EOPNOTSUPP, -ENOMSG,
 * -EBADMSG; -EINVAL for NULL arguments, with *why = CEP_WIRE_ERR_OK when
 * why is given), sets *why if why is not NULL, and leaves *out untouched.
 * Pure; any thread. */
CEP_EXPORT int cep_msg_decode(const uint8_t *mad, size_t len,
			      struct cep_msg *out, enum cep_wire_error *why);

/* Check the header of a MAD only (length, base version, class, class
 * version, method, attribute). Returns 0 and *type, or as decode:
 * -EINVAL, -EMSGSIZE, -EPROTONOSUPPORT, -EPFNOSUPPORT, -ENOPROTOOPT,
 * -EOPNOTSUPP, -ENOMSG. Lets a dispatcher route a MAD before decoding it
 * in full. */
CEP_EXPORT int cep_mad_peek(const uint8_t *mad, size_t len,
			    enum cep_msg_type *type, enum cep_wire_error *why);

/* Encode @m into a full 256-byte MAD. The header is written from m->hdr
 * except attr_id, which is the attribute of m->type. Reserved bits are
 * zero. Returns 0, or -EINVAL (NULL, invalid type) or -ERANGE (a field
 * wider than its spec width, e.g. a QPN > 0xffffff); @mad is unchanged on
 * error. Encode does not apply the decoder's value rules: a message that
 * breaks them encodes, and the peer's decoder refuses it. Pure. */
CEP_EXPORT int cep_msg_encode(const struct cep_msg *m,
			      uint8_t mad[CEP_MAD_SIZE]);

/* Zero *m and set a CM header: base version 1, class 0x07, class version 2,
 * method Send, attr_id of @type, transaction ID @tid. */
CEP_EXPORT void cep_msg_init(struct cep_msg *m, enum cep_msg_type type,
			     uint64_t tid);

/* Validation rules alone on a host message (what decode applies after
 * unpacking). 0, -EINVAL (NULL), -ENOMSG (invalid type) or -EBADMSG (a
 * field breaks its rule), *why set. */
CEP_EXPORT int cep_msg_validate(const struct cep_msg *m,
				enum cep_wire_error *why);

/* Attribute <-> type. cep_msg_type_of_attr() returns CEP_MSG_INVALID for
 * an unknown attribute; cep_msg_attr_id() returns 0 for an invalid type. */
CEP_EXPORT enum cep_msg_type cep_msg_type_of_attr(uint16_t attr_id);
CEP_EXPORT uint16_t cep_msg_attr_id(enum cep_msg_type type);

/* Private data length of a message type (0 for an invalid type). */
CEP_EXPORT size_t cep_msg_private_data_size(enum cep_msg_type type);

/* The 64-bit transaction ID of a raw MAD (bytes 8..15, big-endian), for
 * matching a response before a full decode. len must be >= 16, else 0. */
CEP_EXPORT uint64_t cep_mad_tid(const uint8_t *mad, size_t len);

/* ---- names ----------------------------------------------------------------
 * All return static strings, never NULL ("?" / "unknown ..." when out of
 * range). State names belong to the CM engine (cep/cm.h). */
CEP_EXPORT const char *cep_msg_name(enum cep_msg_type type);     /* "REQ" */
CEP_EXPORT const char *cep_rej_reason_name(unsigned reason);     /* spec name */
CEP_EXPORT const char *cep_rej_reason_ari(unsigned reason);      /* ARI content */
CEP_EXPORT const char *cep_apr_status_name(unsigned status);
CEP_EXPORT const char *cep_sidr_status_name(unsigned status);
CEP_EXPORT const char *cep_wire_error_name(enum cep_wire_error why); /* "QPN" */
CEP_EXPORT const char *cep_wire_error_str(enum cep_wire_error why);  /* sentence */

#ifdef __cplusplus
}
#endif

#endif /* CEP_WIRE_H */
