/* SPDX-License-Identifier: MIT */
/*
 * Guest-side connection tests of libcep's CM over the umad transport with
 * real RC QPs, moved through INIT/RTR/RTS by the verbs glue (cep/verbs.h)
 * and addressed the rdma_cm way (cep/rdma_cm.h: TCP port space, CMA header).
 *
 *   cm-guest server  DEV SELF_IP PEER_IP N READY   libcep listener for "client"
 *   cm-guest client  DEV SELF_IP PEER_IP N         N connections + reject,
 *                      server-side disconnect, unknown service (tests 1, 4)
 *   cm-guest kclient DEV SELF_IP PEER_IP PCAP      rdma_client's part against
 *                      the kernel's rdma_server, then a REQ to a port nobody
 *                      listens on (REJ 8); MADs captured to PCAP (tests 2, 4, 5)
 *   cm-guest kserver DEV SELF_IP PEER_IP READY     rdma_server's part for the
 *                      kernel's rdma_client (test 3)
 *
 * READY is a file created (write + rename) once the listener is up: the
 * peer guest waits for it (guestlib.sh gb_wait). For bench/guests.sh,
 * client/server read CM_GUEST_WINDOW (in flight, 16), CM_GUEST_SAMPLES
 * (RC exchanges, 5), CM_GUEST_BENCH (skip the test-4 extras),
 * CM_GUEST_WORKERS (CM workers, default one per CPU) and the diagnostic
 * CM_GUEST_UNIQUE_TID (see cap_send). Every expectation is
 * checked; the exit code is 0 only when all held. One thread runs the
 * application: CM events come through a channel, completions through a
 * completion channel, both polled together.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <cep/cm.h>
#include <cep/pcap.h>
#include <cep/rdma_cm.h>
#include <cep/transport.h>
#include <cep/umad.h>
#include <cep/verbs.h>

#define PORT_SERVICE 7471 /* rdma_server / rdma_client default */
#define PORT_NOBODY  7472
#define MSG 16            /* rdma_client/rdma_server exchange 16 bytes */
#define WINDOW 16         /* connections in flight (client), default */
#define SAMPLES 5         /* connections that carry RC traffic, default */
static unsigned window = WINDOW, samples_want = SAMPLES;
static int bench_only; /* CM_GUEST_BENCH: the n connections only, no test-4 extras */
#define REJ_PDATA "no thanks"

static int failures;
#define FAIL(...) do { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
		printf(__VA_ARGS__); printf("\n"); fflush(stdout); } while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- a transport wrapper: records every MAD (when a pcap is given) and
 * counts send failures by errno, then passes everything on ---- */

#define ERRNO_MAX 256
static _Atomic unsigned send_errno[ERRNO_MAX];

struct cap_transport {
	struct cep_transport base;
	struct cep_transport *inner;
	struct cep_pcap *pc;
	uint8_t self_gid[16];
	cep_recv_fn fn;
	void *ctx;
};

static struct cap_transport *cap_of(struct cep_transport *t)
{
	return (struct cap_transport *)(void *)t;
}

static void cap_write(struct cap_transport *c, const uint8_t *mad, size_t len,
		      const uint8_t *sgid, const uint8_t *dgid)
{
	struct cep_pcap_meta m;

	if (!c->pc)
		return;
	memset(&m, 0, sizeof(m));
	memcpy(m.sgid, sgid, 16);
	memcpy(m.dgid, dgid, 16);
	if (cep_pcap_write_mad(c->pc, mad, len, &m))
		FAIL("pcap write");
}

/* Diagnostic for the benchmark only (CM_GUEST_UNIQUE_TID=1, never in the
 * tests): give every outgoing MAD its own low 32 TID bits, to measure what
 * the engine's fix for umad's duplicate-TID EINVAL will give (see
 * docs/real-rdma.md). Neither libcep nor the kernel CM matches on TIDs. */
static int unique_tid;
static _Atomic uint32_t next_tid = 0x10000;

static int cap_send(struct cep_transport *t, const uint8_t *mad, size_t len,
		    const struct cep_mad_addr *to)
{
	struct cap_transport *c = cap_of(t);
	uint8_t copy[CEP_MAD_SIZE];
	int ret;

	if (unique_tid && len >= 16 && len <= sizeof(copy)) {
		uint32_t v = atomic_fetch_add(&next_tid, 1); /* many CM workers send */

		memcpy(copy, mad, len);
		copy[12] = (uint8_t)(v >> 24);
		copy[13] = (uint8_t)(v >> 16);
		copy[14] = (uint8_t)(v >> 8);
		copy[15] = (uint8_t)v;
		mad = copy;
	}
	ret = c->inner->ops->send(c->inner, mad, len, to);

	if (ret == 0)
		cap_write(c, mad, len, c->self_gid, to->gid);
	else if (-ret > 0 && -ret < ERRNO_MAX)
		atomic_fetch_add(&send_errno[-ret], 1); /* many CM workers send */
	return ret;
}

/* Runs on the umad receive thread; the pcap file has its own lock. */
static void cap_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	struct cap_transport *c = ctx;

	cap_write(c, mad, len, from->gid, c->self_gid);
	c->fn(c->ctx, mad, len, from);
}

static int cap_query(struct cep_transport *t, struct cep_port_info *out)
{
	return cap_of(t)->inner->ops->query_port(cap_of(t)->inner, out);
}

