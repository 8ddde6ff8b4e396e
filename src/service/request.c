/* SPDX-License-Identifier: MIT */
/*
 * cepd's requests: one table, one handler per operation. Every request
 * passes, in order: its shape (proto.h's cepd_req_check: lengths, known
 * op, flags), the id it names (a live handle of the client's own table,
 * or a new id with CEPD_F_CREATE), then its operation's check in
 * access.c (what the client may use), and only then acts, with the
 * engine's public calls, on the client's thread. A request that fails a
 * step gets its error in the reply and has changed nothing (a new id made
 * by CEPD_F_CREATE stays, and the reply names it: proto.h).
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
#include "service/access.h"
#include "service/cepd.h"

int reply(struct client *c, uint64_t seq, int ret, const void *payload, size_t len)
{
	_Alignas(8) uint8_t small[sizeof(struct cepd_rep) + 4096];
	uint8_t *buf = small;
	struct cepd_rep *r;
	ssize_t n;

	if (len > CEPD_MSG_MAX - sizeof(*r))
		len = CEPD_MSG_MAX - sizeof(*r);
	if (len > sizeof(small) - sizeof(*r)) {
		buf = malloc(sizeof(*r) + len);
		if (!buf) {
			buf = small;
			len = 0;
			ret = -ENOMEM;
		}
	}
	r = (struct cepd_rep *)buf;
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
	if (buf != small)
		free(buf);
	return n < 0 ? -errno : 0;
}

/* A reply's payload, filled by a handler. */
struct out {
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
		struct cepd_mc_rep mc;
		uint8_t path[64];
	} u;
	size_t len;
	char *text;                /* a text payload instead (malloc'd) */
};

static const void *pd_of(const struct req *q)
{
	return q->r->pd_len ? q->pd : NULL;
}

static int do_create_id(struct client *c, struct cepd_id_rep *out)
{
	struct sid *s;
	/* LINGER: the engine's DESTROYED comes once it holds nothing of the id
	 * (timewait over), so the id is charged to its uid until then; the
	 * client gets its own DESTROYED when its destroy is done (op_destroy_id).
	 * A passive id inherits it from its listener. */
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = sid_handler,
				     .flags = CEP_CM_ID_LINGER };
	int ret;

	/* each client its own requester window (cm.h pace_group): one that
	 * connects to an unanswering peer holds back no other's connects */
	ia.pace_group = c->serial;
	pthread_mutex_lock(&c->lk);
	s = sid_new(c, NULL);
	ret = s ? handle_add(c, s) : -EMFILE; /* over the uid's ids (or no memory) */
	if (s)
		s->gone = 1; /* named by nothing until it has its id */
	pthread_mutex_unlock(&c->lk);
	if (ret) {
		if (s)
			sid_free(s);
		return ret;
	}
	ia.context = s;
	ret = cep_cm_create_id(c->port->cm, &ia, &s->id);
	pthread_mutex_lock(&c->lk);
	if (ret) {
		handle_del(c, s->handle);
		s->handle = 0;
	} else {
		s->gone = 0;
	}
	pthread_mutex_unlock(&c->lk);
	if (ret) {
		sid_free(s);
		return ret;
	}
	out->handle = s->handle;
	out->local_comm_id = cep_cm_id_local_comm_id(s->id);
	return 0;
}

/* ---- one handler per operation ---------------------------------------------- */

static int op_create_id(struct req *q, struct out *o)
{
	int ret = do_create_id(q->c, &o->u.idr);

	if (!ret)
		o->len = sizeof(o->u.idr);
	return ret;
}

