/* SPDX-License-Identifier: MIT */
/*
 * Capture tests. `test-pcap DIR` writes DIR/rocev2.pcap (IPv6 GIDs),
 * DIR/rocev2-ipv4.pcap (IPv4-mapped GIDs) and DIR/ib.pcap (native IB, with
 * and without GRH), each holding all eleven CM messages plus one bad CM MAD
 * and one non-CM MAD, and DIR/invalid.pcap (valid headers, one field value
 * each that the decoder's rules refuse), checks the framing bytes, the
 * process-wide capture (cep_capture_start/stop and the cep_capture_mad hook)
 * and, when CEP_PCAP is set, that the variable alone turns the capture on.
 * check_capture.py then feeds the files to tshark and cepdump.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cep/pcap.h>
#include <cep/wire.h>

#include "../common/check.h"
#include "wire/pcap.h"

static const uint8_t gid_a[16] = { 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff,
				   0xfe, 0x33, 0x44, 0x55 };
static const uint8_t gid_b[16] = { 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
				   0x42 };
static const uint8_t gid_a4[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1 };
static const uint8_t gid_b4[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2 };

/* The messages of a connection's life, with distinctive values. */
static int build(int i, uint8_t *mad)
{
	struct cep_msg m;
	enum cep_msg_type t = (enum cep_msg_type)(1 + i % (CEP_MSG_COUNT - 1));

	cep_msg_init(&m, t, 0x0000000100000000ull | (uint64_t)(0x1000 + i));
	switch (t) {
	case CEP_MSG_REQ:
		m.u.req.local_comm_id = 0x11223344;
		m.u.req.service_id = 0x0000000001060cdeull;
		m.u.req.local_ca_guid = 0x0002c90300a1b2c3ull;
		m.u.req.local_qkey = 0;
		m.u.req.local_qpn = 0x000abc;
		m.u.req.responder_resources = 4;
		m.u.req.initiator_depth = 8;
		m.u.req.remote_cm_response_timeout = 20;
		m.u.req.transport_service_type = CEP_TS_RC;
		m.u.req.end_to_end_flow_control = 1;
		m.u.req.starting_psn = 0x654321;
		m.u.req.local_cm_response_timeout = 18;
		m.u.req.retry_count = 7;
		m.u.req.partition_key = 0xffff;
		m.u.req.path_mtu = 3;
		m.u.req.rnr_retry_count = 6;
		m.u.req.max_cm_retries = 15;
		m.u.req.srq = 0;
		m.u.req.primary.local_lid = 0xffff;
		m.u.req.primary.remote_lid = 0xffff;
		memcpy(m.u.req.primary.local_gid, gid_a, 16);
		memcpy(m.u.req.primary.remote_gid, gid_b, 16);
		m.u.req.primary.flow_label = 0xabcde;
		m.u.req.primary.packet_rate = 0x2a;
		m.u.req.primary.traffic_class = 0x5c;
		m.u.req.primary.hop_limit = 64;
		m.u.req.primary.sl = 3;
		m.u.req.primary.subnet_local = 1;
		m.u.req.primary.local_ack_timeout = 14;
		memcpy(m.u.req.private_data, "libcep-req", 10);
		break;
	case CEP_MSG_MRA:
		m.u.mra.local_comm_id = 0x55667788;
		m.u.mra.remote_comm_id = 0x11223344;
		m.u.mra.message_mraed = CEP_MSG_CODE_REQ;
		m.u.mra.service_timeout = 21;
		break;
	case CEP_MSG_REJ:
		m.u.rej.local_comm_id = 0x55667788;
		m.u.rej.remote_comm_id = 0x11223344;
		m.u.rej.message_rejected = CEP_MSG_CODE_REP;
		m.u.rej.reject_info_length = 8;
		m.u.rej.reason = CEP_REJ_TIMEOUT;
		memcpy(m.u.rej.ari, "\x00\x02\xc9\x03\x00\xa1\xb2\xc3", 8);
		memcpy(m.u.rej.private_data, "nope", 4);
		break;
	case CEP_MSG_REP:
		m.u.rep.local_comm_id = 0x55667788;
		m.u.rep.remote_comm_id = 0x11223344;
		m.u.rep.local_qkey = 0x12345678;
		m.u.rep.local_qpn = 0x000def;
		m.u.rep.local_eecn = 0x010203;
		m.u.rep.starting_psn = 0x123456;
		m.u.rep.responder_resources = 8;
		m.u.rep.initiator_depth = 4;
		m.u.rep.target_ack_delay = 15;
		m.u.rep.failover_accepted = CEP_FAILOVER_NOT_SUPPORTED;
		m.u.rep.end_to_end_flow_control = 1;
		m.u.rep.rnr_retry_count = 7;
		m.u.rep.srq = 1;
		m.u.rep.local_ca_guid = 0x0002c90300d4e5f6ull;
		break;
	case CEP_MSG_RTU:
		m.u.rtu.local_comm_id = 0x11223344;
		m.u.rtu.remote_comm_id = 0x55667788;
		break;
	case CEP_MSG_DREQ:
		m.u.dreq.local_comm_id = 0x11223344;
		m.u.dreq.remote_comm_id = 0x55667788;
		m.u.dreq.remote_qpn_eecn = 0x000def;
		break;
	case CEP_MSG_DREP:
		m.u.drep.local_comm_id = 0x55667788;
		m.u.drep.remote_comm_id = 0x11223344;
		break;
	case CEP_MSG_LAP:
		m.u.lap.local_comm_id = 0x11223344;
		m.u.lap.remote_comm_id = 0x55667788;
		m.u.lap.remote_qpn_eecn = 0x000def;
		m.u.lap.remote_cm_response_timeout = 19;
		m.u.lap.alternate.local_lid = 7;
		m.u.lap.alternate.remote_lid = 9;
		memcpy(m.u.lap.alternate.local_gid, gid_b, 16);
		memcpy(m.u.lap.alternate.remote_gid, gid_a, 16);
		m.u.lap.alternate.flow_label = 0x12345;
		m.u.lap.alternate.traffic_class = 0x10;
		m.u.lap.alternate.hop_limit = 2;
		m.u.lap.alternate.packet_rate = 0x11;
		m.u.lap.alternate.sl = 5;
		m.u.lap.alternate.local_ack_timeout = 20;
		break;
	case CEP_MSG_APR:
		m.u.apr.local_comm_id = 0x55667788;
		m.u.apr.remote_comm_id = 0x11223344;
		m.u.apr.ap_status = CEP_APR_IS_CURRENT;
		break;
	case CEP_MSG_SIDR_REQ:
		m.u.sidr_req.request_id = 0xcafef00d;
		m.u.sidr_req.partition_key = 0x8001;
		m.u.sidr_req.service_id = 0x1000000000000001ull;
		break;
	case CEP_MSG_SIDR_REP:
		m.u.sidr_rep.request_id = 0xcafef00d;
		m.u.sidr_rep.status = CEP_SIDR_SUCCESS;
		m.u.sidr_rep.qpn = 0x000777;
		m.u.sidr_rep.service_id = 0x1000000000000001ull;
		m.u.sidr_rep.qkey = 0x11111111;
		break;
	default:
		return -1;
	}
	return cep_msg_encode(&m, mad);
}

