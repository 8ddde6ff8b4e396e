/* SPDX-License-Identifier: MIT */
/*
 * Conformance suite: the application under test on the kernel's CM -
 * librdmacm over rdma_ucm, rdma_cm and ib_cm - as rdmacm-utils programs use
 * it: RDMA_PS_TCP ids, rdma_create_qp + rdma_accept on the passive side (so
 * librdmacm moves the QP), rdma_connect with a caller-owned QP (qp_num in
 * the connection parameters, RTU by rdma_establish) on the active side, so
 * that a second connection can reuse the QP on a new id (rdma_cm ids cannot
 * connect twice). Events are librdmacm's, reported one to one.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "target.h"

struct kpriv {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listeners[8];
	int nlisteners;
};

static struct kpriv *kp(struct app *a)
{
	return a->priv;
}

static int k_init(struct app *a, const char *dev)
{
	struct kpriv *p = calloc(1, sizeof(*p));
	struct ibv_context **list;
	int n = 0;

	if (!p)
		return -ENOMEM;
	a->priv = p;
	p->ch = rdma_create_event_channel();
	if (!p->ch) {
		printf("rdma_create_event_channel: %s\n", strerror(errno));
		return -errno;
	}
	if (fcntl(p->ch->fd, F_SETFL, fcntl(p->ch->fd, F_GETFL) | O_NONBLOCK))
		return -errno;
	/* librdmacm's own device contexts: ids and QPs must share them. */
	list = rdma_get_devices(&n);
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]->device), dev))
			a->ctx = list[i];
	if (list)
		rdma_free_devices(list);
	if (!a->ctx) {
		printf("librdmacm knows no device %s\n", dev);
		return -ENODEV;
	}
	return 0;
}

static int k_event_fd(struct app *a)
{
	return kp(a)->ch->fd;
}

static void mk_sin(struct sockaddr_in *s, uint32_t ip, uint16_t port)
{
	memset(s, 0, sizeof(*s));
	s->sin_family = AF_INET;
	s->sin_addr.s_addr = ip;
	s->sin_port = htons(port);
}

static int k_listen(struct app *a, uint16_t port)
{
	struct kpriv *p = kp(a);
	struct rdma_cm_id *id;
	struct sockaddr_in s;

	if (p->nlisteners == 8)
		return -ENOSPC;
	if (rdma_create_id(p->ch, &id, NULL, RDMA_PS_TCP))
		return -errno;
	mk_sin(&s, INADDR_ANY, port);
	if (rdma_bind_addr(id, (struct sockaddr *)&s) || rdma_listen(id, 16)) {
		int e = -errno;

		rdma_destroy_id(id);
		return e;
	}
	p->listeners[p->nlisteners++] = id;
	return 0;
}

static void conn_param(struct app *a, struct conn *c, struct rdma_conn_param *cp)
{
	(void)a;
	memset(cp, 0, sizeof(*cp));
	cp->private_data = APP_PDATA;
	cp->private_data_len = sizeof(APP_PDATA);
	cp->responder_resources = 1;
	cp->initiator_depth = 1;
	cp->flow_control = 0; /* shows REQ/REP end-to-end flow control (item 16) */
	cp->retry_count = 7;
	cp->rnr_retry_count = 7;
	cp->qp_num = c->qp ? c->qp->qp_num : 0;
}

static void k_event(struct app *a, struct rdma_cm_event *ev)
{
	struct conn *c = conn_by_id(a, ev->id);
	struct rdma_conn_param cp;
	int ret;

	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		const uint8_t *pd = ev->param.conn.private_data;

		c = conn_new(a);
		if (!c) {
			rdma_reject(ev->id, NULL, 0);
			rdma_destroy_id(ev->id);
			return;
		}
		c->id = ev->id;
		c->passive = 1;
		app_ev(a, c, "connect_request", "pdata=%s",
		       pd && ev->param.conn.private_data_len >= 4 &&
		       !memcmp(pd, "peer", 4) ? "peer" : "other");
		return;
	}
	if (!c) {
		printf("event %s for an unknown id\n", rdma_event_str(ev->event));
		return;
	}
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(ev->id, 2000))
			app_ev(a, c, "connect_error", "status=%d", -errno);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		conn_param(a, c, &cp);
		if (rdma_connect(ev->id, &cp))
			app_ev(a, c, "connect_error", "status=%d", -errno);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		app_ev(a, c, "connect_error", "status=%d", ev->status);
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		/* The QP is the application's (not rdma_create_qp): librdmacm
		 * leaves the RTU to rdma_establish, then the connection is up
		 * as ESTABLISHED would say for an rdma_cm QP. */
		if (rdma_establish(ev->id))
			app_ev(a, c, "connect_error", "status=%d", -errno);
		else
			app_established(a, c);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		app_established(a, c);
		break;
	case RDMA_CM_EVENT_REJECTED:
		app_ev(a, c, "rejected", "status=%d", ev->status);
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		app_ev(a, c, "unreachable", NULL);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		app_disconnected(a, c);
		break;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		app_timewait_exit(a, c);
		break;
	default:
		ret = ev->status;
		app_ev(a, c, rdma_event_str(ev->event), "status=%d", ret);
		break;
	}
}

