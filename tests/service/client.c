/* SPDX-License-Identifier: MIT */
/*
 * The cepd client (src/service/remote.c) where the service misbehaves or the
 * application races it (issue 26). Most cases talk to a fake cepd: a
 * Unix SOCK_SEQPACKET socket of this process served by threads of this
 * test in the protocol of src/service/proto.h, which answers every
 * request with 0 (and makes a handle for CEPD_F_CREATE) and can be
 * scripted to die at an exact message, never answer the HELLO, or never
 * accept. One case runs a real `cepd --fabric 2`.
 *
 *   destroyed-after-death   cepd dies after it did DESTROY_IDs, before the
 *                           DESTROYED events (and with a DESTROY_ID in
 *                           flight): each destroyed id gets DESTROYED
 *                           exactly once, made here; the channel can then
 *                           be destroyed (cep_cm(3): "nothing waits for
 *                           ever").
 *   destroy-refused         a DESTROY_ID goes quiet (no round trip: the
 *                           service answers only a failure) and one the
 *                           service refuses ends its id here: its DESTROYED
 *                           made once, cep_cm_destroy_id_sync returns at
 *                           once; one it does (no answer) ends with the
 *                           service's DESTROYED, as always.
 *   destroy-quiet           cep_cm_destroy while a callback runs and an
 *                           event waits behind it, with ids in REQ_SENT,
 *                           REP_SENT and ESTABLISHED: no event is delivered
 *                           once the destroy has begun (cep_cm(3): "No
 *                           event is delivered in the process").
 *   destroy-quiet-cepd      the same through a real cepd: B, established
 *                           with A, destroys its context: no event at B, a
 *                           DREQ at A.
 *   mc-cepd                 InfiniBand multicast's MC_JOIN / MC_LEAVE /
 *                           MC_BCAST (cmr_mc) through a real cepd: every
 *                           refusal of access_mc, the fabric's EOPNOTSUPP
 *                           (no SA), a leave of nothing held; the
 *                           client's own checks.
 *   call-event              on a drop-in context a thread in a call reads an
 *                           event it may not run: it does not wake itself
 *                           for it (one drain until the reply), and the
 *                           thread waiting for events runs it once the
 *                           call has returned.
 *   nowait-cepd             an accept and an RTU sent without waiting
 *                           (cm_accept_nowait, cm_rtu_nowait: the drop-in's
 *                           rdma_accept and RTU) through a real cepd: they
 *                           return while cepd is stopped; any other phase
 *                           is a call; a refused accept is the id's
 *                           REP_ERROR and the peer's REJ at once; a
 *                           refused RTU adds no event.
 *   path-cepd               a PathRecord query (cmr_path_query) through a
 *                           real cepd: every refusal of access_path, the
 *                           fabric's EOPNOTSUPP.
 *   quiet-order-cepd        four threads' quiet registers and destroys and
 *                           calls through a real cepd: no call overtakes
 *                           a quiet request its thread gave before it.
 *   register-refused        a register sent without a round trip that the
 *                           service refuses: its error is the next connect's
 *                           or accept's naming the QP, once.
 *   quiet-batch             a burst of quiet QP_DESTROYs and DESTROY_IDs
 *                           leaves in batches (sendmmsg), in order, before
 *                           the call that follows; one with nothing after
 *                           it leaves by the reader's timer.
 *   destroy-race            two cep_cm_destroy of one context: exactly one
 *                           0, the other -EINVAL, as two on a local
 *                           context (cm.h: "cep_cm_destroy() of a context
 *                           that is not live ... is -EINVAL"); first held
 *                           in the window between cm.c's live check and
 *                           the decision (CMR_HOOK_DESTROY), then raced
 *                           freely for TSan.
 *   attach-timeout-hello    a service that takes the connection and never
 *                           answers the HELLO: -ETIMEDOUT after timeout_ms.
 *   attach-timeout-backlog  a service whose accept backlog is full: the
 *                           same.
 *   attach-timeout-default  a caller whose struct ends before timeout_ms:
 *                           the default, 10 s.
 *   hello-identity          the HELLO's control messages: SCM_CREDENTIALS
 *                           (our pid, euid, egid), then SCM_RIGHTS with
 *                           one pidfd of this process; the client keeps no
 *                           pidfd open.
 *   hello-nopidfd           where pidfd_open is ENOSYS (a seccomp filter
 *                           in a child): credentials, no SCM_RIGHTS, and
 *                           the attach works.
 *
 * Usage: test-service-client CEPD-PATH CASE
 */
#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cep/cm.h>
#include <cep/fabric.h>
#include <cep/sa.h>
#ifdef CEP_TEST_VERBS
#include <cep/verbs.h>
#endif

#include "../common/check.h"
#include "cepd_raw.h"
#include "cepd_test.h"
#include "cm/cm_internal.h"
#include "cm/lead.h"
#include "service/remote.h"
#include "service/proto.h"

static const char *cepd_path;

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Wait (at most @ms) for @f to become non-zero. */
static int wait_flag(_Atomic int *f, int ms)
{
	for (int i = 0; i < ms && !atomic_load(f); i++)
		usleep(1000);
	return atomic_load(f);
}

/* ---- the fake cepd ---------------------------------------------------------- */

/* What the HELLO of a connection carried besides its bytes. */
struct hello_seen {
	int got;                 /* a HELLO came */
	int version;
	int ncmsg, types[4];     /* control messages, in order */
	int has_cred;
	struct ucred cred;
	int nfds;                /* fds of SCM_RIGHTS, all together */
	int pidfd_of_us;         /* exactly one, a pidfd whose pid is ours */
};

/* What a DESTROY_ID does to the fake (FAKE_REPLY otherwise; FAKE_REFUSE:
 * answer -EINVAL, as cepd answers a destroy it cannot do). */
enum { FAKE_REPLY, FAKE_REPLY_DIE, FAKE_DIE, FAKE_REFUSE };

struct fake {
	char dir[64], path[108];
	int lfd;
	int answer_hello;        /* 0: read the HELLO, never answer it */
	int (*on_destroy)(uint32_t handle);
	pthread_t acceptor;
	int accepting;           /* an acceptor thread runs */
	pthread_mutex_t mu;
	_Atomic int conns;       /* connection threads running (detached) */
	int fd;                  /* mu: the latest connection, -1 once it ended */
	struct hello_seen seen;  /* mu: the first connection's HELLO */
	uint32_t next_handle;    /* mu */
	_Atomic int eof;         /* a client closed its connection */
	_Atomic int died;        /* the fake closed a connection on purpose */
	_Atomic int quiet;       /* DESTROY_IDs that came CEPD_F_QUIET */
	_Atomic int pause;       /* read no request while set */
	_Atomic uint32_t refuse_reg; /* a QP_REGISTER of this number: -EPERM */
	_Atomic int refuse_connect; /* every CONNECT and ACCEPT: -ENOENT */
	_Atomic uint32_t hold_reg; /* a QP_REGISTER of this number is answered
				      once hold_go is set */
	_Atomic int hold_go;
	_Atomic uint64_t quiet_sum; /* the handles of those, summed */
	uint32_t log_op[8192];   /* mu: every request's op after the HELLO, */
	uint32_t log_handle[8192]; /* its handle and */
	uint32_t log_a[8192];    /* its a, in the order they came */
	int nlog;                /* mu */
};

static struct fake F;

/* What the client itself gave sendmsg(2) with its HELLO. The fake alone
 * cannot tell: the kernel adds credentials of its own to a message sent
 * before the receiving socket is accepted (unix_passcred_enabled), so a
 * client that sends none may still be seen with some. The test links
 * with -Wl,--wrap=sendmsg (meson.build): the library's calls come here. */
static pthread_mutex_t sent_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hello_seen sent;   /* sent_mu */

static int is_our_pidfd(int fd);
ssize_t __real_sendmsg(int fd, const struct msghdr *m, int flags);
ssize_t __wrap_sendmsg(int fd, const struct msghdr *m, int flags);

ssize_t __wrap_sendmsg(int fd, const struct msghdr *m, int flags)
{
	const struct cepd_hdr *h = m->msg_iovlen ? m->msg_iov[0].iov_base : NULL;

	if (h && m->msg_iov[0].iov_len >= sizeof(*h) && h->op == CEPD_HELLO) {
		struct hello_seen s;

		memset(&s, 0, sizeof(s));
		s.got = 1;
		s.version = (int)((const struct cepd_hello *)h)->version;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR((struct msghdr *)m, c)) {
			if (s.ncmsg < 4)
				s.types[s.ncmsg] = c->cmsg_level == SOL_SOCKET ? c->cmsg_type : -1;
			s.ncmsg++;
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
			    c->cmsg_len == CMSG_LEN(sizeof(s.cred))) {
				s.has_cred = 1;
				memcpy(&s.cred, CMSG_DATA(c), sizeof(s.cred));
			}
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int)), rfd;

				memcpy(&rfd, CMSG_DATA(c), sizeof(int));
				s.pidfd_of_us = s.nfds == 0 && k == 1 && is_our_pidfd(rfd);
				s.nfds += k;
			}
		}
		pthread_mutex_lock(&sent_mu);
		sent = s;
		pthread_mutex_unlock(&sent_mu);
	}
	return __real_sendmsg(fd, m, flags);
}

/* Whether @fd is a pidfd of this process (its fdinfo's Pid line). */
static int is_our_pidfd(int fd)
{
	char p[64], link[64], line[128];
	ssize_t n;
	FILE *f;
	int ours = 0;

	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	n = readlink(p, link, sizeof(link) - 1);
	if (n < 0)
		return 0;
	link[n] = 0;
	if (strcmp(link, "anon_inode:[pidfd]") && strncmp(link, "pidfd:", 6))
		return 0;
	snprintf(p, sizeof(p), "/proc/self/fdinfo/%d", fd);
	f = fopen(p, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Pid:", 4))
			ours = atoi(line + 4) == (int)getpid();
	fclose(f);
	return ours;
}

/* pidfds open in this process. */
static int count_pidfds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char p[300], link[64];
		ssize_t k;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
		k = readlink(p, link, sizeof(link) - 1);
		if (k < 0)
			continue;
		link[k] = 0;
		if (!strcmp(link, "anon_inode:[pidfd]") || !strncmp(link, "pidfd:", 6))
			n++;
	}
	closedir(d);
	return n;
}

/* Receive the HELLO on @fd with its control messages into @s. SO_PASSCRED
 * is set only now that the HELLO waits: credentials the kernel would add
 * by itself (when the receiver passes them at send time) are not there,
 * so what is seen is what the client sent. Fds received are checked and
 * closed. -1 on EOF. */
static int recv_hello(int fd, struct hello_seen *s)
{
	struct cepd_hello h;
	union {
		struct cmsghdr align;
		uint8_t b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(8 * sizeof(int)) + 64];
	} ctl;
	struct iovec iov = { .iov_base = &h, .iov_len = sizeof(h) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			    .msg_controllen = sizeof(ctl.b) };
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	int one = 1;
	ssize_t n;

	if (poll(&pf, 1, 10000) != 1)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return -1;
	memset(s, 0, sizeof(*s));
	s->got = 1;
	s->version = n == (ssize_t)sizeof(h) ? (int)h.version : -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (s->ncmsg < 4)
			s->types[s->ncmsg] = c->cmsg_level == SOL_SOCKET ? c->cmsg_type : -1;
		s->ncmsg++;
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
			s->has_cred = 1;
			memcpy(&s->cred, CMSG_DATA(c), sizeof(s->cred));
		}
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int i = 0; i < k; i++) {
				int rfd;

				memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				s->pidfd_of_us = s->nfds == 0 && is_our_pidfd(rfd);
				s->nfds++;
				close(rfd);
			}
		}
	}
	if (s->nfds != 1)
		s->pidfd_of_us = 0;
	return 0;
}

