/* SPDX-License-Identifier: MIT */
/*
 * cepd attacked by an unprivileged local user (issue 26): a `cepd --fabric
 * 2` whose socket any user may reach, and a process of uid 65534 (nobody,
 * no capabilities, as `setpriv --reuid 65534 --regid 65534
 * --clear-groups` leaves it) trying what the kernel's rdma_cm refuses it.
 * Where the kernel allows root the same, root does it as the control.
 * Each scenario is one meson test (service-attack-NAME); the test itself
 * runs as root (it changes uids, writes ns_last_pid).
 *
 *   listen-port   a port below 1024 of rdma_cm's port spaces needs
 *                 CAP_NET_BIND_SERVICE (kernel cma_use_port): refused to
 *                 nobody and to a user namespace's "root"; a process with
 *                 just that capability and root may; a port above 1023 is
 *                 anyone's
 *   listen-raw    a raw IB CM service ID or any mask: CAP_NET_ADMIN (the
 *                 kernel's rdma_cm gives user space neither); nobody's
 *                 wildcard is refused and root's REQ to a port nobody
 *                 listens on is rejected, not caught; root may use a
 *                 mask, but not one overlapping another client's listener
 *   listen-grant  the administrator's grants (cepd.conf): a uid's range and
 *                 a group's ID, a mask inside the range, nothing outside;
 *                 SIGHUP reads them again
 *   identity      the client is the process, not its pid: a privileged
 *                 client exits leaving its socket to an unprivileged child,
 *                 and its pid goes to a new root process (ns_last_pid):
 *                 the child gets none of root's rights; with SO_PEERPIDFD
 *                 and with the HELLO's pidfd (CEPD_NO_PEERPIDFD=1), and a
 *                 HELLO sent by another uid than the connection's is refused
 *   sidr-rep      a SIDR_REP names only a QP of the answering client, and a
 *                 controlled Q_Key needs CAP_NET_RAW (root may)
 *   source        CONNECT's GID index, P_Key index, path GIDs and P_Key
 *                 must be the port's
 *   clients       at most clients-per-uid connections of one uid (the
 *                 next is told -EUSERS), a connection that sends no HELLO is
 *                 dropped after hello-timeout-ms; root is served meanwhile
 *   fds           cepd out of descriptors refuses what it cannot take
 *                 without spinning (its CPU time is measured) and serves
 *                 root again once the attacker lets go
 *   ids           ids-per-uid bounds the ids of all of a uid's clients;
 *                 another uid is not affected
 *   events        a client that does not read (its socket full of the
 *                 answers to requests it pipelined) is dropped once its
 *                 waiting events would pass event-bytes-per-client;
 *                 others are served
 *   timewait      a destroyed connection's DREQ and timewait count against
 *                 its owner's ids-per-uid until they are over
 *   stats         `cepd --stats` shows a user its own clients only
 *   socket-mode   the socket cepd makes is 0666 whatever its umask
 *   sa            what nobody may ask of the port's SA through cepd
 *                 (multicast joins and leaves, path queries, IPoIB's
 *                 broadcast group), spoken raw: the kernel rdma_cm's
 *                 choices only
 *
 * Usage: test-service-attack CEPD-PATH SCENARIO
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>

#include <cep/cm.h>
#include <cep/sa.h>

#include "../common/check.h"
#include "cepd_raw.h"
#include "cepd_test.h"

#define NOBODY 65534

/* rdma_cm port-space service IDs (IBTA A3; the kernel's cma_get_service_id) */
#define TCP(port) (0x0000000001060000ull | (port))
#define UDP(port) (0x0000000001110000ull | (port))
#define IBPS(port) (0x00000000013f0000ull | (port))
#define IPOIB(port) (0x0000000000020000ull | (port))

static const char *cepd_path;
static char dir_path[64], sock_path[100];

/* ---- the service --------------------------------------------------------- */

/* Start `cepd --fabric 2` on the test's socket with @extra arguments
 * (NULL-terminated, may be NULL). */
static pid_t start_cepd(const char *const *extra)
{
	char *argv[32] = { "cepd", "--fabric", "2", "--workers", "2", "--socket", sock_path };
	int n = 7;

	for (; extra && *extra && n < 30; extra++)
		argv[n++] = (char *)*extra;
	argv[n] = NULL;
	return cepd_spawn(cepd_path, argv, sock_path, 500, "attack");
}

