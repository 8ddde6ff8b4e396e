/* SPDX-License-Identifier: MIT */
/*
 * cepd's source-address checks (src/service/addr.c) on real RDMA ports
 * (Soft-RoCE guest, addr.sh): this program plays cepd (root, in the
 * guest's initial namespaces) and judges client processes the script
 * started in other namespaces and as other users, while the script
 * changes those namespaces between commands. It reads commands, one a
 * line, from the file given (or stdin):
 *
 *   port P DEV NUM             open port NUM of DEV as cepd does (addr_port_open)
 *   client C P PID             process PID is a client of port P (its HELLO now)
 *   expect C P SEL RES         every entry of P's GID table that SEL picks,
 *                              by index and by value, gives RES for client C
 *   pkey P index N RES         addr_pkey_index
 *   pkey P value 0xNNNN RES    addr_pkey
 *   value C P GID RES          addr_gid of that value (an entry or not)
 *   wait-gid P GID present|absent   until the kernel's table says so (30 s)
 *   sh COMMAND                 the command must succeed
 *   show P                     print the table: index, GID, type, ifindex, device
 *   bench C P COUNT            the cost of each check for client C, next to
 *                              a system call and a bare GID query
 *
 * SEL is ndev=NAME (the entry's device, as sysfs names it now), gid=GID
 * (IPv6 text; ::ffff:a.b.c.d for IPv4) or index=N. RES is 0, EACCES or
 * EINVAL. By value a GID is granted when any entry of that value is, so
 * the value check is made only where every entry of the value is picked.
 * Exits 1 when any expectation failed, 2 on a bad command.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "service/addr.h"
#include "service/cepd.h"

#define MAXN 16
/* a table read returns at most 65535 bytes of entries (16-bit length) */
#define TMAX 2047

static struct gport {
	char name[32];
	struct port p;
	struct ibv_context *ctx;        /* the program's own, to list the table */
	int ndevs;                      /* sysfs gid_attrs/ndevs */
} ports[MAXN];
static unsigned nports;

static struct gclient {
	char name[32];
	struct gport *gp;
	struct cepd_ident id;
	struct addr_client *ac;
} clients[MAXN];
static unsigned nclients;

static int failures, line_no;

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "addr-guest:%d: FAIL: ", line_no);             \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
		failures++;                                                    \
	} while (0)

static void bad(const char *what)
{
	fprintf(stderr, "addr-guest:%d: %s\n", line_no, what);
	exit(2);
}

static const char *res_name(int r)
{
	static char buf[16];

	switch (r) {
	case 0: return "0";
	case -EACCES: return "EACCES";
	case -EINVAL: return "EINVAL";
	case -EAGAIN: return "EAGAIN";
	default: snprintf(buf, sizeof(buf), "%d", r); return buf;
	}
}

static int res_parse(const char *s)
{
	if (!strcmp(s, "0"))
		return 0;
	if (!strcmp(s, "EACCES"))
		return -EACCES;
	if (!strcmp(s, "EINVAL"))
		return -EINVAL;
	bad("result: 0, EACCES or EINVAL");
	return 1;
}

static struct gport *port_named(const char *n)
{
	for (unsigned i = 0; i < nports; i++)
		if (!strcmp(ports[i].name, n))
			return &ports[i];
	bad("no such port");
	return NULL;
}

static struct gclient *client_named(const char *n)
{
	for (unsigned i = 0; i < nclients; i++)
		if (!strcmp(clients[i].name, n))
			return &clients[i];
	bad("no such client");
	return NULL;
}

static void ndev_of(struct gport *gp, unsigned idx, char *name, size_t cap)
{
	char f[16];
	ssize_t n = -1;
	int fd;

	snprintf(f, sizeof(f), "%u", idx);
	fd = openat(gp->ndevs, f, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, name, cap - 1);
		close(fd);
	}
	if (n < 0)
		n = 0;
	name[n] = 0;
	name[strcspn(name, "\n")] = 0;
}

/* The port's entries now: count, or -errno. */
static int table(struct gport *gp, struct ibv_gid_entry *t, int cap)
{
	ssize_t n = ibv_query_gid_table(gp->ctx, t, (size_t)cap, 0);
	int k = 0;

	if (n < 0)
		return (int)n;
	for (ssize_t i = 0; i < n; i++)
		if (t[i].port_num == gp->p.port_num)
			t[k++] = t[i];
	return k;
}

