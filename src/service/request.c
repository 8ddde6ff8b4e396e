/* SPDX-License-Identifier: MIT */
/*
 * cepd's requests: each request of a client, checked whole
 * (cepd_req_check) before it acts, then carried out with the engine's
 * public calls on the client's thread; a bad one gets an error reply and
 * changes nothing. Its QPNs are its own: registered by it (fabric ports:
 * the engine's -EEXIST refuses another client's), and on RDMA ports owned
 * by its pid (qp_check()).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#ifdef CEPD_HAVE_UMAD
#include <cep/verbs.h>
#include <infiniband/verbs.h>
#endif
#ifdef CEPD_HAVE_QP_OWNER
#include "service/qp_owner.h"
#endif
#include "service/cepd.h"

/* ---- requests ------------------------------------------------------------ */

int reply(struct client *c, uint64_t seq, int ret, const void *payload, size_t len)
{
	_Alignas(8) uint8_t buf[sizeof(struct cepd_rep) + 4096];
	struct cepd_rep *r = (struct cepd_rep *)buf;
	ssize_t n;

	if (len > sizeof(buf) - sizeof(*r))
		len = sizeof(buf) - sizeof(*r);
	memset(r, 0, sizeof(*r));
	r->h.op = CEPD_REPLY;
	r->h.seq = seq;
	r->h.len = (uint32_t)(sizeof(*r) + len);
	r->ret = ret;
	if (len)
		memcpy(buf + sizeof(*r), payload, len);
	do
		n = send(c->fd, buf, r->h.len, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : 0;
}

/* c->lk held. */
static int qp_mine(struct client *c, uint32_t qpn)
{
	for (uint32_t i = 0; i < c->nqpn; i++)
		if (c->qpn[i] == qpn)
			return 1;
	return 0;
}

/* Whether @c may register @qpn on its port: on an RDMA port, the kernel's
 * resource tracking must name the client's pid as the QP's owner; on the
 * fabric a QPN is the first registrant's (the engine's -EEXIST). 0 or
 * -EPERM (owned by another process or the kernel) / -ENOENT (no such QP)
 * / the check's error. Blocking (netlink): the client's thread only. */
static int qp_check(struct client *c, uint32_t qpn)
{
	if (!c->port->dev[0])
		return 0;
#ifdef CEPD_HAVE_QP_OWNER
	{
		pid_t owner;
		int ret = cepd_qp_owner(c->port->dev, qpn, &owner);

		if (ret)
			return ret;
		return owner == c->pid ? 0 : -EPERM;
	}
#else
	/* built without the netlink check: a QPN is the first registrant's */
	return 0;
#endif
}

static int do_qp_register(struct client *c, uint32_t qpn)
{
	uint32_t *nq;
	int ret = qp_check(c, qpn);

	if (ret)
		return ret;
	pthread_mutex_lock(&c->lk);
	if (c->nqpn >= svc.max_ids) { /* as many QPs as ids at most */
		pthread_mutex_unlock(&c->lk);
		return -EMFILE;
	}
	if (c->nqpn == c->qpcap) {
		uint32_t ncap = c->qpcap ? c->qpcap * 2 : 64;

		nq = realloc(c->qpn, ncap * sizeof(*nq));
		if (!nq) {
			pthread_mutex_unlock(&c->lk);
			return -ENOMEM;
		}
		c->qpn = nq;
		c->qpcap = ncap;
	}
	pthread_mutex_unlock(&c->lk);
	ret = cep_cm_qp_register(c->port->cm, qpn);
	if (ret)
		return ret;
	pthread_mutex_lock(&c->lk);
	c->qpn[c->nqpn++] = qpn;
	pthread_mutex_unlock(&c->lk);
	return 0;
}

static int do_qp_destroy(struct client *c, uint32_t qpn)
{
	uint32_t i;

	pthread_mutex_lock(&c->lk);
	for (i = 0; i < c->nqpn && c->qpn[i] != qpn; i++)
		;
	if (i == c->nqpn) {
		pthread_mutex_unlock(&c->lk);
		return -ENOENT; /* not registered, or another client's */
	}
	c->qpn[i] = c->qpn[--c->nqpn];
	pthread_mutex_unlock(&c->lk);
	return cep_cm_qp_destroy(c->port->cm, qpn);
}

static int do_create_id(struct client *c, struct cepd_id_rep *out)
{
	struct sid *s = calloc(1, sizeof(*s));
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = sid_handler, .context = s };
	int ret;

	if (!s)
		return -ENOMEM;
	s->c = c;
	pthread_mutex_lock(&c->lk);
	ret = handle_add(c, s);
	s->gone = 1; /* named by nothing until it has its id */
	pthread_mutex_unlock(&c->lk);
	if (ret) {
		free(s);
		return ret;
	}
	/* relaxed: the client's thread holds its own reference */
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	ret = cep_cm_create_id(c->port->cm, &ia, &s->id);
	pthread_mutex_lock(&c->lk);
	if (ret)
		handle_del(c, s);
	else
		s->gone = 0;
	pthread_mutex_unlock(&c->lk);
	if (ret) {
		free(s);
		client_put(c);
		return ret;
	}
	out->handle = s->handle;
	out->local_comm_id = cep_cm_id_local_comm_id(s->id);
	return 0;
}

