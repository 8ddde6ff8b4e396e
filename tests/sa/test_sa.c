/* SPDX-License-Identifier: MIT */
/*
 * SA client without a fabric: the codecs against golden bytes written by
 * hand from the spec's tables (IBTA vol. 1 13.4.2 MAD header, 15.2.1.1 SA
 * header, 15.2.5.16 PathRecord, 13.4.8.1 ClassPortInfo, 15.2.5.17
 * MCMemberRecord), and the client (cache, retries, timeouts, invalidation,
 * status codes, concurrency, multicast Get / Set / Delete and the answer's
 * method) against a fake SA plugged in as its backend.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cep/sa.h>

#include "sa/sa_backend.h"
#include "../common/check.h"
#include "../common/fake_sa.h"

/* ---- golden vectors ---- */

/* A PathRecord with every field set to a value whose bits are easy to
 * follow; bytes from Table 205's offsets. */
static const uint8_t golden_path[CEP_SA_PATH_REC_SIZE] = {
	/* 0: ServiceID */
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
	/* 8: DGID fe80::10:5 */
	0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0x05,
	/* 24: SGID fe80::10:3 */
	0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0x03,
	/* 40: DLID 4, SLID 3 */
	0x00, 0x04, 0x00, 0x03,
	/* 44: RawTraffic 1, Reserved 3 bits, FlowLabel 0xabcde, HopLimit 0x40:
	 * 1 000 1010 1011 1100 1101 1110 0100 0000 */
	0x8a, 0xbc, 0xde, 0x40,
	/* 48: TClass 0x25; Reversible 1 NumbPath 1; P_Key 0xffff */
	0x25, 0x81, 0xff, 0xff,
	/* 52: QosClass 0xabc (12 bits), SL 5 (4 bits) */
	0xab, 0xc5,
	/* 54: MTUSelector 2 MTU 4 (2048); RateSelector 2 Rate 3 (10 Gb/s) */
	0x84, 0x83,
	/* 56: PacketLifeTimeSelector 2 PacketLifeTime 0x12; Preference 7 */
	0x92, 0x07,
	/* 58: Reserved */
	0, 0, 0, 0, 0, 0,
};

static const struct cep_sa_path golden_path_fields = {
	.service_id = 0x0102030405060708ull,
	.dgid = { 0xfe, 0x80, [13] = 0x10, [15] = 0x05 },
	.sgid = { 0xfe, 0x80, [13] = 0x10, [15] = 0x03 },
	.dlid = 4, .slid = 3,
	.raw_traffic = 1, .flow_label = 0xabcde, .hop_limit = 0x40,
	.traffic_class = 0x25, .reversible = 1, .numb_path = 1,
	.pkey = 0xffff, .qos_class = 0xabc, .sl = 5,
	.mtu_selector = 2, .mtu = 4, .rate_selector = 2, .rate = 3,
	.packet_life_time_selector = 2, .packet_life_time = 0x12,
	.preference = 7,
};

/* ClassPortInfo with OpenSM 3.3's answer on ibsim (saquery -c): capability
 * mask 0x2602, mask 2 0xb5e8, response time 0x10, redirect QP 1 and the
 * GSI Q_Key; redirect LID and P_Key set to see their offsets. */
static const uint8_t golden_cpi[CEP_SA_CPI_SIZE] = {
	0x01, 0x02, 0x26, 0x02,
	/* 4: CapabilityMask2 (27 bits) 0xb5e8, RespTimeValue (5 bits) 0x10 */
	0x00, 0x16, 0xbd, 0x10,
	/* 8: RedirectGID */
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* 24: TC, SL, FL */
	0, 0, 0, 0,
	/* 28: RedirectLID 0x0102, RedirectP_Key 0xffff */
	0x01, 0x02, 0xff, 0xff,
	/* 32: Reserved, RedirectQP 1; RedirectQ_Key */
	0x00, 0x00, 0x00, 0x01, 0x80, 0x01, 0x00, 0x00,
	/* 40..71: trap fields */
};

