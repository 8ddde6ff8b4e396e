/* SPDX-License-Identifier: MIT */
/*
 * The guest tier's probe for cepd (issue 18, tests/guests/cepd.sh): three
 * roles on a real rxe port, each exiting 0 only when what it checks held.
 *
 *   cepd-guest kill-server SELF_IP PORT READY_FILE
 *       A librdmacm server (run on libcep's librdmacm, through cepd): it
 *       accepts one connection (a real RC QP) and leaves a second request
 *       unanswered, then creates READY_FILE and waits to be killed (-9).
 *   cepd-guest kill-client PEER_IP PORT READY_FILE KILLING_FILE LIMIT_MS
 *       Its peer on the kernel's rdma_cm: one connection established, a
 *       second REQ sent, READY_FILE created; then it waits for KILLING_FILE
 *       (the other guest kills the server 1 s after creating it: the two
 *       guests share no clock) and requires DISCONNECTED on the first id
 *       and REJECTED on the second, none before that file and each within
 *       LIMIT_MS of the kill (seen time + 1 s) - far inside the kernel's
 *       own timeouts (a REQ's retries run for more than a minute; an idle
 *       established connection never learns of a dead peer by itself).
 *   cepd-guest hostile SOCKET DEVICE PORT_NUM BUSY_SID SECONDS
 *       A hostile client speaking cepd's protocol (src/service/proto.h)
 *       on a real RDMA port: QPNs of another process (-EPERM from the
 *       kernel's resource tracking), unknown QPNs (-ENOENT), another
 *       client's QPN and handles, a listen on BUSY_SID (another process's
 *       service ID: -EADDRINUSE), malformed, oversized and unknown
 *       requests, a second HELLO, a bad HELLO, garbage; then SECONDS of a
 *       flood (pipelined requests, ids made and dropped, clients that
 *       connect and vanish) while the rest of the node keeps working; at
 *       the end its own good client still works. Prints PASS/FAIL lines.
 *
 * Linked against Debian's librdmacm; the script chooses libcep's
 * librdmacm.so.1 for the server through cep-rdmacm (LD_LIBRARY_PATH).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "service/proto.h"
#include "service/remote.h" /* cmr_hello_send */

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void touch(const char *path)
{
	char tmp[4096];
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || close(fd) || rename(tmp, path)) {
		perror(path);
		exit(1);
	}
}

static _Noreturn void die(const char *what)
{
	fprintf(stderr, "cepd-guest: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* ---- the QP of a connection ------------------------------------------------ */

static struct ibv_pd *pd_of[8];
static struct ibv_context *ctx_of[8];

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq;
	unsigned i;

	for (i = 0; i < 8 && ctx_of[i]; i++)
		if (ctx_of[i] == id->verbs) {
			pd = pd_of[i];
			break;
		}
	if (!pd) {
		if (i == 8)
			die("too many devices");
		pd = ibv_alloc_pd(id->verbs);
		if (!pd)
			die("ibv_alloc_pd");
		ctx_of[i] = id->verbs;
		pd_of[i] = pd;
	}
	cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = cq;
	qa.recv_cq = cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 4;
	qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, pd, &qa))
		die("rdma_create_qp");
}

static struct rdma_cm_event *get_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pf, 1, ms) != 1)
		return NULL;
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	return ev;
}

/* ---- kill-server ------------------------------------------------------------- */

static int kill_server(const char *self, const char *port, const char *ready)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l;
	struct addrinfo *ai;
	struct rdma_cm_event *ev;
	int reqs = 0, est = 0;

	if (!ch || rdma_create_id(ch, &l, NULL, RDMA_PS_TCP))
		die("create");
	if (getaddrinfo(self, port, NULL, &ai))
		die("getaddrinfo");
	if (rdma_bind_addr(l, ai->ai_addr) || rdma_listen(l, 8))
		die("bind/listen");
	freeaddrinfo(ai);
	printf("kill-server: listening on %s:%s\n", self, port);
	fflush(stdout);
	while (!(est && reqs == 2)) {
		ev = get_event(ch, 120000);
		if (!ev) {
			fprintf(stderr, "kill-server: no event in 120 s (reqs %d est %d)\n", reqs, est);
			return 1;
		}
		printf("kill-server: %s\n", rdma_event_str(ev->event));
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ++reqs == 1) {
			struct rdma_conn_param cp;

			make_qp(ev->id);
			memset(&cp, 0, sizeof(cp));
			cp.responder_resources = 1;
			cp.initiator_depth = 1;
			cp.rnr_retry_count = 7;
			if (rdma_accept(ev->id, &cp))
				die("rdma_accept");
		} else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
			est = 1;
		} else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			fprintf(stderr, "kill-server: unexpected %s\n", rdma_event_str(ev->event));
			return 1;
		}
		/* the second request is left unanswered (no accept, no reject) */
		rdma_ack_cm_event(ev);
	}
	printf("kill-server: one connection established, one request pending: ready\n");
	fflush(stdout);
	touch(ready);
	for (;;)
		pause();
}

