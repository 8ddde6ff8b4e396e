/* SPDX-License-Identifier: MIT */
/*
 * cepdump: print the CM MADs of a capture (pcap or pcapng; RoCEv2 over
 * IPv4/IPv6, RoCEv1, Linux cooked, LINKTYPE_INFINIBAND), decoded and
 * validated by libcep's codec: one line per MAD, every field with -v, JSON
 * lines with --json (keys are the spec's field names, from the codec rows).
 * Bad packets are reported on stderr and skipped; only an unreadable file
 * is fatal.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cep/wire.h>

#include "wire_fields.h"

enum { OUT_LINE, OUT_VERBOSE, OUT_JSON };

struct where {
	uint8_t sgid[16], dgid[16];
	int have_gid;
	uint16_t slid, dlid;
	int have_lid;
	uint32_t src_qpn, dst_qpn, qkey;
	uint16_t pkey;
	const char *framing;
};

static int out_mode = OUT_LINE;
static unsigned long n_frames, n_cm, n_bad, n_other;

static unsigned rd16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static uint32_t rd24(const uint8_t *p) { return (uint32_t)p[0] << 16 | rd16(p + 1); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd16(p) << 16 | rd16(p + 2); }

static void bad(unsigned long frame, const char *what)
{
	n_bad++;
	fprintf(stderr, "cepdump: frame %lu: %s (skipped)\n", frame, what);
}

static void gid_str(const uint8_t *g, char *buf, size_t n)
{
	if (!inet_ntop(AF_INET6, g, buf, (socklen_t)n))
		snprintf(buf, n, "?");
}

static void hex(FILE *o, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fprintf(o, "%02x", p[i]);
}

/* ---- output ---------------------------------------------------------------- */

/* Fields shown on the one-line summary, per message. */
static const char *const summary[CEP_MSG_COUNT][6] = {
	[CEP_MSG_REQ] = { "local_comm_id", "service_id", "local_qpn", "starting_psn",
			  "transport_service_type", "path_packet_payload_mtu" },
	[CEP_MSG_MRA] = { "local_comm_id", "remote_comm_id", "message_mraed", "service_timeout" },
	[CEP_MSG_REJ] = { "local_comm_id", "remote_comm_id", "message_rejected", "reason" },
	[CEP_MSG_REP] = { "local_comm_id", "remote_comm_id", "local_qpn", "starting_psn" },
	[CEP_MSG_RTU] = { "local_comm_id", "remote_comm_id" },
	[CEP_MSG_DREQ] = { "local_comm_id", "remote_comm_id", "remote_qpn_eecn" },
	[CEP_MSG_DREP] = { "local_comm_id", "remote_comm_id" },
	[CEP_MSG_LAP] = { "local_comm_id", "remote_comm_id", "remote_qpn_eecn" },
	[CEP_MSG_APR] = { "local_comm_id", "remote_comm_id", "ap_status" },
	[CEP_MSG_SIDR_REQ] = { "request_id", "service_id", "partition_key" },
	[CEP_MSG_SIDR_REP] = { "request_id", "status", "qpn", "q_key" },
};

static const char *value_note(const struct cep_msg *m, const struct cep_field *f, uint64_t v)
{
	if (m->type == CEP_MSG_REJ && strcmp(f->name, "reason") == 0)
		return cep_rej_reason_name((unsigned)v);
	if (m->type == CEP_MSG_APR && strcmp(f->name, "ap_status") == 0)
		return cep_apr_status_name((unsigned)v);
	if (m->type == CEP_MSG_SIDR_REP && strcmp(f->name, "status") == 0)
		return cep_sidr_status_name((unsigned)v);
	if (strcmp(f->name, "transport_service_type") == 0) {
		static const char *const ts[] = { "RC", "UC", "RD", "extended" };
		return ts[v & 3];
	}
	if (strcmp(f->name, "message_rejected") == 0 || strcmp(f->name, "message_mraed") == 0) {
		static const char *const mc[] = { "REQ", "REP", "other", "reserved" };
		if (m->type == CEP_MSG_MRA && v == 2)
			return "LAP";
		return mc[v & 3];
	}
	return NULL;
}

static void print_time(FILE *o, uint64_t ns)
{
	time_t s = (time_t)(ns / 1000000000u);
	struct tm tm;
	char buf[32];

	gmtime_r(&s, &tm);
	strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
	fprintf(o, "%s.%06" PRIu64, buf, ns % 1000000000u / 1000u);
}

