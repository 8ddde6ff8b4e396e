/* SPDX-License-Identifier: MIT */
/*
 * cepd: one CM per node (issue 18; cepd(8)). Owns the CM class of its
 * ports (umad, or an in-process fabric with --fabric N), runs libcep's CM
 * engine on each, and serves client processes over a Unix SOCK_SEQPACKET
 * socket in the protocol of proto.h (cepd.h lists the files).
 *
 * This file: options, ports, the listening socket, signals and the
 * shutdown. SIGTERM/SIGINT: the socket closes, every client is
 * disconnected (their calls then fail with -ECONNRESET), ids and ports are
 * torn down. Threads: the main thread accepts (client.c runs a thread per
 * client) and sends the events of pending clients (events.c, pend_look);
 * the CM workers run the engine's callbacks (events.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cep/clock.h>
#include <cep/sa.h>
#ifdef CEPD_HAVE_UMAD
#include <cep/umad.h>
#include <cep/verbs.h>
#include <infiniband/verbs.h>
#endif
#ifdef CEPD_HAVE_SD_LISTEN
#include "service/sd_listen.h"
#endif
#include "service/addr.h"
#include "service/cepd.h"
#include "service/config.h"

struct svc svc = { .lk = PTHREAD_MUTEX_INITIALIZER, .lfd = -1,
		    .sigpipe = { -1, -1 }, .pend_lk = PTHREAD_MUTEX_INITIALIZER,
		    .pend_efd = -1 };

void logmsg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("cepd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---- ports ------------------------------------------------------------------ */

/* The next slot's port, its transport just opened: start its CM and count
 * it, or destroy the transport and leave the slot free. @sa: its SA client
 * if one is opened already (--fabric-sa), which it then owns. */
static int port_start(struct port *p, struct cep_sa *sa)
{
	/* As the kernel's CM serves rdma_cm (and as the librdmacm drop-in's
	 * in-process CM does): a request the application has not answered in
	 * half the peer's timeout, or that arrives while its listener is
	 * behind, gets an MRA with service timeout 24, so the requester waits
	 * instead of retrying into a busy node. */
	struct cep_cm_attr ca = { .size = sizeof(ca), .transport = p->tp, .workers = svc.workers,
				  .mra_service_timeout = 24, .auto_mra = 1 };
	int ret = p->tp->ops->query_port(p->tp, &p->info);

	p->index = svc.nports;
	if (!ret)
		ret = addr_port_open(p);
	if (!ret) {
		ret = cep_cm_create(&ca, &p->cm);
		if (ret)
			addr_port_close(p);
	}
	if (ret) {
		p->tp->ops->destroy(p->tp);
		return ret;
	}
	qps_port_init(p);
	mc_port_init(p);
	sa_port_init(p, sa);
	svc.nports++;
	return 0;
}

/* The SA client of --fabric-sa DEV:PORT (DEV empty: libibumad's default
 * CA), and that port's GID: 0 or -errno. */
static int fabric_sa(const char *spec, struct cep_sa **sa, uint8_t gid[16])
{
#ifdef CEPD_HAVE_UMAD
	char dev[CEPD_DEVICE_MAX];
	const char *colon = strrchr(spec, ':');
	size_t dl = colon ? (size_t)(colon - spec) : 0;
	struct cep_sa_attr a = { .size = sizeof(a), .timeout_ms = 1000 };
	struct cep_sa_port pi;
	unsigned long num;
	char *end;
	int ret;

	if (!colon || dl >= sizeof(dev))
		return -EINVAL;
	num = strtoul(colon + 1, &end, 10);
	if (*end || num < 1 || num > 254)
		return -EINVAL;
	memcpy(dev, spec, dl);
	dev[dl] = 0;
	a.dev_name = dl ? dev : NULL;
	a.port_num = (uint8_t)num;
	ret = cep_sa_get(&a, sa);
	if (ret)
		return ret;
	ret = cep_sa_port_info(*sa, &pi);
	if (ret) {
		cep_sa_put(*sa);
		*sa = NULL;
		return ret;
	}
	memcpy(gid, pi.gid, 16);
	return 0;
#else
	(void)spec, (void)sa, (void)gid;
	return -EOPNOTSUPP; /* no libibumad: no SA client */
#endif
}

