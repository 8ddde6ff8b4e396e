/* SPDX-License-Identifier: MIT */
/*
 * cepd attacked by an unprivileged local user on real RDMA ports (issue
 * 26; cepd-attack.sh): the Soft-RoCE counterpart of tests/service/attack.c,
 * with real QPs and the kernel's RDMA resource tracking. Guest a runs a
 * cepd on rxe0 (eth0, the initial network namespace) and rxe1 (a veth end
 * in namespace ns2); uid 65534 ("nobody", no capabilities: what `setpriv
 * --reuid 65534 --regid 65534 --clear-groups` leaves, done here with the
 * same system calls) tries what the kernel's rdma_cm refuses it, over the
 * raw protocol (src/service/proto.h, HELLO by cmr_hello_send); root does
 * the same as the control where the kernel allows root. Guest b runs a
 * cepd of its own and the peer role: a listener that accepts every REQ
 * with a real QP, and SIDR requests on a's demand (command files).
 *
 * Each attack prints its checks and one "PASS name" or "FAIL name" line;
 * the expected values are the kernel's rule as issue 26 and access.c
 * state it, so every attack fails against a cepd before issue 26 (84729fa):
 *
 *   1a qp-gone      nobody registers a real QP, destroys it in the kernel
 *                   behind cepd's back, and CONNECTs naming it: -ENOENT, and
 *                   cepd forgets the QPN (its port's and nobody's QP counts);
 *                   the same CONNECT on the live QP (control) was accepted
 *   1b qpn-reused   nobody's QPs X and Y (X connected to b) are destroyed
 *                   behind cepd's back; root cycles rxe's QP numbers until it
 *                   holds X and Y again (rxe allocates them cyclically,
 *                   xa_alloc_cyclic over 16..2^20 on 6.1, so a number comes
 *                   back after a full cycle: about a million QPs, some 470 s
 *                   under TCG). Root registers X: accepted, nobody's
 *                   stale registration evicted (its connection leaves
 *                   ESTABLISHED, b gets the DREQ); nobody's CONNECT naming
 *                   X: -ENOENT (not its registration any more); naming Y,
 *                   still registered by nobody but root's QP by the kernel's
 *                   word: -EPERM, and root registers Y. Skipped, saying why,
 *                   when the numbers cannot come back within BUDGET_S (the
 *                   rate measured over the first minute says so).
 *   2  pid-reuse    a client process A says HELLO, forks B which keeps the
 *                   socket, and exits; A's pid is given (ns_last_pid) to a
 *                   root process V that creates a QP. B (nobody) registers
 *                   V's QPN: -EPERM (the client is the dead A, not its pid),
 *                   and V registers it itself; with A nobody, and with A root
 *   3  sidr-rep     a SIDR_REP of nobody naming root's registered QP:
 *                   -ENOENT, with a controlled Q_Key (high bit): -EPERM, and b
 *                   gets neither; nobody's own QP and Q_Key, and root's
 *                   controlled Q_Key (the controls): answered
 *   4  listen       nobody on TCP port 445's service ID, a mask, a raw ID:
 *                   -EACCES; root may; root's wildcard over nobody's listener:
 *                   -EADDRINUSE
 *   5a source-ns    nobody in the initial namespace sending from rxe1's GID
 *                   (ns2's veth): -EACCES, by the MAD's GID index and by the
 *                   path's GID; nobody and root in ns2: accepted
 *   5b source-host  nobody in ns2 sending from rxe0's GID (the host's eth0):
 *                   -EACCES both ways; nobody in the initial namespace:
 *                   accepted
 *
 * Usage:
 *   cepd-attack-guest attack SOCKET SELF_IP PEER_IP NS2_IP NS2_PEER_IP DIR BUDGET_S
 *   cepd-attack-guest peer SOCKET SELF_IP PEER_IP DIR
 * DIR is the directory both guests share: the peer creates b.peer-ready in
 * it, reads cmd.N and answers res.N, and stops when a.done appears.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <cep/cm.h>
#include <cep/rdma_cm.h>

#include "service/proto.h"
#include "service/remote.h"

#define NOBODY 65534
#define TCP(port) cep_rdma_service_id(CEP_RDMA_PS_TCP, (port))
#define UDP(port) cep_rdma_service_id(CEP_RDMA_PS_UDP, (port))

/* Service IDs on b: its peer accepts every REQ to SVC_ACCEPT; nothing
 * listens on SVC_NONE (b's cepd answers REJ 8). SIDR on a. */
#define SVC_ACCEPT TCP(20000)
#define SVC_NONE TCP(20001)
#define SIDR_NOBODY UDP(20002)
#define SIDR_ROOT UDP(20003)

#define QKEY_CONTROLLED 0x80000000u

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *err_name(long v)
{
	static char b[64];

	if (v >= 0) {
		snprintf(b, sizeof(b), "%ld", v);
		return b;
	}
	snprintf(b, sizeof(b), "-%s", strerrorname_np((int)-v) ? strerrorname_np((int)-v) : "?");
	return b;
}

/* Write @text to @path atomically (a temporary file renamed). */
static int put_file(const char *path, const char *text)
{
	char tmp[4200];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fputs(text, f);
	if (fclose(f) || rename(tmp, path))
		return -errno;
	return 0;
}

/* ---- addresses ----------------------------------------------------------- */

/* The IPv4-mapped GID of @ip (network order). */
static void gid_of(const char *ip, uint8_t gid[16])
{
	struct in_addr a;

	memset(gid, 0, 16);
	if (inet_pton(AF_INET, ip, &a) != 1) {
		fprintf(stderr, "bad address %s\n", ip);
		exit(2);
	}
	gid[10] = gid[11] = 0xff;
	memcpy(gid + 12, &a, 4);
}

/* The index of @dev port 1's RoCE v2 entry holding @gid (sysfs), or -1. */
static int gid_index(const char *dev, const uint8_t gid[16])
{
	char want[64], path[128], line[128];

	/* as sysfs prints it: eight groups "xxxx" joined by ':' */
	for (int k = 0; k < 16; k += 2)
		snprintf(want + k / 2 * 5, 6, "%02x%02x:", gid[k], gid[k + 1]);
	want[39] = 0;
	for (int i = 0; i < 256; i++) {
		FILE *f;
		int hit;

		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gids/%d", dev, i);
		f = fopen(path, "r");
		if (!f)
			break;
		hit = fgets(line, sizeof(line), f) && !strncmp(line, want, strlen(want));
		fclose(f);
		if (!hit)
			continue;
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gid_attrs/types/%d",
			 dev, i);
		f = fopen(path, "r");
		hit = f && fgets(line, sizeof(line), f) && strstr(line, "v2");
		if (f)
			fclose(f);
		if (hit)
			return i;
	}
	return -1;
}

/* ---- verbs: real QPs ----------------------------------------------------- */

struct vq {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;   /* the QP cycler's: its QPs map no receive queue */
};

static int vq_open(struct vq *v, const char *dev)
{
	struct ibv_device **list = ibv_get_device_list(NULL);

	memset(v, 0, sizeof(*v));
	for (int i = 0; list && list[i] && !v->ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev))
			v->ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!v->ctx)
		return -ENODEV;
	v->pd = ibv_alloc_pd(v->ctx);
	v->cq = v->pd ? ibv_create_cq(v->ctx, 4, NULL, NULL, 0) : NULL;
	return v->cq ? 0 : -ENOMEM;
}

