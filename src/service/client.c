/* SPDX-License-Identifier: MIT */
/*
 * cepd's client sessions: a connection's life from accept to its end, its
 * HELLO, the thread that reads its requests, and its handle table.
 *
 * Guarantees:
 * - A client names only its own ids: handles index its own table (with a
 *   generation, so a stale handle misses), never a pointer.
 * - A packet that is not a request at all (short, truncated) ends that
 *   client only.
 * - When a client's socket ends (exit, kill -9, a stream gone bad) its ids
 *   are destroyed as the engine destroys them (REJ while connecting, DREQ
 *   when established, listeners gone) and its QPs with cep_cm_qp_destroy,
 *   so its peers learn at once; its table empties as the DESTROYED events
 *   come back.
 * Threads: one per client reads its requests and answers them (so a slow
 * client slows itself only).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "service/access.h"
#include "service/addr.h"
#include "service/cepd.h"

/* ---- clients: references, handles ------------------------------------- */

void client_put(struct client *c)
{
	struct chunk *k;

	/* acq_rel: every use of c by a dropper happens before the free */
	if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
		return;
	while ((k = c->qhead) != NULL) {
		c->qhead = k->next;
		free(k);
	}
	if (c->qbytes)
		acct_uncharge(c->acct, ACCT_EVENT_BYTES, c->qbytes);
	if (c->ac)
		addr_client_close(c->ac);
	ident_fini(&c->id);
	pthread_mutex_lock(&svc.lk);
	*c->aprev = c->anext;
	if (c->anext)
		c->anext->aprev = c->aprev;
	pthread_mutex_unlock(&svc.lk);
	/* release: this client's last use of the ports happens before a
	 * shutdown that reads 0 destroys them (its acquire load) */
	atomic_fetch_sub_explicit(&svc.live_clients, 1, memory_order_release);
	close(c->fd);
	pthread_mutex_destroy(&c->lk);
	free(c->slot);
	free(c->gen);
	free(c);
}

/* c->lk held. Insert @s: 0 and s->handle, or -ENOMEM / -EMFILE (the
 * client has --max-ids ids: a flood of ids or of requests to its
 * listeners stops at it and costs the others nothing). */
int handle_add(struct client *c, struct sid *s)
{
	uint32_t i;

	if (c->nids >= cepd_limits.ids_per_client)
		return -EMFILE;
	if (c->nids == c->cap) {
		uint32_t ncap = c->cap ? c->cap * 2 : 64;
		struct sid **ns;
		uint16_t *ng;

		if (ncap > HANDLE_IDX_MASK + 1)
			return -EMFILE;
		ns = realloc(c->slot, ncap * sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		c->slot = ns;
		ng = realloc(c->gen, ncap * sizeof(*ng));
		if (!ng)
			return -ENOMEM;
		c->gen = ng;
		for (i = c->cap; i < ncap; i++) {
			ns[i] = NULL;
			ng[i] = 1;
		}
		c->free_hint = c->cap;
		c->cap = ncap;
	}
	for (i = c->free_hint; c->slot[i]; i = (i + 1) % c->cap)
		;
	c->slot[i] = s;
	c->free_hint = (i + 1) % c->cap;
	c->nids++;
	s->handle = ((uint32_t)c->gen[i] << HANDLE_IDX_BITS) | i;
	return 0;
}

/* c->lk held. Handle @h no longer names anything (its sid is not read:
 * it may be freed already). */
void handle_del(struct client *c, uint32_t h)
{
	uint32_t i = h & HANDLE_IDX_MASK;

	if (!h || i >= c->cap || !c->slot[i] || c->gen[i] != (h >> HANDLE_IDX_BITS))
		return;
	c->slot[i] = NULL;
	/* a stale handle of this slot no longer matches; never generation 0,
	 * so no handle is 0 */
	if (++c->gen[i] >= (1u << (32 - HANDLE_IDX_BITS)))
		c->gen[i] = 1;
	c->nids--;
}

/* c->lk held. The live sid @h names, or NULL. */
struct sid *handle_get(struct client *c, uint32_t h)
{
	uint32_t i = h & HANDLE_IDX_MASK;
	struct sid *s;

	if (i >= c->cap || c->gen[i] != (h >> HANDLE_IDX_BITS))
		return NULL;
	s = c->slot[i];
	return s && !s->gone ? s : NULL;
}

struct sid *sid_new(struct client *c, struct cep_cm_id *id)
{
	struct sid *s;

	/* a live client's account exists: its thread drops its count only
	 * after marking it dead under c->lk, which the caller holds */
	/* an id is its uid's from here until the engine holds nothing of it
	 * (sid_free) */
	if (acct_charge(c->acct, ACCT_IDS, 1))
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s) {
		acct_uncharge(c->acct, ACCT_IDS, 1);
		return NULL;
	}
	s->c = c;
	s->id = id;
	s->snext = c->sids;
	s->sprev = &c->sids;
	if (c->sids)
		c->sids->sprev = &s->snext;
	c->sids = s;
	/* relaxed: the caller holds a reference (its thread's, or the
	 * listener's sid) */
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	return s;
}

