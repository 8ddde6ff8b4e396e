/* SPDX-License-Identifier: MIT */
/*
 * cepd_qp_owner() on a real kernel (Soft-RoCE guest, qp-owner.sh): two
 * child processes create QPs on DEV and the parent asks the kernel who owns
 * each one.
 *   child A: two RC QPs in INIT (the doit path), one created by a thread
 *            that stays alive (reported as A's pid: thread -> process),
 *            one created by a thread that has exited (-ESRCH);
 *   child B: NRESET RC QPs left in RESET (no port: the dump path; 1,000
 *            entries do not fit one netlink datagram, so the dump is
 *            multipart);
 * then QP1 (the kernel's GSI QP: -EPERM), a QPN no QP has (-ENOENT), an
 * unknown device (-ENOENT), and after B exits, B's QPNs (-ENOENT) while A's
 * are still A's; and no other process can answer in the kernel's place:
 * a NETLINK_RDMA socket connected to the kernel, as cepd_qp_owner's is,
 * refuses a datagram from another socket (an unconnected one takes it,
 * from a nonzero port, which the receive filter drops), and checks stay
 * right while a thread floods every NETLINK_RDMA socket of the guest with
 * forged replies. Every answer is the same whatever owner the caller
 * expects. The sockets kept between checks: one after a check that
 * answered, none after one that failed, at most four after concurrent
 * checks from eight threads, none leaked over a thousand checks.
 * Prints the mean time of one check on each path.
 * Usage: qp-owner-guest DEV [NRESET]
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#include <infiniband/verbs.h>

#include "service/qp_owner.h"
#include "service/qp_owner_ops.h"

struct qp_rec {
	char kind;      /* I: INIT, main thread; T: live thread; X: exited thread; R: RESET */
	uint32_t qpn;
};

static int failures;

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "qp-owner-guest: FAIL: " __VA_ARGS__);         \
		fputc('\n', stderr);                                           \
		failures++;                                                    \
	} while (0)

static void die(const char *what)
{
	fprintf(stderr, "qp-owner-guest: %s: %s\n", what, strerror(errno));
	_exit(2);
}

/* ---- children ---------------------------------------------------------- */

struct verbs {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
};

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	if (!list)
		die("ibv_get_device_list");
	for (int i = 0; list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx) {
		fprintf(stderr, "qp-owner-guest: cannot open %s\n", name);
		_exit(2);
	}
	return ctx;
}

static struct ibv_qp *new_qp(const struct verbs *v, bool init)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = v->cq, .recv_cq = v->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(v->pd, &ia);

	if (!qp)
		die("ibv_create_qp");
	if (init) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1 };

		errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
		if (errno)
			die("ibv_modify_qp INIT");
	}
	return qp;
}

struct thread_arg {
	const struct verbs *v;
	uint32_t qpn;
	int hold;      /* read end: the thread blocks until EOF; -1: exit at once */
	int ready;     /* write end: one byte once the QP exists */
};

static void *qp_thread(void *p)
{
	struct thread_arg *t = p;
	char c = 1;

	t->qpn = new_qp(t->v, true)->qp_num;
	if (write(t->ready, &c, 1) != 1)
		die("write ready");
	if (t->hold >= 0)
		while (read(t->hold, &c, 1) > 0)
			;
	return NULL;
}

static void put_rec(int fd, char kind, uint32_t qpn)
{
	struct qp_rec r = { kind, qpn };

	if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		die("write rec");
}

/* Creates the QPs, reports them on @rep (then closes it), and lives until
 * @ctl reaches EOF. */
