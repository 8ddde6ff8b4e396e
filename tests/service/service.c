/* SPDX-License-Identifier: MIT */
/*
 * cepd end to end (issue 18): a `cepd --fabric 2` on a private socket and
 * client processes attached with cep_cm_attach(), one per fabric port.
 * Scenarios (argv[2]):
 *   connect  - both ways, callback and channel ids, private data, a second
 *              client's listen on a listened service ID (-EADDRINUSE), the
 *              service's tables empty afterwards (cepd --stats)
 *   kill     - kill -9 of a server holding an established connection and
 *              an unanswered REQ: the peer gets DREQ_RECEIVED and
 *              REJ_RECEIVED at once; the dead client leaves nothing
 *   hostile  - a client speaking raw protocol: malformed, oversized and
 *              unknown requests, foreign handles and another client's QPN,
 *              a listen on another's service ID, CEPD_F_QUIET (no answer to
 *              a destroy or register that succeeded, one to one that
 *              failed, refused on other ops), a flood, then garbage: each refused,
 *              the others' connection unaffected
 *   stress   - four active and two passive client processes connect,
 *              disconnect, destroy QPs under bound connections and ids,
 *              while one of each kind is killed at a random moment: every
 *              survivor finishes, and cepd's tables end empty (stats)
 *   pcap     - connect with CEP_PCAP set for cepd: the file holds every
 *              MAD of the node (both ports), 15 distinct ones for the
 *              three connections (by attribute and TID: a retry on a
 *              loaded host repeats one, an MRA may answer it)
 *   nowait   - cm_qp_destroy_nowait (the drop-in's rdma_destroy_qp) of a
 *              QP with an established connection, cm_disconnect_nowait
 *              (its rdma_disconnect) of another: the peer gets both DREQs,
 *              the second's DREP comes back; cepd forgets the number
 *              before the next request (destroy and register 500 times in
 *              a row); its answers to refusals are no call's, and a
 *              refused disconnect leaves its id alone
 *   restart  - SIGTERM of cepd with a REQ in flight: calls fail with
 *              -ECONNRESET, the ids get their error events, destroy still
 *              works (no hang); a new cepd on the same socket serves again
 * Usage: test-service CEPD-PATH SCENARIO
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
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
#include <cep/pcap.h>

#include "../common/check.h"
#include "cm/cm_internal.h" /* cm_qp_destroy_nowait */
#include "service/proto.h"

#include "cepd_raw.h"
#include "cepd_test.h"

static const char *cepd_path;
static const char *max_ids = "65536"; /* cepd --max-ids */
static char sock_path[100];
static char dir_path[64];

/* ---- the service ---------------------------------------------------------- */

static pid_t start_cepd(void)
{
	char *const argv[] = { "cepd", "--fabric", "2", "--workers", "2", "--socket", sock_path,
			       "--max-ids", (char *)max_ids, NULL };

	return cepd_spawn(cepd_path, argv, sock_path, 500, "service");
}

/* The output of cepd --stats, or "" */
static void stats(char *out, size_t len)
{
	char cmd[512];
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

static long stat_field(const char *text, const char *line_start, const char *key)
{
	const char *l = strstr(text, line_start);
	const char *k;
	char pat[64];

	if (!l)
		return -1;
	snprintf(pat, sizeof(pat), " %s ", key);
	k = strstr(l, pat);
	if (!k || memchr(l, '\n', (size_t)(k - l)))
		return -1;
	return strtol(k + strlen(pat), NULL, 10);
}

/* Poll the stats until @pred holds (2 s). */
static int stats_until(int (*pred)(const char *, void *), void *arg, char *buf, size_t len)
{
	for (int i = 0; i < 100; i++) {
		stats(buf, len);
		if (pred(buf, arg))
			return 1;
		usleep(20000);
	}
	return 0;
}

/* ---- a client process's event log ------------------------------------------- */

#define MAXREC 512
struct rec {
	int type, status, taken;
	struct cep_cm_id *id, *listen_id;
	char pd[16];
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct rec r[MAXREC];
	int n;
	int accept;            /* answer REQs: 1 accept, 0 leave them pending */
	int lenient;           /* stress: a requester may be gone before the accept */
	int reqs;              /* REQs seen */
	uint32_t next_qpn;
	uint32_t qpn_end;      /* stress: registered below this; the next ones on demand */
	struct cep_cm *cm;     /* stress: the passive's context */
	struct cep_cm_channel *ch;
} lg = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .accept = 1 };

static void do_accept(struct cep_cm_id *id)
{
	struct cep_cm_accept_param p;

	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	pthread_mutex_lock(&lg.mu);
	p.qpn = lg.next_qpn++;
	pthread_mutex_unlock(&lg.mu);
	/* the stress's passive may take more requests than it registered
	 * QPs for (four requesters for 1.5 s each): one more, on demand */
	if (lg.qpn_end && p.qpn >= lg.qpn_end)
		CHECK_EQ(cep_cm_qp_register(lg.cm, p.qpn), 0);
	p.starting_psn = 1;
	p.responder_resources = 1;
	p.initiator_depth = 1;
	p.rnr_retry_count = 7;
	{
		int ret = cep_cm_accept(id, &p);

		/* in the stress, a REJ (requester gone, its QP destroyed) may
		 * have ended the request first: -EINVAL, as locally */
		if (!lg.lenient || ret != -EINVAL)
			CHECK_EQ(ret, 0);
	}
}

static void record(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	int answer = 0;

	pthread_mutex_lock(&lg.mu);
	if (lg.n < MAXREC) {
		struct rec *r = &lg.r[lg.n++];

		r->type = ev->type;
		r->status = ev->status;
		r->id = id;
		r->listen_id = ev->listen_id;
		r->taken = 0;
		memset(r->pd, 0, sizeof(r->pd));
		if (ev->private_data)
			memcpy(r->pd, ev->private_data,
			       ev->private_data_len < sizeof(r->pd) - 1 ? ev->private_data_len
									: sizeof(r->pd) - 1);
	}
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		lg.reqs++;
		answer = lg.accept;
	}
	pthread_cond_broadcast(&lg.cv);
	pthread_mutex_unlock(&lg.mu);
	if (answer)
		do_accept(id);
}

static int handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	record(id, ev);
	return 0;
}

/* Take channel events into the log (the test's thread). */
static void drain_channel(void)
{
	struct cep_cm_event *ev;

	while (lg.ch && cep_cm_get_event(lg.ch, &ev) == 0) {
		record(ev->id, ev);
		cep_cm_ack_event(ev);
	}
}

/* Wait (ms) for an event of @type about @id (NULL: any id) not taken yet;
 * the record, or NULL. */
static struct rec *wait_ev(int type, struct cep_cm_id *id, int ms)
{
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct rec *found = NULL;

		drain_channel();
		pthread_mutex_lock(&lg.mu);
		for (int i = 0; i < lg.n && !found; i++)
			if (!lg.r[i].taken && lg.r[i].type == type && (!id || lg.r[i].id == id))
				found = &lg.r[i];
		if (found)
			found->taken = 1;
		pthread_mutex_unlock(&lg.mu);
		if (found)
			return found;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			return NULL;
		if (lg.ch) {
			struct pollfd pf = { .fd = cep_cm_channel_fd(lg.ch), .events = POLLIN };

			poll(&pf, 1, 5);
		} else {
			usleep(2000);
		}
	}
}