void sid_free(struct sid *s)
{
	struct client *c = s->c;

	pthread_mutex_lock(&c->lk);
	*s->sprev = s->snext;
	if (s->snext)
		s->snext->sprev = s->sprev;
	pthread_mutex_unlock(&c->lk);
	acct_uncharge(c->acct, ACCT_IDS, 1);
	free(s);
	client_put(c);
}

void sids_release_all(void)
{
	for (;;) {
		struct sid *s = NULL;

		pthread_mutex_lock(&svc.lk);
		for (struct client *c = svc.all; c && !s; c = c->anext) {
			pthread_mutex_lock(&c->lk);
			s = c->sids;
			pthread_mutex_unlock(&c->lk);
		}
		pthread_mutex_unlock(&svc.lk);
		if (!s)
			return;
		sid_free(s); /* may free its client: the walk starts again */
	}
}

/* c->lk held. The client is broken or must go: its reader wakes on the
 * shut socket and cleans up. */
void client_kill_locked(struct client *c, const char *why)
{
	if (!c->dead && svc.verbose)
		logmsg("client %u (pid %d): %s", c->serial, (int)c->id.pid, why);
	c->dead = 1;
	shutdown(c->fd, SHUT_RDWR);
}

/* ---- a client's life ----------------------------------------------------- */

/* The HELLO in @buf (@len bytes) with its credentials @cred and passed fd:
 * who the client is, which port it uses. 0, or -errno after answering
 * (the client is then dropped). */
static int do_hello(struct client *c, const uint8_t *buf, size_t len,
		    const struct ucred *cred, int passed_fd)
{
	const struct cepd_hello *h = (const struct cepd_hello *)buf;
	struct cepd_hello_rep rep;
	struct port *p = NULL;
	uint64_t seq = len >= sizeof(struct cepd_hdr) ? h->h.seq : 0;
	int ret;

	if (len != sizeof(*h) || h->h.op != CEPD_HELLO || h->h.len != len ||
	    h->magic != CEPD_MAGIC) {
		if (passed_fd >= 0)
			close(passed_fd);
		return -EPROTO;
	}
	/* another protocol or ABI first: it says what it is, whoever asks */
	if (h->version != CEPD_VERSION || h->sizes[0] != sizeof(struct cep_msg) ||
	    h->sizes[1] != sizeof(struct cep_path) || h->sizes[2] != sizeof(struct cep_mad_addr) ||
	    h->sizes[3] != sizeof(struct cep_cm_stats)) {
		if (passed_fd >= 0)
			close(passed_fd);
		(void)reply(c, seq, -EPROTONOSUPPORT, NULL, 0);
		return -EPROTONOSUPPORT;
	}
	if (h->flags & CEPD_HELLO_STATS) {
		/* a statistics reader is known by its uid only */
		ret = cred && cred->uid == c->id.uid ? 0 : -EPERM;
		if (passed_fd >= 0)
			close(passed_fd);
	} else {
		ret = ident_hello(&c->id, cred, passed_fd);
	}
	if (ret) {
		(void)reply(c, seq, ret, NULL, 0);
		return ret;
	}
	memset(&rep, 0, sizeof(rep));
	rep.version = CEPD_VERSION;
	if (!(h->flags & CEPD_HELLO_STATS)) {
		if (memchr(h->device, 0, sizeof(h->device)) == NULL) {
			(void)reply(c, seq, -EINVAL, NULL, 0);
			return -EINVAL;
		}
		for (unsigned i = 0; i < svc.nports && !p; i++)
			if (h->device[0] ? !strcmp(svc.port[i].dev, h->device) &&
					   svc.port[i].port_num == h->port_num
					 : i == h->port_num)
				p = &svc.port[i];
		if (!p) {
			(void)reply(c, seq, -ENODEV, NULL, 0);
			return -ENODEV;
		}
		ret = addr_client_open(p, &c->id, &c->ac);
		if (ret) {
			(void)reply(c, seq, ret, NULL, 0);
			return ret;
		}
		rep.workers = cep_cm_workers(p->cm);
		rep.ca_guid = cep_cm_ca_guid(p->cm);
		rep.port = p->info;
	}
	/* under svc.lk: print_stats reads every client's port under it, a
	 * HELLO of another client's meanwhile included */
	pthread_mutex_lock(&svc.lk);
	c->port = p;
	pthread_mutex_unlock(&svc.lk);
	return reply(c, seq, 0, &rep, sizeof(rep));
}

