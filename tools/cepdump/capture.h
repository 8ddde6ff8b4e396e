/* SPDX-License-Identifier: MIT */
/*
 * cepdump's capture reader: pcap (either byte order, micro- or nanosecond)
 * and pcapng, dissected down to the MADs of management class CM, whatever
 * the framing (RoCEv2 over IPv4/IPv6, RoCEv1, Linux cooked, InfiniBand).
 * Guarantees: never reads outside a record; a damaged frame is reported on
 * stderr with its number and skipped; only an unreadable file, one that is
 * not a capture, or one with no link type cepdump can dissect is fatal.
 * Single-threaded (one reader per file).
 */
#ifndef CEPDUMP_CAPTURE_H
#define CEPDUMP_CAPTURE_H

#include <stdint.h>
#include <stdio.h>

/* Where a MAD was seen: the headers around it. */
struct dump_where {
	uint8_t sgid[16], dgid[16];
	int have_gid;
	uint16_t slid, dlid;
	int have_lid;
	uint32_t src_qpn, dst_qpn, qkey;
	uint16_t pkey;
	const char *framing;     /* "rocev2-ipv6", "infiniband", ... */
};

struct dump_reader;

/* Called for each MAD of the CM class, @mad of @len bytes (not validated:
 * any length, any header). */
typedef void (*dump_mad_fn)(struct dump_reader *r, unsigned long frame, uint64_t ns,
			    const struct dump_where *w, const uint8_t *mad, size_t len);

struct dump_reader {
	const char *name;        /* file name for messages */
	dump_mad_fn fn;
	void *ctx;
	/* counted by the reader (frames, other) and by fn (cm, bad, flagged) */
	unsigned long frames, cm, bad, other, flagged;
};

/* Read the whole capture from @in, calling r->fn for each CM MAD.
 * 0, or 2 after a message on stderr when the file cannot be used: not a
 * pcap/pcapng file, truncated header, or a link type cepdump does not
 * dissect (pcap; pcapng: no interface with a supported link type carries
 * a packet; packets on the others are counted and reported). */
int dump_read(FILE *in, struct dump_reader *r);

/* Report frame @frame on stderr ("cepdump: frame N: what (skipped)") and
 * count it bad. */
void dump_bad(struct dump_reader *r, unsigned long frame, const char *what);

#endif /* CEPDUMP_CAPTURE_H */
