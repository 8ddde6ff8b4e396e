/* SPDX-License-Identifier: MIT */
/*
 * Each port's registry of the QPNs its clients registered (cepd.h, qps_*):
 * a hash by number under port->lk, every entry also on its client's list.
 *
 * Guarantees:
 * - A QPN is registered by at most one client of a port, and the engine
 *   holds it exactly while the registry does (both change under port->lk).
 * - On an RDMA port a QPN is the client's only while the kernel's RDMA
 *   resource tracking says its process owns the QP (qp_owner.h): checked
 *   at registration and whenever a request names the QP (qps_named). A
 *   registration the kernel no longer backs is forgotten: when another
 *   process registers the number the kernel gave it (the holder's QP was
 *   destroyed behind cepd's back), or when the holder names it. Another
 *   client of the holder's own (living) process gets -EEXIST: the kernel
 *   names a process, not a client, so nothing shows the holder's stale.
 *   Forgetting destroys the QPN in the engine, so a connection bound to
 *   the dead QP ends (DREQ) as the kernel's destroy would have ended it.
 * - On the fabric there is no kernel: the first registrant holds a QPN
 *   until it destroys it or goes.
 * - Charges: a registered QPN is charged to its client's uid (acct.h)
 *   and counts against the client's --max-ids.
 * The kernel check (netlink, blocking) runs without port->lk, except on
 * the rare path that takes a QPN from another client, which checks again
 * under the lock so that no registration in between is lost.
 */
#include <errno.h>
#include <stdlib.h>

#include "service/cepd.h"
#ifdef CEPD_HAVE_QP_OWNER
#include "service/qp_owner.h"
#endif

struct qpent {
	uint32_t qpn;
	struct client *c;
	struct qpent *hnext;             /* port->lk: hash chain */
	struct qpent *cnext, **cprev;    /* port->lk: the client's list */
};

/* Whether the kernel says @c's process owns QP @qpn now: 0; -EPERM
 * (another process's or the kernel's, or @c's process is gone); -ENOENT
 * (no such QP); -ESRCH (the QP's creating thread has exited, so the
 * kernel names no owner: cepd cannot tell whose it is); or the check's
 * error. Always 0 on the fabric. */
static int kernel_owned(struct client *c, uint32_t qpn)
{
	if (!c->port->dev[0])
		return 0;
#ifdef CEPD_HAVE_QP_OWNER
	{
		pid_t owner;
		int ret = cepd_qp_owner(c->port->dev, qpn, c->id.pid, &owner);

		if (ret)
			return ret;
		/* alive after the answer: the pid was our client's when the
		 * kernel named it (a pid is not reused while its process lives) */
		return owner == c->id.pid && ident_alive(&c->id) ? 0 : -EPERM;
	}
#else
	return 0; /* built without the netlink check: first registrant */
#endif
}

static uint32_t bucket(const struct port *p, uint32_t qpn)
{
	return (qpn * 2654435761u) & (p->qpnb - 1);
}

/* port->lk held. */
static struct qpent *find(struct port *p, uint32_t qpn)
{
	struct qpent *e;

	if (!p->qpnb)
		return NULL;
	for (e = p->qpb[bucket(p, qpn)]; e && e->qpn != qpn; e = e->hnext)
		;
	return e;
}

/* port->lk held: double the buckets when they are full. -ENOMEM. */
static int grow(struct port *p)
{
	uint32_t nb = p->qpnb ? p->qpnb * 2 : 64;
	struct qpent **b;

	if (p->nqp < p->qpnb)
		return 0;
	b = calloc(nb, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->qpnb; i++)
		while (p->qpb[i]) {
			struct qpent *e = p->qpb[i];
			uint32_t k = (e->qpn * 2654435761u) & (nb - 1);

			p->qpb[i] = e->hnext;
			e->hnext = b[k];
			b[k] = e;
		}
	free(p->qpb);
	p->qpb = b;
	p->qpnb = nb;
	return 0;
}

/* port->lk held: take @e out of both lists, uncharge, free. The caller
 * destroys the QPN in the engine. */