static struct ibv_qp *vq_qp(struct vq *v)
{
	struct ibv_qp_init_attr qa;

	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = v->cq;
	qa.srq = v->srq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 1;
	qa.cap.max_recv_wr = v->srq ? 0 : 1;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = v->srq ? 0 : 1;
	return ibv_create_qp(v->pd, &qa);
}

/* ---- a raw client of cepd (proto.h) -------------------------------------- */

struct rev {
	uint32_t type, handle, listen_handle;
	int32_t status;
};

struct rc {
	int fd;
	uint64_t seq;
	struct rev ev[64];     /* events seen while waiting for replies */
	unsigned nev;
};

static const char *sock_path;

/* One message from cepd within @ms: its length; 0 when none came; -1
 * when the connection is closed. */
static ssize_t rc_recv(struct rc *c, uint8_t *buf, int ms)
{
	struct pollfd pf = { .fd = c->fd, .events = POLLIN };
	ssize_t n;

	if (poll(&pf, 1, ms) != 1)
		return 0;
	n = recv(c->fd, buf, CEPD_MSG_MAX, 0);
	return n > 0 ? n : -1;
}

/* Keep the events of an EVENTS message. */
static void rc_keep_events(struct rc *c, const uint8_t *buf, size_t n)
{
	const struct cepd_events *e = (const struct cepd_events *)buf;
	size_t off = sizeof(*e);

	for (uint32_t i = 0; i < e->count && off + sizeof(struct cepd_ev) <= n; i++) {
		struct cepd_ev ev;

		memcpy(&ev, buf + off, sizeof(ev));
		if (ev.len < sizeof(ev))
			break;
		if (c->nev == sizeof(c->ev) / sizeof(c->ev[0])) {
			memmove(c->ev, c->ev + 1, sizeof(c->ev) - sizeof(c->ev[0]));
			c->nev--;
		}
		c->ev[c->nev++] = (struct rev){ ev.type, ev.handle, ev.listen_handle, ev.status };
		off += ev.len;
	}
}

/* Send @len bytes of request @msg; its reply's ret (payload to @out), or
 * -ECONNRESET (closed) / -ETIMEDOUT (no reply in 10 s). */
static int rc_call(struct rc *c, void *msg, size_t len, void *out, size_t outlen)
{
	static _Alignas(8) uint8_t buf[CEPD_MSG_MAX];
	struct cepd_hdr *h = msg;
	double end = now_s() + 10;

	h->seq = ++c->seq;
	if (send(c->fd, msg, len, MSG_NOSIGNAL) < 0)
		return -ECONNRESET;
	while (now_s() < end) {
		ssize_t n = rc_recv(c, buf, 1000);
		const struct cepd_rep *r = (const struct cepd_rep *)buf;

		if (n < 0)
			return -ECONNRESET;
		if ((size_t)n < sizeof(struct cepd_hdr))
			continue;
		if (r->h.op == CEPD_EVENTS) {
			rc_keep_events(c, buf, (size_t)n);
			continue;
		}
		if (r->h.op != CEPD_REPLY || (size_t)n < sizeof(*r) || r->h.seq != h->seq)
			continue;
		if (out)
			memcpy(out, buf + sizeof(*r),
			       (size_t)n - sizeof(*r) < outlen ? (size_t)n - sizeof(*r) : outlen);
		return r->ret;
	}
	return -ETIMEDOUT;
}

/* Connect and say HELLO for port 1 of @dev (flags: CEPD_HELLO_STATS). 0 or
 * the HELLO's answer. */
static int rc_open(struct rc *c, const char *dev, uint32_t flags)
{
	static _Alignas(8) uint8_t buf[CEPD_MSG_MAX];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct cepd_hello h;
	int ret;

	memset(c, 0, sizeof(*c));
	c->seq = 1;
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		goto fail;
	}
	cepd_hello_init(&h, flags, 1);
	snprintf(h.device, sizeof(h.device), "%s", dev);
	ret = cmr_hello_send(c->fd, &h);
	for (double end = now_s() + 10; !ret;) {
		ssize_t n = rc_recv(c, buf, 1000);

		if (n < 0) {
			ret = -ECONNRESET;
			break;
		}
		if ((size_t)n >= sizeof(struct cepd_rep) &&
		    ((struct cepd_hdr *)buf)->op == CEPD_REPLY) {
			ret = ((struct cepd_rep *)buf)->ret;
			break;
		}
		if (now_s() > end)
			ret = -ETIMEDOUT;
	}
	if (!ret)
		return 0;
fail:
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	return ret;
}

