/* SPDX-License-Identifier: MIT */
/*
 * What a cepd client may do (access.h). The service is a trust boundary
 * as the kernel's /dev/infiniband/rdma_cm is: any local user reaches it,
 * so it refuses what the kernel's rdma_cm refuses. Every rule is here, in
 * the order a request meets them; cepd(8), ACCESS, says the same.
 *
 * Who asks: the client's process, known by a pidfd (identity.h); its
 * capabilities are read when a request needs one, in cepd's user
 * namespace, never remembered from an earlier moment.
 *
 * Service IDs (LISTEN). rdma_cm gives unprivileged processes the IDs of
 * its port spaces only, one exact ID per listen: 0x0000000001PPxxxx with
 * PP = 06 (TCP), 11 (UDP), 3F (IB), and 0x000000000002xxxx (IPoIB), the
 * low 16 bits the port. As the kernel's cma_use_port: a port below 1024
 * needs CAP_NET_BIND_SERVICE. Any other ID, and any mask but the exact
 * one, is raw IB CM, which rdma_cm never gives user space: it needs
 * CAP_NET_ADMIN or an administrator's grant (config.h) covering every ID
 * the listen matches. A listen whose IDs overlap another client's
 * listener is refused (EADDRINUSE), whoever asks: a wildcard cannot take
 * a neighbour's requests, nor those of a server that just died. (The same
 * client may overlap itself: the engine then prefers the most specific.)
 *
 * QPs (CONNECT, ACCEPT, SIDR_REP, LAP). A QP a request names must be one
 * the client registered and, on an RDMA port, the kernel must say now
 * that the client's process owns it (qps_named): a QP destroyed behind
 * cepd's back, whose number the kernel gave to another process, is
 * forgotten, not used. A Q_Key with the high bit set is a controlled Q_Key
 * (IBTA 10.2.4): CAP_NET_RAW, as the kernel's uverbs requires to set one.
 *
 * Source addresses (CONNECT, SIDR_REQ, LAP): the GID a MAD is sent from,
 * the path's local GIDs and the P_Key must be the port's and, on RoCE,
 * of the client's network namespace (addr.h).
 *
 * Statistics: root sees every client; any other user only its own.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cep/sa.h>

#include "service/access.h"
#include "service/addr.h"
#include "service/config.h"

/* ---- who may listen on what ---------------------------------------------- */

#define PS_PORT_MASK 0xffffffffffff0000ull

/* rdma_cm's port spaces, as service IDs with port 0. */
static const uint64_t port_spaces[] = {
	0x0000000000020000ull, /* IPoIB */
	0x0000000001060000ull, /* TCP */
	0x0000000001110000ull, /* UDP */
	0x00000000013f0000ull, /* IB */
};

#define PROT_SOCK 1024 /* ports below need CAP_NET_BIND_SERVICE */

struct listener {
	struct listener *next;
	struct sid *s;
	uint64_t value, mask;          /* service_id & mask, mask */
};

/* An exact ID in one of rdma_cm's port spaces: 1 and *port, else 0. */
static int port_space_id(uint64_t sid, uint64_t mask, unsigned *port)
{
	if (mask != ~0ull)
		return 0;
	for (size_t i = 0; i < sizeof(port_spaces) / sizeof(port_spaces[0]); i++)
		if ((sid & PS_PORT_MASK) == port_spaces[i]) {
			*port = (unsigned)(sid & 0xffff);
			return 1;
		}
	return 0;
}

/* Whether the client may listen on the IDs (@sid, @mask) match. */
static int may_listen(struct client *c, uint64_t sid, uint64_t mask)
{
	uint64_t lo = sid & mask, hi = lo | ~mask;
	unsigned port;

	if (port_space_id(sid, mask, &port) && port >= PROT_SOCK)
		return 0;
	if (port_space_id(sid, mask, &port) &&
	    ident_capable(&c->id, IDENT_CAP_NET_BIND_SERVICE))
		return 0;
	if (ident_capable(&c->id, IDENT_CAP_NET_ADMIN))
		return 0;
	return config_granted(&c->id, lo, hi) ? 0 : -EACCES;
}

