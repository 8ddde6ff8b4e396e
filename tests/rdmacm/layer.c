/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep without a device: the layer's answers checked on the
 * in-process fabric (tests/cm/harness.h: CM node B, raw peer C). The
 * layer's objects are linked in (not librdmacm.so.1), so its private
 * functions (rcm_cep_handler, rcm_id_new) drive a libcep listener and ids
 * directly; ports and devices are stand-ins that only name B's CM.
 * Expected answers are the kernel's: cma.c (cma_ib_req_handler, rdma_accept)
 * and cm.c (cm_destroy_id, ib_send_cm_rep / _rej / _sidr_rep).
 * Usage: test-rdmacm-layer NAME.
 */
#include <arpa/inet.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cep/rdma_cm.h>

#include "../cm/harness.h"
#include "rdmacm.h"
#include "standin.h"

/* A CMA header from 10.0.0.1:5555 to 10.0.0.2:PORT_RDMA. */
static void cma_hdr(uint8_t *pdata, size_t len)
{
	struct cep_cma_hdr h;

	cep_cma_hdr_ipv4(&h, htonl(0x0a000001), 5555, htonl(0x0a000002), PORT_RDMA);
	CHECK_EQ(cep_cma_hdr_encode(&h, NULL, 0, pdata, len), CEP_CMA_HDR_SIZE);
}

/* Issue 17: a REQ / SIDR_REQ for a port rdma_cm listens on whose CMA
 * header names an address no rdma_cm listener has. The kernel's
 * cma_ib_req_handler fails (cma_ib_id_from_event finds no listener), so
 * ib_cm destroys the new cm_id: REJ 28 "consumer defined" (cm_destroy_id
 * in REQ_RCVD), SIDR_REP status 2 "reject" (cm_reject_sidr_req). Was REJ 8
 * and SIDR status 1 here. */
static void t_no_listener(void)
{
	struct rcm_service tcp, udp;
	struct cep_cm_id *lt, *lu;
	struct cep_msg m, r;

	setup(2, 0);
	lt = service_listener(&tcp, CEP_RDMA_PS_TCP);
	lu = service_listener(&udp, CEP_RDMA_PS_UDP);
	raw_req(&m, 0x9100, 0x900);
	m.u.req.service_id = tcp.sid;
	cma_hdr(m.u.req.private_data, sizeof(m.u.req.private_data));
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	r = raw_last(CEP_MSG_REJ);
	CHECK_EQ(r.u.rej.reason, CEP_REJ_CONSUMER_DEFINED);
	CHECK_EQ(r.u.rej.remote_comm_id, 0x9100);
	CHECK_EQ(r.u.rej.message_rejected, CEP_MSG_CODE_REQ);
	CHECK_EQ(r.hdr.tid, m.hdr.tid);
	cep_msg_init(&m, CEP_MSG_SIDR_REQ, 0x5151);
	m.u.sidr_req.request_id = 0x9101;
	m.u.sidr_req.service_id = udp.sid;
	m.u.sidr_req.partition_key = 0xffff;
	cma_hdr(m.u.sidr_req.private_data, sizeof(m.u.sidr_req.private_data));
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_SIDR_REP, 1));
	r = raw_last(CEP_MSG_SIDR_REP);
	CHECK_EQ(r.u.sidr_rep.status, CEP_SIDR_REJECT);
	CHECK_EQ(r.u.sidr_rep.request_id, 0x9101);
	/* a header that does not parse: the same answers, as before */
	raw_req(&m, 0x9102, 0x901);
	m.u.req.service_id = tcp.sid;
	m.u.req.private_data[0] = 9; /* CMA version 9 */
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 2));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_CONSUMER_DEFINED);
	CHECK_EQ(stats_of(&B).rej_sent[CEP_REJ_INVALID_SERVICE_ID], 0);
	CHECK_EQ(cep_cm_destroy_id_sync(lt), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(lu), 0);
	teardown_all();
}

