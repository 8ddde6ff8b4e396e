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
#include <unistd.h>

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
	/* release: this client's last use of the ports happens before a
	 * shutdown that reads 0 destroys them (its acquire load) */
	atomic_fetch_sub_explicit(&svc.live_clients, 1, memory_order_release);
	close(c->fd);
	pthread_mutex_destroy(&c->lk);
	free(c->slot);
	free(c->gen);
	free(c->qpn);
	free(c);
}

/* c->lk held. Insert @s: 0 and s->handle, or -ENOMEM / -EMFILE (the
 * client has svc.max_ids ids: a flood of ids or of requests to its
 * listeners stops at it and costs the others nothing). */
int handle_add(struct client *c, struct sid *s)
{
	uint32_t i;

	if (c->nids >= svc.max_ids)
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

/* c->lk held. */
void handle_del(struct client *c, struct sid *s)
{
	uint32_t i = s->handle & HANDLE_IDX_MASK;

	if (!s->handle || i >= c->cap || c->slot[i] != s)
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

/* c->lk held. The client is broken or must go: its reader wakes on the
 * shut socket and cleans up. */
void client_kill_locked(struct client *c, const char *why)
{
	if (!c->dead && svc.verbose)
		logmsg("client %u (pid %d): %s", c->serial, (int)c->pid, why);
	c->dead = 1;
	shutdown(c->fd, SHUT_RDWR);
}

/* ---- a client's life ----------------------------------------------------- */

static int do_hello(struct client *c, const uint8_t *buf, size_t len)
{
	const struct cepd_hello *h = (const struct cepd_hello *)buf;
	struct cepd_hello_rep rep;
	struct port *p = NULL;

	if (len != sizeof(*h) || h->h.op != CEPD_HELLO || h->h.len != len ||
	    h->magic != CEPD_MAGIC)
		return -EPROTO;
	if (h->version != CEPD_VERSION || h->sizes[0] != sizeof(struct cep_msg) ||
	    h->sizes[1] != sizeof(struct cep_path) || h->sizes[2] != sizeof(struct cep_mad_addr) ||
	    h->sizes[3] != sizeof(struct cep_cm_stats)) {
		(void)reply(c, h->h.seq, -EPROTONOSUPPORT, NULL, 0);
		return -EPROTONOSUPPORT;
	}
	memset(&rep, 0, sizeof(rep));
	rep.version = CEPD_VERSION;
	if (!(h->flags & CEPD_HELLO_STATS)) {
		if (memchr(h->device, 0, sizeof(h->device)) == NULL) {
			(void)reply(c, h->h.seq, -EINVAL, NULL, 0);
			return -EINVAL;
		}
		for (unsigned i = 0; i < svc.nports && !p; i++)
			if (h->device[0] ? !strcmp(svc.port[i].dev, h->device) &&
					   svc.port[i].port_num == h->port_num
					 : i == h->port_num)
				p = &svc.port[i];
		if (!p) {
			(void)reply(c, h->h.seq, -ENODEV, NULL, 0);
			return -ENODEV;
		}
		rep.workers = cep_cm_workers(p->cm);
		rep.ca_guid = cep_cm_ca_guid(p->cm);
		rep.port = p->info;
	}
	c->port = p;
	return reply(c, h->h.seq, 0, &rep, sizeof(rep));
}

/* The client's socket ended: destroy what it left, as the kernel's ucma
 * does when its file closes. */
static void client_cleanup(struct client *c)
{
	struct sid **ids = NULL;
	uint32_t *qpns = NULL;
	uint32_t n = 0, nq = 0, i;
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
	qpns = c->qpn;
	nq = c->nqpn;
	c->qpn = NULL;
	c->nqpn = c->qpcap = 0;
	lost = c->nids && !ids;
	pthread_mutex_unlock(&c->lk);
	if (lost)
		logmsg("client %u: out of memory: its ids stay until shutdown", c->serial);
	/* a sid stays alive until its DESTROYED, which only this destroy causes */
	for (i = 0; i < n; i++)
		(void)cep_cm_destroy_id(ids[i]->id);
	for (i = 0; i < nq; i++)
		(void)cep_cm_qp_destroy(c->port->cm, qpns[i]);
	free(ids);
	free(qpns);
}

static void *client_thread(void *arg)
{
	struct client *c = arg;
	uint8_t *buf = malloc(CEPD_MSG_MAX);
	int hello = 0;

	while (buf) { /* until the socket ends (shutdown_all shuts it) */
		ssize_t n;

		n = recv(c->fd, buf, CEPD_MSG_MAX, MSG_TRUNC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* the receive timeout: send events a full socket held
			 * (or a held REP_RECEIVED whose ESTABLISHED never came) */
			pthread_mutex_lock(&c->lk);
			if ((c->blocked || c->qhead) && !c->flushing) {
				c->blocked = 0;
				c->flushing = 1;
				flush_locked(c);
				c->flushing = 0;
			}
			pthread_mutex_unlock(&c->lk);
			continue;
		}
		if (n <= 0)
			break;
		if ((size_t)n > CEPD_MSG_MAX || (size_t)n < sizeof(struct cepd_hdr)) {
			atomic_fetch_add_explicit(&svc.bad_messages, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&c->bad, 1, memory_order_relaxed);
			if ((size_t)n > CEPD_MSG_MAX) { /* truncated: answer its seq */
				(void)reply(c, ((struct cepd_hdr *)buf)->seq, -EMSGSIZE, NULL, 0);
				continue;
			}
			break; /* not even a header: the stream is not ours */
		}
		if (!hello) {
			if (do_hello(c, buf, (size_t)n))
				break;
			hello = 1;
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
		logmsg("client %u (pid %d) gone", c->serial, (int)c->pid);
	client_put(c);
	return NULL;
}

void accept_client(void)
{
	struct client *c;
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	struct timeval tv = { .tv_sec = 0, .tv_usec = 100000 };
	int sndbuf = 4 << 20;
	pthread_attr_t ta;
	pthread_t t;
	int fd = accept4(svc.lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl)) {
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	c->fd = fd;
	c->pid = cr.pid;
	c->uid = cr.uid;
	pthread_mutex_init(&c->lk, NULL);
	atomic_init(&c->refs, 1);
	atomic_fetch_add_explicit(&svc.live_clients, 1, memory_order_relaxed);
	pthread_mutex_lock(&svc.lk);
	c->serial = ++svc.serial;
	c->next = svc.clients;
	svc.clients = c;
	svc.nclients++;
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
		client_put(c);
	}
	pthread_attr_destroy(&ta);
}
