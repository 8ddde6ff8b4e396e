/* SPDX-License-Identifier: MIT */
/*
 * cep-bench-service: the connection-setup rate through cepd (issue 18's
 * IPC budget) next to the in-process rate, in one run. Each repetition
 * runs, alternately,
 *   - in-process: `cep-bench connect --impl libcep-ck --threads W` (two CM
 *     contexts of W workers on one fabric, one process), and
 *   - through cepd: `cepd --fabric 2 --workers W` and two client processes
 *     (cep_cm_attach): a passive one on port 1 that accepts every REQ from
 *     its callback, an active one on port 0 that keeps --window connects in
 *     flight (each ESTABLISHED issues the next from the callback, as
 *     cep-bench connect's storm does), then releases them all (DREQ/DREP)
 *     the same way;
 * and prints the medians of established/s and released/s for both and
 * their ratio. Usage:
 *   cep-bench-service [--cepd PATH] [--bench PATH] [--workers W] [--conns N]
 *                     [--window N] [--reps R] [--json]
 * PATH defaults: cepd and cep-bench of this build tree.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cep/cm.h>

#define SERVICE_ID 0xb0b0ull
#define QPN_BASE 0x1000u

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the client roles -------------------------------------------------------- */

static struct {
	struct cep_cm *cm;
	struct cep_cm_id **ids;
	uint32_t n, window;
	_Atomic uint32_t next, ok, failed;
	_Atomic int phase;       /* 0 connect, 1 release */
	_Atomic uint32_t passive_next;
	pthread_mutex_t mu;
	pthread_cond_t cv;
} g = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void done_one(int ok)
{
	uint32_t t = atomic_fetch_add(ok ? &g.ok : &g.failed, 1) + 1;

	(void)t;
	if (atomic_load(&g.ok) + atomic_load(&g.failed) == g.n) {
		pthread_mutex_lock(&g.mu);
		pthread_cond_broadcast(&g.cv);
		pthread_mutex_unlock(&g.mu);
	}
}

static int active_cb(struct cep_cm_id *id, const struct cep_cm_event *ev);

static void issue(void);

static int connect_one(uint32_t i)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = active_cb,
				     .context = (void *)(uintptr_t)i };
	struct cep_cm_conn_param p;
	int ret = cep_cm_create_id(g.cm, &ia, &g.ids[i]);

	if (ret)
		return ret;
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = SERVICE_ID;
	p.primary.local_lid = 1;
	p.primary.remote_lid = 2;
	/* the port's own GID (fe80::GUID, as a path record gives it): cepd
	 * sends only from its ports' GIDs (cepd(8), ACCESS) */
	{
		uint64_t guid = cep_cm_ca_guid(g.cm);

		p.primary.local_gid[0] = 0xfe;
		p.primary.local_gid[1] = 0x80;
		for (int b = 0; b < 8; b++)
			p.primary.local_gid[8 + b] = (uint8_t)(guid >> (56 - 8 * b));
	}
	p.primary.subnet_local = 1;
	p.primary.packet_rate = 3;
	p.primary.local_ack_timeout = 14;
	p.qpn = QPN_BASE + i;
	p.starting_psn = i & 0xffffff;
	p.pkey = 0xffff;
	p.responder_resources = 1;
	p.initiator_depth = 1;
	p.remote_cm_response_timeout = 16;
	p.local_cm_response_timeout = 16;
	p.max_cm_retries = 15;
	p.packet_life_time = 1;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	p.transport_service_type = CEP_TS_RC;
	return cep_cm_connect(g.ids[i], &p);
}

/* Issue the next operation of the phase (main thread primes, callbacks
 * refill). */