/* The client's socket ended: destroy what it left, as the kernel's ucma
 * does when its file closes. */
static void client_cleanup(struct client *c)
{
	struct sid **ids = NULL;
	uint32_t n = 0, i;
	int lost;

	pthread_mutex_lock(&c->lk);
	c->dead = 1; /* no event out, a REQ to its listeners is refused */
	if (c->nids)
		ids = malloc(c->nids * sizeof(*ids));
	for (i = 0; ids && i < c->cap; i++)
		if (c->slot[i] && !c->slot[i]->gone) {
			c->slot[i]->gone = 1;
			ids[n++] = c->slot[i];
		}
	lost = c->nids && !ids;
	pthread_mutex_unlock(&c->lk);
	if (lost)
		logmsg("client %u: out of memory: its ids stay until shutdown", c->serial);
	/* a sid stays alive until its DESTROYED, which only this destroy
	 * causes (so it is not touched after it); its service IDs are free
	 * from here (a REQ to the dying listener is refused meanwhile) */
	for (i = 0; i < n; i++) {
		access_unlisten(ids[i]);
		(void)cep_cm_destroy_id(ids[i]->id);
	}
	free(ids);
	qps_client_gone(c);
	mc_client_gone(c); /* its joins end, as a closed file's in the kernel */
}

/* One message of the client into @buf: its length (greater than
 * CEPD_MSG_MAX when truncated), 0 at the end, -errno. With @cred (the
 * HELLO): the credentials the kernel attached (*has_cred) and a passed
 * fd (*fd, -1 if none; any other passed fd is closed). */
static ssize_t recv_msg(struct client *c, uint8_t *buf, struct ucred *cred, int *has_cred,
			int *fd)
{
	union {
		struct cmsghdr h;
		uint8_t b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = CEPD_MSG_MAX };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (cred) {
		m.msg_control = ctl.b;
		m.msg_controllen = sizeof(ctl.b);
		*has_cred = 0;
		*fd = -1;
	}
	n = recvmsg(c->fd, &m, MSG_TRUNC | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	if (!cred)
		return n;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
		if (h->cmsg_level != SOL_SOCKET)
			continue;
		if (h->cmsg_type == SCM_CREDENTIALS && h->cmsg_len == CMSG_LEN(sizeof(*cred))) {
			memcpy(cred, CMSG_DATA(h), sizeof(*cred));
			*has_cred = 1;
		} else if (h->cmsg_type == SCM_RIGHTS) {
			size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (size_t i = 0; i < k; i++) {
				int f;

				memcpy(&f, CMSG_DATA(h) + i * sizeof(int), sizeof(f));
				if (*fd < 0 && k == 1)
					*fd = f;
				else
					close(f); /* only one fd, the pidfd, is ever taken */
			}
		}
	}
	return n;
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void *client_thread(void *arg)
{
	struct client *c = arg;
	uint8_t *buf = malloc(CEPD_MSG_MAX);
	struct timespec born;
	int hello = 0;

	clock_gettime(CLOCK_MONOTONIC, &born);
	/* The thread sleeps in recv until the socket has something: a
	 * request, or its end (shutdown_all shuts it). Before HELLO the
	 * receive timeout is what is left of hello_ms; after, none (events
	 * that wait for a look are the main thread's: pend_look). */
	while (buf) {
		struct ucred cred;
		int has_cred = 0, fd = -1, zero = 0;
		ssize_t n;

		if (!hello) {
			long left = (long)cepd_limits.hello_ms - ms_since(&born);
			struct timeval tv;

			if (left <= 0) {
				if (svc.verbose)
					logmsg("client %u (pid %d): no HELLO in %u ms: dropped",
					       c->serial, (int)c->id.pid, cepd_limits.hello_ms);
				break;
			}
			tv.tv_sec = left / 1000;
			tv.tv_usec = (left % 1000) * 1000;
			(void)setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		}
		n = recv_msg(c, buf, hello ? NULL : &cred, &has_cred, &fd);
		if (n == -EINTR || n == -EAGAIN || n == -EWOULDBLOCK)
			continue; /* before HELLO: its deadline, above */
		if (n <= 0) {
			if (fd >= 0)
				close(fd);
			break;
		}
		if ((size_t)n > CEPD_MSG_MAX || (size_t)n < sizeof(struct cepd_hdr)) {
			if (fd >= 0)
				close(fd);
			atomic_fetch_add_explicit(&svc.bad_messages, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&c->bad, 1, memory_order_relaxed);
			if ((size_t)n > CEPD_MSG_MAX && hello) { /* truncated: answer its seq */
				(void)reply(c, ((struct cepd_hdr *)buf)->seq, -EMSGSIZE, NULL, 0);
				continue;
			}
			break; /* not even a header: the stream is not ours */
		}
		if (!hello) {
			if (do_hello(c, buf, (size_t)n, has_cred ? &cred : NULL, fd))
				break;
			hello = 1;
			/* credentials were for the HELLO only; from now on recv
			 * waits without a timeout (zero: none) */
			(void)setsockopt(c->fd, SOL_SOCKET, SO_PASSCRED, &zero, sizeof(zero));
			(void)setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 0, 0 },
					 sizeof(struct timeval));
			continue;
		}
		if (((struct cepd_hdr *)buf)->op == CEPD_HELLO) {
			(void)reply(c, ((struct cepd_hdr *)buf)->seq, -EISCONN, NULL, 0);
			continue;
		}
		handle_request(c, buf, (size_t)n);
	}
	free(buf);
	if (c->port)
		client_cleanup(c);
	else {
		pthread_mutex_lock(&c->lk);
		c->dead = 1;
		pthread_mutex_unlock(&c->lk);
	}
	pthread_mutex_lock(&svc.lk);
	for (struct client **pp = &svc.clients; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	svc.nclients--;
	pthread_mutex_unlock(&svc.lk);
	if (svc.verbose)
		logmsg("client %u (pid %d) gone", c->serial, (int)c->id.pid);
	/* the uid's client count; its remaining charges (ids still lingering
	 * in the engine, queued events) keep the account */
	acct_client_put(c->acct);
	client_put(c);
	return NULL;
}