/* A listener found, but of another QP type than the request's (a REQ
 * for an RC connection on a port of the UDP space, whose listeners are
 * UD): the kernel's cma_ib_check_req_qp_type fails cma_ib_req_handler,
 * REJ 28. Before, a connection request of the wrong type was queued. */
static void t_qp_type(void)
{
	struct rcm_service udp;
	struct rcm_dev dev;
	struct rcm_port port;
	struct rcm_channel *ch;
	struct rcm_id *ul;
	struct cep_cm_id *lu;
	struct cep_msg m;

	setup(2, 0);
	lu = service_listener(&udp, CEP_RDMA_PS_UDP);
	standin_port(&dev, &port, NULL, 0);
	udp.port = &port;
	ch = rcm_channel_new();
	CHECK(ch != NULL);
	rdma_listener(&udp, ch, RDMA_PS_UDP, IBV_QPT_UD, &ul);
	raw_req(&m, 0x9110, 0x900);
	m.u.req.service_id = udp.sid;
	cma_hdr(m.u.req.private_data, sizeof(m.u.req.private_data));
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.reason, CEP_REJ_CONSUMER_DEFINED);
	CHECK_EQ(raw_last(CEP_MSG_REJ).u.rej.remote_comm_id, 0x9110);
	CHECK_EQ(raw_count(CEP_MSG_REP) + raw_count(CEP_MSG_MRA), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(lu), 0);
	udp.nlisteners = 0;
	rcm_id_put(ul);
	rcm_channel_free(ch);
	teardown_all();
}

/* Issue 17: private data longer than the message carries is EINVAL, as
 * from the kernel (ib_send_cm_rep, ib_send_cm_rej, ib_send_cm_sidr_rep
 * return -EINVAL; librdmacm passes it on), not EMSGSIZE. rdma_connect
 * already said EINVAL. Checked on ids in the state where the call would
 * otherwise go ahead; nothing is sent. */
static void t_pdata_einval(void)
{
	static uint8_t big[255];
	struct rcm_dev dev;
	struct rcm_port port;
	struct rcm_channel *ch;
	struct rcm_id *u, *r;
	struct rdma_conn_param cp;
	struct cep_msg req;

	setup(2, 0);
	standin_port(&dev, &port, B.cm, 0);
	ch = rcm_channel_new();
	CHECK(ch != NULL);
	/* UD: a connection request taken (RCM_CONNECT), SIDR_REP 136 bytes */
	u = rcm_id_new(ch, NULL, RDMA_PS_UDP, IBV_QPT_UD);
	u->port = &port;
	u->state = RCM_CONNECT;
	u->cep = make_id(&B);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = big;
	cp.private_data_len = CEP_SIDR_REP_PRIVATE_DATA_SIZE + 1;
	errno = 0;
	CHECK_EQ(rdma_accept(&u->id, &cp), -1);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK_EQ(rdma_reject(&u->id, big, CEP_SIDR_REP_PRIVATE_DATA_SIZE + 1), -1);
	CHECK_EQ(errno, EINVAL);
	/* RC: REP 196 bytes, REJ 148 */
	r = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	r->port = &port;
	r->state = RCM_CONNECT;
	r->cep = make_id(&B);
	raw_req(&req, 0x9200, 0x900);
	standin_req_params(&r->id, &req.u.req);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = big;
	cp.private_data_len = CEP_REP_PRIVATE_DATA_SIZE + 1;
	cp.qp_num = 0x200;
	cp.responder_resources = RDMA_MAX_RESP_RES;
	cp.initiator_depth = RDMA_MAX_INIT_DEPTH;
	errno = 0;
	CHECK_EQ(rdma_accept(&r->id, &cp), -1);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK_EQ(rdma_reject(&r->id, big, CEP_REJ_PRIVATE_DATA_SIZE + 1), -1);
	CHECK_EQ(errno, EINVAL);
	/* at the limit: the libcep id is IDLE, so EINVAL for the state, and
	 * nothing went out for any of these */
	errno = 0;
	CHECK_EQ(rdma_reject(&r->id, big, CEP_REJ_PRIVATE_DATA_SIZE), -1);
	CHECK_EQ(errno, EINVAL);
	settle();
	CHECK_EQ(C.n, 0);
	rcm_qp_unregister(r);
	free(port.qpns);
	u->cep = r->cep = NULL; /* the harness destroys B's ids */
	rcm_id_put(u);
	rcm_id_put(r);
	rcm_channel_free(ch);
	teardown_all();
}

