/* SPDX-License-Identifier: MIT */
/*
 * cepdump: print the CM MADs of a capture (pcap or pcapng; RoCEv2 over
 * IPv4/IPv6, RoCEv1, Linux cooked, LINKTYPE_INFINIBAND), decoded and
 * validated by libcep's codec: one line per MAD, every field with -v, JSON
 * lines with --json (keys are the spec's field names, from the codec rows),
 * or the capture's connections with --summary / --flow (conn.c, report.c).
 * Files and frames are read by capture.c; this file decodes and prints.
 * Bad packets are reported on stderr and skipped; a MAD with a field value
 * the spec reserves is printed with the field flagged; only an unreadable
 * file is fatal.
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

#include "capture.h"
#include "conn.h"
#include "report.h"
#include "wire/wire_fields.h"

enum { OUT_LINE, OUT_VERBOSE, OUT_JSON, OUT_VIEWS };
enum { VIEW_SUMMARY = 1, VIEW_FLOW = 2 };
enum { OPT_FLOW = 256, OPT_SUMMARY };

static int out_mode = OUT_LINE;
static struct conns conns;   /* --flow / --summary: every MAD, grouped at the end */

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

/* EE context numbers identify the endpoint on RD only (0 on RC and UC):
 * on the line when not 0. */
