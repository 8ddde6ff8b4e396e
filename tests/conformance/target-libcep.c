/* SPDX-License-Identifier: MIT */
/*
 * Conformance suite: the application under test on libcep's CM (cep_cm over
 * umad; ib_cm not loaded), written as the librdmacm application of
 * target-kernel.c would be: rdma_cm's service IDs and CMA header, rdma_cm's
 * timing constants (CM response timeouts 20, 15 retries, RoCE packet
 * lifetime 18), the DREP left to the application (manual_drep, as
 * rdma_cm waits for rdma_disconnect), the RTU sent by the CM (as librdmacm
 * does). Parameters rdma_cm computes itself (the REQ's local ACK timeout,
 * the REP's target ACK delay) are left 0 for the CM: issue 10 item 9.
 * Events are mapped to librdmacm's (see docs/protocol.md).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cep/cm.h>
#include <cep/rdma_cm.h>
#include <cep/umad.h>
#include <cep/verbs.h>

#include "target.h"

struct lpriv {
	struct cep_transport *t;
	struct cep_port_info port;
	struct cep_cm *cm;
	struct cep_cm_channel *ch;
	struct cep_cm_id *listeners[8];
	int nlisteners;
	uint16_t src_port;
};

struct lconn {
	struct cep_req req;        /* passive: the REQ, for the QP attributes */
	struct cep_qp_params qpp;
};

static struct lpriv *lp(struct app *a)
{
	return a->priv;
}

static int l_init(struct app *a, const char *dev)
{
	struct cep_umad_attr ua = { .size = sizeof(ua), .dev_name = dev, .port_num = 1,
				    .gid_index = CEP_UMAD_GID_AUTO };
	struct cep_cm_attr ca = { .size = sizeof(ca) };
	struct ibv_device **list;
	struct lpriv *p = calloc(1, sizeof(*p));
	int ret;

	if (!p)
		return -ENOMEM;
	a->priv = p;
	ret = cep_umad_open(&ua, &p->t);
	if (ret) {
		printf("cep_umad_open %s: %s\n", dev, strerror(-ret));
		return ret;
	}
	ret = p->t->ops->query_port(p->t, &p->port);
	if (!ret) {
		ca.transport = p->t;
		ret = cep_cm_create(&ca, &p->cm);
	}
	if (!ret)
		ret = cep_cm_channel_create(&p->ch);
	if (ret) {
		printf("libcep CM set-up: %d\n", ret);
		return ret;
	}
	list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev))
			a->ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	p->src_port = (uint16_t)(40000 + getpid() % 20000);
	return a->ctx ? 0 : -ENODEV;
}

static int l_event_fd(struct app *a)
{
	return cep_cm_channel_fd(lp(a)->ch);
}

static int l_listen(struct app *a, uint16_t port)
{
	struct lpriv *p = lp(a);
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .channel = p->ch };
	struct cep_cm_id *id;
	int ret;

	if (p->nlisteners == 8)
		return -ENOSPC;
	ret = cep_cm_create_id(p->cm, &ia, &id);
	if (ret)
		return ret;
	ret = cep_cm_listen(id, cep_rdma_service_id(CEP_RDMA_PS_TCP, port), ~0ull);
	if (ret) {
		cep_cm_destroy_id(id);
		return ret;
	}
	p->listeners[p->nlisteners++] = id;
	return 0;
}

