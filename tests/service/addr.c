/* SPDX-License-Identifier: MIT */
/*
 * cepd's source-address checks (src/service/addr.c), without an RDMA
 * device: the fabric's tables; the RoCE rule as a pure function on
 * scripted namespaces, attacker cases included; and the rule on real
 * namespaces of this host (this process's, one root makes, one an
 * unprivileged user makes with unshare), whose facts addr.c keeps fresh
 * through rtnetlink while a child changes them. The real check on
 * Soft-RoCE is tests/guests/addr.sh. One meson test per case (argv[1]);
 * a case that needs privileges this host does not give exits 77.
 */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/nsfs.h>

#include "service/addr.h"
#include "service/cepd.h"
#include "../common/check.h"

#define SKIP 77

static void gid4(uint8_t g[16], uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
	memset(g, 0, 16);
	g[10] = g[11] = 0xff;
	g[12] = a;
	g[13] = b;
	g[14] = c;
	g[15] = d;
}

/* fe80:: and the EUI-64 of @mac, bytes 11-12 as given (ff:fe, or a dev_id). */
static void gid_default(uint8_t g[16], const uint8_t mac[6], uint8_t b11, uint8_t b12)
{
	memset(g, 0, 16);
	g[0] = 0xfe;
	g[1] = 0x80;
	g[8] = mac[0] ^ 2;
	g[9] = mac[1];
	g[10] = mac[2];
	g[11] = b11;
	g[12] = b12;
	g[13] = mac[3];
	g[14] = mac[4];
	g[15] = mac[5];
}

static struct addr_gid_entry entry(const uint8_t g[16], uint32_t ifindex, const char *ndev)
{
	struct addr_gid_entry e = { .ifindex = ifindex };

	memcpy(e.gid, g, 16);
	snprintf(e.ndev, sizeof(e.ndev), "%s", ndev);
	return e;
}

/* An identity as identity.c completes it, for process @pid: the checks
 * read only its /proc directory. */
static int ident_of(pid_t pid, struct cepd_ident *id)
{
	char path[32];

	memset(id, 0, sizeof(*id));
	id->pid = pid;
	id->pidfd = -1;
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	id->procfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return id->procfd < 0 ? -errno : 0;
}

/* ---- fabric -------------------------------------------------------------------- */

static void t_fabric(void)
{
	struct port p;
	struct cepd_ident id;
	struct addr_client *ac = NULL;
	uint8_t gid[16], other[16], zero[16] = { 0 };

	memset(&p, 0, sizeof(p));
	gid_default(gid, (const uint8_t[6]){ 0x00, 0x02, 0xc9, 0x03, 0x00, 0xa0 }, 0xff, 0xfe);
	memcpy(other, gid, 16);
	other[15] ^= 1;
	memcpy(p.info.gid, gid, 16);
	p.info.gid_index = 0;
	p.info.pkey = 0xffff;
	p.info.link_layer = 1;
	p.port_num = 1;
	CHECK_EQ(addr_port_open(&p), 0);
	/* the fabric reads nothing of the client: no /proc needed */
	memset(&id, 0, sizeof(id));
	id.procfd = id.pidfd = -1;
	CHECK_EQ(addr_client_open(&p, &id, &ac), 0);
	CHECK_EQ(addr_gid_index(&p, ac, 0), 0);
	CHECK_EQ(addr_gid_index(&p, ac, 1), -EINVAL);
	CHECK_EQ(addr_gid_index(&p, ac, 255), -EINVAL);
	CHECK_EQ(addr_gid(&p, ac, gid), 0);
	CHECK_EQ(addr_gid(&p, ac, other), -EINVAL);
	CHECK_EQ(addr_gid(&p, ac, zero), -EINVAL);
	CHECK_EQ(addr_pkey_index(&p, 0), 0);
	CHECK_EQ(addr_pkey_index(&p, 1), -EINVAL);
	CHECK_EQ(addr_pkey(&p, 0xffff), 0);
	CHECK_EQ(addr_pkey(&p, 0x7fff), 0);     /* the limited member of the same partition */
	CHECK_EQ(addr_pkey(&p, 0x8000), -EINVAL); /* no partition */
	CHECK_EQ(addr_pkey(&p, 0x0000), -EINVAL);
	CHECK_EQ(addr_pkey(&p, 0x8001), -EINVAL);
	addr_client_close(ac);
	addr_port_close(&p);
	CHECK(p.addr == NULL);

	/* an RDMA device that does not exist is not served */
	memset(&p, 0, sizeof(p));
	snprintf(p.dev, sizeof(p.dev), "nosuchdev9");
	p.port_num = 1;
	CHECK(addr_port_open(&p) < 0);
	CHECK(p.addr == NULL);
}