static const char *const summary_if_set[CEP_MSG_COUNT][2] = {
	[CEP_MSG_REQ] = { "local_eecn", "remote_eecn" },
	[CEP_MSG_REP] = { "local_ee_context_number" },
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

/* " name value" for the row called @name, skipped when @skip_zero and 0. */
static void print_named(const struct cep_msg *m, const struct cep_field *f, size_t n,
			const char *name, int skip_zero)
{
	for (size_t i = 0; i < n; i++) {
		const char *note;
		uint64_t v;

		if (strcmp(f[i].name, name) != 0)
			continue;
		v = cep_field_host_get(m, &f[i]);
		if (skip_zero && v == 0)
			return;
		note = value_note(m, &f[i], v);
		if (note)
			printf(" %s %s", f[i].name, note);
		else
			printf(" %s 0x%" PRIx64, f[i].name, v);
		return;
	}
}

static void print_line(unsigned long frame, uint64_t ns, const struct dump_where *w,
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
	for (int k = 0; k < 6 && summary[m->type][k]; k++)
		print_named(m, f, n, summary[m->type][k], 0);
	for (int k = 0; k < 2 && summary_if_set[m->type][k]; k++)
		print_named(m, f, n, summary_if_set[m->type][k], 1);
	for (size_t i = 0; i < n; i++)
		if (cep_field_rule_broken(m, &f[i]) != CEP_WIRE_ERR_OK)
			printf(" !%s=0x%" PRIx64, f[i].name, cep_field_host_get(m, &f[i]));
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

		/* JSON readers hold numbers as doubles, exact only up to 2^53
		 * (RFC 8259 section 6; jq, JavaScript): wider fields (service
		 * IDs, GUIDs, TIDs) are hex strings. */
		if (json && f->width > 53)
			fprintf(o, "\"0x%016" PRIx64 "\"", v);
		else if (json)
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

static void print_verbose(unsigned long frame, uint64_t ns, const struct dump_where *w,
			  const struct cep_msg *m)
{
	size_t n, nh;
	const struct cep_field *f = cep_wire_fields(m->type, &n);
	const struct cep_field *h = cep_wire_hdr_fields(&nh);
	enum cep_wire_error why;
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
		why = cep_field_rule_broken(m, &f[i]);
		if (why != CEP_WIRE_ERR_OK)
			printf(" INVALID: %s", cep_wire_error_str(why));
		printf("\n");
	}
}

static void print_json(unsigned long frame, uint64_t ns, const struct dump_where *w,
		       const struct cep_msg *m)
{
	size_t n, nh;
	const struct cep_field *f = cep_wire_fields(m->type, &n);
	const struct cep_field *h = cep_wire_hdr_fields(&nh);
	char a[64], b[64];
	const char *sep = "";
	int flagged = 0;

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
	for (size_t i = 0; i < n; i++) {
		enum cep_wire_error why = cep_field_rule_broken(m, &f[i]);

		if (why == CEP_WIRE_ERR_OK)
			continue;
		printf("%s{\"field\":\"%s\",\"rule\":\"%s\",\"why\":\"%s\"}",
		       flagged++ ? "," : ",\"invalid\":[", f[i].name, cep_wire_error_name(why),
		       cep_wire_error_str(why));
	}
	printf("%s}\n", flagged ? "]" : "");
}

/* ---- per MAD ----------------------------------------------------------------- */

/* A MAD whose header is valid but a field holds a value the spec reserves
 * (docs/protocol.md, "Validation on receive"): the CM refuses it, cepdump
 * prints it, each such field flagged, and says so on stderr. */
static void report_invalid(struct dump_reader *r, unsigned long frame, const struct cep_msg *m)
{
	size_t n;
	const struct cep_field *f = cep_wire_fields(m->type, &n);

	r->flagged++;
	for (size_t i = 0; i < n; i++) {
		enum cep_wire_error why = cep_field_rule_broken(m, &f[i]);

		if (why != CEP_WIRE_ERR_OK)
			fprintf(stderr, "cepdump: frame %lu: %s %s = %" PRIu64 ": %s (%s; printed, "
				"field flagged)\n", frame, cep_msg_name(m->type), f[i].name,
				cep_field_host_get(m, &f[i]), cep_wire_error_str(why),
				cep_wire_error_name(why));
	}
}

static void on_mad(struct dump_reader *r, unsigned long frame, uint64_t ns,
		   const struct dump_where *w, const uint8_t *mad, size_t len)
{
	enum cep_wire_error why;
	struct cep_msg m;
	char msg[160];
	int rc;

	rc = cep_msg_decode_lax(mad, len, &m, &why);
	if (rc && rc != -EBADMSG) {
		snprintf(msg, sizeof(msg), "bad CM MAD: %s (%s)", cep_wire_error_name(why),
			 cep_wire_error_str(why));
		dump_bad(r, frame, msg);
		return;
	}
	r->cm++;
	if (rc)
		report_invalid(r, frame, &m);
	if (out_mode == OUT_VIEWS) {
		size_t n;
		const struct cep_field *f = cep_wire_fields(m.type, &n);
		const char *bad_field = NULL;
		uint64_t bad_value = 0;

		for (size_t i = 0; rc && i < n && !bad_field; i++)
			if (cep_field_rule_broken(&m, &f[i]) != CEP_WIRE_ERR_OK) {
				bad_field = f[i].name;
				bad_value = cep_field_host_get(&m, &f[i]);
			}
		conns_add(&conns, frame, ns, w, &m, bad_field, bad_value);
	} else if (out_mode == OUT_JSON)
		print_json(frame, ns, w, &m);
	else if (out_mode == OUT_VERBOSE)
		print_verbose(frame, ns, w, &m);
	else
		print_line(frame, ns, w, &m);
}

static void usage(FILE *o)
{
	fprintf(o,
		"usage: cepdump [-v | -j | --summary | --flow] [-q] [-r FILE | FILE]\n"
		"Print the IB CM MADs of a pcap or pcapng capture (RoCEv2, RoCEv1, Linux\n"
		"cooked, LINKTYPE_INFINIBAND), decoded and validated by libcep: one line\n"
		"per MAD by default.\n"
		"\n"
		"  -r FILE, --read FILE  read FILE (as tcpdump -r does); the same as naming\n"
		"                        FILE last; '-' reads standard input\n"
		"  -v, --verbose         every field of every MAD, one per line\n"
		"  -j, --json            one JSON object per MAD; keys are the spec's\n"
		"                        field names; 64-bit fields (service IDs, GUIDs,\n"
		"                        transaction IDs) are \"0x...\" strings\n"
		"  --summary             the capture's problems first (rejected, timed out,\n"
		"                        not established, retried connections, each with\n"
		"                        why), then MADs per type with retries and\n"
		"                        duplicates, REJ reasons by name and REQ->RTU setup\n"
		"                        latency percentiles\n"
		"  --flow                every connection and SIDR lookup as a ladder\n"
		"                        between its two ports, one line per MAD, problems\n"
		"                        first; with --summary, after it\n"
		"  -q, --quiet           no closing counts (frames, MADs, bad, other) on\n"
		"                        standard error\n"
		"  -h, --help            this help\n"
		"\n"
		"Exit status: 0, or 2 when the file cannot be read, is not a capture, or\n"
		"has no link type cepdump dissects; 2 also for a usage error.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "read", required_argument, NULL, 'r' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "flow", no_argument, NULL, OPT_FLOW },
		{ "summary", no_argument, NULL, OPT_SUMMARY },
		{ NULL, 0, NULL, 0 },
	};
	struct dump_reader rd = { .fn = on_mad };
	const char *path = NULL;
	int c, rc, quiet = 0, views = 0, per_mad = 0;
	FILE *in;

	while ((c = getopt_long(argc, argv, "vjr:qh", opts, NULL)) != -1) {
		switch (c) {
		case 'v': out_mode = OUT_VERBOSE; per_mad++; break;
		case 'j': out_mode = OUT_JSON; per_mad++; break;
		case 'r': path = optarg; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		case OPT_FLOW: views |= VIEW_FLOW; break;
		case OPT_SUMMARY: views |= VIEW_SUMMARY; break;
		default: usage(stderr); return 2;
		}
	}
	if (!path && optind < argc)
		path = argv[optind++];
	if (!path || optind < argc || (views && per_mad)) {
		if (views && per_mad)
			fprintf(stderr, "cepdump: --flow and --summary do not mix with -v or --json\n");
		usage(stderr);
		return 2;
	}
	if (views)
		out_mode = OUT_VIEWS;
	in = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!in) {
		fprintf(stderr, "cepdump: %s: %s\n", path, strerror(errno));
		return 2;
	}
	rd.name = path;
	rc = dump_read(in, &rd);
	if (in != stdin)
		fclose(in);
	if (rc == 0 && views) {
		conns_finish(&conns);
		if (views & VIEW_SUMMARY)
			report_summary(&conns, &rd);
		if (views == (VIEW_SUMMARY | VIEW_FLOW))
			printf("\n");
		if (views & VIEW_FLOW)
			report_flow(&conns, &rd);
	}
	conns_free(&conns);
	fflush(stdout);
	if (!quiet && rc == 0 && rd.flagged)
		fprintf(stderr, "cepdump: %lu frames, %lu CM MADs (%lu with invalid fields), "
			"%lu bad, %lu other\n", rd.frames, rd.cm, rd.flagged, rd.bad, rd.other);
	else if (!quiet && rc == 0)
		fprintf(stderr, "cepdump: %lu frames, %lu CM MADs, %lu bad, %lu other\n",
			rd.frames, rd.cm, rd.bad, rd.other);
	return rc;
}