static void l_event(struct app *a, const struct cep_cm_event *ev)
{
	struct conn *c = conn_by_id(a, ev->id);

	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		const uint8_t *pd = ev->private_data;
		struct lconn *lc;

		c = conn_new(a);
		lc = calloc(1, sizeof(*lc));
		if (!c || !lc) {
			free(lc);
			cep_cm_reject(ev->id, CEP_REJ_NO_RESOURCES, NULL, 0, NULL, 0);
			cep_cm_destroy_id(ev->id);
			return;
		}
		c->id = ev->id;
		c->passive = 1;
		c->priv = lc;
		lc->req = ev->msg.u.req;
		app_ev(a, c, "connect_request", "pdata=%s",
		       pd && ev->private_data_len >= CEP_CMA_HDR_SIZE + 4 &&
		       !memcmp(pd + CEP_CMA_HDR_SIZE, "peer", 4) ? "peer" : "other");
		return;
	}
	if (!c) {
		if (ev->type != CEP_CM_EV_DESTROYED)
			printf("event %s for an id without a handle\n", cep_cm_event_name(ev->type));
		return;
	}
	switch (ev->type) {
	case CEP_CM_EV_ESTABLISHED:
	case CEP_CM_EV_RTU_RECEIVED:
		app_established(a, c);
		break;
	case CEP_CM_EV_REJ_RECEIVED:
		app_ev(a, c, "rejected", "status=%d", ev->status);
		break;
	case CEP_CM_EV_REQ_ERROR:
	case CEP_CM_EV_REP_ERROR:
		app_ev(a, c, "unreachable", NULL);
		break;
	case CEP_CM_EV_DREQ_RECEIVED:
	case CEP_CM_EV_DREP_RECEIVED:
	case CEP_CM_EV_DREQ_ERROR:
		app_disconnected(a, c);
		break;
	case CEP_CM_EV_TIMEWAIT_EXIT:
		app_timewait_exit(a, c);
		break;
	case CEP_CM_EV_REP_RECEIVED: /* librdmacm answers it inside the library */
	case CEP_CM_EV_MRA_RECEIVED: /* rdma_cm ignores MRA events */
	case CEP_CM_EV_QP_DESTROYED: /* no librdmacm event: the app destroyed it */
	case CEP_CM_EV_DESTROYED:
		printf("(%s on %d)\n", cep_cm_event_name(ev->type), c->h);
		break;
	default:
		app_ev(a, c, cep_cm_event_name(ev->type), "status=%d", ev->status);
		break;
	}
}

static void l_events(struct app *a)
{
	struct cep_cm_event *ev;

	while (cep_cm_get_event(lp(a)->ch, &ev) == 0) {
		l_event(a, ev);
		cep_cm_ack_event(ev);
	}
}

static int qp_new(struct app *a, struct conn *c)
{
	int ret;

	c->qp = app_qp_create(a, c);
	if (!c->qp)
		return -ENOMEM;
	ret = cep_cm_qp_register(lp(a)->cm, c->qp->qp_num);
	if (ret) {
		ibv_destroy_qp(c->qp);
		c->qp = NULL;
	}
	return ret;
}

static uint32_t random_psn(void)
{
	return (uint32_t)random() & 0xffffff;
}

static int l_accept(struct app *a, struct conn *c)
{
	struct lconn *lc = c->priv;
	struct cep_cm_accept_param acc;
	int ret;

	if (!c->passive || c->qp || !lc)
		return -EINVAL;
	ret = qp_new(a, c);
	if (ret)
		return ret;
	memset(&acc, 0, sizeof(acc));
	acc.size = sizeof(acc);
	acc.qpn = c->qp->qp_num;
	acc.starting_psn = random_psn();
	acc.responder_resources = 1;
	acc.initiator_depth = 1;
	acc.target_ack_delay = 0;       /* left to the CM (item 9) */
	acc.failover_accepted = CEP_FAILOVER_ACCEPTED; /* what rdma_cm sends */
	acc.rnr_retry_count = 7;
	acc.manual_drep = 1;            /* DREP on disconnect, as rdma_cm */
	acc.private_data = APP_PDATA;
	acc.private_data_len = sizeof(APP_PDATA);
	ret = cep_qp_params_passive(&lc->qpp, &lp(a)->port, &lc->req);
	if (!ret)
		ret = cep_qp_params_passive_accept(&lc->qpp, &acc);
	if (!ret)
		ret = cep_verbs_modify_qp(c->qp, &lc->qpp, IBV_QPS_RTS);
	if (!ret)
		ret = app_post_recv(a, c);
	if (!ret)
		ret = cep_cm_accept(c->id, &acc);
	return ret;
}

static int l_reject(struct app *a, struct conn *c, unsigned reason)
{
	(void)a;
	return cep_cm_reject(c->id, reason, NULL, 0, APP_PDATA, sizeof(APP_PDATA));
}

/* rdma_disconnect: a DREQ, or the DREP for a DREQ received. The return code
 * is reported as is (issue 10 item 15); a DREQ that waits is then answered
 * the way libcep documents (cep_cm_drep), so the wire shows the rest. */
static int l_disconnect(struct app *a, struct conn *c)
{
	int ret = cep_cm_disconnect(c->id, NULL, 0);

	(void)a;
	if (ret && cep_cm_id_state(c->id) == CEP_CM_DREQ_RCVD)
		(void)cep_cm_drep(c->id, NULL, 0);
	return ret;
}

static int l_destroy_qp(struct app *a, struct conn *c)
{
	int ret;

	if (!c->qp)
		return -ENOENT;
	ret = cep_cm_qp_destroy(lp(a)->cm, c->qp->qp_num);
	ibv_destroy_qp(c->qp);
	c->qp = NULL;
	return ret;
}