static void child(const char *dev, char role, int nreset, int rep, int ctl)
{
	struct verbs v;
	char c;

	v.ctx = open_dev(dev);
	v.pd = ibv_alloc_pd(v.ctx);
	v.cq = v.pd ? ibv_create_cq(v.ctx, 4, NULL, NULL, 0) : NULL;
	if (!v.cq)
		die("pd/cq");
	if (role == 'A') {
		int hold[2], ready[2];
		pthread_t live, gone;
		struct thread_arg tl, tg;

		put_rec(rep, 'I', new_qp(&v, true)->qp_num);
		put_rec(rep, 'I', new_qp(&v, true)->qp_num);
		if (pipe(hold) < 0 || pipe(ready) < 0)
			die("pipe");
		tl = (struct thread_arg){ &v, 0, hold[0], ready[1] };
		tg = (struct thread_arg){ &v, 0, -1, ready[1] };
		if (pthread_create(&live, NULL, qp_thread, &tl) ||
		    pthread_create(&gone, NULL, qp_thread, &tg))
			die("pthread_create");
		for (int i = 0; i < 2; i++)
			if (read(ready[0], &c, 1) != 1)
				die("read ready");
		pthread_join(gone, NULL);
		put_rec(rep, 'T', tl.qpn);
		put_rec(rep, 'X', tg.qpn);
		/* "live" blocks on hold[0] until this process exits. */
	} else {
		for (int i = 0; i < nreset; i++)
			put_rec(rep, 'R', new_qp(&v, false)->qp_num);
	}
	close(rep);
	while (read(ctl, &c, 1) > 0)
		;
	_exit(0);
}

struct kid {
	pid_t pid;
	int ctl;        /* write end; closing it ends the child */
	struct qp_rec *qps;
	int n;
};

static void spawn(struct kid *k, const char *dev, char role, int nreset)
{
	int rep[2], ctl[2];

	if (pipe(rep) < 0 || pipe(ctl) < 0)
		die("pipe");
	k->pid = fork();
	if (k->pid < 0)
		die("fork");
	if (k->pid == 0) {
		close(rep[0]);
		close(ctl[1]);
		child(dev, role, nreset, rep[1], ctl[0]);
	}
	close(rep[1]);
	close(ctl[0]);
	k->ctl = ctl[1];
	k->n = 0;
	k->qps = calloc((size_t)nreset + 8, sizeof(*k->qps));
	if (!k->qps)
		die("calloc");
	for (;;) {
		ssize_t r = read(rep[0], &k->qps[k->n], sizeof(*k->qps));

		if (r == 0)
			break;
		if (r != (ssize_t)sizeof(*k->qps))
			die("read rec");
		if (++k->n == nreset + 8)
			break;
	}
	close(rep[0]);
}

static void reap(struct kid *k)
{
	int st;

	close(k->ctl);
	if (waitpid(k->pid, &st, 0) != k->pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAIL("child %d did not exit cleanly", (int)k->pid);
}

/* ---- checks ------------------------------------------------------------ */

static const char *dev;

/* The check of @qpn gives @want_ret (and @want_pid) whatever the caller
 * expects: nobody (0), the owner, and a live process that is not it (this
 * one) - the hint changes the cost, never the answer. */
static void expect(uint32_t qpn, int want_ret, pid_t want_pid, const char *what)
{
	const pid_t hints[] = { 0, want_pid > 0 ? want_pid : 0, getpid() };

	for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++) {
		pid_t pid = -1;
		int ret = cepd_qp_owner(dev, qpn, hints[i], &pid);

		if (ret != want_ret || (ret == 0 && pid != want_pid))
			FAIL("%s: QPN 0x%x, expecting %d: got %d (%s) pid %d, want %d pid %d",
			     what, qpn, (int)hints[i], ret, ret ? strerror(-ret) : "ok",
			     (int)pid, want_ret, (int)want_pid);
	}
}

/* How many NETLINK_RDMA sockets this process holds open: the inodes of
 * /proc/net/netlink's NETLINK_RDMA rows among /proc/self/fd's sockets. */
