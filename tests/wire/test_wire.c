/* SPDX-License-Identifier: MIT */
/*
 * Wire codec tests: golden vectors from the spec tables typed in golden.h,
 * literal byte checks of the tricky fields, seeded round trips, one test per
 * class of bad MAD (errno, reason, counter, output untouched), names.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cep/wire.h>

#include "../common/check.h"
#include "golden.h"
#include "wire/wire_fields.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	/* xorshift64*: seeded, so every failure reproduces. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static const struct gmsg *gmsg_of(enum cep_msg_type t)
{
	for (size_t i = 0; i < G_NMSGS; i++)
		if (g_msgs[i].type == t)
			return &g_msgs[i];
	return NULL;
}

/* Codec rows: in order, no overlap, cover all 232 bytes, and name the same
 * number of fields as the independent table. */
static void test_tables(void)
{
	for (int t = CEP_MSG_INVALID + 1; t < CEP_MSG_COUNT; t++) {
		size_t n, fields = 0;
		const struct cep_field *f = cep_wire_fields((enum cep_msg_type)t, &n);
		uint8_t seen[CEP_CM_DATA_SIZE * 8];
		unsigned total = 0;

		CHECK(f != NULL);
		if (!f)
			continue;
		memset(seen, 0, sizeof(seen));
		for (size_t i = 0; i < n; i++) {
			for (unsigned k = 0; k < f[i].width; k++) {
				unsigned pos = f[i].byte * 8u + f[i].bit + k;

				CHECK(pos < sizeof(seen));
				if (pos < sizeof(seen)) {
					CHECK_EQ(seen[pos], 0);
					seen[pos] = 1;
				}
			}
			total += f[i].width;
			if (f[i].kind != CEP_FIELD_RESERVED)
				fields++;
		}
		CHECK_EQ(total, CEP_CM_DATA_SIZE * 8);
		CHECK_EQ(fields, gmsg_of((enum cep_msg_type)t)->n);
		CHECK_EQ(cep_msg_private_data_size((enum cep_msg_type)t) * 8,
			 f[n - 1].width);
	}
	CHECK(cep_wire_fields(CEP_MSG_INVALID, &(size_t){0}) == NULL);
	CHECK(cep_wire_fields(CEP_MSG_COUNT, &(size_t){0}) == NULL);
	CHECK_EQ(cep_msg_private_data_size(CEP_MSG_REQ), 92);
	CHECK_EQ(cep_msg_private_data_size(CEP_MSG_REP), 196);
	CHECK_EQ(cep_msg_private_data_size(CEP_MSG_REJ), 148);
	CHECK_EQ(cep_msg_private_data_size(CEP_MSG_MRA), 222);
	CHECK_EQ(cep_msg_private_data_size(CEP_MSG_SIDR_REP), 136);
}

/* Decode a golden MAD and compare every field with the independent reader;
 * re-encode and compare bytes. */
static void check_golden(const struct gmsg *g, const uint8_t *mad, uint64_t tid)
{
	const uint8_t *cm = mad + CEP_MAD_HDR_SIZE;
	enum cep_wire_error why = CEP_WIRE_ERR_COUNT;
	uint8_t again[CEP_MAD_SIZE];
	struct cep_msg m;
	int rc;

	rc = cep_msg_decode(mad, CEP_MAD_SIZE, &m, &why);
	CHECK_EQ(rc, 0);
	CHECK_EQ(why, CEP_WIRE_ERR_OK);
	if (rc) {
		fprintf(stderr, "  %s: %s\n", cep_msg_name(g->type), cep_wire_error_str(why));
		return;
	}
	CHECK_EQ(m.type, g->type);
	CHECK_EQ(m.hdr.base_version, 1);
	CHECK_EQ(m.hdr.mgmt_class, 0x07);
	CHECK_EQ(m.hdr.class_version, 2);
	CHECK_EQ(m.hdr.method, 0x03);
	CHECK_EQ(m.hdr.attr_id, g->attr);
	CHECK(m.hdr.tid == tid);
	for (size_t i = 0; i < g->n; i++) {
		const struct grow *r = &g->rows[i];

		if (r->array) {
			CHECK_EQ(r->size * 8, r->width);
			if (memcmp((const uint8_t *)&m + r->off, cm + r->byte, r->size)) {
				fprintf(stderr, "  %s.%s differs\n", cep_msg_name(g->type), r->name);
				CHECK(0);
			}
		} else if (g_host(&m, r) != g_get(cm, r->byte, r->bit, r->width)) {
			fprintf(stderr, "  %s.%s: decoded %#llx, spec bits %#llx\n",
				cep_msg_name(g->type), r->name,
				(unsigned long long)g_host(&m, r),
				(unsigned long long)g_get(cm, r->byte, r->bit, r->width));
			CHECK(0);
		}
	}
	memset(again, 0xee, sizeof(again));
	CHECK_EQ(cep_msg_encode(&m, again), 0);
	CHECK(memcmp(again, mad, CEP_MAD_SIZE) == 0);
}