static void send_reply(int fd, uint64_t seq, int ret, const void *pl, size_t len)
{
	_Alignas(8) uint8_t buf[sizeof(struct cepd_rep) + 256];
	struct cepd_rep *r = (struct cepd_rep *)buf;

	memset(buf, 0, sizeof(buf));
	r->h.op = CEPD_REPLY;
	r->h.len = (uint32_t)(sizeof(*r) + len);
	r->h.seq = seq;
	r->ret = ret;
	if (len)
		memcpy(buf + sizeof(*r), pl, len);
	(void)send(fd, buf, r->h.len, MSG_NOSIGNAL);
}

/* One client connection: its HELLO, then every request answered with 0
 * (a handle for a creating request) until the client closes, or the
 * script of DESTROY_ID says to die. */
static void *fake_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct hello_seen s;
	_Alignas(8) uint8_t buf[CEPD_MSG_MAX];

	if (recv_hello(fd, &s) == 0) {
		pthread_mutex_lock(&F.mu);
		if (!F.seen.got)
			F.seen = s;
		pthread_mutex_unlock(&F.mu);
		if (F.answer_hello) {
			struct cepd_hello_rep rep;

			memset(&rep, 0, sizeof(rep));
			rep.version = CEPD_VERSION;
			rep.workers = 1;
			rep.ca_guid = 0x0002c90300a00000ull;
			send_reply(fd, 1, 0, &rep, sizeof(rep));
		}
	}
	for (;;) {
		ssize_t n;
		const struct cepd_req *q = (const struct cepd_req *)buf;
		int act = FAKE_REPLY;

		while (atomic_load(&F.pause))
			usleep(1000);
		n = recv(fd, buf, sizeof(buf), 0);

		if (n <= 0) {
			atomic_store(&F.eof, 1);
			break;
		}
		if ((size_t)n < sizeof(*q))
			continue;
		pthread_mutex_lock(&F.mu);
		if (F.nlog < (int)(sizeof(F.log_op) / sizeof(F.log_op[0]))) {
			F.log_op[F.nlog] = q->h.op;
			F.log_handle[F.nlog] = q->handle;
			F.log_a[F.nlog++] = q->a;
		}
		pthread_mutex_unlock(&F.mu);
		if (q->h.op == CEPD_DESTROY_ID && (q->flags & CEPD_F_QUIET)) {
			atomic_fetch_add(&F.quiet, 1);
			atomic_fetch_add(&F.quiet_sum, q->handle);
		}
		if (q->h.op == CEPD_DESTROY_ID && F.on_destroy)
			act = F.on_destroy(q->handle);
		if (act == FAKE_DIE)
			break;
		if (q->h.op == CEPD_QP_REGISTER && q->a && q->a == atomic_load(&F.hold_reg))
			while (!atomic_load(&F.hold_go))
				usleep(1000);
		if (q->h.op == CEPD_QP_REGISTER && q->a && q->a == atomic_load(&F.refuse_reg)) {
			send_reply(fd, q->h.seq, -EPERM, NULL, 0); /* as cepd, quiet or not */
		} else if ((q->h.op == CEPD_CONNECT || q->h.op == CEPD_ACCEPT) &&
			   atomic_load(&F.refuse_connect)) {
			send_reply(fd, q->h.seq, -ENOENT, NULL, 0); /* not the client's QP */
		} else if (act == FAKE_REFUSE) {
			send_reply(fd, q->h.seq, -EINVAL, NULL, 0);
		} else if (q->h.seq && ((q->flags & CEPD_F_CREATE) || q->h.op == CEPD_CREATE_ID)) {
			struct cepd_id_rep idr;

			pthread_mutex_lock(&F.mu);
			idr.handle = ++F.next_handle;
			pthread_mutex_unlock(&F.mu);
			idr.local_comm_id = 0x1000 + idr.handle;
			send_reply(fd, q->h.seq, 0, &idr, sizeof(idr));
		} else if (q->h.seq) {
			send_reply(fd, q->h.seq, 0, NULL, 0);
		}
		if (act == FAKE_REPLY_DIE)
			break;
	}
	pthread_mutex_lock(&F.mu);
	if (F.fd == fd)
		F.fd = -1;
	pthread_mutex_unlock(&F.mu);
	if (!atomic_load(&F.eof))
		atomic_store(&F.died, 1);
	close(fd); /* the service is gone, for this client */
	atomic_fetch_sub(&F.conns, 1); /* last: fake_stop may free F's mutex */
	return NULL;
}

static void *fake_accept(void *arg)
{
	pthread_attr_t at;

	(void)arg;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	for (;;) {
		int fd = accept4(F.lfd, NULL, NULL, SOCK_CLOEXEC);
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break; /* shut down: fake_stop */
		}
		pthread_mutex_lock(&F.mu);
		F.fd = fd;
		pthread_mutex_unlock(&F.mu);
		atomic_fetch_add(&F.conns, 1);
		if (pthread_create(&t, &at, fake_conn, (void *)(intptr_t)fd)) {
			atomic_fetch_sub(&F.conns, 1);
			close(fd);
		}
	}
	pthread_attr_destroy(&at);
	return NULL;
}

/* Listen with @backlog; @accepting: serve (else connections wait in the
 * backlog for ever); @on_destroy: the script of DESTROY_ID (NULL: answer). */
static void fake_start(int backlog, int accepting, int answer_hello,
		       int (*on_destroy)(uint32_t handle))
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.mu, NULL);
	F.fd = -1;
	F.answer_hello = answer_hello;
	F.on_destroy = on_destroy;
	snprintf(F.dir, sizeof(F.dir), "/tmp/cep-client-XXXXXX");
	if (!mkdtemp(F.dir)) {
		perror("mkdtemp");
		exit(1);
	}
	snprintf(F.path, sizeof(F.path), "%s/cepd.sock", F.dir);
	memcpy(sa.sun_path, F.path, strlen(F.path) + 1);
	F.lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (F.lfd < 0 || bind(F.lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(F.lfd, backlog)) {
		perror("fake cepd");
		exit(1);
	}
	F.accepting = accepting;
	if (accepting && pthread_create(&F.acceptor, NULL, fake_accept, NULL)) {
		perror("pthread_create");
		exit(1);
	}
}

static void fake_stop(void)
{
	shutdown(F.lfd, SHUT_RDWR); /* the acceptor's accept fails */
	if (F.accepting)
		pthread_join(F.acceptor, NULL);
	close(F.lfd);
	/* every client closed (its context destroyed): each thread ends */
	for (int i = 0; i < 10000 && atomic_load(&F.conns); i++)
		usleep(1000);
	CHECK_EQ(atomic_load(&F.conns), 0);
	unlink(F.path);
	rmdir(F.dir);
	pthread_mutex_destroy(&F.mu);
}

/* An EVENTS message of @n records (@types[i] for the id @handles[i], no
 * MAD) on the latest connection. */
static void fake_events(int n, const uint32_t *handles, const uint32_t *types)
{
	_Alignas(8) uint8_t buf[sizeof(struct cepd_events) + 8 * (sizeof(struct cepd_ev) + 8)];
	struct cepd_events *m = (struct cepd_events *)buf;
	size_t rec = (sizeof(struct cepd_ev) + 7) & ~(size_t)7, off = sizeof(*m);
	int fd;

	memset(buf, 0, sizeof(buf));
	m->h.op = CEPD_EVENTS;
	m->count = (uint32_t)n;
	for (int i = 0; i < n && i < 8; i++) {
		struct cepd_ev e;

		memset(&e, 0, sizeof(e));
		e.len = (uint32_t)rec;
		e.type = types[i];
		e.handle = handles[i];
		e.local_comm_id = 0x1000 + handles[i];
		memcpy(buf + off, &e, sizeof(e));
		off += rec;
	}
	m->h.len = (uint32_t)off;
	pthread_mutex_lock(&F.mu);
	fd = F.fd;
	pthread_mutex_unlock(&F.mu);
	CHECK(fd >= 0 && send(fd, buf, off, MSG_NOSIGNAL) == (ssize_t)off);
}

static struct cep_cm *attach_fake(void)
{
	struct cep_cm_attach_attr a = { .size = sizeof(a), .socket = F.path };
	struct cep_cm *cm = NULL;

	CHECK_EQ(cep_cm_attach(&a, &cm), 0);
	if (!cm)
		exit(check_done("attach"));
	return cm;
}

/* The fake's handle of an id (made by its first request). */
static uint32_t handle_of(struct cep_cm_id *id)
{
	return (uint32_t)(cep_cm_id_local_comm_id(id) - 0x1000);
}

/* ---- events seen ----------------------------------------------------------- */

#define IDS 8
static struct cep_cm_id *_Atomic ids[IDS];
static _Atomic int seen[IDS][CEP_CM_EVENT_COUNT];
static _Atomic int after_destroy;   /* events delivered once cep_cm_destroy began */
static _Atomic int destroying;
static _Atomic int block_in, block_out; /* a callback held until released */
static _Atomic int block_type = -1;

static int slot(struct cep_cm_id *id)
{
	for (int i = 0; i < IDS; i++)
		if (atomic_load(&ids[i]) == id)
			return i;
	return -1;
}

static int handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	int i = slot(id);

	if (atomic_load(&destroying))
		atomic_fetch_add(&after_destroy, 1);
	if (i >= 0 && ev->type < CEP_CM_EVENT_COUNT)
		atomic_fetch_add(&seen[i][ev->type], 1);
	if ((int)ev->type == atomic_load(&block_type)) {
		atomic_store(&block_type, -1);
		atomic_store(&block_in, 1);
		wait_flag(&block_out, 10000);
	}
	return 0;
}

static struct cep_cm_id *new_id(struct cep_cm *cm, int i, struct cep_cm_channel *ch)
{
	struct cep_cm_id_attr a = { .size = sizeof(a) };
	struct cep_cm_id *id = NULL;

	if (ch)
		a.channel = ch;
	else
		a.handler = handler;
	CHECK_EQ(cep_cm_create_id(cm, &a, &id), 0);
	atomic_store(&ids[i], id);
	return id;
}

/* ---- destroyed-after-death --------------------------------------------------- */

static _Atomic uint32_t h_z; /* read by the fake's thread */

/* The DESTROY_IDs of X and Y are answered and their DESTROYED never sent;
 * at Z's the service dies, that call in flight. */
static int death_script(uint32_t h)
{
	return h == atomic_load(&h_z) ? FAKE_DIE : FAKE_REPLY;
}