static int cap_start(struct cep_transport *t, cep_recv_fn fn, void *ctx)
{
	struct cap_transport *c = cap_of(t);

	c->fn = fn;
	c->ctx = ctx;
	return c->inner->ops->start(c->inner, cap_recv, c);
}

static void cap_stop(struct cep_transport *t)
{
	cap_of(t)->inner->ops->stop(cap_of(t)->inner);
}

static void cap_destroy(struct cep_transport *t)
{
	struct cap_transport *c = cap_of(t);

	c->inner->ops->destroy(c->inner);
	cep_pcap_close(c->pc);
	free(c);
}

static const struct cep_transport_ops cap_ops = {
	.send = cap_send, .query_port = cap_query, .start = cap_start,
	.stop = cap_stop, .destroy = cap_destroy,
};

/* ---- the application's view of one connection ---- */

enum { C_FREE, C_CONNECTING, C_UP, C_CLOSING, C_DONE };

struct conn {
	unsigned idx;
	int state;
	char cmd;                /* A accept, P ping, S server disconnects, R reject, U unknown */
	struct ibv_qp *qp;
	struct cep_cm_id *id;
	struct cep_qp_params qpp;
	uint8_t *sbuf, *rbuf;    /* MSG bytes each, in the MR */
	int released;            /* DREQ or DREP seen */
};

struct app {
	const char *mode;
	struct cep_transport *t;
	struct cep_port_info port;
	struct cep_cm *cm;
	struct cep_cm_channel *ch;
	struct ibv_context *ctx;
	struct ibv_device_attr dattr;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct conn *conns;
	unsigned nconn, next_qp;
	struct in_addr self_ip, peer_ip;
	uint8_t peer_gid[16];
	struct cep_mad_addr peer;
	struct cep_cm_id *listen_id;
	/* counts */
	unsigned ev[CEP_CM_EVENT_COUNT];
	unsigned established, released, samples_ok, rejected_28, rejected_8;
	unsigned data_in, data_out, rtu_lost;
	unsigned destroyed_expected;
};

static void gid_from_ip(uint8_t gid[16], struct in_addr a)
{
	memset(gid, 0, 16);
	gid[10] = gid[11] = 0xff;
	memcpy(gid + 12, &a, 4);
}

static int open_verbs(struct app *a, const char *dev, unsigned nqp)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	size_t bytes = (size_t)nqp * 2 * MSG;

	for (int i = 0; list && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), dev) == 0)
			a->ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!a->ctx) {
		FAIL("ibv_open_device %s", dev);
		return -1;
	}
	if (ibv_query_device(a->ctx, &a->dattr)) {
		FAIL("ibv_query_device");
		return -1;
	}
	a->pd = ibv_alloc_pd(a->ctx);
	a->cc = ibv_create_comp_channel(a->ctx);
	a->cq = a->cc ? ibv_create_cq(a->ctx, (int)(2 * nqp + 8), NULL, a->cc, 0) : NULL;
	a->buf = calloc(1, bytes);
	a->mr = a->pd && a->buf ? ibv_reg_mr(a->pd, a->buf, bytes, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!a->pd || !a->cq || !a->mr || ibv_req_notify_cq(a->cq, 0)) {
		FAIL("verbs resources (pd %p cq %p mr %p)", (void *)a->pd, (void *)a->cq,
		     (void *)a->mr);
		return -1;
	}
	a->conns = calloc(nqp, sizeof(*a->conns));
	a->nconn = nqp;
	/* QPs up front, each registered with the CM, as a real service does. */
	for (unsigned i = 0; i < nqp; i++) {
		struct ibv_qp_init_attr qa;
		struct conn *c = &a->conns[i];
		int ret;

		memset(&qa, 0, sizeof(qa));
		qa.send_cq = qa.recv_cq = a->cq;
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		qa.qp_type = IBV_QPT_RC;
		qa.sq_sig_all = 1;
		c->idx = i;
		c->qp = ibv_create_qp(a->pd, &qa);
		if (!c->qp) {
			FAIL("ibv_create_qp %u: %s", i, strerror(errno));
			return -1;
		}
		ret = cep_cm_qp_register(a->cm, c->qp->qp_num);
		if (ret) {
			FAIL("cep_cm_qp_register %u: %d", c->qp->qp_num, ret);
			return -1;
		}
		c->sbuf = a->buf + (size_t)i * 2 * MSG;
		c->rbuf = c->sbuf + MSG;
	}
	return 0;
}

static void close_verbs(struct app *a)
{
	for (unsigned i = 0; i < a->nconn; i++) {
		struct conn *c = &a->conns[i];
		int ret;

		if (!c->qp)
			continue;
		ret = cep_cm_qp_destroy(a->cm, c->qp->qp_num);
		CHECK(ret == 0, "cep_cm_qp_destroy %u: %d", c->qp->qp_num, ret);
		CHECK(ibv_destroy_qp(c->qp) == 0, "ibv_destroy_qp");
	}
	if (a->mr)
		ibv_dereg_mr(a->mr);
	if (a->cq)
		ibv_destroy_cq(a->cq);
	if (a->cc)
		ibv_destroy_comp_channel(a->cc);
	if (a->pd)
		ibv_dealloc_pd(a->pd);
	if (a->ctx)
		ibv_close_device(a->ctx);
	free(a->buf);
	free(a->conns);
}