/* Set up B with a stand-in RoCE port and its TCP-space listener (@s), and
 * send it a REQ from C (comm ID @comm_id, kept in @m) for that service:
 * the rdma_cm id of its CONNECT_REQUEST, taken and acked. */
static struct rdma_cm_id *tcp_request(struct standin *s, uint32_t comm_id, struct cep_msg *m)
{
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *c;

	setup(2, 0);
	standin_open(s, IBV_LINK_LAYER_ETHERNET, 0);
	raw_req(m, comm_id, 0x900);
	m->u.req.service_id = s->tcp.sid;
	cma_hdr(m->u.req.private_data, sizeof(m->u.req.private_data));
	raw_send(m, LID_B);
	settle();
	CHECK_EQ(rdma_get_cm_event(&s->ch->ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	c = ev->id;
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	return c;
}

/* Issue 21: the application answers a connection request after its
 * requester gave up (the CM's half-open limit passed: cmtime's server
 * under a 10,000-connection storm). The kernel's REQ_RCVD never expires:
 * its rdma_accept succeeds and the REP's timeout ends the connection with
 * UNREACHABLE. Here rdma_accept failed with EINVAL and cmtime's server
 * exited ("failure accepting: Invalid argument"); now it returns 0, sends
 * nothing, and the id's UNREACHABLE (-ETIMEDOUT) follows. */
static void t_accept_expired(void)
{
	struct standin s;
	struct rdma_cm_event *ev = NULL;
	struct rdma_conn_param cp;
	struct rdma_cm_id *c;
	struct cep_msg m;

	half_open_ms_of[1] = 500; /* B's limit */
	c = tcp_request(&s, 0x9300, &m);
	standin_req_params(c, &m.u.req);
	advance_ms(600); /* past the limit: the request expires */
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x200;
	cp.responder_resources = RDMA_MAX_RESP_RES;
	cp.initiator_depth = RDMA_MAX_INIT_DEPTH;
	CHECK_EQ(rdma_accept(c, &cp), 0);
	settle();
	CHECK_EQ(raw_count(CEP_MSG_REP), 0);
	CHECK_EQ(rdma_get_cm_event(&s.ch->ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_UNREACHABLE);
	CHECK_EQ(ev->status, -ETIMEDOUT);
	CHECK(ev->id == c);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	standin_teardown(c, &s);
}

/* Issue 27: through cepd an rdma_accept leaves without waiting for cepd
 * (cm_accept_nowait), and what cepd refuses comes back as the id's
 * REP_ERROR with the refusal's status (the same for REQ_ERROR when cepd
 * has gone: -ECONNRESET). The application gets what the kernel's failed
 * rdma_accept gives it: CONNECT_ERROR with that status (and its QP to
 * ERR), not the UNREACHABLE (-ETIMEDOUT) of a peer that did not answer,
 * which the CM's own REQ_ERROR / REP_ERROR (status -ETIMEDOUT, or 0 for a
 * request that expired) still give, as does a SIDR_REQ_ERROR whatever
 * its status. The events are handed to the layer's handler as the
 * attached context's reader hands them. */
static void t_refused_event(void)
{
	static const struct { int type, status, want, want_status; } cases[] = {
		{ CEP_CM_EV_REP_ERROR, -ENOENT, RDMA_CM_EVENT_CONNECT_ERROR, -ENOENT },
		{ CEP_CM_EV_REQ_ERROR, -ECONNRESET, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET },
		{ CEP_CM_EV_REP_ERROR, -ETIMEDOUT, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT },
		{ CEP_CM_EV_REQ_ERROR, 0, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT },
		{ CEP_CM_EV_SIDR_REQ_ERROR, -ECONNRESET, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT },
	};
	struct standin s;
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *c;
	struct cep_msg m;

	c = tcp_request(&s, 0x9400, &m);
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cep_cm_id *cid = rcm_id_of(c)->cep;
		struct cep_cm_event e;

		memset(&e, 0, sizeof(e));
		e.type = cases[i].type;
		e.status = cases[i].status;
		e.msg.type = CEP_MSG_INVALID;
		e.id = cid;
		e.context = cep_cm_id_context(cid);
		CHECK_EQ(rcm_cep_handler(cid, &e), 0);
		CHECK_EQ(rdma_get_cm_event(&s.ch->ch, &ev), 0);
		CHECK_EQ(ev->event, cases[i].want);
		CHECK_EQ(ev->status, cases[i].want_status);
		CHECK(ev->id == c);
		CHECK_EQ(rdma_ack_cm_event(ev), 0);
	}
	standin_teardown(c, &s);
}

/* Issue 21: the CM's listener backlog bounds the requests the application
 * has not taken yet, as ucma's backlog counts the CONNECT_REQUESTs not yet
 * fetched. A server that takes each request at once and answers later
 * (cmtime: a queue to its request thread) holds more unanswered requests
 * than the backlog; only untaken ones past it are dropped (for the peer to
 * retry). Before, every unanswered request counted: cmtime's server at
 * 10,000 connections held 1,024 and dropped the rest for the requesters
 * to retry, over and over. Here: backlog 4; five REQs untaken drop one;
 * the four taken (still unanswered) make room for four more. */
/* The next CONNECT_REQUEST on @ch, taken and acked: its id (NULL, a
 * failure counted, when none comes within 5 s: never blocks). */
static struct rdma_cm_id *take_request(struct rcm_channel *ch)
{
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *c;

	if (poll(&(struct pollfd){ .fd = ch->ch.fd, .events = POLLIN }, 1, 5000) != 1) {
		CHECK(!"a CONNECT_REQUEST");
		return NULL;
	}
	CHECK_EQ(rdma_get_cm_event(&ch->ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	c = ev->id;
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	return c;
}

static void t_backlog_taken(void)
{
	enum { BACKLOG = 4 };
	struct standin s;
	struct rdma_cm_id *c[2 * BACKLOG];
	struct rdma_conn_param cp;
	struct cep_msg m, first;
	unsigned i, n = 0;

	setup(2, 0);
	standin_open(&s, IBV_LINK_LAYER_ETHERNET, BACKLOG);
	for (i = 0; i < 2 * BACKLOG + 2; i++) {
		raw_req(&m, 0x9400 + i, 0x900 + i);
		m.u.req.service_id = s.tcp.sid;
		cma_hdr(m.u.req.private_data, sizeof(m.u.req.private_data));
		raw_send(&m, LID_B);
		settle();
		if (i == 0)
			first = m;
		if (i == BACKLOG) { /* the fifth, untaken: dropped */
			CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BACKLOG], 1);
			/* take the four; they stay unanswered */
			for (; n < BACKLOG; n++)
				c[n] = take_request(s.ch);
		}
	}
	/* four of the last five fit, untaken; the fifth is dropped */
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BACKLOG], 2);
	for (; n < 2 * BACKLOG; n++)
		c[n] = take_request(s.ch);
	CHECK_EQ(poll(&(struct pollfd){ .fd = s.ch->ch.fd, .events = POLLIN }, 1, 0), 0);
	CHECK_EQ(raw_count(CEP_MSG_REJ), 0);
	CHECK_EQ(stats_of(&B).states[CEP_CM_REQ_RCVD] + stats_of(&B).states[CEP_CM_MRA_REQ_SENT],
		 2 * BACKLOG);
	if (check_failures)
		exit(1); /* ids missing: no teardown */
	/* A taken request answered leaves the count as it was: the backlog
	 * is still empty (accept once cleared the take, and the answer took
	 * the request out a second time: every later REQ was dropped). */
	standin_req_params(c[0], &first.u.req);
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x200;
	cp.responder_resources = RDMA_MAX_RESP_RES;
	cp.initiator_depth = RDMA_MAX_INIT_DEPTH;
	CHECK_EQ(rdma_accept(c[0], &cp), 0);
	settle();
	CHECK_EQ(raw_count(CEP_MSG_REP), 1);
	for (i = 0; i < BACKLOG; i++) {
		raw_req(&m, 0x9500 + i, 0xa00 + i);
		m.u.req.service_id = s.tcp.sid;
		cma_hdr(m.u.req.private_data, sizeof(m.u.req.private_data));
		raw_send(&m, LID_B);
	}
	settle();
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BACKLOG], 2);
	for (i = 0; i < BACKLOG; i++) {
		struct rdma_cm_id *x = take_request(s.ch);

		if (x)
			CHECK_EQ(rdma_destroy_id(x), 0);
	}
	for (n = 0; n + 1 < 2 * BACKLOG; n++)
		CHECK_EQ(rdma_destroy_id(c[n]), 0);
	standin_teardown(c[n], &s);
}