static void k_events(struct app *a)
{
	struct rdma_cm_event *ev;

	while (rdma_get_cm_event(kp(a)->ch, &ev) == 0) {
		struct rdma_cm_event copy = *ev;

		/* A CONNECT_REQUEST's id must be acked before it can be
		 * destroyed; handle a copy after the ack. */
		if (copy.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			k_event(a, ev);
			rdma_ack_cm_event(ev);
			continue;
		}
		rdma_ack_cm_event(ev);
		k_event(a, &copy);
	}
}

static int k_accept(struct app *a, struct conn *c)
{
	struct rdma_cm_id *id = c->id;
	struct rdma_conn_param cp;
	struct ibv_qp_init_attr qa;

	if (!c->passive || c->qp)
		return -EINVAL;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = a->cq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	if (rdma_create_qp(id, a->pd, &qa))
		return -errno;
	c->qp = id->qp;
	if (app_post_recv(a, c))
		return -EIO;
	conn_param(a, c, &cp);
	return rdma_accept(id, &cp) ? -errno : 0;
}

static int k_reject(struct app *a, struct conn *c, unsigned reason)
{
	(void)a;
	(void)reason; /* librdmacm 44 always rejects as "consumer defined" */
	return rdma_reject(c->id, APP_PDATA, sizeof(APP_PDATA)) ? -errno : 0;
}

static int k_disconnect(struct app *a, struct conn *c)
{
	(void)a;
	return rdma_disconnect(c->id) ? -errno : 0;
}

static int k_destroy_qp(struct app *a, struct conn *c)
{
	struct rdma_cm_id *id = c->id;

	(void)a;
	if (!c->qp)
		return -ENOENT;
	if (id && id->qp == c->qp)
		rdma_destroy_qp(id);
	else if (!c->qp_shared)
		ibv_destroy_qp(c->qp);
	c->qp = NULL;
	return 0;
}

static int k_destroy(struct app *a, struct conn *c)
{
	struct rdma_cm_id *id = c->id;

	if (c->qp)
		k_destroy_qp(a, c);
	if (id && rdma_destroy_id(id))
		return -errno;
	conn_free(c);
	return 0;
}

static int k_connect(struct app *a, struct conn *c, uint16_t port, struct conn *reuse)
{
	struct rdma_cm_id *id;
	struct sockaddr_in src, dst;

	if (rdma_create_id(kp(a)->ch, &id, NULL, RDMA_PS_TCP))
		return -errno;
	c->id = id;
	if (reuse && reuse->qp) {
		/* rdma_cm cannot connect an id twice: a new id, the same QP */
		c->qp = reuse->qp;
		reuse->qp_shared = 1;
	} else {
		c->qp = app_qp_create(a, c);
		if (!c->qp)
			return -ENOMEM;
	}
	mk_sin(&src, a->self_ip, 0);
	mk_sin(&dst, a->peer_ip, port);
	return rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) ?
	       -errno : 0;
}

static int k_notify(struct app *a, struct conn *c)
{
	(void)a;
	return rdma_notify(c->id, IBV_EVENT_COMM_EST) ? -errno : 0;
}

static void k_fini(struct app *a)
{
	struct kpriv *p = kp(a);

	for (int i = 0; i < p->nlisteners; i++)
		rdma_destroy_id(p->listeners[i]);
	rdma_destroy_event_channel(p->ch);
	free(p);
}

static const struct backend kernel_backend = {
	.name = "kernel", .init = k_init, .event_fd = k_event_fd, .events = k_events,
	.listen = k_listen, .accept = k_accept, .reject = k_reject,
	.disconnect = k_disconnect, .destroy = k_destroy, .destroy_qp = k_destroy_qp,
	.connect = k_connect, .notify = k_notify, .fini = k_fini,
};

int main(int argc, char **argv)
{
	return target_main(&kernel_backend, argc, argv);
}