static void case_destroyed_after_death(void)
{
	struct cep_cm_channel *ch;
	struct cep_cm_id *x, *y, *z, *w;
	struct cep_cm_event *ev;
	struct cep_cm *cm;
	int y_destroyed = 0, other = 0;

	fake_start(16, 1, 1, death_script);
	cm = attach_fake();
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	x = new_id(cm, 0, NULL);
	y = new_id(cm, 1, ch);
	w = new_id(cm, 3, NULL); /* never made there: ends here, last */
	CHECK_EQ(cep_cm_listen(x, 0x100, ~0ull), 0);
	CHECK_EQ(cep_cm_listen(y, 0x101, ~0ull), 0);
	z = new_id(cm, 2, NULL);
	CHECK_EQ(cep_cm_listen(z, 0x102, ~0ull), 0);
	atomic_store(&h_z, handle_of(z));
	CHECK_EQ(cep_cm_destroy_id(x), 0);  /* answered; DESTROYED never sent */
	CHECK_EQ(cep_cm_destroy_id(y), 0);  /* the same, on the channel */
	/* the service dies with this one in flight: it ends here, once,
	 * whichever of the death and the failed call makes DESTROYED */
	CHECK_EQ(cep_cm_destroy_id(z), 0);
	CHECK(wait_flag(&F.died, 5000));
	/* The destroys went without waiting for an answer (quiet), so the
	 * death is noticed when the client next reads: X's and Z's DESTROYED
	 * (made here then, with Y's on the channel) come after it. */
	wait_flag(&seen[0][CEP_CM_EV_DESTROYED], 5000);
	wait_flag(&seen[2][CEP_CM_EV_DESTROYED], 5000);
	/* W's DESTROYED is made after every other: once handled, all before
	 * it have been (one callback thread, in order) */
	CHECK_EQ(cep_cm_destroy_id_sync(w), 0);
	CHECK_EQ(atomic_load(&seen[0][CEP_CM_EV_DESTROYED]), 1); /* X */
	CHECK_EQ(atomic_load(&seen[2][CEP_CM_EV_DESTROYED]), 1); /* Z */
	CHECK_EQ(atomic_load(&seen[3][CEP_CM_EV_DESTROYED]), 1); /* W */
	while (cep_cm_get_event(ch, &ev) == 0) {
		if (ev->id == y && ev->type == CEP_CM_EV_DESTROYED)
			y_destroyed++;
		else
			other++;
		cep_cm_ack_event(ev);
	}
	CHECK_EQ(y_destroyed, 1);
	CHECK_EQ(other, 0);
	/* Y's DESTROYED acked: the channel is free of it */
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	fake_stop();
}

/* ---- destroy-refused -------------------------------------------------------------- */

static _Atomic uint32_t h_refuse; /* read by the fake's thread */

static int refuse_script(uint32_t h)
{
	return h == atomic_load(&h_refuse) ? FAKE_REFUSE : FAKE_REPLY;
}

static void case_destroy_refused(void)
{
	struct cep_cm_id *x, *y;
	struct cep_cm *cm;
	double t0;
	uint32_t hy, ty = CEP_CM_EV_DESTROYED;

	fake_start(16, 1, 1, refuse_script);
	cm = attach_fake();
	x = new_id(cm, 0, NULL);
	y = new_id(cm, 1, NULL);
	CHECK_EQ(cep_cm_listen(x, 0x100, ~0ull), 0);
	CHECK_EQ(cep_cm_listen(y, 0x101, ~0ull), 0);
	atomic_store(&h_refuse, handle_of(x));
	t0 = now_s();
	CHECK_EQ(cep_cm_destroy_id_sync(x), 0); /* refused: ends here */
	CHECK(now_s() - t0 < 5.0);
	CHECK_EQ(atomic_load(&seen[0][CEP_CM_EV_DESTROYED]), 1);
	hy = handle_of(y);
	CHECK_EQ(cep_cm_destroy_id(y), 0);
	for (int i = 0; i < 500 && atomic_load(&F.quiet) < 2; i++)
		usleep(10000); /* the fake's thread counts it when it reads it */
	CHECK_EQ(atomic_load(&F.quiet), 2);
	/* done, unanswered: its DESTROYED is the service's */
	CHECK_EQ(atomic_load(&seen[1][CEP_CM_EV_DESTROYED]), 0);
	fake_events(1, &hy, &ty);
	wait_flag(&seen[1][CEP_CM_EV_DESTROYED], 5000);
	CHECK_EQ(atomic_load(&seen[1][CEP_CM_EV_DESTROYED]), 1);
	CHECK_EQ(atomic_load(&seen[0][CEP_CM_EV_DESTROYED]), 1);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	fake_stop();
}

/* ---- destroy-quiet --------------------------------------------------------------- */

static void *destroy_thread(void *arg)
{
	return (void *)(intptr_t)cep_cm_destroy(arg);
}

static void case_destroy_quiet(void)
{
	struct cep_cm_conn_param cp;
	struct cep_cm_accept_param ap;
	struct cep_cm_id *a, *b, *c;
	struct cep_cm *cm;
	pthread_t t;
	void *ret;
	uint32_t hs[2], ts[2];

	fake_start(16, 1, 1, NULL);
	cm = attach_fake();
	a = new_id(cm, 0, NULL);
	b = new_id(cm, 1, NULL);
	c = new_id(cm, 2, NULL);
	cepd_fabric_conn(&cp, 0, 1, 0x200, 0x100, 16);
	CHECK_EQ(cep_cm_connect(a, &cp), 0);     /* REQ_SENT: REQ_ERROR at death */
	memset(&ap, 0, sizeof(ap));
	ap.size = sizeof(ap);
	ap.qpn = 0x101;
	CHECK_EQ(cep_cm_accept(b, &ap), 0);      /* REP_SENT: REP_ERROR */
	CHECK_EQ(cep_cm_rtu(c, NULL, 0), 0);     /* ESTABLISHED: DREQ_ERROR */
	/* A's callback holds the callback thread; B's event waits behind it */
	atomic_store(&block_type, CEP_CM_EV_MRA_RECEIVED);
	hs[0] = handle_of(a);
	hs[1] = handle_of(b);
	ts[0] = ts[1] = CEP_CM_EV_MRA_RECEIVED;
	fake_events(2, hs, ts);
	CHECK(wait_flag(&block_in, 5000));
	atomic_store(&destroying, 1);
	CHECK_EQ(pthread_create(&t, NULL, destroy_thread, cm), 0);
	/* the destroy has begun: the service sees the connection end */
	CHECK(wait_flag(&F.eof, 5000));
	atomic_store(&block_out, 1);
	pthread_join(t, &ret);
	CHECK_EQ((intptr_t)ret, 0);
	/* the callback that ran when destroy was called counted itself */
	CHECK_EQ(atomic_load(&after_destroy), 0);
	CHECK_EQ(atomic_load(&seen[1][CEP_CM_EV_MRA_RECEIVED]), 0);
	CHECK_EQ(atomic_load(&seen[0][CEP_CM_EV_REQ_ERROR]), 0);
	CHECK_EQ(atomic_load(&seen[1][CEP_CM_EV_REP_ERROR]), 0);
	CHECK_EQ(atomic_load(&seen[2][CEP_CM_EV_DREQ_ERROR]), 0);
	fake_stop();
}

/* ---- destroy-unsent ---------------------------------------------------------------- */

/* REQ_RECEIVED records for the listener @listen, ids @first.. @first + n - 1,
 * 8 to a message, on the latest connection. */
static void fake_reqs(uint32_t listen, uint32_t first, int n)
{
	_Alignas(8) uint8_t buf[sizeof(struct cepd_events) + 8 * (sizeof(struct cepd_ev) + 8)];
	struct cepd_events *m = (struct cepd_events *)buf;
	size_t rec = (sizeof(struct cepd_ev) + 7) & ~(size_t)7;
	int fd;

	pthread_mutex_lock(&F.mu);
	fd = F.fd;
	pthread_mutex_unlock(&F.mu);
	for (int i = 0; i < n; i += 8) {
		size_t off = sizeof(*m);
		int k = n - i < 8 ? n - i : 8;

		memset(buf, 0, sizeof(buf));
		m->h.op = CEPD_EVENTS;
		m->count = (uint32_t)k;
		for (int j = 0; j < k; j++) {
			struct cepd_ev e;

			memset(&e, 0, sizeof(e));
			e.len = (uint32_t)rec;
			e.type = CEP_CM_EV_REQ_RECEIVED;
			e.handle = first + (uint32_t)(i + j);
			e.listen_handle = listen;
			e.local_comm_id = 0x1000 + e.handle;
			memcpy(buf + off, &e, sizeof(e));
			off += rec;
		}
		m->h.len = (uint32_t)off;
		CHECK(fd >= 0 && send(fd, buf, off, MSG_NOSIGNAL) == (ssize_t)off);
	}
}

/* REQs that reach a listener the application has destroyed: the client
 * asks cepd to end each new id (quiet DESTROY_ID, never blocking, under
 * its lock). With the service not reading, the socket fills: the ones it
 * refuses wait and go when the client next hears from cepd - every one
 * arrives, once (before, those were lost and the ids stayed in cepd). */
static void case_destroy_unsent(void)
{
	const int n = 3000;
	const uint32_t first = 100000;
	struct cep_cm_id *l;
	struct cep_cm *cm;
	uint32_t hl, ts[1] = { CEP_CM_EV_MRA_RECEIVED };
	uint64_t want;

	fake_start(16, 1, 1, NULL);
	cm = attach_fake();
	l = new_id(cm, 0, NULL);
	CHECK_EQ(cep_cm_listen(l, 0x1234, ~0ull), 0);
	hl = handle_of(l);
	CHECK_EQ(cep_cm_destroy_id(l), 0);   /* quiet; its DESTROYED never comes */
	for (int i = 0; i < 5000 && atomic_load(&F.quiet) < 1; i++)
		usleep(1000);
	CHECK_EQ(atomic_load(&F.quiet), 1);
	atomic_store(&F.pause, 1);
	fake_reqs(hl, first, n);
	usleep(300 * 1000);                  /* the client has read them all */
	atomic_store(&F.pause, 0);
	/* what the full socket took arrives; the rest waits for cepd's next
	 * message: any (here an event of the gone listener's) */
	usleep(300 * 1000);
	fake_events(1, &hl, ts);
	want = (uint64_t)hl + (uint64_t)n * first + (uint64_t)n * (n - 1) / 2;
	for (int i = 0; i < 5000 && atomic_load(&F.quiet) < 1 + n; i++)
		usleep(1000);
	printf("destroy-unsent: %d quiet DESTROY_IDs of %d\n", atomic_load(&F.quiet), 1 + n);
	CHECK_EQ(atomic_load(&F.quiet), 1 + n);
	CHECK(atomic_load(&F.quiet_sum) == want); /* each handle once */
	CHECK_EQ(cep_cm_destroy(cm), 0);
	fake_stop();
}

/* ---- quiet-batch ------------------------------------------------------------------- */

/* A burst of destroys (issue 27: cmtime's rdma_destroy_qp and
 * rdma_destroy_id of 1,000 connections woke cepd's thread twice each):
 * the first leaves at once, the ones that follow within OUT_BURST_MS wait
 * in the outgoing queue and leave together (sendmmsg); a call made next
 * leaves after every one of them (a QP_REGISTER of the number the
 * QP_DESTROYs just freed must not overtake them); a burst that nothing
 * follows leaves by the reader's timer. Every request arrives once, in
 * the order given. */
