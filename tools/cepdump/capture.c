/* SPDX-License-Identifier: MIT */
/*
 * cepdump's capture reader (capture.h): files, then frames, then the MADs
 * of the CM class inside them. Every length is checked before it is used;
 * a damaged frame is reported and skipped, never fatal.
 */
#include <string.h>

#include <cep/wire.h>

#include "capture.h"

static unsigned rd16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static uint32_t rd24(const uint8_t *p) { return (uint32_t)p[0] << 16 | rd16(p + 1); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd16(p) << 16 | rd16(p + 2); }

void dump_bad(struct dump_reader *r, unsigned long frame, const char *what)
{
	r->bad++;
	fprintf(stderr, "cepdump: frame %lu: %s (skipped)\n", frame, what);
}

/* @p points at the BTH; @n bytes up to the end of the captured frame
 * (ICRC and, on IB, VCRC included in @trailer). */
static void dissect_bth(struct dump_reader *r, unsigned long frame, uint64_t ns,
			struct dump_where *w, const uint8_t *p, size_t n, size_t trailer)
{
	size_t pay;

	if (n < 12 + 8 + trailer) {
		dump_bad(r, frame, "truncated BTH/DETH");
		return;
	}
	if (p[0] != 0x64) {     /* not UD SEND only: not a MAD */
		r->other++;
		return;
	}
	w->pkey = (uint16_t)rd16(p + 2);
	w->dst_qpn = rd24(p + 5);
	w->qkey = rd32(p + 12);
	w->src_qpn = rd24(p + 17);
	pay = n - 12 - 8 - trailer - ((p[1] >> 4) & 3);
	p += 20;
	if (pay < 24 || p[1] != CEP_MGMT_CLASS_CM) {
		r->other++;     /* some other MAD class, or no MAD */
		return;
	}
	r->fn(r, frame, ns, w, p, pay);
}

/* GRH (or RoCEv1 / IPv6-shaped header) at @p: 40 bytes. */
static int take_grh(struct dump_where *w, const uint8_t *p)
{
	memcpy(w->sgid, p + 8, 16);
	memcpy(w->dgid, p + 24, 16);
	w->have_gid = 1;
	return 40;
}

static void dissect_udp(struct dump_reader *r, unsigned long frame, uint64_t ns,
			struct dump_where *w, const uint8_t *p, size_t n)
{
	if (n < 8) {
		dump_bad(r, frame, "truncated UDP");
		return;
	}
	if (rd16(p + 2) != 4791) {
		r->other++;
		return;
	}
	if (rd16(p + 4) >= 8 && rd16(p + 4) < n)
		n = rd16(p + 4);      /* drop Ethernet padding */
	dissect_bth(r, frame, ns, w, p + 8, n - 8, 4);
}

static void dissect_ethertype(struct dump_reader *r, unsigned long frame, uint64_t ns,
			      unsigned type, const uint8_t *p, size_t n)
{
	struct dump_where w;

	memset(&w, 0, sizeof(w));
	if (type == 0x8915) {          /* RoCEv1: GRH + BTH */
		if (n < 40) {
			dump_bad(r, frame, "truncated RoCEv1 GRH");
			return;
		}
		w.framing = "rocev1";
		take_grh(&w, p);
		dissect_bth(r, frame, ns, &w, p + 40, n - 40, 4);
	} else if (type == 0x86dd) {
		if (n < 40) {
			dump_bad(r, frame, "truncated IPv6");
			return;
		}
		if (p[6] != 17) {
			r->other++;
			return;
		}
		w.framing = "rocev2-ipv6";
		take_grh(&w, p);
		if ((size_t)rd16(p + 4) + 40 < n)
			n = rd16(p + 4) + 40u;
		dissect_udp(r, frame, ns, &w, p + 40, n - 40);
	} else if (type == 0x0800) {
		size_t ihl;

		if (n < 20 || (p[0] >> 4) != 4 || (ihl = (size_t)(p[0] & 15) * 4) < 20 || ihl > n) {
			dump_bad(r, frame, "truncated or bad IPv4");
			return;
		}
		if (p[9] != 17) {
			r->other++;
			return;
		}
		w.framing = "rocev2-ipv4";
		/* IPv4 addresses as IPv4-mapped GIDs, as RoCE defines them */
		memset(w.sgid, 0, 16);
		w.sgid[10] = w.sgid[11] = 0xff;
		memcpy(w.dgid, w.sgid, 16);
		memcpy(w.sgid + 12, p + 12, 4);
		memcpy(w.dgid + 12, p + 16, 4);
		w.have_gid = 1;
		if (rd16(p + 2) >= ihl && rd16(p + 2) < n)
			n = rd16(p + 2);
		dissect_udp(r, frame, ns, &w, p + ihl, n - ihl);
	} else {
		r->other++;
	}
}

