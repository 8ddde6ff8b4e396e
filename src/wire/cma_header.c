/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm compatibility (cep/rdma_cm.h): IP-based service IDs and the CMA
 * private-data header of a REQ. Pure byte work on caller buffers; nothing
 * is written on an error.
 */
#include <errno.h>
#include <string.h>

#include <cep/rdma_cm.h>

static int ps_known(uint64_t ps)
{
	return ps == CEP_RDMA_PS_IPOIB || ps == CEP_RDMA_PS_IB ||
	       ps == CEP_RDMA_PS_TCP || ps == CEP_RDMA_PS_UDP;
}

uint64_t cep_rdma_service_id(enum cep_rdma_ps ps, uint16_t port)
{
	if (!ps_known((uint64_t)ps))
		return 0;
	return CEP_RDMA_SID_PREFIX | ((uint64_t)ps << 16) | port;
}

int cep_rdma_service_id_parse(uint64_t sid, enum cep_rdma_ps *ps, uint16_t *port)
{
	uint64_t space = (sid >> 16) & 0xffff;

	if ((sid & 0xffffffffff000000ull) != CEP_RDMA_SID_PREFIX ||
	    ((sid >> 32) & 0xffffffffu) != 0 || !ps_known(space))
		return -EINVAL;
	if (ps)
		*ps = (enum cep_rdma_ps)space;
	if (port)
		*port = (uint16_t)(sid & 0xffff);
	return 0;
}

void cep_cma_hdr_ipv4(struct cep_cma_hdr *h, uint32_t src_addr_net, uint16_t src_port,
		      uint32_t dst_addr_net, uint16_t dst_port)
{
	memset(h, 0, sizeof(*h));
	h->ip_version = 4;
	h->src_port = src_port;
	h->dst_port = dst_port;
	/* s_addr is already network order: copy its bytes as they lie. */
	memcpy(h->src_addr + 12, &src_addr_net, 4);
	memcpy(h->dst_addr + 12, &dst_addr_net, 4);
}

uint32_t cep_cma_addr_ipv4(const uint8_t addr[16])
{
	uint32_t v;

	memcpy(&v, addr + 12, 4);
	return v;
}

static int ipv4_padding_zero(const uint8_t a[16])
{
	static const uint8_t zero[12];

	return memcmp(a, zero, 12) == 0;
}

int cep_cma_hdr_encode(const struct cep_cma_hdr *h, const void *user, size_t user_len,
		       uint8_t *buf, size_t buf_len)
{
	if (!h || !buf || (user_len && !user))
		return -EINVAL;
	if (h->ip_version != 4 && h->ip_version != 6)
		return -EINVAL;
	/* rdma_cm reads an IPv4 header's address from the last 4 bytes only;
	 * anything in the padding would be silently lost. */
	if (h->ip_version == 4 &&
	    (!ipv4_padding_zero(h->src_addr) || !ipv4_padding_zero(h->dst_addr)))
		return -EINVAL;
	if (buf_len < CEP_CMA_HDR_SIZE || user_len > buf_len - CEP_CMA_HDR_SIZE ||
	    user_len > 0xffff) /* keeps the int return exact */
		return -EMSGSIZE;
	buf[0] = CEP_CMA_VERSION;
	buf[1] = (uint8_t)(h->ip_version << 4);
	buf[2] = (uint8_t)(h->src_port >> 8);
	buf[3] = (uint8_t)h->src_port;
	memcpy(buf + 4, h->src_addr, 16);
	memcpy(buf + 20, h->dst_addr, 16);
	if (user_len)
		memcpy(buf + CEP_CMA_HDR_SIZE, user, user_len);
	return (int)(CEP_CMA_HDR_SIZE + user_len);
}

int cep_cma_hdr_decode(const uint8_t *pdata, size_t len, uint64_t service_id,
		       struct cep_cma_hdr *h)
{
	struct cep_cma_hdr t;
	enum cep_rdma_ps ps;
	uint16_t port;

	if (!pdata || !h || cep_rdma_service_id_parse(service_id, &ps, &port) ||
	    ps == CEP_RDMA_PS_IB)
		return -EINVAL;
	if (len < CEP_CMA_HDR_SIZE)
		return -EMSGSIZE;
	if (pdata[0] != CEP_CMA_VERSION)
		return -EPROTO;
	memset(&t, 0, sizeof(t));
	t.ip_version = pdata[1] >> 4;
	if (t.ip_version != 4 && t.ip_version != 6)
		return -EAFNOSUPPORT;
	t.src_port = (uint16_t)(pdata[2] << 8 | pdata[3]);
	t.dst_port = port;
	memcpy(t.src_addr, pdata + 4, 16);
	memcpy(t.dst_addr, pdata + 20, 16);
	*h = t;
	return 0;
}