static void test_golden(void)
{
	uint8_t pat[CEP_CM_DATA_SIZE], mad[CEP_MAD_SIZE];
	static const uint8_t fills[] = { 0xff, 0xaa, 0x55, 0x00 };

	for (size_t i = 0; i < G_NMSGS; i++) {
		const struct gmsg *g = &g_msgs[i];

		for (size_t p = 0; p < sizeof(fills); p++) {
			memset(pat, fills[p], sizeof(pat));
			g_build(g, pat, 0x0123456789abcdefull ^ p, mad);
			check_golden(g, mad, 0x0123456789abcdefull ^ p);
		}
		/* Every field alone at its maximum, the rest zero: a field that
		 * bleeds into its neighbour shows. */
		for (size_t r = 0; r < g->n; r++) {
			struct cep_msg m;

			memset(pat, 0, sizeof(pat));
			if (g->rows[r].array)
				memset(pat + g->rows[r].byte, 0xff, g->rows[r].size);
			else
				g_put(pat, g->rows[r].byte, g->rows[r].bit, g->rows[r].width,
				      g->rows[r].width >= 64 ? ~0ull
							     : (1ull << g->rows[r].width) - 1);
			g_build(g, pat, 7, mad);
			check_golden(g, mad, 7);
			if (!g->rows[r].array && cep_msg_decode(mad, 256, &m, NULL) == 0) {
				uint64_t v = g_host(&m, &g->rows[r]);
				uint64_t max = g->rows[r].width >= 64 ? ~0ull
					       : (1ull << g->rows[r].width) - 1;
				/* legalised fields keep a legal value, all others max */
				if (v != max && !(g->type == CEP_MSG_REQ || g->type == CEP_MSG_REP ||
						  g->type == CEP_MSG_MRA || g->type == CEP_MSG_REJ ||
						  g->type == CEP_MSG_APR || g->type == CEP_MSG_SIDR_REP))
					CHECK(0);
			}
		}
		/* random bytes */
		for (int k = 0; k < 20; k++) {
			for (size_t b = 0; b < sizeof(pat); b++)
				pat[b] = (uint8_t)rnd();
			g_build(g, pat, rnd(), mad);
			check_golden(g, mad, cep_mad_tid(mad, sizeof(mad)));
		}
	}
}