static void case_quiet_batch(void)
{
	enum { N = 200, M = 10 };
	static struct cep_cm_id *v[N + M];
	struct cep_cm_id_attr a = { .size = sizeof(a), .handler = handler };
	uint64_t msgs, sends, want = 0;
	unsigned queued;
	struct cep_cm *cm;
	int first_reg = -1, last_destroy = -1, ndestroy = 0, nqp = 0;

	fake_start(16, 1, 1, NULL);
	cm = attach_fake();
	for (int i = 0; i < N + M; i++) { /* each made in the service */
		CHECK_EQ(cep_cm_create_id(cm, &a, &v[i]), 0);
		CHECK_EQ(cep_cm_listen(v[i], 0x5000 + (uint64_t)i, ~0ull), 0);
		if (i < N)
			want += handle_of(v[i]);
	}
	for (int i = 0; i < N; i++) {
		CHECK_EQ(cm_qp_destroy_nowait(cm, 0x100 + (uint32_t)i), 0);
		CHECK_EQ(cep_cm_destroy_id(v[i]), 0);
	}
	CHECK_EQ(cep_cm_qp_register(cm, 0x100), 0); /* a call: after them all */
	cmr_out_counts(cm, &msgs, &sends, &queued);
	printf("quiet-batch: %d quiet requests and a call: %llu sent from the queue in %llu "
	       "sendmmsg calls\n", 2 * N, (unsigned long long)msgs, (unsigned long long)sends);
	CHECK_EQ(queued, 0);
	CHECK(msgs >= N);            /* most of the burst went through the queue */
	CHECK(sends > 0 && sends * 4 <= msgs); /* in batches */
	CHECK_EQ(atomic_load(&F.quiet), N);
	CHECK(atomic_load(&F.quiet_sum) == want);
	pthread_mutex_lock(&F.mu);
	for (int i = 0; i < F.nlog; i++) {
		if (F.log_op[i] == CEPD_DESTROY_ID) {
			last_destroy = i;
			ndestroy++;
		}
		if (F.log_op[i] == CEPD_QP_DESTROY)
			CHECK_EQ(F.log_a[i], 0x100 + (uint32_t)nqp++); /* in order */
		if (F.log_op[i] == CEPD_QP_REGISTER && first_reg < 0)
			first_reg = i;
	}
	pthread_mutex_unlock(&F.mu);
	CHECK_EQ(ndestroy, N);
	CHECK_EQ(nqp, N);
	CHECK(first_reg > last_destroy);
	/* a burst with nothing after it: the timer sends it */
	for (int i = N; i < N + M; i++)
		CHECK_EQ(cep_cm_destroy_id(v[i]), 0);
	for (int i = 0; i < 5000 && atomic_load(&F.quiet) < N + M; i++)
		usleep(1000);
	CHECK_EQ(atomic_load(&F.quiet), N + M);
	cmr_out_counts(cm, &msgs, &sends, &queued);
	CHECK_EQ(queued, 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	fake_stop();
}

/* ---- register-refused -------------------------------------------------------------- */

/* The drop-in's rdma_create_qp registers its QP without a round trip
 * (cm_qp_register_nowait): the service's refusal (-EPERM here) is the
 * error of the next connect or accept naming that QP, which the service
 * refuses as not the client's (-ENOENT); once told, it is forgotten, and
 * a new register of the number forgets it too. A connect naming a QP
 * whose register was not refused gets the service's own answer. */
static void case_register_refused(void)
{
	struct cep_cm_accept_param ap = { .size = sizeof(ap), .qpn = 0xbad };
	struct cep_cm_conn_param cp;
	struct cep_cm_id *a, *b;
	struct cep_cm *cm;

	fake_start(16, 1, 1, NULL);
	cm = attach_fake();
	atomic_store(&F.refuse_reg, 0xbad);
	atomic_store(&F.refuse_connect, 1);
	a = new_id(cm, 0, NULL);
	b = new_id(cm, 1, NULL);
	CHECK_EQ(cm_qp_register_nowait(cm, 0xbad), 0); /* no answer waited for */
	cepd_fabric_conn(&cp, 0, 1, 0x200, 0xbad, 16);
	CHECK_EQ(cep_cm_connect(a, &cp), -EPERM);       /* the register's error */
	CHECK_EQ(cep_cm_connect(a, &cp), -ENOENT);      /* told once */
	CHECK_EQ(cm_qp_register_nowait(cm, 0xbad), 0);
	CHECK_EQ(cep_cm_accept(b, &ap), -EPERM);        /* accept the same */
	CHECK_EQ(cm_qp_register_nowait(cm, 0xbad), 0);
	CHECK_EQ(cep_cm_qp_register(cm, 0xbad), -EPERM); /* a call: its own answer */
	CHECK_EQ(cep_cm_connect(a, &cp), -ENOENT);      /* the quiet one forgotten */
	CHECK_EQ(cm_qp_register_nowait(cm, 0x123), 0);  /* not refused */
	cp.qpn = 0x123;
	CHECK_EQ(cep_cm_connect(a, &cp), -ENOENT);      /* the service's answer */
	CHECK_EQ(cm_qp_register_nowait(cm, 0xbad), 0);
	CHECK_EQ(cm_qp_destroy_nowait(cm, 0xbad), 0);   /* forgets the refusal */
	cp.qpn = 0xbad;
	CHECK_EQ(cep_cm_connect(a, &cp), -ENOENT);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	fake_stop();
}

/* ---- call-event ------------------------------------------------------------------- */

static struct cep_cm *ce_cm;
static _Atomic int ce_ret = 1, ce_wret = 1;
static pthread_t ce_waiter;
static _Atomic int ce_off_waiter; /* the event's callback ran elsewhere */

static int ce_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_TIMEWAIT_EXIT && !pthread_equal(pthread_self(), ce_waiter))
		atomic_fetch_add(&ce_off_waiter, 1);
	return handler(id, ev);
}

static void *ce_call(void *arg)
{
	(void)arg;
	atomic_store(&ce_ret, cep_cm_qp_register(ce_cm, 0x4242)); /* a call */
	return NULL;
}

static int ce_seen(void *arg)
{
	(void)arg;
	return atomic_load(&seen[0][CEP_CM_EV_TIMEWAIT_EXIT]) > 0;
}

/* As rdma_get_cm_event waits (src/rdmacm/channel.c). */
static void *ce_wait(void *arg)
{
	struct cep_lead *l = cm_lead(ce_cm);

	(void)arg;
	atomic_store(&ce_wret, cep_lead_wait(&l, 1, -1, ce_seen, NULL, 10000));
	return NULL;
}

static struct cep_lead_stats ce_stats(void)
{
	struct cep_lead_stats st;

	cep_lead_stats(cm_lead(ce_cm), &st);
	return st;
}

/* On a drop-in context (callbacks run by the thread that reads), a thread
 * waiting for its call's reply reads an event whose callback it may not
 * run (its caller may hold a lock the callback takes). It does not wake
 * itself for it: one drain read it, none follows until the reply (a
 * signal to itself cost a poll, an eventfd read and an empty recvmmsg an
 * event). Nor is it lost: once the call has returned, the thread that
 * waits for events as rdma_get_cm_event does runs it. */
static void case_call_event(void)
{
	struct cep_cm_id_attr a = { .size = sizeof(a), .handler = ce_handler };
	struct cep_lead_stats s0, s1;
	uint32_t hx, tx = CEP_CM_EV_TIMEWAIT_EXIT;
	struct cep_cm_id *x = NULL;
	pthread_t caller;

	fake_start(16, 1, 1, NULL);
	ce_cm = attach_fake();
	CHECK_EQ(cmr_callbacks_inline(ce_cm), 0);
	CHECK_EQ(cep_cm_create_id(ce_cm, &a, &x), 0);
	atomic_store(&ids[0], x);
	CHECK_EQ(cep_cm_listen(x, 0x100, ~0ull), 0); /* made: its handle known */
	hx = handle_of(x);
	atomic_store(&F.hold_reg, 0x4242);
	s0 = ce_stats();
	CHECK_EQ(pthread_create(&caller, NULL, ce_call, NULL), 0);
	for (int i = 0; i < 5000 && ce_stats().app_leads == s0.app_leads; i++)
		usleep(1000);
	usleep(50 * 1000); /* the caller polls the socket */
	s0 = ce_stats();
	fake_events(1, &hx, &tx);
	usleep(200 * 1000);
	s1 = ce_stats();
	CHECK_EQ(s1.app_drains - s0.app_drains, 1); /* the event, read once */
	CHECK_EQ(atomic_load(&seen[0][CEP_CM_EV_TIMEWAIT_EXIT]), 0); /* not in the call */
	CHECK_EQ(atomic_load(&ce_ret), 1);          /* still waiting */
	CHECK_EQ(pthread_create(&ce_waiter, NULL, ce_wait, NULL), 0);
	usleep(50 * 1000);
	atomic_store(&F.hold_go, 1);
	pthread_join(caller, NULL);
	pthread_join(ce_waiter, NULL);
	CHECK_EQ(atomic_load(&ce_ret), 0);
	CHECK_EQ(atomic_load(&ce_wret), 0);
	CHECK_EQ(atomic_load(&seen[0][CEP_CM_EV_TIMEWAIT_EXIT]), 1);
	CHECK_EQ(atomic_load(&ce_off_waiter), 0);
	CHECK_EQ(cep_cm_destroy(ce_cm), 0);
	fake_stop();
}

/* ---- destroy-quiet-cepd ------------------------------------------------------------ */

static char sock_path[108];
static _Atomic int b_est, a_est, a_dreq, a_drep, b_req_got, a_rep_got;
static struct cep_req b_req_seen; /* written before b_req_got, read after */
static struct cep_rep a_rep_seen; /* written before a_rep_got, read after */

static int a_cepd_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	if (ev->type == CEP_CM_EV_REP_RECEIVED) {
		a_rep_seen = ev->msg.u.rep;
		atomic_store(&a_rep_got, 1);
	}
	if (ev->type == CEP_CM_EV_ESTABLISHED)
		atomic_store(&a_est, 1);
	if (ev->type == CEP_CM_EV_DREQ_RECEIVED)
		atomic_store(&a_dreq, 1);
	if (ev->type == CEP_CM_EV_DREP_RECEIVED)
		atomic_store(&a_drep, 1);
	return 0;
}

static int b_cepd_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (atomic_load(&destroying))
		atomic_fetch_add(&after_destroy, 1);
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param p;

		b_req_seen = ev->msg.u.req;
		atomic_store(&b_req_got, 1);
		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		p.qpn = 0x200;
		p.starting_psn = 1;
		p.responder_resources = 1;
		p.initiator_depth = 1;
		p.rnr_retry_count = 7;
		CHECK_EQ(cep_cm_accept(id, &p), 0);
	}
	if (ev->type == CEP_CM_EV_RTU_RECEIVED)
		atomic_store(&b_est, 1);
	return 0;
}

static struct cep_cm *attach_cepd(unsigned port)
{
	struct cep_cm_attach_attr a = { .size = sizeof(a), .socket = sock_path, .port_num = port };
	struct cep_cm *cm = NULL;

	CHECK_EQ(cep_cm_attach(&a, &cm), 0);
	if (!cm)
		exit(check_done("attach"));
	return cm;
}