static void stop_cepd(pid_t pid)
{
	int st = 0;

	kill(pid, SIGTERM);
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- identities -------------------------------------------------------------- */

/* Become @uid with its group, no supplementary groups and no capabilities
 * (setpriv --reuid --regid --clear-groups). */
static void become(uid_t uid)
{
	if (setgroups(0, NULL) || setresgid(uid, uid, uid) || setresuid(uid, uid, uid)) {
		perror("become");
		_exit(99);
	}
}

/* Run @fn in a child process as @uid (-1: as root); its exit status. */
static int run_as(int uid, int (*fn)(void *), void *arg)
{
	int st = 0;
	pid_t pid = fork();

	if (pid == 0) {
		check_failures = 0; /* the child's own count */
		if (uid >= 0)
			become((uid_t)uid);
		st = fn(arg);
		fflush(NULL);
		_exit(st);
	}
	if (waitpid(pid, &st, 0) != pid)
		return 98;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A child at work as another user, which stops at checkpoints while its
 * parent (root) does something meanwhile. */
struct child {
	pid_t pid;
	int to, from;   /* the parent's ends */
};

static int c_in = -1, c_out = -1; /* the child's ends */

/* In a child of spawn_as: tell the parent we are at a checkpoint, wait
 * until it lets us go on. */
static void checkpoint(void)
{
	char c = 'h';

	if (write(c_out, &c, 1) != 1 || read(c_in, &c, 1) != 1)
		_exit(3);
}

static struct child spawn_as(int uid, int (*fn)(void *), void *arg)
{
	int a[2], b[2];
	struct child ch;

	if (pipe(a) || pipe(b))
		exit(1);
	ch.pid = fork();
	if (ch.pid == 0) {
		check_failures = 0;
		close(a[1]);
		close(b[0]);
		c_in = a[0];
		c_out = b[1];
		if (uid >= 0)
			become((uid_t)uid);
		a[0] = fn(arg);
		fflush(NULL);
		_exit(a[0]);
	}
	close(a[0]);
	close(b[1]);
	ch.to = a[1];
	ch.from = b[0];
	return ch;
}

/* Wait (10 s) for the child's checkpoint: 1, or 0 (it ended or hung). */
static int at_checkpoint(struct child *ch)
{
	struct pollfd pf = { .fd = ch->from, .events = POLLIN };
	char c;

	return poll(&pf, 1, 10000) == 1 && read(ch->from, &c, 1) == 1;
}

static void go_on(struct child *ch)
{
	char c = 'g';

	CHECK_EQ(write(ch->to, &c, 1), 1);
}

/* The child's exit status. */
static int finish(struct child *ch)
{
	int st = 0;

	close(ch->to);
	close(ch->from);
	if (waitpid(ch->pid, &st, 0) != ch->pid)
		return 98;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static struct cep_cm *attach(unsigned port)
{
	struct cep_cm_attach_attr a = { .size = sizeof(a), .socket = sock_path, .port_num = port };
	struct cep_cm *cm = NULL;
	int ret = cep_cm_attach(&a, &cm);

	if (ret) {
		fprintf(stderr, "attach port %u: %s\n", port, strerror(-ret));
		_exit(97);
	}
	return cm;
}

/* Events of ids without a channel: not looked at. */
static int ignore(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	(void)ev;
	return 0;
}

static struct cep_cm_id *new_id(struct cep_cm *cm, struct cep_cm_channel *ch)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .channel = ch, .handler = ch ? NULL : ignore };
	struct cep_cm_id *id = NULL;

	CHECK_EQ(cep_cm_create_id(cm, &ia, &id), 0);
	return id;
}

/* Listen on (@sid, @mask) with a new id of @cm: the answer. */
static int try_listen(struct cep_cm *cm, uint64_t sid, uint64_t mask)
{
	struct cep_cm_id *id = new_id(cm, NULL);
	int ret = id ? cep_cm_listen(id, sid, mask) : -ENOMEM;

	if (id)
		(void)cep_cm_destroy_id(id);
	return ret;
}

/* The next event of @type on @ch within @ms (acked; its status, QPN of a
 * SIDR_REP and private data copied to *@out), 1 if it came, 0 if not;
 * other events are acked and skipped. */
static int wait_ev(struct cep_cm_channel *ch, int type, int ms, struct cep_cm_event *out,
		   struct cep_cm_id **id)
{
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct cep_cm_event *ev;
		struct pollfd pf = { .fd = cep_cm_channel_fd(ch), .events = POLLIN };

		while (cep_cm_get_event(ch, &ev) == 0) {
			int hit = (int)ev->type == type;

			if (hit && out)
				*out = *ev;
			if (hit && id)
				*id = ev->id;
			cep_cm_ack_event(ev);
			if (hit)
				return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			return 0;
		poll(&pf, 1, 10);
	}
}

static struct cep_cm_channel *channel(void)
{
	struct cep_cm_channel *ch = NULL;

	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	return ch;
}

/* ---- listen-port ---------------------------------------------------------------- */

static int nobody_ports(void *arg)
{
	struct cep_cm *cm = attach(0);

	(void)arg;
	CHECK_EQ(try_listen(cm, TCP(445), ~0ull), -EACCES);
	CHECK_EQ(try_listen(cm, UDP(80), ~0ull), -EACCES);
	CHECK_EQ(try_listen(cm, IBPS(1), ~0ull), -EACCES);
	CHECK_EQ(try_listen(cm, IPOIB(1023), ~0ull), -EACCES);
	CHECK_EQ(try_listen(cm, TCP(0), ~0ull), -EACCES);
	/* unprivileged ports are anyone's, in every port space */
	CHECK_EQ(try_listen(cm, TCP(1024), ~0ull), 0);
	CHECK_EQ(try_listen(cm, UDP(4791), ~0ull), 0);
	CHECK_EQ(try_listen(cm, IBPS(20000), ~0ull), 0);
	CHECK_EQ(try_listen(cm, IPOIB(65535), ~0ull), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("nobody");
}

/* nobody in a user namespace of its own where it is "root" with every
 * capability (`unshare --user --map-root-user`, as any user may): those
 * are not capabilities in cepd's namespace. This test program again,
 * inside the namespace (scenario userns-inner: a fresh process, as
 * unshare(2) of a user namespace needs one thread). */
static char self_path[4096];

static int userns_root(void *arg)
{
	(void)arg;
	execl("/usr/bin/unshare", "unshare", "--user", "--map-root-user", self_path, cepd_path,
	      "userns-inner", sock_path, (char *)NULL);
	perror("unshare");
	return 96;
}

static void userns_inner(void)
{
	struct cep_cm *cm;
	uint64_t eff = 0;
	char st[4096];
	FILE *f = fopen("/proc/self/status", "r");
	size_t n = f ? fread(st, 1, sizeof(st) - 1, f) : 0;
	const char *c;

	if (f)
		fclose(f);
	st[n] = 0;
	c = strstr(st, "CapEff:");
	if (c)
		eff = strtoull(c + 7, NULL, 16);
	CHECK_EQ(getuid(), 0);
	/* CAP_NET_BIND_SERVICE and CAP_NET_ADMIN here */
	CHECK(eff & (1ull << CAP_NET_BIND_SERVICE) && eff & (1ull << CAP_NET_ADMIN));
	cm = attach(0);
	CHECK_EQ(try_listen(cm, TCP(445), ~0ull), -EACCES);
	CHECK_EQ(try_listen(cm, 0x6000, ~0ull), -EACCES);
	CHECK_EQ(cep_cm_destroy(cm), 0);
}

/* nobody with CAP_NET_BIND_SERVICE alone (kept across the uid change, as
 * `setpriv --inh-caps +net_bind_service --ambient-caps ...` gives it). */
static int bind_service_only(void *arg)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	struct cep_cm *cm;

	(void)arg;
	if (prctl(PR_SET_KEEPCAPS, 1) || setgroups(0, NULL) ||
	    setresgid(NOBODY, NOBODY, NOBODY) || setresuid(NOBODY, NOBODY, NOBODY))
		return 95;
	memset(d, 0, sizeof(d));
	d[0].effective = d[0].permitted = 1u << CAP_NET_BIND_SERVICE;
	if (syscall(SYS_capset, &h, d))
		return 95;
	cm = attach(0);
	CHECK_EQ(try_listen(cm, TCP(445), ~0ull), 0);
	CHECK_EQ(try_listen(cm, IBPS(80), ~0ull), 0);
	/* not CAP_NET_ADMIN: no raw ID, no mask */
	CHECK_EQ(try_listen(cm, 0x6000, ~0ull), -EACCES);
	CHECK_EQ(try_listen(cm, TCP(445), ~0xffull), -EACCES);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("net-bind-service");
}

static int root_ports(void *arg)
{
	struct cep_cm *cm = attach(0);

	(void)arg;
	CHECK_EQ(try_listen(cm, TCP(445), ~0ull), 0);
	CHECK_EQ(try_listen(cm, 0x6000, ~0ull), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("root");
}

static void scenario_listen_port(void)
{
	pid_t d = start_cepd(NULL);

	CHECK_EQ(run_as(NOBODY, nobody_ports, NULL), 0);
	CHECK_EQ(run_as(NOBODY, userns_root, NULL), 0);
	CHECK_EQ(run_as(-1, bind_service_only, NULL), 0);
	CHECK_EQ(run_as(-1, root_ports, NULL), 0);
	stop_cepd(d);
}

/* ---- listen-raw -------------------------------------------------------------------- */

/* Root's server: listens on TCP 5001 until told to go (a byte on fd). */
static int root_server(void *arg)
{
	int *pipes = arg; /* [0]: read "go", [1]: write "ready" */
	struct cep_cm *cm = attach(1);
	struct cep_cm_id *l = new_id(cm, NULL);
	char c = 'r';

	CHECK_EQ(cep_cm_listen(l, TCP(5001), ~0ull), 0);
	CHECK_EQ(write(pipes[1], &c, 1), 1);
	CHECK_EQ(read(pipes[0], &c, 1), 1);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("root-server");
}

static int nobody_wildcard(void *arg)
{
	struct cep_cm *cm = attach(1);

	(void)arg;
	CHECK_EQ(try_listen(cm, 0, 0x8000000000000000ull), -EACCES); /* half of every ID */
	CHECK_EQ(try_listen(cm, TCP(5002), 0xffffffffffff0000ull), -EACCES); /* all TCP ports */
	CHECK_EQ(try_listen(cm, 0x6000, ~0ull), -EACCES); /* a raw ID */
	CHECK_EQ(try_listen(cm, TCP(5001), ~0ull), -EADDRINUSE); /* root's, exact */
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("nobody-wildcard");
}

/* Root's client connects to TCP 5002 on port 1, where nobody listens: the
 * REQ is rejected (no attacker caught it). */
static int root_victim(void *arg)
{
	struct cep_cm *cm = attach(0);
	struct cep_cm_channel *ch = channel();
	struct cep_cm_id *a = new_id(cm, ch);
	struct cep_cm_conn_param p;
	struct cep_cm_event ev;

	(void)arg;
	CHECK_EQ(cep_cm_qp_register(cm, 0x777), 0);
	cepd_fabric_conn(&p, 0, 1, TCP(5002), 0x777, 14);
	CHECK_EQ(cep_cm_connect(a, &p), 0);
	CHECK(wait_ev(ch, CEP_CM_EV_REJ_RECEIVED, 5000, &ev, NULL));
	CHECK_EQ(ev.msg.u.rej.reason, CEP_REJ_INVALID_SERVICE_ID);
	CHECK_EQ(cep_cm_destroy_id(a), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("root-victim");
}

static int root_masks(void *arg)
{
	struct cep_cm *cm = attach(1);

	(void)arg;
	/* root may use masks and raw IDs, but not over another's listener */
	CHECK_EQ(try_listen(cm, TCP(0), 0xffffffffffff0000ull), -EADDRINUSE);
	CHECK_EQ(try_listen(cm, 0, 0x8000000000000000ull), -EADDRINUSE);
	CHECK_EQ(try_listen(cm, 0x7000000000000000ull, 0xf000000000000000ull), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("root-masks");
}

static void scenario_listen_raw(void)
{
	pid_t d = start_cepd(NULL);
	int go[2], ready[2], pipes[2];
	pid_t srv;
	char c = 0;

	if (pipe(go) || pipe(ready))
		exit(1);
	pipes[0] = go[0];
	pipes[1] = ready[1];
	srv = fork();
	if (srv == 0) {
		check_failures = 0;
		_exit(root_server(pipes));
	}
	CHECK_EQ(read(ready[0], &c, 1), 1);
	CHECK_EQ(run_as(NOBODY, nobody_wildcard, NULL), 0);
	CHECK_EQ(run_as(-1, root_victim, NULL), 0);
	CHECK_EQ(run_as(-1, root_masks, NULL), 0);
	CHECK_EQ(write(go[1], &c, 1), 1);
	{
		int st = 0;

		CHECK_EQ(waitpid(srv, &st, 0), srv);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	stop_cepd(d);
}

/* ---- listen-grant --------------------------------------------------------------------- */

static char conf_path[128];

static int nobody_granted(void *arg)
{
	struct cep_cm *cm = attach(0);

	(void)arg;
	CHECK_EQ(try_listen(cm, 0x6001, ~0ull), 0);
	CHECK_EQ(try_listen(cm, 0x6000, ~0xffull), 0);          /* 0x6000-0x60ff: inside */
	CHECK_EQ(try_listen(cm, 0x6000, ~0xfffull), -EACCES);   /* 0x6000-0x6fff: not all */
	CHECK_EQ(try_listen(cm, 0x6100, ~0ull), -EACCES);
	CHECK_EQ(try_listen(cm, 0x7000, ~0ull), 0);             /* its group's */
	CHECK_EQ(try_listen(cm, 0x7001, ~0ull), -EACCES);
	CHECK_EQ(try_listen(cm, TCP(445), ~0ull), 0);           /* granted below 1024 */
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("nobody-granted");
}

static int nobody_ungranted(void *arg)
{
	struct cep_cm *cm = attach(0);

	(void)arg;
	CHECK_EQ(try_listen(cm, 0x6001, ~0ull), -EACCES);
	CHECK_EQ(try_listen(cm, 0x7000, ~0ull), -EACCES);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("nobody-ungranted");
}

static void write_conf(const char *text)
{
	FILE *f = fopen(conf_path, "w");

	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void scenario_listen_grant(void)
{
	const char *extra[] = { "--config", conf_path, NULL };
	pid_t d;

	snprintf(conf_path, sizeof(conf_path), "%s/cepd.conf", dir_path);
	write_conf("# grants of the test\n"
		   "listen 65534 0x6000-0x60ff\n"
		   "listen @65534 0x7000   # its group\n"
		   "listen nobody 0x00000000010601bd\n");
	d = start_cepd(extra);
	CHECK_EQ(run_as(NOBODY, nobody_granted, NULL), 0);
	/* the grants gone, read again on SIGHUP */
	write_conf("listen 0 0x6000\n");
	kill(d, SIGHUP);
	usleep(300 * 1000);
	CHECK_EQ(run_as(NOBODY, nobody_ungranted, NULL), 0);
	stop_cepd(d);
	/* a file with an error is refused at start: exit status 2 */
	write_conf("listen nosuchuser-xyz 0x6000\n");
	{
		int st = 0;
		pid_t pid = fork();

		if (pid == 0) {
			execl(cepd_path, "cepd", "--fabric", "1", "--socket", sock_path,
			      "--config", conf_path, (char *)NULL);
			_exit(127);
		}
		CHECK_EQ(waitpid(pid, &st, 0), pid);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	}
}

/* ---- identity ----------------------------------------------------------------------- */

/* A connected client's socket (port 0) opened by the calling process. */
static int raw_open0(void)
{
	int fd = cepd_raw_open(sock_path, 0);

	CHECK(fd >= 0);
	return fd;
}

static int raw_listen(int fd, uint64_t sid)
{
	struct cepd_id_rep idr;
	int ret = cepd_raw_req(fd, CEPD_CREATE_ID, 0, 0, 0, 0, &idr, sizeof(idr));

	if (ret)
		return ret;
	ret = cepd_raw_req(fd, CEPD_LISTEN, idr.handle, 0, sid, ~0ull, NULL, 0);
	(void)cepd_raw_req(fd, CEPD_DESTROY_ID, idr.handle, 0, 0, 0, NULL, 0);
	return ret;
}

/* Write @v to /proc/sys/kernel/ns_last_pid: the next fork gets pid @v + 1. */
static int set_last_pid(pid_t v)
{
	char b[32];
	int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
	int n = snprintf(b, sizeof(b), "%d", (int)v);
	int ok = fd >= 0 && write(fd, b, (size_t)n) == n;

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

/* Who holds pid @p now (its /proc status "Name:" and "Tgid:"), for the
 * message when A's pid could not be given to R. */
static void say_holder(pid_t p)
{
	char path[64], line[128];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)p);
	f = fopen(path, "re");
	if (!f) {
		fprintf(stderr, "identity: pid %d is free, yet fork did not take it\n", (int)p);
		return;
	}
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Name:", 5) || !strncmp(line, "Tgid:", 5))
			fprintf(stderr, "identity: pid %d held by another task: %s", (int)p, line);
	fclose(f);
}

/* Root's process A connects (its HELLO, its identity), forks B, which
 * drops to nobody keeping the socket, and exits. Then A's pid goes to a
 * new root process R. B must not pass as A, nor as R. 0 when the round
 * ran (its checks counted), -EAGAIN when A's pid went to another task
 * than R before R could take it (nothing checked: run it again).
 *
 * B says it is ready before A's pid is recycled: under ThreadSanitizer a
 * forked child starts the runtime's own thread soon after the fork, and
 * a thread created after ns_last_pid was set takes the pid meant for R
 * (seen in CI: A's pid held by a thread of B). */
static int identity_round(void)
{
	int to_b[2], from_b[2];
	pid_t a, r = -1, apid = 0;
	char c;
	int st = 0, tries, ret = 0;

	if (pipe(to_b) || pipe(from_b))
		exit(1);
	a = fork();
	if (a == 0) {
		int fd;

		check_failures = 0;
		fd = raw_open0();
		pid_t b;

		/* root's rights, as the control */
		CHECK_EQ(raw_listen(fd, TCP(445)), 0);
		b = fork();
		if (b == 0) {
			become(NOBODY);
			c = 'r';
			if (write(from_b[1], &c, 1) != 1 || read(to_b[0], &c, 1) != 1)
				_exit(3);
			if (c != 'g')
				_exit(0); /* the round is run again */
			/* A is gone and R holds its pid: nothing privileged */
			CHECK_EQ(raw_listen(fd, TCP(445)), -EACCES);
			CHECK_EQ(raw_listen(fd, 0x6000), -EACCES);
			/* what needs no privilege still works */
			CHECK_EQ(raw_listen(fd, TCP(5555)), 0);
			c = check_failures ? 'f' : 'k';
			(void)!write(from_b[1], &c, 1);
			_exit(0);
		}
		_exit(check_done("identity-A"));
	}
	CHECK_EQ(waitpid(a, &st, 0), a);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	apid = a;
	{
		struct pollfd pf = { .fd = from_b[0], .events = POLLIN };

		CHECK(poll(&pf, 1, 10000) == 1 && read(from_b[0], &c, 1) == 1 && c == 'r');
	}
	/* A's pid to a root process R (retry if another fork took it) */
	for (tries = 0; tries < 50; tries++) {
		if (set_last_pid(apid - 1)) {
			perror("ns_last_pid");
			check_failures++;
			break;
		}
		r = fork();
		if (r == 0) {
			pause();
			_exit(0);
		}
		if (r == apid)
			break;
		kill(r, SIGKILL);
		waitpid(r, NULL, 0);
		r = -1;
		if (kill(apid, 0) == 0)
			break; /* a live task holds it: no fork will get it */
	}
	if (r != apid && kill(apid, 0) == 0) {
		say_holder(apid);
		ret = -EAGAIN;
		c = 'q';
		CHECK_EQ(write(to_b[1], &c, 1), 1);
	} else {
		CHECK_EQ(r, apid);
		c = 'g';
		CHECK_EQ(write(to_b[1], &c, 1), 1);
		struct pollfd pf = { .fd = from_b[0], .events = POLLIN };

		CHECK(poll(&pf, 1, 10000) == 1 && read(from_b[0], &c, 1) == 1 && c == 'k');
	}
	if (r > 0) {
		kill(r, SIGKILL);
		waitpid(r, NULL, 0);
	}
	close(to_b[0]);
	close(to_b[1]);
	close(from_b[0]);
	close(from_b[1]);
	return ret;
}

/* identity_round until it runs (5 times at most: each try that could not
 * recycle A's pid says who held it). */
static void identity_rounds(void)
{
	int tries = 0;

	while (identity_round() == -EAGAIN && ++tries < 5)
		;
	CHECK(tries < 5);
}

/* A HELLO whose sender is not of the connection's uid: refused. */
static void hello_other_uid(void)
{
	pid_t p;
	int st = 0;

	/* root connects, then (as nobody) says HELLO */
	p = fork();
	if (p == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		struct cepd_hello h;
		_Alignas(8) uint8_t buf[256];
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		ssize_t n;

		check_failures = 0;
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			_exit(2);
		become(NOBODY);
		cepd_hello_init(&h, 0, 0);
		CHECK_EQ(cmr_hello_send(fd, &h), 0);
		n = recv(fd, buf, sizeof(buf), 0);
		CHECK(n >= (ssize_t)sizeof(struct cepd_rep));
		if (n >= (ssize_t)sizeof(struct cepd_rep))
			CHECK_EQ(((struct cepd_rep *)buf)->ret, -EPERM);
		_exit(check_done("hello-other-uid"));
	}
	CHECK_EQ(waitpid(p, &st, 0), p);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void scenario_identity(void)
{
	pid_t d = start_cepd(NULL);

	identity_rounds();
	hello_other_uid();
	stop_cepd(d);
	/* the same where cepd learns the process from the HELLO's pidfd */
	setenv("CEPD_NO_PEERPIDFD", "1", 1);
	d = start_cepd(NULL);
	unsetenv("CEPD_NO_PEERPIDFD");
	identity_rounds();
	hello_other_uid();
	stop_cepd(d);
}

/* ---- sidr-rep ------------------------------------------------------------------------- */

/* The requester (port 1) asks SIDR for UDP 6000 on port 0: the answer
 * must be status 0 with the server's own QPN, never the victim's. */
static int sidr_requester(void *arg)
{
	struct cep_cm *cm = attach(1);
	struct cep_cm_channel *ch = channel();
	struct cep_cm_id *id = new_id(cm, ch);
	struct cep_mad_addr to = { .lid = 1, .qpn = 1, .qkey = CEP_QP1_QKEY };
	struct cep_cm_sidr_param p = { .size = sizeof(p), .service_id = UDP(6000), .pkey = 0xffff,
				       .timeout = 18, .max_cm_retries = 2, .peer = &to };
	struct cep_cm_event ev;

	(void)arg;
	CHECK_EQ(cep_cm_sidr_req(id, &p), 0);
	CHECK(wait_ev(ch, CEP_CM_EV_SIDR_REP_RECEIVED, 8000, &ev, NULL));
	CHECK_EQ(ev.status, CEP_SIDR_SUCCESS);
	CHECK_EQ(ev.msg.u.sidr_rep.qpn, 0x901); /* never the victim's 0x900 */
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("sidr-requester");
}

/* The victim (root) registers QPN 0x900 on port 0 and holds it. */
static int sidr_victim(void *arg)
{
	struct cep_cm *cm = attach(0);

	(void)arg;
	CHECK_EQ(cep_cm_qp_register(cm, 0x900), 0);
	checkpoint(); /* registered; held until the servers are done */
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("sidr-victim");
}

/* The server answers the SIDR_REQ: first naming the victim's QPN, then a
 * controlled Q_Key (root: accepted), then its own QPN with an ordinary
 * Q_Key. */
static int sidr_server(void *arg)
{
	int root = arg != NULL;
	struct cep_cm *cm = attach(0);
	struct cep_cm_channel *ch = channel();
	struct cep_cm_id *l = new_id(cm, ch), *req = NULL;

	CHECK_EQ(cep_cm_qp_register(cm, 0x901), 0);
	CHECK_EQ(cep_cm_listen(l, UDP(6000), ~0ull), 0);
	checkpoint(); /* listening: the requester asks */
	CHECK(wait_ev(ch, CEP_CM_EV_SIDR_REQ_RECEIVED, 5000, NULL, &req));
	if (req) {
		CHECK_EQ(cep_cm_sidr_rep(req, CEP_SIDR_SUCCESS, 0x900, 0x11, NULL, 0), -ENOENT);
		CHECK_EQ(cep_cm_sidr_rep(req, CEP_SIDR_SUCCESS, 0x901, 0x80000001u, NULL, 0),
			 root ? 0 : -EPERM);
		if (!root)
			CHECK_EQ(cep_cm_sidr_rep(req, CEP_SIDR_SUCCESS, 0x901, 0x11, NULL, 0), 0);
	}
	checkpoint(); /* answered: held until the requester has read it */
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done(root ? "sidr-server-root" : "sidr-server-nobody");
}

static void scenario_sidr_rep(void)
{
	pid_t d = start_cepd(NULL);
	struct child v = spawn_as(-1, sidr_victim, NULL);
	static int root_mark;

	CHECK(at_checkpoint(&v));
	for (int k = 0; k < 2; k++) {
		struct child srv = spawn_as(k ? -1 : NOBODY, sidr_server, k ? &root_mark : NULL);

		CHECK(at_checkpoint(&srv)); /* listening */
		go_on(&srv);
		CHECK_EQ(run_as(-1, sidr_requester, NULL), 0);
		CHECK(at_checkpoint(&srv)); /* answered */
		go_on(&srv);
		CHECK_EQ(finish(&srv), 0);
	}
	go_on(&v);
	CHECK_EQ(finish(&v), 0);
	stop_cepd(d);
}

/* ---- source -------------------------------------------------------------------------- */

static int source_checks(void *arg)
{
	struct cep_cm *cm = attach(0);
	struct cep_cm_conn_param p;
	struct cep_mad_addr peer = { .lid = 2, .qpn = 1, .qkey = CEP_QP1_QKEY };
	struct cep_cm_id *id;

	(void)arg;
	CHECK_EQ(cep_cm_qp_register(cm, 0x600), 0);
	cepd_fabric_conn(&p, 0, 1, TCP(7000), 0x600, 14);
	p.peer = &peer;
	id = new_id(cm, NULL);
	peer.gid_index = 3; /* no such GID on the port (a GRH or not) */
	CHECK_EQ(cep_cm_connect(id, &p), -EINVAL);
	peer.grh_present = 1;
	peer.gid_index = 1;
	CHECK_EQ(cep_cm_connect(id, &p), -EINVAL);
	peer.gid_index = 0;
	peer.pkey_index = 2; /* no such P_Key */
	CHECK_EQ(cep_cm_connect(id, &p), -EINVAL);
	peer.pkey_index = 0;
	p.pkey = 0x1234; /* not in the port's table */
	CHECK_EQ(cep_cm_connect(id, &p), -EINVAL);
	p.pkey = 0x7fff; /* the same partition, limited member: in the table */
	p.primary.local_gid[15] ^= 1; /* another node's GID */
	CHECK_EQ(cep_cm_connect(id, &p), -EINVAL);
	p.primary.local_gid[15] ^= 1;
	p.alternate = p.primary; /* an alternate path from a foreign GID */
	p.alternate.local_gid[9] ^= 0x40;
	CHECK_EQ(cep_cm_connect(id, &p), -EINVAL);
	memset(&p.alternate, 0, sizeof(p.alternate));
	p.qkey = 0x80000002u; /* a controlled Q_Key */
	CHECK_EQ(cep_cm_connect(id, &p), getuid() == 0 ? 0 : -EPERM);
	if (getuid()) {
		p.qkey = 0;
		CHECK_EQ(cep_cm_connect(id, &p), 0); /* all the port's */
	}
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done(getuid() ? "source-nobody" : "source-root");
}

static void scenario_source(void)
{
	pid_t d = start_cepd(NULL);

	CHECK_EQ(run_as(NOBODY, source_checks, NULL), 0);
	CHECK_EQ(run_as(-1, source_checks, NULL), 0);
	stop_cepd(d);
}

/* ---- sa ------------------------------------------------------------------------------- */

/* One request @op with fixed part @param (@plen bytes) on @fd: its
 * reply's ret. */
static int raw_param(int fd, uint32_t op, const void *param, size_t plen)
{
	_Alignas(8) uint8_t buf[sizeof(struct cepd_req) + 256];
	struct cepd_req *q = (struct cepd_req *)buf;

	memset(buf, 0, sizeof(buf));
	q->h.op = op;
	q->h.len = (uint32_t)(sizeof(*q) + plen);
	q->h.seq = 9;
	memcpy(buf + sizeof(*q), param, plen);
	return cepd_raw_call(fd, buf, q->h.len, NULL, 0);
}

/* What nobody may ask of the port's SA through cepd (multicast joins,
 * path queries, IPoIB's broadcast group; cepd(8) ACCESS), spoken raw so
 * that no client library filters it: nothing of its own choosing beyond
 * the kernel's rdma_cm's - a controlled or private Q_Key, a non-member
 * JoinState, another node's GID, a foreign P_Key, a unicast group, a
 * query without its source - and no leave of a membership it does not
 * hold. A well-formed request gets as far as the SA, which the fabric
 * lacks (-EOPNOTSUPP), whoever asks; a bad length is -EBADMSG. */
static int sa_checks(void *arg)
{
	struct cep_cm_conn_param p;
	struct cepd_mc ok, m;
	struct cepd_path_q pq;
	struct cep_sa_path path;
	int fd = raw_open0();

	(void)arg;
	cepd_fabric_conn(&p, 0, 1, TCP(7100), 0x600, 14);
	cepd_mc_rdma_cm(&ok, p.primary.local_gid, 7);
	CHECK_EQ(raw_param(fd, CEPD_MC_JOIN, &ok, sizeof(ok)), -EOPNOTSUPP);
	m = ok, m.qkey = 0x80000000u;
	CHECK_EQ(raw_param(fd, CEPD_MC_JOIN, &m, sizeof(m)), -EINVAL);
	m = ok, m.qkey = 0xb1b;
	CHECK_EQ(raw_param(fd, CEPD_MC_JOIN, &m, sizeof(m)), -EINVAL);
	m = ok, m.bit = 1;
	CHECK_EQ(raw_param(fd, CEPD_MC_JOIN, &m, sizeof(m)), -EINVAL);
	m = ok, m.port_gid[8] ^= 0x80;
	CHECK_EQ(raw_param(fd, CEPD_MC_JOIN, &m, sizeof(m)), -EINVAL);
	m = ok, m.pkey = 0x8001;
	CHECK_EQ(raw_param(fd, CEPD_MC_JOIN, &m, sizeof(m)), -EINVAL);
	m = ok, m.mgid[0] = 0x20;
	CHECK_EQ(raw_param(fd, CEPD_MC_JOIN, &m, sizeof(m)), -EINVAL);
	CHECK_EQ(raw_param(fd, CEPD_MC_LEAVE, &ok, sizeof(ok)), -EADDRNOTAVAIL);
	CHECK_EQ(raw_param(fd, CEPD_MC_JOIN, &ok, sizeof(ok) - 4), -EBADMSG);
	m = ok, m.pkey = 0x8001;
	CHECK_EQ(raw_param(fd, CEPD_MC_BCAST, &m, sizeof(m)), -EINVAL);
	CHECK_EQ(raw_param(fd, CEPD_MC_BCAST, &ok, sizeof(ok)), -EOPNOTSUPP);
	memset(&path, 0, sizeof(path));
	memcpy(path.sgid, p.primary.local_gid, 16);
	memcpy(path.dgid, p.primary.remote_gid, 16);
	path.pkey = 0xffff;
	memset(&pq, 0, sizeof(pq));
	pq.comp_mask = CEP_SA_PR_SGID | CEP_SA_PR_DGID | CEP_SA_PR_PKEY;
	CHECK_EQ(cep_sa_path_encode(&path, pq.rec), 0);
	CHECK_EQ(raw_param(fd, CEPD_PATH_QUERY, &pq, sizeof(pq)), -EOPNOTSUPP);
	pq.comp_mask = CEP_SA_PR_DGID;          /* asked from no source */
	CHECK_EQ(raw_param(fd, CEPD_PATH_QUERY, &pq, sizeof(pq)), -EINVAL);
	pq.comp_mask = CEP_SA_PR_SGID | CEP_SA_PR_DGID;
	path.sgid[15] ^= 1;                     /* from another node */
	CHECK_EQ(cep_sa_path_encode(&path, pq.rec), 0);
	CHECK_EQ(raw_param(fd, CEPD_PATH_QUERY, &pq, sizeof(pq)), -EINVAL);
	close(fd);
	return check_done(getuid() ? "sa-nobody" : "sa-root");
}

static void scenario_sa(void)
{
	pid_t d = start_cepd(NULL);

	CHECK_EQ(run_as(NOBODY, sa_checks, NULL), 0);
	CHECK_EQ(run_as(-1, sa_checks, NULL), 0);
	stop_cepd(d);
}

/* ---- clients, fds, ids, events: limits -------------------------------------------------- */

/* `cepd --stats` as the caller: its output (at most @len bytes). */
static void stats_text(char *out, size_t len)
{
	char cmd[256];
	FILE *f;
	size_t n = 0;

	snprintf(cmd, sizeof(cmd), "%s --stats --socket %s", cepd_path, sock_path);
	out[0] = 0;
	f = popen(cmd, "r");
	if (!f)
		return;
	n = fread(out, 1, len - 1, f);
	out[n] = 0;
	pclose(f);
}

static int count_lines(const char *text, const char *prefix)
{
	int n = 0;

	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		n += !strncmp(l, prefix, strlen(prefix));
	return n;
}

static int root_serves(void *arg)
{
	struct cep_cm *cm = attach(0);

	(void)arg;
	CHECK_EQ(try_listen(cm, TCP(8000), ~0ull), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("root-served");
}

static int nobody_clients(void *arg)
{
	int fds[80], n = 0, silent[10];
	char buf[16];

	(void)arg;
	for (int i = 0; i < 70; i++) {
		int fd = cepd_raw_open(sock_path, 0);

		if (i < 64)
			CHECK(fd >= 0);
		else
			CHECK_EQ(fd, -EUSERS);
		if (fd >= 0)
			fds[n++] = fd;
	}
	{
		/* and libcep's client says so */
		struct cep_cm_attach_attr a = { .size = sizeof(a), .socket = sock_path };
		struct cep_cm *cm = NULL;

		CHECK_EQ(cep_cm_attach(&a, &cm), -EUSERS);
	}
	checkpoint(); /* root is served meanwhile */
	while (n)
		close(fds[--n]);
	usleep(200 * 1000); /* the service sees them go */
	/* connections that never say HELLO are dropped after the deadline */
	for (int i = 0; i < 10; i++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		silent[i] = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
		CHECK_EQ(connect(silent[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
	}
	for (int i = 0; i < 10; i++) {
		struct pollfd pf = { .fd = silent[i], .events = POLLIN };

		CHECK_EQ(poll(&pf, 1, 3000), 1);
		CHECK_EQ(recv(silent[i], buf, sizeof(buf), MSG_DONTWAIT), 0);
		close(silent[i]);
	}
	return check_done("nobody-clients");
}

static void scenario_clients(void)
{
	const char *extra[] = { "--limit", "hello-timeout-ms=500", NULL };
	pid_t d = start_cepd(extra);
	struct child ch = spawn_as(NOBODY, nobody_clients, NULL);

	CHECK(at_checkpoint(&ch));
	CHECK_EQ(run_as(-1, root_serves, NULL), 0);
	go_on(&ch);
	CHECK_EQ(finish(&ch), 0);
	stop_cepd(d);
}

/* cepd's CPU time so far, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
	char path[64], b[1024], *p;
	long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(b, sizeof(b), f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	p = strrchr(b, ')');
	/* after the name: state (3) ... utime (14), stime (15) */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) != 2)
		return -1;
	return ut + st;
}

static pid_t fds_cepd;

static int nobody_fds(void *arg)
{
	int fds[200], n = 0;
	long t0, t1;

	(void)arg;
	/* far more connections than cepd has descriptors for */
	for (int i = 0; i < 200; i++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			fds[n++] = fd;
		else if (fd >= 0)
			close(fd);
	}
	CHECK(n > 64);
	usleep(300 * 1000);
	/* held: the service must not spin on the connections it cannot take */
	t0 = cpu_ticks(fds_cepd);
	sleep(2);
	t1 = cpu_ticks(fds_cepd);
	printf("cepd used %ld ticks in 2 s with %d connections pending\n", t1 - t0, n);
	CHECK(t0 >= 0 && t1 - t0 < 40); /* < 0.4 s of 2 s; a spin takes all of it */
	while (n)
		close(fds[--n]);
	return check_done("nobody-fds");
}

static void scenario_fds(void)
{
	const char *extra[] = { "--limit", "clients-per-uid=1000", "--limit",
				"hello-timeout-ms=60000", NULL };
	struct rlimit rl = { 48, 48 };

	fds_cepd = start_cepd(extra);
	/* cepd with few descriptors left (as root may set any process's) */
	CHECK_EQ(prlimit(fds_cepd, RLIMIT_NOFILE, &rl, NULL), 0);
	CHECK_EQ(run_as(NOBODY, nobody_fds, NULL), 0);
	usleep(300 * 1000);
	CHECK_EQ(run_as(-1, root_serves, NULL), 0);
	stop_cepd(fds_cepd);
}

static int nobody_ids(void *arg)
{
	int a = raw_open0(), b = raw_open0(), ret = 0, n = 0;
	struct cepd_id_rep idr;

	(void)arg;
	for (int i = 0; i < 60; i++)
		CHECK_EQ(cepd_raw_req(a, CEPD_CREATE_ID, 0, 0, 0, 0, &idr, sizeof(idr)), 0);
	/* the second client of the same uid shares its 100 */
	while (n < 100 && (ret = cepd_raw_req(b, CEPD_CREATE_ID, 0, 0, 0, 0, &idr, sizeof(idr))) == 0)
		n++;
	CHECK_EQ(n, 40);
	CHECK_EQ(ret, -EMFILE);
	checkpoint(); /* root is another uid: served meanwhile */
	close(a);
	close(b);
	return check_done("nobody-ids");
}

static void scenario_ids(void)
{
	const char *extra[] = { "--limit", "ids-per-uid=100", NULL };
	pid_t d = start_cepd(extra);
	struct child ch = spawn_as(NOBODY, nobody_ids, NULL);

	CHECK(at_checkpoint(&ch));
	CHECK_EQ(run_as(-1, root_serves, NULL), 0);
	go_on(&ch);
	CHECK_EQ(finish(&ch), 0);
	stop_cepd(d);
}

/* A listener that never reads its socket: it fills the socket's buffer
 * with the answers to requests it pipelines (20,000 queries it never
 * reads), so its events must wait in cepd; a requester of the same user
 * then connects to it: the first event that would pass the client's
 * limit (event-bytes-per-client, set below a 64 KiB block here) drops
 * the listener's client, and the requests after that are rejected (no
 * listener). Root is served meanwhile. (A REQ flood cannot fill it any
 * more: the requester's window (cm_pace.c) lets out only as many REQs as
 * the listener answers.) */
static int nobody_events(void *arg)
{
	int l = raw_open0();
	struct cepd_id_rep idr;
	struct cepd_req q;
	struct cep_cm *cm;
	struct cep_cm_channel *ch;
	int rejected = 0, sent = 0, queued = 0;

	(void)arg;
	CHECK_EQ(cepd_raw_req(l, CEPD_CREATE_ID, 0, 0, 0, 0, &idr, sizeof(idr)), 0);
	CHECK_EQ(cepd_raw_req(l, CEPD_LISTEN, idr.handle, 100000, TCP(9000), ~0ull, NULL, 0), 0);
	/* from here l is never read: its answers fill cepd's socket buffer
	 * (4 MiB) */
	memset(&q, 0, sizeof(q));
	q.h.op = CEPD_ID_QUERY;
	q.h.len = sizeof(q);
	q.handle = 0xdead;
	/* until cepd stops taking them: its thread for l is stuck in an
	 * answer, l's socket full (no room for 200 ms) */
	for (int idle = 0; idle < 200 && queued < 1000000;) {
		if (send(l, &q, sizeof(q), MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(q)) {
			queued++;
			idle = 0;
		} else {
			usleep(1000);
			idle++;
		}
	}
	cm = attach(1);
	ch = channel();
	for (int i = 0; i < 200 && !rejected; i++) {
		struct cep_cm_id *a = new_id(cm, ch);
		struct cep_cm_conn_param p;
		struct cep_cm_event *ev;

		CHECK_EQ(cep_cm_qp_register(cm, 0x1000 + (uint32_t)i), 0);
		cepd_fabric_conn(&p, 1, 0, TCP(9000), 0x1000 + (uint32_t)i, 20);
		if (cep_cm_connect(a, &p) == 0)
			sent++;
		usleep(5000);
		while (cep_cm_get_event(ch, &ev) == 0) {
			rejected += ev->type == CEP_CM_EV_REJ_RECEIVED;
			cep_cm_ack_event(ev);
		}
	}
	/* the listener's client was dropped: a REQ now gets REJ (no listener) */
	if (!rejected)
		rejected = wait_ev(ch, CEP_CM_EV_REJ_RECEIVED, 5000, NULL, NULL);
	printf("%d queries pipelined, %d REQs sent before the listener's client was dropped\n",
	       queued, sent);
	CHECK(rejected);
	checkpoint(); /* root is served */
	close(l);
	(void)cep_cm_destroy(cm);
	return check_done("nobody-events");
}

static void scenario_events(void)
{
	const char *extra[] = { "--limit", "event-bytes-per-client=1000", NULL };
	pid_t d = start_cepd(extra);
	struct child ch = spawn_as(NOBODY, nobody_events, NULL);
	char buf[8192];
	int gone = 0;

	CHECK(at_checkpoint(&ch));
	CHECK_EQ(run_as(-1, root_serves, NULL), 0);
	go_on(&ch);
	CHECK_EQ(finish(&ch), 0);
	for (int i = 0; i < 100 && !gone; i++) {
		stats_text(buf, sizeof(buf));
		gone = strstr(buf, "clients 0 ") != NULL;
		if (!gone)
			usleep(20000);
	}
	CHECK(gone);
	stop_cepd(d);
}

/* A connection's state after its id is destroyed (DREQ, timewait) is the
 * owner's until it is gone. Root serves (accepting every request); nobody
 * connects five times, disconnects and destroys: its ids are answered
 * DESTROYED at once, but stay charged to its uid through the timewait (4 s
 * here), so its budget of 8 has 3 left meanwhile, and all 8 after. */
static _Atomic uint32_t tw_qpn = 0x300;

static int accept_all(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param p = { .size = sizeof(p), .starting_psn = 1,
						 .responder_resources = 1, .initiator_depth = 1,
						 .rnr_retry_count = 7 };

		p.qpn = atomic_fetch_add(&tw_qpn, 1);
		CHECK_EQ(cep_cm_accept(id, &p), 0);
	}
	return 0;
}

static int tw_server(void *arg)
{
	struct cep_cm *cm = attach(1);
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = accept_all };
	struct cep_cm_id *l = NULL;

	(void)arg;
	for (uint32_t q = 0x300; q < 0x310; q++)
		CHECK_EQ(cep_cm_qp_register(cm, q), 0);
	CHECK_EQ(cep_cm_create_id(cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, TCP(9100), ~0ull), 0);
	checkpoint(); /* listening; then until the client is done */
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("timewait-server");
}

/* nobody's charged ids now (its client's stats line), -1 if none */
static long uid_ids(void)
{
	char buf[8192];
	const char *l, *k;

	stats_text(buf, sizeof(buf));
	l = strstr(buf, "\nclient ");
	k = l ? strstr(l, " uid_ids ") : NULL;
	return k ? strtol(k + 9, NULL, 10) : -1;
}

static int tw_client(void *arg)
{
	struct cep_cm *cm = attach(0);
	struct cep_cm_channel *ch = channel();
	struct cep_cm_id *ids[5];
	struct cepd_id_rep idr;
	int n = 0, ret = 0, raw;
	long held = -1;

	(void)arg;
	for (int i = 0; i < 5; i++) {
		struct cep_cm_conn_param p;

		CHECK_EQ(cep_cm_qp_register(cm, 0x400 + (uint32_t)i), 0);
		ids[i] = new_id(cm, ch);
		cepd_fabric_conn(&p, 0, 1, TCP(9100), 0x400 + (uint32_t)i, 14);
		p.packet_life_time = 19; /* timewait 2^20 x 4.096 us: 4.3 s */
		CHECK_EQ(cep_cm_connect(ids[i], &p), 0);
		CHECK(wait_ev(ch, CEP_CM_EV_ESTABLISHED, 5000, NULL, NULL));
	}
	for (int i = 0; i < 5; i++)
		CHECK_EQ(cep_cm_disconnect(ids[i], NULL, 0), 0);
	for (int i = 0; i < 5; i++)
		CHECK(wait_ev(ch, CEP_CM_EV_DREP_RECEIVED, 5000, NULL, NULL));
	for (int i = 0; i < 5; i++)
		CHECK_EQ(cep_cm_destroy_id(ids[i]), 0);
	for (int i = 0; i < 5; i++)
		CHECK(wait_ev(ch, CEP_CM_EV_DESTROYED, 5000, NULL, NULL));
	/* the five are destroyed for the client, in timewait for the engine */
	held = uid_ids();
	CHECK_EQ(held, 5);
	/* ids made in cepd at once (raw CREATE_ID; libcep's client makes one
	 * with its first request) */
	raw = raw_open0();
	while (n < 16 && (ret = cepd_raw_req(raw, CEPD_CREATE_ID, 0, 0, 0, 0, &idr, sizeof(idr))) == 0)
		n++;
	CHECK_EQ(n, 3);
	CHECK_EQ(ret, -EMFILE);
	/* the timewaits end: the budget is whole again */
	for (int t = 0; t < 100 && held != 3; t++) {
		usleep(100 * 1000);
		held = uid_ids();
	}
	CHECK_EQ(held, 3);
	CHECK_EQ(cepd_raw_req(raw, CEPD_CREATE_ID, 0, 0, 0, 0, &idr, sizeof(idr)), 0);
	close(raw);
	(void)cep_cm_destroy(cm);
	return check_done("timewait-client");
}

static void scenario_timewait(void)
{
	const char *extra[] = { "--limit", "ids-per-uid=8", NULL };
	pid_t d = start_cepd(extra);
	struct child srv = spawn_as(-1, tw_server, NULL);

	CHECK(at_checkpoint(&srv));
	CHECK_EQ(run_as(NOBODY, tw_client, NULL), 0);
	go_on(&srv);
	CHECK_EQ(finish(&srv), 0);
	stop_cepd(d);
}

/* ---- stats, socket-mode ---------------------------------------------------------------- */

static int nobody_stats(void *arg)
{
	char buf[8192];
	int fd = raw_open0();

	(void)arg;
	stats_text(buf, sizeof(buf));
	CHECK_EQ(count_lines(buf, "client "), 1);
	CHECK(strstr(buf, " uid 65534 ") != NULL);
	CHECK(strstr(buf, " uid 0 ") == NULL);
	close(fd);
	return check_done("nobody-stats");
}

static void scenario_stats(void)
{
	pid_t d = start_cepd(NULL);
	int fd = raw_open0(); /* root's client */
	char buf[8192];

	CHECK_EQ(run_as(NOBODY, nobody_stats, NULL), 0);
	/* root sees every client (its own, and nobody's while it was there) */
	stats_text(buf, sizeof(buf));
	CHECK_EQ(count_lines(buf, "client "), 1);
	CHECK(strstr(buf, " uid 0 ") != NULL);
	close(fd);
	stop_cepd(d);
}

static int nobody_attaches(void *arg)
{
	struct cep_cm *cm = attach(0);

	(void)arg;
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return check_done("nobody-attaches");
}

static void scenario_socket_mode(void)
{
	mode_t old = umask(077); /* cepd inherits it */
	pid_t d = start_cepd(NULL);
	struct stat st;

	umask(old);
	CHECK_EQ(stat(sock_path, &st), 0);
	CHECK_EQ(st.st_mode & 0777, 0666);
	CHECK_EQ(run_as(NOBODY, nobody_attaches, NULL), 0);
	stop_cepd(d);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} scenarios[] = {
		{ "listen-port", scenario_listen_port },
		{ "listen-raw", scenario_listen_raw },
		{ "listen-grant", scenario_listen_grant },
		{ "identity", scenario_identity },
		{ "sidr-rep", scenario_sidr_rep },
		{ "source", scenario_source },
		{ "clients", scenario_clients },
		{ "fds", scenario_fds },
		{ "ids", scenario_ids },
		{ "events", scenario_events },
		{ "timewait", scenario_timewait },
		{ "stats", scenario_stats },
		{ "socket-mode", scenario_socket_mode },
		{ "sa", scenario_sa },
	};

	if (argc == 4 && !strcmp(argv[2], "userns-inner")) { /* userns_root's */
		snprintf(sock_path, sizeof(sock_path), "%s", argv[3]);
		userns_inner();
		return check_done("userns-root");
	}
	if (argc != 3) {
		fprintf(stderr, "usage: %s CEPD-PATH SCENARIO\n", argv[0]);
		return 2;
	}
	if (!realpath("/proc/self/exe", self_path))
		return 1;
	if (geteuid() != 0) {
		printf("attack: needs root (it changes uids); skipped\n");
		return 77;
	}
	cepd_path = argv[1];
	signal(SIGPIPE, SIG_IGN);
	snprintf(dir_path, sizeof(dir_path), "/tmp/cepd-attack-XXXXXX");
	if (!mkdtemp(dir_path) || chmod(dir_path, 0755)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(sock_path, sizeof(sock_path), "%s/cepd.sock", dir_path);
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		if (!strcmp(argv[2], scenarios[i].name)) {
			scenarios[i].fn();
			unlink(sock_path);
			unlink(conf_path);
			rmdir(dir_path);
			return check_done(argv[2]);
		}
	fprintf(stderr, "unknown scenario %s\n", argv[2]);
	return 2;
}