static int rdma_sockets_open(void)
{
	unsigned long inodes[256];
	int n_ino = 0, count = 0;
	char line[256];
	FILE *f = fopen("/proc/net/netlink", "r");
	DIR *d;
	struct dirent *e;

	if (!f)
		die("/proc/net/netlink");
	while (fgets(line, sizeof(line), f) && n_ino < 256) {
		unsigned long sk, ino;
		int eth;

		if (sscanf(line, "%lx %d %*u %*x %*d %*d %*d %*d %*d %lu", &sk, &eth, &ino) == 3 &&
		    eth == NETLINK_RDMA)
			inodes[n_ino++] = ino;
	}
	fclose(f);
	d = opendir("/proc/self/fd");
	if (!d)
		die("/proc/self/fd");
	while ((e = readdir(d))) {
		char path[300], target[64];
		unsigned long ino;
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		if (sscanf(target, "socket:[%lu]", &ino) != 1)
			continue;
		for (int i = 0; i < n_ino; i++)
			if (inodes[i] == ino)
				count++;
	}
	closedir(d);
	return count;
}

/* Concurrent checks, each thread CONC_ROUNDS of them, all of QPN conc_qpn. */
#define CONC_THREADS 8
#define CONC_ROUNDS 50
static uint32_t conc_qpn;
static pid_t conc_owner;
static int conc_wrong;

static void *conc_check(void *arg)
{
	int wrong = 0;

	(void)arg;
	for (int i = 0; i < CONC_ROUNDS; i++) {
		pid_t pid = -1;

		if (cepd_qp_owner(dev, conc_qpn, conc_owner, &pid) != 0 || pid != conc_owner)
			wrong++;
	}
	__atomic_fetch_add(&conc_wrong, wrong, __ATOMIC_RELAXED);
	return NULL;
}

/* The sockets kept between checks (qp_owner.c's pool): one stays open after
 * a check that answered, none after one that failed, the next check opens
 * one again and answers right, checks from several threads at once are all
 * right and leave at most four open, and a thousand checks in a row on the
 * one kept socket stay right and leak nothing. */
static void check_pool(uint32_t qpn, pid_t owner)
{
	pthread_t t[CONC_THREADS];
	pid_t pid = -1;
	int n, wrong = 0;

	if (cepd_qp_owner(dev, qpn, owner, &pid) != 0 || pid != owner)
		FAIL("pool: a check of QPN 0x%x was wrong", qpn);
	if ((n = rdma_sockets_open()) != 1)
		FAIL("pool: %d NETLINK_RDMA sockets open after a check that answered, want 1", n);
	if (cepd_qp_owner(dev, 0xffffff, owner, &pid) != -ENOENT)
		FAIL("pool: a QPN no QP has was not -ENOENT");
	if ((n = rdma_sockets_open()) != 0)
		FAIL("pool: %d NETLINK_RDMA sockets open after a check that failed, want 0", n);
	if (cepd_qp_owner(dev, qpn, owner, &pid) != 0 || pid != owner)
		FAIL("pool: the check after a failed one was wrong");
	if ((n = rdma_sockets_open()) != 1)
		FAIL("pool: %d NETLINK_RDMA sockets open after the next check, want 1", n);
	conc_qpn = qpn;
	conc_owner = owner;
	for (int i = 0; i < CONC_THREADS; i++)
		if (pthread_create(&t[i], NULL, conc_check, NULL))
			die("pthread_create");
	for (int i = 0; i < CONC_THREADS; i++)
		pthread_join(t[i], NULL);
	if (conc_wrong)
		FAIL("pool: %d of %d concurrent checks wrong", conc_wrong, CONC_THREADS * CONC_ROUNDS);
	n = rdma_sockets_open();
	if (n < 1 || n > 4)
		FAIL("pool: %d NETLINK_RDMA sockets open after concurrent checks, want 1 to 4", n);
	for (int i = 0; i < 1000; i++)
		if (cepd_qp_owner(dev, qpn, i % 2 ? owner : 0, &pid) != 0 || pid != owner)
			wrong++;
	if (wrong)
		FAIL("pool: %d of 1000 checks in a row wrong", wrong);
	if (rdma_sockets_open() != n)
		FAIL("pool: 1000 checks in a row changed the open NETLINK_RDMA sockets");
	printf("qp-owner-guest: pool: 1 socket kept after a check, 0 after a failed one, "
	       "%d after %d concurrent checks, %d after 1000 more; all answers right\n",
	       n, CONC_THREADS * CONC_ROUNDS, rdma_sockets_open());
}