static void gid_str(const uint8_t *g, char *s)
{
	inet_ntop(AF_INET6, g, s, INET6_ADDRSTRLEN);
}

static void cmd_port(char **a, int n)
{
	struct gport *gp;
	struct ibv_device **list;
	char path[160];
	int cnt = 0, ret;

	if (n != 4 || nports == MAXN)
		bad("port P DEV NUM");
	gp = &ports[nports];
	snprintf(gp->name, sizeof(gp->name), "%s", a[1]);
	snprintf(gp->p.dev, sizeof(gp->p.dev), "%s", a[2]);
	gp->p.port_num = (uint8_t)atoi(a[3]);
	list = ibv_get_device_list(&cnt);
	for (int i = 0; list && i < cnt && !gp->ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), a[2]))
			gp->ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!gp->ctx)
		bad("device not found");
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%s/gid_attrs/ndevs", a[2], a[3]);
	gp->ndevs = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	ret = addr_port_open(&gp->p);
	if (ret) {
		fprintf(stderr, "addr_port_open %s: %s\n", a[2], strerror(-ret));
		bad("port");
	}
	nports++;
}

static void cmd_client(char **a, int n)
{
	struct gclient *c;
	char path[32];
	int ret;

	if (n != 4 || nclients == MAXN)
		bad("client C P PID");
	c = &clients[nclients];
	snprintf(c->name, sizeof(c->name), "%s", a[1]);
	c->gp = port_named(a[2]);
	/* what identity.c leaves after the HELLO: addr.c reads /proc/PID */
	c->id.pid = atoi(a[3]);
	c->id.pidfd = -1;
	snprintf(path, sizeof(path), "/proc/%d", (int)c->id.pid);
	c->id.procfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (c->id.procfd < 0)
		bad("no such process");
	ret = addr_client_open(&c->gp->p, &c->id, &c->ac);
	if (ret) {
		fprintf(stderr, "addr_client_open %s: %s\n", a[1], strerror(-ret));
		bad("client");
	}
	nclients++;
}

static bool picks(const char *sel, const struct ibv_gid_entry *e, const char *ndev)
{
	uint8_t g[16];

	if (!strncmp(sel, "ndev=", 5))
		return !strcmp(ndev, sel + 5);
	if (!strncmp(sel, "index=", 6))
		return e->gid_index == (uint32_t)atoi(sel + 6);
	if (!strncmp(sel, "gid=", 4)) {
		if (inet_pton(AF_INET6, sel + 4, g) != 1)
			bad("gid=");
		return !memcmp(g, e->gid.raw, 16);
	}
	bad("selector: ndev=, gid= or index=");
	return false;
}

static void cmd_expect(char **a, int n)
{
	static struct ibv_gid_entry t[TMAX];
	static char names[TMAX][ADDR_IFNAMSIZ + 2];
	struct gclient *c;
	struct gport *gp;
	int want, cnt, picked = 0;

	if (n != 5)
		bad("expect C P SEL RES");
	c = client_named(a[1]);
	gp = port_named(a[2]);
	want = res_parse(a[4]);
	cnt = table(gp, t, TMAX);
	if (cnt < 0) {
		fprintf(stderr, "ibv_query_gid_table: %s\n", strerror(-cnt));
		bad("table");
	}
	for (int i = 0; i < cnt; i++)
		ndev_of(gp, t[i].gid_index, names[i], sizeof(names[i]));
	for (int i = 0; i < cnt; i++) {
		char s[INET6_ADDRSTRLEN];
		bool whole = true;
		int r;

		if (!picks(a[3], &t[i], names[i]))
			continue;
		picked++;
		gid_str(t[i].gid.raw, s);
		r = addr_gid_index(&gp->p, c->ac, t[i].gid_index);
		if (r != want)
			FAIL("%s %s index %u (%s %s if %u): %s, not %s", a[1], a[2], t[i].gid_index, s,
			     names[i], t[i].ndev_ifindex, res_name(r), a[4]);
		for (int j = 0; j < cnt; j++)
			if (!memcmp(t[j].gid.raw, t[i].gid.raw, 16) && !picks(a[3], &t[j], names[j]))
				whole = false;
		if (!whole)
			continue;
		r = addr_gid(&gp->p, c->ac, t[i].gid.raw);
		if (r != want)
			FAIL("%s %s value %s: %s, not %s", a[1], a[2], s, res_name(r), a[4]);
	}
	if (!picked)
		FAIL("%s: no entry of %s picked by %s", a[1], a[2], a[3]);
	else
		printf("ok: %s on %s, %s: %s (%d entries)\n", a[1], a[2], a[3], a[4], picked);
	/* a value no entry has is no entry, for anyone */
	{
		uint8_t none[16];

		inet_pton(AF_INET6, "2001:db8::dead", none);
		if (addr_gid(&gp->p, c->ac, none) != -EINVAL)
			FAIL("%s %s: a GID of no entry is not EINVAL", a[1], a[2]);
	}
}

