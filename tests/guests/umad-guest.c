/* SPDX-License-Identifier: MIT */
/*
 * Guest-side test of libcep's umad transport, using only the transport API.
 *   umad-guest echo   DEV SELF_IP PEER_IP COUNT READYFILE  (echo COUNT MADs)
 *   umad-guest ping   DEV SELF_IP PEER_IP COUNT   (COUNT echoes, then one
 *                       more whose callback calls stop(): echo COUNT+1)
 *   umad-guest reqrej DEV SELF_IP PEER_IP         (REQ to kernel CM -> REJ 8)
 *   umad-guest busy   DEV SELF_IP PEER_IP         (ib_cm loaded: open -EBUSY)
 * Exits 0 only when every check passed; prints what it saw either way.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cep/transport.h>
#include <cep/umad.h>
#include <cep/wire.h>

#define QP1_QKEY 0x80010000u
#define CM_CLASS 0x07
#define CM_VERSION 2
#define METHOD_SEND 0x03
#define ATTR_REQ 0x0010
#define ATTR_REJ 0x0012
#define ATTR_RTU 0x0014
#define REJ_INVALID_SERVICE_ID 8
#define CM_DATA 24 /* CM message fields start after the 24-byte MAD header */

static int failures;
#define CHECK(cond, ...) do { \
	if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
		printf(__VA_ARGS__); printf("\n"); } } while (0)

/* ---- receive queue: transport thread -> main thread ---- */
struct rx {
	uint8_t mad[CEP_MAD_SIZE];
	size_t len;
	struct cep_mad_addr from;
};
#define RXQ 64
static struct rx rxq[RXQ];
static unsigned rx_head, rx_tail;
static pthread_mutex_t rx_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rx_cond = PTHREAD_COND_INITIALIZER;
static unsigned rx_overflow;
/* Set by main: the next callback calls stop() on its own transport. */
static _Atomic int stop_in_callback;
static _Atomic int stopped_in_callback;

/* Transport receive thread; rx_lock orders the copy before the consumer. */
static void on_recv(void *ctx, const uint8_t *mad, size_t len,
		    const struct cep_mad_addr *from)
{
	struct cep_transport *t = ctx;

	if (atomic_load(&stop_in_callback) && !atomic_load(&stopped_in_callback)) {
		t->ops->stop(t);  /* must not wait for this very thread */
		atomic_store(&stopped_in_callback, 1);
	}
	pthread_mutex_lock(&rx_lock);
	if (rx_tail - rx_head == RXQ) {
		rx_overflow++;
	} else {
		struct rx *r = &rxq[rx_tail++ % RXQ];

		r->len = len > CEP_MAD_SIZE ? CEP_MAD_SIZE : len;
		memcpy(r->mad, mad, r->len);
		r->from = *from;
		pthread_cond_signal(&rx_cond);
	}
	pthread_mutex_unlock(&rx_lock);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Wait up to @ms for one received MAD. */
static int rx_wait(struct rx *out, int ms)
{
	struct timespec dl;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&rx_lock);
	while (rx_head == rx_tail && ret == 0)
		ret = pthread_cond_timedwait(&rx_cond, &rx_lock, &dl);
	if (rx_head != rx_tail) {
		*out = rxq[rx_head++ % RXQ];
		ret = 0;
	}
	pthread_mutex_unlock(&rx_lock);
	return ret ? -ETIMEDOUT : 0;
}