static int op_destroy_id(struct req *q, struct out *o)
{
	struct client *c = q->c;
	struct sid *s = q->s;
	uint32_t h, lcid = cep_cm_id_local_comm_id(s->id);
	int ret;

	(void)o;
	access_unlisten(s); /* its service IDs are free once it is going */
	pthread_mutex_lock(&c->lk);
	s->requested = 1;
	h = s->handle;
	pthread_mutex_unlock(&c->lk);
	ret = cep_cm_destroy_id(s->id);
	pthread_mutex_lock(&c->lk);
	if (ret) {
		s->requested = 0; /* nothing happened: s lives on */
	} else {
		/* The client's DESTROYED now: every event of the id came
		 * before (cep_cm_destroy_id waited for a running callback,
		 * and events are queued in order). The engine may hold the id
		 * longer (DREQ, timewait): s is its until its own DESTROYED,
		 * which may already have freed it - only the handle is
		 * touched here. */
		post_simple_event(c, CEP_CM_EV_DESTROYED, h, lcid);
		handle_del(c, h);
	}
	pthread_mutex_unlock(&c->lk);
	return ret;
}

static int op_listen(struct req *q, struct out *o)
{
	(void)o;
	return access_listen_bind(q, q->r->x, q->r->y, q->r->a);
}

static int op_connect(struct req *q, struct out *o)
{
	struct cepd_conn w;
	struct cep_cm_conn_param p;
	int ret;

	(void)o;
	memcpy(&w, q->param, sizeof(w));
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
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
	p.private_data = pd_of(q);
	p.private_data_len = q->r->pd_len;
	p.peer = w.has_peer ? &w.peer : NULL;
	p.flow_control = w.flow_control;
	p.manual_drep = w.manual_drep;
	p.ece_vendor_id = w.ece_vendor_id;
	p.ece_options = w.ece_options;
	/* Before the REP can come: the worker reads it after connect. Only
	 * for an id that can connect (IDLE): a second CONNECT, which the
	 * engine refuses, must not write what a worker may be reading for
	 * the first one's REP (a data race TSan saw, and a refused connect
	 * with another manual_rtu would change the first's). An id leaves
	 * IDLE only by this client thread's own requests. */
	if (cep_cm_id_state(q->s->id) == CEP_CM_IDLE)
		q->s->auto_rtu = !w.manual_rtu;
	ret = cep_cm_connect(q->s->id, &p);
	if (!ret)
		q->s->qpn = w.qpn;
	return ret;
}

static int op_accept(struct req *q, struct out *o)
{
	struct cepd_accept w;
	struct cep_cm_accept_param p;
	int ret;

	(void)o;
	memcpy(&w, q->param, sizeof(w));
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
	p.private_data = pd_of(q);
	p.private_data_len = q->r->pd_len;
	p.flow_control = w.flow_control;
	p.ece_vendor_id = w.ece_vendor_id;
	p.ece_options = w.ece_options;
	ret = cep_cm_accept(q->s->id, &p);
	if (!ret)
		q->s->qpn = w.qpn;
	return ret;
}

static int op_rtu(struct req *q, struct out *o)
{
	(void)o;
	return cep_cm_rtu(q->s->id, pd_of(q), q->r->pd_len);
}

static int op_notify_est(struct req *q, struct out *o)
{
	(void)o;
	return cep_cm_notify_established(q->s->id);
}

static int op_migrate(struct req *q, struct out *o)
{
	(void)o;
	return cep_cm_migrate(q->s->id);
}

static int op_reject(struct req *q, struct out *o)
{
	(void)o;
	return cep_cm_reject(q->s->id, q->r->a, q->r->aux_len ? q->aux : NULL, q->r->aux_len,
			     pd_of(q), q->r->pd_len);
}

static int op_mra(struct req *q, struct out *o)
{
	(void)o;
	return q->r->a > 31 ? -EINVAL : cep_cm_mra(q->s->id, (uint8_t)q->r->a, pd_of(q), q->r->pd_len);
}

static int op_disconnect(struct req *q, struct out *o)
{
	(void)o;
	return cep_cm_disconnect(q->s->id, pd_of(q), q->r->pd_len);
}

static int op_drep(struct req *q, struct out *o)
{
	(void)o;
	return cep_cm_drep(q->s->id, pd_of(q), q->r->pd_len);
}

static int op_lap(struct req *q, struct out *o)
{
	struct cep_path alt;

	(void)o;
	memcpy(&alt, q->param, sizeof(alt));
	return q->r->a > 31 ? -EINVAL :
	       cep_cm_lap(q->s->id, &alt, (uint8_t)q->r->a, pd_of(q), q->r->pd_len);
}