static void cmd_pkey(char **a, int n)
{
	struct gport *gp;
	int r, want;

	if (n != 5)
		bad("pkey P index|value X RES");
	gp = port_named(a[1]);
	want = res_parse(a[4]);
	if (!strcmp(a[2], "index"))
		r = addr_pkey_index(&gp->p, (unsigned)strtoul(a[3], NULL, 0));
	else
		r = addr_pkey(&gp->p, (uint16_t)strtoul(a[3], NULL, 0));
	if (r != want)
		FAIL("pkey %s %s %s: %s, not %s", a[1], a[2], a[3], res_name(r), a[4]);
	else
		printf("ok: pkey %s %s %s: %s\n", a[1], a[2], a[3], a[4]);
}

static void cmd_value(char **a, int n)
{
	struct gclient *c;
	struct gport *gp;
	uint8_t g[16];
	int r, want;

	if (n != 5 || inet_pton(AF_INET6, a[3], g) != 1)
		bad("value C P GID RES");
	c = client_named(a[1]);
	gp = port_named(a[2]);
	want = res_parse(a[4]);
	r = addr_gid(&gp->p, c->ac, g);
	if (r != want)
		FAIL("%s %s value %s: %s, not %s", a[1], a[2], a[3], res_name(r), a[4]);
	else
		printf("ok: %s on %s, value %s: %s\n", a[1], a[2], a[3], a[4]);
}

static void cmd_wait_gid(char **a, int n)
{
	static struct ibv_gid_entry t[TMAX];
	struct gport *gp;
	uint8_t g[16];
	bool want;
	time_t end = time(NULL) + 30;

	if (n != 4 || inet_pton(AF_INET6, a[2], g) != 1)
		bad("wait-gid P GID present|absent");
	gp = port_named(a[1]);
	want = !strcmp(a[3], "present");
	for (;;) {
		int cnt = table(gp, t, TMAX);
		bool have = false;

		for (int i = 0; i < cnt; i++)
			if (!memcmp(t[i].gid.raw, g, 16))
				have = true;
		if (have == want)
			return;
		if (time(NULL) > end) {
			FAIL("%s: %s not %s after 30 s", a[1], a[2], a[3]);
			return;
		}
		usleep(20000);
	}
}

