/* SPDX-License-Identifier: MIT */
/*
 * cepd under stress (issue 18): a `cepd --fabric 2 --check` and client
 * processes that create ids, register (bind) QPs, listen, connect,
 * accept, reject, disconnect and destroy on both fabric ports at once,
 * destroying QPs while their connections are being bound and set up (the
 * seed's CID-versus-QP-destruction race, now across processes), while the
 * parent kills clients with SIGKILL at random and starts new ones in
 * their place, and another process speaks the raw protocol with
 * random requests, handles and lengths and drops its connection at random.
 *
 * What must hold (each a failure otherwise):
 * - every call returns (a client that hangs for 60 s dies by SIGALRM and
 *   fails); every connection attempt of a living client ends with its
 *   DESTROYED after cep_cm_destroy_id();
 * - a killed client's QPNs are released: the client started in its place
 *   registers the same QPNs, -EEXIST allowed only while the dead one's
 *   connections are torn down (QPN_GRACE_S), never for good;
 * - clients told to stop end with status 0 (a sanitizer report or a
 *   failed check makes it non-zero);
 * - at the end, with every client gone, cepd's statistics show no client,
 *   no id, no CEP and no registered QPN on either port, and cepd --check
 *   (cep_table_check on both ports' tables, see cepd(8)) exits 0.
 * A failure ends the run, never hangs it: cepd's death (a sanitizer's
 * report among them) kills every client and the raw process at once, a
 * client told to stop that has not ended in 90 s is killed and counted,
 * and each child dies with the parent (PR_SET_PDEATHSIG).
 *
 * Usage: test-service-stress CEPD-PATH [--duration S] [--clients N]
 *        [--threads T] [--kill-ms M] [--seed X]
 * service-stress-random (suites service, stress) runs it for a few seconds in
 * every build (TSan's included); the opt-in soak suite runs it for 5 minutes.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cep/cm.h>

#include "service/proto.h"

#include "cepd_test.h"

#define MAX_SLOTS 32
#define NQP 48            /* QPNs per client */
#define QPN_GRACE_S 20    /* a dead client's QPN may stay registered this long */

static const char *cepd_path;
static char sock_path[108];
static char dir_path[64];
static double duration = 6;
static unsigned nclients = 6, nthreads = 3, kill_ms = 400;
static unsigned long seed;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void msleep(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static uint64_t sid_of(unsigned slot)
{
	return 0x00000000c3d00000ull + slot;
}

/* ---- a client process ----------------------------------------------------------- */

/* The client's state: one process, many threads. */
enum { Q_FREE, Q_USED, Q_GONE };

struct conn {
	struct cep_cm_id *id;
	uint32_t qpn;
	_Atomic int established, ended, destroyed;
	int passive;
};

static struct {
	struct cep_cm *cm;
	unsigned slot, port;
	uint32_t qbase;
	pthread_mutex_t mu;
	int qstate[NQP];              /* mu */
	_Atomic int quit;
	_Atomic unsigned long est, rej, errs, races, conns, passive_est;
} cl = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "service-stress: client %u (pid %d): ", cl.slot, (int)getpid());
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	_exit(3);
}

/* A free QPN of the pool (marked used), or 0. */
static uint32_t qp_take(unsigned r)
{
	uint32_t q = 0;

	pthread_mutex_lock(&cl.mu);
	for (unsigned k = 0; k < NQP && !q; k++) {
		unsigned i = (r + k) % NQP;

		if (cl.qstate[i] == Q_FREE) {
			cl.qstate[i] = Q_USED;
			q = cl.qbase + i;
		}
	}
	pthread_mutex_unlock(&cl.mu);
	return q;
}

static void qp_put(uint32_t q)
{
	pthread_mutex_lock(&cl.mu);
	cl.qstate[q - cl.qbase] = Q_FREE;
	pthread_mutex_unlock(&cl.mu);
}

/* Register @q, waiting out a dead predecessor's teardown (QPN_GRACE_S). */
static void qp_register_wait(uint32_t q)
{
	double end = now_s() + QPN_GRACE_S;
	int ret;

	while ((ret = cep_cm_qp_register(cl.cm, q)) == -EEXIST && now_s() < end)
		msleep(10);
	if (ret)
		fail("QPN 0x%x: register: %s%s", q, strerror(-ret),
		     ret == -EEXIST ? " (a dead client's QP is still bound)" : "");
}