static int op_apr(struct req *q, struct out *o)
{
	(void)o;
	return cep_cm_apr(q->s->id, q->r->a, q->r->aux_len ? q->aux : NULL, q->r->aux_len,
			  pd_of(q), q->r->pd_len);
}

static int op_sidr_req(struct req *q, struct out *o)
{
	struct cepd_sidr w;
	struct cep_cm_sidr_param p;

	(void)o;
	memcpy(&w, q->param, sizeof(w));
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = w.service_id;
	p.pkey = w.pkey;
	p.timeout = w.timeout;
	p.max_cm_retries = w.max_cm_retries;
	p.private_data = pd_of(q);
	p.private_data_len = q->r->pd_len;
	p.peer = &w.peer;
	return cep_cm_sidr_req(q->s->id, &p);
}

static int op_sidr_rep(struct req *q, struct out *o)
{
	/* only a success names a QP and Q_Key (access_sidr_rep): any other
	 * status carries none of the client's choosing */
	uint32_t qpn = q->r->a == 0 ? q->r->b : 0, qkey = q->r->a == 0 ? q->r->c : 0;

	(void)o;
	return cep_cm_sidr_rep(q->s->id, q->r->a, qpn, qkey, pd_of(q), q->r->pd_len);
}

static int op_qp_register(struct req *q, struct out *o)
{
	(void)o;
	return q->r->a > 0xffffff ? -EINVAL : qps_register(q->c, q->r->a);
}

static int op_qp_destroy(struct req *q, struct out *o)
{
	(void)o;
	return qps_destroy(q->c, q->r->a);
}

static int op_id_query(struct req *q, struct out *o)
{
	memset(&o->u.q, 0, sizeof(o->u.q));
	o->u.q.state = cep_cm_id_state(q->s->id);
	o->u.q.lap_state = cep_cm_id_lap_state(q->s->id);
	o->u.q.remote_comm_id = cep_cm_id_remote_comm_id(q->s->id);
	o->len = sizeof(o->u.q);
	return 0;
}

static int op_cm_stats(struct req *q, struct out *o)
{
	int ret;

	memset(&o->u.st, 0, sizeof(o->u.st));
	o->u.st.size = sizeof(o->u.st);
	ret = cep_cm_get_stats(q->c->port->cm, &o->u.st);
	if (!ret)
		o->len = sizeof(o->u.st);
	return ret;
}

static int op_quiesce(struct req *q, struct out *o)
{
	(void)o;
	return cep_cm_quiesce(q->c->port->cm, q->r->a);
}

static int op_init_qp_attr(struct req *q, struct out *o)
{
#ifdef CEPD_HAVE_UMAD
	int mask = 0, ret;

	memset(&o->u.qa, 0, sizeof(o->u.qa));
	ret = cep_cm_init_qp_attr(q->s->id, (enum ibv_qp_state)q->r->a, &o->u.qa.attr, &mask);
	if (!ret) {
		o->u.qa.h.mask = mask;
		o->u.qa.h.attr_size = sizeof(o->u.qa.attr);
		/* the reply's payload: header then attr, packed */
		memmove((uint8_t *)&o->u + sizeof(o->u.qa.h), &o->u.qa.attr, sizeof(o->u.qa.attr));
		o->len = sizeof(o->u.qa.h) + sizeof(o->u.qa.attr);
	}
	return ret;
#else
	(void)q;
	(void)o;
	return -EOPNOTSUPP;
#endif
}

static int op_qp_event(struct req *q, struct out *o)
{
#ifdef CEPD_HAVE_UMAD
	struct ibv_qp qp;
	struct ibv_async_event ev;

	(void)o;
	memset(&qp, 0, sizeof(qp));
	memset(&ev, 0, sizeof(ev));
	qp.qp_num = q->r->a;
	ev.element.qp = &qp;
	ev.event_type = (enum ibv_event_type)q->r->b;
	return cep_cm_qp_event(q->c->port->cm, &ev);
#else
	(void)q;
	(void)o;
	return -EOPNOTSUPP;
#endif
}