/* ---- the rule on scripted namespaces ------------------------------------------- */

static const uint8_t mac_host[6] = { 0x52, 0x54, 0x00, 0x77, 0x00, 0x01 };
static const uint8_t mac_pod[6] = { 0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x05 };

static void t_rule(void)
{
	uint8_t host4[16], host_def[16], pod4[16], lo4[16], g[16];
	struct addr_ns_link hl[2] = { { .ifindex = 1, .name = "lo", .has_mac = 1 },
				      { .ifindex = 2, .name = "eth0", .has_mac = 1 } };
	struct addr_ns_addr ha[3];
	struct addr_ns_facts host = { .owned = 1, .links = hl, .nlinks = 2, .addrs = ha, .naddrs = 3 };
	struct addr_ns_link pl[2] = { { .ifindex = 1, .name = "lo", .has_mac = 1 },
				      { .ifindex = 2, .name = "eth0", .has_mac = 1 } };
	struct addr_ns_addr pa[1];
	struct addr_ns_facts pod = { .owned = 1, .links = pl, .nlinks = 2, .addrs = pa, .naddrs = 1 };
	struct addr_gid_entry e;

	memcpy(hl[1].mac, mac_host, 6);
	memcpy(pl[1].mac, mac_pod, 6);
	gid4(host4, 10, 77, 0, 1);
	gid4(pod4, 10, 244, 1, 5);
	gid4(lo4, 127, 0, 0, 1);
	gid_default(host_def, mac_host, 0xff, 0xfe);
	ha[0] = (struct addr_ns_addr){ .ifindex = 1 };
	memcpy(ha[0].gid, lo4, 16);
	ha[1] = (struct addr_ns_addr){ .ifindex = 2 };
	memcpy(ha[1].gid, host4, 16);
	ha[2] = (struct addr_ns_addr){ .ifindex = 2 };
	memcpy(ha[2].gid, host_def, 16); /* the link-local address, as addrconf makes it */
	pa[0] = (struct addr_ns_addr){ .ifindex = 2 };
	memcpy(pa[0].gid, pod4, 16);

	/* cepd's own namespace: the host's entries */
	e = entry(host4, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &host), 0);
	e = entry(host_def, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &host), 0);

	/* the default GID needs no address: it is the MAC's (no IPv6 here) */
	host.naddrs = 2;
	CHECK_EQ(addr_roce_rule(&e, &host), 0);
	gid_default(g, mac_host, 0x00, 0x01); /* a port's dev_id in bytes 11-12 */
	e = entry(g, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &host), 0);
	g[8] ^= 2; /* universal/local bit not flipped: not the MAC's */
	e = entry(g, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);
	gid_default(g, mac_host, 0xff, 0xfe);
	g[1] = 0x81; /* not link-local */
	e = entry(g, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);
	hl[1].has_mac = 0; /* a device without a 6-byte address has no default GID */
	e = entry(host_def, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);
	hl[1].has_mac = 1;
	host.naddrs = 3;

	/* rule 2: number and name of the entry's device, both */
	e = entry(host4, 2, "eth1");
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);
	e = entry(host4, 3, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);
	e = entry(host4, 0, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);
	e = entry(host4, 2, "");
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);
	/* rule 3: the address must be on that device, not another of the namespace */
	e = entry(lo4, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);

	/* A pod (a namespace root made): its eth0 is ifindex 2 too, by
	 * default. Number and name match the host's eth0, address and MAC do
	 * not: neither side gets the other's entries. */
	e = entry(host4, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &pod), -EACCES);
	e = entry(host_def, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &pod), -EACCES);
	e = entry(pod4, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &pod), 0);
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);
	gid_default(g, mac_pod, 0xff, 0xfe);
	e = entry(g, 2, "eth0");
	CHECK_EQ(addr_roce_rule(&e, &pod), 0);
	CHECK_EQ(addr_roce_rule(&e, &host), -EACCES);

	/* The attacker: `unshare -Urn` as any user, then a dummy "eth0" with
	 * ifindex 2, the host's MAC and the host's address - every fact the
	 * host's namespace shows, copied. Its namespace is owned by its own
	 * user namespace: nothing is granted. */
	{
		struct addr_ns_facts forged = host;

		forged.owned = 0;
		e = entry(host4, 2, "eth0");
		CHECK_EQ(addr_roce_rule(&e, &forged), -EACCES);
		e = entry(host_def, 2, "eth0");
		CHECK_EQ(addr_roce_rule(&e, &forged), -EACCES);
		e = entry(lo4, 1, "lo");
		CHECK_EQ(addr_roce_rule(&e, &forged), -EACCES);
	}

	/* What rule 1 leaves to administrators: the same copy made in a
	 * namespace root owns (CAP_NET_ADMIN there) is not told from the
	 * original (addr.c, "What is left"). */
	{
		struct addr_ns_facts staged = host;

		e = entry(host4, 2, "eth0");
		CHECK_EQ(addr_roce_rule(&e, &staged), 0);
	}

	/* no facts at all */
	{
		struct addr_ns_facts none = { .owned = 1 };

		e = entry(host4, 2, "eth0");
		CHECK_EQ(addr_roce_rule(&e, &none), -EACCES);
	}
}