static void issue(void)
{
	for (;;) {
		uint32_t i = atomic_fetch_add(&g.next, 1);
		int ret;

		if (i >= g.n)
			return;
		if (atomic_load(&g.phase) == 0)
			ret = connect_one(i);
		else
			ret = cep_cm_disconnect(g.ids[i], NULL, 0);
		if (!ret)
			return;
		fprintf(stderr, "cep-bench-service: %s %u: %s\n",
			atomic_load(&g.phase) ? "disconnect" : "connect", i, strerror(-ret));
		done_one(0);
	}
}

static int active_cb(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	switch (ev->type) {
	case CEP_CM_EV_ESTABLISHED:
	case CEP_CM_EV_DREP_RECEIVED:
	case CEP_CM_EV_DREQ_ERROR:
		done_one(1);
		issue();
		break;
	case CEP_CM_EV_REJ_RECEIVED: case CEP_CM_EV_REQ_ERROR: case CEP_CM_EV_REP_ERROR:
		done_one(0);
		issue();
		break;
	default:
		break;
	}
	return 0;
}

static int passive_cb(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct cep_cm_accept_param p;
	uint32_t k;

	if (ev->type != CEP_CM_EV_REQ_RECEIVED)
		return 0;
	k = atomic_fetch_add(&g.passive_next, 1);
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.qpn = QPN_BASE + k;
	p.starting_psn = k & 0xffffff;
	p.responder_resources = 1;
	p.initiator_depth = 1;
	p.rnr_retry_count = 7;
	if (cep_cm_accept(id, &p)) {
		cep_cm_reject(id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
		return 1;
	}
	return 0;
}

static int run_phase(int phase, double *per_s)
{
	double t0, t1;
	uint32_t w = g.window < g.n ? g.window : g.n;
	struct timespec dl;

	atomic_store(&g.phase, phase);
	atomic_store(&g.next, 0);
	atomic_store(&g.ok, 0);
	atomic_store(&g.failed, 0);
	t0 = now_s();
	for (uint32_t k = 0; k < w; k++)
		issue();
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 120;
	pthread_mutex_lock(&g.mu);
	while (atomic_load(&g.ok) + atomic_load(&g.failed) < g.n)
		if (pthread_cond_timedwait(&g.cv, &g.mu, &dl) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&g.mu);
	t1 = now_s();
	*per_s = atomic_load(&g.ok) / (t1 - t0);
	return atomic_load(&g.ok) == g.n ? 0 : -EPROTO;
}

static struct cep_cm *attach(const char *sock, unsigned port)
{
	struct cep_cm_attach_attr a = { .size = sizeof(a), .socket = sock, .port_num = port };
	struct cep_cm *cm;
	int ret = cep_cm_attach(&a, &cm);

	if (ret) {
		fprintf(stderr, "cep-bench-service: attach %s port %u: %s\n", sock, port,
			strerror(-ret));
		exit(1);
	}
	return cm;
}

static int role(const char *which, const char *sock, uint32_t n, uint32_t window)
{
	g.n = n;
	g.window = window;
	if (!strcmp(which, "passive")) {
		struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = passive_cb };
		struct cep_cm_id *l;
		char c;

		g.cm = attach(sock, 1);
		for (uint32_t i = 0; i < n; i++)
			if (cep_cm_qp_register(g.cm, QPN_BASE + i))
				return 1;
		if (cep_cm_create_id(g.cm, &ia, &l) ||
		    cep_cm_listen_backlog(l, SERVICE_ID, ~0ull, n))
			return 1;
		printf("ready\n");
		fflush(stdout);
		while (read(0, &c, 1) > 0)
			;
		return cep_cm_destroy(g.cm) ? 1 : 0;
	}
	if (!strcmp(which, "active")) {
		double est = 0, rel = 0;
		int ret;

		g.cm = attach(sock, 0);
		g.ids = calloc(n, sizeof(*g.ids));
		double t0 = now_s();
		for (uint32_t i = 0; i < n; i++)
			if (cep_cm_qp_register(g.cm, QPN_BASE + i))
				return 1;
		if (getenv("CEP_BENCH_RT"))
			fprintf(stderr, "round trip (qp_register, main thread): %.1f us\n",
				(now_s() - t0) * 1e6 / n);
		ret = run_phase(0, &est);
		if (!ret)
			ret = run_phase(1, &rel);
		printf("{\"est_per_s\": %.1f, \"rel_per_s\": %.1f, \"ok\": %d}\n", est, rel, !ret);
		fflush(stdout);
		(void)cep_cm_destroy(g.cm);
		return ret ? 1 : 0;
	}
	return 2;
}