static void cmd_show(char **a, int n)
{
	static struct ibv_gid_entry t[TMAX];
	struct gport *gp;
	int cnt;

	if (n != 2)
		bad("show P");
	gp = port_named(a[1]);
	cnt = table(gp, t, TMAX);
	for (int i = 0; i < cnt; i++) {
		char s[INET6_ADDRSTRLEN], nd[ADDR_IFNAMSIZ + 2];

		gid_str(t[i].gid.raw, s);
		ndev_of(gp, t[i].gid_index, nd, sizeof(nd));
		printf("  %s[%u] %-40s %s ifindex %u %s\n", a[1], t[i].gid_index, s,
		       t[i].gid_type == IBV_GID_TYPE_ROCE_V2 ? "v2" : "v1", t[i].ndev_ifindex, nd);
	}
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void cmd_bench(char **a, int n)
{
	static struct ibv_gid_entry t[TMAX];
	struct gclient *c;
	struct gport *gp;
	int count, cnt, pick = -1, bad_answers = 0;
	double t0, idx, val, pk, sys, raw, name, facts, tbl;

	if (n != 4)
		bad("bench C P COUNT");
	c = client_named(a[1]);
	gp = port_named(a[2]);
	count = atoi(a[3]);
	cnt = table(gp, t, TMAX);
	for (int i = 0; i < cnt && pick < 0; i++)
		if (addr_gid_index(&gp->p, c->ac, t[i].gid_index) == 0)
			pick = i;
	if (pick < 0 || count <= 0) {
		FAIL("bench: no entry granted to %s", a[1]);
		return;
	}
	t0 = now_ns();
	for (int k = 0; k < count; k++)
		bad_answers += addr_gid_index(&gp->p, c->ac, t[pick].gid_index) != 0;
	idx = (now_ns() - t0) / count;
	t0 = now_ns();
	for (int k = 0; k < count; k++)
		bad_answers += addr_gid(&gp->p, c->ac, t[pick].gid.raw) != 0;
	val = (now_ns() - t0) / count;
	t0 = now_ns();
	for (int k = 0; k < count; k++)
		bad_answers += addr_pkey(&gp->p, 0xffff) != 0;
	pk = (now_ns() - t0) / count;
	t0 = now_ns();
	for (int k = 0; k < count; k++)
		(void)syscall(SYS_getppid);
	sys = (now_ns() - t0) / count;
	t0 = now_ns();
	for (int k = 0; k < count; k++) {
		struct ibv_gid_entry e;

		bad_answers += ibv_query_gid_ex(gp->ctx, gp->p.port_num, t[pick].gid_index, &e, 0) != 0;
	}
	raw = (now_ns() - t0) / count;
	/* the parts of a check by index besides that query: the device's
	 * name (sysfs) and the namespace's facts (addr_client_entry) */
	{
		char nd[ADDR_IFNAMSIZ + 2];
		struct addr_gid_entry e = { .ifindex = t[pick].ndev_ifindex };

		t0 = now_ns();
		for (int k = 0; k < count; k++)
			ndev_of(gp, t[pick].gid_index, nd, sizeof(nd));
		name = (now_ns() - t0) / count;
		memcpy(e.gid, t[pick].gid.raw, 16);
		nd[ADDR_IFNAMSIZ - 1] = 0;
		memcpy(e.ndev, nd, ADDR_IFNAMSIZ);
		t0 = now_ns();
		for (int k = 0; k < count; k++)
			bad_answers += addr_client_entry(c->ac, &e) != 0;
		facts = (now_ns() - t0) / count;
		t0 = now_ns();
		for (int k = 0; k < count; k++)
			bad_answers += table(gp, t, TMAX) != cnt;
		tbl = (now_ns() - t0) / count;
	}
	if (bad_answers)
		FAIL("bench: %d answers changed", bad_answers);
	printf("bench %s on %s (%d each): GID index %.0f ns, GID value %.0f ns, P_Key %.0f ns; "
	       "parts: ibv_query_gid_ex %.0f ns, ibv_query_gid_table %.0f ns (%d entries), "
	       "sysfs name %.0f ns, namespace facts %.0f ns; getppid %.0f ns\n",
	       a[1], a[2], count, idx, val, pk, raw, tbl, cnt, name, facts, sys);
}

int main(int argc, char **argv)
{
	FILE *in = argc > 1 ? fopen(argv[1], "r") : stdin;
	char line[1024];

	if (!in) {
		perror(argv[1]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), in)) {
		char *a[8], *save = NULL, *tok;
		int n = 0;

		line_no++;
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "sh ", 3)) {
			printf("+ %s\n", line + 3);
			if (system(line + 3) != 0)
				FAIL("command failed: %s", line + 3);
			continue;
		}
		for (tok = strtok_r(line, " \t", &save); tok && n < 8; tok = strtok_r(NULL, " \t", &save))
			a[n++] = tok;
		if (!n || a[0][0] == '#')
			continue;
		if (!strcmp(a[0], "port"))
			cmd_port(a, n);
		else if (!strcmp(a[0], "client"))
			cmd_client(a, n);
		else if (!strcmp(a[0], "expect"))
			cmd_expect(a, n);
		else if (!strcmp(a[0], "pkey"))
			cmd_pkey(a, n);
		else if (!strcmp(a[0], "value"))
			cmd_value(a, n);
		else if (!strcmp(a[0], "wait-gid"))
			cmd_wait_gid(a, n);
		else if (!strcmp(a[0], "show"))
			cmd_show(a, n);
		else if (!strcmp(a[0], "bench"))
			cmd_bench(a, n);
		else
			bad("unknown command");
	}
	for (unsigned i = 0; i < nclients; i++)
		addr_client_close(clients[i].ac);
	for (unsigned i = 0; i < nports; i++) {
		addr_port_close(&ports[i].p);
		ibv_close_device(ports[i].ctx);
	}
	printf("addr-guest: %s\n", failures ? "FAILED" : "all expectations met");
	return failures ? 1 : 0;
}