/* ---- real namespaces ----------------------------------------------------------- */

/* A child process whose network namespace the test drives through a pipe:
 * 'u' lo up, 'a' add 10.1.2.3 (alias lo:1), 'd' delete it, 'l' go back
 * to the namespace it started in, 'q' exit; each command answered with
 * one byte, '+' done or '-' failed. The child made its namespace with
 * @flags (0: stays in the test's). */
struct kid {
	pid_t pid;
	int cmd, ack;
};

static int lo_flags(const char *name, int up)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ret = 0;

	if (s < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(s, SIOCGIFFLAGS, &ifr))
		ret = -1;
	if (!ret) {
		if (up)
			ifr.ifr_flags |= IFF_UP;
		else
			ifr.ifr_flags &= ~IFF_UP;
		ret = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	close(s);
	return ret;
}

static int lo_alias(void)
{
	struct ifreq ifr;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ret;

	if (s < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo:1");
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(0x0a010203); /* 10.1.2.3 */
	ret = ioctl(s, SIOCSIFADDR, &ifr);
	close(s);
	return ret;
}

static void kid_loop(int cmd, int ack, int home)
{
	char c;

	while (read(cmd, &c, 1) == 1) {
		int ok = 0;

		switch (c) {
		case 'u': ok = lo_flags("lo", 1) == 0; break;
		case 'a': ok = lo_alias() == 0; break;
		case 'd': ok = lo_flags("lo:1", 0) == 0; break; /* deletes the alias */
		case 'l': ok = home >= 0 && setns(home, CLONE_NEWNET) == 0; break;
		case 'q': _exit(0);
		}
		c = ok ? '+' : '-';
		if (write(ack, &c, 1) != 1)
			_exit(1);
	}
	_exit(0);
}

/* 0 and a running child in a namespace made with @flags (as uid @uid
 * when not -1), SKIP when this host does not allow it, -1 on error. */
static int kid_start(struct kid *k, int flags, uid_t uid)
{
	int c[2], a[2];
	char r;

	if (pipe2(c, O_CLOEXEC) || pipe2(a, O_CLOEXEC))
		return -1;
	k->pid = fork();
	if (k->pid < 0)
		return -1;
	if (k->pid == 0) {
		int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);

		close(c[1]);
		close(a[0]);
		if (uid != (uid_t)-1 && (setresgid(uid, uid, uid) || setresuid(uid, uid, uid)))
			r = 's';
		else if (flags && unshare(flags))
			r = 's';
		else
			r = '+';
		if (write(a[1], &r, 1) != 1 || r != '+')
			_exit(1);
		kid_loop(c[0], a[1], home);
	}
	close(c[0]);
	close(a[1]);
	k->cmd = c[1];
	k->ack = a[0];
	if (read(k->ack, &r, 1) != 1 || r != '+') {
		waitpid(k->pid, NULL, 0);
		close(k->cmd);
		close(k->ack);
		return r == 's' ? SKIP : -1;
	}
	return 0;
}