/* The fields most easily got wrong, as literal bytes of the MAD. */
static void test_literal_bytes(void)
{
	uint8_t mad[CEP_MAD_SIZE];
	struct cep_msg m;

	cep_msg_init(&m, CEP_MSG_REQ, 0x1122334455667788ull);
	m.u.req.local_comm_id = 0xdeadbeef;
	m.u.req.service_id = 0x0102030405060708ull;
	m.u.req.local_qpn = 0x123456;
	m.u.req.responder_resources = 0x9a;
	m.u.req.remote_cm_response_timeout = 0x1f;
	m.u.req.transport_service_type = CEP_TS_UC;
	m.u.req.end_to_end_flow_control = 1;
	m.u.req.starting_psn = 0xabcdef;
	m.u.req.local_cm_response_timeout = 0x11;
	m.u.req.retry_count = 5;
	m.u.req.path_mtu = 5;
	m.u.req.rdc_exists = 0;
	m.u.req.rnr_retry_count = 7;
	m.u.req.max_cm_retries = 0xf;
	m.u.req.srq = 1;
	m.u.req.primary.flow_label = 0xabcde;
	m.u.req.primary.packet_rate = 0x3f;
	m.u.req.primary.sl = 0xa;
	m.u.req.primary.subnet_local = 1;
	m.u.req.primary.local_ack_timeout = 0x13;
	m.u.req.alternate.local_ack_timeout = 0x1f;
	m.u.req.sap_supported = 1;
	m.u.req.private_data[91] = 0x77;
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(mad[0], 1); CHECK_EQ(mad[1], 7); CHECK_EQ(mad[2], 2); CHECK_EQ(mad[3], 3);
	CHECK_EQ(mad[8], 0x11); CHECK_EQ(mad[15], 0x88);
	CHECK_EQ(mad[16], 0x00); CHECK_EQ(mad[17], 0x10);
	CHECK_EQ(mad[24], 0xde); CHECK_EQ(mad[27], 0xef);
	CHECK_EQ(mad[32], 0x01); CHECK_EQ(mad[39], 0x08);
	CHECK_EQ(mad[56], 0x12); CHECK_EQ(mad[57], 0x34); CHECK_EQ(mad[58], 0x56);
	CHECK_EQ(mad[59], 0x9a);
	CHECK_EQ(mad[67], 0xfb);   /* 11111 01 1 */
	CHECK_EQ(mad[68], 0xab); CHECK_EQ(mad[70], 0xef);
	CHECK_EQ(mad[71], 0x8d);   /* 10001 101 */
	CHECK_EQ(mad[74], 0x57);   /* 0101 0 111: MTU 5, RDC 0, RNR 7 */
	CHECK_EQ(mad[75], 0xf8);   /* 1111 1 000 */
	CHECK_EQ(mad[112], 0xab); CHECK_EQ(mad[113], 0xcd); CHECK_EQ(mad[114], 0xe0);
	CHECK_EQ(mad[115], 0x3f);
	CHECK_EQ(mad[118], 0xa8);  /* 1010 1 000 */
	CHECK_EQ(mad[119], 0x98);  /* 10011 000 */
	CHECK_EQ(mad[163], 0xfc);  /* 11111 1 00 */
	CHECK_EQ(mad[255], 0x77);

	cep_msg_init(&m, CEP_MSG_REJ, 1);
	m.u.rej.message_rejected = CEP_MSG_CODE_REP;
	m.u.rej.reject_info_length = 72;
	m.u.rej.reason = CEP_REJ_CONSUMER_DEFINED;
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(mad[17], 0x12);
	CHECK_EQ(mad[32], 0x40); CHECK_EQ(mad[33], 0x90);
	CHECK_EQ(mad[34], 0x00); CHECK_EQ(mad[35], 28);

	cep_msg_init(&m, CEP_MSG_LAP, 1);
	m.u.lap.remote_qpn_eecn = 0xfedcba;
	m.u.lap.remote_cm_response_timeout = 0x15;
	m.u.lap.alternate.flow_label = 0x12345;
	m.u.lap.alternate.traffic_class = 0x5a;
	m.u.lap.alternate.packet_rate = 0x2a;
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(mad[17], 0x19);
	CHECK_EQ(mad[36], 0xfe); CHECK_EQ(mad[38], 0xba); CHECK_EQ(mad[39], 0xa8);
	CHECK_EQ(mad[80], 0x12); CHECK_EQ(mad[81], 0x34); CHECK_EQ(mad[82], 0x50);
	CHECK_EQ(mad[83], 0x5a); CHECK_EQ(mad[85], 0x2a);

	cep_msg_init(&m, CEP_MSG_SIDR_REP, 1);
	m.u.sidr_rep.qpn = 0xabcdef;
	m.u.sidr_rep.qkey = 0x80010000;
	m.u.sidr_rep.status = CEP_SIDR_REDIRECT;
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(mad[17], 0x18);
	CHECK_EQ(mad[28], 4);
	CHECK_EQ(mad[32], 0xab); CHECK_EQ(mad[34], 0xef); CHECK_EQ(mad[35], 0);
	CHECK_EQ(mad[44], 0x80); CHECK_EQ(mad[45], 0x01);

	cep_msg_init(&m, CEP_MSG_REP, 1);
	m.u.rep.target_ack_delay = 0x1f;
	m.u.rep.failover_accepted = CEP_FAILOVER_REJECTED;
	m.u.rep.rnr_retry_count = 7;
	m.u.rep.srq = 1;
	m.u.rep.local_qpn = 2;
	m.u.rep.local_ca_guid = 0x0002c90300a1b2c3ull;
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(mad[50], 0xfc); CHECK_EQ(mad[51], 0xf0);
	CHECK_EQ(mad[52], 0x00); CHECK_EQ(mad[53], 0x02); CHECK_EQ(mad[59], 0xc3);
}