#define N_GOOD (CEP_MSG_COUNT - 1)

/* All eleven messages, then one CM MAD with class version 1 (bad) and one
 * SA MAD (not CM). */
static int write_file(const char *path, enum cep_pcap_link link, const uint8_t *sg,
		      const uint8_t *dg, int grh)
{
	struct cep_pcap *pc;
	struct cep_pcap_meta meta;
	uint8_t mad[CEP_MAD_SIZE];
	int rc = cep_pcap_open(path, link, &pc);

	CHECK_EQ(rc, 0);
	if (rc)
		return rc;
	memset(&meta, 0, sizeof(meta));
	meta.slid = 0x11;
	meta.dlid = 0x22;
	meta.grh = (uint8_t)grh;
	for (int i = 0; i < N_GOOD + 2; i++) {
		/* alternate directions, like a real exchange */
		memcpy(meta.sgid, i & 1 ? dg : sg, 16);
		memcpy(meta.dgid, i & 1 ? sg : dg, 16);
		meta.ts_ns = 1700000000000000000ull + (uint64_t)i * 1000000u;
		CHECK_EQ(build(i % N_GOOD, mad), 0);
		if (i == N_GOOD)
			mad[2] = 1;          /* bad class version */
		if (i == N_GOOD + 1)
			mad[1] = 0x03;       /* SA class: not CM */
		CHECK_EQ(cep_pcap_write_mad(pc, mad, sizeof(mad), &meta), 0);
	}
	CHECK_EQ(cep_pcap_count(pc), N_GOOD + 2);
	CHECK_EQ(cep_pcap_write_mad(pc, mad, 0, &meta), -EINVAL);
	CHECK_EQ(cep_pcap_write_mad(pc, mad, 257, &meta), -EINVAL);
	CHECK_EQ(cep_pcap_close(pc), 0);
	return 0;
}

/* Messages whose headers are valid but which break one value rule each
 * (docs/protocol.md, "Validation on receive"), then one valid RTU: cepdump
 * must print them with the field flagged, not refuse them. REP failover
 * accepted 3 and MRA message MRAed 3 are reserved values (IBTA tables 110,
 * 107); REQ transport service type 3 without XRC is reserved (table 106). */