/* Whether some service ID matches both (v1, m1) and (v2, m2): they agree
 * on every bit both masks fix. */
static int overlap(uint64_t v1, uint64_t m1, uint64_t v2, uint64_t m2)
{
	return ((v1 ^ v2) & m1 & m2) == 0;
}

int access_listen(struct req *q)
{
	if (q->r->y == 0)
		return -EINVAL; /* the engine's answer, before any privilege is asked */
	return may_listen(q->c, q->r->x, q->r->y);
}

int access_listen_bind(struct req *q, uint64_t service_id, uint64_t mask, unsigned backlog)
{
	struct client *c = q->c;
	struct port *p = c->port;
	struct listener *l;
	int ret;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->s = q->s;
	l->value = service_id & mask;
	l->mask = mask;
	/* check, listen and record under one lock: two clients' overlapping
	 * listens cannot both pass */
	pthread_mutex_lock(&p->lk);
	for (struct listener *o = p->listeners; o; o = o->next)
		if (o->s->c != c && overlap(o->value, o->mask, l->value, l->mask)) {
			pthread_mutex_unlock(&p->lk);
			free(l);
			return -EADDRINUSE;
		}
	ret = q->s->listening ? -EINVAL : cep_cm_listen_backlog(q->s->id, service_id, mask, backlog);
	if (!ret) {
		l->next = p->listeners;
		p->listeners = l;
		q->s->listening = 1;
	}
	pthread_mutex_unlock(&p->lk);
	if (ret)
		free(l);
	return ret;
}

void access_unlisten(struct sid *s)
{
	struct port *p = s->c->port;
	struct listener *l = NULL;

	pthread_mutex_lock(&p->lk);
	if (s->listening)
		for (struct listener **pp = &p->listeners; *pp; pp = &(*pp)->next)
			if ((*pp)->s == s) {
				l = *pp;
				*pp = l->next;
				break;
			}
	s->listening = 0;
	pthread_mutex_unlock(&p->lk);
	free(l);
}

/* ---- QPs, Q_Keys and source addresses --------------------------------------- */

#define QKEY_CONTROLLED 0x80000000u

static int qkey_ok(struct client *c, uint32_t qkey)
{
	if (!(qkey & QKEY_CONTROLLED))
		return 0;
	return ident_capable(&c->id, IDENT_CAP_NET_RAW) ? 0 : -EPERM;
}