/* Fill @m with random valid values through the codec rows. */
static void random_msg(enum cep_msg_type t, struct cep_msg *m)
{
	size_t n;
	const struct cep_field *f = cep_wire_fields(t, &n);
	uint8_t img[CEP_MAD_SIZE], pat[CEP_CM_DATA_SIZE];

	(void)f;
	for (size_t b = 0; b < sizeof(pat); b++)
		pat[b] = (uint8_t)rnd();
	g_build(gmsg_of(t), pat, rnd(), img);
	img[4] = (uint8_t)rnd(); img[7] = (uint8_t)rnd(); img[23] = (uint8_t)rnd();
	CHECK_EQ(cep_msg_decode(img, sizeof(img), m, NULL), 0);
}

static void test_roundtrip(void)
{
	for (int i = 0; i < 2000; i++) {
		enum cep_msg_type t = (enum cep_msg_type)(1 + rnd() % (CEP_MSG_COUNT - 1));
		struct cep_msg a, b;
		uint8_t mad[CEP_MAD_SIZE], dirty[CEP_MAD_SIZE], again[CEP_MAD_SIZE];
		size_t n;
		const struct cep_field *f = cep_wire_fields(t, &n);

		memset(&a, 0, sizeof(a));
		random_msg(t, &a);
		CHECK_EQ(cep_msg_encode(&a, mad), 0);
		memset(&b, 0x5a, sizeof(b));
		CHECK_EQ(cep_msg_decode(mad, sizeof(mad), &b, NULL), 0);
		CHECK(memcmp(&a, &b, sizeof(a)) == 0);   /* decode(encode(x)) == x */

		/* Set every reserved bit: decode ignores them, encode writes 0. */
		memcpy(dirty, mad, sizeof(dirty));
		dirty[18] = 0xff; dirty[19] = 0xff;
		for (size_t k = 0; k < n; k++)
			if (f[k].kind == CEP_FIELD_RESERVED)
				g_put(dirty + CEP_MAD_HDR_SIZE, f[k].byte, f[k].bit, f[k].width, ~0ull);
		CHECK_EQ(cep_msg_decode(dirty, sizeof(dirty), &b, NULL), 0);
		CHECK(memcmp(&a, &b, sizeof(a)) == 0);
		CHECK_EQ(cep_msg_encode(&b, again), 0);
		CHECK(memcmp(again, mad, sizeof(mad)) == 0); /* encode(decode(b)) == b - reserved */
	}
}

static void fill_bad(struct cep_msg *m)
{
	memset(m, 0xa5, sizeof(*m));
}

static int untouched(const struct cep_msg *m)
{
	const uint8_t *p = (const uint8_t *)m;

	for (size_t i = 0; i < sizeof(*m); i++)
		if (p[i] != 0xa5)
			return 0;
	return 1;
}

/* The tools' decoder (cepdump): same answer as the strict one; a MAD that
 * breaks only a field-value rule is unpacked all the same, and exactly the
 * row holding the broken value is flagged with that rule (none when @err
 * is 0). */
static void expect_lax(const uint8_t *mad, size_t len, int err, enum cep_wire_error want)
{
	enum cep_wire_error why = CEP_WIRE_ERR_COUNT;
	struct cep_msg out;
	const struct cep_field *f;
	size_t n;
	int flagged = 0;

	fill_bad(&out);
	CHECK_EQ(cep_msg_decode_lax(mad, len, &out, &why), -err);
	CHECK_EQ(why, want);
	if (err != 0 && err != EBADMSG) {
		CHECK(untouched(&out));
		return;
	}
	CHECK(!untouched(&out));
	CHECK_EQ(cep_mad_tid(mad, len), out.hdr.tid);
	f = cep_wire_fields(out.type, &n);
	for (size_t i = 0; i < n; i++) {
		enum cep_wire_error e = cep_field_rule_broken(&out, &f[i]);

		if (e == CEP_WIRE_ERR_OK)
			continue;
		flagged++;
		CHECK_EQ(e, want);
		CHECK_EQ(cep_bits_get(mad + CEP_MAD_HDR_SIZE + f[i].byte, f[i].bit, f[i].width),
			 cep_field_host_get(&out, &f[i]));
	}
	CHECK_EQ(flagged, err ? 1 : 0);
}