/* An MCMemberRecord with every field set, bytes from Table 207. */
static const uint8_t golden_mcm[CEP_SA_MCM_REC_SIZE] = {
	/* 0: MGID ff12:401b:ffff::1 */
	0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
	/* 16: PortGID fe80::10:3 */
	0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0x03,
	/* 32: Q_Key 0x80010000; 36: MLID 0xc001 */
	0x80, 0x01, 0x00, 0x00, 0xc0, 0x01,
	/* 38: MTUSelector 2 MTU 4; 39: TClass 0x25 */
	0x84, 0x25,
	/* 40: P_Key 0xffff; 42: RateSelector 2 Rate 3; 43: PLTSelector 2
	 * PacketLifeTime 0x12 */
	0xff, 0xff, 0x83, 0x92,
	/* 44: SL 5 (4 bits), FlowLabel 0xabcde (20), HopLimit 0x40:
	 * 0101 1010 1011 1100 1101 1110 0100 0000 */
	0x5a, 0xbc, 0xde, 0x40,
	/* 48: Scope 2, JoinState 1; ProxyJoin 1, Reserved 23 bits */
	0x21, 0x80, 0x00, 0x00,
};

static const struct cep_sa_mcmember golden_mcm_fields = {
	.mgid = { 0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, [15] = 0x01 },
	.port_gid = { 0xfe, 0x80, [13] = 0x10, [15] = 0x03 },
	.qkey = 0x80010000u, .mlid = 0xc001,
	.mtu_selector = 2, .mtu = 4, .traffic_class = 0x25, .pkey = 0xffff,
	.rate_selector = 2, .rate = 3, .packet_life_time_selector = 2,
	.packet_life_time = 0x12, .sl = 5, .flow_label = 0xabcde,
	.hop_limit = 0x40, .scope = 2, .join_state = 1, .proxy_join = 1,
};

static void test_codecs(void)
{
	uint8_t rec[CEP_SA_PATH_REC_SIZE], mad[CEP_SA_MAD_SIZE];
	struct cep_sa_path p;
	struct cep_sa_class_port_info c;
	struct cep_sa_mad_hdr h, d;

	CHECK_EQ(cep_sa_path_encode(&golden_path_fields, rec), 0);
	CHECK(memcmp(rec, golden_path, sizeof(rec)) == 0);
	cep_sa_path_decode(golden_path, &p);
	CHECK(memcmp(&p, &golden_path_fields, sizeof(p)) == 0);

	p = golden_path_fields;
	p.flow_label = 0x100000;           /* 21 bits */
	CHECK_EQ(cep_sa_path_encode(&p, rec), -EINVAL);
	p = golden_path_fields;
	p.sl = 16;
	CHECK_EQ(cep_sa_path_encode(&p, rec), -EINVAL);

	cep_sa_cpi_decode(golden_cpi, &c);
	CHECK_EQ(c.base_version, 1);
	CHECK_EQ(c.class_version, 2);
	CHECK_EQ(c.capability_mask, 0x2602);
	CHECK_EQ(c.capability_mask2, 0xb5e8);
	CHECK_EQ(c.resp_time_value, 0x10);
	CHECK_EQ(c.redirect_lid, 0x0102);
	CHECK_EQ(c.redirect_pkey, 0xffff);
	CHECK_EQ(c.redirect_qp, 1);
	CHECK_EQ(c.redirect_qkey, 0x80010000u);

	/* A Get of a PathRecord by GIDs and P_Key, as cma_query_ib_route
	 * asks (mask bits from Table 205's component order). */
	memset(&h, 0, sizeof(h));
	h.base_version = 1;
	h.mgmt_class = CEP_SA_MGMT_CLASS;
	h.class_version = CEP_SA_CLASS_VERSION;
	h.method = CEP_SA_METHOD_GET;
	h.tid = 0x1122334455667788ull;
	h.attr_id = CEP_SA_ATTR_PATH_REC;
	h.comp_mask = CEP_SA_PR_DGID | CEP_SA_PR_SGID | CEP_SA_PR_NUMB_PATH |
		      CEP_SA_PR_PKEY;
	CHECK_EQ(cep_sa_mad_encode(mad, &h, golden_path, sizeof(golden_path)), 0);
	static const uint8_t hdr[CEP_SA_HDR_SIZE] = {
		0x01, 0x03, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00,
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
		0x00, 0x35, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		/* 24: RMPP header, 12 bytes */
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		/* 36: SM_Key; 44: AttributeOffset, Reserved */
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		/* 48: ComponentMask: bits 2, 3, 12, 13 */
		0, 0, 0, 0, 0, 0, 0x30, 0x0c,
	};
	CHECK(memcmp(mad, hdr, sizeof(hdr)) == 0);
	CHECK(memcmp(mad + CEP_SA_HDR_SIZE, golden_path, sizeof(golden_path)) == 0);
	CHECK_EQ(cep_sa_mad_decode(mad, sizeof(mad), &d), 0);
	CHECK(memcmp(&d, &h, sizeof(d)) == 0);
	CHECK_EQ(cep_sa_mad_decode(mad, CEP_SA_HDR_SIZE - 1, &d), -EINVAL);
	mad[1] = 0x07;                     /* the CM's class */
	CHECK_EQ(cep_sa_mad_decode(mad, sizeof(mad), &d), -EPROTO);
	CHECK_EQ(cep_sa_mad_encode(mad, &h, golden_path, CEP_SA_DATA_SIZE + 1), -EINVAL);

	uint8_t mrec[CEP_SA_MCM_REC_SIZE];
	struct cep_sa_mcmember m;

	CHECK_EQ(cep_sa_mcmember_encode(&golden_mcm_fields, mrec), 0);
	CHECK(memcmp(mrec, golden_mcm, sizeof(mrec)) == 0);
	cep_sa_mcmember_decode(golden_mcm, &m);
	CHECK(memcmp(&m, &golden_mcm_fields, sizeof(m)) == 0);
	m = golden_mcm_fields;
	m.join_state = 16;                 /* 5 bits */
	CHECK_EQ(cep_sa_mcmember_encode(&m, mrec), -EINVAL);
	m = golden_mcm_fields;
	m.proxy_join = 2;
	CHECK_EQ(cep_sa_mcmember_encode(&m, mrec), -EINVAL);
	CHECK_EQ(cep_sa_mcmember_encode(NULL, mrec), -EINVAL);
}