static void rc_close(struct rc *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

static int rc_req(struct rc *c, uint32_t op, uint32_t handle, uint32_t a, uint32_t b, uint32_t cc,
		  uint64_t x, uint64_t y, void *out, size_t outlen)
{
	struct cepd_req q;

	memset(&q, 0, sizeof(q));
	q.h.op = op;
	q.h.len = sizeof(q);
	q.handle = handle;
	q.a = a;
	q.b = b;
	q.c = cc;
	q.x = x;
	q.y = y;
	return rc_call(c, &q, sizeof(q), out, outlen);
}

static int rc_create_id(struct rc *c, uint32_t *h)
{
	struct cepd_id_rep r;
	int ret = rc_req(c, CEPD_CREATE_ID, 0, 0, 0, 0, 0, 0, &r, sizeof(r));

	*h = ret ? 0 : r.handle;
	return ret;
}

/* LISTEN on a new id: the answer (*h: the id, kept listening). */
static int rc_listen(struct rc *c, uint64_t sid, uint64_t mask, uint32_t *h)
{
	int ret = rc_create_id(c, h);

	return ret ? ret : rc_req(c, CEPD_LISTEN, *h, 0, 0, 0, sid, mask, NULL, 0);
}

static int rc_register(struct rc *c, uint32_t qpn)
{
	return rc_req(c, CEPD_QP_REGISTER, 0, qpn, 0, 0, 0, 0, NULL, 0);
}

/* The id's state (enum cep_cm_state), or -errno. */
static int rc_state(struct rc *c, uint32_t h)
{
	struct cepd_query_rep r;
	int ret = rc_req(c, CEPD_ID_QUERY, h, 0, 0, 0, 0, 0, &r, sizeof(r));

	return ret ? ret : (int)r.state;
}

static int rc_sidr_rep(struct rc *c, uint32_t h, uint32_t status, uint32_t qpn, uint32_t qkey)
{
	return rc_req(c, CEPD_SIDR_REP, h, status, qpn, qkey, 0, 0, NULL, 0);
}

/* A connection's addresses: port @gid_index sends the MAD (has_peer), the
 * path goes from @lgid to @rgid; has_peer 0: cepd takes the MAD's address
 * from the path. */
struct cspec {
	uint64_t sid;
	uint32_t qpn;
	int has_peer;
	unsigned gid_index;
	uint8_t lgid[16], rgid[16];
};

/* CONNECT on a new id: the answer (*h: the id). */
static int rc_connect(struct rc *c, const struct cspec *s, uint32_t *h)
{
	struct {
		struct cepd_req q;
		struct cepd_conn w;
	} m;
	int ret = rc_create_id(c, h);

	if (ret)
		return ret;
	memset(&m, 0, sizeof(m));
	m.q.h.op = CEPD_CONNECT;
	m.q.h.len = sizeof(m);
	m.q.handle = *h;
	m.w.service_id = s->sid;
	memcpy(m.w.primary.local_gid, s->lgid, 16);
	memcpy(m.w.primary.remote_gid, s->rgid, 16);
	m.w.primary.hop_limit = 64;
	m.w.primary.local_ack_timeout = 14;
	m.w.has_peer = (uint8_t)s->has_peer;
	m.w.peer.grh_present = 1;
	m.w.peer.gid_index = (uint8_t)s->gid_index;
	m.w.peer.hop_limit = 64;
	m.w.peer.qpn = 1;
	m.w.peer.qkey = CEP_QP1_QKEY;
	memcpy(m.w.peer.gid, s->rgid, 16);
	m.w.qpn = s->qpn;
	m.w.starting_psn = 1;
	m.w.pkey = 0xffff;
	m.w.responder_resources = 1;
	m.w.initiator_depth = 1;
	m.w.remote_cm_response_timeout = 18;
	m.w.local_cm_response_timeout = 18;
	m.w.max_cm_retries = 3;
	m.w.packet_life_time = 14;
	m.w.retry_count = 7;
	m.w.rnr_retry_count = 7;
	m.w.transport_service_type = CEP_TS_RC;
	return rc_call(c, &m, sizeof(m), NULL, 0);
}

/* Wait @ms for an event of @type whose listener is @lh (SIDR_REQ_RECEIVED,
 * REQ_RECEIVED) or whose id is @lh (others): 0 and *h, or -ETIMEDOUT. */
static int rc_event(struct rc *c, uint32_t type, uint32_t lh, int ms, uint32_t *h)
{
	static _Alignas(8) uint8_t buf[CEPD_MSG_MAX];
	double end = now_s() + ms / 1000.0;

	for (;;) {
		for (unsigned i = 0; i < c->nev; i++) {
			struct rev *e = &c->ev[i];
			int listened = type == CEP_CM_EV_REQ_RECEIVED ||
				       type == CEP_CM_EV_SIDR_REQ_RECEIVED;

			if (e->type == type && (listened ? e->listen_handle : e->handle) == lh) {
				*h = e->handle;
				memmove(e, e + 1, (c->nev - i - 1) * sizeof(*e));
				c->nev--;
				return 0;
			}
		}
		if (now_s() > end)
			return -ETIMEDOUT;
		ssize_t n = rc_recv(c, buf, 50);

		if (n < 0)
			return -ECONNRESET;
		if ((size_t)n >= sizeof(struct cepd_events) &&
		    ((struct cepd_hdr *)buf)->op == CEPD_EVENTS)
			rc_keep_events(c, buf, (size_t)n);
	}
}

/* The service's statistics (a statistics HELLO, as `cepd --stats`). */
static int stats_text(char *out, size_t len)
{
	struct rc c;
	int ret = rc_open(&c, "", CEPD_HELLO_STATS);

	memset(out, 0, len);
	if (!ret)
		ret = rc_req(&c, CEPD_SERVICE_STATS, 0, 0, 0, 0, 0, 0, out, len - 1);
	rc_close(&c);
	return ret;
}

/* Value of " KEY N" on the stats line that starts with @line and holds
 * @also (NULL: any): N, or -1. */
static long stat_of(const char *text, const char *line, const char *also, const char *key)
{
	char pat[64];

	snprintf(pat, sizeof(pat), " %s ", key);
	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		const char *e = strchr(l, '\n'), *k;
		size_t ll = e ? (size_t)(e - l) : strlen(l);
		char one[1024];

		if (strncmp(l, line, strlen(line)) || ll >= sizeof(one))
			continue;
		memcpy(one, l, ll);
		one[ll] = 0;
		if (also && !strstr(one, also))
			continue;
		k = strstr(one, pat);
		if (k)
			return strtol(k + strlen(pat), NULL, 10);
	}
	return -1;
}

/* ---- identities and child processes -------------------------------------- */

/* As setpriv --reuid --regid --clear-groups: no groups, uid and gid
 * @uid, and so no capabilities. */
static void become(uid_t uid)
{
	if (setgroups(0, NULL) || setresgid(uid, uid, uid) || setresuid(uid, uid, uid)) {
		perror("become");
		_exit(99);
	}
}

/* Enter network namespace @name (ip netns add's /run/netns/NAME). */
static void enter_netns(const char *name)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "/run/netns/%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET)) {
		perror(path);
		_exit(98);
	}
	close(fd);
}

/* A child at work for the driver: values go both ways through two pipes,
 * one int32 at a time. */
struct child {
	pid_t pid;
	int to, from;
};

static int c_in = -1, c_out = -1; /* the child's ends */

static void put(int32_t v)
{
	if (write(c_out, &v, sizeof(v)) != sizeof(v))
		_exit(97);
}

static int32_t get(void)
{
	int32_t v;

	if (read(c_in, &v, sizeof(v)) != sizeof(v))
		_exit(0); /* the driver is done with us */
	return v;
}

/* Start @fn in a child as @uid (-1: root), in network namespace @ns
 * (NULL: ours). */
static struct child spawn(int uid, const char *ns, int (*fn)(void *), void *arg)
{
	int a[2], b[2];
	struct child ch;