static int post_recv(struct app *a, struct conn *c)
{
	struct ibv_sge sge = { (uintptr_t)c->rbuf, MSG, a->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = c->idx, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(c->qp, &wr, &bad);
}

static int post_send(struct app *a, struct conn *c)
{
	struct ibv_sge sge = { (uintptr_t)c->sbuf, MSG, a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = c->idx, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND }, *bad;

	return ibv_post_send(c->qp, &wr, &bad);
}

static struct conn *new_conn(struct app *a)
{
	struct conn *c;

	if (a->next_qp == a->nconn) {
		FAIL("out of QPs");
		return NULL;
	}
	c = &a->conns[a->next_qp++];
	c->state = C_CONNECTING;
	return c;
}

static uint32_t psn_of(unsigned idx, unsigned side)
{
	return (uint32_t)((idx + 1) * 2654435761u ^ (side << 20)) & 0xffffff;
}

static void dump_params(const char *who, const struct cep_qp_params *p)
{
	char g[64];

	inet_ntop(AF_INET6, p->primary.dgid, g, sizeof(g));
	printf("%s: QP %u -> %u: sq_psn 0x%06x rq_psn 0x%06x mtu %u rd_atomic %u/%u "
	       "timeout %u retry %u rnr_retry %u min_rnr %u dgid %s sgid_index %u hop %u "
	       "dlid %u access 0x%x\n", who, p->local_qpn, p->dest_qpn, p->sq_psn, p->rq_psn,
	       p->path_mtu, p->max_rd_atomic, p->max_dest_rd_atomic, p->primary.timeout,
	       p->retry_count, p->rnr_retry, p->min_rnr_timer, g, p->primary.sgid_index,
	       p->primary.hop_limit, p->primary.dlid, p->access_flags);
}

/* ---- passive side ---------------------------------------------------- */

/* A REQ: check the rdma_cm header, take a QP, RTS, post a receive, REP. */
static void on_req(struct app *a, const struct cep_cm_event *ev)
{
	const struct cep_req *rq = &ev->msg.u.req;
	struct cep_cm_accept_param acc;
	struct cep_cma_hdr h;
	struct conn *c;
	char cmd = 'A';
	int ret;

	ret = cep_cma_hdr_decode(ev->private_data, ev->private_data_len, rq->service_id, &h);
	CHECK(ret == 0, "REQ: CMA header: %d", ret);
	if (ret == 0) {
		CHECK(h.ip_version == 4, "REQ: IP version %u", h.ip_version);
		CHECK(cep_cma_addr_ipv4(h.src_addr) == a->peer_ip.s_addr, "REQ: source IP");
		CHECK(cep_cma_addr_ipv4(h.dst_addr) == a->self_ip.s_addr, "REQ: destination IP");
		CHECK(h.dst_port == PORT_SERVICE, "REQ: destination port %u", h.dst_port);
		CHECK(h.src_port != 0, "REQ: source port 0");
		if (ev->private_data_len > CEP_CMA_HDR_SIZE &&
		    ev->private_data[CEP_CMA_HDR_SIZE] != 0)
			cmd = (char)ev->private_data[CEP_CMA_HDR_SIZE];
	}
	if (cmd == 'R') {
		ret = cep_cm_reject(ev->id, CEP_REJ_CONSUMER_DEFINED, NULL, 0,
				    REJ_PDATA, sizeof(REJ_PDATA));
		CHECK(ret == 0, "cep_cm_reject: %d", ret);
		ret = cep_cm_destroy_id(ev->id);
		CHECK(ret == 0, "destroy rejected id: %d", ret);
		return;
	}
	c = new_conn(a);
	if (!c) {
		cep_cm_reject(ev->id, CEP_REJ_NO_QP, NULL, 0, NULL, 0);
		cep_cm_destroy_id(ev->id);
		return;
	}
	c->cmd = cmd;
	c->id = ev->id;
	cep_cm_id_set_context(ev->id, c);
	memset(&acc, 0, sizeof(acc));
	acc.size = sizeof(acc);
	acc.qpn = c->qp->qp_num;
	acc.starting_psn = psn_of(c->idx, 1);
	acc.responder_resources = (uint8_t)(rq->initiator_depth < a->dattr.max_qp_rd_atom ?
					    rq->initiator_depth : a->dattr.max_qp_rd_atom);
	acc.initiator_depth = (uint8_t)(rq->responder_resources < a->dattr.max_qp_init_rd_atom ?
					rq->responder_resources : a->dattr.max_qp_init_rd_atom);
	acc.target_ack_delay = 15;
	acc.failover_accepted = CEP_FAILOVER_NOT_SUPPORTED;
	acc.rnr_retry_count = 7;
	ret = cep_qp_params_passive(&c->qpp, &a->port, rq);
	if (!ret)
		ret = cep_qp_params_passive_accept(&c->qpp, &acc);
	if (!ret)
		ret = cep_verbs_modify_qp(c->qp, &c->qpp, IBV_QPS_RTS);
	if (!ret)
		ret = post_recv(a, c) ? -EIO : 0;
	if (ret) {
		FAIL("passive QP setup: %d", ret);
		cep_cm_reject(ev->id, CEP_REJ_NO_QP, NULL, 0, NULL, 0);
		cep_cm_destroy_id(ev->id);
		c->state = C_DONE;
		return;
	}
	if (a->mode[0] == 'k') {
		printf("%s: REQ: qpn %u psn 0x%06x resp_res %u init_depth %u mtu %u retry %u "
		       "rnr_retry %u ack_timeout %u hop %u\n", a->mode, rq->local_qpn,
		       rq->starting_psn, rq->responder_resources, rq->initiator_depth,
		       rq->path_mtu, rq->retry_count, rq->rnr_retry_count,
		       rq->primary.local_ack_timeout, rq->primary.hop_limit);
		dump_params(a->mode, &c->qpp);
	}
	ret = cep_cm_accept(ev->id, &acc);
	CHECK(ret == 0, "cep_cm_accept: %d", ret);
}

/* ---- active side ------------------------------------------------------ */

static uint16_t src_port;

static int start_conn(struct app *a, struct conn *c, char cmd)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .channel = a->ch, .context = c };
	struct cep_cm_conn_param p;
	struct cep_cma_hdr h;
	uint8_t pdata[CEP_REQ_PRIVATE_DATA_SIZE];
	uint16_t dport = cmd == 'U' ? PORT_NOBODY : PORT_SERVICE;
	int n, ret;

	c->cmd = cmd;
	ret = cep_cm_create_id(a->cm, &ia, &c->id);
	if (ret) {
		FAIL("cep_cm_create_id: %d", ret);
		return ret;
	}
	cep_cma_hdr_ipv4(&h, a->self_ip.s_addr, src_port++, a->peer_ip.s_addr, dport);
	{
		uint8_t user[5] = { (uint8_t)cmd, (uint8_t)(c->idx >> 24), (uint8_t)(c->idx >> 16),
				    (uint8_t)(c->idx >> 8), (uint8_t)c->idx };
		/* rdma_connect(id, NULL) sends the header alone. */
		n = cep_cma_hdr_encode(&h, user, cmd == 'K' ? 0 : sizeof(user), pdata, sizeof(pdata));
	}
	if (n < 0) {
		FAIL("cma header: %d", n);
		return n;
	}
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = cep_rdma_service_id(CEP_RDMA_PS_TCP, dport);
	memcpy(p.primary.local_gid, a->port.gid, 16);
	memcpy(p.primary.remote_gid, a->peer_gid, 16);
	p.primary.hop_limit = 64;
	p.primary.local_ack_timeout = cep_qp_ack_timeout(15, 14); /* ~270 ms */
	p.packet_life_time = 14;
	p.qpn = c->qp->qp_num;
	p.starting_psn = psn_of(c->idx, 0);
	p.responder_resources = (uint8_t)(a->dattr.max_qp_rd_atom < 4 ? a->dattr.max_qp_rd_atom : 4);
	p.initiator_depth = (uint8_t)(a->dattr.max_qp_init_rd_atom < 4 ?
				      a->dattr.max_qp_init_rd_atom : 4);
	p.remote_cm_response_timeout = 18; /* ~1 s */
	p.local_cm_response_timeout = 18;
	p.max_cm_retries = 15;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	p.transport_service_type = CEP_TS_RC;
	p.manual_rtu = 1; /* RTU only once our QP is in RTS */
	p.private_data = pdata;
	p.private_data_len = (size_t)n;
	p.peer = &a->peer;
	ret = cep_qp_params_active(&c->qpp, &a->port, &p);
	if (!ret)
		ret = cep_verbs_modify_qp(c->qp, &c->qpp, IBV_QPS_INIT);
	if (!ret)
		ret = post_recv(a, c) ? -EIO : 0;
	if (ret) {
		FAIL("active QP INIT: %d", ret);
		return ret;
	}
	c->state = C_CONNECTING;
	ret = cep_cm_connect(c->id, &p);
	CHECK(ret == 0, "cep_cm_connect: %d", ret);
	return ret;
}