static struct cep_cm *attach(unsigned port)
{
	struct cep_cm_attach_attr a = { .size = sizeof(a), .socket = sock_path, .port_num = port };
	struct cep_cm *cm = NULL;
	int ret = cep_cm_attach(&a, &cm);

	if (ret) {
		fprintf(stderr, "attach port %u: %s\n", port, strerror(-ret));
		exit(1);
	}
	return cm;
}

static struct cep_cm_id *new_id(struct cep_cm *cm, int channel)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia) };
	struct cep_cm_id *id = NULL;

	if (channel)
		ia.channel = lg.ch;
	else
		ia.handler = handler;
	CHECK_EQ(cep_cm_create_id(cm, &ia, &id), 0);
	return id;
}

static int connect_to(struct cep_cm_id *id, unsigned from, unsigned to, uint64_t sid, uint32_t qpn,
		      const char *pd)
{
	struct cep_cm_conn_param p;

	cepd_fabric_conn(&p, from, to, sid, qpn, 16); /* 268 ms per try */
	p.private_data = pd;
	p.private_data_len = pd ? strlen(pd) + 1 : 0;
	return cep_cm_connect(id, &p);
}

/* ---- processes and their pipes ------------------------------------------------ */

struct child {
	pid_t pid;
	int to, from;   /* parent's ends */
};

static int c_in = -1, c_out = -1; /* the child's ends */

static void say(char c)
{
	if (write(c_out, &c, 1) != 1)
		_exit(3);
}

static char hear(void)
{
	char c = 0;

	if (read(c_in, &c, 1) != 1)
		_exit(3);
	return c;
}

static struct child spawn(int (*fn)(void))
{
	int a[2], b[2];
	struct child ch;

	if (pipe(a) || pipe(b))
		exit(1);
	ch.pid = fork();
	if (ch.pid == 0) {
		close(a[1]);
		close(b[0]);
		c_in = a[0];
		c_out = b[1];
		_exit(fn());
	}
	close(a[0]);
	close(b[1]);
	ch.to = a[1];
	ch.from = b[0];
	return ch;
}

static void tell(struct child *c, char v)
{
	if (write(c->to, &v, 1) != 1)
		CHECK(!"tell");
}

/* The child's next word (10 s), or 0. */
static char expect(struct child *c)
{
	struct pollfd pf = { .fd = c->from, .events = POLLIN };
	char v = 0;

	if (poll(&pf, 1, 10000) == 1 && read(c->from, &v, 1) == 1)
		return v;
	return 0;
}

