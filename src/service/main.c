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
 * client); the CM workers run the engine's callbacks (events.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef CEPD_HAVE_UMAD
#include <cep/umad.h>
#include <cep/verbs.h>
#include <infiniband/verbs.h>
#endif
#ifdef CEPD_HAVE_SD_LISTEN
#include "service/sd_listen.h"
#endif
#include "service/cepd.h"

struct svc svc = { .max_ids = 65536, .lk = PTHREAD_MUTEX_INITIALIZER, .lfd = -1,
		    .sigpipe = { -1, -1 } };

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
 * it, or destroy the transport and leave the slot free. */
static int port_start(struct port *p)
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
		ret = cep_cm_create(&ca, &p->cm);
	if (ret) {
		p->tp->ops->destroy(p->tp);
		return ret;
	}
	svc.nports++;
	return 0;
}

static int fabric_ports(unsigned n)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	int ret = cep_fabric_create(&fa, &svc.fab);

	if (ret)
		return ret;
	for (unsigned i = 0; i < n; i++) {
		struct cep_fabric_port_attr pa = {
			.size = sizeof(pa), .ca_guid = 0x0002c90300a00000ull + i,
			.lid = (uint16_t)(i + 1), .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB,
		};
		struct port *p = &svc.port[svc.nports];

		ret = cep_fabric_port_create(svc.fab, &pa, &p->tp);
		if (ret)
			return ret;
		p->port_num = 1;
		ret = port_start(p);
		if (ret)
			return ret;
	}
	return 0;
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
	return port_start(p);
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
	if (listen(fd, 128)) {
		int e = -errno;

		close(fd);
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

	svc.stop = 1;
	if (svc.sigpipe[1] >= 0)
		(void)!write(svc.sigpipe[1], &sig, 1);
	errno = e;
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
	/* every client's thread ends and its ids' DESTROYED come back (5 s
	 * at most): then no sid is left for cep_cm_destroy to drop */
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
	}
	if (svc.fab)
		(void)cep_fabric_destroy(svc.fab);
	return status;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cepd [--socket PATH] [--port DEV:PORT]... [--fabric N] [--workers N]\n"
		"            [--max-ids N] [--check] [-v]\n"
		"       cepd --stats [--socket PATH]\n"
		"Serve libcep's connection manager to the processes of this node.\n"
		"  --socket PATH  listen here (default $CEP_SERVICE, else %s)\n"
		"  --port DEV:PORT  own this RDMA port's CM class (repeatable;\n"
		"                 default: every active port)\n"
		"  --fabric N     an in-process fabric of N ports instead (tests, benchmarks)\n"
		"  --workers N    CM workers per port (default: online CPUs)\n"
		"  --max-ids N    ids (and QPs) one client may hold (default 65536)\n"
		"  --stats        print a running service's statistics and exit\n"
		"  --check        at exit, check the CM tables (tests): exit 1 if wrong\n"
		"  -v             log clients coming and going\n", CEPD_DEFAULT_SOCKET);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "port", required_argument, NULL, 'p' },
		{ "fabric", required_argument, NULL, 'f' },
		{ "workers", required_argument, NULL, 'w' },
		{ "max-ids", required_argument, NULL, 'm' },
		{ "stats", no_argument, NULL, 'S' },
		{ "check", no_argument, NULL, 'C' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL;
	const char *ports[MAX_PORTS];
	unsigned nports = 0;
	long fabric = 0;
	int stats = 0, o, ret = 0;
	struct sigaction sa;

	while ((o = getopt_long(argc, argv, "s:p:f:w:m:SCvh", opts, NULL)) != -1) {
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
		case 'w': svc.workers = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'm': {
			unsigned long v = strtoul(optarg, NULL, 0);

			if (v < 1 || v > HANDLE_IDX_MASK + 1) {
				fprintf(stderr, "cepd: --max-ids takes 1..%u\n", HANDLE_IDX_MASK + 1);
				return 2;
			}
			svc.max_ids = (uint32_t)v;
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
	if (fabric && nports) {
		fprintf(stderr, "cepd: --fabric and --port exclude each other\n");
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
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (fabric)
		ret = fabric_ports((unsigned)fabric);
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
	while (!svc.stop) {
		struct pollfd pf[2] = { { .fd = svc.lfd, .events = POLLIN },
					{ .fd = svc.sigpipe[0], .events = POLLIN } };

		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[0].revents & POLLIN)
			accept_client();
	}
	return shutdown_all();
}