static int kid_do(struct kid *k, char c)
{
	char r = 0;

	if (write(k->cmd, &c, 1) != 1 || read(k->ack, &r, 1) != 1)
		return -1;
	return r == '+' ? 0 : -1;
}

static void kid_stop(struct kid *k)
{
	(void)kid_do(k, 'q');
	waitpid(k->pid, NULL, 0);
	close(k->cmd);
	close(k->ack);
}

static const uint8_t lo_mac[6]; /* lo's hardware address: six zeros */

/* Whether namespace file @netns is owned by this process's user namespace. */
static bool owned_here(const char *netns)
{
	struct stat mine, owner;
	int fd = open(netns, O_RDONLY | O_CLOEXEC), u = fd >= 0 ? ioctl(fd, NS_GET_USERNS) : -1;
	bool ret = u >= 0 && !fstat(u, &owner) && !stat("/proc/self/ns/user", &mine) &&
		   mine.st_dev == owner.st_dev && mine.st_ino == owner.st_ino;

	if (u >= 0)
		close(u);
	if (fd >= 0)
		close(fd);
	return ret;
}

/* This process's own namespace (cepd's, as a client in it sees it). */
static void t_ns_self(void)
{
	struct cepd_ident id;
	struct addr_client *ac = NULL;
	struct ifaddrs *ifs = NULL, *i;
	struct addr_gid_entry e;
	uint8_t g[16];
	int found = 0;
	/* a test run in a user namespace of its own without a network one:
	 * its network namespace is an ancestor's, and nothing is granted */
	int ok = owned_here("/proc/self/ns/net") ? 0 : -EACCES;

	if (ok)
		printf("ns-self: this network namespace is not owned by this user namespace: "
		       "every check must refuse\n");

	CHECK_EQ(ident_of(getpid(), &id), 0);
	CHECK_EQ(addr_client_open_ns(&id, &ac), 0);
	if (!ac)
		return;
	CHECK_EQ(getifaddrs(&ifs), 0);
	/* every IPv4 address of every device here is granted on its device, as
	 * the kernel's rdma_cm would (when a RoCE port has an entry for it) */
	for (i = ifs; i; i = i->ifa_next) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)i->ifa_addr;
		uint32_t a;
		unsigned idx;

		if (!sin || sin->sin_family != AF_INET)
			continue;
		idx = if_nametoindex(i->ifa_name);
		a = ntohl(sin->sin_addr.s_addr);
		gid4(g, (uint8_t)(a >> 24), (uint8_t)(a >> 16), (uint8_t)(a >> 8), (uint8_t)a);
		if (strchr(i->ifa_name, ':'))
			continue; /* an alias label, not a device name */
		e = entry(g, idx, i->ifa_name);
		CHECK_EQ(addr_client_entry(ac, &e), ok);
		e = entry(g, idx + 1000, i->ifa_name);
		CHECK_EQ(addr_client_entry(ac, &e), -EACCES);
		e = entry(g, idx, "nosuchdev0");
		CHECK_EQ(addr_client_entry(ac, &e), -EACCES);
		found++;
	}
	freeifaddrs(ifs);
	if (!found)
		printf("ns-self: no IPv4 address in this namespace: only refusals checked\n");
	gid4(g, 192, 0, 2, 123); /* TEST-NET-1: on no device */
	e = entry(g, 1, "lo");
	CHECK_EQ(addr_client_entry(ac, &e), -EACCES);

	/* the cost of the namespace part of a check, next to a system call */
	{
		struct timespec t0, t1;
		const int n = 200000;
		double per, sys;

		gid4(g, 127, 0, 0, 1);
		e = entry(g, 1, "lo");
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int k = 0; k < n; k++)
			(void)addr_client_entry(ac, &e);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		per = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / n;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int k = 0; k < n; k++)
			(void)syscall(SYS_getppid);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		sys = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / n;
		printf("ns-self: namespace part of a check %.0f ns (getppid %.0f ns)\n", per, sys);
	}
	addr_client_close(ac);
	close(id.procfd);

	/* a client whose process is gone is refused at its HELLO */
	{
		pid_t p = fork();

		if (p == 0)
			_exit(0);
		CHECK_EQ(ident_of(p, &id), 0);
		waitpid(p, NULL, 0);
		ac = NULL;
		CHECK_EQ(addr_client_open_ns(&id, &ac), -ESRCH);
		CHECK(ac == NULL);
		close(id.procfd);
	}
}