/* A forged doit reply for @seq: QPN @qpn on device @index named dev,
 * owned by @pid - what the kernel would say if @pid owned it. */

static size_t forge(uint8_t *buf, uint32_t index, uint32_t qpn, uint32_t pid, uint32_t seq)
{
	struct nlmsghdr h = {
		.nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_QP_GET),
		.nlmsg_seq = seq,
	};
	const uint32_t attrs[][2] = {
		{ RDMA_NLDEV_ATTR_DEV_INDEX, index }, { RDMA_NLDEV_ATTR_PORT_INDEX, 1 },
		{ RDMA_NLDEV_ATTR_RES_LQPN, qpn }, { RDMA_NLDEV_ATTR_RES_PID, pid },
	};
	uint8_t *p = buf + NLMSG_HDRLEN;
	size_t nlen = strlen(dev) + 1;
	struct nlattr a = { .nla_len = (uint16_t)(NLA_HDRLEN + nlen), .nla_type = RDMA_NLDEV_ATTR_DEV_NAME };

	memcpy(p, &a, sizeof(a));
	memset(p + NLA_HDRLEN, 0, NLA_ALIGN(nlen));
	memcpy(p + NLA_HDRLEN, dev, nlen);
	p += NLA_HDRLEN + NLA_ALIGN(nlen);
	for (size_t i = 0; i < 4; i++) {
		a = (struct nlattr){ .nla_len = 8, .nla_type = (uint16_t)attrs[i][0] };
		memcpy(p, &a, sizeof(a));
		memcpy(p + NLA_HDRLEN, &attrs[i][1], 4);
		p += 8;
	}
	h.nlmsg_len = (uint32_t)(p - buf);
	memcpy(buf, &h, sizeof(h));
	return h.nlmsg_len;
}

static uint32_t port_of(int fd)
{
	struct sockaddr_nl a;
	socklen_t len = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		die("getsockname");
	return a.nl_pid;
}

