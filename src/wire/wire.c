/* SPDX-License-Identifier: MIT */
/*
 * libcep wire codec: encode, decode and validate CM MADs from the tables in
 * wire_fields.h, with one generic bit-field get/set and no per-field code.
 * Guarantees: decode never reads outside the 256 bytes it checked, never
 * writes *out unless the MAD is valid, and counts every outcome once.
 * Everything here is pure or touches only caller-owned atomics: any thread.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "wire_fields.h"

/* ---- tables ---------------------------------------------------------------- */

#define CEP_MEMBER_SIZE_(msg, member) sizeof(((struct cep_msg *)0)->u.msg.member)
#define CEP_MEMBER_OFF_(msg, member) offsetof(struct cep_msg, u.msg.member)

#define ROW_U(msg, name, member, byte, bit, width) \
	{ #name, byte, bit, CEP_FIELD_UINT, width, \
	  CEP_MEMBER_OFF_(msg, member), CEP_MEMBER_SIZE_(msg, member) },
#define ROW_G(msg, name, member, byte) \
	{ #name, byte, 0, CEP_FIELD_GID, 128, \
	  CEP_MEMBER_OFF_(msg, member), CEP_MEMBER_SIZE_(msg, member) },
#define ROW_B(msg, name, member, byte, len) \
	{ #name, byte, 0, CEP_FIELD_BYTES, (len) * 8, \
	  CEP_MEMBER_OFF_(msg, member), CEP_MEMBER_SIZE_(msg, member) },
#define ROW_P(msg, byte, len) ROW_B(msg, private_data, private_data, byte, len)
#define ROW_R(msg, byte, bit, width) \
	{ "reserved", byte, bit, CEP_FIELD_RESERVED, width, 0, 0 },

