/* SPDX-License-Identifier: MIT */
/*
 * libcep capture hook (private): the CM and every transport call
 * cep_capture_mad() on each MAD they send or receive.
 * Guarantee: when capture is off this costs one relaxed atomic load.
 */
#ifndef CEP_PCAP_PRIVATE_H
#define CEP_PCAP_PRIVATE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cep/pcap.h>

enum {
	CEP_CAPTURE_UNKNOWN = 0, /* CEP_PCAP not read yet */
	CEP_CAPTURE_OFF = 1,
	CEP_CAPTURE_ON = 2,
};

extern _Atomic int cep_capture_state;

void cep_capture_mad_slow(const uint8_t *mad, size_t len,
			  const struct cep_pcap_meta *meta);

/* Record one MAD in the process-wide capture, if it is on. Any thread, any
 * context (callbacks, RCU read side: it takes only the capture mutex, and
 * only while capture is on). A failed write is dropped: capture is a
 * debugging aid and must never fail the CM. */
static inline void cep_capture_mad(const uint8_t *mad, size_t len,
				   const struct cep_pcap_meta *meta)
{
	/* Relaxed: a MAD racing with start/stop may or may not be recorded;
	 * the slow path rechecks the file under the capture mutex. */
	if (atomic_load_explicit(&cep_capture_state, memory_order_relaxed) ==
	    CEP_CAPTURE_OFF)
		return;
	cep_capture_mad_slow(mad, len, meta);
}

/* Frame one MAD as a packet of @link into @buf (at least
 * CEP_PCAP_MAX_FRAME bytes). Returns the frame length. For tests and
 * cepdump's own checks. */
#define CEP_PCAP_MAX_FRAME (14 + 40 + 8 + 12 + 8 + 256 + 4 + 8 + 2)
size_t cep_pcap_frame(enum cep_pcap_link link, const uint8_t *mad, size_t len,
		      const struct cep_pcap_meta *meta, uint8_t *buf);

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32()) continued from @crc;
 * start with 0. Used for the ICRC. */
uint32_t cep_crc32(uint32_t crc, const uint8_t *p, size_t n);

#endif /* CEP_PCAP_PRIVATE_H */