/* Destroy the QP @q (its connection, if any, torn down) and make a new one
 * with the same number: the race of a QP destroyed under a connection. */
static void qp_recycle(uint32_t q)
{
	int ret = cep_cm_qp_destroy(cl.cm, q);

	if (ret)
		fail("QPN 0x%x: destroy: %s", q, strerror(-ret));
	qp_register_wait(q);
	atomic_fetch_add(&cl.races, 1);
}

/* Passive ids: their QPN and their end. Handler on the library's reader. */
static int conn_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct conn *c = ev->context;

	switch (ev->type) {
	case CEP_CM_EV_REQ_RECEIVED: {
		/* the listener's context: a new conn for the new id */
		struct conn *n = calloc(1, sizeof(*n));
		unsigned r = (unsigned)rand();
		struct cep_cm_accept_param p;

		if (!n)
			return 1;
		n->id = id;
		n->passive = 1;
		cep_cm_id_set_context(id, n);
		if (r % 8 == 0 || atomic_load(&cl.quit))
			return 1; /* destroyed: a REJ */
		if (r % 8 == 1) {
			(void)cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
			return 0;
		}
		n->qpn = qp_take(r >> 3);
		if (!n->qpn)
			return 1;
		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		p.qpn = n->qpn;
		p.starting_psn = 1;
		p.responder_resources = 1;
		p.initiator_depth = 1;
		p.rnr_retry_count = 7;
		if (cep_cm_accept(id, &p))
			atomic_fetch_add(&cl.errs, 1);
		return 0;
	}
	case CEP_CM_EV_ESTABLISHED: case CEP_CM_EV_RTU_RECEIVED:
		atomic_store(&c->established, 1);
		if (c->passive)
			atomic_fetch_add(&cl.passive_est, 1);
		return 0;
	case CEP_CM_EV_DESTROYED:
		if (c->passive) {
			if (c->qpn)
				qp_put(c->qpn);
			free(c);
		} else {
			atomic_store(&c->destroyed, 1);
		}
		return 0;
	case CEP_CM_EV_REQ_ERROR: case CEP_CM_EV_REP_ERROR: case CEP_CM_EV_REJ_RECEIVED:
	case CEP_CM_EV_DREQ_RECEIVED: case CEP_CM_EV_DREQ_ERROR: case CEP_CM_EV_TIMEWAIT_EXIT:
	case CEP_CM_EV_DREP_RECEIVED:
		if (ev->type == CEP_CM_EV_REJ_RECEIVED)
			atomic_fetch_add(&cl.rej, 1);
		atomic_store(&c->ended, 1);
		return c->passive; /* a passive id ends here; an active one's thread destroys it */
	default:
		return 0;
	}
}

static int connect_to(struct cep_cm_id *id, unsigned to_slot, uint32_t qpn)
{
	struct cep_cm_conn_param p;

	cepd_fabric_conn(&p, cl.port, 1 - cl.port, sid_of(to_slot), qpn, 14); /* 67 ms per try */
	return cep_cm_connect(id, &p);
}

static void wait_flag(_Atomic int *f, unsigned ms)
{
	for (unsigned t = 0; t < ms && !atomic_load(f); t += 2)
		msleep(2);
}