/* The kernel facts the receive path stands on, on this kernel. */
static void check_connected_socket(void)
{
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK }, to = kernel, from;
	int victim = socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA);
	int open_one = socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA);
	int attacker = socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA);
	uint8_t buf[128];
	socklen_t flen = sizeof(from);
	size_t n = forge(buf, 1, 0x42, 4242, 1);

	if (victim < 0 || open_one < 0 || attacker < 0)
		die("socket NETLINK_RDMA");
	if (connect(victim, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		die("connect");
	/* autobind the unconnected one */
	if (bind(open_one, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		die("bind");
	to.nl_pid = port_of(victim);
	if (sendto(attacker, buf, n, 0, (struct sockaddr *)&to, sizeof(to)) >= 0 ||
	    errno != ECONNREFUSED)
		FAIL("a connected NETLINK_RDMA socket took a datagram from another socket");
	to.nl_pid = port_of(open_one);
	if (sendto(attacker, buf, n, 0, (struct sockaddr *)&to, sizeof(to)) != (ssize_t)n)
		FAIL("an unconnected NETLINK_RDMA socket refused a datagram (%s)", strerror(errno));
	else if (recvfrom(open_one, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &flen) != (ssize_t)n ||
		 from.nl_pid == 0)
		FAIL("the forged datagram did not arrive from a nonzero port");
	close(victim);
	close(open_one);
	close(attacker);
}

/* Forges replies to every other NETLINK_RDMA socket until told to stop. */
static volatile int flood_stop;
static uint32_t flood_qpn;
static int flood_sent;

static void *flood(void *arg)
{
	int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA);
	uint32_t own;

	(void)arg;
	if (fd < 0)
		die("socket");
	{
		struct sockaddr_nl a = { .nl_family = AF_NETLINK };

		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			die("bind");
	}
	own = port_of(fd);
	while (!flood_stop) {
		FILE *f = fopen("/proc/net/netlink", "r");
		char line[256];

		if (!f)
			die("/proc/net/netlink");
		while (fgets(line, sizeof(line), f)) {
			unsigned long sk;
			int eth;
			unsigned int port;

			if (sscanf(line, "%lx %d %u", &sk, &eth, &port) != 3 ||
			    eth != NETLINK_RDMA || port == 0 || port == own)
				continue;
			/* device indexes 0..3, the first three requests */
			for (uint32_t k = 0; k < 12; k++) {
				struct sockaddr_nl to = { .nl_family = AF_NETLINK, .nl_pid = port };
				uint8_t buf[128];
				size_t n = forge(buf, k / 3, flood_qpn, 4242, k % 3 + 1);

				if (sendto(fd, buf, n, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to)) == (ssize_t)n)
					flood_sent++;
			}
		}
		fclose(f);
	}
	close(fd);
	return NULL;
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double time_check(uint32_t qpn, pid_t hint, int rounds)
{
	double t0 = now_us();
	pid_t pid;

	for (int i = 0; i < rounds; i++)
		if (cepd_qp_owner(dev, qpn, hint, &pid) != 0)
			FAIL("timed check of QPN 0x%x failed", qpn);
	return (now_us() - t0) / rounds;
}

int main(int argc, char **argv)
{
	struct kid a, b;
	int nreset = argc > 2 ? atoi(argv[2]) : 1000;
	int n_i = 0, n_r = 0;
	uint32_t qpn_i = 0, qpn_r_last = 0, qpn_t = 0;
	pid_t pid;
	int ret;

	if (argc < 2 || nreset < 1) {
		fprintf(stderr, "usage: qp-owner-guest DEV [NRESET]\n");
		return 2;
	}
	dev = argv[1];
	signal(SIGPIPE, SIG_IGN);
	spawn(&a, dev, 'A', 0);
	spawn(&b, dev, 'B', nreset);
	if (a.n != 4 || b.n != nreset) {
		FAIL("children reported %d and %d QPs, want 4 and %d", a.n, b.n, nreset);
		return 1;
	}

	for (int i = 0; i < a.n; i++) {
		switch (a.qps[i].kind) {
		case 'I':
			expect(a.qps[i].qpn, 0, a.pid, "A's QP in INIT");
			qpn_i = a.qps[i].qpn;
			n_i++;
			break;
		case 'T':
			expect(a.qps[i].qpn, 0, a.pid, "A's QP from a live thread");
			qpn_t = a.qps[i].qpn;
			break;
		case 'X':
			expect(a.qps[i].qpn, -ESRCH, 0, "A's QP from an exited thread");
			break;
		}
	}
	/* Each is a dump of all 1,000: every 20th and the last, not all. */
	for (int i = 0; i < b.n; i++) {
		if (i % 20 != 0 && i != b.n - 1)
			continue;
		expect(b.qps[i].qpn, 0, b.pid, "B's QP in RESET");
		qpn_r_last = b.qps[i].qpn;
		n_r++;
	}
	expect(1, -EPERM, 0, "QP1 (the kernel's GSI QP)");
	expect(0xffffff, -ENOENT, 0, "a QPN no QP has");
	pid = -1;
	ret = cepd_qp_owner("nosuchdev0", qpn_i, 0, &pid);
	if (ret != -ENOENT || pid != -1)
		FAIL("unknown device: got %d pid %d, want -ENOENT", ret, (int)pid);

	printf("qp-owner-guest: %d INIT QPs (doit) and %d of %d RESET QPs (multipart dump) checked\n",
	       n_i + 1, n_r, b.n);
	/* The doit path, first check of the device (device dump + doit) and
	 * with its index cached (doit alone), interleaved so that both see
	 * the same load on this TCG guest. */
	{
		double first = 0, cached = 0, hinted = 0;

		for (int i = 0; i < 100; i++) {
			cepd_qp_owner_forget_devices();
			first += time_check(qpn_i, 0, 1);
			cached += time_check(qpn_i, 0, 1);
			hinted += time_check(qpn_i, a.pid, 1);
		}
		printf("qp-owner-guest: one check, doit path: %.1f us first, %.1f us with "
		       "the device index cached, %.1f us also expecting the owner as cepd "
		       "does (means of 100)\n", first / 100, cached / 100, hinted / 100);
	}
	/* A QP made by another thread of the owner (a server's worker
	 * thread): expecting the owner, as cepd does, its task directory
	 * answers; expecting nobody, pidfd_open and the status file do. */
	if (qpn_t) {
		double hinted = 0, unhinted = 0;

		for (int i = 0; i < 100; i++) {
			hinted += time_check(qpn_t, a.pid, 1);
			unhinted += time_check(qpn_t, 0, 1);
		}
		printf("qp-owner-guest: one check of a QP made by another thread: %.1f us "
		       "expecting the owner as cepd does, %.1f us expecting nobody (means of 100)\n",
		       hinted / 100, unhinted / 100);
	}
	printf("qp-owner-guest: one check, dump path over %d QPs: %.1f us (mean of 5)\n",
	       nreset + a.n + 1, time_check(qpn_r_last, 0, 5));

	/* Where the time of one check goes: the socket and the device dump
	 * (an unknown device stops there), and the /proc read. */
	{
		double t0 = now_us();
		char path[64], buf[4096];

		for (int i = 0; i < 100; i++)
			(void)cepd_qp_owner("nosuchdev0", qpn_i, 0, &pid);
		printf("qp-owner-guest: socket and device dump alone: %.1f us (mean of 100)\n",
		       (now_us() - t0) / 100);
		snprintf(path, sizeof(path), "/proc/%d/status", (int)a.pid);
		t0 = now_us();
		for (int i = 0; i < 100; i++) {
			FILE *f = fopen(path, "r");

			if (f) {
				(void)!fread(buf, 1, sizeof(buf), f);
				fclose(f);
			}
		}
		printf("qp-owner-guest: reading /proc/PID/status alone: %.1f us (mean of 100)\n",
		       (now_us() - t0) / 100);
	}

	check_pool(qpn_i, a.pid);
	check_connected_socket();
	{
		pthread_t t;
		int wrong = 0;

		flood_qpn = qpn_i;
		if (pthread_create(&t, NULL, flood, NULL))
			die("pthread_create");
		for (int i = 0; i < 200; i++) {
			pid = -1;
			ret = cepd_qp_owner(dev, qpn_i, i % 2 ? a.pid : 0, &pid);
			if (ret != 0 || pid != a.pid)
				wrong++;
		}
		flood_stop = 1;
		pthread_join(t, NULL);
		if (wrong)
			FAIL("%d of 200 checks wrong under forged replies", wrong);
		printf("qp-owner-guest: 200 checks under forged replies right "
		       "(%d forged datagrams accepted by unconnected sockets)\n", flood_sent);
	}

	/* B exits: the kernel destroys its QPs with its verbs file. */
	reap(&b);
	for (int i = 0; i < b.n; i += b.n / 10 + 1)
		expect(b.qps[i].qpn, -ENOENT, 0, "B's QP after B exited");
	expect(b.qps[b.n - 1].qpn, -ENOENT, 0, "B's last QP after B exited");
	for (int i = 0; i < a.n; i++)
		if (a.qps[i].kind == 'I')
			expect(a.qps[i].qpn, 0, a.pid, "A's QP after B exited");
	reap(&a);
	expect(qpn_i, -ENOENT, 0, "A's QP after A exited");

	if (failures) {
		fprintf(stderr, "qp-owner-guest: %d failure(s)\n", failures);
		return 1;
	}
	printf("qp-owner-guest: all checks passed\n");
	return 0;
}