/* ---- kill-client -------------------------------------------------------------- */

static struct rdma_cm_id *start_connect(struct rdma_event_channel *ch, const char *peer,
					const char *port)
{
	struct rdma_cm_id *id;
	struct addrinfo *ai;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (getaddrinfo(peer, port, NULL, &ai))
		die("getaddrinfo");
	if (rdma_resolve_addr(id, NULL, ai->ai_addr, 5000))
		die("rdma_resolve_addr");
	freeaddrinfo(ai);
	ev = get_event(ch, 10000);
	if (!ev || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
		fprintf(stderr, "kill-client: %s\n", ev ? rdma_event_str(ev->event) : "no ADDR_RESOLVED");
		exit(1);
	}
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 5000))
		die("rdma_resolve_route");
	ev = get_event(ch, 10000);
	if (!ev || ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED) {
		fprintf(stderr, "kill-client: %s\n", ev ? rdma_event_str(ev->event) : "no ROUTE_RESOLVED");
		exit(1);
	}
	rdma_ack_cm_event(ev);
	make_qp(id);
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(id, &cp))
		die("rdma_connect");
	return id;
}

static int kill_client(const char *peer, const char *port, const char *ready,
		       const char *killed, int limit)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *a, *b;
	struct rdma_cm_event *ev;
	double t_kill = -1, t_disc = -1, t_rej = -1, end;
	int rej_status = 0, fail = 0;

	if (!ch)
		die("rdma_create_event_channel");
	a = start_connect(ch, peer, port);
	ev = get_event(ch, 30000);
	if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED || ev->id != a) {
		fprintf(stderr, "kill-client: first connection: %s\n",
			ev ? rdma_event_str(ev->event) : "no event in 30 s");
		return 1;
	}
	rdma_ack_cm_event(ev);
	printf("kill-client: connection 1 established (QP %u)\n", a->qp->qp_num);
	b = start_connect(ch, peer, port);
	printf("kill-client: connection 2: REQ sent (QP %u)\n", b->qp->qp_num);
	fflush(stdout);
	touch(ready);
	end = now_ms() + 180000;
	while ((t_disc < 0 || t_rej < 0) && now_ms() < end) {
		if (t_kill < 0 && access(killed, F_OK) == 0) {
			t_kill = now_ms() + 1000; /* the kill follows the file by 1 s */
			end = t_kill + limit + 30000; /* see what comes late, to report it */
			printf("kill-client: the server is being killed\n");
		}
		ev = get_event(ch, 10);
		if (!ev)
			continue;
		printf("kill-client: %s on connection %d (status %d)%s\n", rdma_event_str(ev->event),
		       ev->id == a ? 1 : 2, ev->status, t_kill < 0 ? " before the kill" : "");
		if (t_kill < 0)
			fail = 1; /* not the kill's doing */
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED && ev->id == a) {
			t_disc = now_ms();
			rdma_ack_cm_event(ev);
			rdma_disconnect(a); /* the DREP */
			continue;
		}
		if (ev->event == RDMA_CM_EVENT_REJECTED && ev->id == b) {
			t_rej = now_ms();
			rej_status = ev->status;
		} else if (ev->event != RDMA_CM_EVENT_TIMEWAIT_EXIT) {
			fail = 1;
		}
		rdma_ack_cm_event(ev);
	}
	if (t_kill < 0) {
		printf("FAIL kill-client: the server was never killed\n");
		return 1;
	}
	if (t_disc < 0) {
		printf("FAIL kill-client: no DISCONNECTED on the established connection\n");
		fail = 1;
	} else {
		double d = t_disc > t_kill ? t_disc - t_kill : 0;

		printf("%s kill-client: DISCONNECTED %.0f ms after the kill (limit %d ms)\n",
		       d <= limit ? "PASS" : "FAIL", d, limit);
		fail |= d > limit;
	}
	if (t_rej < 0) {
		printf("FAIL kill-client: no REJECTED for the pending request\n");
		fail = 1;
	} else {
		double d = t_rej > t_kill ? t_rej - t_kill : 0;

		printf("%s kill-client: REJECTED (reason %d) %.0f ms after the kill (limit %d ms)\n",
		       d <= limit ? "PASS" : "FAIL", rej_status, d, limit);
		fail |= d > limit;
	}
	rdma_destroy_qp(a);
	rdma_destroy_qp(b);
	rdma_destroy_id(a);
	rdma_destroy_id(b);
	return fail;
}