static int op_service_stats(struct req *q, struct out *o)
{
	size_t len = 0;
	FILE *f = open_memstream(&o->text, &len);

	if (!f)
		return -ENOMEM;
	print_stats(f, q->c);
	if (fclose(f)) {
		free(o->text);
		o->text = NULL;
		return -ENOMEM;
	}
	o->len = len;
	return 0;
}

static int op_mc_join(struct req *q, struct out *o)
{
	struct cepd_mc m;
	int ret;

	memcpy(&m, q->param, sizeof(m));
	ret = mc_join(q->c, &m, &o->u.mc);
	if (!ret)
		o->len = sizeof(o->u.mc); /* the SA's answer, or its failure */
	return ret;
}

static int op_mc_leave(struct req *q, struct out *o)
{
	struct cepd_mc m;

	(void)o;
	memcpy(&m, q->param, sizeof(m));
	return mc_leave(q->c, &m);
}

static int op_path_query(struct req *q, struct out *o)
{
	struct cepd_path_q w;
	int ret;

	memcpy(&w, q->param, sizeof(w));
	ret = sa_path_query(q->c, &w, o->u.path);
	if (!ret)
		o->len = sizeof(o->u.path);
	return ret;
}

static int op_mc_bcast(struct req *q, struct out *o)
{
	struct cepd_mc m;
	int ret;

	memcpy(&m, q->param, sizeof(m));
	ret = sa_bcast(q->c, &m, &o->u.mc);
	if (!ret)
		o->len = sizeof(o->u.mc);
	return ret;
}

/* ANY_CLIENT: a statistics reader (no port) may send it too. Whether a
 * request acts on an id is proto.h's (cepd_op_info, CEPD_OPF_ID). */
enum { ANY_CLIENT = 1 };

static const struct op {
	unsigned flags;
	int (*check)(struct req *q);           /* access.c; NULL: none */
	int (*act)(struct req *q, struct out *o);
} ops[CEPD_OP_COUNT] = {
	[CEPD_CREATE_ID]     = { 0, NULL, op_create_id },
	[CEPD_DESTROY_ID]    = { 0, NULL, op_destroy_id },
	[CEPD_LISTEN]        = { 0, access_listen, op_listen },
	[CEPD_CONNECT]       = { 0, access_connect, op_connect },
	[CEPD_ACCEPT]        = { 0, access_accept, op_accept },
	[CEPD_RTU]           = { 0, NULL, op_rtu },
	[CEPD_NOTIFY_EST]    = { 0, NULL, op_notify_est },
	[CEPD_REJECT]        = { 0, NULL, op_reject },
	[CEPD_MRA]           = { 0, NULL, op_mra },
	[CEPD_DISCONNECT]    = { 0, NULL, op_disconnect },
	[CEPD_DREP]          = { 0, NULL, op_drep },
	[CEPD_LAP]           = { 0, access_lap, op_lap },
	[CEPD_APR]           = { 0, NULL, op_apr },
	[CEPD_SIDR_REQ]      = { 0, access_sidr_req, op_sidr_req },
	[CEPD_SIDR_REP]      = { 0, access_sidr_rep, op_sidr_rep },
	[CEPD_QP_REGISTER]   = { 0, NULL, op_qp_register },   /* its rule: qps.c */
	[CEPD_QP_DESTROY]    = { 0, NULL, op_qp_destroy },
	[CEPD_ID_QUERY]      = { 0, NULL, op_id_query },
	[CEPD_CM_STATS]      = { 0, NULL, op_cm_stats },
	[CEPD_QUIESCE]       = { 0, NULL, op_quiesce },
	[CEPD_SERVICE_STATS] = { ANY_CLIENT, NULL, op_service_stats },
	[CEPD_INIT_QP_ATTR]  = { 0, NULL, op_init_qp_attr },
	[CEPD_QP_EVENT]      = { 0, access_qp_event, op_qp_event },
	[CEPD_MC_JOIN]       = { 0, access_mc, op_mc_join },
	[CEPD_MC_LEAVE]      = { 0, access_mc, op_mc_leave },
	[CEPD_PATH_QUERY]    = { 0, access_path, op_path_query },
	[CEPD_MC_BCAST]      = { 0, access_mc, op_mc_bcast },
	[CEPD_MIGRATE]       = { 0, NULL, op_migrate },
};