/* A PathRecord into a REQ's parameters, as the kernel's cm_format_req
 * fills the REQ from rdma_cm's route (primary path from the record;
 * subnet local: hop limit <= 1). */
static void test_path_to_conn(void)
{
	struct cep_cm_conn_param c;
	struct cep_sa_path p = golden_path_fields;

	memset(&c, 0, sizeof(c));
	c.service_id = 42;
	c.qpn = 0x1234;
	CHECK_EQ(cep_sa_path_to_conn(&p, &c), 0);
	CHECK_EQ(c.primary.local_lid, 3);
	CHECK_EQ(c.primary.remote_lid, 4);
	CHECK(memcmp(c.primary.local_gid, p.sgid, 16) == 0);
	CHECK(memcmp(c.primary.remote_gid, p.dgid, 16) == 0);
	CHECK_EQ(c.primary.flow_label, 0xabcde);
	CHECK_EQ(c.primary.packet_rate, 3);
	CHECK_EQ(c.primary.traffic_class, 0x25);
	CHECK_EQ(c.primary.hop_limit, 0x40);
	CHECK_EQ(c.primary.sl, 5);
	CHECK_EQ(c.primary.subnet_local, 0);   /* hop limit 64: routed */
	CHECK_EQ(c.pkey, 0xffff);
	CHECK_EQ(c.path_mtu, 4);
	CHECK_EQ(c.packet_life_time, 0x12);
	CHECK_EQ(c.service_id, 42);            /* left alone */
	CHECK_EQ(c.qpn, 0x1234);
	p.hop_limit = 0;
	p.packet_life_time = 40;               /* wider than the REQ's 5 bits */
	CHECK_EQ(cep_sa_path_to_conn(&p, &c), 0);
	CHECK_EQ(c.primary.subnet_local, 1);
	CHECK_EQ(c.packet_life_time, 31);
	p.mtu = 0;
	CHECK_EQ(cep_sa_path_to_conn(&p, &c), -EINVAL);
}

/* ---- a fake SA as the client's backend ---- */

#define QLEN 64

struct fake {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint8_t q[QLEN][CEP_SA_MAD_SIZE];
	unsigned head, tail;
	struct cep_sa_port port;
	int drop;               /* drop this many requests (-1: all) */
	int busy;               /* answer this many with BUSY */
	uint16_t status;        /* status of every other answer */
	bool stray;             /* queue an answer with a foreign TID first */
	unsigned sends;
	uint16_t last_dlid;
	struct cep_sa_mad_hdr last;
	struct cep_sa_path last_path;
	/* multicast: one group, the members' join states by port GID low byte */
	bool group;
	struct cep_sa_mcmember grp;
	uint8_t member[256];
	bool wrong_resp;        /* answer a Delete with GetResp (a bad SA) */
	struct cep_sa_mcmember last_mcm;
};

