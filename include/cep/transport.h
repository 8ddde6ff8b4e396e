/* SPDX-License-Identifier: MIT */
/*
 * libcep transports: how CM MADs leave and enter a port.
 *
 * A transport is QP1 of one port: the in-process fabric (cep/fabric.h) or
 * libibumad (cep/umad.h). The CM calls send() from its worker threads and
 * API threads concurrently; a transport's receive thread(s) call the
 * receive function given to start(). Addresses are what a QP1 receive
 * completion carries (and what an address handle needs to answer).
 */
#ifndef CEP_TRANSPORT_H
#define CEP_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include <cep/export.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CEP_MAD_SIZE 256

/* Address of the remote end of one MAD (host byte order unless _net). */
struct cep_mad_addr {
	uint16_t lid;          /* remote LID (0 on RoCE) */
	uint8_t sl;
	uint8_t path_bits;
	uint32_t qpn;          /* remote QP: 1 for the CM */
	uint32_t qkey;         /* 0x80010000 for QP1 */
	uint16_t pkey_index;
	uint8_t grh_present;   /* always 1 on RoCE */
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t gid_index;     /* local GID index to send from */
	uint32_t flow_label;
	uint8_t gid[16];       /* remote GID, network order */
};

/* Description of the local port, filled by query_port. */
struct cep_port_info {
	uint64_t ca_guid_net;  /* CA (node) GUID, network order */
	uint8_t gid[16];       /* port GID at gid_index, network order */
	uint16_t lid;          /* 0 on RoCE */
	uint8_t port_num;
	uint8_t link_layer;    /* 1 InfiniBand, 2 Ethernet (RoCE) */
	uint8_t gid_index;
	uint8_t active_mtu;    /* IBV_MTU_* enum value: 1=256 .. 5=4096 */
	uint16_t pkey;         /* P_Key at index 0 */
	uint8_t ca_ack_delay;  /* local CA ACK delay, 5-bit IBTA exponent
				  (ibv_device_attr.local_ca_ack_delay) */
};

/* Receive function: @mad is valid only during the call (copy it). Called
 * from transport threads, never with a libcep lock held. */
typedef void (*cep_recv_fn)(void *ctx, const uint8_t *mad, size_t len,
			    const struct cep_mad_addr *from);

struct cep_transport;

struct cep_transport_ops {
	/* Send one MAD (len <= CEP_MAD_SIZE). Safe from any thread. Returns 0
	 * when queued for the wire (delivery is not guaranteed), -errno. */
	int (*send)(struct cep_transport *t, const uint8_t *mad, size_t len,
		    const struct cep_mad_addr *to);
	int (*query_port)(struct cep_transport *t, struct cep_port_info *out);
	/* Start delivering received MADs to @fn. Once. */
	int (*start)(struct cep_transport *t, cep_recv_fn fn, void *ctx);
	/* Stop: when it returns, @fn runs no more and will not be called. */
	void (*stop)(struct cep_transport *t);
	/* Free the transport (after stop). */
	void (*destroy)(struct cep_transport *t);
};

struct cep_transport {
	const struct cep_transport_ops *ops;
};

#ifdef __cplusplus
}
#endif

#endif /* CEP_TRANSPORT_H */