/* A SIDR_REQ for PORT_RDMA of the UDP space, request ID @req. */
static void sidr_req_udp(struct cep_msg *m, const struct rcm_service *udp, uint32_t req)
{
	cep_msg_init(m, CEP_MSG_SIDR_REQ, 0x5150 + (req & 0xff));
	m->u.sidr_req.request_id = req;
	m->u.sidr_req.service_id = udp->sid;
	m->u.sidr_req.partition_key = 0xffff;
	cma_hdr(m->u.sidr_req.private_data, sizeof(m->u.sidr_req.private_data));
}

/* Issue 26: a request for a listener rdma_destroy_id has begun on (marked
 * destroying, not yet unlistened). The kernel's cma_ib_req_handler finds
 * the listener no longer in RDMA_CM_LISTEN and fails (-ECONNABORTED), so
 * ib_cm's cm_destroy_id answers REJ 28 (REQ_RCVD: local comm ID 0) or
 * SIDR_REP status 2 "reject". Was REJ 3 "no resources" / SIDR status 3
 * "no QP". */
static void t_listener_gone(void)
{
	struct standin s;
	struct rcm_service udp;
	struct rcm_id *ul;
	struct cep_cm_id *lu;
	struct cep_msg m, r;

	setup(2, 0);
	standin_open(&s, IBV_LINK_LAYER_ETHERNET, 0);
	lu = service_listener(&udp, CEP_RDMA_PS_UDP);
	udp.port = &s.port;
	rdma_listener(&udp, s.ch, RDMA_PS_UDP, IBV_QPT_UD, &ul);
	s.l->destroying = 1;
	ul->destroying = 1;
	raw_req(&m, 0x9600, 0x900);
	m.u.req.service_id = s.tcp.sid;
	cma_hdr(m.u.req.private_data, sizeof(m.u.req.private_data));
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_REJ, 1));
	r = raw_last(CEP_MSG_REJ);
	CHECK_EQ(r.u.rej.reason, CEP_REJ_CONSUMER_DEFINED);
	CHECK_EQ(r.u.rej.remote_comm_id, 0x9600);
	CHECK_EQ(r.u.rej.local_comm_id, 0);
	CHECK_EQ(r.u.rej.message_rejected, CEP_MSG_CODE_REQ);
	sidr_req_udp(&m, &udp, 0x9601);
	raw_send(&m, LID_B);
	CHECK(raw_wait(CEP_MSG_SIDR_REP, 1));
	r = raw_last(CEP_MSG_SIDR_REP);
	CHECK_EQ(r.u.sidr_rep.status, CEP_SIDR_REJECT);
	CHECK_EQ(r.u.sidr_rep.request_id, 0x9601);
	CHECK_EQ(poll(&(struct pollfd){ .fd = s.ch->ch.fd, .events = POLLIN }, 1, 0), 0);
	CHECK_EQ(cep_cm_destroy_id_sync(lu), 0);
	udp.nlisteners = 0;
	rcm_id_put(ul);
	CHECK_EQ(cep_cm_destroy_id_sync(s.lc), 0);
	s.tcp.nlisteners = 0;
	rcm_id_put(s.l);
	teardown_all();
	free(s.port.qpns);
	rcm_channel_free(s.ch);
}