static void push(struct fake *f, const uint8_t *mad)
{
	if (f->tail - f->head < QLEN) {
		memcpy(f->q[f->tail % QLEN], mad, CEP_SA_MAD_SIZE);
		f->tail++;
		pthread_cond_broadcast(&f->cond);
	}
}

static void gid_of_lid(uint16_t lid, uint8_t gid[16])
{
	memset(gid, 0, 16);
	gid[0] = 0xfe;
	gid[1] = 0x80;
	gid[14] = (uint8_t)(lid >> 8);
	gid[15] = (uint8_t)lid;
}

static int fake_send(void *ctx, const uint8_t *mad, size_t len, uint16_t dlid,
		     uint8_t sl)
{
	struct fake *f = ctx;
	struct cep_sa_mad_hdr h;
	struct cep_sa_path q, a;
	uint8_t out[CEP_SA_MAD_SIZE], rec[CEP_SA_PATH_REC_SIZE];

	(void)sl;
	if (len != CEP_SA_MAD_SIZE || cep_sa_mad_decode(mad, len, &h) != 0)
		return -EINVAL;
	cep_sa_path_decode(mad + CEP_SA_HDR_SIZE, &q);
	pthread_mutex_lock(&f->lock);
	f->sends++;
	f->last_dlid = dlid;
	f->last = h;
	f->last_path = q;
	if (f->drop) {
		if (f->drop > 0)
			f->drop--;
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	h.method = CEP_SA_METHOD_GET_RESP;
	h.comp_mask = 0;
	if (f->stray) {
		struct cep_sa_mad_hdr s = h;

		s.tid ^= 0x5a5a;
		cep_sa_mad_encode(out, &s, NULL, 0);
		push(f, out);
		f->stray = false;
	}
	if (f->busy) {
		f->busy--;
		h.status = 0x0001;
	} else {
		h.status = f->status;
	}
	if (h.attr_id == CEP_SA_ATTR_CLASS_PORT_INFO) {
		cep_sa_mad_encode(out, &h, golden_cpi, sizeof(golden_cpi));
	} else if (h.attr_id == CEP_SA_ATTR_MCMEMBER_REC) {
		struct cep_sa_mcmember m, r;
		uint8_t mrec[CEP_SA_MCM_REC_SIZE];
		uint8_t method = f->last.method;

		cep_sa_mcmember_decode(mad + CEP_SA_HDR_SIZE, &m);
		f->last_mcm = m;
		memset(&r, 0, sizeof(r));
		if (method == CEP_SA_METHOD_SET) {
			if (!f->group) {
				/* a new group: what the join named, our MLID */
				f->grp = m;
				f->grp.mlid = 0xc001;
				memset(f->grp.port_gid, 0, 16);
				f->grp.join_state = 0;
				f->group = true;
			}
			if (memcmp(m.mgid, f->grp.mgid, 16) != 0 ||
			    ((f->last.comp_mask & CEP_SA_MCM_QKEY) && m.qkey != f->grp.qkey)) {
				h.status = 0x0200;      /* ERR_REQ_INVALID */
			} else {
				f->member[m.port_gid[15]] |= m.join_state;
				r = f->grp;
				memcpy(r.port_gid, m.port_gid, 16);
				r.join_state = f->member[m.port_gid[15]];
			}
		} else if (method == CEP_SA_METHOD_DELETE) {
			h.method = f->wrong_resp ? CEP_SA_METHOD_GET_RESP
						 : CEP_SA_METHOD_DELETE_RESP;
			if (!f->group || !(f->member[m.port_gid[15]] & m.join_state)) {
				h.status = 0x0200;
			} else {
				f->member[m.port_gid[15]] &= (uint8_t)~m.join_state;
				r = f->grp;
				memcpy(r.port_gid, m.port_gid, 16);
				r.join_state = m.join_state;
			}
		} else if (!f->group || memcmp(m.mgid, f->grp.mgid, 16) != 0) {
			h.status = 0x0300;              /* ERR_NO_RECORDS */
		} else {
			r = f->grp;
		}
		cep_sa_mcmember_encode(&r, mrec);
		cep_sa_mad_encode(out, &h, mrec, sizeof(mrec));
	} else {
		/* The answer: the asked LIDs (or GIDs), a fixed 2048/10G path. */
		memset(&a, 0, sizeof(a));
		a.dlid = q.dlid ? q.dlid : (uint16_t)(q.dgid[14] << 8 | q.dgid[15]);
		a.slid = q.slid ? q.slid : (uint16_t)(q.sgid[14] << 8 | q.sgid[15]);
		gid_of_lid(a.dlid, a.dgid);
		gid_of_lid(a.slid, a.sgid);
		a.reversible = 1;
		a.pkey = 0xffff;
		a.mtu_selector = a.rate_selector = a.packet_life_time_selector = 2;
		a.mtu = 4;
		a.rate = 3;
		a.packet_life_time = 0x12;
		cep_sa_path_encode(&a, rec);
		cep_sa_mad_encode(out, &h, rec, sizeof(rec));
	}
	push(f, out);
	pthread_mutex_unlock(&f->lock);
	return 0;
}

static int fake_recv(void *ctx, uint8_t *mad, size_t len, int timeout_ms)
{
	struct fake *f = ctx;

	return fake_sa_take(&f->lock, &f->cond, &f->head, &f->tail, f->q, QLEN, mad, len,
			    timeout_ms);
}

static int fake_port(void *ctx, struct cep_sa_port *out)
{
	struct fake *f = ctx;

	pthread_mutex_lock(&f->lock);
	*out = f->port;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

static const struct sa_backend_ops fake_ops = {
	.send = fake_send, .recv = fake_recv, .port = fake_port,
};

static struct fake *fake_new(void)
{
	struct fake *f = calloc(1, sizeof(*f));

	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	f->port.lid = 3;
	f->port.sm_lid = 1;
	f->port.state = 4;
	f->port.port_num = 1;
	f->port.pkey = 0xffff;
	gid_of_lid(3, f->port.gid);
	return f;
}

static void fake_free(struct fake *f)
{
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	free(f);
}

/* Where an answer is expected the tests give 2 s per attempt: on a loaded
 * machine (sanitizers, two shared cores) a receive thread has been seen
 * to wait over a second for a CPU. Only the cases that must time out use
 * short attempts. */
static struct cep_sa *client(struct fake *f, uint32_t timeout_ms,
			     uint32_t attempts, uint32_t port_check_ms)
{
	struct cep_sa_attr a = {
		.size = sizeof(a), .timeout_ms = timeout_ms,
		.attempts = attempts, .port_check_ms = port_check_ms,
	};
	struct cep_sa *sa = NULL;

	CHECK_EQ(sa_create(&fake_ops, f, &a, &sa), 0);
	return sa;
}

static unsigned sends(struct fake *f)
{
	unsigned n;

	pthread_mutex_lock(&f->lock);
	n = f->sends;
	pthread_mutex_unlock(&f->lock);
	return n;
}

static struct cep_sa_path lid_query(uint16_t slid, uint16_t dlid)
{
	struct cep_sa_path q;

	memset(&q, 0, sizeof(q));
	q.slid = slid;
	q.dlid = dlid;
	q.pkey = 0xffff;
	q.numb_path = 1;
	q.reversible = 1;
	return q;
}

#define LID_MASK (CEP_SA_PR_SLID | CEP_SA_PR_DLID | CEP_SA_PR_PKEY | \
		  CEP_SA_PR_NUMB_PATH | CEP_SA_PR_REVERSIBLE)

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void test_query_cache(void)
{
	struct fake *f = fake_new();
	struct cep_sa *sa = client(f, 2000, 2, 60000);
	struct cep_sa_path q = lid_query(3, 4), p;
	struct cep_sa_stats st;

	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(p.dlid, 4);
	CHECK_EQ(p.slid, 3);
	CHECK_EQ(p.mtu, 4);
	CHECK_EQ(p.packet_life_time, 0x12);
	/* What went on the wire: a Get to the SM LID with our mask. */
	CHECK_EQ(f->last_dlid, 1);
	CHECK_EQ(f->last.method, CEP_SA_METHOD_GET);
	CHECK_EQ(f->last.attr_id, CEP_SA_ATTR_PATH_REC);
	CHECK_EQ(f->last.comp_mask, LID_MASK);
	CHECK_EQ(f->last_path.slid, 3);
	CHECK_EQ(f->last_path.dlid, 4);
	CHECK_EQ(f->last_path.pkey, 0xffff);
	CHECK_EQ(sends(f), 1);

	memset(&p, 0, sizeof(p));
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(p.dlid, 4);
	CHECK_EQ(sends(f), 1);             /* from the cache */
	/* Fields outside the mask are not part of the key. */
	q.sl = 7;
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(sends(f), 1);
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, CEP_SA_QUERY_FRESH, &p), 0);
	CHECK_EQ(sends(f), 2);
	q = lid_query(3, 5);               /* another key */
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(p.dlid, 5);
	CHECK_EQ(sends(f), 3);

	CHECK_EQ(cep_sa_get_stats(sa, &st), 0);
	CHECK_EQ(st.queries, 5);
	CHECK_EQ(st.cache_hits, 2);
	CHECK_EQ(st.cache_misses, 3);
	CHECK_EQ(st.sent, 3);
	CHECK_EQ(st.answers, 3);
	CHECK_EQ(st.cache_entries, 2);
	CHECK_EQ(st.timeouts, 0);

	cep_sa_invalidate(sa);
	CHECK_EQ(cep_sa_get_stats(sa, &st), 0);
	CHECK_EQ(st.cache_entries, 0);
	CHECK_EQ(st.invalidations, 1);
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(sends(f), 4);
	CHECK_EQ(cep_sa_path_query(sa, 1ull << 23, &q, 0, &p), -EINVAL);
	cep_sa_put(sa);
	fake_free(f);
}