	if (pipe(a) || pipe(b)) {
		perror("pipe");
		exit(1);
	}
	fflush(NULL);
	ch.pid = fork();
	if (ch.pid == 0) {
		/* only its own pipe ends: another child's end kept open here
		 * would hide the driver's close (EOF) from that child */
		for (int fd = 3; fd < 1024; fd++)
			if (fd != a[0] && fd != b[1])
				close(fd);
		c_in = a[0];
		c_out = b[1];
		if (ns)
			enter_netns(ns);
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

static void tell(struct child *ch, int32_t v)
{
	if (write(ch->to, &v, sizeof(v)) != sizeof(v))
		perror("tell");
}

/* The child's next value within @ms; @dflt if none came (it ended). */
static int32_t hear(struct child *ch, int ms, int32_t dflt)
{
	struct pollfd pf = { .fd = ch->from, .events = POLLIN };
	int32_t v;

	if (poll(&pf, 1, ms) != 1 || read(ch->from, &v, sizeof(v)) != sizeof(v))
		return dflt;
	return v;
}

static void finish(struct child *ch)
{
	close(ch->to);
	close(ch->from);
	if (ch->pid > 0)
		waitpid(ch->pid, NULL, 0);
	ch->pid = -1;
}

#define NONE (-100000) /* a value that never came */

/* ---- checks -------------------------------------------------------------- */

static int attack_failures, total_failed, total_passed, total_skipped;
static const char *attack_name;

static void begin(const char *name, const char *what)
{
	attack_name = name;
	attack_failures = 0;
	printf("== %s: %s\n", name, what);
}

static void expect(const char *what, long got, long want)
{
	int ok = got == want;

	printf("  %s %s: %s", ok ? "ok  " : "FAIL", what, err_name(got));
	if (!ok)
		printf(" (want %s)", err_name(want));
	printf("\n");
	attack_failures += !ok;
}

/* A check that is a statement: holds or not. */
static void expect_that(const char *what, int holds)
{
	printf("  %s %s\n", holds ? "ok  " : "FAIL", what);
	attack_failures += !holds;
}

static const char *state_name(long s)
{
	return s >= 0 && s < CEP_CM_STATE_COUNT ? cep_cm_state_name((unsigned)s) : err_name(s);
}

static void end(void)
{
	printf("%s %s\n", attack_failures ? "FAIL" : "PASS", attack_name);
	if (attack_failures)
		total_failed++;
	else
		total_passed++;
}

/* ---- the peer's commands (a writes DIR/cmd.N, b answers DIR/res.N) ------- */

static const char *share;
static unsigned cmd_seq;

/* Ask the peer @cmd; its answer line into @res (30 s): 0 or -ETIMEDOUT. */
static int peer_ask(const char *cmd, char *res, size_t len)
{
	char path[512];
	double end_t = now_s() + 30;

	cmd_seq++;
	snprintf(path, sizeof(path), "%s/cmd.%u", share, cmd_seq);
	if (put_file(path, cmd))
		return -EIO;
	snprintf(path, sizeof(path), "%s/res.%u", share, cmd_seq);
	while (now_s() < end_t) {
		FILE *f = fopen(path, "r");

		if (f) {
			int ok = fgets(res, (int)len, f) != NULL;

			fclose(f);
			if (ok)
				return 0;
		}
		usleep(20000);
	}
	snprintf(res, len, "no answer");
	return -ETIMEDOUT;
}

/* ---- shared state of the attack run -------------------------------------- */

static uint8_t gid_a[16], gid_b[16], gid_ns2[16], gid_ns2_peer[16];
static int gidx_a, gidx_ns2;

/* A connect of @qpn from rxe0 to b's @sid. */
static struct cspec to_b(uint32_t qpn, uint64_t sid)
{
	struct cspec s = { .sid = sid, .qpn = qpn, .has_peer = 1, .gid_index = (unsigned)gidx_a };

	memcpy(s.lgid, gid_a, 16);
	memcpy(s.rgid, gid_b, 16);
	return s;
}

/* ---- 1a: a QPN whose QP the kernel destroyed ----------------------------- */

/* nobody: a client with a real QP registered; connects on it (control),
 * destroys it in the kernel, connects again. */
static int qp_gone_nobody(void *arg)
{
	struct rc c;
	struct vq v;
	struct ibv_qp *qp;
	struct cspec s;
	uint32_t h;

	(void)arg;
	if (rc_open(&c, "rxe0", 0) || vq_open(&v, "rxe0") || !(qp = vq_qp(&v)))
		return 1;
	put((int32_t)qp->qp_num);
	put(rc_register(&c, qp->qp_num));
	s = to_b(qp->qp_num, SVC_NONE);
	put(rc_connect(&c, &s, &h));
	/* the REJ from b frees the QP for the next connect */
	put(rc_event(&c, CEP_CM_EV_REJ_RECEIVED, h, 10000, &h));
	put(ibv_destroy_qp(qp) ? -errno : 0);
	get(); /* the driver has read the statistics */
	put(rc_connect(&c, &s, &h));
	get();
	return 0;
}

static void attack_qp_gone(void)
{
	struct child n;
	char st[16384], pid[32];
	long port0, port1, mine0, mine1;
	int32_t qpn;

	begin("1a-qp-gone", "CONNECT naming a QP destroyed behind cepd's back");
	n = spawn(NOBODY, NULL, qp_gone_nobody, NULL);
	snprintf(pid, sizeof(pid), " pid %d ", (int)n.pid);
	qpn = hear(&n, 20000, NONE);
	printf("  nobody's QP %#x (pid %d)\n", (unsigned)qpn, (int)n.pid);
	expect("nobody registers its own QP", hear(&n, 10000, NONE), 0);
	expect("control: CONNECT naming it while it lives", hear(&n, 10000, NONE), 0);
	expect("control: REJ from b (nothing listens there)", hear(&n, 15000, NONE), 0);
	expect("ibv_destroy_qp, cepd not told", hear(&n, 10000, NONE), 0);
	stats_text(st, sizeof(st));
	port0 = stat_of(st, "port 0 ", NULL, "qps");
	mine0 = stat_of(st, "client ", pid, "qps");
	tell(&n, 1);
	expect("CONNECT naming the destroyed QP", hear(&n, 10000, NONE), -ENOENT);
	stats_text(st, sizeof(st));
	port1 = stat_of(st, "port 0 ", NULL, "qps");
	mine1 = stat_of(st, "client ", pid, "qps");
	printf("  QPNs registered: port %ld -> %ld, nobody's client %ld -> %ld\n", port0, port1,
	       mine0, mine1);
	expect_that("the QPN forgotten: the port's QPNs one fewer", port0 >= 0 && port0 - port1 == 1);
	expect_that("the QPN forgotten: nobody's client holds none", mine1 == 0);
	tell(&n, 1);
	finish(&n);
	end();
}

/* ---- 1b: a QPN the kernel gave to another process ------------------------ */

/* nobody: QPs X and Y registered, X connected to b's listener; both
 * destroyed in the kernel; then what the driver asks. */
static int reused_nobody(void *arg)
{
	struct rc c;
	struct vq v;
	struct ibv_qp *x, *y;
	struct cspec s;
	uint32_t h1, h;
	int state = -1;

	(void)arg;
	if (rc_open(&c, "rxe0", 0) || vq_open(&v, "rxe0") || !(x = vq_qp(&v)) || !(y = vq_qp(&v)))
		return 1;
	put((int32_t)x->qp_num);
	put((int32_t)y->qp_num);
	put(rc_register(&c, x->qp_num));
	put(rc_register(&c, y->qp_num));
	s = to_b(x->qp_num, SVC_ACCEPT);
	put(rc_connect(&c, &s, &h1));
	for (double end_t = now_s() + 20; now_s() < end_t; usleep(50000)) {
		state = rc_state(&c, h1);
		if (state == CEP_CM_ESTABLISHED)
			break;
	}
	put(state);
	put(ibv_destroy_qp(x) || ibv_destroy_qp(y) ? -errno : 0);
	get(); /* root registered X: nobody's connection on it */
	for (double end_t = now_s() + 10; now_s() < end_t; usleep(50000)) {
		state = rc_state(&c, h1);
		if (state != CEP_CM_ESTABLISHED)
			break;
	}
	put(state);
	get();
	s = to_b(x->qp_num, SVC_NONE);
	put(rc_connect(&c, &s, &h));
	s = to_b(y->qp_num, SVC_NONE);
	put(rc_connect(&c, &s, &h));
	get();
	return 0;
}

/* root: cycle rxe0's QP numbers (destroying each new QP) until it holds
 * QPNs @want[0] and @want[1] again, within want[2] seconds (given up as
 * soon as the rate says it cannot be done in them: -ETIME); then register
 * them as the driver says. */
static int reused_root(void *arg)
{
	const uint32_t *want = arg;
	struct vq v;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 1, .max_sge = 1 } };
	struct ibv_device_attr da;
	struct ibv_qp *held[2] = { NULL, NULL };
	unsigned long n = 0;
	double t0 = now_s(), last = t0;
	struct rc c;
	int got = 0;