/* One connection attempt with a random fate. */
static void one_conn(unsigned r)
{
	struct conn *c = calloc(1, sizeof(*c));
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = conn_handler };
	unsigned fate = r % 100, peer;
	int ret;

	if (!c)
		fail("out of memory");
	c->qpn = qp_take(r >> 8);
	if (!c->qpn) {
		free(c);
		msleep(1);
		return;
	}
	ia.context = c;
	ret = cep_cm_create_id(cl.cm, &ia, &c->id);
	if (ret)
		fail("create_id: %s", strerror(-ret));
	/* a peer on the other port (slot parity is the port) */
	peer = (r >> 16) % nclients;
	peer = peer - peer % 2 + (1 - cl.port);
	if (peer >= nclients)
		peer = 1 - cl.port;
	atomic_fetch_add(&cl.conns, 1);
	ret = connect_to(c->id, peer, c->qpn);
	if (ret)
		atomic_fetch_add(&cl.errs, 1);
	if (!ret && fate < 45) {
		for (unsigned t = 0; t < 2000 && !atomic_load(&c->established) &&
				     !atomic_load(&c->ended); t += 2)
			msleep(2);
		if (atomic_load(&c->established)) {
			atomic_fetch_add(&cl.est, 1);
			msleep(r % 5);
			if (fate < 25)
				(void)cep_cm_disconnect(c->id, NULL, 0);
		}
	} else if (!ret && fate < 60) {
		/* the QP destroyed while the connection is bound to it and
		 * being set up */
		qp_recycle(c->qpn);
	} else if (!ret && fate < 75) {
		wait_flag(&c->established, 1000);
		qp_recycle(c->qpn); /* a DREQ when established */
	}
	/* else: destroyed at once, the REQ in flight */
	ret = cep_cm_destroy_id(c->id);
	if (ret)
		fail("destroy_id: %s", strerror(-ret));
	wait_flag(&c->destroyed, 10000);
	if (!atomic_load(&c->destroyed))
		fail("no DESTROYED 10 s after cep_cm_destroy_id");
	qp_put(c->qpn);
	free(c);
}

static void *client_worker(void *arg)
{
	unsigned r = (unsigned)(uintptr_t)arg;

	while (!atomic_load(&cl.quit)) {
		alarm(60); /* every call returns: a client stuck for 60 s dies */
		r = r * 1103515245u + 12345u;
		one_conn(r >> 4);
	}
	return NULL;
}

static int client_main(unsigned slot, int ctl, unsigned long s)
{
	struct cep_cm_attach_attr a = { .size = sizeof(a), .socket = sock_path };
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = conn_handler };
	struct conn lconn = { 0 };
	struct cep_cm_id *l;
	pthread_t th[16];
	char cmd;
	int ret;

	cl.slot = slot;
	cl.port = slot % 2;
	cl.qbase = 0x10000 + slot * 0x100;
	srand((unsigned)s);
	alarm(60); /* a hang ends here, as a failure */
	a.port_num = cl.port;
	ret = cep_cm_attach(&a, &cl.cm);
	if (ret)
		fail("attach: %s", strerror(-ret));
	for (unsigned i = 0; i < NQP; i++)
		qp_register_wait(cl.qbase + i);
	lconn.passive = 0;
	ia.context = &lconn;
	ret = cep_cm_create_id(cl.cm, &ia, &l);
	if (!ret)
		ret = cep_cm_listen(l, sid_of(slot), ~0ull);
	/* the dead predecessor's listener may linger a moment */
	for (int t = 0; ret == -EADDRINUSE && t < 500; t++) {
		msleep(10);
		ret = cep_cm_listen(l, sid_of(slot), ~0ull);
	}
	if (ret)
		fail("listen: %s", strerror(-ret));
	for (unsigned t = 0; t < nthreads; t++)
		if (pthread_create(&th[t], NULL, client_worker, (void *)(uintptr_t)(s + t * 7919)))
			fail("pthread_create");
	if (read(ctl, &cmd, 1) != 1) /* the parent says stop (or dies) */
		cmd = 'q';
	atomic_store(&cl.quit, 1);
	for (unsigned t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	ret = cep_cm_destroy_id(l);
	if (ret)
		fail("destroy listener: %s", strerror(-ret));
	/* half close everything at once, half as a cleanup would */
	if (slot % 2 == 0)
		wait_flag(&lconn.destroyed, 10000);
	ret = cep_cm_destroy(cl.cm);
	if (ret)
		fail("cep_cm_destroy: %s", strerror(-ret));
	printf("client %u: %lu connects, %lu established (%lu passive), %lu rejected, %lu "
	       "QP races, %lu refused calls\n", slot, cl.conns, cl.est, cl.passive_est, cl.rej,
	       cl.races, cl.errs);
	return 0;
}

/* ---- the parent --------------------------------------------------------------------- */

struct slot {
	pid_t pid;
	int ctl;       /* write end: 'q' stops it */
	unsigned gen;
};

static struct slot slots[MAX_SLOTS];
static int failures;