static int is_zero(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* The MAD's own source: GID index and P_Key index of @peer (the GID
 * index whether or not a GRH goes out: a field the client sets is one
 * of the port's, or refused). */
static int peer_ok(struct client *c, const struct cep_mad_addr *peer)
{
	int ret = addr_pkey_index(c->port, peer->pkey_index);

	return ret ? ret : addr_gid_index(c->port, c->ac, peer->gid_index);
}

/* A path's source: its local GID (an alternate path left all zero is none). */
static int path_ok(struct client *c, const struct cep_path *path)
{
	return addr_gid(c->port, c->ac, path->local_gid);
}

int access_connect(struct req *q)
{
	struct client *c = q->c;
	struct cepd_conn w;
	int ret;

	memcpy(&w, q->param, sizeof(w));
	ret = qps_named(c, w.qpn);
	if (!ret)
		ret = qkey_ok(c, w.qkey);
	if (!ret)
		ret = addr_pkey(c->port, w.pkey);
	if (!ret && w.has_peer)
		ret = peer_ok(c, &w.peer);
	if (!ret)
		ret = path_ok(c, &w.primary);
	if (!ret && !is_zero((const uint8_t *)&w.alternate, sizeof(w.alternate)))
		ret = path_ok(c, &w.alternate);
	return ret;
}

int access_accept(struct req *q)
{
	struct cepd_accept w;
	int ret;

	memcpy(&w, q->param, sizeof(w));
	ret = qps_named(q->c, w.qpn);
	return ret ? ret : qkey_ok(q->c, w.qkey);
}

int access_sidr_req(struct req *q)
{
	struct cepd_sidr w;
	int ret;

	memcpy(&w, q->param, sizeof(w));
	ret = addr_pkey(q->c->port, w.pkey);
	return ret ? ret : peer_ok(q->c, &w.peer);
}

int access_sidr_rep(struct req *q)
{
	int ret;

	/* only a success names a QP and Q_Key (SIDR_REP's act passes none
	 * with any other status) */
	if (q->r->a != 0)
		return 0;
	ret = qps_named(q->c, q->r->b);
	return ret ? ret : qkey_ok(q->c, q->r->c);
}

int access_lap(struct req *q)
{
	struct cep_path alt;
	/* the connection's QP must still be the client's */
	int ret = q->s->qpn ? qps_named(q->c, q->s->qpn) : 0;

	memcpy(&alt, q->param, sizeof(alt));
	return ret ? ret : path_ok(q->c, &alt);
}

int access_qp_event(struct req *q)
{
	return qps_mine(q->c, q->r->a) ? 0 : -ENOENT;
}

/* ---- multicast (mcast.c) ------------------------------------------------------ */

/* A membership as the kernel's rdma_cm lets a process ask it
 * (cma_join_ib_multicast through ucma): only on an InfiniBand port (a
 * RoCE join is the process's own IP membership: -EOPNOTSUPP); JoinState
 * full member or send-only full member (ucma's two join flags); rdma_cm's
 * Q_Key, or 0 for the IPoIB broadcast group's (RDMA_PS_IPOIB) - never one
 * of the client's choosing, a controlled one least of all; a port GID and
 * a P_Key of the port's tables that the client may use (addr.h); a
 * multicast MGID (ff00::/8), or for a join the zero one the SA replaces.
 * -EINVAL for the rest. MC_BCAST reads IPoIB's broadcast group of a P_Key
 * of the port's table (what the kernel reads from its cache for any
 * user's IPoIB id). */
int access_mc(struct req *q)
{
	struct cepd_mc m;
	int ret;

	memcpy(&m, q->param, sizeof(m));
	if (q->c->port->info.link_layer != 1)
		return -EOPNOTSUPP;
	if (q->r->h.op == CEPD_MC_BCAST) /* a Get: only the P_Key is asked */
		return addr_pkey(q->c->port, m.pkey);
	if ((m.bit != 0 && m.bit != 3) || (m.qkey && m.qkey != CEPD_MC_QKEY) || m.pad)
		return -EINVAL;
	if (m.mgid[0] != 0xff && (q->r->h.op != CEPD_MC_JOIN || !is_zero(m.mgid, 16)))
		return -EINVAL;
	ret = addr_pkey(q->c->port, m.pkey);
	return ret ? ret : addr_gid(q->c->port, q->c->ac, m.port_gid);
}

/* ---- path queries (sa.c) ------------------------------------------------------- */

#define PR_MASK_ALL ((UINT64_C(1) << 23) - 1) /* PathRecord's 23 component bits */

/* A PathRecord Get as the kernel's rdma_cm asks for a process
 * (cma_query_ib_route: from the id's own source): only on an InfiniBand
 * port (-EOPNOTSUPP); the source GID named, and one of the port's the
 * client may use; a P_Key, when named, of the port's table; no unknown
 * mask bit or flag. -EINVAL for the rest. The rest of the query (the
 * destination, service ID, traffic class, ...) is the client's to ask, as
 * the kernel's users may resolve a route to anywhere. */
int access_path(struct req *q)
{
	struct cepd_path_q w;
	struct cep_sa_path p;
	int ret;

	memcpy(&w, q->param, sizeof(w));
	if (q->c->port->info.link_layer != 1)
		return -EOPNOTSUPP;
	if ((w.comp_mask & ~PR_MASK_ALL) || !(w.comp_mask & CEP_SA_PR_SGID) ||
	    (w.flags & ~CEP_SA_QUERY_FRESH) || w.pad)
		return -EINVAL;
	cep_sa_path_decode(w.rec, &p);
	if (w.comp_mask & CEP_SA_PR_PKEY) {
		ret = addr_pkey(q->c->port, p.pkey);
		if (ret)
			return ret;
	}
	return addr_gid(q->c->port, q->c->ac, p.sgid);
}

/* ---- statistics --------------------------------------------------------------- */

bool access_sees(const struct client *reader, const struct client *c)
{
	return reader->id.uid == 0 || reader->id.uid == c->id.uid;
}