/* ---- hostile ------------------------------------------------------------------------ */

static const char *sock_path, *dev_name;
static unsigned port_num;
static int failures;
static uint64_t seqno = 100;

#define EXPECT(what, got, want) expect_eq(what, (long)(got), (long)(want), __LINE__)
static void expect_eq(const char *what, long got, long want, int line)
{
	if (got == want)
		return;
	printf("FAIL hostile (line %d): %s: %ld (%s), want %ld (%s)\n", line, what, got,
	       got < 0 ? strerror((int)-got) : "-", want, want < 0 ? strerror((int)-want) : "-");
	failures++;
}

static int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		die(sock_path);
	return fd;
}

static void fill_hello(struct cepd_hello *h, const char *dev, unsigned num)
{
	cepd_hello_init(h, 0, num);
	snprintf(h->device, sizeof(h->device), "%s", dev);
}

/* Send @len bytes (none: the caller sent them); the reply's ret (events
 * skipped), 1 on EOF, 2 on no answer in 10 s. */
static int raw_call(int fd, const void *msg, size_t len, void *out, size_t outlen)
{
	static uint8_t buf[CEPD_MSG_MAX];
	ssize_t n;

	if (len && send(fd, msg, len, MSG_NOSIGNAL) < 0)
		return 1;
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		if (poll(&pf, 1, 10000) != 1)
			return 2;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			return 1;
		if (n >= (ssize_t)sizeof(struct cepd_rep) && ((struct cepd_hdr *)buf)->op == CEPD_REPLY) {
			size_t pl = (size_t)n - sizeof(struct cepd_rep);

			if (out)
				memcpy(out, buf + sizeof(struct cepd_rep), pl < outlen ? pl : outlen);
			return ((struct cepd_rep *)buf)->ret;
		}
	}
}

/* Say HELLO as libcep's client does (cmr_hello_send: its credentials and
 * pidfd, which cepd needs on a kernel without SO_PEERPIDFD, as the
 * guests' 6.1 is); the answer's ret, 1 on EOF, 2 on no answer in 10 s. */
static int hello_call(int fd, const struct cepd_hello *h)
{
	if (cmr_hello_send(fd, h))
		return 1;
	return raw_call(fd, NULL, 0, NULL, 0);
}

/* A client of DEVICE:PORT_NUM: its socket, or -1 with *err the HELLO's answer. */
static int raw_client(const char *dev, unsigned num, int *err)
{
	struct cepd_hello h;
	int fd = raw_connect(), ret;

	fill_hello(&h, dev, num);
	ret = hello_call(fd, &h);
	if (err)
		*err = ret;
	if (ret) {
		close(fd);
		return -1;
	}
	return fd;
}

static void req_init(struct cepd_req *q, uint32_t op, uint32_t handle)
{
	memset(q, 0, sizeof(*q));
	q->h.op = op;
	q->h.len = sizeof(*q);
	q->h.seq = seqno++;
	q->handle = handle;
}

static int req(int fd, uint32_t op, uint32_t handle, uint32_t a, uint64_t x, void *out, size_t outlen)
{
	struct cepd_req q;

	req_init(&q, op, handle);
	q.a = a;
	q.x = x;
	q.y = ~0ull;
	return raw_call(fd, &q, sizeof(q), out, outlen);
}

static int create_id(int fd, uint32_t *handle)
{
	struct cepd_id_rep r;
	int ret = req(fd, CEPD_CREATE_ID, 0, 0, 0, &r, sizeof(r));

	*handle = ret ? 0 : r.handle;
	return ret;
}