static void test_retry_timeout(void)
{
	struct fake *f = fake_new();
	/* 2 s per attempt where an answer is expected: on a loaded machine
	 * (sanitizers, two shared cores) the receive thread has been seen
	 * to wait over a second for a CPU. The all-lost case uses a faster
	 * client. */
	struct cep_sa *sa = client(f, 2000, 3, 60000), *fast;
	struct cep_sa_path q = lid_query(3, 4), p;
	struct cep_sa_stats st;
	uint64_t t0, dt;

	/* One lost request: the second send is answered. */
	f->drop = 1;
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(p.dlid, 4);
	CHECK_EQ(sends(f), 2);
	CHECK_EQ(cep_sa_get_stats(sa, &st), 0);
	CHECK_EQ(st.retries, 1);

	/* Nothing ever answers: three sends, 3 x 50 ms, then -ETIMEDOUT
	 * (on the same fake: no answers to take from each other). */
	fast = client(f, 50, 3, 60000);
	f->drop = -1;
	q = lid_query(3, 6);
	t0 = ms_now();
	CHECK_EQ(cep_sa_path_query(fast, LID_MASK, &q, 0, &p), -ETIMEDOUT);
	dt = ms_now() - t0;
	CHECK(dt >= 150);
	CHECK(dt < 3000);
	CHECK_EQ(sends(f), 5);
	CHECK_EQ(cep_sa_get_stats(fast, &st), 0);
	CHECK_EQ(st.timeouts, 1);
	CHECK_EQ(st.retries, 2);
	CHECK_EQ(st.cache_entries, 0);     /* the failure was not cached */
	cep_sa_put(fast);

	/* BUSY twice, then an answer: the third send gets it. */
	f->drop = 0;
	f->busy = 2;
	q = lid_query(3, 7);
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(p.dlid, 7);
	CHECK_EQ(sends(f), 8);
	/* BUSY to the end: -EBUSY. A fake of its own: two clients on one
	 * fake would take each other's answers. */
	struct fake *f2 = fake_new();

	fast = client(f2, 1000, 2, 60000);
	f2->busy = 100;
	q = lid_query(3, 8);
	CHECK_EQ(cep_sa_path_query(fast, LID_MASK, &q, 0, &p), -EBUSY);
	CHECK_EQ(sends(f2), 2);
	cep_sa_put(fast);
	fake_free(f2);

	/* A stray answer (foreign TID) is counted and ignored. */
	f->stray = true;
	q = lid_query(3, 9);
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(p.dlid, 9);
	CHECK_EQ(cep_sa_get_stats(sa, &st), 0);
	CHECK(st.dropped >= 1);
	cep_sa_put(sa);
	fake_free(f);
}