static void send_ping(struct app *a, struct conn *c)
{
	for (unsigned i = 0; i < MSG; i++)
		c->sbuf[i] = (uint8_t)(c->idx + i);
	if (c->cmd == 'K')
		memcpy(c->sbuf, "libcep client!!", MSG);
	CHECK(post_send(a, c) == 0, "post_send");
}

static void disconnect(struct conn *c)
{
	int ret;

	if (c->state != C_UP)
		return;
	c->state = C_CLOSING;
	/* The peer may disconnect at the same time (rdma_server and
	 * rdma_client both do): its DREQ may have reached the CM before this
	 * call, whether or not we saw the DREQ_RECEIVED event yet. The
	 * contract (cm.h, as librdmacm's rdma_disconnect) makes that 0 too:
	 * the DREQ is answered with a DREP, or ours is already sent. */
	ret = cep_cm_disconnect(c->id, NULL, 0);
	CHECK(ret == 0, "cep_cm_disconnect: %d", ret);
}

static void on_rep(struct app *a, struct conn *c, const struct cep_cm_event *ev)
{
	const struct cep_rep *rp = &ev->msg.u.rep;
	int ret = cep_qp_params_active_rep(&c->qpp, rp);

	if (a->mode[0] == 'k') {
		printf("%s: REP: qpn %u psn 0x%06x resp_res %u init_depth %u ack_delay %u "
		       "failover %u rnr_retry %u srq %u\n", a->mode, rp->local_qpn,
		       rp->starting_psn, rp->responder_resources, rp->initiator_depth,
		       rp->target_ack_delay, rp->failover_accepted, rp->rnr_retry_count, rp->srq);
		dump_params(a->mode, &c->qpp);
	}

	if (!ret)
		ret = cep_verbs_modify_qp(c->qp, &c->qpp, IBV_QPS_RTS);
	if (ret) {
		FAIL("active QP RTR/RTS: %d", ret);
		cep_cm_reject(c->id, CEP_REJ_NO_QP, NULL, 0, NULL, 0);
		return;
	}
	ret = cep_cm_rtu(c->id, NULL, 0);
	CHECK(ret == 0, "cep_cm_rtu: %d", ret);
	if (ret)
		return;
	c->state = C_UP;
	a->established++;
	if (c->cmd == 'P' || c->cmd == 'K')
		send_ping(a, c);
	else if (c->cmd == 'A')
		disconnect(c);
	/* 'S': the server disconnects */
}