void handle_request(struct client *c, const uint8_t *buf, size_t len)
{
	const struct cepd_req *r = (const struct cepd_req *)buf;
	const uint8_t *param = buf + sizeof(*r);
	const uint8_t *pd, *aux;
	struct sid *s = NULL;
	struct cep_cm_id *id = NULL;
	union {
#ifdef CEPD_HAVE_UMAD
		struct {
			struct cepd_qp_attr_rep h;
			struct ibv_qp_attr attr;
		} qa;
#endif
		struct cepd_id_rep idr;
		struct cepd_query_rep q;
		struct cep_cm_stats st;
	} out;
	struct cepd_id_rep created;
	size_t outlen = 0;
	int create = 0;
	int ret = cepd_req_check(r, len);

	atomic_fetch_add_explicit(&c->requests, 1, memory_order_relaxed);
	if (ret)
		goto done;
	pd = param + cepd_param_size(r->h.op);
	aux = pd + r->pd_len;
	if (!c->port && r->h.op != CEPD_SERVICE_STATS) {
		ret = -EPERM;
		goto done;
	}
	if (r->flags & CEPD_F_CREATE) {
		/* the id's first request: create it, then act on it */
		ret = do_create_id(c, &created);
		if (ret)
			goto done;
		create = 1;
	}
	switch (r->h.op) {
	case CEPD_CREATE_ID: case CEPD_QP_REGISTER: case CEPD_QP_DESTROY:
	case CEPD_CM_STATS: case CEPD_QUIESCE: case CEPD_SERVICE_STATS: case CEPD_QP_EVENT:
		break;
	default:
		pthread_mutex_lock(&c->lk);
		s = handle_get(c, create ? created.handle : r->handle);
		if (s && r->h.op == CEPD_DESTROY_ID)
			s->gone = 1; /* from here the client names it no more */
		if (!s && r->h.op == CEPD_DESTROY_ID && r->handle) {
			/* a handle being destroyed says -EALREADY, as the
			 * engine's second destroy does */
			uint32_t i = r->handle & HANDLE_IDX_MASK;

			if (i < c->cap && c->slot[i] && c->gen[i] == (r->handle >> HANDLE_IDX_BITS))
				ret = -EALREADY;
		}
		pthread_mutex_unlock(&c->lk);
		if (!s) {
			if (!ret)
				ret = -EINVAL; /* not one of this client's ids */
			goto done;
		}
		id = s->id;
	}
	switch (r->h.op) {
	case CEPD_CREATE_ID:
		ret = do_create_id(c, &out.idr);
		if (!ret)
			outlen = sizeof(out.idr);
		break;
	case CEPD_DESTROY_ID:
		ret = cep_cm_destroy_id(id);
		break;
	case CEPD_LISTEN:
		ret = cep_cm_listen_backlog(id, r->x, r->y, r->a);
		break;
	case CEPD_CONNECT: {
		struct cepd_conn w;
		struct cep_cm_conn_param p;

		memcpy(&w, param, sizeof(w));
		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		pthread_mutex_lock(&c->lk);
		ret = qp_mine(c, w.qpn) ? 0 : -ENOENT;
		pthread_mutex_unlock(&c->lk);
		if (ret)
			break;
		p.service_id = w.service_id;
		p.primary = w.primary;
		p.alternate = w.alternate;
		p.qpn = w.qpn;
		p.starting_psn = w.starting_psn;
		p.qkey = w.qkey;
		p.pkey = w.pkey;
		p.responder_resources = w.responder_resources;
		p.initiator_depth = w.initiator_depth;
		p.remote_cm_response_timeout = w.remote_cm_response_timeout;
		p.local_cm_response_timeout = w.local_cm_response_timeout;
		p.max_cm_retries = w.max_cm_retries;
		p.packet_life_time = w.packet_life_time;
		p.retry_count = w.retry_count;
		p.rnr_retry_count = w.rnr_retry_count;
		p.path_mtu = w.path_mtu;
		p.transport_service_type = w.transport_service_type;
		p.srq = w.srq;
		p.manual_rtu = w.manual_rtu;
		p.private_data = r->pd_len ? pd : NULL;
		p.private_data_len = r->pd_len;
		p.peer = w.has_peer ? &w.peer : NULL;
		p.flow_control = w.flow_control;
		p.manual_drep = w.manual_drep;
		p.ece_vendor_id = w.ece_vendor_id;
		p.ece_options = w.ece_options;
		/* before the REP can come: the worker reads it after connect */
		s->auto_rtu = !w.manual_rtu;
		ret = cep_cm_connect(id, &p);
		break;
	}
	case CEPD_ACCEPT: {
		struct cepd_accept w;
		struct cep_cm_accept_param p;

		memcpy(&w, param, sizeof(w));
		pthread_mutex_lock(&c->lk);
		ret = qp_mine(c, w.qpn) ? 0 : -ENOENT;
		pthread_mutex_unlock(&c->lk);
		if (ret)
			break;
		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		p.qpn = w.qpn;
		p.starting_psn = w.starting_psn;
		p.qkey = w.qkey;
		p.responder_resources = w.responder_resources;
		p.initiator_depth = w.initiator_depth;
		p.target_ack_delay = w.target_ack_delay;
		p.failover_accepted = w.failover_accepted;
		p.rnr_retry_count = w.rnr_retry_count;
		p.srq = w.srq;
		p.manual_drep = w.manual_drep;
		p.private_data = r->pd_len ? pd : NULL;
		p.private_data_len = r->pd_len;
		p.flow_control = w.flow_control;
		p.ece_vendor_id = w.ece_vendor_id;
		p.ece_options = w.ece_options;
		ret = cep_cm_accept(id, &p);
		break;
	}
	case CEPD_RTU:
		ret = cep_cm_rtu(id, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_NOTIFY_EST:
		ret = cep_cm_notify_established(id);
		break;
	case CEPD_REJECT:
		ret = cep_cm_reject(id, r->a, r->aux_len ? aux : NULL, r->aux_len,
				    r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_MRA:
		ret = r->a > 31 ? -EINVAL :
		      cep_cm_mra(id, (uint8_t)r->a, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_DISCONNECT:
		ret = cep_cm_disconnect(id, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_DREP:
		ret = cep_cm_drep(id, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_LAP: {
		struct cep_path alt;

		memcpy(&alt, param, sizeof(alt));
		ret = r->a > 31 ? -EINVAL :
		      cep_cm_lap(id, &alt, (uint8_t)r->a, r->pd_len ? pd : NULL, r->pd_len);
		break;
	}
	case CEPD_APR:
		ret = cep_cm_apr(id, r->a, r->aux_len ? aux : NULL, r->aux_len,
				 r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_SIDR_REQ: {
		struct cepd_sidr w;
		struct cep_cm_sidr_param p;

		memcpy(&w, param, sizeof(w));
		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		p.service_id = w.service_id;
		p.pkey = w.pkey;
		p.timeout = w.timeout;
		p.max_cm_retries = w.max_cm_retries;
		p.private_data = r->pd_len ? pd : NULL;
		p.private_data_len = r->pd_len;
		p.peer = &w.peer;
		ret = cep_cm_sidr_req(id, &p);
		break;
	}
	case CEPD_SIDR_REP:
		ret = cep_cm_sidr_rep(id, r->a, r->b, r->c, r->pd_len ? pd : NULL, r->pd_len);
		break;
	case CEPD_QP_REGISTER:
		ret = r->a > 0xffffff ? -EINVAL : do_qp_register(c, r->a);
		break;
	case CEPD_QP_DESTROY:
		ret = do_qp_destroy(c, r->a);
		break;
	case CEPD_ID_QUERY:
		memset(&out.q, 0, sizeof(out.q));
		out.q.state = cep_cm_id_state(id);
		out.q.lap_state = cep_cm_id_lap_state(id);
		out.q.remote_comm_id = cep_cm_id_remote_comm_id(id);
		outlen = sizeof(out.q);
		ret = 0;
		break;
	case CEPD_CM_STATS:
		memset(&out.st, 0, sizeof(out.st));
		out.st.size = sizeof(out.st);
		ret = cep_cm_get_stats(c->port->cm, &out.st);
		if (!ret)
			outlen = sizeof(out.st);
		break;
	case CEPD_QUIESCE:
		ret = cep_cm_quiesce(c->port->cm, r->a);
		break;
#ifdef CEPD_HAVE_UMAD
	case CEPD_INIT_QP_ATTR: {
		int mask = 0;

		memset(&out.qa, 0, sizeof(out.qa));
		ret = cep_cm_init_qp_attr(id, (enum ibv_qp_state)r->a, &out.qa.attr, &mask);
		if (!ret) {
			out.qa.h.mask = mask;
			out.qa.h.attr_size = sizeof(out.qa.attr);
			/* the reply's payload: header then attr, packed */
			memmove((uint8_t *)&out + sizeof(out.qa.h), &out.qa.attr, sizeof(out.qa.attr));
			outlen = sizeof(out.qa.h) + sizeof(out.qa.attr);
		}
		break;
	}
	case CEPD_QP_EVENT: {
		struct ibv_qp qp;
		struct ibv_async_event ev;

		pthread_mutex_lock(&c->lk);
		ret = qp_mine(c, r->a) ? 0 : -ENOENT;
		pthread_mutex_unlock(&c->lk);
		if (ret)
			break;
		memset(&qp, 0, sizeof(qp));
		memset(&ev, 0, sizeof(ev));
		qp.qp_num = r->a;
		ev.element.qp = &qp;
		ev.event_type = (enum ibv_event_type)r->b;
		ret = cep_cm_qp_event(c->port->cm, &ev);
		break;
	}
#else
	case CEPD_INIT_QP_ATTR: case CEPD_QP_EVENT:
		ret = -EOPNOTSUPP;
		break;
#endif
	case CEPD_SERVICE_STATS: {
		char *text = NULL;
		size_t tlen = 0;
		FILE *f = open_memstream(&text, &tlen);

		if (!f) {
			ret = -ENOMEM;
			break;
		}
		print_stats(f);
		fclose(f);
		/* any length up to a message (many clients: the reply buffer
		 * of reply() is too small) */
		{
			size_t n = tlen < CEPD_MSG_MAX - sizeof(struct cepd_rep)
				   ? tlen : CEPD_MSG_MAX - sizeof(struct cepd_rep);
			struct cepd_rep *m = calloc(1, sizeof(*m) + n);

			if (m) {
				m->h.op = CEPD_REPLY;
				m->h.seq = r->h.seq;
				m->h.len = (uint32_t)(sizeof(*m) + n);
				memcpy(m + 1, text, n);
				(void)send(c->fd, m, m->h.len, MSG_NOSIGNAL);
				free(m);
			} else {
				(void)reply(c, r->h.seq, -ENOMEM, NULL, 0);
			}
		}
		free(text);
		return;
	}
	}
done:
	if (create) { /* the reply names the id it made, whatever the op said */
		memcpy(&out, &created, sizeof(created));
		outlen = sizeof(created);
	}
	if (ret == -EBADMSG || ret == -EOPNOTSUPP || ret == -EMSGSIZE) {
		atomic_fetch_add_explicit(&c->bad, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&svc.bad_messages, 1, memory_order_relaxed);
	}
	(void)reply(c, len >= sizeof(struct cepd_hdr) ? r->h.seq : 0, ret, &out, outlen);
}
