/* SPDX-License-Identifier: MIT */
/*
 * cepd's multicast memberships (MC_JOIN, MC_LEAVE; proto.h): on an
 * InfiniBand port a join is the port's membership at the SA, which the
 * node must count as one - the kernel's ib_multicast counts every
 * process's joins per group and JoinState, sends the SA a Set for the
 * first and a Delete after the last, and ends a process's joins when its
 * file closes. cepd does the same for its clients: it holds the port's SA
 * client, builds each Set itself (src/sa/mc_join.h: nothing of the
 * client's but the fields access_mc checked - group, port GID, P_Key,
 * rdma_cm's or IPoIB's Q_Key, full or send-only full member), counts the
 * joins of all its clients, and when a client ends (its socket closes,
 * whatever killed it) takes its joins out of the counts, sending the
 * Deletes that were its to send.
 *
 * Guarantees:
 * - A group's JoinState bit is the port's at the SA from the first
 *   counted join that the SA accepted until the last one of any client
 *   ends; a client's leave ends only its own joins (EADDRNOTAVAIL for one
 *   it does not hold), and a client's end leaves none of its joins counted.
 * - A client holds at most MC_MAX_PER_CLIENT distinct memberships, each
 *   joined at most MC_MAX_JOINS times (ENOBUFS beyond): what a client
 *   makes cepd hold is bounded.
 *
 * Locking: port->mc_lk guards the port's groups and its clients'
 * membership lists (the SA client is sa.c's, port_sa); it is held across
 * the SA's requests (a join or a leave waits for the SA, at most its
 * attempts times its timeout, as the kernel's waits for ib_sa), so one
 * port's joins go to the SA one at a time. It is taken under no other
 * lock; under it only port->sa_lk, a leaf (port_sa). The counts --stats
 * prints are atomics, read without it. A client's list changes only on
 * its own thread (its requests, then its end).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cep/sa.h>

#include "sa/mc_join.h"
#include "service/cepd.h"

#define MC_MAX_PER_CLIENT 1024u
#define MC_MAX_JOINS (1u << 20)

/* One group of the port that some client joined: the node's joins per
 * JoinState bit. port->mc_lk. */
struct mc_group {
	struct mc_group *next;
	uint8_t mgid[16];
	uint8_t port_gid[16];
	uint64_t members[4];
	struct cep_sa_mcmember rec;    /* the SA's answer to the last Set */
};

void mc_port_init(struct port *p)
{
	pthread_mutex_init(&p->mc_lk, NULL);
	p->groups = NULL;
	atomic_init(&p->nmc, 0);
}

void mc_port_fini(struct port *p)
{
	struct mc_group *g;
	struct cep_sa *sa;

	/* Every client has ended, so no group has a member left - unless a
	 * client's thread did not end within the shutdown's wait: its joins
	 * end with the service all the same (before sa_port_fini). */
	while ((g = p->groups)) {
		p->groups = g->next;
		for (unsigned b = 0; b < 4; b++)
			if (g->members[b] && !port_sa(p, &sa))
				cep_mc_sa_leave(sa, g->mgid, g->port_gid, b);
		free(g);
	}
	pthread_mutex_destroy(&p->mc_lk);
}

/* Under p->mc_lk. */
static struct mc_group *group_find(struct port *p, const uint8_t mgid[16],
				   const uint8_t port_gid[16])
{
	struct mc_group *g;

	for (g = p->groups; g; g = g->next)
		if (!memcmp(g->mgid, mgid, 16) && !memcmp(g->port_gid, port_gid, 16))
			break;
	return g;
}

/* Under p->mc_lk. */
static struct mc_ent *ent_find(struct client *c, const uint8_t mgid[16],
			       const uint8_t port_gid[16], unsigned bit)
{
	struct mc_ent *e;

	for (e = c->mcs; e; e = e->next)
		if (e->bit == bit && !memcmp(e->mgid, mgid, 16) && !memcmp(e->port_gid, port_gid, 16))
			break;
	return e;
}

/* Under p->mc_lk: @n joins of @g's bit @bit end; the last sends the SA a
 * Delete, and a group without members goes. */
static void group_drop(struct port *p, struct mc_group *g, unsigned bit, uint64_t n)
{
	struct mc_group **pp;
	struct cep_sa *sa;

	g->members[bit] -= n;
	/* the SA client is open: the join that counted opened it */
	if (!g->members[bit] && !port_sa(p, &sa))
		cep_mc_sa_leave(sa, g->mgid, g->port_gid, bit);
	if (g->members[0] || g->members[1] || g->members[2] || g->members[3])
		return;
	for (pp = &p->groups; *pp != g; pp = &(*pp)->next)
		;
	*pp = g->next;
	free(g);
}

