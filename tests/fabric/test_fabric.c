/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the in-process fabric (cep/fabric.h): routing, fault
 * injection and its reproducibility, stop() finality under concurrent
 * sends, attribute checks. `test_fabric CASE`; `test_fabric bench [N]` is
 * the no-fault micro-benchmark. Seed: CEP_TEST_SEED, else from the clock
 * (printed, so a failure can be replayed).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cep/clock.h>
#include <cep/fabric.h>
#include <cep/pcap.h>

#define CHECK(c)                                                               \
	do {                                                                   \
		if (!(c)) {                                                    \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #c);                                 \
			exit(1);                                               \
		}                                                              \
	} while (0)
#define CHECK_RC(x, rc) CHECK((x) == (rc))

static uint64_t test_seed;

/* Set by a test that runs the fabric on a virtual clock: the sink and the
 * test stamp that clock's time, so delays are checked exactly. */
static struct cep_clock *vclk;

static uint64_t now_ns(void)
{
	struct timespec ts;

	if (vclk)
		return cep_clock_now_ns(vclk);

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --- a receive sink ----------------------------------------------------- */

#define SINK_MAX 8192

struct sink {
	pthread_mutex_t lock;
	size_t n;                     /* MADs received (lock) */
	uint32_t ids[SINK_MAX];       /* their ids in arrival order (lock) */
	uint64_t at_ns[SINK_MAX];
	uint8_t last[CEP_MAD_SIZE];
	size_t last_len;
	struct cep_mad_addr last_from;
};

static void sink_init(struct sink *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
}

static size_t sink_count(struct sink *s)
{
	size_t n;

	pthread_mutex_lock(&s->lock);
	n = s->n;
	pthread_mutex_unlock(&s->lock);
	return n;
}

static void sink_recv(void *ctx, const uint8_t *mad, size_t len,
		      const struct cep_mad_addr *from)
{
	struct sink *s = ctx;
	uint32_t id;

	memcpy(&id, mad + 16, sizeof(id));
	pthread_mutex_lock(&s->lock);
	if (s->n < SINK_MAX) {
		s->ids[s->n] = id;
		s->at_ns[s->n] = now_ns();
	}
	s->n++;
	memcpy(s->last, mad, len);
	s->last_len = len;
	s->last_from = *from;
	pthread_mutex_unlock(&s->lock);
}

static void mad_fill(uint8_t *mad, uint32_t id)
{
	for (int i = 0; i < CEP_MAD_SIZE; i++)
		mad[i] = (uint8_t)(i * 7 + id);
	memcpy(mad + 16, &id, sizeof(id));
}

/* --- helpers -------------------------------------------------------------- */

static struct cep_fabric *fabric_new(uint64_t seed)
{
	struct cep_fabric_attr a = { .size = sizeof(a), .seed = seed };
	struct cep_fabric *f = NULL;

	CHECK_RC(cep_fabric_create(&a, &f), 0);
	return f;
}

static struct cep_transport *ib_port(struct cep_fabric *f, uint64_t guid, uint16_t lid)
{
	struct cep_fabric_port_attr a = { .size = sizeof(a), .ca_guid = guid, .lid = lid,
					  .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_transport *t = NULL;

	CHECK_RC(cep_fabric_port_create(f, &a, &t), 0);
	return t;
}

static struct cep_transport *roce_port(struct cep_fabric *f, uint64_t guid, uint32_t ipv4)
{
	struct cep_fabric_port_attr a = { .size = sizeof(a), .ca_guid = guid,
					  .port_num = 1, .link_layer = CEP_FABRIC_LINK_ROCE };
	struct cep_transport *t = NULL;

	if (ipv4) { /* ::ffff:a.b.c.d, the RoCE v2 GID of an IPv4 address */
		a.gid[10] = 0xff;
		a.gid[11] = 0xff;
		a.gid[12] = (uint8_t)(ipv4 >> 24);
		a.gid[13] = (uint8_t)(ipv4 >> 16);
		a.gid[14] = (uint8_t)(ipv4 >> 8);
		a.gid[15] = (uint8_t)ipv4;
	}
	CHECK_RC(cep_fabric_port_create(f, &a, &t), 0);
	return t;
}

static void start(struct cep_transport *t, struct sink *s)
{
	CHECK_RC(t->ops->start(t, sink_recv, s), 0);
}

static struct cep_mad_addr to_lid(uint16_t lid)
{
	struct cep_mad_addr a;

	memset(&a, 0, sizeof(a));
	a.lid = lid;
	a.qpn = 1;
	a.qkey = 0x80010000u;
	return a;
}

static struct cep_mad_addr to_port_gid(struct cep_transport *t)
{
	struct cep_port_info pi;
	struct cep_mad_addr a = to_lid(0);

	CHECK_RC(t->ops->query_port(t, &pi), 0);
	memcpy(a.gid, pi.gid, 16);
	a.grh_present = 1;
	return a;
}

static int send_id(struct cep_transport *t, const struct cep_mad_addr *to, uint32_t id)
{
	uint8_t mad[CEP_MAD_SIZE];

	mad_fill(mad, id);
	return t->ops->send(t, mad, sizeof(mad), to);
}

static struct cep_fabric_stats stats(struct cep_fabric *f)
{
	struct cep_fabric_stats s = { .size = sizeof(s) };

	CHECK_RC(cep_fabric_stats(f, &s), 0);
	return s;
}

/* Every copy ends exactly once (see cep_fabric_stats). */
static void check_balance(struct cep_fabric *f)
{
	struct cep_fabric_stats s = stats(f);

	CHECK(s.delivered + s.lost + s.no_route + s.dropped_stopped + s.dropped_full ==
	      s.sent + s.duplicated);
}

static uint32_t hold_us = 2000;

static void set_faults(struct cep_fabric *f, double loss, double dup, double reorder,
		       uint32_t dmin, uint32_t dmax)
{
	struct cep_fabric_faults x = { .size = sizeof(x), .loss = loss, .duplicate = dup,
				       .reorder = reorder, .delay_min_us = dmin,
				       .delay_max_us = dmax, .hold_max_us = hold_us };

	CHECK_RC(cep_fabric_set_faults(f, &x), 0);
}

static void teardown(struct cep_fabric *f, struct cep_transport **ports, int n)
{
	for (int i = 0; i < n; i++)
		ports[i]->ops->destroy(ports[i]);
	CHECK_RC(cep_fabric_destroy(f), 0);
}

/* --- cases ---------------------------------------------------------------- */

static void t_routing_lid(void)
{
	struct cep_fabric *f = fabric_new(test_seed);
	struct cep_transport *p[3] = { ib_port(f, 0x1000, 1), ib_port(f, 0x2000, 2),
				       ib_port(f, 0x3000, 3) };
	static struct sink s[3];
	struct cep_mad_addr to = to_lid(2);
	struct cep_port_info pi;
	uint8_t mad[CEP_MAD_SIZE];
	static const uint8_t gid_a[16] = { 0xfe, 0x80, 0, 0, 0, 0, 0, 0,
					   0, 0, 0, 0, 0, 0, 0x10, 0x00 };

	for (int i = 0; i < 3; i++) {
		sink_init(&s[i]);
		start(p[i], &s[i]);
	}
	CHECK_RC(p[0]->ops->query_port(p[0], &pi), 0);
	CHECK(pi.lid == 1 && pi.link_layer == CEP_FABRIC_LINK_IB && pi.port_num == 1);
	CHECK(!memcmp(pi.gid, gid_a, 16));              /* fe80::guid */
	CHECK(pi.ca_guid_net == __builtin_bswap64(0x1000)); /* network order */

	to.sl = 5;
	mad_fill(mad, 42);
	CHECK_RC(p[0]->ops->send(p[0], mad, sizeof(mad), &to), 0);
	/* No faults: delivered synchronously, before send() returned. */
	CHECK(sink_count(&s[1]) == 1 && sink_count(&s[0]) == 0 && sink_count(&s[2]) == 0);
	CHECK(s[1].last_len == CEP_MAD_SIZE && !memcmp(s[1].last, mad, CEP_MAD_SIZE));
	CHECK(s[1].last_from.lid == 1 && s[1].last_from.qpn == 1);
	CHECK(s[1].last_from.qkey == 0x80010000u && s[1].last_from.pkey_index == 0);
	CHECK(s[1].last_from.sl == 5 && s[1].last_from.grh_present == 0);
	CHECK(!memcmp(s[1].last_from.gid, gid_a, 16));

	/* Shorter MADs pass as they are. */
	to = to_lid(3);
	CHECK_RC(p[1]->ops->send(p[1], mad, 100, &to), 0);
	CHECK(sink_count(&s[2]) == 1 && s[2].last_len == 100 && s[2].last_from.lid == 2);
	/* A port may send to itself (loopback). */
	CHECK_RC(p[2]->ops->send(p[2], mad, 256, &to), 0);
	CHECK(sink_count(&s[2]) == 2 && s[2].last_from.lid == 3);

	/* IB ports are reachable by GID too (to->lid == 0). */
	to = to_port_gid(p[0]);
	CHECK_RC(send_id(p[2], &to, 7), 0);
	CHECK(sink_count(&s[0]) == 1 && s[0].last_from.grh_present == 1);

	CHECK(stats(f).delivered == 4 && stats(f).sent == 4);
	check_balance(f);
	teardown(f, p, 3);
}

static void t_routing_gid(void)
{
	struct cep_fabric *f = fabric_new(test_seed);
	struct cep_transport *p[3] = { roce_port(f, 0xa1, 0x0a000001), roce_port(f, 0xa2, 0),
				       ib_port(f, 0xb1, 9) };
	static struct sink s[3];
	struct cep_port_info pi[2];
	struct cep_mad_addr to;

	for (int i = 0; i < 3; i++) {
		sink_init(&s[i]);
		start(p[i], &s[i]);
	}
	CHECK_RC(p[0]->ops->query_port(p[0], &pi[0]), 0);
	CHECK_RC(p[1]->ops->query_port(p[1], &pi[1]), 0);
	CHECK(pi[0].lid == 0 && pi[0].link_layer == CEP_FABRIC_LINK_ROCE);
	CHECK(pi[0].gid[10] == 0xff && pi[0].gid[15] == 1);
	CHECK(pi[1].gid[0] == 0xfe && pi[1].gid[1] == 0x80 && pi[1].gid[15] == 0xa2);

	to = to_port_gid(p[1]);
	CHECK_RC(send_id(p[0], &to, 1), 0);
	CHECK(sink_count(&s[1]) == 1 && sink_count(&s[0]) == 0);
	CHECK(s[1].last_from.lid == 0 && s[1].last_from.grh_present == 1);
	CHECK(!memcmp(s[1].last_from.gid, pi[0].gid, 16));

	to = to_port_gid(p[0]);
	CHECK_RC(send_id(p[1], &to, 2), 0);
	CHECK(sink_count(&s[0]) == 1 && !memcmp(s[0].last_from.gid, pi[1].gid, 16));

	/* Link layers do not mix: RoCE -> IB and IB -> RoCE find no route. */
	to = to_port_gid(p[2]);
	CHECK_RC(send_id(p[0], &to, 3), 0);
	to = to_port_gid(p[0]);
	CHECK_RC(send_id(p[2], &to, 4), 0);
	CHECK(sink_count(&s[2]) == 0 && sink_count(&s[0]) == 1);
	CHECK(stats(f).no_route == 2 && stats(f).delivered == 2);
	check_balance(f);
	teardown(f, p, 3);
}

static void t_no_route(void)
{
	struct cep_fabric *f = fabric_new(test_seed);
	struct cep_transport *p[3] = { ib_port(f, 0x1, 1), ib_port(f, 0x2, 2), ib_port(f, 0x3, 3) };
	static struct sink s;
	struct cep_mad_addr to = to_lid(77);
	struct cep_fabric_stats st;

	sink_init(&s);
	start(p[0], &s);
	CHECK_RC(send_id(p[0], &to, 1), 0);        /* unknown LID */
	to = to_lid(0);
	memset(to.gid, 0xee, 16);
	CHECK_RC(send_id(p[0], &to, 2), 0);        /* unknown GID */
	to = to_lid(2);
	CHECK_RC(send_id(p[0], &to, 3), 0);        /* created, never started */
	p[2]->ops->stop(p[2]);
	to = to_lid(3);
	CHECK_RC(send_id(p[0], &to, 4), 0);        /* stopped */
	st = stats(f);
	CHECK(st.sent == 4 && st.no_route == 2 && st.dropped_stopped == 2 && st.delivered == 0);
	/* A destroyed port's LID no longer routes, and can be reused. */
	p[1]->ops->destroy(p[1]);
	to = to_lid(2);
	CHECK_RC(send_id(p[0], &to, 5), 0);
	CHECK(stats(f).no_route == 3);
	p[1] = ib_port(f, 0x22, 2);
	start(p[1], &s);
	CHECK_RC(send_id(p[0], &to, 6), 0);
	CHECK(stats(f).delivered == 1 && sink_count(&s) == 1);
	/* The same with faults on (the queued path resolves at delivery). */
	set_faults(f, 0, 0, 0, 100, 200);
	to = to_lid(99);
	CHECK_RC(send_id(p[0], &to, 7), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	CHECK(stats(f).no_route == 4);
	check_balance(f);
	teardown(f, p, 3);
}

static void t_loss(void)
{
	struct cep_fabric *f = fabric_new(test_seed);
	struct cep_transport *p[2] = { ib_port(f, 0x1, 1), ib_port(f, 0x2, 2) };
	static struct sink s;
	struct cep_mad_addr to = to_lid(2);
	struct cep_fabric_stats st;
	const int n = 1000;

	sink_init(&s);
	start(p[1], &s);
	set_faults(f, 1.0, 0, 0, 0, 0);
	for (int i = 0; i < n; i++)
		CHECK_RC(send_id(p[0], &to, (uint32_t)i), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	st = stats(f);
	CHECK(sink_count(&s) == 0 && st.lost == (uint64_t)n && st.delivered == 0);

	/* 0% loss on the faulted path (a 1 us delay keeps faults on). */
	set_faults(f, 0.0, 0, 0, 1, 1);
	for (int i = 0; i < n; i++)
		CHECK_RC(send_id(p[0], &to, (uint32_t)i), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	CHECK(sink_count(&s) == (size_t)n && stats(f).lost == (uint64_t)n);

	/* 30%: within 7 sigma of 300 of 1000. */
	set_faults(f, 0.3, 0, 0, 0, 0);
	for (int i = 0; i < n; i++)
		CHECK_RC(send_id(p[0], &to, (uint32_t)i), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	st = stats(f);
	CHECK(st.lost - n >= 200 && st.lost - n <= 400);
	CHECK(sink_count(&s) == (size_t)(3 * n) - st.lost);
	check_balance(f);
	teardown(f, p, 2);
}

static void t_duplicate(void)
{
	struct cep_fabric *f = fabric_new(test_seed);
	struct cep_transport *p[2] = { ib_port(f, 0x1, 1), ib_port(f, 0x2, 2) };
	static struct sink s;
	struct cep_mad_addr to = to_lid(2);
	struct cep_fabric_stats st;
	static unsigned seen[1000];
	const int n = 1000;

	sink_init(&s);
	start(p[1], &s);
	set_faults(f, 0, 1.0, 0, 0, 0);
	for (int i = 0; i < n; i++)
		CHECK_RC(send_id(p[0], &to, (uint32_t)i), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	CHECK(sink_count(&s) == (size_t)(2 * n) && stats(f).duplicated == (uint64_t)n);
	for (size_t i = 0; i < s.n; i++)
		seen[s.ids[i]]++;
	for (int i = 0; i < n; i++)
		CHECK(seen[i] == 2);

	set_faults(f, 0, 0.25, 0, 0, 0);
	for (int i = 0; i < n; i++)
		CHECK_RC(send_id(p[0], &to, (uint32_t)i), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	st = stats(f);
	CHECK(st.duplicated - n >= 150 && st.duplicated - n <= 350);
	CHECK(sink_count(&s) == 3 * (size_t)n + (st.duplicated - n));
	check_balance(f);
	teardown(f, p, 2);
}

static void t_reorder(void)
{
	struct cep_fabric *f = fabric_new(test_seed);
	struct cep_transport *p[2] = { ib_port(f, 0x1, 1), ib_port(f, 0x2, 2) };
	static struct sink s;
	struct cep_mad_addr to = to_lid(2);
	static unsigned seen[1000];
	const int n = 1000;
	unsigned inversions = 0, maxid = 0;

	sink_init(&s);
	start(p[1], &s);
	set_faults(f, 0, 0, 0.2, 0, 0);
	for (int i = 0; i < n; i++)
		CHECK_RC(send_id(p[0], &to, (uint32_t)i), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	CHECK(sink_count(&s) == (size_t)n);
	for (size_t i = 0; i < s.n; i++) {
		seen[s.ids[i]]++;
		if (s.ids[i] < maxid)
			inversions++;
		else
			maxid = s.ids[i];
	}
	for (int i = 0; i < n; i++)
		CHECK(seen[i] == 1);
	printf("reordered %" PRIu64 ", arrivals behind a later MAD %u\n",
	       stats(f).reordered, inversions);
	CHECK(stats(f).reordered >= 100 && stats(f).reordered <= 300);
	/* Every held MAD is released behind the next send's MAD. */
	CHECK(inversions > 0);

	/* Two sends: the first held, the second not -> arrive as 2, 1. With
	 * p = 1 every MAD is held, so find a seed-stream position by trying
	 * p = 0.5 on fresh fabrics until the first is held and the second is
	 * not; the decision is a pure function, so this terminates fast. */
	teardown(f, p, 2);
	hold_us = 400000;
	for (uint64_t seed = 1;; seed++) {
		static struct sink s2;

		f = fabric_new(seed);
		p[0] = ib_port(f, 0x1, 1);
		p[1] = ib_port(f, 0x2, 2);
		sink_init(&s2);
		start(p[1], &s2);
		set_faults(f, 0, 0, 0.5, 0, 0);
		CHECK_RC(send_id(p[0], &to, 1), 0);
		if (stats(f).reordered != 1 || sink_count(&s2) != 0) {
			teardown(f, p, 2);
			continue;
		}
		CHECK_RC(send_id(p[0], &to, 2), 0);
		if (stats(f).reordered != 1) {
			teardown(f, p, 2);
			continue;
		}
		CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
		CHECK(sink_count(&s2) == 2 && s2.ids[0] == 2 && s2.ids[1] == 1);
		/* The release came from the next send, not the 400 ms hold. */
		CHECK(s2.at_ns[1] - s2.at_ns[0] < 200000000u);
		teardown(f, p, 2);
		break;
	}
}

/* Delays on a virtual clock (cep/clock.h): nothing arrives before the
 * minimum delay, everything by the maximum, each MAD between the two -
 * exact, so a loaded machine cannot make it flake. */
static void t_delay(void)
{
	struct cep_fabric_attr a = { .size = sizeof(a), .seed = test_seed };
	struct cep_fabric *f = NULL;
	static struct sink s;
	struct cep_mad_addr to = to_lid(2);
	uint64_t sent_at[20];
	const int n = 20;

	CHECK_RC(cep_clock_create(1000000000u, &vclk), 0);
	a.clock = vclk;
	CHECK_RC(cep_fabric_create(&a, &f), 0);
	struct cep_transport *p[2] = { ib_port(f, 0x1, 1), ib_port(f, 0x2, 2) };

	sink_init(&s);
	start(p[1], &s);
	set_faults(f, 0, 0, 0, 20000, 30000);
	for (int i = 0; i < n; i++) {
		sent_at[i] = now_ns();
		CHECK_RC(send_id(p[0], &to, (uint32_t)i), 0);
	}
	CHECK_RC(cep_clock_quiesce(vclk, 5000), 0);
	CHECK(sink_count(&s) == 0);
	CHECK_RC(cep_clock_advance_ns(vclk, 20000000u - 1), 0); /* 1 ns short */
	CHECK_RC(cep_clock_quiesce(vclk, 5000), 0);
	CHECK(sink_count(&s) == 0);
	CHECK_RC(cep_clock_advance_ns(vclk, 10000000u + 1), 0);
	CHECK_RC(cep_clock_quiesce(vclk, 5000), 0);
	CHECK(sink_count(&s) == (size_t)n && stats(f).delayed == (uint64_t)n);
	for (int i = 0; i < n && i < (int)sink_count(&s); i++) {
		uint32_t id = s.ids[i];
		uint64_t d = s.at_ns[i] - sent_at[id];

		CHECK(d >= 20000000u);
		CHECK(d <= 30000000u);
	}
	/* Only an advance delivers: a MAD due later does not hold up a
	 * quiesce (fabric.h) and stays undelivered, however long the
	 * machine takes, until its time comes. */
	set_faults(f, 0, 0, 0, 300000, 300000);
	CHECK_RC(send_id(p[0], &to, 1), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	usleep(20000);
	CHECK(sink_count(&s) == (size_t)n);
	CHECK_RC(cep_clock_advance_ns(vclk, 300000000u - 1), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	CHECK(sink_count(&s) == (size_t)n);
	CHECK_RC(cep_clock_advance_ns(vclk, 1), 0);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	CHECK(sink_count(&s) == (size_t)n + 1);
	check_balance(f);
	teardown(f, p, 2);
	CHECK_RC(cep_clock_destroy(vclk), 0);
	vclk = NULL;
}

static void t_cap(void)
{
	struct cep_fabric_attr a = { .size = sizeof(a), .seed = test_seed, .max_in_flight = 10 };
	struct cep_fabric *f;
	struct cep_transport *p[2];
	static struct sink s;
	struct cep_mad_addr to = to_lid(2);

	CHECK_RC(cep_fabric_create(&a, &f), 0);
	p[0] = ib_port(f, 0x1, 1);
	p[1] = ib_port(f, 0x2, 2);
	sink_init(&s);
	start(p[1], &s);
	set_faults(f, 0, 0, 0, 50000, 50000);
	for (int i = 0; i < 25; i++)
		CHECK_RC(send_id(p[0], &to, (uint32_t)i), 0);
	CHECK(stats(f).dropped_full == 15);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	CHECK(sink_count(&s) == 10);
	/* Destroying the fabric with MADs still held frees them (ASan). */
	set_faults(f, 0, 0, 0, 1000000, 1000000);
	CHECK_RC(send_id(p[0], &to, 99), 0);
	teardown(f, p, 2);
}

/* One run of a fixed scenario: per-id delivery counts and the counters. */
static void seed_run(uint64_t seed, unsigned *counts, struct cep_fabric_stats *st)
{
	struct cep_fabric *f = fabric_new(seed);
	struct cep_transport *p[3] = { ib_port(f, 0x1, 1), ib_port(f, 0x2, 2), ib_port(f, 0x3, 3) };
	static struct sink s;
	struct cep_mad_addr to2 = to_lid(2), to3 = to_lid(3);

	sink_init(&s);
	start(p[1], &s);
	start(p[2], &s);
	set_faults(f, 0.2, 0.2, 0.2, 0, 300);
	for (uint32_t i = 0; i < 1000; i++) {
		CHECK_RC(send_id(p[0], i % 3 ? &to2 : &to3, i), 0);
		CHECK_RC(send_id(p[1], &to3, 1000 + i), 0);
	}
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	memset(counts, 0, 2000 * sizeof(*counts));
	for (size_t i = 0; i < s.n; i++)
		counts[s.ids[i]]++;
	*st = stats(f);
	check_balance(f);
	teardown(f, p, 3);
}

static void t_seed(void)
{
	static unsigned a[2000], b[2000], c[2000];
	struct cep_fabric_stats sa, sb, sc;
	uint64_t seed = test_seed ? test_seed : 0x5eed;
	uint64_t got;
	struct cep_fabric *f = fabric_new(0);

	/* seed 0: derived from the clock, non-zero, readable. */
	CHECK_RC(cep_fabric_get_seed(f, &got), 0);
	CHECK(got != 0);
	CHECK_RC(cep_fabric_destroy(f), 0);

	seed_run(seed, a, &sa);
	seed_run(seed, b, &sb);
	seed_run(seed + 1, c, &sc);
	CHECK(!memcmp(a, b, sizeof(a)));
	CHECK(sa.lost == sb.lost && sa.duplicated == sb.duplicated &&
	      sa.reordered == sb.reordered && sa.delayed == sb.delayed &&
	      sa.delivered == sb.delivered);
	CHECK(sa.lost > 0 && sa.duplicated > 0 && sa.reordered > 0);
	CHECK(memcmp(a, c, sizeof(a)) != 0);  /* another seed, another pattern */
}

/* Every delivered MAD (and only those) reaches the process-wide capture. */
static void t_capture(void)
{
	struct cep_fabric *f = fabric_new(test_seed);
	struct cep_transport *p[2] = { ib_port(f, 0x1, 1), ib_port(f, 0x2, 2) };
	static struct sink s;
	struct cep_mad_addr to = to_lid(2), nowhere = to_lid(9);
	char path[] = "/tmp/cep-fabric-capture-XXXXXX";
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	close(fd);
	sink_init(&s);
	start(p[1], &s);
	CHECK_RC(cep_capture_start(path, CEP_PCAP_INFINIBAND), 0);
	CHECK_RC(send_id(p[0], &to, 1), 0);
	CHECK_RC(send_id(p[0], &to, 2), 0);
	CHECK_RC(send_id(p[0], &nowhere, 3), 0);   /* not delivered: not captured */
	set_faults(f, 0, 0, 0, 100, 100);
	CHECK_RC(send_id(p[0], &to, 4), 0);        /* via the delivery thread */
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	CHECK(cep_capture_count() == 3 && sink_count(&s) == 3);
	CHECK_RC(cep_capture_stop(), 0);
	unlink(path);
	teardown(f, p, 2);
}

/* --- stop() finality under concurrent sends ------------------------------- */

struct stop_rx {
	_Atomic int stopped;  /* set after stop() returned */
	_Atomic int violations;
	uint64_t plain;       /* written by fn without atomics: TSan sees a race
			       * if fn ever overlaps the code after stop() */
};

static void stop_recv(void *ctx, const uint8_t *mad, size_t len,
		      const struct cep_mad_addr *from)
{
	struct stop_rx *r = ctx;

	if (atomic_load(&r->stopped))
		atomic_fetch_add(&r->violations, 1);
	r->plain += mad[0] + len + from->lid; /* only one sender thread per rx port */
	/* Linger a little so an overlap with stop() is likely to be seen
	 * without TSan too. */
	for (int i = 0; i < 200; i++)
		(void)atomic_load_explicit(&r->stopped, memory_order_relaxed);
	if (atomic_load(&r->stopped))
		atomic_fetch_add(&r->violations, 1);
}

struct stop_sender {
	struct cep_transport *t;
	uint16_t dst_lid;
	_Atomic int *run;
	uint64_t sent;
};

static void *stop_sender_main(void *arg)
{
	struct stop_sender *s = arg;
	struct cep_mad_addr to = to_lid(s->dst_lid);
	uint8_t mad[CEP_MAD_SIZE];

	mad_fill(mad, 0);
	while (atomic_load(s->run)) {
		CHECK_RC(s->t->ops->send(s->t, mad, sizeof(mad), &to), 0);
		s->sent++;
	}
	return NULL;
}

static void stop_round(bool faults)
{
	struct cep_fabric *f = fabric_new(test_seed);
	struct cep_transport *tx = ib_port(f, 0x1, 1);
	static struct stop_rx rx;
	_Atomic int run = 1;
	struct stop_sender snd = { .t = tx, .dst_lid = 2, .run = &run };
	pthread_t th;
	uint64_t total = 0;

	if (faults)
		set_faults(f, 0, 0.3, 0.3, 1, 50); /* min 1: one delivering thread */
	CHECK_RC(pthread_create(&th, NULL, stop_sender_main, &snd), 0);
	/* Create, start, stop, destroy the receiving port under fire; the
	 * slot is reused each round. */
	for (int round = 0; round < 200; round++) {
		struct cep_transport *t = ib_port(f, 0x2, 2);
		uint64_t before;

		atomic_store(&rx.stopped, 0);
		CHECK_RC(t->ops->start(t, stop_recv, &rx), 0);
		before = stats(f).delivered;
		for (int spin = 0; spin < 100000 && stats(f).delivered < before + 20; spin++)
			sched_yield();
		t->ops->stop(t);
		atomic_store(&rx.stopped, 1);
		total += rx.plain;    /* races with fn if stop() lied */
		rx.plain = 0;
		for (int spin = 0; spin < 50; spin++)
			sched_yield();
		t->ops->destroy(t);
	}
	atomic_store(&run, 0);
	pthread_join(th, NULL);
	CHECK_RC(cep_fabric_quiesce(f, 5000), 0);
	CHECK(atomic_load(&rx.violations) == 0);
	CHECK(stats(f).delivered > 0 && stats(f).dropped_stopped + stats(f).no_route > 0);
	printf("stop%s: %" PRIu64 " sent, %" PRIu64 " delivered, %" PRIu64 " dropped (stopped), %"
	       PRIu64 " no route, checksum %" PRIu64 "\n", faults ? " (faults)" : "", snd.sent,
	       stats(f).delivered, stats(f).dropped_stopped, stats(f).no_route, total);
	check_balance(f);
	tx->ops->destroy(tx);
	CHECK_RC(cep_fabric_destroy(f), 0);
}

static void t_stop(void)
{
	stop_round(false);
	stop_round(true);
}

/* --- bad attributes -------------------------------------------------------- */

static void t_bad_attrs(void)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = 0x1, .lid = 1,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_fabric_faults x = { .size = sizeof(x) };
	struct cep_fabric *f = NULL;
	struct cep_transport *t = NULL, *u = NULL;
	struct cep_fabric_port_attr bad;
	struct cep_mad_addr to = to_lid(2);
	static struct sink s;
	struct cep_fabric_stats st = { .size = 0 };
	uint8_t mad[CEP_MAD_SIZE + 1] = { 0 };

	CHECK_RC(cep_fabric_create(NULL, &f), -EINVAL);
	CHECK_RC(cep_fabric_create(&fa, NULL), -EINVAL);
	fa.size = 4;
	CHECK_RC(cep_fabric_create(&fa, &f), -EINVAL);
	fa.size = sizeof(fa);
	fa.max_ports = 5000;
	CHECK_RC(cep_fabric_create(&fa, &f), -EINVAL);
	CHECK(f == NULL);
	fa.max_ports = 2;
	CHECK_RC(cep_fabric_create(&fa, &f), 0);

	bad = pa; bad.size = 8;
	CHECK_RC(cep_fabric_port_create(f, &bad, &t), -EINVAL);
	bad = pa; bad.lid = 0;
	CHECK_RC(cep_fabric_port_create(f, &bad, &t), -EINVAL);
	bad = pa; bad.lid = 0xc000;          /* multicast range */
	CHECK_RC(cep_fabric_port_create(f, &bad, &t), -EINVAL);
	bad = pa; bad.link_layer = CEP_FABRIC_LINK_ROCE;  /* RoCE with a LID */
	CHECK_RC(cep_fabric_port_create(f, &bad, &t), -EINVAL);
	bad = pa; bad.link_layer = 3;
	CHECK_RC(cep_fabric_port_create(f, &bad, &t), -EINVAL);
	bad = pa; bad.ca_guid = 0;
	CHECK_RC(cep_fabric_port_create(f, &bad, &t), -EINVAL);
	bad = pa; bad.port_num = 0;
	CHECK_RC(cep_fabric_port_create(f, &bad, &t), -EINVAL);
	CHECK_RC(cep_fabric_port_create(f, NULL, &t), -EINVAL);
	CHECK(t == NULL);

	CHECK_RC(cep_fabric_port_create(f, &pa, &t), 0);
	bad = pa; bad.ca_guid = 0x99;        /* same LID */
	CHECK_RC(cep_fabric_port_create(f, &bad, &u), -EEXIST);
	bad = pa; bad.lid = 2;               /* same derived GID */
	CHECK_RC(cep_fabric_port_create(f, &bad, &u), -EEXIST);
	bad = pa; bad.lid = 2; bad.port_num = 2; /* port 2 of the same CA */
	CHECK_RC(cep_fabric_port_create(f, &bad, &u), 0);
	bad = pa; bad.lid = 3; bad.ca_guid = 0x77;
	CHECK_RC(cep_fabric_port_create(f, &bad, &t), -ENOSPC); /* max_ports 2 */
	CHECK_RC(cep_fabric_destroy(f), -EBUSY);

	sink_init(&s);
	CHECK_RC(u->ops->start(u, NULL, &s), -EINVAL);
	start(u, &s);
	CHECK_RC(u->ops->start(u, sink_recv, &s), -EALREADY);

	/* Faults: rejected and nothing changes (still synchronous). */
	x.loss = -0.1;
	CHECK_RC(cep_fabric_set_faults(f, &x), -EINVAL);
	x.loss = 1.5;
	CHECK_RC(cep_fabric_set_faults(f, &x), -EINVAL);
	x.loss = NAN;
	CHECK_RC(cep_fabric_set_faults(f, &x), -EINVAL);
	x.loss = 1.0; x.duplicate = 2;
	CHECK_RC(cep_fabric_set_faults(f, &x), -EINVAL);
	x.duplicate = 0; x.reorder = -1;
	CHECK_RC(cep_fabric_set_faults(f, &x), -EINVAL);
	x.reorder = 0; x.delay_min_us = 10; x.delay_max_us = 5;
	CHECK_RC(cep_fabric_set_faults(f, &x), -EINVAL);
	x.delay_min_us = 0; x.delay_max_us = 20000000;
	CHECK_RC(cep_fabric_set_faults(f, &x), -EINVAL);
	x.delay_max_us = 0; x.size = 8;
	CHECK_RC(cep_fabric_set_faults(f, &x), -EINVAL);
	CHECK_RC(cep_fabric_set_faults(f, NULL), -EINVAL);
	CHECK_RC(t->ops->send(t, mad, CEP_MAD_SIZE, &to), 0);
	CHECK(sink_count(&s) == 1);          /* loss 1.0 was never applied */

	/* Sends. */
	CHECK_RC(t->ops->send(t, mad, 0, &to), -EINVAL);
	CHECK_RC(t->ops->send(t, mad, CEP_MAD_SIZE + 1, &to), -EINVAL);
	CHECK_RC(t->ops->send(t, NULL, CEP_MAD_SIZE, &to), -EINVAL);
	CHECK_RC(t->ops->send(t, mad, CEP_MAD_SIZE, NULL), -EINVAL);
	CHECK(stats(f).sent == 1);
	t->ops->stop(t);
	t->ops->stop(t);                     /* idempotent */
	CHECK_RC(t->ops->send(t, mad, CEP_MAD_SIZE, &to), -ESHUTDOWN);
	CHECK_RC(t->ops->start(t, sink_recv, &s), -EALREADY);
	CHECK_RC(t->ops->query_port(t, NULL), -EINVAL);

	CHECK_RC(cep_fabric_stats(f, &st), -EINVAL);
	CHECK_RC(cep_fabric_stats(f, NULL), -EINVAL);
	CHECK_RC(cep_fabric_get_seed(f, NULL), -EINVAL);
	CHECK_RC(cep_fabric_quiesce(NULL, 1), -EINVAL);
	CHECK_RC(cep_fabric_destroy(NULL), -EINVAL);

	t->ops->destroy(t);
	CHECK_RC(cep_fabric_destroy(f), -EBUSY);
	u->ops->destroy(u);
	CHECK_RC(cep_fabric_destroy(f), 0);
}

/* --- micro-benchmark: the no-fault path ------------------------------------ */

struct bench_rx {
	uint8_t buf[CEP_MAD_SIZE];    /* one thread delivers to each rx */
	uint64_t n;
};

static void bench_recv(void *ctx, const uint8_t *mad, size_t len,
		       const struct cep_mad_addr *from)
{
	struct bench_rx *r = ctx;

	memcpy(r->buf, mad, len);     /* what the CM's recv does: copy it */
	r->n++;
	(void)from;
}

struct bench_tx {
	struct cep_transport *t;
	uint16_t dst;
	uint64_t n;
	uint64_t cpu_ns;              /* thread CPU time: robust on a shared machine */
};

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *bench_tx_main(void *arg)
{
	struct bench_tx *b = arg;
	struct cep_mad_addr to = to_lid(b->dst);
	uint8_t mad[CEP_MAD_SIZE];

	uint64_t c0 = cpu_ns();

	mad_fill(mad, 1);
	for (uint64_t i = 0; i < b->n; i++) {
		mad[20] = (uint8_t)i;
		if (b->t->ops->send(b->t, mad, sizeof(mad), &to))
			abort();
	}
	b->cpu_ns = cpu_ns() - c0;
	return NULL;
}

static void t_bench(uint64_t n)
{
	struct cep_fabric *f = fabric_new(test_seed);
	struct cep_transport *p[4] = { ib_port(f, 0x1, 1), ib_port(f, 0x2, 2),
				       ib_port(f, 0x3, 3), ib_port(f, 0x4, 4) };
	static struct bench_rx rx[4];
	struct bench_tx tx[2] = { { .t = p[0], .dst = 2, .n = n }, { .t = p[2], .dst = 4, .n = n } };
	pthread_t th[2];
	uint64_t t0, t1;

	for (int i = 0; i < 4; i++)
		CHECK_RC(p[i]->ops->start(p[i], bench_recv, &rx[i]), 0);

	t0 = now_ns();
	bench_tx_main(&tx[0]);
	t1 = now_ns();
	CHECK(rx[1].n == n);
	printf("no-fault path, 1 thread:  %.0f MADs/s wall, %.1f ns CPU/MAD\n",
	       (double)n * 1e9 / (double)(t1 - t0), (double)tx[0].cpu_ns / (double)n);

	t0 = now_ns();
	for (int i = 0; i < 2; i++)
		CHECK_RC(pthread_create(&th[i], NULL, bench_tx_main, &tx[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	t1 = now_ns();
	CHECK(rx[1].n == 2 * n && rx[3].n == n);
	printf("no-fault path, 2 threads: %.0f MADs/s wall, %.1f + %.1f ns CPU/MAD\n",
	       (double)(2 * n) * 1e9 / (double)(t1 - t0), (double)tx[0].cpu_ns / (double)n,
	       (double)tx[1].cpu_ns / (double)n);
	CHECK(stats(f).delivered == 3 * n);

	/* Crossed, as a CM's two sides: 1 -> 2 and 2 -> 1 at once. */
	tx[1].t = p[1];
	tx[1].dst = 1;
	t0 = now_ns();
	for (int i = 0; i < 2; i++)
		CHECK_RC(pthread_create(&th[i], NULL, bench_tx_main, &tx[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	t1 = now_ns();
	CHECK(rx[1].n == 3 * n && rx[0].n == n);
	printf("no-fault path, 2 threads crossed: %.0f MADs/s wall, %.1f + %.1f ns CPU/MAD\n",
	       (double)(2 * n) * 1e9 / (double)(t1 - t0), (double)tx[0].cpu_ns / (double)n,
	       (double)tx[1].cpu_ns / (double)n);

	/* For comparison: the faulted path with 1% loss (mutex per send). */
	set_faults(f, 0.01, 0, 0, 0, 0);
	tx[0].n = n / 10;
	bench_tx_main(&tx[0]);
	printf("faulted path (1%% loss), 1 thread: %.1f ns CPU/MAD\n",
	       (double)tx[0].cpu_ns / (double)tx[0].n);
	teardown(f, p, 4);
}

int main(int argc, char **argv)
{
	const char *env = getenv("CEP_TEST_SEED");
	const char *c = argc > 1 ? argv[1] : "";

	test_seed = env ? strtoull(env, NULL, 0) : 0;
	if (!test_seed) {
		struct cep_fabric *f = fabric_new(0);

		CHECK_RC(cep_fabric_get_seed(f, &test_seed), 0);
		CHECK_RC(cep_fabric_destroy(f), 0);
	}
	printf("test_fabric %s: seed 0x%" PRIx64 " (replay: CEP_TEST_SEED=0x%" PRIx64 ")\n",
	       c, test_seed, test_seed);
	if (!strcmp(c, "routing_lid")) t_routing_lid();
	else if (!strcmp(c, "routing_gid")) t_routing_gid();
	else if (!strcmp(c, "no_route")) t_no_route();
	else if (!strcmp(c, "loss")) t_loss();
	else if (!strcmp(c, "duplicate")) t_duplicate();
	else if (!strcmp(c, "reorder")) t_reorder();
	else if (!strcmp(c, "delay")) t_delay();
	else if (!strcmp(c, "cap")) t_cap();
	else if (!strcmp(c, "seed")) t_seed();
	else if (!strcmp(c, "stop")) t_stop();
	else if (!strcmp(c, "capture")) t_capture();
	else if (!strcmp(c, "bad_attrs")) t_bad_attrs();
	else if (!strcmp(c, "bench")) t_bench(argc > 2 ? strtoull(argv[2], NULL, 0) : 2000000);
	else {
		fprintf(stderr, "unknown case '%s'\n", c);
		return 2;
	}
	printf("ok\n");
	return 0;
}