/* ---- events and completions -------------------------------------------- */

static int is_server(const struct app *a)
{
	return a->mode[0] == 's' || a->mode[1] == 's';
}

static void on_event(struct app *a, struct cep_cm_event *ev)
{
	struct conn *c = ev->context;
	int ret;

	a->ev[ev->type]++;
	if (!c && ev->type != CEP_CM_EV_REQ_RECEIVED && ev->type != CEP_CM_EV_DESTROYED) {
		FAIL("event %s for an id without a connection", cep_cm_event_name(ev->type));
		return;
	}
	switch (ev->type) {
	case CEP_CM_EV_REQ_RECEIVED:
		on_req(a, ev);
		break;
	case CEP_CM_EV_REP_RECEIVED:
		on_rep(a, c, ev);
		break;
	case CEP_CM_EV_RTU_RECEIVED:
		c->state = C_UP;
		a->established++;
		if (c->cmd == 'S')
			disconnect(c);
		break;
	case CEP_CM_EV_DREQ_RECEIVED:
	case CEP_CM_EV_DREP_RECEIVED:
		if (c->state == C_CONNECTING && is_server(a)) {
			/* The RTU was lost and the peer, established, already
			 * disconnects: a DREQ in REP_SENT implies the connection
			 * was up (the kernel CM accepts it there too). */
			a->established++;
			a->rtu_lost++;
		}
		if (!c->released)
			a->released++;
		c->released = 1;
		c->state = C_CLOSING;
		break;
	case CEP_CM_EV_TIMEWAIT_EXIT:
		c->state = C_DONE;
		ret = cep_cm_destroy_id(ev->id);
		CHECK(ret == 0, "destroy after timewait: %d", ret);
		break;
	case CEP_CM_EV_REJ_RECEIVED:
		if (!c) {
			FAIL("REJ for an id without a connection");
			break;
		}
		if (c->cmd == 'R' && ev->status == CEP_REJ_CONSUMER_DEFINED) {
			CHECK(ev->private_data_len >= sizeof(REJ_PDATA) &&
			      memcmp(ev->private_data, REJ_PDATA, sizeof(REJ_PDATA)) == 0,
			      "REJ private data");
			a->rejected_28++;
		} else if (c->cmd == 'U' && ev->status == CEP_REJ_INVALID_SERVICE_ID) {
			a->rejected_8++;
		} else {
			FAIL("REJ reason %d (%s) for '%c'", ev->status,
			     cep_rej_reason_name((unsigned)ev->status), c->cmd);
		}
		c->state = C_DONE;
		ret = cep_cm_destroy_id(ev->id);
		CHECK(ret == 0, "destroy after REJ: %d", ret);
		break;
	case CEP_CM_EV_DESTROYED:
		break;
	default:
		FAIL("unexpected event %s status %d", cep_cm_event_name(ev->type), ev->status);
		break;
	}
}

static void on_wc(struct app *a, const struct ibv_wc *wc)
{
	struct conn *c = &a->conns[wc->wr_id];

	if (wc->status != IBV_WC_SUCCESS) {
		/* Receives still posted on finished QPs flush at the end. */
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			FAIL("completion %s on %u", ibv_wc_status_str(wc->status), c->idx);
		return;
	}
	if (wc->opcode == IBV_WC_RECV) {
		CHECK(wc->byte_len == MSG, "received %u bytes", wc->byte_len);
		a->data_in++;
		if (is_server(a)) {
			/* Answer: libcep's client gets its bytes + 1; the kernel's
			 * rdma_client gets 16 bytes back, as from rdma_server. */
			for (unsigned i = 0; i < MSG; i++)
				c->sbuf[i] = (uint8_t)(c->rbuf[i] + 1);
			CHECK(post_send(a, c) == 0, "post_send (answer)");
		} else {
			if (c->cmd == 'P')
				for (unsigned i = 0; i < MSG; i++)
					CHECK(c->rbuf[i] == (uint8_t)(c->idx + i + 1),
					      "answer byte %u of %u", i, c->idx);
			a->samples_ok++;
			disconnect(c);
		}
	} else if (wc->opcode == IBV_WC_SEND) {
		a->data_out++;
		if (is_server(a) && a->mode[0] == 'k')
			disconnect(c); /* rdma_server disconnects after its send */
	}
}

/* Wait up to @ms for CM events or completions and handle them all. */
static void pump(struct app *a, int ms)
{
	struct pollfd pf[2] = {
		{ .fd = cep_cm_channel_fd(a->ch), .events = POLLIN },
		{ .fd = a->cc->fd, .events = POLLIN },
	};
	struct cep_cm_event *ev;
	struct ibv_wc wc[16];
	int n;

	if (poll(pf, 2, ms) < 0)
		return;
	while (cep_cm_get_event(a->ch, &ev) == 0) {
		on_event(a, ev);
		cep_cm_ack_event(ev);
	}
	if (pf[1].revents & POLLIN) {
		struct ibv_cq *cq;
		void *cctx;

		if (ibv_get_cq_event(a->cc, &cq, &cctx) == 0) {
			ibv_ack_cq_events(cq, 1);
			ibv_req_notify_cq(cq, 0);
		}
	}
	while ((n = ibv_poll_cq(a->cq, 16, wc)) > 0)
		for (int i = 0; i < n; i++)
			on_wc(a, &wc[i]);
}