/* A connect on @handle naming @qpn (the service checks the QPN first). */
static int connect_req(int fd, uint32_t handle, uint32_t qpn, uint64_t sid)
{
	struct {
		struct cepd_req q;
		struct cepd_conn w;
	} m;

	memset(&m, 0, sizeof(m));
	req_init(&m.q, CEPD_CONNECT, handle);
	m.q.h.len = sizeof(m);
	m.w.qpn = qpn;
	m.w.service_id = sid;
	return raw_call(fd, &m, sizeof(m), NULL, 0);
}

struct vqp {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static int verbs_qp(struct vqp *v)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr qa;

	memset(v, 0, sizeof(*v));
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name))
			v->ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!v->ctx)
		return -1;
	v->pd = ibv_alloc_pd(v->ctx);
	v->cq = v->pd ? ibv_create_cq(v->ctx, 4, NULL, NULL, 0) : NULL;
	if (!v->cq)
		return -1;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = v->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	v->qp = ibv_create_qp(v->pd, &qa);
	return v->qp ? 0 : -1;
}

/* A child process that owns a QP: its QPN (the child waits on @fds[0]). */
static uint32_t foreign_qp(pid_t *pid, int *hold)
{
	int up[2], down[2];
	uint32_t qpn = 0;

	if (pipe(up) || pipe(down))
		die("pipe");
	*pid = fork();
	if (*pid == 0) {
		struct vqp v;
		char c;

		close(up[0]);
		close(down[1]);
		qpn = verbs_qp(&v) ? 0 : v.qp->qp_num;
		if (write(up[1], &qpn, sizeof(qpn)) != sizeof(qpn))
			_exit(1);
		(void)!read(down[0], &c, 1); /* until the parent is done */
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	if (read(up[0], &qpn, sizeof(qpn)) != sizeof(qpn))
		qpn = 0;
	close(up[0]);
	*hold = down[1];
	return qpn;
}

/* The service's statistics text (a statistics HELLO). */
static int service_stats(char *out, size_t len)
{
	struct cepd_hello h;
	struct cepd_req q;
	int fd = raw_connect(), ret;

	fill_hello(&h, "", 0);
	h.flags = CEPD_HELLO_STATS;
	ret = hello_call(fd, &h);
	memset(out, 0, len);
	if (!ret) {
		req_init(&q, CEPD_SERVICE_STATS, 0);
		ret = raw_call(fd, &q, sizeof(q), out, len - 1);
	}
	close(fd);
	return ret;
}

static long stats_value(const char *text, const char *line, const char *key)
{
	const char *l = strstr(text, line), *k;
	char pat[64];

	if (!l)
		return -1;
	snprintf(pat, sizeof(pat), " %s ", key);
	k = strstr(l, pat);
	if (!k || memchr(l, '\n', (size_t)(k - l)))
		return -1;
	return strtol(k + strlen(pat), NULL, 10);
}

static int hostile(const char *sock, const char *dev, unsigned num, uint64_t busy_sid, int secs)
{
	static uint8_t big[CEPD_MSG_MAX + 256];
	struct cepd_req *q = (struct cepd_req *)big;
	struct cepd_query_rep qr;
	struct vqp mine;
	uint32_t ha, ha_far, hb, fqpn = 0, myqpn = 0x4242, spare;
	int fabric = !strcmp(dev, "fabric"); /* a host run: cepd --fabric, no verbs */
	int good, bad, err, hold;
	pid_t child;
	long bad0, bad1;
	char st[16384];
	unsigned long flood_reqs = 0, flood_clients = 0, flood_ids = 0;
	double end, worst = 0;

	sock_path = sock;
	dev_name = dev;
	port_num = num;
	EXPECT("statistics", service_stats(st, sizeof(st)), 0);
	bad0 = stats_value(st, "clients", "bad_messages");

	/* A bad HELLO: another device, a bad magic */
	EXPECT("HELLO of an unknown device", raw_client("nosuchdev0", 1, &err) < 0 ? err : 0, -ENODEV);
	EXPECT("HELLO of an unknown port", raw_client(dev, 99, &err) < 0 ? err : 0, -ENODEV);
	{
		struct cepd_hello h;
		int fd = raw_connect();

		fill_hello(&h, dev, num);
		h.magic = 0x12345678;
		EXPECT("HELLO with a bad magic: dropped", hello_call(fd, &h), 1);
		close(fd);
		fd = raw_connect();
		fill_hello(&h, dev, num);
		h.sizes[0] += 8;
		EXPECT("HELLO of another ABI", hello_call(fd, &h), -EPROTONOSUPPORT);
		close(fd);
	}

	if (fabric)
		dev = "";
	good = raw_client(dev, num, &err);
	bad = raw_client(dev, num, &err);
	if (good < 0 || bad < 0) {
		printf("FAIL hostile: cannot attach to %s:%u (%s)\n", dev, num, strerror(-err));
		return 1;
	}
	/* the good client: an id listening, its own QP registered */
	if (!fabric && verbs_qp(&mine)) {
		printf("FAIL hostile: no QP of its own on %s\n", dev);
		return 1;
	}
	if (!fabric)
		myqpn = mine.qp->qp_num;
	/* handles are per client: the good client's third id has a handle
	 * the hostile one (one id) never had */
	EXPECT("create an id", create_id(good, &ha), 0);
	EXPECT("create an id", create_id(good, &spare), 0);
	EXPECT("create an id", create_id(good, &ha_far), 0);
	EXPECT("listen", req(good, CEPD_LISTEN, ha, 0, 0x00000000c3d0aa01ull, NULL, 0), 0);
	EXPECT("register its own QP", req(good, CEPD_QP_REGISTER, 0, myqpn, 0, NULL, 0), 0);

	/* QPs that are not the hostile client's */
	if (!fabric)
		fqpn = foreign_qp(&child, &hold);
	if (fabric) {
		/* no verbs: the kernel's ownership check is the guest's */
	} else if (!fqpn) {
		printf("FAIL hostile: the child made no QP\n");
		failures++;
	} else {
		EXPECT("register another process's QP", req(bad, CEPD_QP_REGISTER, 0, fqpn, 0, NULL, 0),
		       -EPERM);
		EXPECT("register it again", req(bad, CEPD_QP_REGISTER, 0, fqpn, 0, NULL, 0), -EPERM);
	}
	if (!fabric) {
		EXPECT("register a QPN nobody has", req(bad, CEPD_QP_REGISTER, 0, 0xfffff0, 0, NULL, 0),
		       -ENOENT);
		EXPECT("register QP1", req(bad, CEPD_QP_REGISTER, 0, 1, 0, NULL, 0), -EPERM);
	}
	EXPECT("register a QPN > 24 bits", req(bad, CEPD_QP_REGISTER, 0, 0x1000000, 0, NULL, 0),
	       -EINVAL);
	/* the good client's QP: the same process, but not this client's */
	EXPECT("register another client's QP", req(bad, CEPD_QP_REGISTER, 0, myqpn, 0, NULL, 0),
	       -EEXIST);
	EXPECT("destroy another client's QP", req(bad, CEPD_QP_DESTROY, 0, myqpn, 0, NULL, 0),
	       -ENOENT);
	EXPECT("create an id", create_id(bad, &hb), 0);
	EXPECT("connect on another client's QP", connect_req(bad, hb, myqpn, 0x1234), -ENOENT);
	if (fqpn)
		EXPECT("connect on another process's QP", connect_req(bad, hb, fqpn, 0x1234), -ENOENT);
	/* handles: the good client's, stale, made up */
	EXPECT("destroy another client's id", req(bad, CEPD_DESTROY_ID, ha_far, 0, 0, NULL, 0), -EINVAL);
	EXPECT("query another client's id", req(bad, CEPD_ID_QUERY, ha_far, 0, 0, NULL, 0), -EINVAL);
	EXPECT("listen on another client's id", req(bad, CEPD_LISTEN, ha_far, 0, 0x77, NULL, 0), -EINVAL);
	EXPECT("stale generation", req(bad, CEPD_ID_QUERY, hb ^ (1u << 20), 0, 0, NULL, 0), -EINVAL);
	for (uint32_t h = 0; h < 256; h++)
		if (h != hb && (h | (1u << 20)) != hb)
			EXPECT("a made-up handle", req(bad, CEPD_DESTROY_ID, h | (1u << 20), 0, 0, NULL, 0),
			       -EINVAL);
	EXPECT("handle ~0", req(bad, CEPD_REJECT, ~0u, 28, 0, NULL, 0), -EINVAL);
	/* service IDs others listen on */
	EXPECT("listen on the good client's service ID",
	       req(bad, CEPD_LISTEN, hb, 0, 0x00000000c3d0aa01ull, NULL, 0), -EADDRINUSE);
	EXPECT("listen on another process's service ID", req(bad, CEPD_LISTEN, hb, 0, busy_sid, NULL, 0),
	       -EADDRINUSE);
	/* malformed, oversized, unknown */
	memset(big, 0, sizeof(big));
	req_init(q, CEPD_RTU, hb);
	q->h.len = sizeof(*q) + 4;
	EXPECT("length says more than comes", raw_call(bad, q, sizeof(*q), NULL, 0), -EBADMSG);
	req_init(q, CEPD_RTU, hb);
	q->pd_len = 8;
	EXPECT("private data not there", raw_call(bad, q, sizeof(*q), NULL, 0), -EBADMSG);
	req_init(q, CEPD_RTU, hb);
	q->pd_len = 5000;
	q->h.len = (uint32_t)(sizeof(*q) + 5000);
	EXPECT("private data too long", raw_call(bad, q, sizeof(*q) + 5000, NULL, 0), -EMSGSIZE);
	req_init(q, CEPD_REJECT, hb);
	q->aux_len = 200;
	q->h.len = (uint32_t)(sizeof(*q) + 200);
	EXPECT("ARI too long", raw_call(bad, q, sizeof(*q) + 200, NULL, 0), -EMSGSIZE);
	req_init(q, CEPD_CONNECT, hb);
	EXPECT("CONNECT without its parameters", raw_call(bad, q, sizeof(*q), NULL, 0), -EBADMSG);
	req_init(q, 999, hb);
	EXPECT("unknown op", raw_call(bad, q, sizeof(*q), NULL, 0), -EOPNOTSUPP);
	req_init(q, CEPD_REPLY, hb);
	EXPECT("a REPLY from a client", raw_call(bad, q, sizeof(*q), NULL, 0), -EOPNOTSUPP);
	req_init(q, CEPD_HELLO, 0);
	EXPECT("a second HELLO", raw_call(bad, q, sizeof(*q), NULL, 0), -EISCONN);
	req_init(q, CEPD_RTU, hb);
	q->h.len = sizeof(big);
	EXPECT("oversized packet", raw_call(bad, q, sizeof(big), NULL, 0), -EMSGSIZE);
	req_init(q, CEPD_MRA, hb);
	q->a = 32;
	EXPECT("MRA timeout out of range", raw_call(bad, q, sizeof(*q), NULL, 0), -EINVAL);
	EXPECT("the hostile client still answered",
	       req(bad, CEPD_ID_QUERY, hb, 0, 0, &qr, sizeof(qr)), 0);
	/* the good client is untouched */
	EXPECT("the good id", req(good, CEPD_ID_QUERY, ha, 0, 0, &qr, sizeof(qr)), 0);
	EXPECT("the good id listens", qr.state, CEP_CM_LISTEN);
	EXPECT("its far id", req(good, CEPD_ID_QUERY, ha_far, 0, 0, &qr, sizeof(qr)), 0);
	EXPECT("is idle", qr.state, CEP_CM_IDLE);
	EXPECT("the good QP is its own", req(good, CEPD_QP_DESTROY, 0, myqpn, 0, NULL, 0), 0);
	EXPECT("and registers again", req(good, CEPD_QP_REGISTER, 0, myqpn, 0, NULL, 0), 0);
	if (fqpn) {
		(void)!write(hold, "x", 1);
		close(hold);
		waitpid(child, NULL, 0);
		/* the QP went with its process: the kernel no longer knows it */
		EXPECT("a dead process's QPN", req(bad, CEPD_QP_REGISTER, 0, fqpn, 0, NULL, 0), -ENOENT);
	}
	printf("hostile: %d checks failed before the flood\n", failures);
	fflush(stdout);

	/* The flood: pipelined requests without waiting, ids made and left,
	 * clients that come and vanish, garbage. */
	end = now_ms() + secs * 1000.0;
	while (now_ms() < end) {
		int fd = raw_client(dev, num, &err);
		int sent = 0;

		if (fd < 0) {
			EXPECT("a new client", err, 0);
			break;
		}
		flood_clients++;
		for (int i = 0; i < 400; i++) {
			struct cepd_req r;

			req_init(&r, (i & 3) == 0 ? CEPD_CREATE_ID : CEPD_ID_QUERY, (uint32_t)i);
			if (send(fd, &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
				break;
			sent++;
			flood_ids += (i & 3) == 0;
		}
		flood_reqs += (unsigned long)sent;
		if (flood_clients % 3 == 0)
			(void)!send(fd, "xyz", 3, MSG_NOSIGNAL); /* garbage: dropped */
		/* every third leaves its replies unread, every other reads a few */
		if (flood_clients % 3 == 1) {
			static uint8_t rb[CEPD_MSG_MAX];

			for (int i = 0; i < 100; i++)
				if (recv(fd, rb, sizeof(rb), MSG_DONTWAIT) <= 0)
					break;
		}
		close(fd);
		if (flood_clients % 4 == 0) { /* still answered between the waves */
			double t = now_ms(), d;

			EXPECT("the good client during the flood",
			       req(good, CEPD_ID_QUERY, ha, 0, 0, &qr, sizeof(qr)), 0);
			d = now_ms() - t;
			if (d > worst)
				worst = d;
		}
	}
	printf("hostile: flood of %lu requests (%lu ids) from %lu clients in %d s; the good "
	       "client's slowest answer meanwhile %.0f ms\n", flood_reqs, flood_ids, flood_clients,
	       secs, worst);
	EXPECT("the good id after the flood", req(good, CEPD_ID_QUERY, ha, 0, 0, &qr, sizeof(qr)), 0);
	EXPECT("still listening", qr.state, CEP_CM_LISTEN);
	EXPECT("its QP still its own", req(bad, CEPD_QP_REGISTER, 0, myqpn, 0, NULL, 0), -EEXIST);
	/* the hostile client's end: garbage, then it is gone */
	EXPECT("garbage shorter than a header: dropped", raw_call(bad, "xy", 2, NULL, 0), 1);
	close(bad);
	/* the flood's clients and the dropped one leave nothing: only the good
	 * client remains of this process (120 s for a slow guest's service to
	 * work through what the flood left) */
	end = now_ms() + 120000;
	for (int i = 0;; i++) {
		char pat[64];
		const char *p;
		int n = 0;

		EXPECT("statistics", service_stats(st, sizeof(st)), 0);
		snprintf(pat, sizeof(pat), " pid %d ", (int)getpid());
		for (p = strstr(st, pat); p; p = strstr(p + 1, pat))
			n++;
		if (n == 1) {
			printf("hostile: the flood's clients gone %.1f s after it\n",
			       (now_ms() - end + 120000) / 1000);
			break;
		}
		if (now_ms() > end) {
			printf("FAIL hostile: %d clients of this process left:\n%s", n, st);
			failures++;
			break;
		}
		usleep(50000);
	}
	bad1 = stats_value(st, "clients", "bad_messages");
	printf("hostile: the service counted %ld malformed messages\n", bad1 - bad0);
	EXPECT("malformed messages counted", bad1 - bad0 >= 8, 1);
	EXPECT("destroy the good id", req(good, CEPD_DESTROY_ID, ha, 0, 0, NULL, 0), 0);
	EXPECT("destroy the good id", req(good, CEPD_DESTROY_ID, spare, 0, 0, NULL, 0), 0);
	EXPECT("destroy the good id", req(good, CEPD_DESTROY_ID, ha_far, 0, 0, NULL, 0), 0);
	EXPECT("its QP", req(good, CEPD_QP_DESTROY, 0, myqpn, 0, NULL, 0), 0);
	close(good);
	printf("%s hostile: %d failed checks\n", failures ? "FAIL" : "PASS", failures);
	return failures != 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (argc == 5 && !strcmp(argv[1], "kill-server"))
		return kill_server(argv[2], argv[3], argv[4]);
	if (argc == 7 && !strcmp(argv[1], "kill-client"))
		return kill_client(argv[2], argv[3], argv[4], argv[5], atoi(argv[6]));
	if (argc == 7 && !strcmp(argv[1], "hostile"))
		return hostile(argv[2], argv[3], (unsigned)atoi(argv[4]), strtoull(argv[5], NULL, 0),
			       atoi(argv[6]));
	fprintf(stderr, "usage: cepd-guest kill-server SELF_IP PORT READY_FILE\n"
		"       cepd-guest kill-client PEER_IP PORT READY_FILE KILLED_FILE LIMIT_MS\n"
		"       cepd-guest hostile SOCKET DEVICE PORT_NUM BUSY_SID SECONDS\n");
	return 2;
}
