/* SPDX-License-Identifier: MIT */
/*
 * cepd's subnet administrator: each InfiniBand port's SA client (libcep's
 * cep_sa, opened at its first use and kept until the port ends), and the
 * PathRecord queries its clients ask (PATH_QUERY): on InfiniBand the
 * kernel's rdma_cm asks the SA for rdma_resolve_route itself, and the
 * umad devices a process would need to ask it are root's, so a client of
 * cepd asks cepd. access_path has checked the query: its source is a GID
 * of the port the client may use, its P_Key one of the port's. Answers
 * come from the port's client and its path cache, which every client of
 * the port shares (as the processes of a node share the kernel's). And
 * IPoIB's broadcast group of a P_Key (MC_BCAST), whose Q_Key an IPoIB id
 * takes (the kernel's cma_set_qkey, from its cache).
 *
 * Contract: port_sa and sa_path_query on any client thread, concurrently;
 * they block for the SA (cep_sa_path_query's bounds). port->sa_lk guards
 * only the opening; the client itself is thread-safe.
 */
#include <errno.h>
#include <string.h>

#include <cep/sa.h>

#include "sa/mc_join.h"
#include "service/cepd.h"

#define SA_TIMEOUT_MS 1000u  /* per attempt (the SA client's 4 attempts) */

static int sa_open_default(struct port *p, struct cep_sa **out)
{
	struct cep_sa_attr a = { .size = sizeof(a), .dev_name = p->dev, .port_num = p->port_num,
				 .timeout_ms = SA_TIMEOUT_MS };

	/* the in-process fabric has no subnet administrator (cepd's
	 * --fabric-sa gives its port 0 one at start) */
	if (!p->dev[0])
		return -EOPNOTSUPP;
#ifdef CEPD_HAVE_UMAD
	return cep_sa_get(&a, out);
#else
	(void)a, (void)out;
	return -EOPNOTSUPP; /* no libibumad */
#endif
}

int (*port_sa_open)(struct port *p, struct cep_sa **out) = sa_open_default;

void sa_port_init(struct port *p, struct cep_sa *sa)
{
	pthread_mutex_init(&p->sa_lk, NULL);
	p->sa = sa;
}

void sa_port_fini(struct port *p)
{
	cep_sa_put(p->sa);
	p->sa = NULL;
	pthread_mutex_destroy(&p->sa_lk);
}

int port_sa(struct port *p, struct cep_sa **out)
{
	int ret = 0;

	pthread_mutex_lock(&p->sa_lk);
	if (!p->sa)
		ret = port_sa_open(p, &p->sa);
	if (ret)
		p->sa = NULL; /* the next use tries again */
	*out = p->sa;
	pthread_mutex_unlock(&p->sa_lk);
	return ret;
}

int sa_path_query(struct client *c, const struct cepd_path_q *q, uint8_t out[CEP_SA_PATH_REC_SIZE])
{
	struct cep_sa_path query, path;
	struct cep_sa *sa;
	int ret = port_sa(c->port, &sa);

	if (ret)
		return ret;
	cep_sa_path_decode(q->rec, &query);
	ret = cep_sa_path_query(sa, q->comp_mask, &query, q->flags, &path);
	if (ret)
		return ret;
	return cep_sa_path_encode(&path, out); /* it came off the wire: fits */
}

int sa_bcast(struct client *c, const struct cepd_mc *m, struct cepd_mc_rep *out)
{
	struct cep_sa_mcmember rec;
	struct cep_sa *sa;
	int ret = port_sa(c->port, &sa);

	memset(out, 0, sizeof(*out));
	if (!ret)
		ret = cep_mc_bcast_rec(sa, m->pkey, &rec);
	if (!ret)
		ret = cep_sa_mcmember_encode(&rec, out->rec); /* off the wire: fits */
	return ret;
}