/* Close slot @i's control pipe (its client sees EOF: stops). */
static void ctl_close(unsigned i)
{
	if (slots[i].ctl >= 0)
		close(slots[i].ctl);
	slots[i].ctl = -1;
}

static void spawn(unsigned i)
{
	int p[2];
	pid_t pid;

	if (pipe(p))
		exit(1);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
			_exit(127);
		close(p[1]);
		for (unsigned k = 0; k < nclients; k++)
			if (k != i && slots[k].ctl >= 0)
				close(slots[k].ctl); /* only the parent stops a client */
		_exit(client_main(i, p[0], seed * 1000003ul + i * 131ul + slots[i].gen));
	}
	close(p[0]);
	slots[i].pid = pid;
	slots[i].ctl = p[1];
	slots[i].gen++;
}

/* A child's status: killed by SIGKILL (when @killed) or exit 0. */
static void judge(unsigned i, int st, int killed)
{
	if (killed && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		return;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && !killed)
		return;
	fprintf(stderr, "service-stress: client %u (pid %d) ended with %s %d\n", i,
		(int)slots[i].pid, WIFSIGNALED(st) ? "signal" : "status",
		WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	if (!(killed && WIFEXITED(st) && WEXITSTATUS(st) == 0))
		failures++;
}

/* Reap @pid within @secs; else kill it, say so and count a failure (a
 * hang is reported, not waited out). 1 when it ended by itself. */
static int reap(pid_t pid, int *st, double secs, const char *what)
{
	double end = now_s() + secs;

	do {
		pid_t r = waitpid(pid, st, WNOHANG);

		if (r == pid)
			return 1;
		if (r < 0) {
			fprintf(stderr, "service-stress: %s (pid %d): %s\n", what, (int)pid,
				strerror(errno));
			failures++;
			return 0;
		}
		msleep(10);
	} while (now_s() < end);
	fprintf(stderr, "service-stress: %s (pid %d) still running after %.0f s: killed\n", what,
		(int)pid, secs);
	failures++;
	kill(pid, SIGKILL);
	waitpid(pid, st, 0);
	return 0;
}

/* cepd ended with @st before the test stopped it: every client and the
 * raw process (@raw, -1 when gone) end at once - they would wait on a
 * service that is gone - and the run fails. */
static int cepd_died(int st, pid_t raw)
{
	fprintf(stderr, "service-stress: cepd died (status 0x%x): every client killed\n", st);
	for (unsigned i = 0; i < nclients; i++)
		if (slots[i].pid > 0) {
			kill(slots[i].pid, SIGKILL);
			waitpid(slots[i].pid, NULL, 0);
			slots[i].pid = 0;
		}
	if (raw > 0) {
		kill(raw, SIGKILL);
		waitpid(raw, NULL, 0);
	}
	unlink(sock_path);
	rmdir(dir_path);
	printf("service-stress: FAIL (cepd died)\n");
	return 1;
}

static pid_t start_cepd(void)
{
	char *const argv[] = { "cepd", "--fabric", "2", "--workers", "2", "--check", "--socket",
			       sock_path, NULL };

	return cepd_spawn(cepd_path, argv, sock_path, 1000, "service-stress");
}

static void stats(char *out, size_t len)
{
	char cmd[512];
	FILE *f;
	size_t n;

	snprintf(cmd, sizeof(cmd), "%s --stats --socket %s", cepd_path, sock_path);
	out[0] = 0;
	f = popen(cmd, "r");
	if (!f)
		return;
	n = fread(out, 1, len - 1, f);
	out[n] = 0;
	pclose(f);
}

/* A field "KEY N" of @line (up to its newline), or -1. */
static long field(const char *line, const char *key)
{
	const char *eol = strchr(line, '\n');
	size_t kl = strlen(key);

	for (const char *k = strstr(line, key); k && (!eol || k < eol); k = strstr(k + 1, key))
		if (k[-1] == ' ' && k[kl] == ' ')
			return strtol(k + kl + 1, NULL, 10);
	return -1;
}

/* No client left, and on both ports no id, no CEP, no registered QPN. */
static int service_empty(const char *s)
{
	int ports = 0, clients = -1;

	for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, "port ", 5)) {
			if (field(l, "ids") != 0 || field(l, "ceps") != 0 || field(l, "qps") != 0)
				return 0;
			ports++;
		} else if (!strncmp(l, "clients ", 8)) {
			clients = atoi(l + 8);
		}
	}
	return ports == 2 && clients == 0;
}