static void dissect(struct dump_reader *r, unsigned long frame, uint64_t ns, uint32_t link,
		    const uint8_t *p, size_t n)
{
	struct dump_where w;
	unsigned type;

	switch (link) {
	case 1:   /* Ethernet, with optional VLAN tags */
		if (n < 14) {
			dump_bad(r, frame, "truncated Ethernet");
			return;
		}
		type = rd16(p + 12);
		p += 14, n -= 14;
		while ((type == 0x8100 || type == 0x88a8) && n >= 4) {
			type = rd16(p + 2);
			p += 4, n -= 4;
		}
		dissect_ethertype(r, frame, ns, type, p, n);
		return;
	case 113: /* Linux cooked v1 */
		if (n < 16) {
			dump_bad(r, frame, "truncated SLL");
			return;
		}
		dissect_ethertype(r, frame, ns, rd16(p + 14), p + 16, n - 16);
		return;
	case 276: /* Linux cooked v2 */
		if (n < 20) {
			dump_bad(r, frame, "truncated SLL2");
			return;
		}
		dissect_ethertype(r, frame, ns, rd16(p), p + 20, n - 20);
		return;
	case 247: /* InfiniBand: LRH [GRH] BTH ... ICRC VCRC */
		memset(&w, 0, sizeof(w));
		if (n < 8) {
			dump_bad(r, frame, "truncated LRH");
			return;
		}
		w.framing = "infiniband";
		w.dlid = (uint16_t)rd16(p + 2);
		w.slid = (uint16_t)rd16(p + 6);
		w.have_lid = 1;
		switch (p[1] & 3) {
		case 2:
			dissect_bth(r, frame, ns, &w, p + 8, n - 8, 6);
			return;
		case 3:
			if (n < 48) {
				dump_bad(r, frame, "truncated GRH");
				return;
			}
			take_grh(&w, p + 8);
			dissect_bth(r, frame, ns, &w, p + 48, n - 48, 6);
			return;
		default:
			r->other++;
			return;
		}
	default:
		r->other++;
		return;
	}
}

/* ---- capture files ------------------------------------------------------------ */