static void expect_bad(struct cep_wire_stats *st, const uint8_t *mad, size_t len,
		       int err, enum cep_wire_error want)
{
	enum cep_wire_error why = CEP_WIRE_ERR_COUNT;
	uint64_t before = cep_wire_stats_refused(st, want);
	struct cep_msg out;
	int rc;

	fill_bad(&out);
	rc = cep_msg_decode_counted(mad, len, &out, &why, st);
	if (rc != -err || why != want)
		fprintf(stderr, "  want %s (-%d), got %s (%d)\n", cep_wire_error_name(want), err,
			cep_wire_error_name(why), rc);
	CHECK_EQ(rc, -err);
	CHECK_EQ(why, want);
	CHECK(untouched(&out));
	CHECK_EQ(cep_wire_stats_refused(st, want), before + 1);
	expect_lax(mad, len, err, want);
}

static void valid(enum cep_msg_type t, uint8_t *mad)
{
	struct cep_msg m;

	memset(&m, 0, sizeof(m));
	random_msg(t, &m);
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
}

static void test_bad(void)
{
	static struct cep_wire_stats st;
	uint8_t mad[CEP_MAD_SIZE + 1], b[CEP_MAD_SIZE + 1];
	struct cep_msg out;
	uint64_t total = 0;

	valid(CEP_MSG_REQ, mad);
	mad[256] = 0;
	expect_bad(&st, mad, 255, EMSGSIZE, CEP_WIRE_ERR_LENGTH);
	expect_bad(&st, mad, 257, EMSGSIZE, CEP_WIRE_ERR_LENGTH);
	expect_bad(&st, mad, 0, EMSGSIZE, CEP_WIRE_ERR_LENGTH);
	memcpy(b, mad, 256); b[0] = 2;
	expect_bad(&st, b, 256, EPROTONOSUPPORT, CEP_WIRE_ERR_BASE_VERSION);
	memcpy(b, mad, 256); b[1] = 0x03;  /* SA */
	expect_bad(&st, b, 256, EPFNOSUPPORT, CEP_WIRE_ERR_MGMT_CLASS);
	memcpy(b, mad, 256); b[2] = 1;
	expect_bad(&st, b, 256, ENOPROTOOPT, CEP_WIRE_ERR_CLASS_VERSION);
	memcpy(b, mad, 256); b[3] = 0x01;  /* Get */
	expect_bad(&st, b, 256, EOPNOTSUPP, CEP_WIRE_ERR_METHOD);
	memcpy(b, mad, 256); b[3] = 0x83;  /* response bit */
	expect_bad(&st, b, 256, EOPNOTSUPP, CEP_WIRE_ERR_METHOD);
	memcpy(b, mad, 256); b[17] = 0x01; /* ClassPortInfo */
	expect_bad(&st, b, 256, ENOMSG, CEP_WIRE_ERR_ATTR_ID);
	memcpy(b, mad, 256); b[17] = 0x1b;
	expect_bad(&st, b, 256, ENOMSG, CEP_WIRE_ERR_ATTR_ID);
	memcpy(b, mad, 256); b[16] = 0x80;
	expect_bad(&st, b, 256, ENOMSG, CEP_WIRE_ERR_ATTR_ID);

	/* REQ field rules */
	for (uint32_t q = 0; q < 2; q++) {
		memcpy(b, mad, 256); g_put(b + 24, 32, 0, 24, q);
		expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_QPN);
	}
	memcpy(b, mad, 256); g_put(b + 24, 43, 5, 2, 3); g_put(b + 24, 51, 5, 3, 0);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_TRANSPORT_TYPE);
	memcpy(b, mad, 256); g_put(b + 24, 43, 5, 2, 3); g_put(b + 24, 51, 5, 3, 1);
	CHECK_EQ(cep_msg_decode(b, 256, &out, NULL), 0);   /* XRC is fine */
	CHECK_EQ(out.u.req.transport_service_type, 3);
	expect_lax(b, 256, 0, CEP_WIRE_ERR_OK);
	memcpy(b, mad, 256); g_put(b + 24, 50, 0, 4, 0);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_PATH_MTU);
	memcpy(b, mad, 256); g_put(b + 24, 50, 0, 4, 6);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_PATH_MTU);

	valid(CEP_MSG_REP, mad);
	memcpy(b, mad, 256); g_put(b + 24, 12, 0, 24, 1);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_QPN);
	/* an XRC target's REP: local QPN 0, SRQ, its QP in the local EECN
	 * (the kernel's cm_format_rep for IB_QPT_XRC_TGT) */
	memcpy(b, mad, 256); g_put(b + 24, 12, 0, 24, 0); g_put(b + 24, 16, 0, 24, 0x4242);
	g_put(b + 24, 27, 3, 1, 1);
	CHECK_EQ(cep_msg_decode(b, 256, &out, NULL), 0);
	CHECK_EQ(out.u.rep.local_qpn, 0);
	CHECK_EQ(out.u.rep.local_eecn, 0x4242);
	CHECK_EQ(out.u.rep.srq, 1);
	g_put(b + 24, 27, 3, 1, 0); /* no SRQ: no XRC target's */
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_QPN);
	g_put(b + 24, 27, 3, 1, 1); g_put(b + 24, 16, 0, 24, 1); /* EECN no QP */
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_QPN);
	g_put(b + 24, 16, 0, 24, 0);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_QPN);
	memcpy(b, mad, 256); g_put(b + 24, 26, 5, 2, 3);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_FAILOVER);

	valid(CEP_MSG_MRA, mad);
	memcpy(b, mad, 256); g_put(b + 24, 8, 0, 2, 3);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_MSG_MRAED);

	valid(CEP_MSG_REJ, mad);
	memcpy(b, mad, 256); g_put(b + 24, 8, 0, 2, 3);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_MSG_REJECTED);
	memcpy(b, mad, 256); g_put(b + 24, 9, 0, 7, 73);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_REJ_INFO_LENGTH);
	memcpy(b, mad, 256); g_put(b + 24, 9, 0, 7, 72);
	CHECK_EQ(cep_msg_decode(b, 256, &out, NULL), 0);

	valid(CEP_MSG_APR, mad);
	memcpy(b, mad, 256); g_put(b + 24, 8, 0, 8, 73);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_APR_INFO_LENGTH);
	memcpy(b, mad, 256); g_put(b + 24, 9, 0, 8, 14);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_AP_STATUS);

	valid(CEP_MSG_SIDR_REP, mad);
	memcpy(b, mad, 256); g_put(b + 24, 5, 0, 8, 0xff);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_SIDR_INFO_LENGTH);
	memcpy(b, mad, 256); g_put(b + 24, 4, 0, 8, 6);
	expect_bad(&st, b, 256, EBADMSG, CEP_WIRE_ERR_SIDR_STATUS);

	/* every error class was counted; a valid MAD counts as decoded */
	for (int e = 1; e < CEP_WIRE_ERR_COUNT; e++) {
		CHECK(cep_wire_stats_refused(&st, (enum cep_wire_error)e) > 0);
		total += cep_wire_stats_refused(&st, (enum cep_wire_error)e);
	}
	CHECK_EQ(cep_wire_stats_refused(&st, CEP_WIRE_ERR_OK), 0);
	CHECK_EQ(cep_msg_decode_counted(mad, 256, &out, NULL, &st), 0);
	CHECK_EQ(cep_wire_stats_decoded(&st, CEP_MSG_SIDR_REP), 1);
	CHECK(total > 20);

	/* API misuse is not a bad MAD */
	CHECK_EQ(cep_msg_decode(NULL, 256, &out, NULL), -EINVAL);
	CHECK_EQ(cep_msg_decode(mad, 256, NULL, NULL), -EINVAL);

	/* peek */
	{
		enum cep_msg_type t = CEP_MSG_INVALID;

		CHECK_EQ(cep_mad_peek(mad, 256, &t, NULL), 0);
		CHECK_EQ(t, CEP_MSG_SIDR_REP);
		CHECK_EQ(cep_mad_peek(mad, 100, &t, NULL), -EMSGSIZE);
	}
}