static void print_line(unsigned long frame, uint64_t ns, const struct where *w,
		       const struct cep_msg *m)
{
	size_t n;
	const struct cep_field *f = cep_wire_fields(m->type, &n);
	char a[64], b[64];

	print_time(stdout, ns);
	if (w->have_gid) {
		gid_str(w->sgid, a, sizeof(a));
		gid_str(w->dgid, b, sizeof(b));
		printf(" %s > %s", a, b);
	} else {
		printf(" lid %u > lid %u", w->slid, w->dlid);
	}
	printf(" CM %s tid 0x%016" PRIx64, cep_msg_name(m->type), m->hdr.tid);
	for (int k = 0; k < 6 && summary[m->type][k]; k++) {
		for (size_t i = 0; i < n; i++) {
			const char *note;
			uint64_t v;

			if (strcmp(f[i].name, summary[m->type][k]) != 0)
				continue;
			v = cep_field_host_get(m, &f[i]);
			note = value_note(m, &f[i], v);
			if (note)
				printf(" %s %s", f[i].name, note);
			else
				printf(" %s 0x%" PRIx64, f[i].name, v);
		}
	}
	(void)frame;
	printf("\n");
}

static void print_field(FILE *o, const struct cep_msg *m, const struct cep_field *f, int json)
{
	const uint8_t *p = (const uint8_t *)m + f->host_off;
	char g[64];

	switch (f->kind) {
	case CEP_FIELD_UINT: {
		uint64_t v = cep_field_host_get(m, f);
		const char *note = value_note(m, f, v);

		if (json)
			fprintf(o, "%" PRIu64, v);
		else if (note)
			fprintf(o, "%" PRIu64 " (0x%" PRIx64 ", %s)", v, v, note);
		else
			fprintf(o, "%" PRIu64 " (0x%" PRIx64 ")", v, v);
		break;
	}
	case CEP_FIELD_GID:
		gid_str(p, g, sizeof(g));
		fprintf(o, json ? "\"%s\"" : "%s", g);
		break;
	case CEP_FIELD_BYTES:
		if (json)
			fputc('"', o);
		hex(o, p, f->width / 8);
		if (json)
			fputc('"', o);
		break;
	default:
		break;
	}
}

static void print_verbose(unsigned long frame, uint64_t ns, const struct where *w,
			  const struct cep_msg *m)
{
	size_t n, nh;
	const struct cep_field *f = cep_wire_fields(m->type, &n);
	const struct cep_field *h = cep_wire_hdr_fields(&nh);
	char a[64], b[64];

	print_line(frame, ns, w, m);
	printf("  frame %lu, %s", frame, w->framing);
	if (w->have_gid) {
		gid_str(w->sgid, a, sizeof(a));
		gid_str(w->dgid, b, sizeof(b));
		printf(", sgid %s, dgid %s", a, b);
	}
	if (w->have_lid)
		printf(", slid %u, dlid %u", w->slid, w->dlid);
	printf(", src_qpn %u, dst_qpn %u, q_key 0x%08x, p_key 0x%04x\n",
	       w->src_qpn, w->dst_qpn, w->qkey, w->pkey);
	for (size_t i = 0; i < nh; i++) {
		if (h[i].kind == CEP_FIELD_RESERVED)
			continue;
		printf("  mad.%s: ", h[i].name);
		print_field(stdout, m, &h[i], 0);
		printf("\n");
	}
	for (size_t i = 0; i < n; i++) {
		if (f[i].kind == CEP_FIELD_RESERVED)
			continue;
		printf("  %s: ", f[i].name);
		print_field(stdout, m, &f[i], 0);
		printf("\n");
	}
}