struct churn {
	struct addr_client *ac;
	const struct addr_gid_entry *stable, *flapping;
	int stop;
	long wrong, checks;
};

static void *churn_reader(void *arg)
{
	struct churn *c = arg;

	while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
		int a = addr_client_entry(c->ac, c->stable);
		int b = addr_client_entry(c->ac, c->flapping);

		/* lo's own address never wavers; the alias is either there or not */
		if ((a != 0 || (b != 0 && b != -EACCES)) &&
		    __atomic_add_fetch(&c->wrong, 1, __ATOMIC_RELAXED) < 4)
			fprintf(stderr, "churn: lo %d, alias %d\n", a, b);
		__atomic_add_fetch(&c->checks, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* A namespace root made: granted what its devices hold, kept current by
 * notifications, and the client's namespace is the one at its HELLO. */
static void t_ns_root(void)
{
	struct kid k;
	struct cepd_ident id;
	struct addr_client *ac = NULL, *ac2 = NULL, *later = NULL;
	struct addr_gid_entry lo4, alias, wrongname, wrongidx, def;
	uint8_t g[16];
	int ret = kid_start(&k, CLONE_NEWNET, (uid_t)-1);

	if (ret == SKIP) {
		printf("ns-root: SKIP: cannot make a network namespace here (needs CAP_SYS_ADMIN)\n");
		exit(SKIP);
	}
	CHECK_EQ(ret, 0);
	if (ret)
		return;
	CHECK_EQ(kid_do(&k, 'u'), 0);
	CHECK_EQ(ident_of(k.pid, &id), 0);
	ret = addr_client_open_ns(&id, &ac);
	if (ret == -EPERM) {
		printf("ns-root: SKIP: cannot enter the namespace (setns needs CAP_SYS_ADMIN)\n");
		kid_stop(&k);
		exit(SKIP);
	}
	CHECK_EQ(ret, 0);
	if (ret) {
		kid_stop(&k);
		return;
	}
	gid4(g, 127, 0, 0, 1);
	lo4 = entry(g, 1, "lo");
	wrongname = entry(g, 1, "eth0");
	wrongidx = entry(g, 2, "lo");
	gid4(g, 10, 1, 2, 3);
	alias = entry(g, 1, "lo");
	gid_default(g, lo_mac, 0xff, 0xfe);
	def = entry(g, 1, "lo");

	CHECK_EQ(addr_client_entry(ac, &lo4), 0);
	CHECK_EQ(addr_client_entry(ac, &def), 0);        /* lo's MAC: the dumps' IFLA_ADDRESS */
	CHECK_EQ(addr_client_entry(ac, &wrongname), -EACCES);
	CHECK_EQ(addr_client_entry(ac, &wrongidx), -EACCES);
	CHECK_EQ(addr_client_entry(ac, &alias), -EACCES);

	/* the facts follow the namespace: each change is seen by the next check */
	CHECK_EQ(kid_do(&k, 'a'), 0);
	CHECK_EQ(addr_client_entry(ac, &alias), 0);
	CHECK_EQ(kid_do(&k, 'd'), 0);
	CHECK_EQ(addr_client_entry(ac, &alias), -EACCES);
	for (int n = 0; n < 20; n++) {
		CHECK_EQ(kid_do(&k, 'a'), 0);
		CHECK_EQ(addr_client_entry(ac, &alias), 0);
		CHECK_EQ(kid_do(&k, 'd'), 0);
		CHECK_EQ(addr_client_entry(ac, &alias), -EACCES);
	}

	/* a second client of the namespace shares its facts */
	CHECK_EQ(addr_client_open_ns(&id, &ac2), 0);
	CHECK_EQ(addr_client_entry(ac2, &lo4), 0);

	/* readers on both clients while the namespace changes under them */
	{
		struct churn c1 = { .ac = ac, .stable = &lo4, .flapping = &alias };
		struct churn c2 = { .ac = ac2, .stable = &lo4, .flapping = &alias };
		pthread_t t[4];

		for (int n = 0; n < 4; n++)
			pthread_create(&t[n], NULL, churn_reader, n % 2 ? &c2 : &c1);
		for (int n = 0; n < 200; n++) {
			CHECK_EQ(kid_do(&k, 'a'), 0);
			CHECK_EQ(kid_do(&k, 'd'), 0);
		}
		__atomic_store_n(&c1.stop, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&c2.stop, 1, __ATOMIC_RELEASE);
		for (int n = 0; n < 4; n++)
			pthread_join(t[n], NULL);
		CHECK_EQ(c1.wrong + c2.wrong, 0);
		CHECK(c1.checks > 0 && c2.checks > 0);
		printf("ns-root: %ld checks during 400 changes\n", c1.checks + c2.checks);
	}
	addr_client_close(ac2);

	/* The namespace is the HELLO's: the child goes back to the test's
	 * namespace (where 10.1.2.3 is on no device); its client keeps
	 * being judged in the namespace it had, a new client in the new one. */
	CHECK_EQ(kid_do(&k, 'a'), 0);
	CHECK_EQ(kid_do(&k, 'l'), 0);
	CHECK_EQ(addr_client_entry(ac, &alias), 0);
	CHECK_EQ(addr_client_open_ns(&id, &later), 0);
	CHECK_EQ(addr_client_entry(later, &alias), -EACCES);
	addr_client_close(later);

	/* the child exits: its namespace lives on in the client's facts */
	kid_stop(&k);
	CHECK_EQ(addr_client_entry(ac, &alias), 0);
	addr_client_close(ac);
	close(id.procfd);
}

/* A namespace an unprivileged user made with its own user namespace
 * (unshare -Urn), holding exactly what ns-root's does: refused. */
static void t_ns_user(void)
{
	struct kid k;
	struct cepd_ident id;
	struct addr_client *ac = NULL;
	struct addr_gid_entry lo4, alias, def;
	uint8_t g[16];
	/* as root, become nobody first: the attacker is an ordinary user */
	int ret = kid_start(&k, CLONE_NEWUSER | CLONE_NEWNET, getuid() == 0 ? 65534 : (uid_t)-1);

	if (ret == SKIP) {
		printf("ns-user: SKIP: user namespaces are not available to unprivileged users here\n");
		exit(SKIP);
	}
	CHECK_EQ(ret, 0);
	if (ret)
		return;
	CHECK_EQ(kid_do(&k, 'u'), 0);    /* its own CAP_NET_ADMIN: any change it likes */
	CHECK_EQ(kid_do(&k, 'a'), 0);
	CHECK_EQ(ident_of(k.pid, &id), 0);
	CHECK_EQ(addr_client_open_ns(&id, &ac), 0);
	gid4(g, 127, 0, 0, 1);
	lo4 = entry(g, 1, "lo");
	gid4(g, 10, 1, 2, 3);
	alias = entry(g, 1, "lo");
	gid_default(g, lo_mac, 0xff, 0xfe);
	def = entry(g, 1, "lo");
	CHECK_EQ(addr_client_entry(ac, &lo4), -EACCES);
	CHECK_EQ(addr_client_entry(ac, &alias), -EACCES);
	CHECK_EQ(addr_client_entry(ac, &def), -EACCES);
	/* the namespace really holds them: its owner is what refuses */
	{
		int netfd = openat(id.procfd, "ns/net", O_RDONLY | O_CLOEXEC);
		int u = netfd >= 0 ? ioctl(netfd, NS_GET_USERNS) : -1;
		struct stat mine, owner;

		CHECK(u >= 0);
		if (u >= 0) {
			CHECK_EQ(fstat(u, &owner), 0);
			CHECK_EQ(stat("/proc/self/ns/user", &mine), 0);
			CHECK(mine.st_ino != owner.st_ino || mine.st_dev != owner.st_dev);
			close(u);
		}
		if (netfd >= 0)
			close(netfd);
	}
	addr_client_close(ac);
	kid_stop(&k);
	close(id.procfd);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{ "fabric", t_fabric },
	{ "rule", t_rule },
	{ "ns-self", t_ns_self },
	{ "ns-root", t_ns_root },
	{ "ns-user", t_ns_user },
};

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (argc < 2 || strcmp(argv[1], cases[i].name) == 0) {
			cases[i].fn();
			if (argc >= 2)
				return check_done(argv[1]);
		}
	}
	if (argc >= 2) {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	return check_done("addr");
}