	if (vq_open(&v, "rxe0") || ibv_query_device(v.ctx, &da))
		return 1;
	v.srq = ibv_create_srq(v.pd, &sa);
	if (!v.srq)
		return 1;
	printf("  rxe0: max_qp %d; QP numbers are allocated cyclically (xa_alloc_cyclic)\n",
	       da.max_qp);
	while (got < 2) {
		struct ibv_qp *qp = vq_qp(&v);

		if (!qp) {
			printf("  cycling: ibv_create_qp: %s after %lu QPs\n", strerror(errno), n);
			put(-errno);
			return 1;
		}
		n++;
		for (int i = 0; i < 2; i++)
			if (!held[i] && qp->qp_num == want[i]) {
				held[i] = qp;
				got++;
				printf("  cycling: QPN %#x again after %lu QPs, %.0f s\n",
				       qp->qp_num, n, now_s() - t0);
			}
		if (qp == held[0] || qp == held[1])
			continue;
		if (ibv_destroy_qp(qp)) {
			put(-errno);
			return 1;
		}
		if (now_s() - last >= 30) {
			/* QPs still to make before the later of the two comes
			 * back: numbers run from 16 to max_qp + 16 */
			uint32_t top = (uint32_t)da.max_qp + 16, far = held[0] ? want[1] : want[0];
			double left = (double)((far + top - 16 - qp->qp_num) % (top - 16));

			last = now_s();
			printf("  cycling: %lu QPs in %.0f s (%.0f/s), at QPN %#x, about %.0f s to go\n",
			       n, last - t0, n / (last - t0), qp->qp_num, left / (n / (last - t0)));
			fflush(stdout);
			/* from the rate measured over a minute: a cycle that cannot end
			 * within the budget is given up now, not at its end */
			if (last - t0 >= 60 && last - t0 + left / (n / (last - t0)) > want[2]) {
				printf("  cycling: at %.0f QPs/s the numbers come back after about "
				       "%.0f s, more than %u s\n", n / (last - t0),
				       last - t0 + left / (n / (last - t0)), want[2]);
				put(-ETIME);
				return 0;
			}
		}
		if (now_s() - t0 > want[2]) {
			printf("  cycling: %lu QPs in %.0f s (%.0f/s) did not bring QPNs %#x and %#x "
			       "back\n", n, now_s() - t0, n / (now_s() - t0), want[0], want[1]);
			put(-ETIME);
			return 0;
		}
	}
	put(0);
	if (rc_open(&c, "rxe0", 0))
		return 1;
	get();
	put(rc_register(&c, held[0]->qp_num));
	get();
	put(rc_register(&c, held[1]->qp_num));
	get();
	return 0;
}

static void attack_qpn_reused(unsigned budget)
{
	struct child n, r;
	char res[256], st[16384], pid[32];
	uint32_t want[3];
	int32_t x, y, ret, state;
	long dreqs0 = -1, dreqs1 = -1;

	begin("1b-qpn-reused", "a QPN destroyed behind cepd's back and given to another process");
	n = spawn(NOBODY, NULL, reused_nobody, NULL);
	snprintf(pid, sizeof(pid), " pid %d ", (int)n.pid);
	x = hear(&n, 20000, NONE);
	y = hear(&n, 5000, NONE);
	printf("  nobody's QPs X %#x and Y %#x (pid %d)\n", (unsigned)x, (unsigned)y, (int)n.pid);
	expect("nobody registers X", hear(&n, 10000, NONE), 0);
	expect("nobody registers Y", hear(&n, 10000, NONE), 0);
	expect("nobody CONNECTs on X to b's listener", hear(&n, 10000, NONE), 0);
	state = hear(&n, 30000, NONE);
	printf("  nobody's connection: %s\n", state_name(state));
	expect_that("its connection ESTABLISHED", state == CEP_CM_ESTABLISHED);
	expect("ibv_destroy_qp of X and Y, cepd not told", hear(&n, 10000, NONE), 0);
	if (!peer_ask("dreqs", res, sizeof(res)))
		dreqs0 = strtol(res, NULL, 10);
	want[0] = (uint32_t)x;
	want[1] = (uint32_t)y;
	want[2] = budget;
	r = spawn(-1, NULL, reused_root, want);
	ret = hear(&r, (int)(budget + 60) * 1000, NONE);
	if (ret == -ETIME) {
		printf("SKIP %s: rxe does not give the numbers back within %u s here "
		       "(a full cycle of its QP numbers is needed; the rate is above)\n",
		       attack_name, budget);
		total_skipped++;
		finish(&r);
		finish(&n);
		return;
	}
	expect("root holds QPs numbered X and Y", ret, 0);
	tell(&r, 1);
	expect("root registers X (nobody's stale registration evicted)", hear(&r, 10000, NONE), 0);
	tell(&n, 1);
	state = hear(&n, 15000, NONE);
	printf("  nobody's connection: %s\n", state_name(state));
	expect_that("nobody's connection on X ends", state >= 0 && state != CEP_CM_ESTABLISHED);
	for (double end_t = now_s() + 10; now_s() < end_t; usleep(100000))
		if (!peer_ask("dreqs", res, sizeof(res)) &&
		    (dreqs1 = strtol(res, NULL, 10)) > dreqs0)
			break;
	printf("  b's DREQs received: %ld -> %ld\n", dreqs0, dreqs1);
	expect_that("b gets the DREQ of nobody's connection", dreqs0 >= 0 && dreqs1 > dreqs0);
	tell(&n, 1);
	expect("nobody CONNECTs naming X (root's registration now)", hear(&n, 10000, NONE), -ENOENT);
	expect("nobody CONNECTs naming Y (root's QP by the kernel's word)", hear(&n, 10000, NONE),
	       -EPERM);
	stats_text(st, sizeof(st));
	expect_that("nobody's client holds no QPN", stat_of(st, "client ", pid, "qps") == 0);
	tell(&r, 1);
	expect("root registers Y", hear(&r, 10000, NONE), 0);
	tell(&n, 1);
	tell(&r, 1);
	finish(&n);
	finish(&r);
	end();
}

/* ---- 2: the pid of a client that exited ---------------------------------- */

/* Write @v to ns_last_pid: the next fork gets pid @v + 1. */
static int set_last_pid(pid_t v)
{
	char b[32];
	int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
	int len = snprintf(b, sizeof(b), "%d", (int)v);
	int ok = fd >= 0 && write(fd, b, (size_t)len) == len;

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -errno;
}

/* V: a root process (holding A's pid) with a real QP; later registers it
 * through a client of its own. */
static int pid_victim(void *arg)
{
	struct vq v;
	struct ibv_qp *qp;
	struct rc c;

	(void)arg;
	if (vq_open(&v, "rxe0") || !(qp = vq_qp(&v)))
		return 1;
	put((int32_t)qp->qp_num);
	get();
	if (rc_open(&c, "rxe0", 0))
		put(-ECONNREFUSED);
	else
		put(rc_register(&c, qp->qp_num));
	get();
	return 0;
}