static void print_json(unsigned long frame, uint64_t ns, const struct where *w,
		       const struct cep_msg *m)
{
	size_t n, nh;
	const struct cep_field *f = cep_wire_fields(m->type, &n);
	const struct cep_field *h = cep_wire_hdr_fields(&nh);
	char a[64], b[64];
	const char *sep = "";

	printf("{\"frame\":%lu,\"time\":%" PRIu64 ".%09" PRIu64 ",\"msg\":\"%s\",\"net\":{",
	       frame, ns / 1000000000u, ns % 1000000000u, cep_msg_name(m->type));
	printf("\"framing\":\"%s\"", w->framing);
	if (w->have_gid) {
		gid_str(w->sgid, a, sizeof(a));
		gid_str(w->dgid, b, sizeof(b));
		printf(",\"sgid\":\"%s\",\"dgid\":\"%s\"", a, b);
	}
	if (w->have_lid)
		printf(",\"slid\":%u,\"dlid\":%u", w->slid, w->dlid);
	printf(",\"src_qpn\":%u,\"dst_qpn\":%u,\"q_key\":%u,\"p_key\":%u},\"hdr\":{",
	       w->src_qpn, w->dst_qpn, w->qkey, w->pkey);
	for (size_t i = 0; i < nh; i++) {
		if (h[i].kind == CEP_FIELD_RESERVED)
			continue;
		printf("%s\"%s\":", sep, h[i].name);
		print_field(stdout, m, &h[i], 1);
		sep = ",";
	}
	printf("}");
	for (size_t i = 0; i < n; i++) {
		if (f[i].kind == CEP_FIELD_RESERVED)
			continue;
		printf(",\"%s\":", f[i].name);
		print_field(stdout, m, &f[i], 1);
	}
	printf("}\n");
}

/* ---- dissection ------------------------------------------------------------ */

/* @p points at the BTH; @n bytes up to the end of the captured frame
 * (ICRC and, on IB, VCRC included in @trailer). */
static void dissect_bth(unsigned long frame, uint64_t ns, struct where *w,
			const uint8_t *p, size_t n, size_t trailer)
{
	enum cep_wire_error why;
	struct cep_msg m;
	char msg[160];
	size_t pay;

	if (n < 12 + 8 + trailer) {
		bad(frame, "truncated BTH/DETH");
		return;
	}
	if (p[0] != 0x64) {     /* not UD SEND only: not a MAD */
		n_other++;
		return;
	}
	w->pkey = (uint16_t)rd16(p + 2);
	w->dst_qpn = rd24(p + 5);
	w->qkey = rd32(p + 12);
	w->src_qpn = rd24(p + 17);
	pay = n - 12 - 8 - trailer - ((p[1] >> 4) & 3);
	p += 20;
	if (pay < 24 || p[1] != CEP_MGMT_CLASS_CM) {
		n_other++;      /* some other MAD class, or no MAD */
		return;
	}
	if (cep_msg_decode(p, pay, &m, &why)) {
		snprintf(msg, sizeof(msg), "bad CM MAD: %s (%s)", cep_wire_error_name(why),
			 cep_wire_error_str(why));
		bad(frame, msg);
		return;
	}
	n_cm++;
	if (out_mode == OUT_JSON)
		print_json(frame, ns, w, &m);
	else if (out_mode == OUT_VERBOSE)
		print_verbose(frame, ns, w, &m);
	else
		print_line(frame, ns, w, &m);
}

/* GRH (or RoCEv1 / IPv6-shaped header) at @p: 40 bytes. */
static int take_grh(struct where *w, const uint8_t *p)
{
	memcpy(w->sgid, p + 8, 16);
	memcpy(w->dgid, p + 24, 16);
	w->have_gid = 1;
	return 40;
}

static void dissect_udp(unsigned long frame, uint64_t ns, struct where *w,
			const uint8_t *p, size_t n)
{
	if (n < 8) {
		bad(frame, "truncated UDP");
		return;
	}
	if (rd16(p + 2) != 4791) {
		n_other++;
		return;
	}
	if (rd16(p + 4) >= 8 && rd16(p + 4) < n)
		n = rd16(p + 4);      /* drop Ethernet padding */
	dissect_bth(frame, ns, w, p + 8, n - 8, 4);
}