/* Refuse a connection at once with @err as the HELLO's answer (seq 1,
 * what cepd_hello_init gives), without reading it. */
static void refuse(int fd, int err)
{
	struct cepd_rep r;

	memset(&r, 0, sizeof(r));
	r.h.op = CEPD_REPLY;
	r.h.len = sizeof(r);
	r.h.seq = 1;
	r.ret = err;
	(void)send(fd, &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
	atomic_fetch_add_explicit(&svc.clients_refused, 1, memory_order_relaxed);
}

/* Take the connection @fd (accepted): a client with its own thread, or
 * refused (over its uid's client limit, its identity unknown). */
void accept_client(int fd)
{
	struct client *c;
	int sndbuf = 4 << 20;
	pthread_attr_t ta;
	pthread_t t;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c) {
		refuse(fd, -ENOMEM);
		return;
	}
	ret = ident_accept(fd, &c->id);
	if (!ret)
		ret = acct_client_get(c->id.uid, &c->acct);
	if (ret) {
		if (svc.verbose)
			logmsg("connection of pid %d uid %u refused: %s", (int)c->id.pid,
			       (unsigned)c->id.uid, strerror(-ret));
		ident_fini(&c->id);
		free(c);
		refuse(fd, ret);
		return;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	c->fd = fd;
	pthread_mutex_init(&c->lk, NULL);
	atomic_init(&c->refs, 1);
	atomic_fetch_add_explicit(&svc.live_clients, 1, memory_order_relaxed);
	pthread_mutex_lock(&svc.lk);
	c->serial = ++svc.serial;
	c->next = svc.clients;
	svc.clients = c;
	svc.nclients++;
	c->anext = svc.all;
	c->aprev = &svc.all;
	if (svc.all)
		svc.all->aprev = &c->anext;
	svc.all = c;
	pthread_mutex_unlock(&svc.lk);
	atomic_fetch_add_explicit(&svc.clients_total, 1, memory_order_relaxed);
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &ta, client_thread, c)) {
		pthread_mutex_lock(&svc.lk);
		for (struct client **pp = &svc.clients; *pp; pp = &(*pp)->next)
			if (*pp == c) {
				*pp = c->next;
				break;
			}
		svc.nclients--;
		pthread_mutex_unlock(&svc.lk);
		logmsg("no thread for a client: dropped");
		acct_client_put(c->acct);
		client_put(c);
	}
	pthread_attr_destroy(&ta);
}