static void attack_pid_reuse(int a_root)
{
	int tob[2], fromb[2];
	pid_t a, bpid = -1;
	int32_t q, r = NONE, hello = NONE;
	struct child v = { .pid = -1, .to = -1, .from = -1 };
	int st = 0;

	begin(a_root ? "2-pid-reuse-root" : "2-pid-reuse-nobody",
	      a_root ? "the socket of an exited root client, its pid now a root process's"
		     : "the socket of an exited client of nobody, its pid now a root process's");
	if (pipe(tob) || pipe(fromb))
		exit(1);
	fflush(NULL);
	a = fork();
	if (a == 0) {
		struct rc c;
		pid_t b;
		int32_t ret;

		/* B must see EOF once the driver closes its end */
		close(tob[1]);
		close(fromb[0]);
		if (!a_root)
			become(NOBODY);
		ret = rc_open(&c, "rxe0", 0); /* A's HELLO: A's credentials and pidfd */
		if (write(fromb[1], &ret, sizeof(ret)) != sizeof(ret) || ret)
			_exit(1);
		b = fork();
		if (b == 0) {
			int32_t me = (int32_t)getpid();

			if (a_root)
				become(NOBODY); /* B keeps the socket, none of A's rights */
			if (write(fromb[1], &me, sizeof(me)) != sizeof(me) ||
			    read(tob[0], &q, sizeof(q)) != sizeof(q))
				_exit(1);
			ret = rc_register(&c, (uint32_t)q);
			if (write(fromb[1], &ret, sizeof(ret)) != sizeof(ret))
				_exit(1);
			(void)!read(tob[0], &q, sizeof(q));
			_exit(0);
		}
		_exit(0); /* A exits: only B holds the client's socket */
	}
	close(tob[0]);
	close(fromb[1]);
	if (read(fromb[0], &hello, sizeof(hello)) != sizeof(hello))
		hello = NONE;
	expect("A's HELLO", hello, 0);
	if (read(fromb[0], &q, sizeof(q)) == sizeof(q))
		bpid = q;
	waitpid(a, &st, 0); /* A is gone, its pid free */
	printf("  A (pid %d, %s) said HELLO and exited; B (pid %d, nobody) holds the socket\n",
	       (int)a, a_root ? "root" : "nobody", (int)bpid);
	for (int tries = 0; tries < 50; tries++) {
		if (set_last_pid(a - 1)) {
			printf("  ns_last_pid: %s\n", strerror(errno));
			break;
		}
		v = spawn(-1, NULL, pid_victim, NULL);
		if (v.pid == a)
			break;
		kill(v.pid, SIGKILL);
		finish(&v); /* another process took the pid: again */
	}
	expect("V, a root process, has A's pid", v.pid, a);
	if (v.pid == a) {
		q = hear(&v, 20000, NONE);
		printf("  V (pid %d) created QP %#x\n", (int)v.pid, (unsigned)q);
		if (write(tob[1], &q, sizeof(q)) != sizeof(q) ||
		    read(fromb[0], &r, sizeof(r)) != sizeof(r))
			r = NONE;
		expect("B registers V's QP on A's client", r, -EPERM);
		tell(&v, 1);
		expect("V registers its own QP", hear(&v, 10000, NONE), 0);
		tell(&v, 1);
	}
	finish(&v);
	close(tob[1]); /* B's end */
	if (bpid > 0)
		waitpid(bpid, NULL, 0);
	close(fromb[0]);
	end();
}

/* ---- 3: SIDR_REP --------------------------------------------------------- */

/* A SIDR listener with a real QP registered (nobody's on SIDR_NOBODY,
 * root's on SIDR_ROOT): answers each SIDR_REQ with the QPN and Q_Key the
 * driver names; when that is refused, answers status 2 (reject) so the
 * requester is not left waiting. */
static int sidr_listener(void *arg)
{
	uint64_t sid = *(const uint64_t *)arg;
	struct rc c;
	struct vq v;
	struct ibv_qp *qp;
	uint32_t l, h;

	if (rc_open(&c, "rxe0", 0) || vq_open(&v, "rxe0") || !(qp = vq_qp(&v)))
		return 1;
	put((int32_t)qp->qp_num);
	put(rc_register(&c, qp->qp_num));
	put(rc_listen(&c, sid, ~0ull, &l));
	for (;;) {
		uint32_t qpn = (uint32_t)get(), qkey = (uint32_t)get();
		int ret;

		put(0); /* ready: the driver asks b now */
		ret = rc_event(&c, CEP_CM_EV_SIDR_REQ_RECEIVED, l, 20000, &h);
		if (!ret) {
			ret = rc_sidr_rep(&c, h, 0, qpn, qkey);
			if (ret)
				(void)rc_sidr_rep(&c, h, 2, 0, 0);
		}
		put(ret);
	}
}

/* One SIDR_REQ from b to @sid, answered by @ch with @qpn/@qkey: the
 * answer cepd gave the listener; b's view into @res. */
static int32_t sidr_round(struct child *ch, uint64_t sid, uint32_t qpn, uint32_t qkey, char *res,
			  size_t len)
{
	char cmd[64];
	int32_t ret;

	tell(ch, (int32_t)qpn);
	tell(ch, (int32_t)qkey);
	if (hear(ch, 5000, NONE) != 0)
		return NONE;
	snprintf(cmd, sizeof(cmd), "sidr %#" PRIx64 "\n", sid);
	if (peer_ask(cmd, res, len))
		snprintf(res, len, "no answer from b");
	ret = hear(ch, 25000, NONE);
	res[strcspn(res, "\n")] = 0;
	return ret;
}

/* b's answer line "status S qpn Q qkey K": S, *qpn, *qkey, or -1. */
static long sidr_status(const char *res, unsigned long *qpn, unsigned long *qkey)
{
	long s;

	if (sscanf(res, "status %ld qpn %lx qkey %lx", &s, qpn, qkey) != 3)
		return -1;
	return s;
}

static void attack_sidr_rep(void)
{
	uint64_t sn = SIDR_NOBODY, sr = SIDR_ROOT;
	struct child root, nob;
	int32_t rq, nq;
	unsigned long qpn = 0, qkey = 0;
	char res[256];

	begin("3-sidr-rep", "SIDR_REP naming another client's QP, or a controlled Q_Key");
	root = spawn(-1, NULL, sidr_listener, &sr);
	rq = hear(&root, 20000, NONE);
	expect("root registers its QP", hear(&root, 10000, NONE), 0);
	expect("root listens for SIDR", hear(&root, 10000, NONE), 0);
	nob = spawn(NOBODY, NULL, sidr_listener, &sn);
	nq = hear(&nob, 20000, NONE);
	expect("nobody registers its QP", hear(&nob, 10000, NONE), 0);
	expect("nobody listens for SIDR", hear(&nob, 10000, NONE), 0);
	printf("  root's QP %#x, nobody's QP %#x\n", (unsigned)rq, (unsigned)nq);

	expect("nobody's SIDR_REP naming root's QP",
	       sidr_round(&nob, SIDR_NOBODY, (uint32_t)rq, 0x1234, res, sizeof(res)), -ENOENT);
	printf("  b: %s\n", res);
	expect_that("b is not given root's QP",
		    !(sidr_status(res, &qpn, &qkey) == 0 && qpn == (uint32_t)rq));
	expect("nobody's SIDR_REP with a controlled Q_Key",
	       sidr_round(&nob, SIDR_NOBODY, (uint32_t)nq, QKEY_CONTROLLED | 1, res, sizeof(res)),
	       -EPERM);
	printf("  b: %s\n", res);
	expect_that("b is not given the controlled Q_Key",
		    !(sidr_status(res, &qpn, &qkey) == 0 && (qkey & QKEY_CONTROLLED)));
	expect("control: nobody's SIDR_REP, its own QP and Q_Key",
	       sidr_round(&nob, SIDR_NOBODY, (uint32_t)nq, 0x1234, res, sizeof(res)), 0);
	printf("  b: %s\n", res);
	expect_that("b gets status 0, nobody's QP and Q_Key",
		    sidr_status(res, &qpn, &qkey) == 0 && qpn == (uint32_t)nq && qkey == 0x1234);
	expect("control: root's SIDR_REP with a controlled Q_Key",
	       sidr_round(&root, SIDR_ROOT, (uint32_t)rq, QKEY_CONTROLLED | 2, res, sizeof(res)), 0);
	printf("  b: %s\n", res);
	expect_that("b gets status 0, root's QP and Q_Key", sidr_status(res, &qpn, &qkey) == 0 &&
		    qpn == (uint32_t)rq && qkey == (QKEY_CONTROLLED | 2));
	finish(&nob);
	finish(&root);
	end();
}