/* Compile-time checks, one set per row. */
#define CHK_U(msg, name, member, byte, bit, width) \
	_Static_assert((bit) < 8 && (bit) + (width) <= 64, #msg "." #name ": bit range"); \
	_Static_assert((byte) * 8 + (bit) + (width) <= CEP_CM_DATA_SIZE * 8, #msg "." #name ": past the end"); \
	_Static_assert((width) <= 8 * CEP_MEMBER_SIZE_(msg, member), #msg "." #name ": host member too small");
#define CHK_G(msg, name, member, byte) \
	_Static_assert(CEP_MEMBER_SIZE_(msg, member) == 16, #msg "." #name ": GID is 16 bytes"); \
	_Static_assert((byte) + 16 <= CEP_CM_DATA_SIZE, #msg "." #name ": past the end");
#define CHK_B(msg, name, member, byte, len) \
	_Static_assert(CEP_MEMBER_SIZE_(msg, member) == (len), #msg "." #name ": host array size"); \
	_Static_assert((byte) + (len) <= CEP_CM_DATA_SIZE, #msg "." #name ": past the end");
#define CHK_P(msg, byte, len) \
	CHK_B(msg, private_data, private_data, byte, len) \
	_Static_assert((byte) + (len) == CEP_CM_DATA_SIZE, #msg ": private data must end the message");
#define CHK_R(msg, byte, bit, width) \
	_Static_assert((bit) < 8 && (byte) * 8 + (bit) + (width) <= CEP_CM_DATA_SIZE * 8, #msg ": reserved row");

/* Sum of widths per message: rows must cover the 232 bytes exactly (no
 * overlap is checked by tests/wire, a gap or an overlap changes the sum). */
#define SUM_U(msg, name, member, byte, bit, width) + (width)
#define SUM_G(msg, name, member, byte) + 128
#define SUM_B(msg, name, member, byte, len) + (len) * 8
#define SUM_P(msg, byte, len) + (len) * 8
#define SUM_R(msg, byte, bit, width) + (width)

#define CEP_TABLE_(TYPE, msg, TABLE) \
	TABLE(CHK_U, CHK_G, CHK_B, CHK_P, CHK_R) \
	_Static_assert(0 TABLE(SUM_U, SUM_G, SUM_B, SUM_P, SUM_R) == CEP_CM_DATA_SIZE * 8, \
		       #TYPE ": rows do not add up to 232 bytes"); \
	static const struct cep_field cep_fields_##msg[] = { \
		TABLE(ROW_U, ROW_G, ROW_B, ROW_P, ROW_R) \
	};
CEP_MSG_TABLES(CEP_TABLE_)
#undef CEP_TABLE_

#define HROW_U(name, member, byte, bit, width) \
	{ #name, byte, bit, CEP_FIELD_UINT, width, offsetof(struct cep_msg, hdr.member), \
	  sizeof(((struct cep_msg *)0)->hdr.member) },
#define HROW_R(byte, bit, width) { "reserved", byte, bit, CEP_FIELD_RESERVED, width, 0, 0 },
#define HSUM_U(name, member, byte, bit, width) + (width)
#define HSUM_R(byte, bit, width) + (width)
_Static_assert(0 CEP_FIELDS_HDR(HSUM_U, HSUM_R) == CEP_MAD_HDR_SIZE * 8, "MAD header rows");
_Static_assert(CEP_MAD_HDR_SIZE + CEP_CM_DATA_SIZE == CEP_MAD_SIZE, "MAD size");
static const struct cep_field cep_fields_hdr[] = { CEP_FIELDS_HDR(HROW_U, HROW_R) };

struct cep_msg_desc {
	const char *name;
	uint16_t attr_id;
	uint16_t pd_size;
	const struct cep_field *fields;
	size_t n;
};

#define DESC_(TYPE, msg, TABLE) \
	[CEP_MSG_##TYPE] = { #TYPE, CEP_ATTR_##TYPE, CEP_##TYPE##_PRIVATE_DATA_SIZE, \
			     cep_fields_##msg, \
			     sizeof(cep_fields_##msg) / sizeof(cep_fields_##msg[0]) },
static const struct cep_msg_desc cep_msgs[CEP_MSG_COUNT] = {
	CEP_MSG_TABLES(DESC_)
};
#undef DESC_

static const struct cep_msg_desc *desc_of(enum cep_msg_type type)
{
	if ((unsigned)type <= CEP_MSG_INVALID || (unsigned)type >= CEP_MSG_COUNT)
		return NULL;
	return &cep_msgs[type];
}

const struct cep_field *cep_wire_fields(enum cep_msg_type type, size_t *n)
{
	const struct cep_msg_desc *d = desc_of(type);

	*n = d ? d->n : 0;
	return d ? d->fields : NULL;
}

const struct cep_field *cep_wire_hdr_fields(size_t *n)
{
	*n = sizeof(cep_fields_hdr) / sizeof(cep_fields_hdr[0]);
	return cep_fields_hdr;
}

/* ---- generic access ------------------------------------------------------- */

static uint64_t width_mask(unsigned width)
{
	return width >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << width) - 1);
}

uint64_t cep_bits_get(const uint8_t *p, unsigned bit, unsigned width)
{
	unsigned nbytes = (bit + width + 7) / 8;
	uint64_t v = 0;

	for (unsigned i = 0; i < nbytes; i++)
		v = (v << 8) | p[i];
	return (v >> (nbytes * 8 - bit - width)) & width_mask(width);
}

void cep_bits_set(uint8_t *p, unsigned bit, unsigned width, uint64_t v)
{
	unsigned nbytes = (bit + width + 7) / 8;
	unsigned shift = nbytes * 8 - bit - width;
	uint64_t mask = width_mask(width) << shift;
	uint64_t cur = 0;

	for (unsigned i = 0; i < nbytes; i++)
		cur = (cur << 8) | p[i];
	cur = (cur & ~mask) | ((v << shift) & mask);
	for (unsigned i = nbytes; i-- > 0; cur >>= 8)
		p[i] = (uint8_t)cur;
}

static uint64_t host_load(const void *base, const struct cep_field *f)
{
	const uint8_t *p = (const uint8_t *)base + f->host_off;
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64;

	switch (f->host_size) {
	case 1: memcpy(&u8, p, 1); return u8;
	case 2: memcpy(&u16, p, 2); return u16;
	case 4: memcpy(&u32, p, 4); return u32;
	default: memcpy(&u64, p, 8); return u64;
	}
}

static void host_store(void *base, const struct cep_field *f, uint64_t v)
{
	uint8_t *p = (uint8_t *)base + f->host_off;
	uint8_t u8 = (uint8_t)v;
	uint16_t u16 = (uint16_t)v;
	uint32_t u32 = (uint32_t)v;

	switch (f->host_size) {
	case 1: memcpy(p, &u8, 1); break;
	case 2: memcpy(p, &u16, 2); break;
	case 4: memcpy(p, &u32, 4); break;
	default: memcpy(p, &v, 8); break;
	}
}

uint64_t cep_field_host_get(const struct cep_msg *m, const struct cep_field *f)
{
	return f->kind == CEP_FIELD_UINT ? host_load(m, f) : 0;
}

/* Wire -> host for one table; @wire points at the table's byte 0. */
static void unpack_rows(const struct cep_field *f, size_t n, const uint8_t *wire,
			struct cep_msg *m)
{
	for (size_t i = 0; i < n; i++, f++) {
		switch (f->kind) {
		case CEP_FIELD_UINT:
			host_store(m, f, cep_bits_get(wire + f->byte, f->bit, f->width));
			break;
		case CEP_FIELD_GID:
		case CEP_FIELD_BYTES:
			memcpy((uint8_t *)m + f->host_off, wire + f->byte, f->width / 8);
			break;
		default:
			break; /* reserved: ignored on receive */
		}
	}
}

/* Host -> wire; @wire is zeroed by the caller so reserved bits stay 0.
 * -ERANGE if a value does not fit its width (wire then partly written). */
static int pack_rows(const struct cep_field *f, size_t n, const struct cep_msg *m,
		     uint8_t *wire)
{
	for (size_t i = 0; i < n; i++, f++) {
		uint64_t v;

		switch (f->kind) {
		case CEP_FIELD_UINT:
			v = host_load(m, f);
			if (v & ~width_mask(f->width))
				return -ERANGE;
			cep_bits_set(wire + f->byte, f->bit, f->width, v);
			break;
		case CEP_FIELD_GID:
		case CEP_FIELD_BYTES:
			memcpy(wire + f->byte, (const uint8_t *)m + f->host_off, f->width / 8);
			break;
		default:
			break;
		}
	}
	return 0;
}

/* ---- validation ------------------------------------------------------------ */

static const int cep_wire_errno[CEP_WIRE_ERR_COUNT] = {
#define ERRNO_(n, e, s) [CEP_WIRE_ERR_##n] = e,
	CEP_WIRE_ERROR_MAP(ERRNO_)
#undef ERRNO_
};

struct cep_rule {
	enum cep_msg_type type;
	struct cep_field at;     /* host_off/host_size locate the member */
	uint32_t min, max;
	enum cep_wire_error why;
};

#define RULE_(TYPE, msg, member, lo, hi, err) \
	{ CEP_MSG_##TYPE, { #member, 0, 0, CEP_FIELD_UINT, 0, CEP_MEMBER_OFF_(msg, member), \
			    CEP_MEMBER_SIZE_(msg, member) }, lo, hi, CEP_WIRE_ERR_##err },
static const struct cep_rule cep_rules[] = { CEP_WIRE_RULES(RULE_) };
#undef RULE_

static int fail(enum cep_wire_error e, enum cep_wire_error *why)
{
	if (why)
		*why = e;
	return -cep_wire_errno[e];
}

/* NULL argument: API misuse, not a bad MAD (not counted). */
static int bad_arg(enum cep_wire_error *why)
{
	if (why)
		*why = CEP_WIRE_ERR_OK;
	return -EINVAL;
}

static bool rule_broken(const struct cep_rule *r, const struct cep_msg *m)
{
	uint64_t v;

	if (r->type != m->type)
		return false;
	v = host_load(m, &r->at);
	return v < r->min || v > r->max;
}

/* Transport service type 3 is reserved except as the marker of an
 * extended transport (only XRC is defined). */
static bool xrc_rule_broken(const struct cep_msg *m)
{
	return m->type == CEP_MSG_REQ && m->u.req.transport_service_type == CEP_TS_EXTENDED &&
	       m->u.req.extended_transport_type != CEP_EXT_TRANSPORT_XRC;
}

/* A REP's local QPN names the responder's connected QP - except an XRC
 * target's REP, which leaves it 0, sets SRQ and names the target QP in the
 * local EECN (the kernel's cm_format_rep for IB_QPT_XRC_TGT). Which of the
 * two a REP must be is the connection's to say (cm_handle_rep); the codec
 * refuses what is neither. */
static bool rep_qpn_rule_broken(const struct cep_msg *m)
{
	const struct cep_rep *r = &m->u.rep;

	if (m->type != CEP_MSG_REP || (r->local_qpn >= 2 && r->local_qpn <= 0xffffff))
		return false;
	return !(r->local_qpn == 0 && r->srq && r->local_eecn >= 2 && r->local_eecn <= 0xffffff);
}

int cep_msg_validate(const struct cep_msg *m, enum cep_wire_error *why)
{
	if (!m)
		return bad_arg(why);
	if (!desc_of(m->type))
		return fail(CEP_WIRE_ERR_ATTR_ID, why);
	if (rep_qpn_rule_broken(m)) /* the REP's first rule, as the row it was */
		return fail(CEP_WIRE_ERR_QPN, why);
	for (size_t i = 0; i < sizeof(cep_rules) / sizeof(cep_rules[0]); i++)
		if (rule_broken(&cep_rules[i], m))
			return fail(cep_rules[i].why, why);
	if (xrc_rule_broken(m))
		return fail(CEP_WIRE_ERR_TRANSPORT_TYPE, why);
	if (why)
		*why = CEP_WIRE_ERR_OK;
	return 0;
}

enum cep_wire_error cep_field_rule_broken(const struct cep_msg *m, const struct cep_field *f)
{
	if (!m || !f || f->kind != CEP_FIELD_UINT || !desc_of(m->type))
		return CEP_WIRE_ERR_OK;
	for (size_t i = 0; i < sizeof(cep_rules) / sizeof(cep_rules[0]); i++)
		if (cep_rules[i].at.host_off == f->host_off && rule_broken(&cep_rules[i], m))
			return cep_rules[i].why;
	if (f->host_off == offsetof(struct cep_msg, u.req.transport_service_type) &&
	    xrc_rule_broken(m))
		return CEP_WIRE_ERR_TRANSPORT_TYPE;
	if (f->host_off == offsetof(struct cep_msg, u.rep.local_qpn) && rep_qpn_rule_broken(m))
		return CEP_WIRE_ERR_QPN;
	return CEP_WIRE_ERR_OK;
}

/* ---- decode / encode ------------------------------------------------------- */

enum cep_msg_type cep_msg_type_of_attr(uint16_t attr_id)
{
	for (unsigned t = CEP_MSG_INVALID + 1; t < CEP_MSG_COUNT; t++)
		if (cep_msgs[t].attr_id == attr_id)
			return (enum cep_msg_type)t;
	return CEP_MSG_INVALID;
}

uint16_t cep_msg_attr_id(enum cep_msg_type type)
{
	const struct cep_msg_desc *d = desc_of(type);

	return d ? d->attr_id : 0;
}

size_t cep_msg_private_data_size(enum cep_msg_type type)
{
	const struct cep_msg_desc *d = desc_of(type);

	return d ? d->pd_size : 0;
}

uint64_t cep_mad_tid(const uint8_t *mad, size_t len)
{
	if (!mad || len < 16)
		return 0;
	return cep_bits_get(mad + 8, 0, 64);
}

int cep_mad_peek(const uint8_t *mad, size_t len, enum cep_msg_type *type,
		 enum cep_wire_error *why)
{
	enum cep_msg_type t;

	if (!mad)
		return bad_arg(why);
	if (len != CEP_MAD_SIZE)
		return fail(CEP_WIRE_ERR_LENGTH, why);
	if (mad[0] != CEP_MAD_BASE_VERSION)
		return fail(CEP_WIRE_ERR_BASE_VERSION, why);
	if (mad[1] != CEP_MGMT_CLASS_CM)
		return fail(CEP_WIRE_ERR_MGMT_CLASS, why);
	if (mad[2] != CEP_CM_CLASS_VERSION)
		return fail(CEP_WIRE_ERR_CLASS_VERSION, why);
	if (mad[3] != CEP_MAD_METHOD_SEND)
		return fail(CEP_WIRE_ERR_METHOD, why);
	t = cep_msg_type_of_attr((uint16_t)cep_bits_get(mad + 16, 0, 16));
	if (t == CEP_MSG_INVALID)
		return fail(CEP_WIRE_ERR_ATTR_ID, why);
	if (type)
		*type = t;
	if (why)
		*why = CEP_WIRE_ERR_OK;
	return 0;
}

/* Header checks, then every row into *m; 0 or the header's refusal. */
static int unpack_mad(const uint8_t *mad, size_t len, struct cep_msg *m,
		      enum cep_wire_error *e)
{
	const struct cep_field *hf;
	enum cep_msg_type t;
	size_t nh;
	int rc = cep_mad_peek(mad, len, &t, e);

	if (rc)
		return rc;
	hf = cep_wire_hdr_fields(&nh);
	memset(m, 0, sizeof(*m));
	m->type = t;
	unpack_rows(hf, nh, mad, m);
	unpack_rows(cep_msgs[t].fields, cep_msgs[t].n, mad + CEP_MAD_HDR_SIZE, m);
	return 0;
}

/* unpack_mad(), then the value rules: 0 or the first refusal. */
static int unpack_validate(const uint8_t *mad, size_t len, struct cep_msg *m,
			   enum cep_wire_error *e)
{
	int rc = unpack_mad(mad, len, m, e);

	return rc ? rc : cep_msg_validate(m, e);
}

int cep_msg_decode_counted(const uint8_t *mad, size_t len, struct cep_msg *out,
			   enum cep_wire_error *why, struct cep_wire_stats *stats)
{
	enum cep_wire_error e = CEP_WIRE_ERR_OK;
	struct cep_msg tmp;
	int rc;

	if (!mad || !out)
		return bad_arg(why);
	rc = unpack_validate(mad, len, &tmp, &e);
	if (why)
		*why = e;
	if (rc) {
		/* Counters are statistics only: relaxed, nothing is ordered by them. */
		if (stats)
			atomic_fetch_add_explicit(&stats->refused[e], 1, memory_order_relaxed);
		return rc;
	}
	memcpy(out, &tmp, sizeof(tmp));
	if (stats)
		atomic_fetch_add_explicit(&stats->decoded[tmp.type], 1, memory_order_relaxed);
	return 0;
}

int cep_msg_decode(const uint8_t *mad, size_t len, struct cep_msg *out,
		   enum cep_wire_error *why)
{
	return cep_msg_decode_counted(mad, len, out, why, NULL);
}

int cep_msg_decode_lax(const uint8_t *mad, size_t len, struct cep_msg *out,
		       enum cep_wire_error *why)
{
	enum cep_wire_error e = CEP_WIRE_ERR_OK;
	struct cep_msg tmp;
	int rc;

	if (!mad || !out)
		return bad_arg(why);
	rc = unpack_validate(mad, len, &tmp, &e);
	/* -EBADMSG: only a field-value rule is broken, the message is readable */
	if (rc == 0 || rc == -EBADMSG)
		memcpy(out, &tmp, sizeof(tmp));
	if (why)
		*why = e;
	return rc;
}

int cep_msg_encode(const struct cep_msg *m, uint8_t mad[CEP_MAD_SIZE])
{
	uint8_t buf[CEP_MAD_SIZE];
	const struct cep_msg_desc *d;
	const struct cep_field *hf;
	struct cep_msg hm;
	size_t nh;
	int rc;

	if (!m || !mad || !(d = desc_of(m->type)))
		return -EINVAL;
	memset(buf, 0, sizeof(buf));
	/* The header row for attr_id reads the type's attribute, not hdr.attr_id. */
	memset(&hm, 0, sizeof(hm));
	hm.hdr = m->hdr;
	hm.hdr.attr_id = d->attr_id;
	hf = cep_wire_hdr_fields(&nh);
	rc = pack_rows(hf, nh, &hm, buf);
	if (rc == 0)
		rc = pack_rows(d->fields, d->n, m, buf + CEP_MAD_HDR_SIZE);
	if (rc)
		return rc;
	memcpy(mad, buf, sizeof(buf));
	return 0;
}

void cep_msg_init(struct cep_msg *m, enum cep_msg_type type, uint64_t tid)
{
	if (!m)
		return;
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->hdr.base_version = CEP_MAD_BASE_VERSION;
	m->hdr.mgmt_class = CEP_MGMT_CLASS_CM;
	m->hdr.class_version = CEP_CM_CLASS_VERSION;
	m->hdr.method = CEP_MAD_METHOD_SEND;
	m->hdr.tid = tid;
	m->hdr.attr_id = cep_msg_attr_id(type);
}

/* wire.h gives C++ the counters as alignas(8) uint64_t: same layout. */
_Static_assert(sizeof(_Atomic uint64_t) == 8 && _Alignof(_Atomic uint64_t) == 8,
	       "cep_wire_stats: C and C++ layouts differ");

uint64_t cep_wire_stats_refused(const struct cep_wire_stats *stats, enum cep_wire_error why)
{
	if (!stats || (unsigned)why >= CEP_WIRE_ERR_COUNT)
		return 0;
	return atomic_load_explicit(&stats->refused[why], memory_order_relaxed);
}

uint64_t cep_wire_stats_decoded(const struct cep_wire_stats *stats, enum cep_msg_type type)
{
	if (!stats || (unsigned)type >= CEP_MSG_COUNT)
		return 0;
	return atomic_load_explicit(&stats->decoded[type], memory_order_relaxed);
}

/* ---- names ----------------------------------------------------------------- */

const char *cep_msg_name(enum cep_msg_type type)
{
	const struct cep_msg_desc *d = desc_of(type);

	return d ? d->name : "?";
}

static const char *const cep_rej_names[CEP_REJ_REASON_MAX + 1] = {
#define N_(v, n, s, a) [v] = s,
	CEP_REJ_REASON_MAP(N_)
#undef N_
};
static const char *const cep_rej_aris[CEP_REJ_REASON_MAX + 1] = {
#define A_(v, n, s, a) [v] = a,
	CEP_REJ_REASON_MAP(A_)
#undef A_
};
static const char *const cep_apr_names[CEP_APR_STATUS_MAX + 1] = {
#define N_(v, n, s) [v] = s,
	CEP_APR_STATUS_MAP(N_)
};
static const char *const cep_sidr_names[CEP_SIDR_STATUS_MAX + 1] = {
	CEP_SIDR_STATUS_MAP(N_)
#undef N_
};
static const char *const cep_err_names[CEP_WIRE_ERR_COUNT] = {
#define N_(n, e, s) [CEP_WIRE_ERR_##n] = #n,
	CEP_WIRE_ERROR_MAP(N_)
#undef N_
};
static const char *const cep_err_strs[CEP_WIRE_ERR_COUNT] = {
#define N_(n, e, s) [CEP_WIRE_ERR_##n] = s,
	CEP_WIRE_ERROR_MAP(N_)
#undef N_
};

static const char *name_in(const char *const *tab, unsigned n, unsigned v, const char *dflt)
{
	return v < n && tab[v] ? tab[v] : dflt;
}

#define NAME_IN_(tab, v, d) name_in(tab, sizeof(tab) / sizeof(tab[0]), v, d)

const char *cep_rej_reason_name(unsigned reason)
{
	return NAME_IN_(cep_rej_names, reason, "unknown reason");
}

const char *cep_rej_reason_ari(unsigned reason)
{
	return NAME_IN_(cep_rej_aris, reason, "undefined");
}

const char *cep_apr_status_name(unsigned status)
{
	return NAME_IN_(cep_apr_names, status, "unknown AP status");
}

const char *cep_sidr_status_name(unsigned status)
{
	return NAME_IN_(cep_sidr_names, status, "unknown SIDR status");
}

const char *cep_wire_error_name(enum cep_wire_error why)
{
	return NAME_IN_(cep_err_names, (unsigned)why, "?");
}

const char *cep_wire_error_str(enum cep_wire_error why)
{
	return NAME_IN_(cep_err_strs, (unsigned)why, "unknown wire error");
}