/* ---- the driver ------------------------------------------------------------------ */

static double field(const char *line, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(line, pat);
	return p ? strtod(p + strlen(pat), NULL) : -1;
}

static int inproc(const char *bench, unsigned w, uint32_t n, uint32_t window, double *est,
		  double *rel)
{
	char cmd[PATH_MAX + 256], line[2048];
	FILE *f;
	int ok = 0;

	snprintf(cmd, sizeof(cmd), "%s connect --impl libcep-ck --threads %u --conns %u "
		 "--window %u --reps 1 --json --quiet", bench, w, n, window);
	f = popen(cmd, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "\"bench\": \"connect\"")) {
			*est = field(line, "conn_per_s");
			*rel = field(line, "rel_per_s");
			ok = 1;
		}
	return pclose(f) == 0 && ok ? 0 : -EPROTO;
}

static pid_t spawn(const char *const argv[], int *to, int *from)
{
	int a[2], b[2];
	pid_t pid;

	if (pipe(a) || pipe(b))
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(a[0], 0);
		dup2(b[1], 1);
		close(a[0]);
		close(a[1]);
		close(b[0]);
		close(b[1]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(a[0]);
	close(b[1]);
	*to = a[1];
	*from = b[0];
	return pid;
}

static int read_line(int fd, char *buf, size_t len)
{
	size_t n = 0;

	while (n + 1 < len) {
		ssize_t r = read(fd, buf + n, 1);

		if (r <= 0)
			break;
		if (buf[n++] == '\n')
			break;
	}
	buf[n] = 0;
	return n ? 0 : -EIO;
}

static int via_cepd(const char *cepd, const char *self, unsigned w, uint32_t n, uint32_t window,
		    double *est, double *rel)
{
	char sock[64], wbuf[16], nbuf[16], winbuf[16], line[256];
	const char *cargv[] = { cepd, "--fabric", "2", "--workers", wbuf, "--socket", sock, NULL };
	const char *pargv[] = { self, "--role", "passive", "--socket", sock, "--conns", nbuf,
				"--window", winbuf, NULL };
	const char *aargv[] = { self, "--role", "active", "--socket", sock, "--conns", nbuf,
				"--window", winbuf, NULL };
	int cto, cfrom, pto, pfrom, ato, afrom, st, ret = -EPROTO;
	pid_t cp, pp, ap;

	snprintf(sock, sizeof(sock), "/tmp/cep-bench-service-%d.sock", (int)getpid());
	snprintf(wbuf, sizeof(wbuf), "%u", w);
	snprintf(nbuf, sizeof(nbuf), "%u", n);
	snprintf(winbuf, sizeof(winbuf), "%u", window);
	cp = spawn(cargv, &cto, &cfrom);
	for (int i = 0; i < 500; i++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		int up;

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
		up = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		close(fd);
		if (up)
			break;
		usleep(10000);
	}
	pp = spawn(pargv, &pto, &pfrom);
	if (read_line(pfrom, line, sizeof(line)) || strncmp(line, "ready", 5)) {
		fprintf(stderr, "cep-bench-service: the passive client did not start: '%s'\n", line);
		goto out;
	}
	ap = spawn(aargv, &ato, &afrom);
	if (!read_line(afrom, line, sizeof(line)) && field(line, "ok") == 1) {
		*est = field(line, "est_per_s");
		*rel = field(line, "rel_per_s");
		ret = 0;
	} else {
		fprintf(stderr, "cep-bench-service: the active client said '%s'\n", line);
	}
	close(ato);
	waitpid(ap, &st, 0);
	close(afrom);
out:
	close(pto);
	waitpid(pp, &st, 0);
	close(pfrom);
	kill(cp, SIGTERM);
	waitpid(cp, &st, 0);
	close(cto);
	close(cfrom);
	return ret;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	char self[PATH_MAX], dir[PATH_MAX], cepd[PATH_MAX + 64], bench[PATH_MAX + 64];
	const char *role_name = NULL, *sock = NULL;
	unsigned workers = 2, reps = 3, json = 0;
	uint32_t n = 20000, window = 128;
	double ie[32], ir[32], se[32], sr[32];
	ssize_t len;

	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		return 1;
	self[len] = 0;
	snprintf(dir, sizeof(dir), "%s", self);
	*strrchr(dir, '/') = 0;
	snprintf(cepd, sizeof(cepd), "%s/../src/service/cepd", dir);
	snprintf(bench, sizeof(bench), "%s/cep-bench", dir);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--json")) {
			json = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "cep-bench-service: %s: missing value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--role"))
			role_name = v;
		else if (!strcmp(a, "--socket"))
			sock = v;
		else if (!strcmp(a, "--cepd"))
			snprintf(cepd, sizeof(cepd), "%s", v);
		else if (!strcmp(a, "--bench"))
			snprintf(bench, sizeof(bench), "%s", v);
		else if (!strcmp(a, "--workers") || !strcmp(a, "--threads"))
			workers = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--conns"))
			n = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--window"))
			window = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--reps"))
			reps = (unsigned)strtoul(v, NULL, 0);
		else {
			fprintf(stderr, "cep-bench-service: unknown option %s\n", a);
			return 2;
		}
	}
	if (role_name)
		return sock ? role(role_name, sock, n, window) : 2;
	if (!workers || !n || !window || !reps || reps > 32) {
		fprintf(stderr, "cep-bench-service: bad arguments\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	for (unsigned r = 0; r < reps; r++) {
		if (inproc(bench, workers, n, window, &ie[r], &ir[r])) {
			fprintf(stderr, "cep-bench-service: in-process run failed (%s)\n", bench);
			return 1;
		}
		if (via_cepd(cepd, self, workers, n, window, &se[r], &sr[r])) {
			fprintf(stderr, "cep-bench-service: cepd run failed (%s)\n", cepd);
			return 1;
		}
		fprintf(stderr, "rep %u: in-process %.0f est/s %.0f rel/s; cepd %.0f est/s %.0f rel/s\n",
			r + 1, ie[r], ir[r], se[r], sr[r]);
	}
	{
		double mie = median(ie, (int)reps), mir = median(ir, (int)reps);
		double mse = median(se, (int)reps), msr = median(sr, (int)reps);

		if (json)
			printf("{\"bench\": \"service\", \"workers\": %u, \"conns\": %u, \"window\": %u, "
			       "\"reps\": %u, \"inproc_est_per_s\": %.0f, \"cepd_est_per_s\": %.0f, "
			       "\"inproc_rel_per_s\": %.0f, \"cepd_rel_per_s\": %.0f}\n", workers, n,
			       window, reps, mie, mse, mir, msr);
		else {
			printf("# cep-bench-service: %u connections, %u in flight, %u workers, "
			       "median of %u\n", n, window, workers, reps);
			printf("%-12s %12s %12s %8s\n", "", "in-process", "cepd", "ratio");
			printf("%-12s %12.0f %12.0f %7.0f%%\n", "estab/s", mie, mse, 100 * mse / mie);
			printf("%-12s %12.0f %12.0f %7.0f%%\n", "released/s", mir, msr,
			       100 * msr / mir);
		}
	}
	return 0;
}