/* ---- 4: listening -------------------------------------------------------- */

static int listener(void *arg)
{
	const int root = *(const int *)arg;
	struct rc c;
	uint32_t h;

	if (rc_open(&c, "rxe0", 0))
		return 1;
	if (!root) {
		put(rc_listen(&c, TCP(20011), ~0ull, &h));
		put(rc_listen(&c, TCP(445), ~0ull, &h));
		put(rc_listen(&c, TCP(20012), 0xffffffffffff0000ull, &h));
		put(rc_listen(&c, 0x6000, ~0ull, &h));
	} else {
		put(rc_listen(&c, TCP(445), ~0ull, &h));
		put(rc_listen(&c, 0x6000, ~0ull, &h));
		/* TCP ports 19968-20223: nobody's 20011 among them, and not
		 * the same ID and mask as any listen before */
		put(rc_listen(&c, TCP(0x4e00), 0xffffffffffffff00ull, &h));
		put(rc_listen(&c, 0x7000000000000000ull, 0xf000000000000000ull, &h));
	}
	get(); /* listening until the driver is done */
	return 0;
}

static void attack_listen(void)
{
	int no = 0, yes = 1;
	struct child n, r;

	begin("4-listen", "service IDs below 1024, masks and raw IDs; overlapping wildcards");
	n = spawn(NOBODY, NULL, listener, &no);
	expect("control: nobody on TCP port 20011", hear(&n, 20000, NONE), 0);
	expect("nobody on TCP port 445 (0x00000000010601BD)", hear(&n, 10000, NONE), -EACCES);
	expect("nobody on every TCP port (a mask)", hear(&n, 10000, NONE), -EACCES);
	expect("nobody on raw service ID 0x6000", hear(&n, 10000, NONE), -EACCES);
	r = spawn(-1, NULL, listener, &yes);
	expect("control: root on TCP port 445", hear(&r, 20000, NONE), 0);
	expect("control: root on raw service ID 0x6000", hear(&r, 10000, NONE), 0);
	expect("root on TCP ports 19968-20223 (a mask), over nobody's 20011", hear(&r, 10000, NONE),
	       -EADDRINUSE);
	expect("control: root's mask over no one's IDs", hear(&r, 10000, NONE), 0);
	tell(&n, 1);
	tell(&r, 1);
	finish(&n);
	finish(&r);
	end();
}

/* ---- 5: source addresses ------------------------------------------------- */

struct src_try {
	const char *dev;
	struct cspec s;
	int tries;            /* 1: the MAD's GID index; 2: and the path alone */
};

/* A client of @t->dev with a real QP on it for each CONNECT: connects
 * with the MAD's GID index (and the path's GID) as given, then (tries 2)
 * with no MAD address, so cepd takes it from the path. */
static int src_client(void *arg)
{
	const struct src_try *t = arg;
	struct rc c;
	struct vq v;
	uint32_t h;
	int ret = rc_open(&c, t->dev, 0);

	if (!ret)
		ret = vq_open(&v, t->dev);
	put(ret);
	if (ret)
		return 1;
	for (int i = 0; i < t->tries; i++) {
		struct ibv_qp *qp = vq_qp(&v);
		struct cspec s = t->s;

		if (!qp) {
			put(-ENOMEM);
			continue;
		}
		s.qpn = qp->qp_num;
		s.has_peer = i == 0;
		ret = rc_register(&c, s.qpn);
		put(ret ? ret : rc_connect(&c, &s, &h));
	}
	get();
	return 0;
}

static void attack_source(int host)
{
	struct src_try t;
	struct child ch;

	memset(&t, 0, sizeof(t));
	if (!host) {
		begin("5a-source-ns", "nobody sending from a GID of another network namespace (rxe1, ns2's)");
		t.dev = "rxe1";
		t.s.sid = SVC_NONE;
		t.s.gid_index = (unsigned)gidx_ns2;
		memcpy(t.s.lgid, gid_ns2, 16);
		memcpy(t.s.rgid, gid_ns2_peer, 16);
	} else {
		begin("5b-source-host", "nobody in ns2 (a container's namespace) sending from the host's "
		      "GID (rxe0)");
		t.dev = "rxe0";
		t.s = to_b(0, SVC_NONE);
	}
	printf("  %s: GID index %u\n", t.dev, t.s.gid_index);
	t.tries = 2;
	ch = spawn(NOBODY, host ? "ns2" : NULL, src_client, &t);
	expect(host ? "nobody in ns2 attaches to rxe0" : "nobody attaches to rxe1",
	       hear(&ch, 20000, NONE), 0);
	expect("its CONNECT from that GID index", hear(&ch, 10000, NONE), -EACCES);
	expect("its CONNECT on a path from that GID", hear(&ch, 10000, NONE), -EACCES);
	tell(&ch, 1);
	finish(&ch);
	/* the controls: the GID's own namespace */
	t.tries = 1;
	ch = spawn(NOBODY, host ? NULL : "ns2", src_client, &t);
	expect(host ? "control: nobody in the host's namespace attaches"
		    : "control: nobody in ns2 attaches", hear(&ch, 20000, NONE), 0);
	expect("control: its CONNECT from its own namespace's GID", hear(&ch, 10000, NONE), 0);
	tell(&ch, 1);
	finish(&ch);
	ch = spawn(-1, host ? NULL : "ns2", src_client, &t);
	expect(host ? "control: root attaches" : "control: root in ns2 attaches",
	       hear(&ch, 20000, NONE), 0);
	expect("control: root's CONNECT from its own namespace's GID", hear(&ch, 10000, NONE), 0);
	tell(&ch, 1);
	finish(&ch);
	end();
}

/* ---- the driver (guest a) ------------------------------------------------ */

static int attack(char **argv)
{
	unsigned budget;

	sock_path = argv[0];
	gid_of(argv[1], gid_a);
	gid_of(argv[2], gid_b);
	gid_of(argv[3], gid_ns2);
	gid_of(argv[4], gid_ns2_peer);
	share = argv[5];
	budget = (unsigned)strtoul(argv[6], NULL, 10);
	gidx_a = gid_index("rxe0", gid_a);
	gidx_ns2 = gid_index("rxe1", gid_ns2);
	printf("rxe0: %s at GID index %d; rxe1 (ns2): %s at GID index %d\n", argv[1], gidx_a,
	       argv[3], gidx_ns2);
	if (gidx_a < 0 || gidx_ns2 < 0)
		return 1;
	/* B of the pid attack is reparented to us when A exits */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	{
		double t0 = now_s();

		attack_listen();
		attack_sidr_rep();
		attack_source(0);
		attack_source(1);
		attack_qp_gone();
		attack_pid_reuse(0);
		attack_pid_reuse(1);
		printf("(%.0f s so far)\n", now_s() - t0);
		attack_qpn_reused(budget);
		printf("attacks: %d passed, %d failed, %d skipped in %.0f s\n", total_passed,
		       total_failed, total_skipped, now_s() - t0);
	}
	return total_failed ? 1 : 0;
}