static void write_invalid(const char *path)
{
	struct cep_pcap *pc;
	struct cep_pcap_meta meta;
	uint8_t mad[CEP_MAD_SIZE];
	struct cep_msg m;

	CHECK_EQ(cep_pcap_open(path, CEP_PCAP_ROCEV2, &pc), 0);
	if (!pc)
		return;
	memset(&meta, 0, sizeof(meta));
	memcpy(meta.sgid, gid_b, 16);
	memcpy(meta.dgid, gid_a, 16);
	meta.ts_ns = 1700000000000000000ull;
	static const int order[4] = { 3, 0, 1, 4 };   /* build(): REP, REQ, MRA, RTU */

	for (int i = 0; i < 4; i++) {
		enum cep_wire_error why;

		CHECK_EQ(build(order[i], mad), 0);
		CHECK_EQ(cep_msg_decode(mad, sizeof(mad), &m, NULL), 0);
		if (m.type == CEP_MSG_REP)
			m.u.rep.failover_accepted = 3;
		else if (m.type == CEP_MSG_REQ)
			m.u.req.transport_service_type = CEP_TS_EXTENDED;
		else if (m.type == CEP_MSG_MRA)
			m.u.mra.message_mraed = 3;
		CHECK_EQ(cep_msg_encode(&m, mad), 0);
		CHECK_EQ(cep_msg_decode(mad, sizeof(mad), &m, &why), i == 3 ? 0 : -EBADMSG);
		meta.ts_ns += 1000;
		CHECK_EQ(cep_pcap_write_mad(pc, mad, sizeof(mad), &meta), 0);
	}
	CHECK_EQ(cep_pcap_close(pc), 0);
}

static long file_size(const char *path)
{
	FILE *f = fopen(path, "rb");
	long n;

	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fclose(f);
	return n;
}

/* Framing bytes of one RoCEv2/IPv6 frame, at the offsets the specs give. */
static void test_frame_bytes(void)
{
	uint8_t mad[CEP_MAD_SIZE], buf[CEP_PCAP_MAX_FRAME];
	struct cep_pcap_meta meta;
	size_t n;

	CHECK_EQ(build(0, mad), 0);
	memset(&meta, 0, sizeof(meta));
	memcpy(meta.sgid, gid_a, 16);
	memcpy(meta.dgid, gid_b, 16);
	n = cep_pcap_frame(CEP_PCAP_ROCEV2, mad, sizeof(mad), &meta, buf);
	CHECK_EQ(n, 14 + 40 + 8 + 12 + 8 + 256 + 4);
	CHECK_EQ(buf[6], 0x00); CHECK_EQ(buf[7], 0x11); CHECK_EQ(buf[11], 0x55); /* EUI-64 MAC */
	CHECK_EQ(buf[12], 0x86); CHECK_EQ(buf[13], 0xdd);
	CHECK_EQ(buf[14] >> 4, 6);
	CHECK_EQ(buf[18] << 8 | buf[19], 8 + 12 + 8 + 256 + 4);   /* IPv6 payload */
	CHECK_EQ(buf[20], 17);
	CHECK(memcmp(buf + 22, gid_a, 16) == 0 && memcmp(buf + 38, gid_b, 16) == 0);
	CHECK_EQ(buf[56] << 8 | buf[57], 4791);
	CHECK_EQ(buf[62], 0x64);                                   /* UD SEND only */
	CHECK_EQ(buf[64] << 8 | buf[65], 0xffff);                  /* P_Key */
	CHECK_EQ(buf[67] << 16 | buf[68] << 8 | buf[69], 1);       /* dest QP */
	CHECK_EQ(buf[74], 0x80); CHECK_EQ(buf[75], 0x01);          /* Q_Key */
	CHECK_EQ(buf[79] << 16 | buf[80] << 8 | buf[81], 1);       /* source QP */
	CHECK(memcmp(buf + 82, mad, 256) == 0);

	memcpy(meta.sgid, gid_a4, 16);
	memcpy(meta.dgid, gid_b4, 16);
	meta.src_qpn = 1; meta.dst_qpn = 1; meta.qkey = CEP_QP1_QKEY; meta.pkey = 0x8001;
	n = cep_pcap_frame(CEP_PCAP_ROCEV2, mad, sizeof(mad), &meta, buf);
	CHECK_EQ(n, 14 + 20 + 8 + 12 + 8 + 256 + 4);
	CHECK_EQ(buf[12], 0x08); CHECK_EQ(buf[13], 0x00);
	CHECK_EQ(buf[26], 10); CHECK_EQ(buf[29], 1); CHECK_EQ(buf[33], 2);
	CHECK_EQ(buf[44] << 8 | buf[45], 0x8001);

	meta.grh = 0;
	n = cep_pcap_frame(CEP_PCAP_INFINIBAND, mad, sizeof(mad), &meta, buf);
	CHECK_EQ(n, 8 + 12 + 8 + 256 + 4 + 2);
	CHECK_EQ(buf[1] & 3, 2);                                   /* LNH: IBA local */
	CHECK_EQ((buf[4] << 8 | buf[5]) & 0x7ff, (8 + 12 + 8 + 256 + 4) / 4);
	meta.grh = 1;
	n = cep_pcap_frame(CEP_PCAP_INFINIBAND, mad, sizeof(mad), &meta, buf);
	CHECK_EQ(n, 8 + 40 + 12 + 8 + 256 + 4 + 2);
	CHECK_EQ(buf[1] & 3, 3);                                   /* LNH: IBA global */
	CHECK_EQ(buf[8 + 6], 0x1b);                                /* GRH next header */

	/* CRC-32 check value of "123456789" */
	CHECK_EQ(cep_crc32(0, (const uint8_t *)"123456789", 9), 0xcbf43926u);
}

