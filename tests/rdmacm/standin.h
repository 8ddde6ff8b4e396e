/* SPDX-License-Identifier: MIT */
/*
 * Shared set-up of the librdmacm layer tests that run without a device
 * (layer.c, ece.c, ib_listen.c): a stand-in device and port on a node of
 * tests/cm/harness.h, a port-space service with its libcep listener, and
 * an rdma_cm listener id on 0.0.0.0:PORT_RDMA (struct standin: open, then
 * teardown). Include after
 * "../cm/harness.h" and "rdmacm.h". Test threads only.
 */
#ifndef CEP_TEST_RDMACM_STANDIN_H
#define CEP_TEST_RDMACM_STANDIN_H

#define PORT_RDMA 7471

/* A device that is never used as one (its PD is a dummy) and its port 1,
 * of link layer @ll, served by @cm (NULL: none). */
static void standin_port(struct rcm_dev *dev, struct rcm_port *port, struct cep_cm *cm,
			 uint8_t ll)
{
	static int fake_pd;

	memset(dev, 0, sizeof(*dev));
	memset(port, 0, sizeof(*port));
	dev->pd = (struct ibv_pd *)(void *)&fake_pd; /* never used as one */
	port->dev = dev;
	port->port_num = 1;
	port->link_layer = ll;
	pthread_mutex_init(&port->qpn_mtx, NULL);
	pthread_mutex_init(&port->svc_mtx, NULL);
	atomic_store(&port->cm, cm);
}

/* Port space @ps's service for PORT_RDMA, with its libcep listener on B
 * of backlog @backlog (0: the CM's). */
static struct cep_cm_id *service_listener_backlog(struct rcm_service *s, enum cep_rdma_ps ps,
						   unsigned backlog)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = rcm_cep_handler,
				     .context = &s->hdr };
	struct cep_cm_id *l = NULL;

	memset(s, 0, sizeof(*s));
	s->hdr.kind = RCM_KIND_SERVICE;
	s->sid = cep_rdma_service_id(ps, PORT_RDMA);
	pthread_mutex_init(&s->mtx, NULL);
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen_backlog(l, s->sid, ~0ull, backlog), 0);
	return l;
}

static struct cep_cm_id *service_listener(struct rcm_service *s, enum cep_rdma_ps ps)
{
	return service_listener_backlog(s, ps, 0);
}

/* An rdma_cm id of @ps / @qpt on channel @ch listening on 0.0.0.0:PORT_RDMA,
 * stored in *@slot, which becomes the only listener of service @s. */
static void rdma_listener(struct rcm_service *s, struct rcm_channel *ch, enum rdma_port_space ps,
			  enum ibv_qp_type qpt, struct rcm_id **slot)
{
	struct rcm_id *l = rcm_id_new(ch, NULL, ps, qpt);

	CHECK(l != NULL);
	l->any_addr = 1;
	l->id.route.addr.src_addr.sa_family = AF_INET;
	l->state = RCM_LISTEN;
	*slot = l;
	s->listeners = slot;
	s->nlisteners = s->cap = 1;
}

/* What a test on a stand-in port is made of (below): B's port, the TCP
 * service for PORT_RDMA with its libcep listener, a channel and an
 * rdma_cm listener on it (s.l: the service's only listener points here,
 * so the struct lives as long as the test). */
struct standin {
	struct rcm_service tcp;
	struct rcm_dev dev;
	struct rcm_port port;
	struct rcm_channel *ch;
	struct rcm_id *l;
	struct cep_cm_id *lc;
};

/* After setup(): @s on a stand-in port of link layer @ll, its libcep
 * listener of backlog @backlog (0: the CM's). */
static void standin_open(struct standin *s, uint8_t ll, unsigned backlog)
{
	standin_port(&s->dev, &s->port, B.cm, ll);
	s->lc = service_listener_backlog(&s->tcp, CEP_RDMA_PS_TCP, backlog);
	s->tcp.port = &s->port;
	s->ch = rcm_channel_new();
	CHECK(s->ch != NULL);
	rdma_listener(&s->tcp, s->ch, RDMA_PS_TCP, IBV_QPT_RC, &s->l);
}

/* Passive id @c of a stand-in port: the QP parameters of its request
 * @rq from B's port attributes (the stand-in port's fit no REQ), as the
 * layer's request handler sets them on a real port, so that rdma_accept
 * answers and only the request's own end can refuse. */
static void standin_req_params(struct rdma_cm_id *c, const struct cep_req *rq)
{
	struct cep_port_info pinfo;

	B.tp->ops->query_port(B.tp, &pinfo);
	pthread_mutex_lock(&rcm_id_of(c)->mtx);
	CHECK_EQ(cep_qp_params_passive(&rcm_id_of(c)->qpp, &pinfo, rq), 0);
	rcm_id_of(c)->have_req = 1;
	pthread_mutex_unlock(&rcm_id_of(c)->mtx);
}

/* The end of such a test: destroy the passive rdma_cm id @c the test took
 * from the listener, the libcep listener, then the harness's nodes, the
 * port's QPN registry and the channel. */
static void standin_teardown(struct rdma_cm_id *c, struct standin *s)
{
	CHECK_EQ(rdma_destroy_id(c), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(s->lc), 0);
	s->tcp.nlisteners = 0;
	rcm_id_put(s->l);
	teardown_all();
	free(s->port.qpns);
	rcm_channel_free(s->ch);
}

#endif /* CEP_TEST_RDMACM_STANDIN_H */