static void dissect_ethertype(unsigned long frame, uint64_t ns, unsigned type,
			      const uint8_t *p, size_t n)
{
	struct where w;

	memset(&w, 0, sizeof(w));
	if (type == 0x8915) {          /* RoCEv1: GRH + BTH */
		if (n < 40) {
			bad(frame, "truncated RoCEv1 GRH");
			return;
		}
		w.framing = "rocev1";
		take_grh(&w, p);
		dissect_bth(frame, ns, &w, p + 40, n - 40, 4);
	} else if (type == 0x86dd) {
		if (n < 40) {
			bad(frame, "truncated IPv6");
			return;
		}
		if (p[6] != 17) {
			n_other++;
			return;
		}
		w.framing = "rocev2-ipv6";
		take_grh(&w, p);
		if ((size_t)rd16(p + 4) + 40 < n)
			n = rd16(p + 4) + 40u;
		dissect_udp(frame, ns, &w, p + 40, n - 40);
	} else if (type == 0x0800) {
		size_t ihl;

		if (n < 20 || (p[0] >> 4) != 4 || (ihl = (size_t)(p[0] & 15) * 4) < 20 || ihl > n) {
			bad(frame, "truncated or bad IPv4");
			return;
		}
		if (p[9] != 17) {
			n_other++;
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
		dissect_udp(frame, ns, &w, p + ihl, n - ihl);
	} else {
		n_other++;
	}
}

static void dissect(unsigned long frame, uint64_t ns, uint32_t link, const uint8_t *p, size_t n)
{
	struct where w;
	unsigned type;

	switch (link) {
	case 1:   /* Ethernet, with optional VLAN tags */
		if (n < 14) {
			bad(frame, "truncated Ethernet");
			return;
		}
		type = rd16(p + 12);
		p += 14, n -= 14;
		while ((type == 0x8100 || type == 0x88a8) && n >= 4) {
			type = rd16(p + 2);
			p += 4, n -= 4;
		}
		dissect_ethertype(frame, ns, type, p, n);
		return;
	case 113: /* Linux cooked v1 */
		if (n < 16) {
			bad(frame, "truncated SLL");
			return;
		}
		dissect_ethertype(frame, ns, rd16(p + 14), p + 16, n - 16);
		return;
	case 276: /* Linux cooked v2 */
		if (n < 20) {
			bad(frame, "truncated SLL2");
			return;
		}
		dissect_ethertype(frame, ns, rd16(p), p + 20, n - 20);
		return;
	case 247: /* InfiniBand: LRH [GRH] BTH ... ICRC VCRC */
		memset(&w, 0, sizeof(w));
		if (n < 8) {
			bad(frame, "truncated LRH");
			return;
		}
		w.framing = "infiniband";
		w.dlid = (uint16_t)rd16(p + 2);
		w.slid = (uint16_t)rd16(p + 6);
		w.have_lid = 1;
		switch (p[1] & 3) {
		case 2:
			dissect_bth(frame, ns, &w, p + 8, n - 8, 6);
			return;
		case 3:
			if (n < 48) {
				bad(frame, "truncated GRH");
				return;
			}
			take_grh(&w, p + 8);
			dissect_bth(frame, ns, &w, p + 48, n - 48, 6);
			return;
		default:
			n_other++;
			return;
		}
	default:
		n_other++;
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

static int read_pcap(FILE *in, const uint8_t *first4, const char *name)
{
	uint8_t h[24], rh[16];
	static uint8_t buf[MAX_REC];
	uint32_t magic = get32(first4, 0), link;
	int swap = 0, nsec = 0;
	unsigned long frame = 0;

	memcpy(h, first4, 4);
	if (fread(h + 4, 20, 1, in) != 1) {
		fprintf(stderr, "cepdump: %s: truncated pcap header\n", name);
		return 2;
	}
	if (magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u)
		swap = 1;
	nsec = (magic == 0xa1b23c4du || magic == 0x4d3cb2a1u);
	link = get32(h + 20, swap) & 0xffff;
	for (;;) {
		uint32_t incl, orig;
		uint64_t ns;
		size_t got;

		got = fread(rh, 1, 16, in);
		if (got == 0)
			break;
		frame++;
		n_frames++;
		if (got < 16) {
			bad(frame, "truncated record header at end of file");
			break;
		}
		incl = get32(rh + 8, swap);
		orig = get32(rh + 12, swap);
		ns = (uint64_t)get32(rh, swap) * 1000000000u +
		     (uint64_t)get32(rh + 4, swap) * (nsec ? 1u : 1000u);
		if (incl > MAX_REC) {
			bad(frame, "record length out of range; stopping");
			break;
		}
		if (fread(buf, 1, incl, in) != incl) {
			bad(frame, "truncated record at end of file");
			break;
		}
		if (incl < orig) {
			bad(frame, "packet cut by the snap length");
			continue;
		}
		dissect(frame, ns, link, buf, incl);
	}
	return 0;
}

/* pcapng: section header, interface descriptions, enhanced and simple
 * packet blocks; every other block is skipped. Timestamps assume the
 * default microsecond resolution unless if_tsresol says otherwise. */
static int read_pcapng(FILE *in, const uint8_t *first4, const char *name)
{
	static uint8_t blk[MAX_REC];
	uint32_t links[64];
	uint64_t tsdiv[64];
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
				bad(frame + 1, "truncated pcapng block");
				break;
			}
		} else if (fread(bh + 4, 4, 1, in) != 1) {
			fprintf(stderr, "cepdump: %s: truncated pcapng header\n", name);
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
				bad(frame + 1, "bad pcapng section header");
				break;
			}
			nif = 0;
			continue;
		}
		len = get32(bh + 4, swap);
		if (len < 12 || len > MAX_REC || (len & 3) || fread(blk, len - 8, 1, in) != 1) {
			bad(frame + 1, "bad pcapng block length; stopping");
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
					uint8_t r = blk[o + 4];
					div = 1;
					for (unsigned k = 0; k < (r & 0x7f) && k < 19; k++)
						div *= (r & 0x80) ? 2 : 10;
				}
				o += 4 + ((olen + 3u) & ~3u);
			}
			tsdiv[nif++] = div;
		} else if (type == 6 || type == 3) {     /* enhanced / simple packet */
			uint32_t ifc = type == 6 ? get32(blk, swap) : 0;
			uint32_t cap = type == 6 ? get32(blk + 12, swap) : len - 16;
			const uint8_t *data = blk + (type == 6 ? 20 : 4);
			uint64_t ts = 0, ns = 0;

			frame++;
			n_frames++;
			if (ifc >= nif) {
				bad(frame, "packet on an undeclared interface");
				continue;
			}
			if (type == 3 && cap > get32(blk, swap))
				cap = get32(blk, swap);
			if ((size_t)(data - blk) + cap > len - 12) {
				bad(frame, "packet block shorter than its data");
				continue;
			}
			if (type == 6) {
				ts = (uint64_t)get32(blk + 4, swap) << 32 | get32(blk + 8, swap);
				ns = ts / tsdiv[ifc] * 1000000000u +
				     ts % tsdiv[ifc] * 1000000000u / tsdiv[ifc];
			}
			dissect(frame, ns, links[ifc], data, cap);
		}
	}
	return 0;
}