/* A real `cepd --fabric 2 --workers 2` on a socket in a new directory
 * @dir (a mkdtemp template), ready; its pid. */
static pid_t real_cepd_start(char *dir)
{
	char *argv[] = { "cepd", "--fabric", "2", "--workers", "2", "--socket", sock_path, NULL };

	if (!mkdtemp(dir))
		exit(1);
	snprintf(sock_path, sizeof(sock_path), "%s/cepd.sock", dir);
	return cepd_spawn(cepd_path, argv, sock_path, 500, "client");
}

/* SIGTERM: it must exit 0; its socket and @dir removed. */
static void real_cepd_stop(pid_t cepd, const char *dir)
{
	int st;

	kill(cepd, SIGTERM);
	CHECK(waitpid(cepd, &st, 0) == cepd && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	unlink(sock_path);
	rmdir(dir);
}

/* Clients A (port 0, QP 0x100, an id of a_cepd_handler) and B (port 1,
 * QP 0x200, a listener on @sid of b_cepd_handler) of a real cepd started
 * in @dir (real_cepd_start); its pid. */
static pid_t cepd_clients(char *dir, uint64_t sid, struct cep_cm **a, struct cep_cm **b,
			  struct cep_cm_id **ia)
{
	struct cep_cm_id_attr attr = { .size = sizeof(attr) };
	struct cep_cm_id *lb;
	pid_t cepd = real_cepd_start(dir);

	*a = attach_cepd(0);
	*b = attach_cepd(1);
	CHECK_EQ(cep_cm_qp_register(*a, 0x100), 0);
	CHECK_EQ(cep_cm_qp_register(*b, 0x200), 0);
	attr.handler = b_cepd_handler;
	CHECK_EQ(cep_cm_create_id(*b, &attr, &lb), 0);
	CHECK_EQ(cep_cm_listen(lb, sid, ~0ull), 0);
	attr.handler = a_cepd_handler;
	CHECK_EQ(cep_cm_create_id(*a, &attr, ia), 0);
	return cepd;
}

static void case_destroy_quiet_cepd(void)
{
	char dir[] = "/tmp/cep-client-cepd.XXXXXX";
	struct cep_cm_conn_param p;
	struct cep_cm_id *ia;
	struct cep_cm *a, *b;
	pid_t cepd;

	cepd = cepd_clients(dir, 0x51554945ull, &a, &b, &ia);
	cepd_fabric_conn(&p, 0, 1, 0x51554945ull, 0x100, 16);
	CHECK_EQ(cep_cm_connect(ia, &p), 0);
	CHECK(wait_flag(&a_est, 5000));
	CHECK(wait_flag(&b_est, 5000));
	/* B's passive id is established: the service's going would give it
	 * DREQ_ERROR; its context's destroy gives it nothing */
	atomic_store(&destroying, 1);
	CHECK_EQ(cep_cm_destroy(b), 0);
	CHECK_EQ(atomic_load(&after_destroy), 0);
	CHECK(wait_flag(&a_dreq, 5000)); /* cepd ended B's connection */
	CHECK_EQ(cep_cm_destroy(a), 0);
	real_cepd_stop(cepd, dir);
}

/* ---- xrc-cepd ------------------------------------------------------------------------ */

/* An XRC connection between two clients of a real cepd (issue 28): the
 * service's engine sends the initiator's REQ the client asked for
 * (transport 3, extended transport 1, no responder resources, retry
 * counts or SRQ), answers it with the target's REP (local QPN 0, the QP
 * in the local EECN, SRQ 1), and both reach the clients whole through
 * the socket; the disconnect finds the target's end. */
static void case_xrc_cepd(void)
{
	char dir[] = "/tmp/cep-client-cepd.XXXXXX";
	struct cep_cm_conn_param p;
	struct cep_cm_id *ia;
	struct cep_cm *a, *b;
	pid_t cepd;

	cepd = cepd_clients(dir, 0x58524300ull, &a, &b, &ia);
	cepd_fabric_conn(&p, 0, 1, 0x58524300ull, 0x100, 16);
	p.transport_service_type = CEP_TS_EXTENDED;
	p.responder_resources = 2;
	p.retry_count = 5;
	p.srq = 1;
	CHECK_EQ(cep_cm_connect(ia, &p), 0);
	CHECK(wait_flag(&a_est, 5000));
	CHECK(wait_flag(&b_est, 5000));
	CHECK(wait_flag(&b_req_got, 5000) && wait_flag(&a_rep_got, 5000));
	CHECK_EQ(b_req_seen.transport_service_type, CEP_TS_EXTENDED);
	CHECK_EQ(b_req_seen.extended_transport_type, CEP_EXT_TRANSPORT_XRC);
	CHECK_EQ(b_req_seen.local_qpn, 0x100);
	CHECK_EQ(b_req_seen.responder_resources, 0);
	CHECK_EQ(b_req_seen.retry_count, 0);
	CHECK_EQ(b_req_seen.srq, 0);
	CHECK_EQ(a_rep_seen.local_qpn, 0);
	CHECK_EQ(a_rep_seen.local_eecn, 0x200);
	CHECK_EQ(a_rep_seen.srq, 1);
	CHECK_EQ(a_rep_seen.initiator_depth, 0);
	CHECK_EQ(cep_cm_disconnect(ia, NULL, 0), 0);
	CHECK(wait_flag(&a_drep, 5000)); /* B's end found: its DREP */
	CHECK_EQ(cep_cm_destroy(a), 0);
	CHECK_EQ(cep_cm_destroy(b), 0);
	real_cepd_stop(cepd, dir);
}

/* ---- migrate-cepd ----------------------------------------------------------------------- */

/* cep_cm_migrate through a real cepd (CEPD_MIGRATE, issue 28's path
 * migration): refused on an id not connected (one cepd never made: the
 * request may not create it) and on one in REQ_SENT (its REQ waits on B's
 * channel, unanswered), done on an established connection whose REQ
 * named an alternate path, after which the CM's messages go by it (here
 * to the same port with another SL) and the disconnect still completes
 * (B's DREP came back); the same by the QP's IBV_EVENT_PATH_MIG
 * (cep_cm_qp_event, CEPD_QP_EVENT), where libibverbs is built. (The
 * REQ_SENT refusal was asked right after the connect that establishes:
 * on a loaded host the connection was up first, 25 of 90 runs under
 * TSan three at a time.) */
static void case_migrate_cepd(void)
{
	char dir[] = "/tmp/cep-client-cepd.XXXXXX";
	struct cep_cm_id_attr attr = { .size = sizeof(attr) };
	struct cep_cm_conn_param p;
	struct cep_cm_channel *ch;
	struct cep_cm_id *ia, *ia2, *lb2;
	struct cep_cm *a, *b;
	pid_t cepd;
#ifdef CEP_TEST_VERBS
	/* the QP's async event, as ibv_get_async_event() gives it: through
	 * cepd (CEPD_QP_EVENT) to the id bound to QP 0x100 (0x101) */
	struct ibv_qp qp = { .qp_num = 0x100 }, qp2 = { .qp_num = 0x101 };
	struct ibv_async_event ev = { .element.qp = &qp, .event_type = IBV_EVENT_PATH_MIG };
	struct ibv_async_event ev2 = { .element.qp = &qp2, .event_type = IBV_EVENT_PATH_MIG };
#endif

	cepd = cepd_clients(dir, 0x4d494752ull, &a, &b, &ia);
	CHECK_EQ(cep_cm_migrate(ia), -EINVAL);
	cepd_fabric_conn(&p, 0, 1, 0x4d494752ull, 0x100, 16);
	CHECK_EQ(cep_cm_migrate(ia), -EINVAL); /* still not connected */
	p.alternate = p.primary;
	p.alternate.sl = 3;
	/* REQ_SENT, held there: a listener that takes its events from a
	 * channel nobody reads */
	CHECK_EQ(cep_cm_channel_create(&ch), 0);
	attr.channel = ch;
	CHECK_EQ(cep_cm_create_id(b, &attr, &lb2), 0);
	CHECK_EQ(cep_cm_listen(lb2, 0x4d494753ull, ~0ull), 0);
	CHECK_EQ(cep_cm_qp_register(a, 0x101), 0);
	attr.channel = NULL;
	attr.handler = a_cepd_handler;
	CHECK_EQ(cep_cm_create_id(a, &attr, &ia2), 0);
	p.service_id = 0x4d494753ull;
	p.qpn = 0x101;
	CHECK_EQ(cep_cm_connect(ia2, &p), 0);
	CHECK_EQ(cep_cm_migrate(ia2), -EINVAL); /* REQ_SENT */
#ifdef CEP_TEST_VERBS
	CHECK_EQ(cep_cm_qp_event(a, &ev2), -EINVAL);
#endif
	p.service_id = 0x4d494752ull;
	p.qpn = 0x100;
	CHECK_EQ(cep_cm_connect(ia, &p), 0);
	CHECK(wait_flag(&a_est, 5000));
	CHECK(wait_flag(&b_est, 5000));
#ifdef CEP_TEST_VERBS
	CHECK_EQ(cep_cm_qp_event(a, &ev), 0);
#endif
	CHECK_EQ(cep_cm_migrate(ia), 0);
	CHECK_EQ(cep_cm_migrate(ia), 0);
	CHECK_EQ(cep_cm_disconnect(ia, NULL, 0), 0);
	CHECK(wait_flag(&a_drep, 5000));
	CHECK_EQ(cep_cm_migrate(ia), -EINVAL); /* timewait */
	CHECK_EQ(cep_cm_destroy(a), 0);
	CHECK_EQ(cep_cm_destroy(b), 0);
	CHECK_EQ(cep_cm_channel_destroy(ch), 0);
	real_cepd_stop(cepd, dir);
}

/* ---- nowait-cepd ----------------------------------------------------------------------- */

/* The next event on @ch within @ms, this thread reading @cm's socket
 * meanwhile; NULL if none came. The caller acks it. */
static struct cep_cm_event *next_event(struct cep_cm_channel *ch, struct cep_cm *cm, int ms)
{
	struct cep_cm_event *ev = NULL;
	double end = now_s() + ms / 1000.0;

	while (cep_cm_get_event(ch, &ev) == -EAGAIN) {
		int left = (int)((end - now_s()) * 1000.0);

		if (left <= 0)
			return NULL;
		(void)cep_cm_channel_wait(ch, &cm, 1, left);
	}
	return ev;
}

/* The next event on @ch within @ms but TIMEWAIT_EXIT (an earlier
 * connection's, which comes when its timewait is over: skipped). */
static struct cep_cm_event *next_event_tw(struct cep_cm_channel *ch, struct cep_cm *cm, int ms)
{
	double end = now_s() + ms / 1000.0;

	for (;;) {
		int left = (int)((end - now_s()) * 1000.0);
		struct cep_cm_event *ev = next_event(ch, cm, left > 0 ? left : 0);

		if (!ev || ev->type != CEP_CM_EV_TIMEWAIT_EXIT)
			return ev;
		cep_cm_ack_event(ev);
	}
}

/* No event on @ch within @ms but TIMEWAIT_EXIT (one that comes is named,
 * and acked). */
static void no_event(struct cep_cm_channel *ch, struct cep_cm *cm, int ms)
{
	struct cep_cm_event *ev = next_event_tw(ch, cm, ms);

	if (!ev)
		return;
	fprintf(stderr, "unexpected event %s\n", cep_cm_event_name(ev->type));
	CHECK(!"no event");
	cep_cm_ack_event(ev);
}

/* The next event on @ch but TIMEWAIT_EXIT, which must be of @type; its id
 * (the event acked). */
static struct cep_cm_id *expect_event(struct cep_cm_channel *ch, struct cep_cm *cm, int type,
				      int *status)
{
	struct cep_cm_event *ev = next_event_tw(ch, cm, 5000);
	struct cep_cm_id *id;

	CHECK(ev != NULL);
	if (!ev)
		exit(check_done("nowait-cepd"));
	CHECK_EQ(ev->type, type);
	id = ev->id;
	if (status)
		*status = ev->status;
	cep_cm_ack_event(ev);
	return id;
}

/* A nowait call run on its own thread while cepd is stopped (SIGSTOP): it
 * must return without cepd's answer. */
struct nowait_call {
	struct cep_cm_id *id;
	const struct cep_cm_accept_param *acc; /* NULL, no conn: the RTU */
	const struct cep_cm_conn_param *conn;
	int ret;
	_Atomic int done;
};

static void *nowait_main(void *arg)
{
	struct nowait_call *c = arg;

	c->ret = c->conn ? cm_connect_nowait(c->id, c->conn) :
		 c->acc ? cm_accept_nowait(c->id, c->acc) : cm_rtu_nowait(c->id);
	atomic_store(&c->done, 1);
	return NULL;
}

/* 0 if the call (a connect with @conn, an accept with @acc, else the RTU)
 * returned 0 while cepd (@cepd) was stopped. */
static int nowait_stopped(pid_t cepd, struct cep_cm_id *id, const struct cep_cm_accept_param *acc,
			  const struct cep_cm_conn_param *conn)
{
	struct nowait_call c = { .id = id, .acc = acc, .conn = conn };
	pthread_t t;
	int returned;

	CHECK_EQ(kill(cepd, SIGSTOP), 0);
	CHECK_EQ(pthread_create(&t, NULL, nowait_main, &c), 0);
	returned = wait_flag(&c.done, 2000); /* a call would wait for cepd */
	CHECK_EQ(kill(cepd, SIGCONT), 0);
	pthread_join(t, NULL);
	CHECK(returned);
	CHECK_EQ(c.ret, 0);
	return returned && !c.ret ? 0 : -1;
}

/* cm_accept_nowait and cm_rtu_nowait through a real cepd (issue 27: the
 * drop-in's rdma_accept and RTU without a round trip). A REQ_RCVD id's
 * accept and a REP_RCVD id's RTU return while cepd is stopped, and the
 * connection is established on both sides; in any other phase each is
 * its call, answered by the engine (-EINVAL), as are parameters the engine
 * refuses (-EMSGSIZE). An accept that cepd refuses (QP 0x300 is A's):
 * B's id gets REP_ERROR with the refusal's status and A the REJ cepd
 * sends at once (consumer defined), nothing else. An RTU after the peer's
 * REJ: 0 (sent quiet, its refusal dropped) or -EINVAL (the REJ read
 * first), and the REJ is A's only event. */
static void case_nowait_cepd(void)
{
	char dir[] = "/tmp/cep-client-cepd.XXXXXX";
	const uint64_t sid = 0x4e4f5741ull;
	struct cep_cm_accept_param acc = { .size = sizeof(acc), .qpn = 0x200, .starting_psn = 1,
					   .responder_resources = 1, .initiator_depth = 1,
					   .rnr_retry_count = 7 };
	struct cep_cm_id_attr attr = { .size = sizeof(attr) };
	struct cep_cm_channel *cha, *chb;
	struct cep_cm_id *ia, *ia2, *ia3, *ia4, *ia5, *ia6, *lb, *bid;
	struct cep_cm_conn_param p;
	struct cep_cm_event *ev;
	struct cep_cm *a, *b;
	uint8_t pd[CEP_REP_PRIVATE_DATA_SIZE + 1] = { 0 };
	int st, ret;
	pid_t cepd;

	cepd = real_cepd_start(dir);
	a = attach_cepd(0);
	b = attach_cepd(1);
	CHECK_EQ(cep_cm_qp_register(a, 0x100), 0);
	CHECK_EQ(cep_cm_qp_register(a, 0x101), 0);
	CHECK_EQ(cep_cm_qp_register(a, 0x102), 0);
	CHECK_EQ(cep_cm_qp_register(a, 0x103), 0);
	CHECK_EQ(cep_cm_qp_register(a, 0x104), 0);
	CHECK_EQ(cep_cm_qp_register(a, 0x300), 0); /* A's: B may not name it */
	CHECK_EQ(cep_cm_qp_register(b, 0x200), 0); /* B's: nor A this one */
	CHECK_EQ(cep_cm_qp_register(b, 0x201), 0);
	CHECK_EQ(cep_cm_qp_register(b, 0x202), 0);
	CHECK_EQ(cep_cm_channel_create(&cha), 0);
	CHECK_EQ(cep_cm_channel_create(&chb), 0);
	attr.channel = chb;
	CHECK_EQ(cep_cm_create_id(b, &attr, &lb), 0);
	CHECK_EQ(cep_cm_listen(lb, sid, ~0ull), 0);
	attr.channel = cha;
	CHECK_EQ(cep_cm_create_id(a, &attr, &ia), 0);
	CHECK_EQ(cep_cm_create_id(a, &attr, &ia2), 0);
	CHECK_EQ(cep_cm_create_id(a, &attr, &ia3), 0);

	/* 1: an id cepd has not made yet, one that is not REP_RCVD: calls */
	CHECK_EQ(cm_rtu_nowait(ia), -EINVAL);
	cepd_fabric_conn(&p, 0, 1, sid, 0x100, 16);
	p.manual_rtu = 1;
	CHECK_EQ(cep_cm_connect(ia, &p), 0);
	CHECK_EQ(cm_rtu_nowait(ia), -EINVAL); /* REQ_SENT */
	bid = expect_event(chb, b, CEP_CM_EV_REQ_RECEIVED, NULL);
	acc.private_data = pd;
	acc.private_data_len = sizeof(pd);
	CHECK_EQ(cm_accept_nowait(bid, &acc), -EMSGSIZE); /* the engine's answer */
	acc.private_data_len = 0;
	CHECK_EQ(nowait_stopped(cepd, bid, &acc, NULL), 0);
	(void)expect_event(cha, a, CEP_CM_EV_REP_RECEIVED, NULL);
	CHECK_EQ(cm_accept_nowait(bid, &acc), -EINVAL); /* REP_SENT: a call */
	CHECK_EQ(nowait_stopped(cepd, ia, NULL, NULL), 0);
	(void)expect_event(chb, b, CEP_CM_EV_RTU_RECEIVED, NULL);
	CHECK_EQ(cep_cm_id_state(ia), CEP_CM_ESTABLISHED);
	CHECK_EQ(cep_cm_id_state(bid), CEP_CM_ESTABLISHED);
	CHECK_EQ(cm_rtu_nowait(ia), -EINVAL);                /* ESTABLISHED: a call */
	CHECK_EQ(cm_accept_nowait(bid, &acc), -EINVAL);

	/* 2: an accept cepd refuses (another client's QP): REP_ERROR with
	 * its status at B, the REJ at A at once (its REQ would be retried
	 * for seconds), no other event */
	cepd_fabric_conn(&p, 0, 1, sid, 0x101, 16);
	CHECK_EQ(cep_cm_connect(ia2, &p), 0);
	bid = expect_event(chb, b, CEP_CM_EV_REQ_RECEIVED, NULL);
	acc.qpn = 0x300;
	CHECK_EQ(cm_accept_nowait(bid, &acc), 0);
	CHECK(expect_event(chb, b, CEP_CM_EV_REP_ERROR, &st) == bid);
	CHECK_EQ(st, -ENOENT); /* not the client's QP, as cep_cm_accept says */
	ev = next_event_tw(cha, a, 5000);
	CHECK(ev && ev->type == CEP_CM_EV_REJ_RECEIVED && ev->id == ia2 &&
	      ev->status == CEP_REJ_CONSUMER_DEFINED);
	if (ev)
		cep_cm_ack_event(ev);
	CHECK_EQ(cep_cm_id_state(bid), CEP_CM_IDLE);
	no_event(chb, b, 300);
	no_event(cha, a, 300);

	/* 3: an RTU racing the peer's REJ: the REJ is all A hears */
	cepd_fabric_conn(&p, 0, 1, sid, 0x102, 16);
	p.manual_rtu = 1;
	CHECK_EQ(cep_cm_connect(ia3, &p), 0);
	bid = expect_event(chb, b, CEP_CM_EV_REQ_RECEIVED, NULL);
	acc.qpn = 0x201;
	CHECK_EQ(cm_accept_nowait(bid, &acc), 0);
	(void)expect_event(cha, a, CEP_CM_EV_REP_RECEIVED, NULL);
	CHECK_EQ(cep_cm_reject(bid, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
	usleep(100000); /* the REJ in A's cepd; its event unread here */
	ret = cm_rtu_nowait(ia3);
	CHECK(ret == 0 || ret == -EINVAL);
	ev = next_event_tw(cha, a, 5000);
	CHECK(ev && ev->type == CEP_CM_EV_REJ_RECEIVED && ev->id == ia3);
	if (ev)
		cep_cm_ack_event(ev);
	no_event(cha, a, 300);

	/* 4: a connect of an id cepd has not made returns while cepd is
	 * stopped; a call on the id meanwhile waits for the answer that
	 * names it, reading it itself (nobody else waits), and the
	 * connection is made */
	CHECK_EQ(cep_cm_create_id(a, &attr, &ia4), 0);
	cepd_fabric_conn(&p, 0, 1, sid, 0x103, 16);
	CHECK_EQ(nowait_stopped(cepd, ia4, NULL, &p), 0);
	st = (int)cep_cm_id_state(ia4);
	CHECK(st == CEP_CM_REQ_SENT || st == CEP_CM_MRA_REQ_RCVD);
	bid = expect_event(chb, b, CEP_CM_EV_REQ_RECEIVED, NULL);
	acc.qpn = 0x202;
	CHECK_EQ(cm_accept_nowait(bid, &acc), 0);
	CHECK(expect_event(cha, a, CEP_CM_EV_REP_RECEIVED, NULL) == ia4); /* RTU sent */
	CHECK(expect_event(cha, a, CEP_CM_EV_ESTABLISHED, NULL) == ia4);
	(void)expect_event(chb, b, CEP_CM_EV_RTU_RECEIVED, NULL);
	CHECK_EQ(cep_cm_id_state(ia4), CEP_CM_ESTABLISHED);
	CHECK_EQ(cm_connect_nowait(ia4, &p), -EINVAL); /* made: a call, the engine's answer */

	/* 5: a connect cepd refuses (B's QP): REQ_ERROR with the refusal's
	 * status, no REQ at B */
	CHECK_EQ(cep_cm_create_id(a, &attr, &ia5), 0);
	cepd_fabric_conn(&p, 0, 1, sid, 0x200, 16);
	CHECK_EQ(cm_connect_nowait(ia5, &p), 0);
	CHECK(expect_event(cha, a, CEP_CM_EV_REQ_ERROR, &st) == ia5);
	CHECK_EQ(st, -ENOENT); /* as cep_cm_connect says */
	CHECK_EQ(cep_cm_id_state(ia5), CEP_CM_IDLE);
	no_event(chb, b, 300);
	no_event(cha, a, 100);

	/* 6: cepd dies with a connect's answer outstanding: the id's
	 * REQ_ERROR, -ECONNRESET (among the error events of A's others) */
	CHECK_EQ(cep_cm_create_id(a, &attr, &ia6), 0);
	cepd_fabric_conn(&p, 0, 1, sid, 0x104, 16);
	CHECK_EQ(nowait_stopped(cepd, ia6, NULL, &p), 0);
	CHECK_EQ(kill(cepd, SIGKILL), 0);
	CHECK_EQ(waitpid(cepd, NULL, 0), cepd);
	st = 1;
	while ((ev = next_event(cha, a, 5000)) != NULL) {
		int mine = ev->id == ia6 && ev->type == CEP_CM_EV_REQ_ERROR;

		if (mine)
			st = ev->status;
		cep_cm_ack_event(ev);
		if (mine)
			break;
	}
	CHECK_EQ(st, -ECONNRESET);

	CHECK_EQ(cep_cm_destroy(a), 0);
	CHECK_EQ(cep_cm_destroy(b), 0);
	CHECK_EQ(cep_cm_channel_destroy(cha), 0);
	CHECK_EQ(cep_cm_channel_destroy(chb), 0);
	unlink(sock_path);
	rmdir(dir);
}

/* ---- mc-cepd ---------------------------------------------------------------------------- */

/* InfiniBand multicast through a real cepd (issue 28), the client's
 * cmr_mc: the service checks a membership before it asks the SA
 * (access_mc: JoinState full or send-only full, rdma_cm's or IPoIB's
 * Q_Key, the port's GID and P_Key, a multicast MGID), so each refusal
 * comes back whatever the port; a well-formed join reaches the SA step,
 * which the in-process fabric does not have (-EOPNOTSUPP), and a leave
 * of nothing held is EADDRNOTAVAIL. The client is served as before
 * afterwards. (Joins counted against an SA: service-mcast-*.) */
static void case_mc_cepd(void)
{
	char dir[] = "/tmp/cep-client-cepd.XXXXXX";
	struct cep_cm_conn_param p;
	struct cepd_mc m, ok;
	struct cepd_mc_rep rep;
	struct cep_cm *a, *local;
	struct cep_fabric *fab;
	struct cep_transport *tp;
	pid_t cepd = real_cepd_start(dir);

	a = attach_cepd(0);
	cepd_fabric_conn(&p, 0, 1, 0x4d43ull, 0x100, 16);
	cepd_mc_rdma_cm(&ok, p.primary.local_gid, 1);
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &ok, &rep), -EOPNOTSUPP); /* no SA on the fabric */
	m = ok, m.bit = 3;
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EOPNOTSUPP); /* send-only full: allowed */
	m = ok, m.qkey = 0;
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EOPNOTSUPP); /* IPoIB's Q_Key */
	m = ok, memset(m.mgid, 0, 16);
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EOPNOTSUPP); /* the SA's MGID */
	/* refused before the SA */
	m = ok, m.bit = 1;                      /* non member: not rdma_cm's */
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EINVAL);
	m = ok, m.bit = 4;
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EINVAL);
	m = ok, m.qkey = 0x80010000u;           /* a controlled Q_Key */
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EINVAL);
	m = ok, m.qkey = 0x1234;                /* one of the client's choosing */
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EINVAL);
	m = ok, m.port_gid[15] ^= 1;            /* another node's GID */
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EINVAL);
	m = ok, m.pkey = 0x1234;                /* not in the port's table */
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EINVAL);
	m = ok, m.mgid[0] = 0xfe;               /* unicast */
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EINVAL);
	m = ok, m.pad = 1;
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &m, &rep), -EINVAL);
	m = ok, memset(m.mgid, 0, 16);          /* a leave names its group */
	CHECK_EQ(cmr_mc(a, CEPD_MC_LEAVE, &m, NULL), -EINVAL);
	m = ok, m.bit = 2;
	CHECK_EQ(cmr_mc(a, CEPD_MC_LEAVE, &m, NULL), -EINVAL);
	CHECK_EQ(cmr_mc(a, CEPD_MC_LEAVE, &ok, NULL), -EADDRNOTAVAIL); /* none held */
	/* IPoIB's broadcast group of a P_Key: the port's P_Keys only */
	memset(&m, 0, sizeof(m));
	m.pkey = 0xffff;
	CHECK_EQ(cmr_mc(a, CEPD_MC_BCAST, &m, &rep), -EOPNOTSUPP); /* no SA */
	m.pkey = 0x1234;
	CHECK_EQ(cmr_mc(a, CEPD_MC_BCAST, &m, &rep), -EINVAL);
	CHECK_EQ(cmr_mc(a, CEPD_MC_BCAST, &m, NULL), -EINVAL);     /* no room for it */
	/* the client's own checks: a context that is not cepd's, a join
	 * without room for the answer, another request */
	CHECK_EQ(cep_fabric_create(&(struct cep_fabric_attr){ .size = sizeof(struct cep_fabric_attr) },
				   &fab), 0);
	CHECK_EQ(cep_fabric_port_create(fab, &(struct cep_fabric_port_attr){
				.size = sizeof(struct cep_fabric_port_attr), .lid = 1, .port_num = 1,
				.ca_guid = 1, .link_layer = CEP_FABRIC_LINK_IB }, &tp), 0);
	CHECK_EQ(cep_cm_create(&(struct cep_cm_attr){ .size = sizeof(struct cep_cm_attr),
						      .transport = tp }, &local), 0);
	CHECK_EQ(cmr_mc(local, CEPD_MC_JOIN, &ok, &rep), -EINVAL);
	CHECK_EQ(cmr_mc(a, CEPD_MC_JOIN, &ok, NULL), -EINVAL);
	CHECK_EQ(cmr_mc(a, CEPD_QP_EVENT, &ok, &rep), -EINVAL);
	CHECK_EQ(cep_cm_destroy(local), 0);
	tp->ops->destroy(tp);
	CHECK_EQ(cep_fabric_destroy(fab), 0);
	/* served as before */
	CHECK_EQ(cep_cm_qp_register(a, 0x100), 0);
	CHECK_EQ(cep_cm_qp_destroy(a, 0x100), 0);
	CHECK_EQ(cep_cm_destroy(a), 0);
	real_cepd_stop(cepd, dir);
}

