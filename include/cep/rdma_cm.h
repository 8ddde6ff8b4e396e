/* SPDX-License-Identifier: MIT */
/*
 * libcep rdma_cm compatibility: the IP-based service IDs and the private
 * data header (the "CMA header") that the kernel's rdma_cm and librdmacm
 * put on a REQ, so that a libcep client can connect to an rdma_cm listener
 * (rdma_listen on an IP port) and a libcep listener can accept an
 * rdma_connect().
 *
 * Guarantees: pure functions on caller memory (any thread, also from CM
 * callbacks); decode validates every byte it interprets and changes nothing
 * on error. Byte order is in the names: the header is big-endian on the
 * wire, ports and addresses in host structures are host order except the
 * 16-byte address fields, which are network order.
 */
#ifndef CEP_RDMA_CM_H
#define CEP_RDMA_CM_H

#include <stddef.h>
#include <stdint.h>

#include <cep/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* rdma_cm port spaces (enum rdma_port_space). */
enum cep_rdma_ps {
	CEP_RDMA_PS_IPOIB = 0x0002,
	CEP_RDMA_PS_IB    = 0x013f,
	CEP_RDMA_PS_TCP   = 0x0106,
	CEP_RDMA_PS_UDP   = 0x0111,
};

/* Service IDs of rdma_cm: 0x0000000001000000 | port space << 16 | port. */
#define CEP_RDMA_SID_PREFIX 0x0000000001000000ull
#define CEP_RDMA_SID_MASK   0xffffffffffff0000ull /* one port space, any port */

/* The service ID rdma_cm uses for (@ps, @port), 0 for an unknown port
 * space. RDMA_PS_IB ids carry no IP header (see below). */
CEP_EXPORT uint64_t cep_rdma_service_id(enum cep_rdma_ps ps, uint16_t port);

/* Split an rdma_cm service ID: 0 and *ps, *port (either may be NULL), or
 * -EINVAL when @sid does not have the rdma_cm prefix or a known space. */
CEP_EXPORT int cep_rdma_service_id_parse(uint64_t sid, enum cep_rdma_ps *ps,
					 uint16_t *port);

/*
 * CMA private-data header at the start of a REQ's private data (for the
 * TCP, UDP and IPoIB port spaces; RDMA_PS_IB has none):
 *   byte 0      CMA version (0)
 *   byte 1      IP version in bits 7:4 (4 or 6), bits 3:0 zero
 *   bytes 2-3   source port (big-endian); the destination port is in the
 *               service ID
 *   bytes 4-19  source address: IPv6, or IPv4 in bytes 16-19 after zeros
 *   bytes 20-35 destination address, laid out the same way
 * The user's private data follows; a REQ carries at most
 * CEP_REQ_PRIVATE_DATA_SIZE - CEP_CMA_HDR_SIZE (56) bytes of it.
 */
#define CEP_CMA_HDR_SIZE 36
#define CEP_CMA_VERSION  0

struct cep_cma_hdr {
	uint8_t ip_version;    /* 4 or 6 */
	uint16_t src_port;     /* host order */
	uint16_t dst_port;     /* host order: from the service ID, not the header */
	uint8_t src_addr[16];  /* IPv6, or IPv4 in the last 4 bytes; network order */
	uint8_t dst_addr[16];
};

/* Fill @h for IPv4 addresses given in network order (struct in_addr's
 * s_addr) and host-order ports. Pure. */
CEP_EXPORT void cep_cma_hdr_ipv4(struct cep_cma_hdr *h, uint32_t src_addr_net,
				 uint16_t src_port, uint32_t dst_addr_net,
				 uint16_t dst_port);

/* Write the header into @buf (>= CEP_CMA_HDR_SIZE bytes) followed by
 * @user_len bytes of @user into a REQ private data buffer of @buf_len.
 * Returns the total length, -EINVAL (NULL, IP version not 4 or 6, IPv4
 * address field with non-zero padding) or -EMSGSIZE (does not fit). */
CEP_EXPORT int cep_cma_hdr_encode(const struct cep_cma_hdr *h, const void *user,
				  size_t user_len, uint8_t *buf, size_t buf_len);

/* Read the header from the first @len bytes of a REQ's private data;
 * @service_id gives the destination port. 0, -EMSGSIZE (shorter than the
 * header), -EPROTO (CMA version not 0), -EAFNOSUPPORT (IP version not 4 or
 * 6), -EINVAL (NULL, or @service_id not an IP port space). *h is written
 * only on success; the user's data starts at CEP_CMA_HDR_SIZE. */
CEP_EXPORT int cep_cma_hdr_decode(const uint8_t *pdata, size_t len,
				  uint64_t service_id, struct cep_cma_hdr *h);

/* IPv4 address (network order) of an IP version 4 header address field. */
CEP_EXPORT uint32_t cep_cma_addr_ipv4(const uint8_t addr[16]);

#ifdef __cplusplus
}
#endif

#endif /* CEP_RDMA_CM_H */