static void test_encode_errors(void)
{
	uint8_t mad[CEP_MAD_SIZE], keep[CEP_MAD_SIZE];
	struct cep_msg m;

	memset(mad, 0x3c, sizeof(mad));
	memcpy(keep, mad, sizeof(mad));
	cep_msg_init(&m, CEP_MSG_REQ, 1);
	m.u.req.local_qpn = 0x1000000;
	CHECK_EQ(cep_msg_encode(&m, mad), -ERANGE);
	m.u.req.local_qpn = 5;
	m.u.req.primary.flow_label = 0x100000;
	CHECK_EQ(cep_msg_encode(&m, mad), -ERANGE);
	m.u.req.primary.flow_label = 0;
	m.u.req.retry_count = 8;
	CHECK_EQ(cep_msg_encode(&m, mad), -ERANGE);
	m.u.req.retry_count = 7;
	m.hdr.attr_id = 0x0015;      /* ignored: the type decides */
	m.type = CEP_MSG_INVALID;
	CHECK_EQ(cep_msg_encode(&m, mad), -EINVAL);
	m.type = CEP_MSG_COUNT;
	CHECK_EQ(cep_msg_encode(&m, mad), -EINVAL);
	CHECK_EQ(cep_msg_encode(NULL, mad), -EINVAL);
	CHECK(memcmp(mad, keep, sizeof(mad)) == 0);
	m.type = CEP_MSG_REQ;
	m.u.req.path_mtu = 4;
	CHECK_EQ(cep_msg_encode(&m, mad), 0);
	CHECK_EQ(mad[17], 0x10);
}