/* @n ports of an in-process fabric. With @sa_spec (--fabric-sa), port 0
 * stands for that real or simulated port before the SA: it takes its GID,
 * and its multicast joins go to its SA (the fabric has none). */
static int fabric_ports(unsigned n, const char *sa_spec)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	struct cep_sa *sa = NULL;
	uint8_t gid[16] = { 0 };
	int ret;

	if (sa_spec) {
		ret = fabric_sa(sa_spec, &sa, gid);
		if (ret) {
			fprintf(stderr, "cepd: --fabric-sa %s: %s\n", sa_spec, strerror(-ret));
			return ret;
		}
	}
	ret = cep_fabric_create(&fa, &svc.fab);
	for (unsigned i = 0; i < n && !ret; i++) {
		struct cep_fabric_port_attr pa = {
			.size = sizeof(pa), .ca_guid = 0x0002c90300a00000ull + i,
			.lid = (uint16_t)(i + 1), .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB,
		};
		struct port *p = &svc.port[svc.nports];

		if (i == 0 && sa)
			memcpy(pa.gid, gid, 16);
		ret = cep_fabric_port_create(svc.fab, &pa, &p->tp);
		if (ret)
			break;
		p->port_num = 1;
		ret = port_start(p, i == 0 ? sa : NULL);
		if (!ret && i == 0)
			sa = NULL; /* the port's now (sa.c) */
	}
	cep_sa_put(sa);
	return ret;
}

#ifdef CEPD_HAVE_UMAD
static int umad_port(const char *dev, unsigned num)
{
	struct cep_umad_attr ua = { .size = sizeof(ua), .dev_name = dev,
				    .port_num = (uint8_t)num, .gid_index = CEP_UMAD_GID_AUTO };
	struct port *p = &svc.port[svc.nports];
	int ret;

	if (svc.nports == MAX_PORTS || strlen(dev) >= sizeof(p->dev) || num < 1 || num > 254)
		return -EINVAL;
	ret = cep_umad_open(&ua, &p->tp);
	if (ret)
		return ret;
	snprintf(p->dev, sizeof(p->dev), "%s", dev);
	p->port_num = (uint8_t)num;
	return port_start(p, NULL);
}

/* Every active port of every RDMA device. */
static int umad_all_ports(void)
{
	int n = 0, ret = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list)
		return -errno;
	for (int i = 0; i < n; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;

		if (!ctx)
			continue;
		if (!ibv_query_device(ctx, &da))
			for (unsigned pn = 1; pn <= da.phys_port_cnt; pn++) {
				struct ibv_port_attr pa;

				if (ibv_query_port(ctx, (uint8_t)pn, &pa) || pa.state != IBV_PORT_ACTIVE)
					continue;
				ret = umad_port(ibv_get_device_name(list[i]), pn);
				if (ret)
					logmsg("%s:%u: %s", ibv_get_device_name(list[i]), pn,
					       strerror(-ret));
			}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return 0;
}
#endif

/* ---- the socket -------------------------------------------------------------- */

static const char *default_path(void)
{
	const char *e = getenv("CEP_SERVICE");

	return e && *e && strcmp(e, "none") ? e : CEPD_DEFAULT_SOCKET;
}