/* The id a request names: 0 and q->s; -EINVAL (not one of the client's
 * ids); -EALREADY (a handle whose destroy is under way). */
static int named_id(struct req *q, uint32_t h)
{
	struct client *c = q->c;
	int ret = 0;

	pthread_mutex_lock(&c->lk);
	q->s = handle_get(c, h);
	if (q->s && q->r->h.op == CEPD_DESTROY_ID)
		q->s->gone = 1; /* from here the client names it no more */
	if (!q->s) {
		uint32_t i = h & HANDLE_IDX_MASK;

		ret = -EINVAL;
		if (q->r->h.op == CEPD_DESTROY_ID && h && i < c->cap && c->slot[i] &&
		    c->gen[i] == (h >> HANDLE_IDX_BITS))
			ret = -EALREADY; /* as the engine's second destroy */
	}
	pthread_mutex_unlock(&c->lk);
	return ret;
}

void handle_request(struct client *c, const uint8_t *buf, size_t len)
{
	struct req q = { .c = c, .r = (const struct cepd_req *)buf };
	struct cepd_id_rep created;
	struct out o = { .len = 0, .text = NULL };
	const struct op *op = NULL;
	int create = 0;
	unsigned opf = 0;
	int ret = cepd_req_check(q.r, len);

	atomic_fetch_add_explicit(&c->requests, 1, memory_order_relaxed);
	if (ret)
		goto done;
	op = &ops[q.r->h.op];
	if (!op->act) { /* an op proto.h knows and this table lacks */
		ret = -EOPNOTSUPP;
		goto done;
	}
	q.param = buf + sizeof(*q.r);
	q.pd = q.param + cepd_op_info(q.r->h.op, &opf);
	q.aux = q.pd + q.r->pd_len;
	if (!c->port && !(op->flags & ANY_CLIENT)) {
		ret = -EPERM;
		goto done;
	}
	if (q.r->flags & CEPD_F_CREATE) {
		/* the id's first request: create it, then act on it */
		ret = do_create_id(c, &created);
		if (ret)
			goto done;
		create = 1;
	}
	if (opf & CEPD_OPF_ID) {
		ret = named_id(&q, create ? created.handle : q.r->handle);
		if (ret)
			goto done;
	}
	if (op->check) {
		ret = op->check(&q);
		if (ret) {
			atomic_fetch_add_explicit(&c->refused, 1, memory_order_relaxed);
			goto done;
		}
	}
	ret = op->act(&q, &o);
done:
	if (ret && ret != -EINVAL && q.s && (q.r->flags & CEPD_F_QUIET) &&
	    q.r->h.op == CEPD_ACCEPT)
		/* Nobody waits for this answer (cm_accept_nowait): the client
		 * tells its id by an event, and the requester hears of it now
		 * (REJ "consumer defined", as the application's reject or
		 * destroy after a refused rdma_accept would send). -EINVAL:
		 * the request has left REQ_RCVD, nothing to answer. q.s: the
		 * request was well formed and named the client's id. */
		(void)cep_cm_reject(q.s->id, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
	if (create) { /* the reply names the id it made, whatever the op said */
		memcpy(&o.u, &created, sizeof(created));
		o.len = sizeof(created);
	}
	if (ret == -EBADMSG || ret == -EOPNOTSUPP || ret == -EMSGSIZE) {
		atomic_fetch_add_explicit(&c->bad, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&svc.bad_messages, 1, memory_order_relaxed);
	}
	/* CEPD_F_QUIET: a success is not answered (proto.h) */
	if (ret != 0 || !(q.r->flags & CEPD_F_QUIET))
		(void)reply(c, len >= sizeof(struct cepd_hdr) ? q.r->h.seq : 0, ret,
			    o.text ? (const void *)o.text : (const void *)&o.u, o.len);
	free(o.text);
}