static void test_status(void)
{
	struct fake *f = fake_new();
	struct cep_sa *sa = client(f, 2000, 2, 60000);
	struct cep_sa_path q = lid_query(3, 99), p;
	struct cep_sa_stats st;

	f->status = 0x0300;                /* ERR_NO_RECORDS */
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), -EHOSTUNREACH);
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), -EHOSTUNREACH);
	CHECK_EQ(sends(f), 2);             /* errors are not cached */
	f->status = 0x0600;                /* ERR_REQ_INSUFFICIENT_COMPONENTS */
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), -EINVAL);
	f->status = 0x000c;                /* method/attribute unsupported */
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), -EOPNOTSUPP);
	f->status = 0x0100;                /* ERR_NO_RESOURCES */
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), -EAGAIN);
	CHECK_EQ(cep_sa_get_stats(sa, &st), 0);
	CHECK_EQ(st.errors, 5);
	CHECK_EQ(st.timeouts, 0);
	CHECK_EQ(st.retries, 0);           /* an error answer is final */
	cep_sa_put(sa);
	fake_free(f);
}

/* MCMemberRecord Get, Set and Delete: the method on the wire, the mask,
 * the answer decoded, a DeleteResp matched and a GetResp to a Delete not,
 * and the SA's refusals as errors. */
