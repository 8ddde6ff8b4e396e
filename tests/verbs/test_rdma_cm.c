/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm compatibility unit test: service IDs of the four port spaces and
 * back, the CMA header against a golden vector (what rdma_connect from
 * 10.77.0.1:50000 to 10.77.0.2:7471 puts at the start of the REQ private
 * data), IPv6, user data placement, and every refusal.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include <cep/rdma_cm.h>
#include <cep/wire.h>

#include "../common/check.h"

static void test_service_ids(void)
{
	enum cep_rdma_ps ps;
	uint16_t port;

	CHECK(cep_rdma_service_id(CEP_RDMA_PS_TCP, 7471) == 0x0000000001061d2full);
	CHECK(cep_rdma_service_id(CEP_RDMA_PS_UDP, 1) == 0x0000000001110001ull);
	CHECK(cep_rdma_service_id(CEP_RDMA_PS_IB, 0xffff) == 0x00000000013fffffull);
	CHECK(cep_rdma_service_id(CEP_RDMA_PS_IPOIB, 80) == 0x0000000001020050ull);
	CHECK(cep_rdma_service_id((enum cep_rdma_ps)0x0107, 1) == 0);

	CHECK_EQ(cep_rdma_service_id_parse(0x0000000001061d2full, &ps, &port), 0);
	CHECK_EQ(ps, CEP_RDMA_PS_TCP);
	CHECK_EQ(port, 7471);
	CHECK_EQ(cep_rdma_service_id_parse(0x00000000013f0000ull, &ps, NULL), 0);
	CHECK_EQ(ps, CEP_RDMA_PS_IB);
	CHECK_EQ(cep_rdma_service_id_parse(0x0000000001061d2full, NULL, NULL), 0);
	/* Not rdma_cm ids: wrong prefix, bits above, unknown space. */
	ps = CEP_RDMA_PS_UDP;
	port = 9;
	CHECK_EQ(cep_rdma_service_id_parse(0x0000000002061d2full, &ps, &port), -EINVAL);
	CHECK_EQ(cep_rdma_service_id_parse(0x1000000001061d2full, &ps, &port), -EINVAL);
	CHECK_EQ(cep_rdma_service_id_parse(0x0000000001071d2full, &ps, &port), -EINVAL);
	CHECK_EQ(cep_rdma_service_id_parse(0x1234, &ps, &port), -EINVAL);
	CHECK_EQ(ps, CEP_RDMA_PS_UDP); /* untouched */
	CHECK_EQ(port, 9);
	/* Mask: one port space, any port. */
	CHECK((cep_rdma_service_id(CEP_RDMA_PS_TCP, 1) & CEP_RDMA_SID_MASK) ==
	      (cep_rdma_service_id(CEP_RDMA_PS_TCP, 65535) & CEP_RDMA_SID_MASK));
	CHECK((cep_rdma_service_id(CEP_RDMA_PS_TCP, 1) & CEP_RDMA_SID_MASK) !=
	      (cep_rdma_service_id(CEP_RDMA_PS_UDP, 1) & CEP_RDMA_SID_MASK));
}

static const uint8_t golden[CEP_CMA_HDR_SIZE] = {
	0x00, 0x40, 0xc3, 0x50,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 77, 0, 1,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 77, 0, 2,
};

