/* SPDX-License-Identifier: MIT */
/*
 * libcep capture: CM MADs written to a classic pcap file that stock
 * Wireshark/tshark dissect with no options.
 *
 * Default framing is what a capture on a Soft-RoCE (rxe) interface shows:
 * Ethernet / IPv6 (IPv4 when both GIDs are IPv4-mapped) / UDP to port 4791 /
 * BTH (UD SEND only) / DETH / MAD / ICRC, with the GIDs as IP addresses and
 * a correct ICRC. LINKTYPE_INFINIBAND (247) frames the MAD as native IB:
 * LRH [/ GRH] / BTH / DETH / MAD / ICRC / VCRC.
 *
 * Two ways in: an explicit file (cep_pcap_open / write / close), and one
 * process-wide capture that libcep itself feeds with every MAD its CM and
 * transports send or receive, switched on by cep_capture_start() or by the
 * environment variable CEP_PCAP=/path/file.pcap (read once, on the first
 * MAD or capture call; CEP_PCAP_LINK=ib selects LINKTYPE_INFINIBAND).
 */
#ifndef CEP_PCAP_H
#define CEP_PCAP_H

#include <stddef.h>
#include <stdint.h>

#include <cep/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* pcap link types (the numbers are the pcap LINKTYPE_* values). */
enum cep_pcap_link {
	CEP_PCAP_ROCEV2 = 1,       /* LINKTYPE_ETHERNET: RoCEv2 framing (default) */
	CEP_PCAP_INFINIBAND = 247, /* LINKTYPE_INFINIBAND: native IB framing */
};

/* Where a MAD went, for the headers around it. Zero values mean defaults,
 * so a zeroed struct plus the two GIDs is enough on RoCE. */
struct cep_pcap_meta {
	uint8_t sgid[16];    /* sender's GID: IPv6 source (network order) */
	uint8_t dgid[16];    /* receiver's GID: IPv6 destination */
	uint16_t slid;       /* IB framing: LRH source LID */
	uint16_t dlid;       /* IB framing: LRH destination LID */
	uint32_t src_qpn;    /* DETH source QP; 0 means 1 (QP1) */
	uint32_t dst_qpn;    /* BTH destination QP; 0 means 1 (QP1) */
	uint32_t qkey;       /* DETH Q_Key; 0 means 0x80010000 */
	uint16_t pkey;       /* BTH P_Key; 0 means 0xffff */
	uint8_t sl;          /* IB framing: LRH service level */
	uint8_t grh;         /* IB framing: add a GRH (always present on RoCE) */
	uint64_t ts_ns;      /* capture time, ns since the Unix epoch; 0 = now */
};

struct cep_pcap;

/* Create (truncate) @path and write a pcap header for @link (0 means
 * CEP_PCAP_ROCEV2). 0, -EINVAL (NULL, unknown link), -ENOMEM, -EIO (the
 * header could not be written), or the negated errno of fopen(3)
 * (-EACCES, -ENOENT, ...). */
CEP_EXPORT int cep_pcap_open(const char *path, enum cep_pcap_link link,
			     struct cep_pcap **out);

/* Append one MAD (1..256 bytes; a CM MAD is 256) framed as the file's link
 * type. Thread-safe: writes to one file are serialised by its mutex and
 * each record is flushed, so the file is complete after every call. 0,
 * -EINVAL (NULL, bad length) or -EIO. Must not race with cep_pcap_close. */
CEP_EXPORT int cep_pcap_write_mad(struct cep_pcap *pc, const uint8_t *mad,
				  size_t len, const struct cep_pcap_meta *meta);

/* Number of records written so far. */
CEP_EXPORT uint64_t cep_pcap_count(struct cep_pcap *pc);

/* Close and free. 0 or -EIO if the final flush failed. NULL is a no-op. */
CEP_EXPORT int cep_pcap_close(struct cep_pcap *pc);

/* Start the process-wide capture into @path (@link 0 = RoCEv2). 0,
 * -EINVAL (NULL @path), -EBUSY if a capture is already running (from the
 * API or CEP_PCAP), or an error of cep_pcap_open (-ENOMEM, -EIO, fopen's). Any thread; not from a CM callback that might
 * race with cep_capture_stop in another thread (both take one mutex). */
CEP_EXPORT int cep_capture_start(const char *path, enum cep_pcap_link link);

/* Stop and close the process-wide capture. MADs racing with stop are
 * either fully written or not at all. 0 (also when none was running), or
 * -EIO (cep_pcap_close). A capture started by CEP_PCAP is closed at
 * exit if never stopped. */
CEP_EXPORT int cep_capture_stop(void);

/* Records written by the running process-wide capture (0 if none). */
CEP_EXPORT uint64_t cep_capture_count(void);

#ifdef __cplusplus
}
#endif

#endif /* CEP_PCAP_H */