static void test_mcmember(void)
{
	struct fake *f = fake_new();
	struct cep_sa *sa = client(f, 2000, 2, 60000);
	struct cep_sa_mcmember j, out;
	struct cep_sa_stats st;
	const uint64_t join_mask = CEP_SA_MCM_MGID | CEP_SA_MCM_PORT_GID |
				   CEP_SA_MCM_QKEY | CEP_SA_MCM_PKEY |
				   CEP_SA_MCM_JOIN_STATE | CEP_SA_MCM_SL |
				   CEP_SA_MCM_FLOW_LABEL | CEP_SA_MCM_TCLASS;

	j = golden_mcm_fields;
	j.mlid = 0;
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_GET, CEP_SA_MCM_MGID, &j, &out),
		 -EHOSTUNREACH);
	CHECK_EQ(f->last.method, CEP_SA_METHOD_GET);
	CHECK_EQ(f->last.attr_id, CEP_SA_ATTR_MCMEMBER_REC);
	CHECK(f->last.comp_mask == CEP_SA_MCM_MGID);

	/* join: only the named fields go out; the answer has the MLID */
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_SET, join_mask, &j, &out), 0);
	CHECK_EQ(f->last.method, CEP_SA_METHOD_SET);
	CHECK(f->last.comp_mask == join_mask);
	CHECK_EQ(f->last_mcm.mlid, 0);
	CHECK_EQ(f->last_mcm.mtu, 0);      /* not in the mask */
	CHECK_EQ(f->last_mcm.hop_limit, 0);
	CHECK_EQ(f->last_mcm.qkey, 0x80010000u);
	CHECK_EQ(f->last_mcm.flow_label, 0xabcde);
	CHECK_EQ(out.mlid, 0xc001);
	CHECK_EQ(out.join_state, CEP_SA_JOIN_FULL);
	CHECK(memcmp(out.port_gid, j.port_gid, 16) == 0);
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_GET, CEP_SA_MCM_MGID, &j, &out), 0);
	CHECK_EQ(out.qkey, 0x80010000u);
	CHECK_EQ(out.mlid, 0xc001);

	/* a join whose Q_Key is not the group's: the SA's ERR_REQ_INVALID */
	j.qkey = 0x11111111u;
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_SET, join_mask, &j, NULL), -EINVAL);
	j.qkey = golden_mcm_fields.qkey;

	/* leave: DeleteResp matched */
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_DELETE, join_mask, &j, &out), 0);
	CHECK_EQ(f->last.method, CEP_SA_METHOD_DELETE);
	CHECK_EQ(out.join_state, CEP_SA_JOIN_FULL);
	/* again: no such membership, the SA refuses */
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_DELETE, join_mask, &j, NULL), -EINVAL);

	/* a Delete answered with GetResp is no answer to it: 2 sends, timeout */
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_SET, join_mask, &j, NULL), 0);
	cep_sa_put(sa);
	sa = client(f, 100, 2, 60000);
	f->wrong_resp = true;
	pthread_mutex_lock(&f->lock);
	f->sends = 0;
	pthread_mutex_unlock(&f->lock);
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_DELETE, join_mask, &j, NULL), -ETIMEDOUT);
	CHECK_EQ(sends(f), 2);
	CHECK_EQ(cep_sa_get_stats(sa, &st), 0);
	CHECK_EQ(st.answers, 0);
	CHECK(st.dropped >= 1);

	/* bad arguments change nothing and send nothing */
	CHECK_EQ(cep_sa_mcmember(sa, 0x14, join_mask, &j, NULL), -EINVAL);
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_SET, UINT64_C(1) << 18, &j, NULL), -EINVAL);
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_SET, join_mask, NULL, NULL), -EINVAL);
	CHECK_EQ(cep_sa_mcmember(NULL, CEP_SA_METHOD_SET, join_mask, &j, NULL), -EINVAL);
	j.sl = 16;
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_SET, join_mask, &j, NULL), -EINVAL);
	j.sl = 5;
	j.mtu = 64;                        /* wider than 6 bits, but not asked */
	f->wrong_resp = false;
	CHECK_EQ(cep_sa_mcmember(sa, CEP_SA_METHOD_GET, CEP_SA_MCM_MGID, &j, NULL), 0);
	CHECK_EQ(sends(f), 3);
	cep_sa_put(sa);
	fake_free(f);
}