/* Issue 26: no memory for a request when it comes - here no file
 * descriptor for the eventfd of the channel a synchronous listener's new
 * id gets (rcm_id_new). The kernel: cma_ib_req_handler fails with
 * -ENOMEM and ib_cm's cm_destroy_id drops a REQ unanswered ("do not
 * reject to allow future retries") and answers a SIDR_REQ with status 2
 * "reject" (in SIDR_REQ_RCVD whatever the error). The requester's retry,
 * once there is room, is a new request and is taken. Was REJ 3 / SIDR
 * status 3. */
static void t_no_memory(void)
{
	struct standin s;
	struct rcm_service udp;
	struct rcm_id *ul;
	struct cep_cm_id *lu;
	struct cep_msg m, req;
	struct rlimit was, tight;
	struct rdma_cm_id *c;
	int fd;

	setup(2, 0);
	standin_open(&s, IBV_LINK_LAYER_ETHERNET, 0);
	lu = service_listener(&udp, CEP_RDMA_PS_UDP);
	udp.port = &s.port;
	rdma_listener(&udp, s.ch, RDMA_PS_UDP, IBV_QPT_UD, &ul);
	s.l->sync = 1; /* each new id makes its own channel */
	ul->sync = 1;
	raw_req(&req, 0x9700, 0x900);
	req.u.req.service_id = s.tcp.sid;
	cma_hdr(req.u.req.private_data, sizeof(req.u.req.private_data));
	/* no descriptor left: the lowest free one is the limit */
	fd = dup(0);
	CHECK(fd >= 0);
	close(fd);
	CHECK_EQ(getrlimit(RLIMIT_NOFILE, &was), 0);
	tight = was;
	tight.rlim_cur = (rlim_t)fd;
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
	raw_send(&req, LID_B);
	settle();
	sidr_req_udp(&m, &udp, 0x9701);
	raw_send(&m, LID_B);
	settle();
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &was), 0);
	CHECK_EQ(raw_count(CEP_MSG_REJ) + raw_count(CEP_MSG_MRA) + raw_count(CEP_MSG_REP), 0);
	CHECK_EQ(stats_of(&B).states[CEP_CM_REQ_RCVD], 0);
	CHECK(raw_wait(CEP_MSG_SIDR_REP, 1));
	CHECK_EQ(raw_last(CEP_MSG_SIDR_REP).u.sidr_rep.status, CEP_SIDR_REJECT);
	CHECK_EQ(raw_last(CEP_MSG_SIDR_REP).u.sidr_rep.request_id, 0x9701);
	/* the requester's retry: taken now */
	raw_send(&req, LID_B);
	c = take_request(s.ch);
	CHECK_EQ(raw_count(CEP_MSG_REJ), 0);
	if (check_failures)
		exit(1); /* no id: no teardown */
	CHECK_EQ(cep_cm_destroy_id_sync(lu), 0);
	udp.nlisteners = 0;
	rcm_id_put(ul);
	standin_teardown(c, &s);
}