/* ---- path-cepd --------------------------------------------------------------------------- */

/* A PathRecord query through a real cepd (cmr_path_query, the drop-in's
 * rdma_resolve_route on InfiniBand): cepd checks the query's source
 * (access_path: the SGID named and the port's, a P_Key of the port's, no
 * unknown mask bit or flag) before it asks the SA, which the in-process
 * fabric does not have (-EOPNOTSUPP). (Answered by OpenSM: sa-opensm.) */
static void case_path_cepd(void)
{
	char dir[] = "/tmp/cep-client-cepd.XXXXXX";
	struct cep_cm_conn_param p;
	struct cep_sa_path q, out;
	struct cep_cm *a;
	uint64_t mask = CEP_SA_PR_SGID | CEP_SA_PR_DGID | CEP_SA_PR_PKEY;
	pid_t cepd = real_cepd_start(dir);

	a = attach_cepd(0);
	cepd_fabric_conn(&p, 0, 1, 0x5041ull, 0x100, 16);
	memset(&q, 0, sizeof(q));
	memcpy(q.sgid, p.primary.local_gid, 16);
	memcpy(q.dgid, p.primary.remote_gid, 16);
	q.pkey = 0xffff;
	CHECK_EQ(cmr_path_query(a, mask, 0, &q, &out), -EOPNOTSUPP); /* no SA on the fabric */
	CHECK_EQ(cmr_path_query(a, mask, CEP_SA_QUERY_FRESH, &q, &out), -EOPNOTSUPP);
	/* refused before the SA */
	CHECK_EQ(cmr_path_query(a, CEP_SA_PR_DGID, 0, &q, &out), -EINVAL); /* no source */
	CHECK_EQ(cmr_path_query(a, mask | (UINT64_C(1) << 23), 0, &q, &out), -EINVAL);
	CHECK_EQ(cmr_path_query(a, mask, 2, &q, &out), -EINVAL);
	q.sgid[15] ^= 1;                                   /* another node's GID */
	CHECK_EQ(cmr_path_query(a, mask, 0, &q, &out), -EINVAL);
	q.sgid[15] ^= 1;
	q.pkey = 0x1234;                                   /* not the port's */
	CHECK_EQ(cmr_path_query(a, mask, 0, &q, &out), -EINVAL);
	CHECK_EQ(cmr_path_query(a, mask & ~CEP_SA_PR_PKEY, 0, &q, &out), -EOPNOTSUPP);
	CHECK_EQ(cmr_path_query(NULL, mask, 0, &q, &out), -EINVAL);
	CHECK_EQ(cmr_path_query(a, mask, 0, &q, NULL), -EINVAL);
	/* served as before */
	CHECK_EQ(cep_cm_qp_register(a, 0x100), 0);
	CHECK_EQ(cep_cm_destroy(a), 0);
	real_cepd_stop(cepd, dir);
}