static int listen_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (svc.lfd >= 0) /* handed over by systemd (main) */
		return 0;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		/* a socket file left by a dead cepd: take it over, never a live one */
		int e = -errno, probe;

		if (e != -EADDRINUSE) {
			close(fd);
			return e;
		}
		probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			close(fd);
			return -EADDRINUSE;
		}
		if (probe >= 0)
			close(probe);
		unlink(path);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
			e = -errno;
			close(fd);
			return e;
		}
	}
	/* any local user may connect, as any may open the kernel's
	 * rdma_cm device (the socket unit's SocketMode): connecting grants
	 * nothing by itself (access.c); not left to the umask */
	if (chmod(path, 0666) || listen(fd, 128)) {
		int e = -errno;

		close(fd);
		unlink(path);
		return e;
	}
	snprintf(svc.path, sizeof(svc.path), "%s", path);
	svc.own_path = 1;
	svc.lfd = fd;
	return 0;
}

static void on_signal(int sig)
{
	int e = errno;

	if (sig != SIGHUP)
		atomic_store_explicit(&svc.stop, 1, memory_order_relaxed);
	if (svc.sigpipe[1] >= 0)
		(void)!write(svc.sigpipe[1], &sig, 1);
	errno = e;
}

/* CLOCK_MONOTONIC in ms (the pending list's looks) */
static int64_t now_ms(void)
{
	return (int64_t)(cep_clock_now_ns(NULL) / 1000000u);
}

/* A spare descriptor: when accept fails for want of descriptors, it is
 * closed to accept the waiting connection and refuse it at once, so the
 * listen queue drains instead of polling readable for ever. */
static int spare_fd = -1;

static void take_connections(void)
{
	for (int i = 0; i < 64; i++) { /* a bounded batch, then the signals */
		int fd = accept4(svc.lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd >= 0) {
			accept_client(fd);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EMFILE || errno == ENFILE) {
			if (spare_fd >= 0)
				close(spare_fd);
			fd = accept4(svc.lfd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0) {
				close(fd);
				atomic_fetch_add_explicit(&svc.clients_refused, 1, memory_order_relaxed);
			}
			spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
			if (svc.verbose)
				logmsg("out of descriptors: a connection refused");
			if (fd < 0 && spare_fd < 0) {
				/* not even the spare: wait a little rather than
				 * spin on a listening socket that stays readable */
				struct timespec ten_ms = { 0, 10 * 1000 * 1000 };

				nanosleep(&ten_ms, NULL);
				return;
			}
			continue;
		}
		return; /* EAGAIN: none left; anything else: next poll */
	}
}

/* As many descriptors as the hard limit allows: one per client. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* --check, every client gone: wait (30 s at most) until each port's
 * engine holds no id, no CEP (timewaits over) and no QPN, quiesce it and
 * run cep_table_check() on its table. 0, or 1 after logging what held
 * on. The main thread; only the CM workers run (nothing arms a timer
 * once no id is left). */
static int check_tables(void)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int status = 0;

	for (unsigned i = 0; i < svc.nports; i++) {
		struct cep_cm *cm = svc.port[i].cm;
		struct cep_cm_stats st = { .size = sizeof(st) };
		struct cep_table_stats tst;
		char msg[512];
		int bad = 0;

		for (int t = 0; t < 1500; t++) {
			if (cep_cm_get_stats(cm, &st))
				break;
			cep_table_stats(cep_cm_table(cm), &tst);
			if (!st.ids && !tst.live && !tst.qps)
				break;
			nanosleep(&ts, NULL);
		}
		if (cep_cm_quiesce(cm, 5000))
			logmsg("check: port %u did not quiesce", i);
		(void)cep_cm_get_stats(cm, &st);
		cep_table_stats(cep_cm_table(cm), &tst);
		if (atomic_load_explicit(&svc.port[i].nmc, memory_order_relaxed)) {
			logmsg("check: port %u keeps %llu multicast joins with no client", i,
			       (unsigned long long)svc.port[i].nmc);
			bad = 1;
		}
		if (st.ids || tst.live || tst.qps) {
			logmsg("check: port %u keeps %llu ids, %llu CEPs, %llu QPNs with no client",
			       i, (unsigned long long)st.ids, (unsigned long long)tst.live,
			       (unsigned long long)tst.qps);
			bad = 1;
		}
		if (cep_table_check(cep_cm_table(cm), msg, sizeof(msg))) {
			logmsg("check: port %u: cep_table_check: %s", i, msg);
			bad = 1;
		}
		status |= bad;
		logmsg("check: port %u: %s (CEPs allocated %llu freed %llu, binds %llu)", i,
		       bad ? "FAILED" : "tables consistent and empty",
		       (unsigned long long)tst.allocated, (unsigned long long)tst.freed,
		       (unsigned long long)tst.bound);
	}
	return status;
}