static void usage(FILE *o)
{
	fprintf(o,
		"usage: cepdump [-v | --json] [-r] FILE|-\n"
		"  Print the IB CM MADs of a pcap/pcapng capture (RoCEv2, RoCEv1,\n"
		"  LINKTYPE_INFINIBAND, Linux cooked). '-' reads standard input.\n"
		"  -v       every field of every MAD\n"
		"  --json   one JSON object per MAD, keys are the spec's field names\n"
		"  -q       no summary on stderr\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "read", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL;
	uint8_t first[4];
	int c, rc, quiet = 0;
	FILE *in;

	while ((c = getopt_long(argc, argv, "vjr:qh", opts, NULL)) != -1) {
		switch (c) {
		case 'v': out_mode = OUT_VERBOSE; break;
		case 'j': out_mode = OUT_JSON; break;
		case 'r': path = optarg; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!path && optind < argc)
		path = argv[optind++];
	if (!path || optind < argc) {
		usage(stderr);
		return 2;
	}
	in = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!in) {
		fprintf(stderr, "cepdump: %s: %s\n", path, strerror(errno));
		return 2;
	}
	if (fread(first, 4, 1, in) != 1) {
		fprintf(stderr, "cepdump: %s: empty or unreadable\n", path);
		return 2;
	}
	switch (get32(first, 0)) {
	case 0xa1b2c3d4u: case 0xd4c3b2a1u: case 0xa1b23c4du: case 0x4d3cb2a1u:
		rc = read_pcap(in, first, path);
		break;
	case 0x0a0d0d0au:
		rc = read_pcapng(in, first, path);
		break;
	default:
		fprintf(stderr, "cepdump: %s: not a pcap or pcapng file\n", path);
		rc = 2;
	}
	if (in != stdin)
		fclose(in);
	fflush(stdout);
	if (!quiet && rc == 0)
		fprintf(stderr, "cepdump: %lu frames, %lu CM MADs, %lu bad, %lu other\n",
			n_frames, n_cm, n_bad, n_other);
	return rc;
}