/* The raw-protocol process: random requests on connections it drops at
 * random, until SIGTERM. A process, not a thread of the parent: the parent
 * forks clients all along and must stay single-threaded (TSan). */
static volatile sig_atomic_t raw_stop;
static unsigned long raw_reqs, raw_conns;

static void raw_on_term(int sig)
{
	(void)sig;
	raw_stop = 1;
}

static int raw_hello(unsigned port)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct cepd_hello h;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	cepd_hello_init(&h, 0, port);
	if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int raw_main(unsigned r)
{
	static uint8_t buf[CEPD_MSG_MAX];
	uint32_t handles[64];
	unsigned nh = 0;
	int fd = -1;

	while (!raw_stop) {
		uint8_t m[sizeof(struct cepd_req) + 512];
		struct cepd_req *q = (struct cepd_req *)m;
		size_t len;

		r = r * 1103515245u + 12345u;
		if (fd < 0) {
			fd = raw_hello((r >> 8) % 2);
			nh = 0;
			raw_conns++;
			if (fd < 0) {
				msleep(5);
				continue;
			}
		}
		memset(m, 0, sizeof(m));
		q->h.op = 1 + (r >> 4) % (CEPD_OP_COUNT + 1);
		q->h.seq = r;
		q->handle = nh && (r & 1) ? handles[(r >> 12) % nh] : (r >> 3);
		q->a = (r >> 7) % 3 ? 0x10000 + (r >> 9) % 0x1000 : r; /* others' QPNs too */
		q->x = sid_of((r >> 5) % MAX_SLOTS);
		q->y = ~0ull;
		len = sizeof(*q);
		if (cepd_param_size(q->h.op) > 0)
			len += (size_t)cepd_param_size(q->h.op);
		if ((r >> 20) % 16 == 0) { /* malformed: random lengths */
			q->pd_len = (r >> 11) % 300;
			len = sizeof(*q) + (r >> 13) % 400;
		}
		if ((r >> 24) % 64 == 0)
			len = (r >> 14) % sizeof(struct cepd_hdr); /* garbage: dropped */
		q->h.len = (uint32_t)((r >> 22) % 32 ? len : len + 8);
		if (send(fd, m, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN) {
			close(fd);
			fd = -1;
			continue;
		}
		raw_reqs++;
		/* read what came: remember handles of the ids made */
		for (;;) {
			struct pollfd pf = { .fd = fd, .events = POLLIN };
			ssize_t n;

			if (poll(&pf, 1, (r >> 3) % 4 ? 0 : 20) != 1)
				break;
			n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n <= 0) {
				close(fd);
				fd = -1;
				break;
			}
			if (n == sizeof(struct cepd_rep) + sizeof(struct cepd_id_rep) &&
			    ((struct cepd_rep *)buf)->ret == 0 && nh < 64)
				handles[nh++] = ((struct cepd_id_rep *)(buf + sizeof(struct cepd_rep)))->handle;
		}
		if (fd >= 0 && (r >> 18) % 500 == 0) { /* vanish mid-stream */
			close(fd);
			fd = -1;
		}
	}
	if (fd >= 0)
		close(fd);
	printf("raw client: %lu requests on %lu connections\n", raw_reqs, raw_conns);
	return 0;
}

static pid_t spawn_raw(void)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct sigaction sa;

		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
			_exit(127);
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = raw_on_term;
		sigaction(SIGTERM, &sa, NULL);
		_exit(raw_main((unsigned)seed));
	}
	return pid;
}