/* ---- quiet-order-cepd ---------------------------------------------------------------- */

/* The order of quiet requests and calls from many threads through a real
 * cepd (on its fabric a QPN is its first registrant's: a second register
 * of a number the client holds is -EEXIST, a destroy of one it does not
 * hold -ENOENT). Each thread works its own numbers: a quiet register, then
 * a call that needs it served first (a destroy), a quiet destroy, then a
 * call that needs that served first (a register); the four threads' quiet
 * requests meet in the outgoing queue in bursts. Every call must find
 * what the thread's quiet requests before it left: none may overtake. */
enum { QO_THREADS = 4, QO_ROUNDS = 300 };
static struct cep_cm *qo_cm;
static _Atomic int qo_bad;

static void *quiet_order_thread(void *arg)
{
	uint32_t base = 0x1000 + 0x100 * (uint32_t)(uintptr_t)arg;

	for (int i = 0; i < QO_ROUNDS; i++) {
		uint32_t q = base + (uint32_t)(i % 16);
		int r1, r2, r3, r4;

		r1 = cm_qp_register_nowait(qo_cm, q);
		r2 = cep_cm_qp_destroy(qo_cm, q);        /* finds it registered */
		r3 = cep_cm_qp_register(qo_cm, q);       /* finds it free again */
		r4 = cm_qp_destroy_nowait(qo_cm, q);
		if (r1 || r2 || r3 || r4) {
			if (atomic_fetch_add(&qo_bad, 1) < 5)
				fprintf(stderr, "quiet-order: thread %u round %d qpn %#x: %d %d %d %d\n",
					(unsigned)(uintptr_t)arg, i, q, r1, r2, r3, r4);
		}
	}
	return NULL;
}