int mc_join(struct client *c, const struct cepd_mc *m, struct cepd_mc_rep *out)
{
	struct port *p = c->port;
	struct mc_group *g = NULL, *ng = calloc(1, sizeof(*ng));
	struct mc_ent *e = NULL, *ne = calloc(1, sizeof(*ne));
	struct cep_sa_mcmember rec;
	struct cep_sa *sa = NULL;
	int ret = 0, status = 0;

	memset(out, 0, sizeof(*out));
	if (!ng || !ne) {
		free(ng);
		free(ne);
		return -ENOMEM;
	}
	pthread_mutex_lock(&p->mc_lk);
	if (!cep_mc_zero16(m->mgid)) {
		e = ent_find(c, m->mgid, m->port_gid, m->bit);
		g = group_find(p, m->mgid, m->port_gid);
	}
	if (e ? e->joins >= MC_MAX_JOINS : c->nmcs >= MC_MAX_PER_CLIENT) {
		ret = -ENOBUFS;
		goto out;
	}
	if (g && g->members[m->bit]) {
		rec = g->rec; /* the port is a member: nothing to ask */
		goto joined;
	}
	ret = port_sa(p, &sa);
	if (ret)
		goto out;
	ret = cep_mc_sa_join(sa, m->mgid, m->port_gid, m->pkey, m->qkey, m->bit, &status,
			     &rec);
	if (ret || status)
		goto out;
	if (!g)
		g = group_find(p, rec.mgid, m->port_gid);
	if (!e) /* a group the SA named: the client may hold it already */
		e = ent_find(c, rec.mgid, m->port_gid, m->bit);
	if (!g) {
		g = ng;
		ng = NULL;
		memcpy(g->mgid, rec.mgid, 16);
		memcpy(g->port_gid, m->port_gid, 16);
		g->next = p->groups;
		p->groups = g;
	}
	g->rec = rec;
joined:
	if (!e) {
		e = ne;
		ne = NULL;
		memcpy(e->mgid, g->mgid, 16);
		memcpy(e->port_gid, m->port_gid, 16);
		e->bit = m->bit;
		e->next = c->mcs;
		c->mcs = e;
		atomic_store_explicit(&c->nmcs, c->nmcs + 1, memory_order_relaxed);
	}
	e->joins++;
	g->members[m->bit]++;
	atomic_fetch_add_explicit(&p->nmc, 1, memory_order_relaxed);
	(void)cep_sa_mcmember_encode(&g->rec, out->rec); /* it came off the wire */
out:
	pthread_mutex_unlock(&p->mc_lk);
	out->status = status;
	free(ng);
	free(ne);
	return ret;
}

int mc_leave(struct client *c, const struct cepd_mc *m)
{
	struct port *p = c->port;
	struct mc_ent *e, **pp;
	struct mc_group *g;
	int ret = 0;

	pthread_mutex_lock(&p->mc_lk);
	e = ent_find(c, m->mgid, m->port_gid, m->bit);
	g = e ? group_find(p, m->mgid, m->port_gid) : NULL;
	if (!e || !g) { /* (a held membership's group is there) */
		ret = -EADDRNOTAVAIL;
		goto out;
	}
	if (!--e->joins) {
		for (pp = &c->mcs; *pp != e; pp = &(*pp)->next)
			;
		*pp = e->next;
		free(e);
		atomic_store_explicit(&c->nmcs, c->nmcs - 1, memory_order_relaxed);
	}
	atomic_fetch_sub_explicit(&p->nmc, 1, memory_order_relaxed);
	group_drop(p, g, m->bit, 1);
out:
	pthread_mutex_unlock(&p->mc_lk);
	return ret;
}

void mc_client_gone(struct client *c)
{
	struct port *p = c->port;
	struct mc_ent *e;
	struct mc_group *g;

	if (!p)
		return;
	pthread_mutex_lock(&p->mc_lk);
	while ((e = c->mcs)) {
		c->mcs = e->next;
		g = group_find(p, e->mgid, e->port_gid);
		if (g)
			group_drop(p, g, e->bit, e->joins);
		atomic_fetch_sub_explicit(&p->nmc, e->joins, memory_order_relaxed);
		free(e);
	}
	atomic_store_explicit(&c->nmcs, 0, memory_order_relaxed);
	pthread_mutex_unlock(&p->mc_lk);
}