static uint32_t get32(const uint8_t *p, int swap)
{
	return swap ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
		    : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static uint16_t get16(const uint8_t *p, int swap)
{
	return (uint16_t)(swap ? p[0] << 8 | p[1] : p[1] << 8 | p[0]);
}

#define MAX_REC (256 * 1024)

/* The link types dissect() knows. */
static int link_supported(uint32_t link)
{
	return link == 1 || link == 113 || link == 276 || link == 247;
}

#define SUPPORTED_LINKS "Ethernet (1), Linux cooked (113, 276) and InfiniBand (247)"

static void unsupported(struct dump_reader *r, uint32_t link)
{
	fprintf(stderr, "cepdump: %s: link type %u is not supported: cepdump reads "
		SUPPORTED_LINKS "\n", r->name, link);
}

/* pcapng: one line per interface of an unsupported link type that carried
 * packets, at the end of its section. */
static void report_skipped(struct dump_reader *r, const uint32_t *links,
			   const unsigned long *skipped, unsigned nif)
{
	for (unsigned i = 0; i < nif; i++)
		if (skipped[i])
			fprintf(stderr, "cepdump: %s: interface %u: link type %u is not supported: "
				"%lu packets skipped (cepdump reads " SUPPORTED_LINKS ")\n",
				r->name, i, links[i], skipped[i]);
}

static int read_pcap(struct dump_reader *r, FILE *in, const uint8_t *first4)
{
	uint8_t h[24], rh[16];
	static uint8_t buf[MAX_REC];
	uint32_t magic = get32(first4, 0), link;
	int swap = 0, nsec = 0;
	unsigned long frame = 0;

	memcpy(h, first4, 4);
	if (fread(h + 4, 20, 1, in) != 1) {
		fprintf(stderr, "cepdump: %s: truncated pcap header\n", r->name);
		return 2;
	}
	if (magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u)
		swap = 1;
	nsec = (magic == 0xa1b23c4du || magic == 0x4d3cb2a1u);
	link = get32(h + 20, swap) & 0xffff;
	if (!link_supported(link)) {
		unsupported(r, link);
		return 2;
	}
	for (;;) {
		uint32_t incl, orig;
		uint64_t ns;
		size_t got;

		got = fread(rh, 1, 16, in);
		if (got == 0)
			break;
		frame++;
		r->frames++;
		if (got < 16) {
			dump_bad(r, frame, "truncated record header at end of file");
			break;
		}
		incl = get32(rh + 8, swap);
		orig = get32(rh + 12, swap);
		ns = (uint64_t)get32(rh, swap) * 1000000000u +
		     (uint64_t)get32(rh + 4, swap) * (nsec ? 1u : 1000u);
		if (incl > MAX_REC) {
			dump_bad(r, frame, "record length out of range; stopping");
			break;
		}
		if (fread(buf, 1, incl, in) != incl) {
			dump_bad(r, frame, "truncated record at end of file");
			break;
		}
		if (incl < orig) {
			dump_bad(r, frame, "packet cut by the snap length");
			continue;
		}
		dissect(r, frame, ns, link, buf, incl);
	}
	return 0;
}

/* pcapng: section header, interface descriptions, enhanced and simple
 * packet blocks; every other block is skipped. Timestamps assume the
 * default microsecond resolution unless if_tsresol says otherwise. */
static int read_pcapng(struct dump_reader *r, FILE *in, const uint8_t *first4)
{
	static uint8_t blk[MAX_REC];
	uint32_t links[64];
	uint64_t tsdiv[64];
	unsigned long skipped[64];  /* packets on an interface of unsupported link type */
	unsigned long on_supported = 0, on_unsupported = 0;
	unsigned nif = 0;
	int swap = 0;
	unsigned long frame = 0;
	uint8_t bh[8];

	memcpy(bh, first4, 4);
	for (int first = 1;; first = 0) {
		uint32_t type, len;

		if (!first) {
			size_t got = fread(bh, 1, 8, in);

			if (got == 0)
				break;
			if (got < 8) {
				dump_bad(r, frame + 1, "truncated pcapng block");
				break;
			}
		} else if (fread(bh + 4, 4, 1, in) != 1) {
			fprintf(stderr, "cepdump: %s: truncated pcapng header\n", r->name);
			return 2;
		}
		type = get32(bh, swap);
		if (type == 0x0a0d0d0a) {
			uint8_t bom[4];

			if (fread(bom, 4, 1, in) != 1)
				break;
			swap = get32(bom, 0) != 0x1a2b3c4d;
			len = get32(bh + 4, swap);
			if (len < 16 || len > MAX_REC || fread(blk, len - 12, 1, in) != 1) {
				dump_bad(r, frame + 1, "bad pcapng section header");
				break;
			}
			report_skipped(r, links, skipped, nif);
			nif = 0;
			continue;
		}
		len = get32(bh + 4, swap);
		if (len < 12 || len > MAX_REC || (len & 3) || fread(blk, len - 8, 1, in) != 1) {
			dump_bad(r, frame + 1, "bad pcapng block length; stopping");
			break;
		}
		if (type == 1 && nif < 64) {            /* interface description */
			uint64_t div = 1000000;
			size_t o = 8;

			links[nif] = get16(blk, swap);
			while (o + 4 <= len - 12) {
				unsigned code = get16(blk + o, swap), olen = get16(blk + o + 2, swap);

				if (code == 0)
					break;
				if (code == 9 && olen == 1 && o + 5 <= len - 12) {
					uint8_t res = blk[o + 4];   /* if_tsresol */

					div = 1;
					for (unsigned k = 0; k < (res & 0x7f) && k < 19; k++)
						div *= (res & 0x80) ? 2 : 10;
				}
				o += 4 + ((olen + 3u) & ~3u);
			}
			skipped[nif] = 0;
			tsdiv[nif++] = div;
		} else if (type == 6 || type == 3) {     /* enhanced / simple packet */
			uint32_t ifc = type == 6 ? get32(blk, swap) : 0;
			uint32_t cap = type == 6 ? get32(blk + 12, swap) : len - 16;
			const uint8_t *data = blk + (type == 6 ? 20 : 4);
			uint64_t ts = 0, ns = 0;

			frame++;
			r->frames++;
			if (ifc >= nif) {
				dump_bad(r, frame, "packet on an undeclared interface");
				continue;
			}
			if (type == 3 && cap > get32(blk, swap))
				cap = get32(blk, swap);
			if ((size_t)(data - blk) + cap > len - 12) {
				dump_bad(r, frame, "packet block shorter than its data");
				continue;
			}
			if (!link_supported(links[ifc])) {
				skipped[ifc]++;
				on_unsupported++;
				r->other++;
				continue;
			}
			on_supported++;
			if (type == 6) {
				ts = (uint64_t)get32(blk + 4, swap) << 32 | get32(blk + 8, swap);
				ns = ts / tsdiv[ifc] * 1000000000u +
				     ts % tsdiv[ifc] * 1000000000u / tsdiv[ifc];
			}
			dissect(r, frame, ns, links[ifc], data, cap);
		}
	}
	report_skipped(r, links, skipped, nif);
	if (on_unsupported && !on_supported) {
		fprintf(stderr, "cepdump: %s: no packet on an interface cepdump can dissect\n",
			r->name);
		return 2;
	}
	return 0;
}

int dump_read(FILE *in, struct dump_reader *r)
{
	uint8_t first[4];

	if (fread(first, 4, 1, in) != 1) {
		fprintf(stderr, "cepdump: %s: empty or unreadable\n", r->name);
		return 2;
	}
	switch (get32(first, 0)) {
	case 0xa1b2c3d4u: case 0xd4c3b2a1u: case 0xa1b23c4du: case 0x4d3cb2a1u:
		return read_pcap(r, in, first);
	case 0x0a0d0d0au:
		return read_pcapng(r, in, first);
	default:
		fprintf(stderr, "cepdump: %s: not a pcap or pcapng file\n", r->name);
		return 2;
	}
}