int main(int argc, char **argv)
{
	pid_t cepd, raw;
	char buf[16384];
	double end, t0;
	unsigned kills = 0;
	int st, empty = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: test-service-stress CEPD-PATH [--duration S] [--clients N] "
			"[--threads T] [--kill-ms M] [--seed X]\n");
		return 2;
	}
	cepd_path = argv[1];
	seed = (unsigned long)time(NULL);
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--duration"))
			duration = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--clients"))
			nclients = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads"))
			nthreads = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--kill-ms"))
			kill_ms = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoul(argv[i + 1], NULL, 0);
		else {
			fprintf(stderr, "service-stress: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (nclients < 2 || nclients > MAX_SLOTS || nthreads < 1 || nthreads > 16 || kill_ms < 10) {
		fprintf(stderr, "service-stress: 2..%d clients, 1..16 threads, kill-ms >= 10\n",
			MAX_SLOTS);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	snprintf(dir_path, sizeof(dir_path), "/tmp/cepd-stress.XXXXXX");
	if (!mkdtemp(dir_path))
		return 1;
	snprintf(sock_path, sizeof(sock_path), "%s/cepd.sock", dir_path);
	printf("service-stress: seed %lu, %u clients x %u threads, %.1f s, a kill every ~%u ms\n",
	       seed, nclients, nthreads, duration, kill_ms);
	srand((unsigned)seed);
	for (unsigned i = 0; i < MAX_SLOTS; i++)
		slots[i].ctl = -1;
	cepd = start_cepd();
	for (unsigned i = 0; i < nclients; i++)
		spawn(i);
	raw = spawn_raw();
	t0 = now_s();
	end = t0 + duration;
	while (now_s() < end) {
		unsigned i = (unsigned)rand() % nclients;
		pid_t pid;

		msleep(kill_ms / 2 + (unsigned)rand() % kill_ms);
		/* a client that ended by itself is a failure */
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			if (pid == raw) {
				fprintf(stderr, "service-stress: the raw client died (status 0x%x)\n", st);
				failures++;
				raw = -1;
				continue;
			}
			if (pid == cepd)
				return cepd_died(st, raw);
			for (unsigned k = 0; k < nclients; k++)
				if (slots[k].pid == pid) {
					judge(k, st, 0);
					fprintf(stderr, "service-stress: client %u ended early\n", k);
					failures++;
					ctl_close(k);
					spawn(k);
				}
		}
		kill(slots[i].pid, SIGKILL);
		if (waitpid(slots[i].pid, &st, 0) == slots[i].pid)
			judge(i, st, 1);
		ctl_close(i);
		kills++;
		spawn(i);
	}
	if (raw > 0) {
		kill(raw, SIGTERM);
		if (waitpid(raw, &st, 0) != raw || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "service-stress: the raw client ended with status 0x%x\n", st);
			failures++;
		}
	}
	if (waitpid(cepd, &st, WNOHANG) == cepd)
		return cepd_died(st, -1);
	/* the end: half are told to stop (cep_cm_destroy), half are killed */
	for (unsigned i = 0; i < nclients; i++) {
		if (i % 3 == 2) {
			kill(slots[i].pid, SIGKILL);
			waitpid(slots[i].pid, &st, 0);
			judge(i, st, 1);
			slots[i].pid = 0;
			ctl_close(i);
		} else {
			(void)!write(slots[i].ctl, "q", 1);
		}
	}
	for (unsigned i = 0; i < nclients; i++) {
		if (i % 3 == 2)
			continue;
		/* its calls answer within 60 s (its alarm), its stop too */
		if (reap(slots[i].pid, &st, 90, "a client told to stop"))
			judge(i, st, 0);
		slots[i].pid = 0;
		ctl_close(i);
	}
	printf("service-stress: %u clients killed in %.1f s\n", kills, now_s() - t0);
	/* every trace of the clients goes (timewaits included) */
	for (int t = 0; t < 600 && !empty; t++) {
		if (waitpid(cepd, &st, WNOHANG) == cepd)
			return cepd_died(st, -1);
		stats(buf, sizeof(buf));
		empty = service_empty(buf);
		if (!empty)
			msleep(50);
	}
	fputs(buf, stdout);
	if (!empty) {
		fprintf(stderr, "service-stress: cepd still holds state of gone clients after 30 s\n");
		failures++;
	}
	kill(cepd, SIGTERM);
	if (waitpid(cepd, &st, 0) != cepd || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "service-stress: cepd --check ended with status 0x%x\n", st);
		failures++;
	}
	rmdir(dir_path);
	printf("service-stress: %s (%d failures)\n", failures ? "FAIL" : "ok", failures);
	return failures ? 1 : 0;
}