/* SIGTERM: close the socket, drop every client (their calls fail with
 * -ECONNRESET), wait for their threads, then free the ports. 0, or 1
 * when --check found the tables wrong. */
static int shutdown_all(void)
{
	int status = 0;

	struct timespec ts = { 0, 10 * 1000 * 1000 };

	close(svc.lfd);
	if (svc.own_path)
		unlink(svc.path);
	/* first no event goes out to anyone (what one client's teardown
	 * causes must not reach another as if the service still ran), then
	 * every socket ends */
	pthread_mutex_lock(&svc.lk);
	for (struct client *c = svc.clients; c; c = c->next) {
		pthread_mutex_lock(&c->lk);
		c->dead = 1;
		pthread_mutex_unlock(&c->lk);
	}
	for (struct client *c = svc.clients; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&svc.lk);
	pend_close(); /* the list's references: nothing goes out any more */
	/* every client's thread ends and its ids' DESTROYED come back (5 s
	 * at most; an id in timewait may take longer: its sid is freed after
	 * the CM, which drops it, below) */
	for (int i = 0; i < 500; i++) {
		if (!atomic_load_explicit(&svc.live_clients, memory_order_acquire))
			break;
		nanosleep(&ts, NULL);
	}
	if (svc.check)
		status = check_tables();
	for (unsigned i = 0; i < svc.nports; i++) {
		(void)cep_cm_quiesce(svc.port[i].cm, 1000);
		if (cep_cm_destroy(svc.port[i].cm))
			logmsg("port %u: the CM did not close cleanly", i);
		svc.port[i].tp->ops->destroy(svc.port[i].tp);
		addr_port_close(&svc.port[i]);
		qps_port_fini(&svc.port[i]);
		mc_port_fini(&svc.port[i]);
		sa_port_fini(&svc.port[i]);
	}
	sids_release_all(); /* no callback runs any more */
	if (svc.fab)
		(void)cep_fabric_destroy(svc.fab);
	return status;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cepd [--socket PATH] [--port DEV:PORT]... [--fabric N] [--workers N]\n"
		"            [--config FILE] [--limit NAME=VALUE]... [--max-ids N] [--check] [-v]\n"
		"       cepd --stats [--socket PATH]\n"
		"Serve libcep's connection manager to the processes of this node.\n"
		"  --socket PATH  listen here (default $CEP_SERVICE, else %s)\n"
		"  --port DEV:PORT  own this RDMA port's CM class (repeatable;\n"
		"                 default: every active port)\n"
		"  --fabric N     an in-process fabric of N ports instead (tests, benchmarks)\n"
		"  --fabric-sa DEV:PORT  with --fabric: port 0 takes that port's GID and\n"
		"                 sends its multicast joins to its SA (tests: ibsim)\n"
		"  --workers N    CM workers per port (default: online CPUs)\n"
		"  --config FILE  grants and limits (default %s, if present)\n"
		"  --limit NAME=VALUE  one limit (over the file's); names and defaults:\n"
		"                 ", CEPD_DEFAULT_SOCKET, CEPD_DEFAULT_CONFIG);
	config_print_limits(f);
	fprintf(f,
		"  --max-ids N    the same as --limit ids-per-client=N\n"
		"  --stats        print a running service's statistics and exit\n"
		"  --check        at exit, check the CM tables (tests): exit 1 if wrong\n"
		"  -v             log clients coming and going\n");
}