static void test_port_changes(void)
{
	struct fake *f = fake_new();
	struct cep_sa *sa = client(f, 2000, 2, 1);
	struct cep_sa_path q = lid_query(3, 4), p;
	struct cep_sa_class_port_info c;
	struct cep_sa_port port;
	struct cep_sa_stats st;

	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(cep_sa_class_port_info(sa, &c), 0);
	CHECK_EQ(c.capability_mask, 0x2602);
	CHECK_EQ(f->last.attr_id, CEP_SA_ATTR_CLASS_PORT_INFO);
	CHECK_EQ(cep_sa_class_port_info(sa, &c), 0);
	CHECK_EQ(sends(f), 2);

	/* A new SM (another LID): the snapshot is older than 1 ms by the
	 * next query, the cache goes, and the query goes to the new SM. */
	pthread_mutex_lock(&f->lock);
	f->port.sm_lid = 9;
	pthread_mutex_unlock(&f->lock);
	usleep(5000);
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(sends(f), 3);
	CHECK_EQ(f->last_dlid, 9);
	CHECK_EQ(cep_sa_get_stats(sa, &st), 0);
	CHECK_EQ(st.invalidations, 1);
	CHECK_EQ(cep_sa_class_port_info(sa, &c), 0);   /* flushed too */
	CHECK_EQ(sends(f), 4);

	/* The same SM again: nothing flushed. */
	usleep(5000);
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, 0, &p), 0);
	CHECK_EQ(sends(f), 4);

	/* Port down: no query leaves, -ENETDOWN; up again: flushed. */
	pthread_mutex_lock(&f->lock);
	f->port.state = 1;
	pthread_mutex_unlock(&f->lock);
	usleep(5000);
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, CEP_SA_QUERY_FRESH, &p), -ENETDOWN);
	CHECK_EQ(cep_sa_port_info(sa, &port), 0);
	CHECK_EQ(port.state, 1);
	pthread_mutex_lock(&f->lock);
	f->port.state = 4;
	f->port.sm_lid = 0;                /* active, but no SM yet */
	pthread_mutex_unlock(&f->lock);
	usleep(5000);
	CHECK_EQ(cep_sa_path_query(sa, LID_MASK, &q, CEP_SA_QUERY_FRESH, &p), -ENETDOWN);
	CHECK_EQ(sends(f), 4);
	CHECK_EQ(cep_sa_get_stats(sa, &st), 0);
	CHECK_EQ(st.invalidations, 3);
	CHECK_EQ(st.cache_entries, 0);
	cep_sa_put(sa);
	fake_free(f);
}

/* Concurrent queries: each thread asks its own LIDs, fresh, and must get
 * its own answer back (TIDs keep the waiters apart). */
struct worker {
	struct cep_sa *sa;
	uint16_t base;
	int bad;
};

static void *worker(void *arg)
{
	struct worker *w = arg;

	for (uint16_t i = 0; i < 50; i++) {
		struct cep_sa_path q = lid_query(w->base, (uint16_t)(w->base + 1 + i)), p;

		if (cep_sa_path_query(w->sa, LID_MASK, &q, i % 2 ? CEP_SA_QUERY_FRESH : 0, &p) ||
		    p.dlid != q.dlid || p.slid != q.slid)
			w->bad++;
	}
	return NULL;
}

static void test_threads(void)
{
	struct fake *f = fake_new();
	struct cep_sa *sa = client(f, 2000, 4, 60000);
	struct worker w[4];
	pthread_t t[4];

	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .sa = sa, .base = (uint16_t)(100 * (i + 1)) };
		pthread_create(&t[i], NULL, worker, &w[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(w[i].bad, 0);
	}
	cep_sa_put(sa);
	fake_free(f);
}

int main(void)
{
	test_codecs();
	test_path_to_conn();
	test_query_cache();
	test_retry_timeout();
	test_status();
	test_mcmember();
	test_port_changes();
	test_threads();
	return check_done("test-sa");
}