/* Issue 27: every request that arrives is held while memory allows. The
 * service's libcep listener (rcm_service_listen, as rdma_listen starts
 * it) holds RCM_HOLD_MAX requests untaken; past the rdma_cm listener's
 * backlog (4 here) they wait in its deferred list, each MRAed at once
 * (its listener has others unanswered), and a repeat of one gets the MRA
 * again. Before, the CM's default backlog (1024, rdma_listen's too)
 * dropped every REQ past 1,024 untaken: 976 of these 2,000, for the
 * requesters to retry (MRAs 1,023). The application then takes each of
 * them. */
static void t_hold(void)
{
	enum { N = 2000, BACKLOG = 4 };
	static struct rdma_cm_id *c[N];
	struct standin s;
	struct cep_msg m;
	int n;

	setup(2, 1);
	memset(&s, 0, sizeof(s));
	standin_port(&s.dev, &s.port, B.cm, IBV_LINK_LAYER_ETHERNET);
	s.tcp.hdr.kind = RCM_KIND_SERVICE;
	s.tcp.sid = cep_rdma_service_id(CEP_RDMA_PS_TCP, PORT_RDMA);
	pthread_mutex_init(&s.tcp.mtx, NULL);
	CHECK_EQ(rcm_service_listen(&s.tcp, B.cm), 0);
	s.lc = s.tcp.cep;
	s.tcp.port = &s.port;
	s.ch = rcm_channel_new();
	CHECK(s.ch != NULL);
	rdma_listener(&s.tcp, s.ch, RDMA_PS_TCP, IBV_QPT_RC, &s.l);
	s.l->backlog = BACKLOG;
	for (uint32_t i = 0; i < N; i++) {
		raw_req(&m, 0x9800 + i, 0x1000 + i);
		m.u.req.service_id = s.tcp.sid;
		cma_hdr(m.u.req.private_data, sizeof(m.u.req.private_data));
		raw_send(&m, LID_B);
		/* the first alone: settled before the others come, or a
		 * second worker's REQ can count as unanswered beside it
		 * before it looks, and it is MRAed at once too (once under
		 * TSan: 2,000 MRAs) */
		if (i == 0 || i % 256 == 255)
			settle();
	}
	settle();
	CHECK_EQ(stats_of(&B).drops[CEP_CM_DROP_BACKLOG], 0);
	/* the first, alone when it came, waits for its half-timeout MRA */
	CHECK_EQ(raw_count(CEP_MSG_MRA), N - 1);
	CHECK_EQ(stats_of(&B).states[CEP_CM_MRA_REQ_SENT], N - 1);
	CHECK_EQ(raw_count(CEP_MSG_REJ), 0);
	raw_send(&m, LID_B); /* the last, deferred, repeated */
	settle();
	CHECK_EQ(raw_count(CEP_MSG_MRA), N);
	static uint8_t seen[N];
	int twice = 0;

	for (n = 0; n < N; n++) {
		uint32_t r;

		c[n] = take_request(s.ch);
		if (!c[n])
			break;
		r = cep_cm_id_remote_comm_id(rcm_id_of(c[n])->cep) - 0x9800;
		if (r >= N || seen[r]++)
			twice++;
	}
	CHECK_EQ(n, N);
	CHECK_EQ(twice, 0); /* each request once (in order per CM worker) */
	CHECK_EQ(poll(&(struct pollfd){ .fd = s.ch->ch.fd, .events = POLLIN }, 1, 0), 0);
	if (check_failures)
		exit(1); /* ids missing: no teardown */
	for (n = 0; n + 1 < N; n++)
		CHECK_EQ(rdma_destroy_id(c[n]), 0);
	standin_teardown(c[n], &s);
}

static const struct named_test tests[] = {
	{ "hold", t_hold },
	{ "backlog-taken", t_backlog_taken },
	{ "listener-gone", t_listener_gone },
	{ "no-memory", t_no_memory },
	{ "accept-expired", t_accept_expired },
	{ "refused-event", t_refused_event },
	{ "no-listener", t_no_listener },
	{ "qp-type", t_qp_type },
	{ "pdata-einval", t_pdata_einval },
};

int main(int argc, char **argv)
{
	return run_named_test(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