/* The configuration file given (or the default one when it exists). */
static const char *config_path;

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "port", required_argument, NULL, 'p' },
		{ "fabric", required_argument, NULL, 'f' },
		{ "fabric-sa", required_argument, NULL, 'F' },
		{ "workers", required_argument, NULL, 'w' },
		{ "config", required_argument, NULL, 'c' },
		{ "limit", required_argument, NULL, 'l' },
		{ "max-ids", required_argument, NULL, 'm' },
		{ "stats", no_argument, NULL, 'S' },
		{ "check", no_argument, NULL, 'C' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL, *fabric_sa_spec = NULL;
	const char *ports[MAX_PORTS];
	const char *limits[64];
	unsigned nports = 0, nlimits = 0;
	long fabric = 0;
	int stats = 0, o, ret = 0;
	int64_t look_at; /* the pending list's next look (CLOCK_MONOTONIC ms), 0: none */
	struct sigaction sa;

	while ((o = getopt_long(argc, argv, "s:p:f:F:w:c:l:m:SCvh", opts, NULL)) != -1) {
		switch (o) {
		case 's': path = optarg; break;
		case 'p':
			if (nports == MAX_PORTS) {
				fprintf(stderr, "cepd: at most %d ports\n", MAX_PORTS);
				return 2;
			}
			ports[nports++] = optarg;
			break;
		case 'f':
			fabric = strtol(optarg, NULL, 0);
			if (fabric < 1 || fabric > MAX_PORTS) {
				fprintf(stderr, "cepd: --fabric takes 1..%d\n", MAX_PORTS);
				return 2;
			}
			break;
		case 'F': fabric_sa_spec = optarg; break;
		case 'w': svc.workers = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'c': config_path = optarg; break;
		case 'l':
		case 'm': {
			static char buf[64][80];

			if (nlimits == 64) {
				fprintf(stderr, "cepd: too many --limit\n");
				return 2;
			}
			if (o == 'm') {
				snprintf(buf[nlimits], sizeof(buf[0]), "ids-per-client=%s", optarg);
				limits[nlimits] = buf[nlimits];
			} else {
				limits[nlimits] = optarg;
			}
			nlimits++;
			break;
		}
		case 'S': stats = 1; break;
		case 'C': svc.check = 1; break;
		case 'v': svc.verbose = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (!path)
		path = default_path();
	if (stats)
		return stats_command(path);
	/* limits: defaults, then the file, then the command line */
	ret = config_load(config_path ? config_path : CEPD_DEFAULT_CONFIG, true, stderr);
	if (ret == -ENOENT && !config_path) {
		ret = 0; /* no file: no grants, default limits */
	} else if (ret) {
		fprintf(stderr, "cepd: %s: %s\n", config_path ? config_path : CEPD_DEFAULT_CONFIG,
			strerror(-ret));
		return 2;
	} else if (!config_path) {
		config_path = CEPD_DEFAULT_CONFIG;
	}
	for (unsigned i = 0; i < nlimits; i++)
		if (config_limit_arg(limits[i])) {
			fprintf(stderr, "cepd: bad limit '%s'\n", limits[i]);
			return 2;
		}
	if (cepd_limits.ids_per_client > HANDLE_IDX_MASK + 1) {
		fprintf(stderr, "cepd: ids-per-client takes 1..%u\n", HANDLE_IDX_MASK + 1);
		return 2;
	}
	raise_fd_limit();
	if (fabric && nports) {
		fprintf(stderr, "cepd: --fabric and --port exclude each other\n");
		return 2;
	}
	if (fabric_sa_spec && !fabric) {
		fprintf(stderr, "cepd: --fabric-sa needs --fabric\n");
		return 2;
	}
#ifdef CEPD_HAVE_SD_LISTEN
	/* before any thread: it edits the environment */
	ret = cepd_sd_listen_fd();
	if (ret >= 0)
		svc.lfd = ret;
	else if (ret != -ENOENT) {
		fprintf(stderr, "cepd: the socket systemd passed: %s\n", strerror(-ret));
		return 1;
	}
	ret = 0;
#endif
	if (pipe2(svc.sigpipe, O_CLOEXEC | O_NONBLOCK)) {
		perror("cepd: pipe");
		return 1;
	}
	svc.pend_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (svc.pend_efd < 0) {
		perror("cepd: eventfd");
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (fabric)
		ret = fabric_ports((unsigned)fabric, fabric_sa_spec);
	else {
#ifdef CEPD_HAVE_UMAD
		for (unsigned i = 0; i < nports && !ret; i++) {
			char dev[CEPD_DEVICE_MAX];
			const char *colon = strrchr(ports[i], ':');
			unsigned long num = colon ? strtoul(colon + 1, NULL, 10) : 1;
			size_t dl = colon ? (size_t)(colon - ports[i]) : strlen(ports[i]);

			if (dl == 0 || dl >= sizeof(dev)) {
				ret = -EINVAL;
				break;
			}
			memcpy(dev, ports[i], dl);
			dev[dl] = 0;
			ret = umad_port(dev, (unsigned)num);
			if (ret)
				fprintf(stderr, "cepd: %s: %s\n", ports[i], strerror(-ret));
		}
		if (!ret && !nports)
			ret = umad_all_ports();
#else
		ret = -EOPNOTSUPP;
#endif
	}
	if (!ret && !svc.nports)
		ret = -ENODEV;
	if (ret) {
		fprintf(stderr, "cepd: no port to serve: %s\n", strerror(-ret));
		return 1;
	}
	ret = listen_socket(path);
	if (ret) {
		fprintf(stderr, "cepd: %s: %s\n", path, strerror(-ret));
		return 1;
	}
	if (svc.verbose)
		logmsg("serving %u port(s) on %s", svc.nports, path);
	/* the listening socket does not block: take_connections drains it; a
	 * connection's first message carries its sender's credentials even
	 * when it comes before accept (identity.c reads them) */
	(void)fcntl(svc.lfd, F_SETFL, fcntl(svc.lfd, F_GETFL) | O_NONBLOCK);
	(void)setsockopt(svc.lfd, SOL_SOCKET, SO_PASSCRED, &(int){ 1 }, sizeof(int));
	spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	look_at = 0; /* no client pending yet */
	while (!atomic_load_explicit(&svc.stop, memory_order_relaxed)) {
		struct pollfd pf[3] = { { .fd = svc.lfd, .events = POLLIN },
					{ .fd = svc.sigpipe[0], .events = POLLIN },
					{ .fd = svc.pend_efd, .events = POLLIN } };
		int wait_ms = -1;
		int64_t t;

		if (look_at) {
			t = now_ms();
			wait_ms = t >= look_at ? 0 : (int)(look_at - t);
		}
		if (poll(pf, 3, wait_ms) < 0 && errno != EINTR)
			break;
		t = now_ms();
		if (pf[2].revents & POLLIN) {
			eventfd_t v;

			/* the pending list became non-empty: look in a while
			 * (a held event's successor usually sends it first) */
			(void)eventfd_read(svc.pend_efd, &v);
			if (!look_at)
				look_at = t + PEND_LOOK_MS;
		}
		if (look_at && t >= look_at) {
			int next = pend_look();

			look_at = next < 0 ? 0 : now_ms() + next;
		}
		if (pf[1].revents & POLLIN) {
			int sig = 0;

			while (read(svc.sigpipe[0], &sig, 1) == 1)
				if (sig == SIGHUP && config_path) {
					/* grants again; the limits stay as started */
					ret = config_load(config_path, false, stderr);
					logmsg("%s: %s", config_path,
					       ret ? strerror(-ret) : "grants read again");
				}
		}
		if (pf[0].revents & POLLIN)
			take_connections();
	}
	if (spare_fd >= 0)
		close(spare_fd);
	return shutdown_all();
}