static void drop(struct port *p, struct qpent *e)
{
	struct qpent **pp = &p->qpb[bucket(p, e->qpn)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	*e->cprev = e->cnext;
	if (e->cnext)
		e->cnext->cprev = e->cprev;
	e->c->nqpn--;
	p->nqp--;
	acct_uncharge(e->c->acct, ACCT_QPS, 1);
	free(e);
}

int qps_register(struct client *c, uint32_t qpn)
{
	struct port *p = c->port;
	struct qpent *e, *old;
	int ret = kernel_owned(c, qpn);

	if (ret)
		return ret;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->qpn = qpn;
	e->c = c;
	pthread_mutex_lock(&p->lk);
	if (c->nqpn >= cepd_limits.ids_per_client) { /* as many QPs as ids at most */
		ret = -EMFILE;
		goto out;
	}
	old = find(p, qpn);
	if (old && (old->c == c || !p->dev[0])) {
		ret = -EEXIST; /* the client's own again, or a fabric QPN taken */
		goto out;
	}
	if (old && old->c->id.pid == c->id.pid && ident_alive(&old->c->id)) {
		/* Another client of the same living process: the kernel's
		 * answer names the process, not the client, so it proves
		 * nothing stale. The number stays its first registrant's. */
		ret = -EEXIST;
		goto out;
	}
	if (old) {
		/* The kernel said the QP is this client's, so the holder's QP
		 * is gone. Asked again under the lock: between the first
		 * answer and now nothing was registered here, so if the kernel
		 * still says so the holder's registration is stale. */
		ret = kernel_owned(c, qpn);
		if (ret)
			goto out;
		drop(p, old);
		(void)cep_cm_qp_destroy(p->cm, qpn);
	}
	ret = grow(p);
	if (!ret)
		ret = acct_charge(c->acct, ACCT_QPS, 1) ? -EMFILE : 0;
	if (ret)
		goto out;
	ret = cep_cm_qp_register(p->cm, qpn);
	if (ret) {
		acct_uncharge(c->acct, ACCT_QPS, 1);
		goto out;
	}
	e->hnext = p->qpb[bucket(p, qpn)];
	p->qpb[bucket(p, qpn)] = e;
	e->cnext = c->qps;
	e->cprev = &c->qps;
	if (c->qps)
		c->qps->cprev = &e->cnext;
	c->qps = e;
	c->nqpn++;
	p->nqp++;
	e = NULL;
out:
	pthread_mutex_unlock(&p->lk);
	free(e);
	return ret;
}

int qps_destroy(struct client *c, uint32_t qpn)
{
	struct port *p = c->port;
	struct qpent *e;
	int ret;

	pthread_mutex_lock(&p->lk);
	e = find(p, qpn);
	if (!e || e->c != c) {
		pthread_mutex_unlock(&p->lk);
		return -ENOENT; /* not registered, or another client's */
	}
	drop(p, e);
	/* under the lock: a registration of the same number waits for the
	 * engine to have forgotten it */
	ret = cep_cm_qp_destroy(p->cm, qpn);
	pthread_mutex_unlock(&p->lk);
	return ret;
}

int qps_mine(struct client *c, uint32_t qpn)
{
	struct qpent *e;
	int mine;

	pthread_mutex_lock(&c->port->lk);
	e = find(c->port, qpn);
	mine = e && e->c == c;
	pthread_mutex_unlock(&c->port->lk);
	return mine;
}

int qps_named(struct client *c, uint32_t qpn)
{
	struct port *p = c->port;
	struct qpent *e;
	int ret;

	if (!qps_mine(c, qpn))
		return -ENOENT;
	ret = kernel_owned(c, qpn);
	if (ret == -ESRCH)
		return -EPERM; /* unconfirmed, but maybe still the client's: kept */
	if (ret != -EPERM && ret != -ENOENT)
		return ret; /* 0, or the check could not answer: nothing forgotten */
	/* the client's QP is gone: forget the number (its binding ends) */
	pthread_mutex_lock(&p->lk);
	e = find(p, qpn);
	if (e && e->c == c) {
		drop(p, e);
		(void)cep_cm_qp_destroy(p->cm, qpn);
	}
	pthread_mutex_unlock(&p->lk);
	return ret;
}

void qps_client_gone(struct client *c)
{
	struct port *p = c->port;

	pthread_mutex_lock(&p->lk);
	while (c->qps) {
		uint32_t qpn = c->qps->qpn;

		drop(p, c->qps);
		(void)cep_cm_qp_destroy(p->cm, qpn);
	}
	pthread_mutex_unlock(&p->lk);
}

void qps_port_init(struct port *p)
{
	pthread_mutex_init(&p->lk, NULL);
}

void qps_port_fini(struct port *p)
{
	free(p->qpb);
	p->qpb = NULL;
	p->qpnb = p->nqp = 0;
	pthread_mutex_destroy(&p->lk);
}