static void signal_ready(const char *path)
{
	char tmp[512];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%.6f\n", now_s()) < 0 || fclose(f) || rename(tmp, path))
		FAIL("ready file %s", path);
}

/* ---- set-up ------------------------------------------------------------ */

static int setup(struct app *a, const char *dev, const char *self, const char *peer,
		 unsigned nqp, const char *pcap)
{
	struct cep_umad_attr ua = { .size = sizeof(ua), .dev_name = dev, .port_num = 1,
				    .gid_index = CEP_UMAD_GID_AUTO };
	struct cep_cm_attr ca = { .size = sizeof(ca) };
	int ret;

	if (inet_pton(AF_INET, self, &a->self_ip) != 1 ||
	    inet_pton(AF_INET, peer, &a->peer_ip) != 1) {
		FAIL("bad IPv4 address");
		return -1;
	}
	gid_from_ip(a->peer_gid, a->peer_ip);
	ret = cep_umad_open(&ua, &a->t);
	if (ret) {
		FAIL("cep_umad_open %s: %d (%s)", dev, ret, strerror(-ret));
		return -1;
	}
	{
		struct cap_transport *c = calloc(1, sizeof(*c));

		ret = !c ? -ENOMEM : pcap ? cep_pcap_open(pcap, CEP_PCAP_ROCEV2, &c->pc) : 0;
		if (ret) {
			FAIL("pcap %s: %d", pcap, ret);
			free(c);
			return -1;
		}
		c->base.ops = &cap_ops;
		c->inner = a->t;
		a->t = &c->base;
	}
	ret = a->t->ops->query_port(a->t, &a->port);
	if (ret) {
		FAIL("query_port: %d", ret);
		return -1;
	}
	memcpy(cap_of(a->t)->self_gid, a->port.gid, 16);
	memset(&a->peer, 0, sizeof(a->peer));
	a->peer.grh_present = 1;
	a->peer.gid_index = a->port.gid_index; /* the IPv4-mapped source GID */
	a->peer.hop_limit = 64;
	a->peer.qpn = 1;
	a->peer.qkey = CEP_QP1_QKEY;
	memcpy(a->peer.gid, a->peer_gid, 16);
	ca.transport = a->t;
	/* One per vCPU of the guests by default; CM_GUEST_WORKERS overrides. */
	ca.workers = getenv("CM_GUEST_WORKERS") ?
		     (unsigned)strtoul(getenv("CM_GUEST_WORKERS"), NULL, 10) : 0;
	ret = cep_cm_create(&ca, &a->cm);
	if (ret) {
		FAIL("cep_cm_create: %d", ret);
		return -1;
	}
	ret = cep_cm_channel_create(&a->ch);
	if (ret) {
		FAIL("cep_cm_channel_create: %d", ret);
		return -1;
	}
	src_port = (uint16_t)(40000 + getpid() % 20000);
	return open_verbs(a, dev, nqp);
}

static int listen_on(struct app *a, uint16_t port)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .channel = a->ch };
	int ret = cep_cm_create_id(a->cm, &ia, &a->listen_id);

	if (!ret)
		ret = cep_cm_listen(a->listen_id, cep_rdma_service_id(CEP_RDMA_PS_TCP, port),
				    ~0ull);
	CHECK(ret == 0, "listen: %d", ret);
	return ret;
}

static void teardown(struct app *a)
{
	struct cep_cm_stats st;
	double end;

	memset(&st, 0, sizeof(st));
	st.size = sizeof(st);
	if (a->listen_id) {
		CHECK(cep_cm_destroy_id(a->listen_id) == 0, "destroy listener");
		a->listen_id = NULL;
	}
	/* Drain the DESTROYED events of every id (the listener's too). */
	end = now_s() + 10;
	while (now_s() < end) {
		if (a->cm && cep_cm_get_stats(a->cm, &st) == 0 && st.ids == 0)
			break;
		pump(a, 20);
	}
	/* ids drop when their DESTROYED is posted; the workers deliver it to
	 * the channel a moment later: let them finish, then take the last
	 * ones, so the channel is empty and unused when destroyed. */
	if (a->cm && st.ids == 0) {
		CHECK(cep_cm_quiesce(a->cm, 5000) == 0, "quiesce");
		pump(a, 0);
	}
	if (a->cm) {
		CHECK(st.ids == 0, "%" PRIu64 " ids left", st.ids);
		printf("%s: MADs sent REQ %" PRIu64 " REP %" PRIu64 " RTU %" PRIu64
		       " REJ %" PRIu64 " DREQ %" PRIu64 " DREP %" PRIu64 "; retries %" PRIu64
		       " duplicates %" PRIu64 " send errors %" PRIu64 "\n", a->mode,
		       st.sent[CEP_MSG_REQ], st.sent[CEP_MSG_REP], st.sent[CEP_MSG_RTU],
		       st.sent[CEP_MSG_REJ], st.sent[CEP_MSG_DREQ], st.sent[CEP_MSG_DREP],
		       st.retries, st.duplicates, st.send_errors);
	}
	if (a->pd)
		close_verbs(a);
	if (a->ch)
		CHECK(cep_cm_channel_destroy(a->ch) == 0, "channel destroy");
	if (a->cm)
		CHECK(cep_cm_destroy(a->cm) == 0, "cep_cm_destroy");
	if (a->t)
		a->t->ops->destroy(a->t);
	for (unsigned i = 0; i < ERRNO_MAX; i++)
		if (atomic_load(&send_errno[i]))
			printf("%s: umad send failed %u times with %s\n", a->mode,
			       atomic_load(&send_errno[i]), strerror((int)i));
	printf("%s: events:", a->mode);
	for (unsigned i = 0; i < CEP_CM_EVENT_COUNT; i++)
		if (a->ev[i])
			printf(" %s=%u", cep_cm_event_name(i), a->ev[i]);
	printf("\n");
}