/* ---- big-endian field helpers for building MADs by hand ---- */
static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { put16(p, v >> 16); put16(p + 2, (uint16_t)v); }
static void put64(uint8_t *p, uint64_t v) { put32(p, v >> 32); put32(p + 4, (uint32_t)v); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get32(const uint8_t *p) { return (uint32_t)get16(p) << 16 | get16(p + 2); }

static void mad_header(uint8_t *m, uint64_t tid, uint16_t attr)
{
	memset(m, 0, CEP_MAD_SIZE);
	m[0] = 1;               /* base version */
	m[1] = CM_CLASS;
	m[2] = CM_VERSION;
	m[3] = METHOD_SEND;
	put64(m + 8, tid);
	put16(m + 16, attr);
}

static void gid_from_ipv4(uint8_t gid[16], const char *ip)
{
	struct in_addr a;

	memset(gid, 0, 16);
	if (inet_pton(AF_INET, ip, &a) != 1) {
		fprintf(stderr, "bad IPv4 address %s\n", ip);
		exit(2);
	}
	gid[10] = gid[11] = 0xff;
	memcpy(gid + 12, &a, 4);
}

static void gid_str(const uint8_t g[16], char *buf, size_t n)
{
	inet_ntop(AF_INET6, g, buf, (socklen_t)n);
}

static const char *dev;
static uint8_t self_gid[16], peer_gid[16];
static struct cep_port_info port;

static void check_port(struct cep_transport *t)
{
	char path[256], sysguid[64] = "", mine[64];
	uint64_t g = 0;
	uint8_t gb[8];
	FILE *f;
	int ret = t->ops->query_port(t, &port);

	CHECK(ret == 0, "query_port: %d", ret);
	gid_str(port.gid, mine, sizeof(mine));
	memcpy(gb, &port.ca_guid_net, 8);
	for (int i = 0; i < 8; i++)
		g = g << 8 | gb[i];
	printf("port: ca_guid %016" PRIx64 " gid[%u] %s lid %u link %u mtu %u pkey 0x%04x\n",
	       g, port.gid_index, mine, port.lid, port.link_layer,
	       port.active_mtu, port.pkey);
	CHECK(memcmp(port.gid, self_gid, 16) == 0, "port GID %s is not ours", mine);
	CHECK(port.link_layer == 2, "link layer %u, want 2 (Ethernet)", port.link_layer);
	CHECK(port.lid == 0, "LID %u on RoCE", port.lid);
	CHECK(port.port_num == 1, "port %u", port.port_num);
	CHECK(port.active_mtu >= 1 && port.active_mtu <= 5, "MTU enum %u", port.active_mtu);
	CHECK(port.pkey == 0xffff, "P_Key 0x%x", port.pkey);
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/node_guid", dev);
	f = fopen(path, "r");
	if (f) {
		if (!fgets(sysguid, sizeof(sysguid), f))
			sysguid[0] = '\0';
		fclose(f);
	}
	snprintf(mine, sizeof(mine), "%04x:%04x:%04x:%04x\n",
		 (unsigned)(g >> 48), (unsigned)(g >> 32) & 0xffff,
		 (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
	CHECK(g != 0 && strcmp(sysguid, mine) == 0, "CA GUID %s vs sysfs %s", mine, sysguid);
}

static void check_from(const struct cep_mad_addr *a)
{
	char s[64];

	gid_str(a->gid, s, sizeof(s));
	CHECK(a->grh_present == 1, "no GRH on RoCE");
	CHECK(memcmp(a->gid, peer_gid, 16) == 0, "from GID %s is not the peer's", s);
	CHECK(a->qpn == 1, "from QPN %u", a->qpn);
	CHECK(a->qkey == QP1_QKEY, "from Q_Key 0x%x", a->qkey);
	CHECK(a->lid == 0, "from LID %u", a->lid);
	CHECK(a->pkey_index == 0, "from P_Key index %u", a->pkey_index);
}

static struct cep_mad_addr peer_addr(void)
{
	struct cep_mad_addr to;

	memset(&to, 0, sizeof(to));
	to.qpn = 1;
	to.qkey = QP1_QKEY;
	to.grh_present = 1;
	to.hop_limit = 64;
	to.gid_index = port.gid_index;
	memcpy(to.gid, peer_gid, 16);
	return to;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void do_echo(struct cep_transport *t, int count, const char *ready)
{
	FILE *f = fopen(ready, "w");

	CHECK(f != NULL, "cannot create %s", ready);
	if (f)
		fclose(f);
	for (int n = 0; n < count; n++) {
		struct rx r;

		if (rx_wait(&r, 120000)) {
			CHECK(0, "echo: nothing received after %d MADs", n);
			return;
		}
		CHECK(r.len == CEP_MAD_SIZE, "echo: length %zu", r.len);
		CHECK(r.mad[1] == CM_CLASS && r.mad[2] == CM_VERSION &&
		      r.mad[3] == METHOD_SEND, "echo: not a CM Send MAD");
		check_from(&r.from);
		/* Answer to the address the MAD came from, unchanged. */
		int ret = t->ops->send(t, r.mad, r.len, &r.from);

		CHECK(ret == 0, "echo: send %d", ret);
	}
	printf("echo: %d MADs echoed\n", count);
}

static void do_ping(struct cep_transport *t, int count)
{
	struct cep_mad_addr to = peer_addr();
	double *rtt = calloc((size_t)count, sizeof(double));
	int hi_rewritten = 0, stray = 0;

	for (int i = 0; i < count && rtt; i++) {
		uint8_t m[CEP_MAD_SIZE];
		uint32_t tid_lo = 0x1000u + (uint32_t)i;
		struct rx r;
		int got = 0;

		mad_header(m, (uint64_t)0xdeadbeefu << 32 | tid_lo, ATTR_RTU);
		for (int j = CM_DATA; j < CEP_MAD_SIZE; j++)
			m[j] = (uint8_t)(i * 7 + j);
		for (int attempt = 0; attempt < 5 && !got; attempt++) {
			double t0 = now_ms();
			int ret = t->ops->send(t, m, sizeof(m), &to);

			CHECK(ret == 0, "ping: send %d", ret);
			while (rx_wait(&r, 2000) == 0) {
				if (get32(r.mad + 12) != tid_lo) {
					stray++;
					continue;
				}
				rtt[i] = now_ms() - t0;
				got = 1;
				break;
			}
		}
		if (!got) {
			CHECK(0, "ping %d: no echo after 5 attempts", i);
			break;
		}
		CHECK(r.len == CEP_MAD_SIZE, "ping %d: length %zu", i, r.len);
		/* Bytes 8..11 (TID high) are the kernel's; all others must match. */
		CHECK(memcmp(r.mad, m, 8) == 0 &&
		      memcmp(r.mad + 12, m + 12, CEP_MAD_SIZE - 12) == 0,
		      "ping %d: echoed bytes differ", i);
		if (get32(r.mad + 8) != 0xdeadbeefu)
			hi_rewritten++;
		check_from(&r.from);
		if (i == 0)
			printf("ping: echo from qpn %u qkey 0x%x lid %u sl %u pkey_index %u grh %u "
			       "gid_index %u hop_limit %u tclass %u flow_label 0x%x\n",
			       r.from.qpn, r.from.qkey, r.from.lid, r.from.sl,
			       r.from.pkey_index, r.from.grh_present, r.from.gid_index,
			       r.from.hop_limit, r.from.traffic_class, r.from.flow_label);
	}
	if (rtt && failures == 0) {
		qsort(rtt, (size_t)count, sizeof(double), cmp_dbl);
		printf("ping: %d echoes; round trip ms: min %.2f median %.2f max %.2f\n",
		       count, rtt[0], rtt[count / 2], rtt[count - 1]);
	}
	printf("ping: TID high 32 bits rewritten on %d of %d echoes; %d stray MADs\n",
	       hi_rewritten, count, stray);
	free(rtt);

	/* One more round trip whose delivery calls stop() from inside the
	 * receive function; the main thread's stop() then joins the thread. */
	uint8_t m[CEP_MAD_SIZE];
	struct rx r;

	mad_header(m, 0x3000, ATTR_RTU);
	atomic_store(&stop_in_callback, 1);
	CHECK(t->ops->send(t, m, sizeof(m), &to) == 0, "ping: last send");
	CHECK(rx_wait(&r, 10000) == 0, "ping: last echo not delivered");
	CHECK(atomic_load(&stopped_in_callback) == 1, "stop() in callback did not return");
	printf("ping: stop() from the receive function returned\n");
}

/* REQ (IBTA vol. 1, 12.6.5) for a service nobody listens on, built by hand;
 * offsets are from the start of the MAD. */
static void do_reqrej(struct cep_transport *t)
{
	struct cep_mad_addr to = peer_addr();
	const uint32_t comm_id = 0x5eed0001u;
	const uint64_t service_id = 0x10000000cafe0001ull;
	const uint32_t tid_lo = 0x2000u;
	uint8_t m[CEP_MAD_SIZE];
	struct rx r;
	int got = 0;

	mad_header(m, tid_lo, ATTR_REQ);
	put32(m + CM_DATA + 0, comm_id);                   /* Local Comm ID */
	put64(m + CM_DATA + 8, service_id);                /* ServiceID */
	memcpy(m + CM_DATA + 16, &port.ca_guid_net, 8);    /* Local CA GUID */
	put32(m + CM_DATA + 28, 0x11223344u);              /* Local Q_Key */
	put32(m + CM_DATA + 32, 0x000123u << 8 | 1);       /* QPN | resp. res. */
	put32(m + CM_DATA + 36, 0u << 8 | 1);              /* EECN | init. depth */
	/* Remote EECN 0 | remote CM resp. timeout 20 | RC (0) | E2E flow ctl 1 */
	put32(m + CM_DATA + 40, 20u << 3 | 0u << 1 | 1u);
	/* Starting PSN | local CM resp. timeout 20 | retry count 7 */
	put32(m + CM_DATA + 44, 0x00abcdu << 8 | 20u << 3 | 7u);
	put16(m + CM_DATA + 48, 0xffff);                   /* P_Key */
	m[CM_DATA + 50] = 3u << 4 | 0u << 3 | 7u;          /* MTU 1024 | RDC | RNR */
	m[CM_DATA + 51] = 15u << 4;                        /* max CM retries */
	put16(m + CM_DATA + 52, 0);                        /* primary local LID */
	put16(m + CM_DATA + 54, 0);                        /* primary remote LID */
	memcpy(m + CM_DATA + 56, port.gid, 16);            /* primary local GID */
	memcpy(m + CM_DATA + 72, peer_gid, 16);            /* primary remote GID */
	put32(m + CM_DATA + 88, 0u << 12 | 3u);            /* flow label | rate */
	m[CM_DATA + 92] = 0;                               /* traffic class */
	m[CM_DATA + 93] = 64;                              /* hop limit */
	m[CM_DATA + 94] = 0u << 4 | 0u << 3;               /* SL | subnet local */
	m[CM_DATA + 95] = 18u << 3;                        /* local ACK timeout */

	/* Cross-check the hand-built bytes with libcep's codec. */
	struct cep_msg dm;
	enum cep_wire_error why;
	int dret = cep_msg_decode(m, sizeof(m), &dm, &why);

	CHECK(dret == 0, "codec refuses our REQ: %s", cep_wire_error_str(why));
	if (dret == 0) {
		const struct cep_req *q = &dm.u.req;

		CHECK(dm.type == CEP_MSG_REQ && q->local_comm_id == comm_id &&
		      q->service_id == service_id && q->local_qpn == 0x123 &&
		      q->local_qkey == 0x11223344u && q->starting_psn == 0xabcd &&
		      q->remote_cm_response_timeout == 20 &&
		      q->local_cm_response_timeout == 20 && q->retry_count == 7 &&
		      q->partition_key == 0xffff && q->path_mtu == 3 &&
		      q->rnr_retry_count == 7 && q->max_cm_retries == 15 &&
		      q->end_to_end_flow_control == 1 &&
		      q->primary.hop_limit == 64 && q->primary.packet_rate == 3 &&
		      q->primary.local_ack_timeout == 18 &&
		      memcmp(q->primary.remote_gid, peer_gid, 16) == 0,
		      "codec reads other REQ fields than we wrote");
	}

	for (int attempt = 0; attempt < 5 && !got; attempt++) {
		int ret = t->ops->send(t, m, sizeof(m), &to);

		CHECK(ret == 0, "reqrej: send %d", ret);
		while (rx_wait(&r, 3000) == 0) {
			if (get16(r.mad + 16) == ATTR_REJ &&
			    get32(r.mad + CM_DATA + 4) == comm_id) {
				got = 1;
				break;
			}
			printf("reqrej: ignoring attribute 0x%04x\n", get16(r.mad + 16));
		}
	}
	if (!got) {
		CHECK(0, "reqrej: no REJ for our REQ after 5 attempts");
		return;
	}
	uint8_t msg_rejected = r.mad[CM_DATA + 8] >> 6;
	uint16_t reason = get16(r.mad + CM_DATA + 10);

	printf("reqrej: REJ local comm id 0x%08x, message rejected %u, reason %u, TID %08x:%08x\n",
	       get32(r.mad + CM_DATA), msg_rejected, reason,
	       get32(r.mad + 8), get32(r.mad + 12));
	CHECK(r.mad[1] == CM_CLASS && r.mad[2] == CM_VERSION && r.mad[3] == METHOD_SEND,
	      "REJ header class/version/method %02x/%02x/%02x", r.mad[1], r.mad[2], r.mad[3]);
	CHECK(get32(r.mad + 12) == tid_lo, "REJ TID low 32 bits 0x%08x", get32(r.mad + 12));
	CHECK(msg_rejected == 0, "message rejected %u, want 0 (REQ)", msg_rejected);
	CHECK(reason == REJ_INVALID_SERVICE_ID, "reason %u, want 8 (invalid service ID)", reason);
	check_from(&r.from);
	/* The kernel's REJ through libcep's codec must say the same. */
	dret = cep_msg_decode(r.mad, r.len, &dm, &why);
	CHECK(dret == 0, "codec refuses the kernel's REJ: %s", cep_wire_error_str(why));
	if (dret == 0)
		CHECK(dm.type == CEP_MSG_REJ && dm.u.rej.reason == reason &&
		      dm.u.rej.remote_comm_id == comm_id &&
		      dm.u.rej.message_rejected == msg_rejected,
		      "codec reads the REJ differently (reason %u)", dm.u.rej.reason);
}

int main(int argc, char **argv)
{
	struct cep_umad_attr attr;
	struct cep_transport *t = NULL;
	struct cep_umad_stats st;
	int ret;

	if (argc < 5) {
		fprintf(stderr, "usage: %s echo|ping|reqrej|busy DEV SELF_IP PEER_IP [COUNT] [READYFILE]\n",
			argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	dev = argv[2];
	gid_from_ipv4(self_gid, argv[3]);
	gid_from_ipv4(peer_gid, argv[4]);
	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.dev_name = dev;
	attr.port_num = 1;
	attr.gid_index = CEP_UMAD_GID_AUTO;
	ret = cep_umad_open(&attr, &t);
	if (strcmp(argv[1], "busy") == 0) {
		/* The kernel CM owns class 0x07 here: open must say so. */
		printf("busy: cep_umad_open(%s) = %d (%s)\n", dev, ret, strerror(-ret));
		if (ret == 0)
			t->ops->destroy(t);
		return ret == -EBUSY ? 0 : 1;
	}
	if (ret) {
		printf("FAIL cep_umad_open(%s): %s\n", dev, strerror(-ret));
		return 1;
	}
	check_port(t);
	ret = t->ops->start(t, on_recv, t);
	CHECK(ret == 0, "start: %d", ret);
	CHECK(t->ops->start(t, on_recv, t) == -EALREADY, "second start accepted");

	if (argc >= 6 && atoi(argv[5]) < 1)
		CHECK(0, "COUNT must be positive");
	else if (strcmp(argv[1], "echo") == 0 && argc >= 7)
		do_echo(t, atoi(argv[5]), argv[6]);
	else if (strcmp(argv[1], "ping") == 0 && argc >= 6)
		do_ping(t, atoi(argv[5]));
	else if (strcmp(argv[1], "reqrej") == 0)
		do_reqrej(t);
	else
		CHECK(0, "unknown mode or missing arguments: %s", argv[1]);

	t->ops->stop(t);
	t->ops->stop(t);  /* idempotent */
	ret = cep_umad_get_stats(t, &st);
	CHECK(ret == 0, "stats: %d", ret);
	printf("stats: sent %" PRIu64 " send_errors %" PRIu64 " received %" PRIu64
	       " recv_errors %" PRIu64 " recv_status %" PRIu64 " dropped %" PRIu64
	       " overflow %u\n", st.sent, st.send_errors, st.received,
	       st.recv_errors, st.recv_status, st.recv_dropped, rx_overflow);
	CHECK(st.send_errors == 0 && st.recv_errors == 0, "transport errors");
	t->ops->destroy(t);
	printf("%s: %s\n", argv[1], failures ? "FAILED" : "OK");
	return failures ? 1 : 0;
}