static void case_quiet_order_cepd(void)
{
	char dir[] = "/tmp/cep-client-cepd.XXXXXX";
	pthread_t t[QO_THREADS];
	uint64_t msgs, sends;
	unsigned queued;
	pid_t cepd;

	cepd = real_cepd_start(dir);
	qo_cm = attach_cepd(0);
	for (uintptr_t i = 0; i < QO_THREADS; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, quiet_order_thread, (void *)i), 0);
	for (int i = 0; i < QO_THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK_EQ(atomic_load(&qo_bad), 0);
	/* every number free at the end: the last quiet destroys were served */
	for (uint32_t k = 0; k < QO_THREADS; k++)
		for (uint32_t i = 0; i < 16; i++)
			CHECK_EQ(cep_cm_qp_destroy(qo_cm, 0x1000 + 0x100 * k + i), -ENOENT);
	cmr_out_counts(qo_cm, &msgs, &sends, &queued);
	printf("quiet-order-cepd: %d rounds x %d threads, %llu requests sent from the queue "
	       "in %llu sendmmsg calls\n", QO_ROUNDS, QO_THREADS, (unsigned long long)msgs,
	       (unsigned long long)sends);
	CHECK_EQ(queued, 0);
	CHECK_EQ(cep_cm_destroy(qo_cm), 0);
	real_cepd_stop(cepd, dir);
}

/* ---- destroy-race ---------------------------------------------------------------- */

static _Atomic int hook_calls, a_in_hook, b_done;

/* The first cep_cm_destroy waits here, after cm.c's live check, until
 * the second has returned. */
static void destroy_hook(enum cmr_hook_point p, struct cep_cm *cm)
{
	(void)cm;
	if (p != CMR_HOOK_DESTROY || atomic_fetch_add(&hook_calls, 1) != 0)
		return;
	atomic_store(&a_in_hook, 1);
	wait_flag(&b_done, 5000);
}

static pthread_barrier_t race_bar;

static void *race_thread(void *arg)
{
	pthread_barrier_wait(&race_bar);
	return (void *)(intptr_t)cep_cm_destroy(arg);
}

static void case_destroy_race(int rounds)
{
	struct cep_cm *cm;
	pthread_t t, u;
	void *ra, *rb;
	int rb_main, zeros = 0, einval = 0, other = 0;

	fake_start(64, 1, 1, NULL);
	/* held: A passed the live check, B destroys all of it, A goes on */
	cm = attach_fake();
	cmr_test_hook = destroy_hook;
	CHECK_EQ(pthread_create(&t, NULL, destroy_thread, cm), 0);
	CHECK(wait_flag(&a_in_hook, 5000));
	rb_main = cep_cm_destroy(cm);
	atomic_store(&b_done, 1);
	pthread_join(t, &ra);
	cmr_test_hook = NULL;
	CHECK_EQ(rb_main, 0);
	CHECK_EQ((intptr_t)ra, -EINVAL);
	/* free races, for TSan */
	pthread_barrier_init(&race_bar, NULL, 2);
	for (int i = 0; i < rounds; i++) {
		cm = attach_fake();
		CHECK_EQ(pthread_create(&t, NULL, race_thread, cm), 0);
		CHECK_EQ(pthread_create(&u, NULL, race_thread, cm), 0);
		pthread_join(t, &ra);
		pthread_join(u, &rb);
		for (int k = 0; k < 2; k++) {
			intptr_t r = k ? (intptr_t)rb : (intptr_t)ra;

			zeros += r == 0;
			einval += r == -EINVAL;
			other += r != 0 && r != -EINVAL;
		}
	}
	pthread_barrier_destroy(&race_bar);
	CHECK_EQ(zeros, rounds);
	CHECK_EQ(einval, rounds);
	CHECK_EQ(other, 0);
	fake_stop();
}

/* ---- attach timeouts ---------------------------------------------------------------- */

struct attach_run {
	struct cep_cm_attach_attr a;
	int ret;
	_Atomic int done;
	double took;
};

static void *attach_thread(void *arg)
{
	struct attach_run *r = arg;
	struct cep_cm *cm = NULL;
	double t0 = now_s();

	r->ret = cep_cm_attach(&r->a, &cm);
	r->took = now_s() - t0;
	if (!r->ret)
		cep_cm_destroy(cm);
	atomic_store(&r->done, 1);
	return NULL;
}

/* cep_cm_attach with @size and @timeout_ms in a thread; the test fails
 * (and ends: the thread cannot be stopped) when it is still waiting after
 * @watch_ms. */
static void attach_bounded(size_t size, uint64_t timeout_ms, int watch_ms, struct attach_run *r)
{
	pthread_t t;

	memset(r, 0, sizeof(*r));
	r->a.size = sizeof(r->a);
	r->a.socket = F.path;
	r->a.timeout_ms = timeout_ms;
	r->a.size = size;
	CHECK_EQ(pthread_create(&t, NULL, attach_thread, r), 0);
	if (!wait_flag(&r->done, watch_ms)) {
		fprintf(stderr, "cep_cm_attach still waiting after %d ms\n", watch_ms);
		_exit(1);
	}
	pthread_join(t, NULL);
}

static void case_attach_timeout_hello(void)
{
	struct attach_run r;

	fake_start(16, 1, 0, NULL);
	attach_bounded(sizeof(r.a), 300, 5000, &r);
	CHECK_EQ(r.ret, -ETIMEDOUT);
	CHECK(r.took >= 0.29 && r.took < 3.0);
	pthread_mutex_lock(&F.mu);
	CHECK(F.seen.got); /* it did take the connection and the HELLO */
	pthread_mutex_unlock(&F.mu);
	fake_stop();
}

static void case_attach_timeout_backlog(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct attach_run r;
	int first, probe;

	fake_start(0, 0, 1, NULL); /* listen(0) and no accept: one connection fills it */
	memcpy(sa.sun_path, F.path, strlen(F.path) + 1);
	first = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);
	CHECK_EQ(connect(first, (struct sockaddr *)&sa, sizeof(sa)), 0);
	probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);
	CHECK(connect(probe, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno == EAGAIN);
	close(probe);
	attach_bounded(sizeof(r.a), 300, 5000, &r);
	CHECK_EQ(r.ret, -ETIMEDOUT);
	CHECK(r.took >= 0.29 && r.took < 3.0);
	close(first);
	fake_stop();
}

static void case_attach_timeout_default(void)
{
	struct attach_run r;

	fake_start(16, 1, 0, NULL);
	/* a caller built before the field: its timeout_ms is not read */
	attach_bounded(offsetof(struct cep_cm_attach_attr, timeout_ms), 1, 20000, &r);
	CHECK_EQ(r.ret, -ETIMEDOUT);
	CHECK(r.took >= 9.9 && r.took < 15.0);
	/* one byte short of the old struct: refused */
	attach_bounded(offsetof(struct cep_cm_attach_attr, timeout_ms) - 1, 0, 5000, &r);
	CHECK_EQ(r.ret, -EINVAL);
	fake_stop();
}

/* ---- the HELLO's identity ------------------------------------------------------------- */

/* After an attach: the HELLO's control messages as proto.h says, with or
 * without (@pidfd) the pidfd, as the client sent them (@as_sent) and as
 * the fake received them. */
static void check_hello_one(int pidfd, int as_sent)
{
	struct hello_seen s;

	if (as_sent) {
		pthread_mutex_lock(&sent_mu);
		s = sent;
		pthread_mutex_unlock(&sent_mu);
	} else {
		pthread_mutex_lock(&F.mu);
		s = F.seen;
		pthread_mutex_unlock(&F.mu);
	}
	printf("the HELLO as %s\n", as_sent ? "sent" : "received");
	CHECK(s.got);
	CHECK_EQ(s.version, CEPD_VERSION);
	CHECK_EQ(s.ncmsg, pidfd ? 2 : 1);
	CHECK_EQ(s.types[0], SCM_CREDENTIALS);
	if (pidfd)
		CHECK_EQ(s.types[1], SCM_RIGHTS);
	CHECK(s.has_cred);
	CHECK_EQ(s.cred.pid, getpid());
	CHECK_EQ(s.cred.uid, geteuid());
	CHECK_EQ(s.cred.gid, getegid());
	CHECK_EQ(s.nfds, pidfd ? 1 : 0);
	CHECK_EQ(s.pidfd_of_us, pidfd);
}

static void check_hello(int pidfd)
{
	check_hello_one(pidfd, 1);
	check_hello_one(pidfd, 0);
}

static void case_hello_identity(void)
{
	struct cep_cm *cm;

	CHECK_EQ(count_pidfds(), 0);
	fake_start(16, 1, 1, NULL);
	cm = attach_fake();
	check_hello(1);
	/* ours closed after the send, the fake's after its check */
	CHECK_EQ(count_pidfds(), 0);
	CHECK_EQ(cep_cm_destroy(cm), 0);
	fake_stop();
}

/* pidfd_open fails with ENOSYS from here on, as on a kernel before 5.3. */
static int no_pidfd_open(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0)) {
		perror("seccomp");
		return -1;
	}
	return syscall(SYS_pidfd_open, getpid(), 0) < 0 && errno == ENOSYS ? 0 : -1;
}

static int case_hello_nopidfd(void)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		struct cep_cm *cm;

		if (no_pidfd_open())
			_exit(2);
		fake_start(16, 1, 1, NULL);
		cm = attach_fake();
		check_hello(0);
		CHECK_EQ(cep_cm_destroy(cm), 0);
		fake_stop();
		_exit(check_failures ? 1 : 0);
	}
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return 0;
}

int main(int argc, char **argv)
{
	const char *c;

	if (argc != 3) {
		fprintf(stderr, "usage: %s CEPD-PATH CASE\n", argv[0]);
		return 2;
	}
	cepd_path = argv[1];
	c = argv[2];
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(c, "destroyed-after-death"))
		case_destroyed_after_death();
	else if (!strcmp(c, "destroy-refused"))
		case_destroy_refused();
	else if (!strcmp(c, "destroy-quiet"))
		case_destroy_quiet();
	else if (!strcmp(c, "destroy-quiet-cepd"))
		case_destroy_quiet_cepd();
	else if (!strcmp(c, "xrc-cepd"))
		case_xrc_cepd();
	else if (!strcmp(c, "migrate-cepd"))
		case_migrate_cepd();
	else if (!strcmp(c, "nowait-cepd"))
		case_nowait_cepd();
	else if (!strcmp(c, "call-event"))
		case_call_event();
	else if (!strcmp(c, "mc-cepd"))
		case_mc_cepd();
	else if (!strcmp(c, "path-cepd"))
		case_path_cepd();
	else if (!strcmp(c, "destroy-unsent"))
		case_destroy_unsent();
	else if (!strcmp(c, "register-refused"))
		case_register_refused();
	else if (!strcmp(c, "quiet-order-cepd"))
		case_quiet_order_cepd();
	else if (!strcmp(c, "quiet-batch"))
		case_quiet_batch();
	else if (!strcmp(c, "destroy-race"))
		case_destroy_race(200);
	else if (!strcmp(c, "attach-timeout-hello"))
		case_attach_timeout_hello();
	else if (!strcmp(c, "attach-timeout-backlog"))
		case_attach_timeout_backlog();
	else if (!strcmp(c, "attach-timeout-default"))
		case_attach_timeout_default();
	else if (!strcmp(c, "hello-identity"))
		case_hello_identity();
	else if (!strcmp(c, "hello-nopidfd"))
		case_hello_nopidfd();
	else {
		fprintf(stderr, "unknown case %s\n", c);
		return 2;
	}
	return check_done(c);
}