static int l_destroy(struct app *a, struct conn *c)
{
	int ret = 0;

	if (c->id)
		ret = cep_cm_destroy_id(c->id);
	if (c->qp)
		l_destroy_qp(a, c);
	conn_free(c);
	return ret;
}

static int l_connect(struct app *a, struct conn *c, uint16_t port, struct conn *reuse)
{
	struct lpriv *p = lp(a);
	struct cep_cm_conn_param cp;
	struct cep_mad_addr peer;
	struct cep_cma_hdr h;
	uint8_t pdata[CEP_REQ_PRIVATE_DATA_SIZE];
	int n, ret;

	if (reuse != c) {
		struct cep_cm_id_attr ia = { .size = sizeof(ia), .channel = p->ch };

		ret = cep_cm_create_id(p->cm, &ia, (struct cep_cm_id **)&c->id);
		if (!ret)
			ret = qp_new(a, c);
		if (ret)
			return ret;
	}
	/* A new connection on this handle: its events start afresh. */
	c->established = c->disconnected = 0;
	cep_cma_hdr_ipv4(&h, a->self_ip, p->src_port++, a->peer_ip, port);
	n = cep_cma_hdr_encode(&h, APP_PDATA, sizeof(APP_PDATA), pdata, sizeof(pdata));
	if (n < 0)
		return n;
	memset(&peer, 0, sizeof(peer));
	peer.grh_present = 1;
	peer.gid_index = p->port.gid_index;
	peer.hop_limit = 64;
	peer.qpn = 1;
	peer.qkey = CEP_QP1_QKEY;
	memcpy(peer.gid, a->peer_gid, 16);
	memset(&cp, 0, sizeof(cp));
	cp.size = sizeof(cp);
	cp.service_id = cep_rdma_service_id(CEP_RDMA_PS_TCP, port);
	memcpy(cp.primary.local_gid, p->port.gid, 16);
	memcpy(cp.primary.remote_gid, a->peer_gid, 16);
	cp.primary.hop_limit = 64;
	cp.primary.local_ack_timeout = 0;  /* left to the CM (item 9) */
	cp.packet_life_time = 18;          /* rdma_cm's RoCE packet lifetime */
	cp.qpn = c->qp->qp_num;
	cp.starting_psn = random_psn();
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.remote_cm_response_timeout = 20; /* rdma_cm's CMA_CM_RESPONSE_TIMEOUT */
	cp.local_cm_response_timeout = 20;
	cp.max_cm_retries = 15;            /* CMA_MAX_CM_RETRIES */
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	cp.transport_service_type = CEP_TS_RC;
	cp.private_data = pdata;
	cp.private_data_len = (size_t)n;
	cp.peer = &peer;
	cp.manual_drep = 1;                /* DREP on disconnect, as rdma_cm */
	return cep_cm_connect(c->id, &cp);
}

/* The QP received data before the RTU: cep_cm_notify_established is what
 * rdma_notify(IBV_EVENT_COMM_EST) / ib_cm_notify is for the kernel target
 * (rxe raises no COMM_EST, so the scenario's script says when). */
static int l_notify(struct app *a, struct conn *c)
{
	(void)a;
	return cep_cm_notify_established(c->id);
}

static void l_fini(struct app *a)
{
	struct lpriv *p = lp(a);
	struct cep_cm_stats st = { .size = sizeof(st) };
	double end = ctl_now_ms() + 5000;

	for (int i = 0; i < p->nlisteners; i++)
		cep_cm_destroy_id(p->listeners[i]);
	/* Every id's DESTROYED must be taken off the channel before it goes. */
	while (ctl_now_ms() < end && cep_cm_get_stats(p->cm, &st) == 0 && st.ids) {
		l_events(a);
		usleep(10000);
	}
	l_events(a);
	printf("libcep: %llu ids left at exit\n", (unsigned long long)st.ids);
	cep_cm_channel_destroy(p->ch);
	cep_cm_destroy(p->cm);
	p->t->ops->destroy(p->t);
	ibv_close_device(a->ctx);
	free(p);
}

static const struct backend libcep_backend = {
	.name = "libcep", .init = l_init, .event_fd = l_event_fd, .events = l_events,
	.listen = l_listen, .accept = l_accept, .reject = l_reject,
	.disconnect = l_disconnect, .destroy = l_destroy, .destroy_qp = l_destroy_qp,
	.connect = l_connect, .notify = l_notify, .fini = l_fini,
};

int main(int argc, char **argv)
{
	return target_main(&libcep_backend, argc, argv);
}