static int reap(struct child *c)
{
	int st = 0;

	for (int i = 0; i < 2000; i++) { /* 20 s */
		if (waitpid(c->pid, &st, WNOHANG) == c->pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	kill(c->pid, SIGKILL);
	waitpid(c->pid, &st, 0);
	return -1;
}

static int child_end(const char *name)
{
	return check_done(name);
}

/* ---- connect ------------------------------------------------------------------- */

static void register_qps(struct cep_cm *cm, uint32_t base, int n)
{
	for (int i = 0; i < n; i++)
		CHECK_EQ(cep_cm_qp_register(cm, base + (uint32_t)i), 0);
	lg.next_qpn = base;
}

/* Port 1's side of a scenario: @n QPs from @qpn, accepted in turn as
 * REQs come (lg.accept), and a callback listener on @sid. */
static struct cep_cm *listening_server(uint32_t qpn, int n, uint64_t sid)
{
	struct cep_cm *cm = attach(1);

	register_qps(cm, qpn, n);
	CHECK_EQ(cep_cm_listen(new_id(cm, 0), sid, ~0ull), 0);
	return cm;
}

/* port 1: listens on 0x1000 (callback) and 0x2000 (channel); connects to
 * the other's 0x3000 with a callback id. */
static int conn_server(void)
{
	struct cep_cm *cm = attach(1);
	struct cep_cm_id *l1, *l2, *a;
	struct rec *r;

	CHECK_EQ(cep_cm_channel_create(&lg.ch), 0);
	register_qps(cm, 0x100, 8);
	CHECK_EQ(cep_cm_qp_register(cm, 0x180), 0);
	l1 = new_id(cm, 0);
	l2 = new_id(cm, 1);
	CHECK_EQ(cep_cm_listen(l1, 0x1000, ~0ull), 0);
	CHECK_EQ(cep_cm_listen(l2, 0x2000, ~0ull), 0);
	CHECK_EQ(cep_cm_listen(l1, 0x1001, ~0ull), -EINVAL); /* a listener already */
	CHECK_EQ(cep_cm_id_state(l1), CEP_CM_LISTEN);
	say('r');
	hear();
	a = new_id(cm, 0);
	CHECK_EQ(connect_to(a, 1, 0, 0x3000, 0x180, "from-s"), 0);
	CHECK(wait_ev(CEP_CM_EV_ESTABLISHED, a, 5000) != NULL);
	/* the two the other side started */
	r = wait_ev(CEP_CM_EV_REQ_RECEIVED, NULL, 5000);
	CHECK(r && r->listen_id && !strcmp(r->pd, "from-c"));
	r = wait_ev(CEP_CM_EV_REQ_RECEIVED, NULL, 5000);
	CHECK(r && r->listen_id && !strcmp(r->pd, "from-c"));
	CHECK(wait_ev(CEP_CM_EV_RTU_RECEIVED, NULL, 5000) != NULL);
	CHECK(wait_ev(CEP_CM_EV_RTU_RECEIVED, NULL, 5000) != NULL);
	CHECK_EQ(cep_cm_id_state(a), CEP_CM_ESTABLISHED);
	CHECK(cep_cm_id_remote_comm_id(a) != 0);
	CHECK(cep_cm_id_local_comm_id(a) != 0);
	CHECK(cep_cm_id_cep(a) == NULL);
	CHECK(cep_cm_table(cm) == NULL);
	say('e');
	/* the other side disconnects its two; we ours */
	CHECK(wait_ev(CEP_CM_EV_DREQ_RECEIVED, NULL, 5000) != NULL);
	CHECK(wait_ev(CEP_CM_EV_DREQ_RECEIVED, NULL, 5000) != NULL);
	CHECK_EQ(cep_cm_disconnect(a, NULL, 0), 0);
	CHECK(wait_ev(CEP_CM_EV_DREP_RECEIVED, a, 5000) != NULL);
	hear();
	/* every id, passive ones included, ends with DESTROYED */
	pthread_mutex_lock(&lg.mu);
	int n = lg.n;
	struct cep_cm_id *ids[MAXREC];
	int nid = 0;

	for (int i = 0; i < n; i++)
		if (lg.r[i].type == CEP_CM_EV_REQ_RECEIVED)
			ids[nid++] = lg.r[i].id;
	pthread_mutex_unlock(&lg.mu);
	ids[nid++] = l1;
	ids[nid++] = l2;
	ids[nid++] = a;
	for (int i = 0; i < nid; i++)
		CHECK_EQ(cep_cm_destroy_id(ids[i]), 0);
	/* a channel id lives until its DESTROYED is acked (not yet) */
	CHECK_EQ(cep_cm_destroy_id(l2), -EALREADY);
	CHECK_EQ(cep_cm_listen(l2, 0x2001, ~0ull), -EINVAL);
	for (int i = 0; i < nid; i++)
		CHECK(wait_ev(CEP_CM_EV_DESTROYED, ids[i], 5000) != NULL);
	CHECK_EQ(cep_cm_channel_destroy(lg.ch), 0);
	lg.ch = NULL;
	for (int i = 0; i < 8; i++)
		CHECK_EQ(cep_cm_qp_destroy(cm, 0x100 + (uint32_t)i), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("conn-server");
}

static int conn_client(void)
{
	struct cep_cm *cm = attach(0), *cm1;
	struct cep_cm_id *l, *a1, *a2, *x;
	struct rec *r;

	CHECK_EQ(cep_cm_channel_create(&lg.ch), 0);
	register_qps(cm, 0x200, 8);
	CHECK_EQ(cep_cm_qp_register(cm, 0x280), 0);
	CHECK_EQ(cep_cm_qp_register(cm, 0x281), 0);
	CHECK_EQ(cep_cm_qp_register(cm, 0x280), -EEXIST);
	l = new_id(cm, 0);
	CHECK_EQ(cep_cm_listen(l, 0x3000, ~0ull), 0);
	/* a second client on port 1: the server's service ID is taken */
	cm1 = attach(1);
	x = new_id(cm1, 0);
	say('r');
	hear();
	CHECK_EQ(cep_cm_listen(x, 0x1000, ~0ull), -EADDRINUSE);
	CHECK_EQ(cep_cm_listen(x, 0x1002, ~0ull), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(x), 0);
	CHECK_EQ(cep_cm_destroy(cm1), 0);
	a1 = new_id(cm, 0);
	a2 = new_id(cm, 1);
	CHECK_EQ(connect_to(a1, 0, 1, 0x1000, 0x280, "from-c"), 0);
	CHECK_EQ(connect_to(a2, 0, 1, 0x2000, 0x281, "from-c"), 0);
	CHECK_EQ(connect_to(a2, 0, 1, 0x2000, 0x281, "from-c"), -EINVAL); /* not IDLE */
	r = wait_ev(CEP_CM_EV_REP_RECEIVED, a1, 5000);
	CHECK(r != NULL);
	CHECK(wait_ev(CEP_CM_EV_ESTABLISHED, a1, 5000) != NULL);
	CHECK(wait_ev(CEP_CM_EV_ESTABLISHED, a2, 5000) != NULL);
	r = wait_ev(CEP_CM_EV_REQ_RECEIVED, NULL, 5000);
	CHECK(r && r->listen_id == l && !strcmp(r->pd, "from-s"));
	CHECK(wait_ev(CEP_CM_EV_RTU_RECEIVED, NULL, 5000) != NULL);
	hear();
	CHECK_EQ(cep_cm_disconnect(a1, "bye", 4), 0);
	CHECK_EQ(cep_cm_disconnect(a2, NULL, 0), 0);
	CHECK(wait_ev(CEP_CM_EV_DREP_RECEIVED, a1, 5000) != NULL);
	CHECK(wait_ev(CEP_CM_EV_DREP_RECEIVED, a2, 5000) != NULL);
	CHECK(wait_ev(CEP_CM_EV_DREQ_RECEIVED, NULL, 5000) != NULL);
	say('d');
	hear();
	{
		struct cep_cm_id *ids[] = { l, a1, a2, r ? r->id : NULL };

		for (unsigned i = 0; i < 4; i++)
			if (ids[i])
				CHECK_EQ(cep_cm_destroy_id(ids[i]), 0);
		for (unsigned i = 0; i < 4; i++)
			if (ids[i])
				CHECK(wait_ev(CEP_CM_EV_DESTROYED, ids[i], 5000) != NULL);
	}
	CHECK_EQ(cep_cm_channel_destroy(lg.ch), 0);
	lg.ch = NULL;
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("conn-client");
}

static int no_clients(const char *s, void *arg)
{
	(void)arg;
	return strstr(s, "clients 0 ") &&
	       stat_field(s, "port 0", "ids") == 0 && stat_field(s, "port 1", "ids") == 0;
}

static void scenario_connect(void)
{
	struct child s = spawn(conn_server), c = spawn(conn_client);
	char buf[8192];

	CHECK_EQ(expect(&s), 'r');
	CHECK_EQ(expect(&c), 'r');
	tell(&c, 'g');
	tell(&s, 'g');
	CHECK_EQ(expect(&s), 'e');
	tell(&c, 'g');
	CHECK_EQ(expect(&c), 'd');
	tell(&s, 'g');
	tell(&c, 'g');
	CHECK_EQ(reap(&s), 0);
	CHECK_EQ(reap(&c), 0);
	CHECK(stats_until(no_clients, NULL, buf, sizeof(buf)));
	fputs(buf, stdout);
}

/* ---- a QP destroyed without waiting (cm_qp_destroy_nowait) ------------------------ */

/* port 1: accepts two connections, then must see both DREQs. */
static int nowait_server(void)
{
	struct cep_cm *cm = listening_server(0xc00, 2, 0x7000);

	say('r');
	CHECK(wait_ev(CEP_CM_EV_RTU_RECEIVED, NULL, 5000) != NULL);
	CHECK(wait_ev(CEP_CM_EV_RTU_RECEIVED, NULL, 5000) != NULL);
	/* the client's QP went, and its other connection was disconnected,
	 * without a wait: both teardowns are under way */
	CHECK(wait_ev(CEP_CM_EV_DREQ_RECEIVED, NULL, 5000) != NULL);
	CHECK(wait_ev(CEP_CM_EV_DREQ_RECEIVED, NULL, 5000) != NULL);
	hear();
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("nowait-server");
}

/* port 0: the drop-in's rdma_destroy_qp and rdma_disconnect paths. The
 * destroy does what cep_cm_qp_destroy does (the connection ends with a
 * DREQ), the disconnect what cep_cm_disconnect does (DREQ, then the
 * peer's DREP); cepd takes each before the next request of ours (a
 * register of the number right after its destroy succeeds, 500 times);
 * an answer it does send (a failure) is no call's answer, and a refused
 * disconnect leaves its id alone. */
static int nowait_client(void)
{
	struct cep_cm *cm = attach(0);
	struct cep_cm_id *a, *b, *unmade;

	register_qps(cm, 0xb00, 3);
	a = new_id(cm, 0);
	b = new_id(cm, 0);
	unmade = new_id(cm, 0);
	hear();
	CHECK_EQ(connect_to(a, 0, 1, 0x7000, 0xb00, NULL), 0);
	CHECK(wait_ev(CEP_CM_EV_ESTABLISHED, a, 5000) != NULL);
	CHECK_EQ(connect_to(b, 0, 1, 0x7000, 0xb02, NULL), 0);
	CHECK(wait_ev(CEP_CM_EV_ESTABLISHED, b, 5000) != NULL);
	CHECK_EQ(cm_disconnect_nowait(b), 0);
	CHECK(wait_ev(CEP_CM_EV_DREP_RECEIVED, b, 5000) != NULL);
	/* not connected now: cepd refuses it (answered, dropped), b stays */
	CHECK_EQ(cm_disconnect_nowait(b), 0);
	CHECK_EQ(cm_disconnect_nowait(unmade), -EINVAL); /* never in cepd */
	CHECK_EQ(cm_qp_destroy_nowait(cm, 0xb00), 0);
	CHECK(wait_ev(CEP_CM_EV_QP_DESTROYED, a, 5000) != NULL);
	CHECK_EQ(cep_cm_qp_register(cm, 0xb00), 0); /* forgotten by cepd */
	for (int i = 0; i < 500; i++) {
		CHECK_EQ(cm_qp_destroy_nowait(cm, 0xb01), 0);
		CHECK_EQ(cep_cm_qp_register(cm, 0xb01), 0);
	}
	CHECK_EQ(cm_qp_destroy_nowait(cm, 0xb01), 0);
	/* not registered now: cepd answers -ENOENT, which matches no call */
	CHECK_EQ(cm_qp_destroy_nowait(cm, 0xb01), 0);
	CHECK_EQ(cep_cm_qp_destroy(cm, 0xb01), -ENOENT);
	CHECK_EQ(cep_cm_qp_register(cm, 0xb01), 0);
	CHECK_EQ(cep_cm_qp_destroy(cm, 0xb01), 0);
	say('d');
	CHECK_EQ(cep_cm_destroy_id_sync(a), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(b), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(unmade), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("nowait-client");
}

static void scenario_nowait(void)
{
	struct child s = spawn(nowait_server), c = spawn(nowait_client);
	char buf[8192];

	CHECK_EQ(expect(&s), 'r');
	tell(&c, 'g');
	CHECK_EQ(expect(&c), 'd');
	tell(&s, 'g');
	CHECK_EQ(reap(&s), 0);
	CHECK_EQ(reap(&c), 0);
	CHECK(stats_until(no_clients, NULL, buf, sizeof(buf)));
}

/* ---- kill -9 ------------------------------------------------------------------- */

/* Accepts the first REQ, leaves the second unanswered, then waits to die. */
static int kill_server(void)
{
	(void)listening_server(0x300, 4, 0x4000); /* held until the kill */
	say('r');
	CHECK(wait_ev(CEP_CM_EV_RTU_RECEIVED, NULL, 5000) != NULL);
	pthread_mutex_lock(&lg.mu);
	lg.accept = 0;
	pthread_mutex_unlock(&lg.mu);
	say('e');
	for (int i = 0; i < 500; i++) {
		pthread_mutex_lock(&lg.mu);
		int n = lg.reqs;

		pthread_mutex_unlock(&lg.mu);
		if (n == 2)
			break;
		usleep(10000);
	}
	say('p');
	for (;;)
		pause(); /* until the kill */
	return 1;
}

static int kill_client(void)
{
	struct cep_cm *cm = attach(0);
	struct cep_cm_id *a, *b;
	struct rec *r;
	struct timespec t0, t1;

	register_qps(cm, 0x400, 4);
	hear();
	a = new_id(cm, 0);
	b = new_id(cm, 0);
	CHECK_EQ(connect_to(a, 0, 1, 0x4000, 0x400, NULL), 0);
	CHECK(wait_ev(CEP_CM_EV_ESTABLISHED, a, 5000) != NULL);
	hear();
	CHECK_EQ(connect_to(b, 0, 1, 0x4000, 0x401, NULL), 0);
	say('c');
	hear(); /* the server was killed */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(wait_ev(CEP_CM_EV_DREQ_RECEIVED, a, 3000) != NULL);
	r = wait_ev(CEP_CM_EV_REJ_RECEIVED, b, 3000);
	CHECK(r != NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* at once, not after the REQ's retries (4 x 268 ms) */
	CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 1000);
	CHECK_EQ(cep_cm_destroy_id_sync(a), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(b), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("kill-client");
}

struct gone_arg {
	pid_t pid;
};

static int client_gone(const char *s, void *arg)
{
	struct gone_arg *g = arg;
	char pat[32];

	snprintf(pat, sizeof(pat), " pid %d ", (int)g->pid);
	return !strstr(s, pat) && stat_field(s, "port 1", "ids") == 0;
}

static void scenario_kill(void)
{
	struct child s = spawn(kill_server), c = spawn(kill_client);
	struct gone_arg g = { s.pid };
	char buf[8192];

	CHECK_EQ(expect(&s), 'r');
	tell(&c, 'g');
	CHECK_EQ(expect(&s), 'e');
	tell(&c, 'g');
	CHECK_EQ(expect(&c), 'c');
	CHECK_EQ(expect(&s), 'p');
	stats(buf, sizeof(buf));
	CHECK(stat_field(buf, "port 1", "ids") >= 3); /* listener, two passive ids */
	kill(s.pid, SIGKILL);
	tell(&c, 'g');
	CHECK(stats_until(client_gone, &g, buf, sizeof(buf)));
	fputs(buf, stdout);
	CHECK_EQ(reap(&c), 0);
	CHECK_EQ(reap(&s), 128 + SIGKILL);
}

/* ---- hostile --------------------------------------------------------------------- */

static int raw_fd(unsigned port)
{
	int fd = cepd_raw_open(sock_path, port);

	return fd < 0 ? -1 : fd;
}

static int raw_call(int fd, const void *msg, size_t len, void *out, size_t outlen)
{
	return cepd_raw_call(fd, msg, len, out, outlen);
}

static int req(int fd, uint32_t op, uint32_t handle, uint32_t a, uint64_t x, void *out, size_t outlen)
{
	return cepd_raw_req(fd, op, handle, a, x, ~0ull, out, outlen);
}

static int hostile_server(void)
{
	struct cep_cm *cm = listening_server(0x500, 4, 0x6000);

	say('r');
	hear();
	CHECK(wait_ev(CEP_CM_EV_RTU_RECEIVED, NULL, 5000) != NULL);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("hostile-server");
}

static int hostile_client(void)
{
	struct cep_cm *cm = attach(0);
	struct cep_cm_id *a;

	register_qps(cm, 0x600, 4);
	a = new_id(cm, 0);
	say('r');
	hear(); /* the attack is over */
	CHECK_EQ(cep_cm_qp_register(cm, 0x700), 0); /* the one the attacker tried to take */
	CHECK_EQ(connect_to(a, 0, 1, 0x6000, 0x600, NULL), 0);
	CHECK(wait_ev(CEP_CM_EV_ESTABLISHED, a, 5000) != NULL);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("hostile-client");
}

static void scenario_hostile(void)
{
	struct child s = spawn(hostile_server), c = spawn(hostile_client);
	int h0, h1;
	struct cepd_id_rep idr;
	_Alignas(8) uint8_t big[CEPD_MSG_MAX + 64];
	struct cepd_req *q = (struct cepd_req *)big;
	char buf[8192];

	CHECK_EQ(expect(&s), 'r');
	CHECK_EQ(expect(&c), 'r');
	h0 = raw_fd(0);
	h1 = raw_fd(1);
	CHECK(h0 >= 0 && h1 >= 0);
	/* another client's QPN: not ours to register, destroy or bind */
	CHECK_EQ(req(h0, CEPD_QP_REGISTER, 0, 0x600, 0, NULL, 0), -EEXIST);
	CHECK_EQ(req(h0, CEPD_QP_DESTROY, 0, 0x600, 0, NULL, 0), -ENOENT);
	CHECK_EQ(req(h0, CEPD_QP_REGISTER, 0, 0x1000000, 0, NULL, 0), -EINVAL);
	{
		/* CEPD_F_QUIET: a destroy that succeeds is not answered, one
		 * that fails is; another op with the flag is refused */
		struct cepd_req qq;
		struct pollfd pf = { .fd = h0, .events = POLLIN };

		CHECK_EQ(req(h0, CEPD_QP_REGISTER, 0, 0x6f0, 0, NULL, 0), 0);
		memset(&qq, 0, sizeof(qq));
		qq.h.op = CEPD_QP_DESTROY;
		qq.h.len = sizeof(qq);
		qq.h.seq = 11;
		qq.flags = CEPD_F_QUIET;
		qq.a = 0x6f0;
		CHECK(send(h0, &qq, sizeof(qq), MSG_NOSIGNAL) == (ssize_t)sizeof(qq));
		CHECK_EQ(poll(&pf, 1, 300), 0);
		CHECK_EQ(raw_call(h0, &qq, sizeof(qq), NULL, 0), -ENOENT); /* gone now */
		qq.a = 0x600; /* another client's */
		CHECK_EQ(raw_call(h0, &qq, sizeof(qq), NULL, 0), -ENOENT);
		/* a quiet register (the drop-in's rdma_create_qp): done,
		 * not answered; refused, answered */
		qq.h.op = CEPD_QP_REGISTER;
		qq.a = 0x6f0;
		CHECK(send(h0, &qq, sizeof(qq), MSG_NOSIGNAL) == (ssize_t)sizeof(qq));
		CHECK_EQ(poll(&pf, 1, 300), 0);
		CHECK_EQ(raw_call(h0, &qq, sizeof(qq), NULL, 0), -EEXIST); /* ours already */
		qq.a = 0x600; /* another client's */
		CHECK_EQ(raw_call(h0, &qq, sizeof(qq), NULL, 0), -EEXIST);
		qq.h.op = CEPD_CM_STATS; /* quiet on an op that answers a payload */
		qq.a = 0;
		CHECK_EQ(raw_call(h0, &qq, sizeof(qq), NULL, 0), -EINVAL);
		qq.h.op = CEPD_QP_DESTROY;
		qq.a = 0x6f0;
		qq.flags = CEPD_F_QUIET | CEPD_F_CREATE;
		CHECK_EQ(raw_call(h0, &qq, sizeof(qq), NULL, 0), -EINVAL);
		CHECK_EQ(req(h0, CEPD_QP_DESTROY, 0, 0x6f0, 0, NULL, 0), 0); /* the quiet one's */
		CHECK_EQ(req(h0, CEPD_QP_REGISTER, 0, 0x6f0, 0, NULL, 0), 0);
		CHECK_EQ(req(h0, CEPD_QP_DESTROY, 0, 0x6f0, 0, NULL, 0), 0);
		/* a DESTROY_ID: of an id not ours, answered -EINVAL; of
		 * ours, not answered, and the id is gone */
		{
			struct cepd_id_rep mine;

			CHECK_EQ(req(h0, CEPD_CREATE_ID, 0, 0, 0, &mine, sizeof(mine)), 0);
			memset(&qq, 0, sizeof(qq));
			qq.h.op = CEPD_DESTROY_ID;
			qq.h.len = sizeof(qq);
			qq.h.seq = 12;
			qq.flags = CEPD_F_QUIET;
			qq.handle = mine.handle ^ (1u << 20); /* a stale generation */
			CHECK_EQ(raw_call(h0, &qq, sizeof(qq), NULL, 0), -EINVAL);
			qq.handle = mine.handle;
			CHECK(send(h0, &qq, sizeof(qq), MSG_NOSIGNAL) == (ssize_t)sizeof(qq));
			CHECK_EQ(poll(&pf, 1, 5000), 1); /* only its DESTROYED event */
			{
				_Alignas(8) uint8_t ev[CEPD_MSG_MAX];

				CHECK(recv(h0, ev, sizeof(ev), 0) > 0 &&
				      ((struct cepd_hdr *)ev)->op == CEPD_EVENTS);
			}
			CHECK_EQ(poll(&pf, 1, 300), 0);
			CHECK(req(h0, CEPD_ID_QUERY, mine.handle, 0, 0, NULL, 0) < 0);
			/* a DISCONNECT of an id not connected: refused, answered */
			CHECK_EQ(req(h0, CEPD_CREATE_ID, 0, 0, 0, &mine, sizeof(mine)), 0);
			qq.h.op = CEPD_DISCONNECT;
			qq.handle = mine.handle;
			CHECK_EQ(raw_call(h0, &qq, sizeof(qq), NULL, 0), -EINVAL);
			CHECK_EQ(req(h0, CEPD_DESTROY_ID, mine.handle, 0, 0, NULL, 0), 0);
		}
	}
	CHECK_EQ(req(h0, CEPD_CREATE_ID, 0, 0, 0, &idr, sizeof(idr)), 0);
	{
		struct {
			struct cepd_req q;
			struct cepd_conn w;
		} m;

		memset(&m, 0, sizeof(m));
		m.q.h.op = CEPD_CONNECT;
		m.q.h.len = sizeof(m);
		m.q.handle = idr.handle;
		m.w.qpn = 0x600;
		m.w.service_id = 0x6000;
		CHECK_EQ(raw_call(h0, &m, sizeof(m), NULL, 0), -ENOENT);
		m.q.handle = idr.handle ^ (1u << 20); /* a stale generation */
		CHECK_EQ(raw_call(h0, &m, sizeof(m), NULL, 0), -EINVAL);
	}
	/* handles that are not ours */
	for (uint32_t hnd = 0; hnd < 64; hnd++)
		if ((hnd | (1u << 20)) != idr.handle)
			CHECK_EQ(req(h0, CEPD_DESTROY_ID, hnd | (1u << 20), 0, 0, NULL, 0), -EINVAL);
	CHECK_EQ(req(h0, CEPD_ID_QUERY, 0xdeadbeef, 0, 0, NULL, 0), -EINVAL);
	/* another client's service ID (the server's listener on port 1) */
	CHECK_EQ(req(h1, CEPD_CREATE_ID, 0, 0, 0, &idr, sizeof(idr)), 0);
	CHECK_EQ(req(h1, CEPD_LISTEN, idr.handle, 0, 0x6000, NULL, 0), -EADDRINUSE);
	/* malformed */
	memset(big, 0, sizeof(big));
	q->h.op = CEPD_RTU;
	q->h.len = sizeof(*q) + 4; /* says more than comes */
	CHECK_EQ(raw_call(h0, q, sizeof(*q), NULL, 0), -EBADMSG);
	q->h.len = sizeof(*q);
	q->pd_len = 4; /* counts bytes that are not there */
	CHECK_EQ(raw_call(h0, q, sizeof(*q), NULL, 0), -EBADMSG);
	q->pd_len = 4000;
	q->h.len = (uint32_t)(sizeof(*q) + 4000);
	CHECK_EQ(raw_call(h0, q, sizeof(*q) + 4000, NULL, 0), -EMSGSIZE);
	q->pd_len = 0;
	q->h.op = 999;
	q->h.len = sizeof(*q);
	CHECK_EQ(raw_call(h0, q, sizeof(*q), NULL, 0), -EOPNOTSUPP);
	q->h.op = CEPD_HELLO;
	CHECK_EQ(raw_call(h0, q, sizeof(*q), NULL, 0), -EISCONN);
	q->h.op = CEPD_RTU;
	q->h.len = sizeof(big);
	CHECK_EQ(raw_call(h0, q, sizeof(big), NULL, 0), -EMSGSIZE); /* oversized */
	/* a flood of ids stops at the client's budget (--max-ids 64) */
	{
		int n = 0, ret;

		while ((ret = req(h0, CEPD_CREATE_ID, 0, 0, 0, &idr, sizeof(idr))) == 0 && n < 1000)
			n++;
		CHECK_EQ(ret, -EMFILE);
		CHECK(n < 64);
		for (n = 0; (ret = req(h0, CEPD_QP_REGISTER, 0, 0x20000 + (uint32_t)n, 0, NULL, 0)) == 0 &&
			    n < 1000;)
			n++;
		CHECK_EQ(ret, -EMFILE);
		CHECK_EQ(n, 64);
	}
	/* a flood of requests: each answered, the service keeps up */
	for (int i = 0; i < 20000; i++) {
		q->h.op = CEPD_ID_QUERY;
		q->h.len = sizeof(*q);
		q->handle = (uint32_t)i;
		if (send(h0, q, sizeof(*q), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			break;
	}
	/* garbage shorter than a header: that client is dropped */
	CHECK_EQ(raw_call(h1, "xy", 2, NULL, 0), 1);
	close(h0);
	close(h1);
	stats(buf, sizeof(buf));
	CHECK(stat_field(buf, "clients", "bad_messages") >= 6);
	tell(&c, 'g');
	tell(&s, 'g');
	CHECK_EQ(reap(&c), 0);
	CHECK_EQ(reap(&s), 0);
}

/* ---- stress ------------------------------------------------------------------------ */

struct sconn {
	_Atomic int est, ended, destroyed;
};

static int stress_cb(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	struct sconn *k = ev->context;

	switch (ev->type) {
	case CEP_CM_EV_ESTABLISHED:
		atomic_store(&k->est, 1);
		break;
	case CEP_CM_EV_REJ_RECEIVED: case CEP_CM_EV_REQ_ERROR: case CEP_CM_EV_REP_ERROR:
	case CEP_CM_EV_QP_DESTROYED: case CEP_CM_EV_DREQ_RECEIVED:
		atomic_store(&k->ended, 1);
		break;
	case CEP_CM_EV_DESTROYED:
		atomic_store(&k->destroyed, 1);
		break;
	default:
		break;
	}
	return 0;
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static unsigned stress_slot; /* set by the parent before it spawns a passive */

static int stress_passive(void)
{
	struct cep_cm *cm = attach(1);
	struct cep_cm_id *l;
	uint64_t sid = 0x8000 + (uint64_t)(getpid() & 1);
	uint32_t base = 0x10000 + stress_slot * 0x40000; /* the passives' QPNs apart */

	lg.lenient = 1;
	register_qps(cm, base, 4096);
	lg.qpn_end = base + 4096;
	lg.cm = cm;
	l = new_id(cm, 0);
	if (cep_cm_listen(l, sid, ~0ull)) /* the other passive may have it */
		CHECK_EQ(cep_cm_listen(l, sid ^ 1, ~0ull), 0);
	say('r');
	hear();
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("stress-passive");
}

static int stress_active(void)
{
	struct cep_cm *cm = attach(0);
	uint32_t base = 0x100000 + (uint32_t)(getpid() % 97) * 0x1000, i;
	double t0;
	unsigned seed = (unsigned)getpid(), ok = 0;

	say('r');
	hear();
	t0 = now_ms();
	for (i = 0; now_ms() - t0 < 1500 && i < 0x1000; i++) {
		struct sconn *k = calloc(1, sizeof(*k));
		struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = stress_cb, .context = k };
		struct cep_cm_id *id = NULL;
		uint32_t qpn = base + i;
		int qp_gone = 0;
		double t;

		CHECK_EQ(cep_cm_qp_register(cm, qpn), 0);
		CHECK_EQ(cep_cm_create_id(cm, &ia, &id), 0);
		if (!id)
			break;
		if (connect_to(id, 0, 1, 0x8000 + (rand_r(&seed) & 1), qpn, NULL) == 0) {
			for (t = now_ms(); now_ms() - t < 2000 && !atomic_load(&k->est) &&
			     !atomic_load(&k->ended);)
				usleep(200);
			ok += atomic_load(&k->est);
			switch (rand_r(&seed) % 3) {
			case 0: /* the QP goes while the connection is bound to it */
				CHECK_EQ(cep_cm_qp_destroy(cm, qpn), 0);
				qp_gone = 1;
				break;
			case 1:
				(void)cep_cm_disconnect(id, NULL, 0);
				break;
			default: /* destroy as it is */
				break;
			}
		}
		CHECK_EQ(cep_cm_destroy_id(id), 0);
		for (t = now_ms(); now_ms() - t < 5000 && !atomic_load(&k->destroyed);)
			usleep(200);
		CHECK(atomic_load(&k->destroyed));
		if (!qp_gone)
			CHECK_EQ(cep_cm_qp_destroy(cm, qpn), 0);
		free(k);
	}
	printf("stress-active %d: %u connections, %u established\n", (int)getpid(), i, ok);
	CHECK(ok > 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("stress-active");
}

static int tables_empty(const char *s, void *arg)
{
	(void)arg;
	return strstr(s, "clients 0 ") && stat_field(s, "port 0", "ids") == 0 &&
	       stat_field(s, "port 1", "ids") == 0;
}

static void scenario_stress(void)
{
	struct child p[2], a[4];
	unsigned seed = (unsigned)time(NULL);
	char buf[8192];

	for (int i = 0; i < 2; i++) {
		stress_slot = (unsigned)i;
		p[i] = spawn(stress_passive);
		CHECK_EQ(expect(&p[i]), 'r');
	}
	for (int i = 0; i < 4; i++) {
		a[i] = spawn(stress_active);
		CHECK_EQ(expect(&a[i]), 'r');
	}
	for (int i = 0; i < 4; i++)
		tell(&a[i], 'g');
	usleep(200000 + (useconds_t)(rand_r(&seed) % 800) * 1000);
	kill(a[3].pid, SIGKILL);
	usleep((useconds_t)(rand_r(&seed) % 300) * 1000);
	kill(p[1].pid, SIGKILL); /* its listener's clients get REJ from here */
	for (int i = 0; i < 3; i++)
		CHECK_EQ(reap(&a[i]), 0);
	CHECK_EQ(reap(&a[3]), 128 + SIGKILL);
	tell(&p[0], 'g');
	CHECK_EQ(reap(&p[0]), 0);
	CHECK_EQ(reap(&p[1]), 128 + SIGKILL);
	CHECK(stats_until(tables_empty, NULL, buf, sizeof(buf)));
	fputs(buf, stdout);
}

/* ---- restart ---------------------------------------------------------------------- */

static int restart_server(void)
{
	struct cep_cm *cm = attach(1);
	struct cep_cm_id *l;
	struct rec *r;

	register_qps(cm, 0x800, 2);
	lg.accept = 0;
	l = new_id(cm, 0);
	CHECK_EQ(cep_cm_listen(l, 0x7000, ~0ull), 0);
	say('r');
	r = wait_ev(CEP_CM_EV_REQ_RECEIVED, NULL, 5000);
	CHECK(r != NULL);
	say('q');
	/* the service goes: the unanswered request's id learns it */
	if (r) {
		struct rec *e = wait_ev(CEP_CM_EV_REQ_ERROR, r->id, 5000);

		CHECK(e && e->status == -ECONNRESET);
		CHECK_EQ(cep_cm_accept(r->id, &(struct cep_cm_accept_param){ .size = sizeof(struct cep_cm_accept_param), .qpn = 0x800 }), -ECONNRESET);
		CHECK_EQ(cep_cm_destroy_id(r->id), 0);
		CHECK(wait_ev(CEP_CM_EV_DESTROYED, r->id, 2000) != NULL);
	}
	CHECK_EQ(cep_cm_destroy_id(l), 0);
	CHECK(wait_ev(CEP_CM_EV_DESTROYED, l, 2000) != NULL);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("restart-server");
}

static int restart_client(void)
{
	struct cep_cm *cm = attach(0);
	struct cep_cm_id *a, *x = NULL;
	struct cep_cm_stats st = { .size = sizeof(st) };
	struct rec *e;

	CHECK_EQ(cep_cm_channel_create(&lg.ch), 0);
	register_qps(cm, 0x900, 2);
	a = new_id(cm, 1);
	hear();
	CHECK_EQ(connect_to(a, 0, 1, 0x7000, 0x900, NULL), 0);
	hear(); /* the service was stopped */
	e = wait_ev(CEP_CM_EV_REQ_ERROR, a, 5000);
	CHECK(e && e->status == -ECONNRESET);
	CHECK_EQ(cep_cm_create_id(cm, &(struct cep_cm_id_attr){ .size = sizeof(struct cep_cm_id_attr), .handler = handler }, &x), -ECONNRESET);
	CHECK_EQ(cep_cm_qp_register(cm, 0x901 + 5), -ECONNRESET);
	CHECK_EQ(cep_cm_get_stats(cm, &st), -ECONNRESET);
	CHECK_EQ(cep_cm_destroy_id(a), 0);
	CHECK(wait_ev(CEP_CM_EV_DESTROYED, a, 2000) != NULL);
	CHECK_EQ(cep_cm_channel_destroy(lg.ch), 0);
	lg.ch = NULL;
	CHECK_EQ(cep_cm_destroy(cm), 0);
	say('x');
	hear(); /* a new service runs */
	cm = attach(0);
	CHECK_EQ(cep_cm_qp_register(cm, 0x900), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	return child_end("restart-client");
}

static void scenario_restart(pid_t *cepd)
{
	struct child s = spawn(restart_server), c = spawn(restart_client);
	int st;

	CHECK_EQ(expect(&s), 'r');
	tell(&c, 'g');
	CHECK_EQ(expect(&s), 'q');
	kill(*cepd, SIGTERM);
	CHECK_EQ(waitpid(*cepd, &st, 0), *cepd);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	tell(&c, 'g');
	CHECK_EQ(expect(&c), 'x');
	*cepd = start_cepd();
	tell(&c, 'g');
	CHECK_EQ(reap(&s), 0);
	CHECK_EQ(reap(&c), 0);
}

/* What a capture of cepd holds: its records, and the distinct MADs among
 * them by attribute, TID and sender's comm ID (every CM message's first
 * field; two senders' TIDs may meet) of each CM attribute (a retry repeats
 * all three; the answer to a repeated REQ is an MRA or the earlier answer
 * again). */
struct pcap_tally {
	long records, mras, other;
	int distinct[8]; /* REQ, REP, RTU, DREQ, DREP by attribute - 0x10 (MRA not counted) */
};

static int pcap_tally(const char *path, struct pcap_tally *t)
{
	FILE *f = fopen(path, "rb");
	uint8_t hdr[24], rec[16], frame[4096];
	struct { uint16_t attr; uint32_t comm; uint64_t tid; } seen[256];
	unsigned nseen = 0;
	uint32_t link;
	size_t trailer;

	memset(t, 0, sizeof(*t));
	if (!f)
		return -1;
	if (fread(hdr, 1, sizeof(hdr), f) != sizeof(hdr)) {
		fclose(f);
		return -1;
	}
	link = (uint32_t)hdr[20] | (uint32_t)hdr[21] << 8 | (uint32_t)hdr[22] << 16 |
	       (uint32_t)hdr[23] << 24;
	trailer = link == CEP_PCAP_INFINIBAND ? 6 : 4; /* ICRC, and VCRC on IB */
	while (fread(rec, 1, sizeof(rec), f) == sizeof(rec)) {
		uint32_t incl = (uint32_t)rec[8] | (uint32_t)rec[9] << 8 | (uint32_t)rec[10] << 16 |
				(uint32_t)rec[11] << 24; /* written little-endian here */
		const uint8_t *mad;
		uint16_t attr;
		uint32_t comm;
		uint64_t tid = 0;
		unsigned i;

		if (incl > sizeof(frame) || incl < CEP_MAD_SIZE + trailer ||
		    fread(frame, 1, incl, f) != incl)
			break;
		t->records++;
		mad = frame + incl - trailer - CEP_MAD_SIZE; /* a CM MAD is 256 bytes */
		if (mad[1] != 0x07) {
			t->other++;
			continue;
		}
		attr = (uint16_t)(mad[16] << 8 | mad[17]);
		for (i = 0; i < 8; i++)
			tid = tid << 8 | mad[8 + i];
		comm = (uint32_t)mad[24] << 24 | (uint32_t)mad[25] << 16 | (uint32_t)mad[26] << 8 | mad[27];
		if (attr == 0x11) {
			t->mras++;
			continue;
		}
		for (i = 0; i < nseen && (seen[i].attr != attr || seen[i].tid != tid ||
					  seen[i].comm != comm); i++)
			;
		if (i < nseen)
			continue; /* a retry */
		if (nseen < 256) {
			seen[nseen].attr = attr;
			seen[nseen].comm = comm;
			seen[nseen++].tid = tid;
		}
		if (attr >= 0x10 && attr < 0x18)
			t->distinct[attr - 0x10]++;
		else
			t->other++;
	}
	fclose(f);
	return 0;
}

/* ---- idle: no wake-ups without work --------------------------------------- */

/* Context switches of every thread of @pid so far (voluntary and not), or
 * -1. */
static long proc_switches(pid_t pid)
{
	char path[64];
	DIR *d;
	struct dirent *e;
	long sum = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char f[384], line[128];
		FILE *fp;

		if (e->d_name[0] == '.')
			continue;
		snprintf(f, sizeof(f), "%s/%s/status", path, e->d_name);
		fp = fopen(f, "r");
		if (!fp)
			continue; /* a thread that just ended */
		while (fgets(line, sizeof(line), fp)) {
			long v;

			if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
			    sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
				sum += v;
		}
		fclose(fp);
	}
	closedir(d);
	return sum;
}

/* Clients that say HELLO and then nothing (and one that never says it)
 * cost cepd no wake-up while nothing happens: each client's thread sleeps
 * until its socket has something (a request, the end) or, before HELLO,
 * the HELLO deadline. A thread that looked every 100 ms (cepd's receive
 * timeout before) is 10 wake-ups a second per client. Then cepd still
 * answers each of them at once. */
static void scenario_idle(pid_t cepd)
{
	enum { N = 4 };
	int fd[N], mute;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	long before, after, alone;

	/* cepd's own wake-ups without clients (its workers' timers; under
	 * TSan its runtime's background thread): the baseline */
	usleep(300 * 1000);
	before = proc_switches(cepd);
	usleep(1000 * 1000);
	alone = proc_switches(cepd) - before;
	for (int i = 0; i < N; i++) {
		fd[i] = cepd_raw_open(sock_path, 0);
		CHECK(fd[i] >= 0);
	}
	/* connected, no HELLO: dropped at hello-timeout-ms (5 s), not before */
	mute = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	CHECK_EQ(connect(mute, (struct sockaddr *)&sa, sizeof(sa)), 0);
	usleep(300 * 1000); /* cepd's start-up and the HELLOs settle */
	before = proc_switches(cepd);
	usleep(1000 * 1000);
	after = proc_switches(cepd);
	printf("idle: cepd switched %ld times in 1 s alone, %ld with %d quiet clients\n", alone,
	       after - before, N + 1);
	CHECK(before >= 0 && after >= before && alone >= 0);
	/* the baseline's own spread is a few; 5 clients' threads looking
	 * every 100 ms would be 50 more */
	CHECK(after - before <= alone + 8);
	for (int i = 0; i < N; i++) {
		struct cepd_hdr q = { .op = CEPD_HELLO, .len = sizeof(q), .seq = 7 };
		_Alignas(8) uint8_t buf[256];
		struct pollfd p = { .fd = fd[i], .events = POLLIN };
		ssize_t n;

		/* a second HELLO is answered -EISCONN: the thread is there */
		CHECK_EQ(send(fd[i], &q, sizeof(q), 0), (ssize_t)sizeof(q));
		CHECK_EQ(poll(&p, 1, 5000), 1);
		n = recv(fd[i], buf, sizeof(buf), 0);
		CHECK(n >= (ssize_t)sizeof(struct cepd_rep));
		if (n >= (ssize_t)sizeof(struct cepd_rep)) {
			CHECK_EQ(((struct cepd_rep *)buf)->h.seq, (uint64_t)7);
			CHECK_EQ(((struct cepd_rep *)buf)->ret, -EISCONN);
		}
		close(fd[i]);
	}
	close(mute);
}

/* ---- full: a client's socket full, then read ------------------------------ */

/* A raw client listens, then pipelines requests without reading their
 * answers until cepd's side of its socket is full (cepd's thread for it
 * waits in the send of an answer), and N requests reach its listener
 * meanwhile: their REQ_RECEIVED find the socket full and wait in cepd's
 * queue. Once the client reads, every answer and every REQ_RECEIVED
 * arrive without the client sending anything more: the main thread's
 * look at pending clients sends what the full socket held. */
static void scenario_full(void)
{
	enum { N = 100, MAXQ = 200000 };
	const uint64_t sid = 0xf011;
	struct cepd_id_rep idr = { 0 };
	struct cep_cm_id *ids[N];
	struct cep_cm *a;
	int fd = cepd_raw_open(sock_path, 0), got = 0, replies = 0, sent = 0;
	static _Alignas(8) uint8_t buf[CEPD_MSG_MAX];
	struct cepd_req q;
	struct timespec t0, t;

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK_EQ(cepd_raw_req(fd, CEPD_CREATE_ID, 0, 0, 0, 0, &idr, sizeof(idr)), 0);
	CHECK_EQ(cepd_raw_req(fd, CEPD_LISTEN, idr.handle, 4096, sid, ~0ull, NULL, 0), 0);
	memset(&q, 0, sizeof(q));
	q.h.op = CEPD_ID_QUERY;
	q.h.len = sizeof(q);
	q.handle = idr.handle;
	/* pipeline until nothing more goes for 300 ms: cepd stopped reading */
	while (sent < MAXQ) {
		struct pollfd pf = { .fd = fd, .events = POLLOUT };

		q.h.seq = (uint64_t)sent + 100;
		if (send(fd, &q, sizeof(q), MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(q)) {
			sent++;
			continue;
		}
		if (errno != EAGAIN || poll(&pf, 1, 300) != 1)
			break;
	}
	printf("full: %d requests pipelined before cepd's side filled\n", sent);
	CHECK(sent > 0 && sent < MAXQ);
	a = attach(1);
	for (int i = 0; i < N; i++) {
		ids[i] = new_id(a, 0);
		CHECK_EQ(cep_cm_qp_register(a, 0x3000 + (uint32_t)i), 0);
		CHECK_EQ(connect_to(ids[i], 1, 0, sid, 0x3000 + (uint32_t)i, NULL), 0);
	}
	usleep(500 * 1000); /* the REQs arrive and wait in cepd's queue */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	t = t0;
	while ((got < N || replies < sent) && t.tv_sec - t0.tv_sec < 20) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&pf, 1, 1000) == 1 && (n = recv(fd, buf, sizeof(buf), 0)) > 0) {
			const struct cepd_hdr *h = (const void *)buf;

			replies += h->op == CEPD_REPLY;
			for (size_t off = sizeof(struct cepd_events), k = 0;
			     h->op == CEPD_EVENTS && k < ((struct cepd_events *)buf)->count &&
			     off + sizeof(struct cepd_ev) <= (size_t)n; k++) {
				const struct cepd_ev *e = (const void *)(buf + off);

				got += e->type == CEP_CM_EV_REQ_RECEIVED &&
				       e->listen_handle == idr.handle;
				off += e->len ? e->len : (size_t)n;
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	}
	printf("full: %d REQ_RECEIVED of %d, %d answers of %d\n", got, N, replies, sent);
	CHECK_EQ(got, N);
	CHECK_EQ(replies, sent);
	close(fd);
	for (int i = 0; i < N; i++)
		(void)cep_cm_destroy_id(ids[i]);
	CHECK_EQ(cep_cm_destroy(a), 0);
}

int main(int argc, char **argv)
{
	pid_t cepd;
	int st;
	char pcap[128] = "";

	if (argc != 3) {
		fprintf(stderr, "usage: %s CEPD SCENARIO\n", argv[0]);
		return 2;
	}
	cepd_path = argv[1];
	snprintf(dir_path, sizeof(dir_path), "/tmp/cepd-test-XXXXXX");
	if (!mkdtemp(dir_path))
		return 1;
	snprintf(sock_path, sizeof(sock_path), "%s/cepd.sock", dir_path);
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(argv[2], "hostile"))
		max_ids = "64";
	if (!strcmp(argv[2], "pcap")) { /* for cepd only, not its clients */
		snprintf(pcap, sizeof(pcap), "%s/node.pcap", dir_path);
		setenv("CEP_PCAP", pcap, 1);
	}
	cepd = start_cepd();
	unsetenv("CEP_PCAP");
	if (!strcmp(argv[2], "connect") || !strcmp(argv[2], "pcap"))
		scenario_connect();
	else if (!strcmp(argv[2], "kill"))
		scenario_kill();
	else if (!strcmp(argv[2], "hostile"))
		scenario_hostile();
	else if (!strcmp(argv[2], "restart"))
		scenario_restart(&cepd);
	else if (!strcmp(argv[2], "stress"))
		scenario_stress();
	else if (!strcmp(argv[2], "nowait"))
		scenario_nowait();
	else if (!strcmp(argv[2], "idle"))
		scenario_idle(cepd);
	else if (!strcmp(argv[2], "full"))
		scenario_full();
	else {
		fprintf(stderr, "unknown scenario %s\n", argv[2]);
		kill(cepd, SIGKILL);
		return 2;
	}
	kill(cepd, SIGTERM);
	if (waitpid(cepd, &st, 0) != cepd || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "cepd did not stop cleanly (status %#x)\n", st);
		check_failures++;
	}
	if (pcap[0]) {
		struct pcap_tally t;

		/* REQ, REP, RTU, DREQ, DREP for each of three connections: 15
		 * MADs; on a loaded host a try may time out (268 ms), and its
		 * retry, or the MRA that answers a repeated REQ, is one more
		 * record of the same MAD, nothing else */
		CHECK_EQ(pcap_tally(pcap, &t), 0);
		printf("pcap: %ld records, %ld MRAs\n", t.records, t.mras);
		CHECK(t.records >= 15);
		CHECK_EQ(t.other, 0);
		CHECK_EQ(t.distinct[0x10 - 0x10], 3); /* REQ */
		CHECK_EQ(t.distinct[0x13 - 0x10], 3); /* REP */
		CHECK_EQ(t.distinct[0x14 - 0x10], 3); /* RTU */
		CHECK_EQ(t.distinct[0x15 - 0x10], 3); /* DREQ */
		CHECK_EQ(t.distinct[0x16 - 0x10], 3); /* DREP */
		CHECK_EQ(t.distinct[0x12 - 0x10], 0); /* no REJ */
		unlink(pcap);
	}
	unlink(sock_path);
	rmdir(dir_path);
	return check_done(argv[2]);
}