/* Loop until @done or @deadline (seconds from now). */
#define RUN_UNTIL(a, done, secs) do { \
		double dl_ = now_s() + (secs); \
		while (!(done) && now_s() < dl_) \
			pump((a), 50); \
		CHECK((done), "timed out waiting for: %s", #done); \
	} while (0)

/* ---- modes --------------------------------------------------------------- */

static int run_client(struct app *a, unsigned n)
{
	unsigned started = 0, every, i;
	double t0, t1;

	/* n normal connections (every every-th with RC traffic), then S, R, U. */
	every = !samples_want ? n + 1 : n / samples_want ? n / samples_want : 1;
	t0 = now_s();
	while (started < n || a->released < n) {
		while (started < n && started - a->released < window && !failures) {
			struct conn *c = new_conn(a);

			if (!c || start_conn(a, c, samples_want && started % every == 0 ? 'P' : 'A'))
				return 1;
			started++;
		}
		if (failures)
			break;
		pump(a, 50);
		if (now_s() - t0 > 240) {
			FAIL("%u connections not released after 240 s (%u up)", n - a->released,
			     a->established);
			break;
		}
	}
	t1 = now_s();
	printf("client: %u connections established and released in %.2f s (%.0f/s), "
	       "%u with RC send/receive\n", a->released, t1 - t0, a->released / (t1 - t0),
	       a->samples_ok);
	CHECK(a->established == n, "established %u of %u", a->established, n);
	CHECK(a->samples_ok == (samples_want ? (n + every - 1) / every : 0), "RC samples %u",
	      a->samples_ok);
	if (failures)
		return 1;
	if (bench_only)
		return 0;

	/* Server-initiated disconnect, consumer reject, unknown service. */
	{
		struct conn *s = new_conn(a), *r = new_conn(a), *u = new_conn(a);

		if (!s || !r || !u || start_conn(a, s, 'S') || start_conn(a, r, 'R') ||
		    start_conn(a, u, 'U'))
			return 1;
		RUN_UNTIL(a, s->released && a->rejected_28 == 1 && a->rejected_8 == 1, 60);
		CHECK(a->ev[CEP_CM_EV_DREQ_RECEIVED] == 1, "client DREQ_RECEIVED %u (want 1)",
		      a->ev[CEP_CM_EV_DREQ_RECEIVED]);
		printf("client: server-side disconnect seen (DREQ_RECEIVED), REJ %d (%s) "
		       "with private data, REJ %d (%s) for a service nobody listens on\n",
		       CEP_REJ_CONSUMER_DEFINED, cep_rej_reason_name(CEP_REJ_CONSUMER_DEFINED),
		       CEP_REJ_INVALID_SERVICE_ID, cep_rej_reason_name(CEP_REJ_INVALID_SERVICE_ID));
	}
	/* Every connection leaves timewait. */
	RUN_UNTIL(a, a->ev[CEP_CM_EV_TIMEWAIT_EXIT] == n + 1, 60);
	CHECK(a->ev[CEP_CM_EV_DREP_RECEIVED] == n, "client DREP_RECEIVED %u",
	      a->ev[CEP_CM_EV_DREP_RECEIVED]);
	for (i = 0; i < a->next_qp; i++)
		CHECK(a->conns[i].state == C_DONE, "connection %u state %d", i,
		      a->conns[i].state);
	return failures ? 1 : 0;
}

static int run_server(struct app *a, unsigned n, const char *ready)
{
	unsigned every = samples_want && n / samples_want ? n / samples_want : 1;
	unsigned samples = samples_want ? (n + every - 1) / every : 0;

	if (listen_on(a, PORT_SERVICE))
		return 1;
	signal_ready(ready);
	/* n + S accepted (+ R rejected), all released and out of timewait. */
	unsigned extra = bench_only ? 0 : 1; /* the 'S' connection (and 'R') */

	RUN_UNTIL(a, a->ev[CEP_CM_EV_TIMEWAIT_EXIT] == n + extra &&
		  a->ev[CEP_CM_EV_REQ_RECEIVED] == n + 2 * extra, 300);
	CHECK(a->established == n + extra, "server established %u", a->established);
	CHECK(a->ev[CEP_CM_EV_DREQ_RECEIVED] == n, "server DREQ_RECEIVED %u",
	      a->ev[CEP_CM_EV_DREQ_RECEIVED]);
	CHECK(a->ev[CEP_CM_EV_DREP_RECEIVED] == extra, "server DREP_RECEIVED %u",
	      a->ev[CEP_CM_EV_DREP_RECEIVED]);
	CHECK(a->data_in == samples && a->data_out == samples, "server data in %u out %u",
	      a->data_in, a->data_out);
	printf("server: %u REQs, %u established (%u by RTU, %u by a DREQ after a lost RTU), "
	       "%u released by the client, %u by us, %u RC exchanges\n",
	       a->ev[CEP_CM_EV_REQ_RECEIVED], a->established, a->established - a->rtu_lost,
	       a->rtu_lost, a->ev[CEP_CM_EV_DREQ_RECEIVED], extra, a->data_in);
	return failures ? 1 : 0;
}