static void test_names(void)
{
	for (unsigned r = 1; r <= 33; r++) {
		CHECK(strcmp(cep_rej_reason_name(r), "unknown reason") != 0);
		CHECK(strcmp(cep_rej_reason_ari(r), "undefined") != 0);
	}
	CHECK(strcmp(cep_rej_reason_name(0), "unknown reason") == 0);
	CHECK(strcmp(cep_rej_reason_name(34), "unknown reason") == 0);
	CHECK(strcmp(cep_rej_reason_name(CEP_REJ_STALE_CONN), "Stale connection") == 0);
	CHECK_EQ(CEP_REJ_INVALID_ALT_FLOW_LABEL, 33);
	CHECK_EQ(CEP_REJ_CONSUMER_DEFINED, 28);
	CHECK(strcmp(cep_msg_name(CEP_MSG_SIDR_REP), "SIDR_REP") == 0);
	CHECK(strcmp(cep_msg_name(CEP_MSG_INVALID), "?") == 0);
	CHECK(strcmp(cep_msg_name((enum cep_msg_type)99), "?") == 0);
	for (int t = 1; t < CEP_MSG_COUNT; t++) {
		CHECK_EQ(cep_msg_type_of_attr(cep_msg_attr_id((enum cep_msg_type)t)), t);
		CHECK_EQ(cep_msg_attr_id((enum cep_msg_type)t), gmsg_of((enum cep_msg_type)t)->attr);
	}
	CHECK_EQ(cep_msg_type_of_attr(0x0001), CEP_MSG_INVALID);
	for (int a = 0; a < CEP_WIRE_ERR_COUNT; a++)
		for (int b = a + 1; b < CEP_WIRE_ERR_COUNT; b++)
			CHECK(strcmp(cep_wire_error_name((enum cep_wire_error)a),
				     cep_wire_error_name((enum cep_wire_error)b)) != 0);
	CHECK(strcmp(cep_wire_error_name(CEP_WIRE_ERR_QPN), "QPN") == 0);
	CHECK(strcmp(cep_apr_status_name(13), "Invalid alternate SL") == 0);
	CHECK(strcmp(cep_sidr_status_name(6), "unknown SIDR status") == 0);
}

struct thr_arg {
	struct cep_wire_stats *st;
	const uint8_t *good, *bad;
};

static void *decoder_thread(void *p)
{
	struct thr_arg *a = p;
	struct cep_msg m;

	for (int i = 0; i < 5000; i++) {
		cep_msg_decode_counted(a->good, 256, &m, NULL, a->st);
		cep_msg_decode_counted(a->bad, 256, &m, NULL, a->st);
	}
	return NULL;
}

/* Many threads, one stats: every outcome counted exactly once. */
static void test_stats_threads(void)
{
	static struct cep_wire_stats st;
	uint8_t good[256], bad[256];
	pthread_t th[4];
	struct thr_arg a = { &st, good, bad };

	valid(CEP_MSG_DREQ, good);
	memcpy(bad, good, 256);
	bad[2] = 9;
	for (int i = 0; i < 4; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, decoder_thread, &a), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(cep_wire_stats_decoded(&st, CEP_MSG_DREQ), 20000);
	CHECK_EQ(cep_wire_stats_refused(&st, CEP_WIRE_ERR_CLASS_VERSION), 20000);
}

int main(void)
{
	test_tables();
	test_golden();
	test_literal_bytes();
	test_roundtrip();
	test_bad();
	test_encode_errors();
	test_names();
	test_stats_threads();
	return check_done("wire");
}