struct hook_arg {
	int n;
};

static void *hook_thread(void *p)
{
	struct hook_arg *a = p;
	uint8_t mad[CEP_MAD_SIZE];
	struct cep_pcap_meta meta;

	memset(&meta, 0, sizeof(meta));
	memcpy(meta.sgid, gid_a, 16);
	memcpy(meta.dgid, gid_b, 16);
	for (int i = 0; i < a->n; i++) {
		build(i % N_GOOD, mad);
		cep_capture_mad(mad, sizeof(mad), &meta);
	}
	return NULL;
}

/* cep_capture_start/stop with concurrent hook callers. */
static void test_global(const char *dir)
{
	char path[4096];
	struct hook_arg a = { 500 };
	pthread_t th[3];
	long sz;

	snprintf(path, sizeof(path), "%s/global.pcap", dir);
	/* off: the hook does nothing */
	hook_thread(&a);
	CHECK_EQ(cep_capture_count(), 0);
	CHECK_EQ(cep_capture_start(path, 0), 0);
	CHECK_EQ(cep_capture_start(path, 0), -EBUSY);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, hook_thread, &a), 0);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(cep_capture_count(), 1500);
	CHECK_EQ(cep_capture_stop(), 0);
	CHECK_EQ(cep_capture_stop(), 0);
	hook_thread(&a);
	sz = file_size(path);
	CHECK_EQ(sz, 24 + 1500L * (16 + 14 + 40 + 8 + 12 + 8 + 256 + 4));
	CHECK_EQ(cep_capture_start("/nonexistent-dir/x.pcap", 0), -ENOENT);
	CHECK_EQ(cep_pcap_open(path, (enum cep_pcap_link)99, &(struct cep_pcap *){0}), -EINVAL);
}

int main(int argc, char **argv)
{
	char path[4096];

	if (argc == 3 && strcmp(argv[1], "env") == 0) {
		/* CEP_PCAP is set by the test harness: the hook alone must
		 * open the capture, and the exit handler must close it. */
		struct hook_arg a = { 7 };

		CHECK(getenv("CEP_PCAP") != NULL);
		hook_thread(&a);
		CHECK_EQ(cep_capture_count(), 7);
		CHECK_EQ(cep_capture_start(argv[2], 0), -EBUSY);
		return check_done("pcap-env");
	}
	if (argc == 3 && strcmp(argv[1], "env-check") == 0) {
		CHECK_EQ(file_size(argv[2]), 24 + 7L * (16 + 14 + 40 + 8 + 12 + 8 + 256 + 4));
		return check_done("pcap-env-check");
	}
	if (argc != 2) {
		fprintf(stderr, "usage: test-pcap DIR | env FILE | env-check FILE\n");
		return 2;
	}
	test_frame_bytes();
	snprintf(path, sizeof(path), "%s/rocev2.pcap", argv[1]);
	write_file(path, CEP_PCAP_ROCEV2, gid_a, gid_b, 1);
	CHECK_EQ(file_size(path), 24 + (N_GOOD + 2) * (16 + 14 + 40 + 8 + 12 + 8 + 256 + 4));
	snprintf(path, sizeof(path), "%s/rocev2-ipv4.pcap", argv[1]);
	write_file(path, CEP_PCAP_ROCEV2, gid_a4, gid_b4, 1);
	snprintf(path, sizeof(path), "%s/ib.pcap", argv[1]);
	write_file(path, CEP_PCAP_INFINIBAND, gid_a, gid_b, 0);
	snprintf(path, sizeof(path), "%s/ib-grh.pcap", argv[1]);
	write_file(path, CEP_PCAP_INFINIBAND, gid_a, gid_b, 1);
	snprintf(path, sizeof(path), "%s/invalid.pcap", argv[1]);
	write_invalid(path);
	test_global(argv[1]);
	return check_done("pcap");
}