static void test_hdr_ipv4(void)
{
	uint64_t sid = cep_rdma_service_id(CEP_RDMA_PS_TCP, 7471);
	uint8_t pdata[CEP_REQ_PRIVATE_DATA_SIZE];
	struct cep_cma_hdr h, d;
	const char user[] = "hello";
	int n;

	cep_cma_hdr_ipv4(&h, inet_addr("10.77.0.1"), 50000, inet_addr("10.77.0.2"), 7471);
	memset(pdata, 0xee, sizeof(pdata));
	n = cep_cma_hdr_encode(&h, NULL, 0, pdata, sizeof(pdata));
	CHECK_EQ(n, CEP_CMA_HDR_SIZE);
	CHECK(memcmp(pdata, golden, sizeof(golden)) == 0);
	CHECK_EQ(pdata[CEP_CMA_HDR_SIZE], 0xee); /* nothing beyond */

	n = cep_cma_hdr_encode(&h, user, sizeof(user), pdata, sizeof(pdata));
	CHECK_EQ(n, CEP_CMA_HDR_SIZE + (int)sizeof(user));
	CHECK(memcmp(pdata + CEP_CMA_HDR_SIZE, user, sizeof(user)) == 0);

	memset(&d, 0x77, sizeof(d));
	CHECK_EQ(cep_cma_hdr_decode(pdata, sizeof(pdata), sid, &d), 0);
	CHECK_EQ(d.ip_version, 4);
	CHECK_EQ(d.src_port, 50000);
	CHECK_EQ(d.dst_port, 7471);
	CHECK(cep_cma_addr_ipv4(d.src_addr) == inet_addr("10.77.0.1"));
	CHECK(cep_cma_addr_ipv4(d.dst_addr) == inet_addr("10.77.0.2"));
	CHECK(memcmp(d.src_addr, h.src_addr, 16) == 0);

	/* The most user data a REQ can carry with the header: 56 bytes. */
	CHECK_EQ(cep_cma_hdr_encode(&h, pdata, 56, pdata + 0, 0), -EMSGSIZE);
	{
		uint8_t big[CEP_REQ_PRIVATE_DATA_SIZE], src[57] = { 1 };

		CHECK_EQ(cep_cma_hdr_encode(&h, src, 56, big, sizeof(big)), 92);
		memset(big, 0x11, sizeof(big));
		CHECK_EQ(cep_cma_hdr_encode(&h, src, 57, big, sizeof(big)), -EMSGSIZE);
		CHECK_EQ(big[0], 0x11); /* nothing written on error */
	}
}

static void test_hdr_ipv6_and_refusals(void)
{
	uint64_t sid = cep_rdma_service_id(CEP_RDMA_PS_UDP, 4000);
	uint8_t b[CEP_CMA_HDR_SIZE], bad[CEP_CMA_HDR_SIZE];
	struct cep_cma_hdr h, d, keep;

	memset(&h, 0, sizeof(h));
	h.ip_version = 6;
	h.src_port = 1;
	inet_pton(AF_INET6, "fe80::1", h.src_addr);
	inet_pton(AF_INET6, "2001:db8::2", h.dst_addr);
	CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 0, b, sizeof(b)), CEP_CMA_HDR_SIZE);
	CHECK_EQ(b[1], 0x60);
	CHECK_EQ(cep_cma_hdr_decode(b, sizeof(b), sid, &d), 0);
	CHECK_EQ(d.ip_version, 6);
	CHECK_EQ(d.dst_port, 4000);
	CHECK(memcmp(d.dst_addr, h.dst_addr, 16) == 0);

	/* Encode refusals. */
	h.ip_version = 5;
	CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 0, b, sizeof(b)), -EINVAL);
	h.ip_version = 4; /* IPv6 addresses in an IPv4 header: padding set */
	CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 0, b, sizeof(b)), -EINVAL);
	CHECK_EQ(cep_cma_hdr_encode(NULL, NULL, 0, b, sizeof(b)), -EINVAL);
	CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 1, b, sizeof(b)), -EINVAL);
	h.ip_version = 6;
	CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 0, b, CEP_CMA_HDR_SIZE - 1), -EMSGSIZE);

	/* Decode refusals leave *d untouched. */
	memset(&d, 0x33, sizeof(d));
	keep = d;
	CHECK_EQ(cep_cma_hdr_decode(b, CEP_CMA_HDR_SIZE - 1, sid, &d), -EMSGSIZE);
	memcpy(bad, b, sizeof(b));
	bad[0] = 1;
	CHECK_EQ(cep_cma_hdr_decode(bad, sizeof(bad), sid, &d), -EPROTO);
	memcpy(bad, b, sizeof(b));
	bad[1] = 0x50;
	CHECK_EQ(cep_cma_hdr_decode(bad, sizeof(bad), sid, &d), -EAFNOSUPPORT);
	bad[1] = 0x00;
	CHECK_EQ(cep_cma_hdr_decode(bad, sizeof(bad), sid, &d), -EAFNOSUPPORT);
	CHECK_EQ(cep_cma_hdr_decode(b, sizeof(b), 0x1234, &d), -EINVAL);
	CHECK_EQ(cep_cma_hdr_decode(b, sizeof(b),
				    cep_rdma_service_id(CEP_RDMA_PS_IB, 1), &d), -EINVAL);
	CHECK_EQ(cep_cma_hdr_decode(NULL, sizeof(b), sid, &d), -EINVAL);
	CHECK(memcmp(&d, &keep, sizeof(d)) == 0);
}

int main(void)
{
	test_service_ids();
	test_hdr_ipv4();
	test_hdr_ipv6_and_refusals();
	return check_done("rdma-cm-compat");
}