static void qp_state(struct conn *c)
{
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(c->qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RQ_PSN |
			 IBV_QP_DEST_QPN, &ia) == 0)
		printf("QP %u: state %d sq_psn 0x%06x rq_psn 0x%06x dest %u\n", c->qp->qp_num,
		       at.qp_state, at.sq_psn, at.rq_psn, at.dest_qp_num);
}

static int run_kclient(struct app *a)
{
	struct conn *c = new_conn(a), *u = new_conn(a);
	double t0 = now_s();

	/* rdma_client: connect, send 16 bytes, receive 16, disconnect. */
	if (!c || start_conn(a, c, 'K'))
		return 1;
	RUN_UNTIL(a, c->state == C_DONE || failures, 40);
	CHECK(a->established == 1, "not established");
	CHECK(a->samples_ok == 1, "no 16-byte answer from rdma_server");
	CHECK(a->data_out == 1, "send not completed");
	qp_state(c);
	printf("kclient: connected to rdma_server, sent %u message(s), received %u, released "
	       "(%s), timewait over, %.2f s\n", a->data_out, a->data_in,
	       a->ev[CEP_CM_EV_DREP_RECEIVED] ? "DREP received" : "DREQ received",
	       now_s() - t0);
	/* Nobody listens on 7472: the kernel CM answers REJ 8. */
	if (!u || start_conn(a, u, 'U'))
		return 1;
	RUN_UNTIL(a, a->rejected_8 == 1 || failures, 60);
	printf("kclient: REQ to port %d: REJ %d (%s)\n", PORT_NOBODY,
	       CEP_REJ_INVALID_SERVICE_ID, cep_rej_reason_name(CEP_REJ_INVALID_SERVICE_ID));
	return failures ? 1 : 0;
}

static int run_kserver(struct app *a, const char *ready)
{
	struct conn *c;

	if (listen_on(a, PORT_SERVICE))
		return 1;
	signal_ready(ready);
	RUN_UNTIL(a, a->next_qp == 1 || failures, 120);
	if (failures)
		return 1;
	c = &a->conns[0];
	RUN_UNTIL(a, c->state == C_DONE || failures, 40);
	CHECK(a->established == 1, "not established");
	CHECK(a->data_in == 1 && a->data_out == 1, "data in %u out %u", a->data_in,
	      a->data_out);
	qp_state(c);
	printf("kserver: accepted rdma_client, received %u message(s), sent %u, released (%s), "
	       "timewait over\n", a->data_in, a->data_out,
	       a->ev[CEP_CM_EV_DREQ_RECEIVED] ? "DREQ received" : "DREP received");
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct app a;
	unsigned n = 0;
	int rc = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(&a, 0, sizeof(a));
	if (argc < 5) {
		fprintf(stderr, "usage: see the head of cm-guest.c\n");
		return 2;
	}
	a.mode = argv[1];
	if (!strcmp(a.mode, "client") || !strcmp(a.mode, "server")) {
		if (argc < 6 + (a.mode[0] == 's')) {
			fprintf(stderr, "%s: missing arguments\n", a.mode);
			return 2;
		}
		n = (unsigned)strtoul(argv[5], NULL, 10);
		if (n == 0 || n > 100000)
			return 2;
		/* Optional, for the benchmark (bench/guests.sh): in flight, samples. */
		if (getenv("CM_GUEST_WINDOW"))
			window = (unsigned)strtoul(getenv("CM_GUEST_WINDOW"), NULL, 10);
		if (getenv("CM_GUEST_SAMPLES"))
			samples_want = (unsigned)strtoul(getenv("CM_GUEST_SAMPLES"), NULL, 10);
		if (window == 0 || samples_want > n)
			return 2;
		unique_tid = getenv("CM_GUEST_UNIQUE_TID") != NULL;
		bench_only = getenv("CM_GUEST_BENCH") != NULL;
		if (unique_tid)
			printf("%s: DIAGNOSTIC: unique TIDs rewritten in the transport\n", argv[1]);
		if (setup(&a, argv[2], argv[3], argv[4], n + 3, NULL) == 0)
			rc = a.mode[0] == 'c' ? run_client(&a, n) : run_server(&a, n, argv[6]);
	} else if (!strcmp(a.mode, "kclient") && argc >= 6) {
		if (setup(&a, argv[2], argv[3], argv[4], 2, argv[5]) == 0)
			rc = run_kclient(&a);
	} else if (!strcmp(a.mode, "kserver") && argc >= 6) {
		if (setup(&a, argv[2], argv[3], argv[4], 1, NULL) == 0)
			rc = run_kserver(&a, argv[5]);
	} else {
		fprintf(stderr, "unknown mode %s\n", a.mode);
		return 2;
	}
	teardown(&a);
	if (failures)
		rc = 1;
	printf("%s: %s (%d failure(s))\n", a.mode, rc ? "FAILED" : "OK", failures);
	return rc;
}