/* ---- the peer (guest b) -------------------------------------------------- */

static int peer(char **argv)
{
	struct cep_cm_attach_attr at = { .size = sizeof(at), .socket = argv[0], .device = "rxe0",
					 .port_num = 1 };
	struct cep_cm *cm = NULL;
	struct cep_cm_channel *ch = NULL;
	struct cep_cm_id *l = NULL, *sidr = NULL;
	struct cep_cm_id_attr ia = { .size = sizeof(ia) };
	struct cep_mad_addr to = { .grh_present = 1, .hop_limit = 64, .qpn = 1,
				   .qkey = CEP_QP1_QKEY };
	struct vq v;
	uint8_t gid_self[16];
	unsigned next = 1, pending = 0;
	long dreqs = 0, accepted = 0, errors = 0;
	char path[512], line[256];
	uint64_t sid;
	FILE *f;
	DIR *dir;
	int ret, idx, ok;

	share = argv[3];
	gid_of(argv[1], gid_self);
	gid_of(argv[2], to.gid);
	idx = gid_index("rxe0", gid_self);
	ret = idx < 0 ? -ENOENT : cep_cm_attach(&at, &cm);
	if (!ret)
		ret = cep_cm_channel_create(&ch);
	ia.channel = ch;
	if (!ret)
		ret = cep_cm_create_id(cm, &ia, &l);
	if (!ret)
		ret = cep_cm_listen(l, SVC_ACCEPT, ~0ull);
	if (!ret)
		ret = vq_open(&v, "rxe0");
	if (ret) {
		printf("peer: cannot serve: %s\n", strerror(-ret));
		return 1;
	}
	to.gid_index = (uint8_t)idx;
	/* a run directory used before holds an earlier run's commands and
	 * answers: gone before a may ask (it waits for b.peer-ready) */
	dir = opendir(share);
	for (struct dirent *e; dir && (e = readdir(dir));)
		if (!strncmp(e->d_name, "cmd.", 4) || !strncmp(e->d_name, "res.", 4)) {
			snprintf(path, sizeof(path), "%s/%s", share, e->d_name);
			unlink(path);
		}
	if (dir)
		closedir(dir);
	snprintf(path, sizeof(path), "%s/b.peer-ready", share);
	put_file(path, "up\n");
	printf("peer: listening on TCP port 20000, answering %s/cmd.N\n", share);
	for (;;) {
		struct pollfd pf = { .fd = cep_cm_channel_fd(ch), .events = POLLIN };
		struct cep_cm_event *ev;

		snprintf(path, sizeof(path), "%s/a.done", share);
		if (!access(path, F_OK))
			break;
		snprintf(path, sizeof(path), "%s/a.rc", share);
		if (!access(path, F_OK))
			break;
		poll(&pf, 1, 20);
		while (cep_cm_get_event(ch, &ev) == 0) {
			char res[128] = "";

			switch (ev->type) {
			case CEP_CM_EV_REQ_RECEIVED: {
				struct ibv_qp *qp = vq_qp(&v);
				struct cep_cm_accept_param p = { .size = sizeof(p), .starting_psn = 1,
								 .responder_resources = 1,
								 .initiator_depth = 1,
								 .rnr_retry_count = 7 };

				ret = qp ? cep_cm_qp_register(cm, qp->qp_num) : -ENOMEM;
				if (!ret) {
					p.qpn = qp->qp_num;
					ret = cep_cm_accept(ev->id, &p);
				}
				printf("peer: REQ from QPN %#x: accepted with QP %#x: %s\n",
				       ev->msg.u.req.local_qpn, qp ? qp->qp_num : 0, err_name(ret));
				accepted += !ret;
				errors += ret != 0;
				break;
			}
			case CEP_CM_EV_DREQ_RECEIVED:
				dreqs++;
				printf("peer: DREQ received (%ld)\n", dreqs);
				break;
			case CEP_CM_EV_SIDR_REP_RECEIVED:
				snprintf(res, sizeof(res), "status %d qpn %#x qkey %#x\n", ev->status,
					 ev->msg.u.sidr_rep.qpn, ev->msg.u.sidr_rep.qkey);
				break;
			case CEP_CM_EV_SIDR_REQ_ERROR:
				snprintf(res, sizeof(res), "no SIDR_REP (%s)\n", err_name(ev->status));
				break;
			default:
				printf("peer: %s\n", cep_cm_event_name(ev->type));
				break;
			}
			if (res[0] && ev->id == sidr && pending) {
				printf("peer: SIDR answer %u: %s", pending, res);
				snprintf(path, sizeof(path), "%s/res.%u", share, pending);
				put_file(path, res);
				pending = 0;
			}
			cep_cm_ack_event(ev);
		}
		if (!pending && sidr) {
			(void)cep_cm_destroy_id(sidr);
			sidr = NULL;
		}
		if (pending)
			continue;
		snprintf(path, sizeof(path), "%s/cmd.%u", share, next);
		f = fopen(path, "r");
		if (!f)
			continue;
		ok = fgets(line, sizeof(line), f) != NULL;
		fclose(f);
		if (!ok)
			continue;
		snprintf(path, sizeof(path), "%s/res.%u", share, next);
		if (!strncmp(line, "dreqs", 5)) {
			char res[32];

			snprintf(res, sizeof(res), "%ld\n", dreqs);
			put_file(path, res);
		} else if (sscanf(line, "sidr %" SCNx64, &sid) == 1) {
			struct cep_cm_sidr_param p = { .size = sizeof(p), .service_id = sid,
						       .pkey = 0xffff, .timeout = 18,
						       .max_cm_retries = 3, .peer = &to };

			ret = cep_cm_create_id(cm, &ia, &sidr);
			if (!ret)
				ret = cep_cm_sidr_req(sidr, &p);
			if (ret) {
				char res[64];

				snprintf(res, sizeof(res), "SIDR_REQ failed: %s\n", err_name(ret));
				put_file(path, res);
				errors++;
			} else {
				pending = next;
			}
		} else {
			put_file(path, "unknown command\n");
		}
		next++;
	}
	printf("peer: %ld connections accepted, %ld DREQs, %ld errors\n", accepted, dreqs, errors);
	(void)cep_cm_destroy(cm);
	return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (argc == 9 && !strcmp(argv[1], "attack"))
		return attack(argv + 2);
	if (argc == 6 && !strcmp(argv[1], "peer")) {
		sock_path = argv[2];
		return peer(argv + 2);
	}
	fprintf(stderr,
		"usage: cepd-attack-guest attack SOCKET SELF_IP PEER_IP NS2_IP NS2_PEER_IP DIR BUDGET_S\n"
		"       cepd-attack-guest peer SOCKET SELF_IP PEER_IP DIR\n");
	return 2;
}
