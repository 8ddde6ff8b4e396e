/* SPDX-License-Identifier: MIT */
/*
 * A librdmacm program that prints what the API answers to a fixed list of
 * calls - results, errno names, events, id fields, QP states - with the
 * guest's own and its peer's address written as SELF and PEER. The guest
 * test runs it on the kernel's rdma_cm (Debian's librdmacm) and on libcep's
 * librdmacm.so.1 and requires the same output: the kernel is the reference
 * for every line (tests/guests/rdmacm.sh, docs/rdmacm.md).
 *
 *   rdmacm-probe SELF_IPV4 PEER_IPV4
 *   rdmacm-probe SELF_IPV4 PEER_IPV4 reject-server|reject-client
 *   rdmacm-probe SELF_IPV4 PEER_IPV4 notify-server|notify-client
 *   rdmacm-probe SELF_IPV4 PEER_IPV4 mcast-recv|mcast-send
 *
 * The first form needs no peer process: nothing there connects; its exit
 * is 0 unless a call needed to go on failed (the comparison is the test).
 * The second is one rejected connection with private data both ways
 * (rdma_reject): the server prints the request's private data and rejects
 * with its own, the client prints the REJECTED event; each exits 0 only if
 * it saw what the other sent. The third is one connection established by
 * rdma_notify(IBV_EVENT_COMM_EST) before its RTU (notify_pair). For those
 * two pairs CEP_RDMACM_READY or the kernel's listener tells the client when
 * to start. The fourth is multicast data, checked (mcast_pair); its
 * receiver's "receiver: joined" line says when the sender may start.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *self_ip, *peer_ip;

static const char *ename(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "?";
}

/* Print a librdmacm result (0, or -1 and the errno's name); return it. */
static int report(const char *label, int r)
{
	if (r == 0)
		printf("%s: 0\n", label);
	else
		printf("%s: %d %s\n", label, r, ename(errno));
	return r;
}

#define R(label, call) report(label, (errno = 0, (call)))

/* "IP port N" with SELF/PEER for the two guests; with @eph, ports the
 * library chose (32768..60999) print as "ephemeral". */
static void addr_str(const struct sockaddr *sa, char *buf, size_t len, int eph)
{
	char ip[INET6_ADDRSTRLEN] = "?", p[16];
	unsigned port = 0;

	if (!sa) {
		snprintf(buf, len, "none");
		return;
	}
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;

		inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
		port = ntohs(s->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;

		inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
		port = ntohs(s->sin6_port);
	} else {
		snprintf(buf, len, "family %d", sa->sa_family);
		return;
	}
	if (!strcmp(ip, self_ip))
		snprintf(ip, sizeof(ip), "SELF");
	else if (!strcmp(ip, peer_ip))
		snprintf(ip, sizeof(ip), "PEER");
	if (eph && port >= 32768 && port <= 60999)
		snprintf(p, sizeof(p), "ephemeral");
	else
		snprintf(p, sizeof(p), "%u", port);
	snprintf(buf, len, "%s port %s", ip, p);
}

static void gid_str(const union ibv_gid *g, char *buf, size_t len)
{
	struct sockaddr_in6 s = { .sin6_family = AF_INET6 };
	char ip[INET6_ADDRSTRLEN];

	memcpy(&s.sin6_addr, g->raw, 16);
	inet_ntop(AF_INET6, &s.sin6_addr, ip, sizeof(ip));
	if (!strncmp(ip, "::ffff:", 7) && !strcmp(ip + 7, self_ip))
		snprintf(buf, len, "::ffff:SELF");
	else if (!strncmp(ip, "::ffff:", 7) && !strcmp(ip + 7, peer_ip))
		snprintf(buf, len, "::ffff:PEER");
	else
		snprintf(buf, len, "%s", ip);
}

static struct sockaddr_in sin4(const char *ip, unsigned port)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

static void show_id(const char *label, struct rdma_cm_id *id)
{
	char s[128], d[128], sg[64], dg[64];

	addr_str(&id->route.addr.src_addr, s, sizeof(s), 1);
	addr_str(&id->route.addr.dst_addr, d, sizeof(d), 1);
	gid_str(&id->route.addr.addr.ibaddr.sgid, sg, sizeof(sg));
	gid_str(&id->route.addr.addr.ibaddr.dgid, dg, sizeof(dg));
	printf("%s: verbs %s port_num %u ps 0x%x qp_type %d src %s dst %s sgid %s dgid %s "
	       "pkey 0x%x pd %s\n", label, id->verbs ? "set" : "NULL", id->port_num, id->ps,
	       id->qp_type, s, d, sg, dg, ntohs(id->route.addr.addr.ibaddr.pkey),
	       id->pd ? "set" : "NULL");
}

/* Next event on @ch within 5 s: "TYPE status N" (or "none"). */
static struct rdma_cm_event *next_event(const char *label, struct rdma_event_channel *ch)
{
	struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pf, 1, 5000) != 1 || rdma_get_cm_event(ch, &ev)) {
		printf("%s: none\n", label);
		return NULL;
	}
	printf("%s: %s status %d\n", label, rdma_event_str(ev->event), ev->status);
	return ev;
}

/* The next event, printed as next_event does, and acked. */
static void skip_event(const char *label, struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev = next_event(label, ch);

	if (ev)
		rdma_ack_cm_event(ev);
}

static void show_qp(const char *label, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT |
			 IBV_QP_PKEY_INDEX | IBV_QP_QKEY, &ia)) {
		printf("%s: query failed\n", label);
		return;
	}
	printf("%s: state %d port %u pkey_index %u", label, a.qp_state, a.port_num,
	       a.pkey_index);
	if (qp->qp_type == IBV_QPT_UD)
		printf(" qkey 0x%x\n", a.qkey);
	else
		printf(" access 0x%x\n", a.qp_access_flags);
}

static void show_attr(const char *label, struct rdma_cm_id *id, enum ibv_qp_state st)
{
	struct ibv_qp_attr a;
	int mask = 0, r;

	memset(&a, 0, sizeof(a));
	a.qp_state = st;
	errno = 0;
	r = rdma_init_qp_attr(id, &a, &mask);
	if (r) {
		printf("%s: %d %s\n", label, r, ename(errno));
		return;
	}
	printf("%s: mask 0x%x state %d port %u pkey_index %u access 0x%x qkey 0x%x\n", label,
	       mask, a.qp_state, a.port_num, a.pkey_index,
	       mask & IBV_QP_ACCESS_FLAGS ? a.qp_access_flags : 0,
	       mask & IBV_QP_QKEY ? a.qkey : 0);
}

static void probe_getaddrinfo(void)
{
	struct rdma_addrinfo h, *res;
	char s[128], d[128];
	int r;

	struct { const char *node, *svc; int flags, ps, qpt; } cases[] = {
		{ peer_ip, "7471", 0, RDMA_PS_TCP, 0 },
		{ peer_ip, "7471", 0, RDMA_PS_UDP, IBV_QPT_UD },
		{ NULL, "7471", RAI_PASSIVE, RDMA_PS_TCP, 0 },
		{ self_ip, NULL, RAI_PASSIVE | RAI_NUMERICHOST, RDMA_PS_TCP, IBV_QPT_RC },
		{ peer_ip, "7174", RAI_NUMERICHOST, 0, 0 },
		{ "not-a-host.invalid", "7471", 0, RDMA_PS_TCP, 0 },
	};
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&h, 0, sizeof(h));
		h.ai_flags = cases[i].flags;
		h.ai_port_space = cases[i].ps;
		h.ai_qp_type = cases[i].qpt;
		r = rdma_getaddrinfo(cases[i].node, cases[i].svc, &h, &res);
		if (r) {
			printf("getaddrinfo %u: error (%s)\n", i, r == -1 ? ename(errno) : "gai");
			continue;
		}
		addr_str(res->ai_src_addr, s, sizeof(s), 0);
		addr_str(res->ai_dst_addr, d, sizeof(d), 0);
		printf("getaddrinfo %u: flags 0x%x family %d qp_type %d ps 0x%x src %s (%u) dst %s "
		       "(%u) next %s\n", i, res->ai_flags, res->ai_family, res->ai_qp_type,
		       res->ai_port_space, s, res->ai_src_len, d, res->ai_dst_len,
		       res->ai_next ? "yes" : "no");
		rdma_freeaddrinfo(res);
	}
	/* No node, service or hints. */
	errno = 0;
	r = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	printf("getaddrinfo none: %d %s\n", r, r ? ename(errno) : "");
}

#define REJ_PORT 7480
#define HELLO "hello from the client"
#define NO "no thanks"

/* A client's address and route to @a, each event taken; 0 or -1. */
static int resolve(struct rdma_cm_id *id, struct rdma_event_channel *ch, struct sockaddr_in *a)
{
	struct rdma_cm_event *ev;

	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)a, 2000) || rdma_get_cm_event(ch, &ev))
		return -1;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 2000) || rdma_get_cm_event(ch, &ev))
		return -1;
	rdma_ack_cm_event(ev);
	return 0;
}

/* One connection request, rejected with private data. */
static int reject_pair(int server)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct sockaddr_in a = sin4(server ? self_ip : peer_ip, REJ_PORT);
	int ok = 0;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return 1;
	if (server) {
		if (rdma_bind_addr(id, (struct sockaddr *)&a) || rdma_listen(id, 1))
			return 1;
		if (rdma_get_cm_event(ch, &ev))
			return 1;
		printf("server: %s status %d private data %u bytes \"%s\"\n",
		       rdma_event_str(ev->event), ev->status, ev->param.conn.private_data_len,
		       ev->param.conn.private_data ? (const char *)ev->param.conn.private_data : "");
		ok = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
		     ev->param.conn.private_data &&
		     !strcmp(ev->param.conn.private_data, HELLO);
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct rdma_cm_id *c = ev->id;

			R("reject", rdma_reject(c, NO, sizeof(NO)));
			rdma_ack_cm_event(ev);
			rdma_destroy_id(c);
		} else {
			rdma_ack_cm_event(ev);
		}
	} else {
		struct rdma_conn_param p = { .private_data = HELLO, .private_data_len = sizeof(HELLO),
					     .responder_resources = 1, .initiator_depth = 1,
					     .retry_count = 7, .rnr_retry_count = 7 };
		struct ibv_qp_init_attr qa = { .cap = { 1, 1, 1, 1, 0 }, .qp_type = IBV_QPT_RC };

		if (resolve(id, ch, &a))
			return 1;
		if (rdma_create_qp(id, NULL, &qa) || rdma_connect(id, &p) ||
		    rdma_get_cm_event(ch, &ev))
			return 1;
		printf("client: %s status %d private data %u bytes \"%s\"\n",
		       rdma_event_str(ev->event), ev->status, ev->param.conn.private_data_len,
		       ev->param.conn.private_data ? (const char *)ev->param.conn.private_data : "");
		/* consumer reject = IB REJ reason 28, with the server's data */
		ok = ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 28 &&
		     ev->param.conn.private_data && !strcmp(ev->param.conn.private_data, NO);
		rdma_ack_cm_event(ev);
		if (id->qp)
			show_qp("client qp after REJECTED", id->qp);
		rdma_destroy_qp(id);
	}
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	printf("%s: %s\n", server ? "server" : "client", ok ? "ok" : "FAILED");
	return ok ? 0 : 1;
}

#define NOTIFY_PORT 7481

/* The next event on @ch within @ms, printed as "LABEL: TYPE status N"; NULL
 * (printed "none") if none came. */
static struct rdma_cm_event *wait_event(const char *label, struct rdma_event_channel *ch, int ms)
{
	struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pf, 1, ms) != 1 || rdma_get_cm_event(ch, &ev)) {
		printf("%s: none\n", label);
		return NULL;
	}
	printf("%s: %s status %d\n", label, rdma_event_str(ev->event), ev->status);
	return ev;
}

/* One connection established by rdma_notify(IBV_EVENT_COMM_EST) before its
 * RTU (the kernel's ib_cm_notify, cm_establish): the client's id has no QP,
 * so its RTU leaves only when it calls rdma_establish, 3 s after the
 * CONNECT_RESPONSE. The server, right after rdma_accept: rdma_notify -> 0,
 * ESTABLISHED; rdma_notify again -> EISCONN; the late RTU is a duplicate
 * (no second ESTABLISHED), so its next event is the client's DISCONNECTED. */
static int notify_pair(int server)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7 };
	struct ibv_qp_init_attr qa = { .cap = { 1, 1, 1, 1, 0 }, .qp_type = IBV_QPT_RC };
	struct sockaddr_in a = sin4(server ? self_ip : peer_ip, NOTIFY_PORT);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	int ok = 0;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return 1;
	if (server) {
		struct rdma_cm_id *c;

		if (rdma_bind_addr(id, (struct sockaddr *)&a) || rdma_listen(id, 1) ||
		    rdma_get_cm_event(ch, &ev))
			return 1;
		printf("server: %s\n", rdma_event_str(ev->event));
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
			return 1;
		c = ev->id;
		rdma_ack_cm_event(ev);
		if (rdma_create_qp(c, NULL, &qa) || R("server accept", rdma_accept(c, &p)))
			return 1;
		ok = R("server notify", rdma_notify(c, IBV_EVENT_COMM_EST)) == 0;
		ev = wait_event("server event", ch, 2000);
		ok = ok && ev && ev->event == RDMA_CM_EVENT_ESTABLISHED;
		if (ev)
			rdma_ack_cm_event(ev);
		ok = R("server notify again", rdma_notify(c, IBV_EVENT_COMM_EST)) == -1 &&
		     errno == EISCONN && ok;
		ev = wait_event("server event", ch, 30000);
		ok = ok && ev && ev->event == RDMA_CM_EVENT_DISCONNECTED;
		if (ev)
			rdma_ack_cm_event(ev);
		R("server disconnect", rdma_disconnect(c));
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	} else {
		struct ibv_pd *pd = NULL;
		struct ibv_cq *cq = NULL;
		struct ibv_qp *qp = NULL;

		if (resolve(id, ch, &a))
			return 1;
		/* The application's own QP, not the id's: rdma_connect leaves
		 * the RTU to rdma_establish. */
		pd = ibv_alloc_pd(id->verbs);
		cq = ibv_create_cq(id->verbs, 2, NULL, NULL, 0);
		qa.send_cq = qa.recv_cq = cq;
		qp = pd && cq ? ibv_create_qp(pd, &qa) : NULL;
		if (!qp)
			return 1;
		p.qp_num = qp->qp_num;
		if (R("client connect", rdma_connect(id, &p)))
			return 1;
		ev = wait_event("client event", ch, 30000);
		ok = ev && ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE;
		if (ev)
			rdma_ack_cm_event(ev);
		sleep(3);
		ok = R("client establish", rdma_establish(id)) == 0 && ok;
		sleep(1);
		ok = R("client disconnect", rdma_disconnect(id)) == 0 && ok;
		ev = wait_event("client event", ch, 30000);
		ok = ok && ev && ev->event == RDMA_CM_EVENT_DISCONNECTED;
		if (ev)
			rdma_ack_cm_event(ev);
		ibv_destroy_qp(qp);
		ibv_destroy_cq(cq);
		ibv_dealloc_pd(pd);
	}
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	printf("%s: %s\n", server ? "server" : "client", ok ? "ok" : "FAILED");
	return ok ? 0 : 1;
}

/* A small UD QP's attributes. */
static void ud_qp_attr(struct ibv_qp_init_attr *qa)
{
	memset(qa, 0, sizeof(*qa));
	qa->cap.max_send_wr = qa->cap.max_recv_wr = 2;
	qa->cap.max_send_sge = qa->cap.max_recv_sge = 1;
	qa->qp_type = IBV_QPT_UD;
}

/* A MULTICAST_JOIN / _ERROR event's fields (the context's tag by name). */
static void show_mc_event(const struct rdma_cm_event *ev, const void *tag)
{
	const struct ibv_ah_attr *ah = &ev->param.ud.ah_attr;
	char dg[64];

	gid_str(&ah->grh.dgid, dg, sizeof(dg));
	printf("mc event: context %s len %u qp_num 0x%x qkey 0x%x global %u dlid %u sl %u "
	       "rate %u bits %u port %u dgid %s sgid_index %u hop %u tclass %u flow %u\n",
	       ev->param.ud.private_data == tag ? "tag" :
	       ev->param.ud.private_data ? "other" : "NULL",
	       ev->param.ud.private_data_len, ev->param.ud.qp_num, ev->param.ud.qkey,
	       ah->is_global, ah->dlid, ah->sl, ah->static_rate, ah->src_path_bits,
	       ah->port_num, dg, ah->grh.sgid_index, ah->grh.hop_limit,
	       ah->grh.traffic_class, ah->grh.flow_label);
}

/* The multicast calls' answers, kernel against libcep (RoCE: nothing goes
 * on the wire but the IGMP report). */
static void probe_multicast(struct rdma_event_channel *ch)
{
	static int tag;
	struct sockaddr_in g = sin4("239.1.1.9", 0), g2 = sin4("239.1.1.10", 0), a;
	struct rdma_cm_join_mc_attr_ex ax;
	struct ibv_qp_init_attr qa;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *mc;

	if (R("create_id mc", rdma_create_id(ch, &mc, NULL, RDMA_PS_UDP)))
		return;
	R("join idle", rdma_join_multicast(mc, (struct sockaddr *)&g, &tag));
	R("leave not joined", rdma_leave_multicast(mc, (struct sockaddr *)&g));
	a = sin4(self_ip, 0);
	R("resolve_addr group", rdma_resolve_addr(mc, (struct sockaddr *)&a,
						   (struct sockaddr *)&g, 2000));
	skip_event("event", ch);
	show_id("mc resolved", mc);
	ud_qp_attr(&qa);
	R("create_qp mc", rdma_create_qp(mc, NULL, &qa));
	R("join", rdma_join_multicast(mc, (struct sockaddr *)&g, &tag));
	ev = next_event("event", ch);
	if (ev) {
		show_mc_event(ev, &tag);
		rdma_ack_cm_event(ev);
	}
	memset(&ax, 0, sizeof(ax));
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ax.addr = (struct sockaddr *)&g2;
	ax.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	R("join_ex sendonly", rdma_join_multicast_ex(mc, &ax, NULL));
	ev = next_event("event", ch);
	if (ev) {
		show_mc_event(ev, &tag);
		rdma_ack_cm_event(ev);
	}
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED;
	R("join_ex reserved mask", rdma_join_multicast_ex(mc, &ax, NULL));
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	R("join_ex no flags", rdma_join_multicast_ex(mc, &ax, NULL));
	R("leave", rdma_leave_multicast(mc, (struct sockaddr *)&g));
	R("leave again", rdma_leave_multicast(mc, (struct sockaddr *)&g));
	R("leave sendonly", rdma_leave_multicast(mc, (struct sockaddr *)&g2));
	rdma_destroy_qp(mc);
	R("destroy mc", rdma_destroy_id(mc));
	/* a connected id's QP type cannot join */
	if (R("create_id mc tcp", rdma_create_id(ch, &mc, NULL, RDMA_PS_TCP)))
		return;
	a = sin4(peer_ip, 7999);
	R("resolve_addr tcp", rdma_resolve_addr(mc, NULL, (struct sockaddr *)&a, 2000));
	skip_event("event", ch);
	R("join tcp", rdma_join_multicast(mc, (struct sockaddr *)&g, NULL));
	R("destroy mc tcp", rdma_destroy_id(mc));
}

/* XRC ids and their QP and SRQ (rdma_xclient / rdma_xserver -c x): rxe has
 * no XRC, so the device's refusal must come back as librdmacm's does. */
static void probe_xrc(void)
{
	struct rdma_addrinfo h, *res;
	struct ibv_qp_init_attr qa;
	struct ibv_srq_init_attr sa;
	struct rdma_cm_id *xe;

	memset(&h, 0, sizeof(h));
	h.ai_port_space = RDMA_PS_IB;
	h.ai_qp_type = IBV_QPT_XRC_SEND;
	if (!R("getaddrinfo xrc send", rdma_getaddrinfo(peer_ip, "7999", &h, &res))) {
		memset(&qa, 0, sizeof(qa));
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		qa.sq_sig_all = 1;
		if (!R("create_ep xrc send", rdma_create_ep(&xe, res, NULL, &qa)))
			rdma_destroy_ep(xe);
		rdma_freeaddrinfo(res);
	}
	h.ai_flags = RAI_PASSIVE;
	h.ai_qp_type = IBV_QPT_XRC_RECV;
	if (!R("getaddrinfo xrc recv", rdma_getaddrinfo(self_ip, "7479", &h, &res))) {
		if (!R("create_ep xrc recv passive", rdma_create_ep(&xe, res, NULL, NULL))) {
			printf("xrc recv ep: qp_type %d ps 0x%x\n", xe->qp_type, xe->ps);
			memset(&sa, 0, sizeof(sa));
			sa.attr.max_wr = sa.attr.max_sge = 1;
			if (!R("create_srq xrc", rdma_create_srq(xe, NULL, &sa)))
				rdma_destroy_srq(xe);
			rdma_destroy_ep(xe);
		}
		rdma_freeaddrinfo(res);
	}
}

/* IPoIB's port space (RDMA_PS_IPOIB, UD) on RoCE: the kernel makes the id
 * and refuses the device (cma_acquire_dev_by_src_ip: not an IPoIB netdev). */
static void probe_ipoib(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *x;
	struct sockaddr_in a;

	if (R("create_id ipoib", rdma_create_id(ch, &x, NULL, RDMA_PS_IPOIB)))
		return;
	show_id("ipoib id", x);
	a = sin4(peer_ip, 7999);
	R("resolve_addr ipoib", rdma_resolve_addr(x, NULL, (struct sockaddr *)&a, 2000));
	skip_event("event", ch);
	show_attr("init_qp_attr INIT ipoib", x, IBV_QPS_INIT);
	/* (rdma_create_qp on it crashes Debian's librdmacm: not probed) */
	R("destroy ipoib", rdma_destroy_id(x));
	if (R("create_id ipoib 2", rdma_create_id(ch, &x, NULL, RDMA_PS_IPOIB)))
		return;
	a = sin4(self_ip, 0);
	R("bind ipoib self", rdma_bind_addr(x, (struct sockaddr *)&a));
	show_id("ipoib bound", x);
	R("destroy ipoib 2", rdma_destroy_id(x));
}

#define MC_N 10
#define MC_LEN 32

/* Multicast data, checked (mcast-recv / mcast-send): both join 239.1.1.8
 * (the receiver as a full member, its receives posted first; the sender
 * send-only); the sender sends MC_N datagrams "libcep-mc N" to the group's
 * QPN and Q_Key from its join event; the receiver takes each in order with
 * its GRH, whose source must be the sender's (::ffff:PEER), and exits
 * 0 only if all MC_N came, intact. The receiver prints "receiver: joined"
 * when it is ready. */
static int mcast_pair(int recv)
{
	struct sockaddr_in g = sin4("239.1.1.8", 0), a = sin4(self_ip, 0);
	struct rdma_cm_join_mc_attr_ex ax;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	static uint8_t buf[MC_N][40 + MC_LEN];
	const char *who = recv ? "receiver" : "sender";
	struct ibv_qp_init_attr qa;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct ibv_ah *ah = NULL;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint32_t qpn = 0, qkey = 0;
	int got = 0;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) ||
	    rdma_resolve_addr(id, (struct sockaddr *)&a, (struct sockaddr *)&g, 2000)) {
		printf("%s: setup: %s\n", who, ename(errno));
		return 1;
	}
	ev = wait_event(who, ch, 5000);
	if (!ev || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		return 1;
	rdma_ack_cm_event(ev);
	pd = ibv_alloc_pd(id->verbs);
	cq = pd ? ibv_create_cq(id->verbs, 2 * MC_N, NULL, NULL, 0) : NULL;
	mr = cq ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	memset(&qa, 0, sizeof(qa));
	qa.cap.max_send_wr = qa.cap.max_recv_wr = MC_N;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_UD;
	qa.send_cq = qa.recv_cq = cq;
	if (!mr || rdma_create_qp(id, pd, &qa)) {
		printf("%s: verbs: %s\n", who, ename(errno));
		return 1;
	}
	for (int i = 0; recv && i < MC_N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf[i], .length = sizeof(buf[i]),
				       .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(id->qp, &wr, &bad)) {
			printf("%s: post_recv: %s\n", who, ename(errno));
			return 1;
		}
	}
	memset(&ax, 0, sizeof(ax));
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ax.addr = (struct sockaddr *)&g;
	ax.join_flags = recv ? RDMA_MC_JOIN_FLAG_FULLMEMBER : RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	if (rdma_join_multicast_ex(id, &ax, NULL)) {
		printf("%s: join: %s\n", who, ename(errno));
		return 1;
	}
	ev = wait_event(who, ch, 5000);
	if (!ev || ev->event != RDMA_CM_EVENT_MULTICAST_JOIN)
		return 1;
	qpn = ev->param.ud.qp_num;
	qkey = ev->param.ud.qkey;
	ah = recv ? NULL : ibv_create_ah(pd, &ev->param.ud.ah_attr);
	rdma_ack_cm_event(ev);
	if (recv) {
		printf("receiver: joined\n");
	} else if (!ah) {
		printf("sender: create_ah: %s\n", ename(errno));
		return 1;
	}
	for (int i = 0; !recv && i < MC_N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(buf[i] + 40), .length = MC_LEN,
				       .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		snprintf((char *)buf[i] + 40, MC_LEN, "libcep-mc %d", i);
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = qpn;
		wr.wr.ud.remote_qkey = qkey;
		if (ibv_post_send(id->qp, &wr, &bad)) {
			printf("sender: post_send: %s\n", ename(errno));
			return 1;
		}
		usleep(20000); /* the receiver's queue is MC_N deep: no burst */
	}
	/* every completion, in order, within 20 s */
	for (int spins = 0; got < MC_N && spins < 20000; spins++) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			break;
		if (n == 0) {
			usleep(1000);
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS || wc.wr_id != (uint64_t)got) {
			printf("%s: completion %d: status %d wr_id %llu\n", who, got, wc.status,
			       (unsigned long long)wc.wr_id);
			return 1;
		}
		if (recv) {
			char want[MC_LEN], sg[64];

			snprintf(want, sizeof(want), "libcep-mc %d", got);
			/* the 40 bytes before the data: a GRH, or on RoCE v2
			 * over IPv4 the IPv4 header in its last 20 (what
			 * ibv_init_ah_from_wc reads) */
			if (buf[got][20] == 0x45) {
				union ibv_gid v4 = { .raw = { [10] = 0xff, [11] = 0xff } };

				memcpy(v4.raw + 12, buf[got] + 20 + 12, 4);
				gid_str(&v4, sg, sizeof(sg));
			} else {
				gid_str((const union ibv_gid *)(buf[got] + 8), sg, sizeof(sg));
			}
			if (wc.byte_len != 40 + MC_LEN || !(wc.wc_flags & IBV_WC_GRH) ||
			    strcmp((char *)buf[got] + 40, want) || strcmp(sg, "::ffff:PEER")) {
				printf("receiver: datagram %d: len %u grh %d from %s: \"%.*s\"\n", got,
				       wc.byte_len, !!(wc.wc_flags & IBV_WC_GRH), sg, MC_LEN,
				       (char *)buf[got] + 40);
				return 1;
			}
		}
		got++;
	}
	printf("%s: %d of %d %s\n", who, got, MC_N, recv ? "received" : "sent");
	if (got != MC_N)
		return 1;
	if (rdma_leave_multicast(id, (struct sockaddr *)&g)) {
		printf("%s: leave: %s\n", who, ename(errno));
		return 1;
	}
	if (ah)
		ibv_destroy_ah(ah);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	printf("%s: ok\n", who);
	return 0;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch, *ch2;
	struct rdma_cm_id *id, *id2, *ud;
	struct rdma_cm_event *ev;
	struct sockaddr_in a;
	struct ibv_qp_init_attr qa;
	struct ibv_context **devs;
	int n, one = 1, fl;
	uint8_t tos = 32, u8 = 14;

	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: %s SELF_IPV4 PEER_IPV4 [reject-server|reject-client|"
			"notify-server|notify-client|mcast-recv|mcast-send]\n",
			argv[0]);
		return 2;
	}
	self_ip = argv[1];
	peer_ip = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strncmp(argv[3], "notify-", 7))
		return notify_pair(!strcmp(argv[3], "notify-server"));
	if (argc == 4 && !strncmp(argv[3], "mcast-", 6))
		return mcast_pair(!strcmp(argv[3], "mcast-recv"));
	if (argc == 4)
		return reject_pair(!strcmp(argv[3], "reject-server"));

	for (int e = 0; e <= 16; e++)
		printf("event_str %d: %s\n", e, rdma_event_str((enum rdma_cm_event_type)e));
	printf("event_str 99: %s\n", rdma_event_str((enum rdma_cm_event_type)99));
	probe_getaddrinfo();

	devs = rdma_get_devices(&n);
	printf("devices: %d %s\n", n, devs && devs[0] ? ibv_get_device_name(devs[0]->device) : "-");
	rdma_free_devices(devs);

	ch = rdma_create_event_channel();
	if (!ch) {
		printf("create channel: %s\n", ename(errno));
		return 1;
	}
	/* Non-blocking fd: no event means EAGAIN, not a wait. */
	fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	R("get_cm_event nonblocking empty", rdma_get_cm_event(ch, &ev));
	fcntl(ch->fd, F_SETFL, fl);

	/* ---- an RC id through its states ---- */
	R("create_id tcp", rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	show_id("new id", id);
	/* (rdma_resolve_route and rdma_accept(id, NULL) on a new id crash in
	 * Debian's librdmacm: not probed.) */
	R("connect before route", rdma_connect(id, NULL));
	R("reject on new id", rdma_reject(id, NULL, 0));
	R("disconnect on new id", rdma_disconnect(id));
	R("set_option tos", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1));
	R("set_option tos len 4", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4));
	R("set_option reuseaddr", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
						    &one, sizeof(one)));
	R("set_option ack_timeout", rdma_set_option(id, RDMA_OPTION_ID,
						     RDMA_OPTION_ID_ACK_TIMEOUT, &u8, 1));
	R("set_option unknown", rdma_set_option(id, RDMA_OPTION_ID, 99, &one, sizeof(one)));
	a = sin4("10.99.99.99", 0);
	R("bind not local", rdma_bind_addr(id, (struct sockaddr *)&a));
	a = sin4(self_ip, 0);
	R("bind self port 0", rdma_bind_addr(id, (struct sockaddr *)&a));
	show_id("bound id", id);
	R("bind again", rdma_bind_addr(id, (struct sockaddr *)&a));
	R("set_option afonly bound", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY,
						      &one, sizeof(one)));
	a = sin4(peer_ip, 7999);
	R("resolve_addr", rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000));
	skip_event("event", ch);
	show_id("resolved id", id);
	R("resolve_route", rdma_resolve_route(id, 2000));
	skip_event("event", ch);
	printf("route: num_paths %d", id->route.num_paths);
	if (id->route.num_paths > 0 && id->route.path_rec) {
		char sg[64], dg[64];

		gid_str(&id->route.path_rec->sgid, sg, sizeof(sg));
		gid_str(&id->route.path_rec->dgid, dg, sizeof(dg));
		printf(" sgid %s dgid %s pkey 0x%x", sg, dg, ntohs(id->route.path_rec->pkey));
	}
	printf("\n");
	printf("ports: src %u dst %u\n", ntohs(rdma_get_src_port(id)) ? 1 : 0,
	       ntohs(rdma_get_dst_port(id)));
	show_attr("init_qp_attr INIT no qp", id, IBV_QPS_INIT);
	memset(&qa, 0, sizeof(qa));
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	R("create_qp rc", rdma_create_qp(id, NULL, &qa));
	printf("rc qp: send_cq %s recv_cq %s send_ch %s recv_ch %s\n",
	       id->send_cq ? "set" : "NULL", id->recv_cq ? "set" : "NULL",
	       id->send_cq_channel ? "set" : "NULL", id->recv_cq_channel ? "set" : "NULL");
	if (id->qp)
		show_qp("rc qp", id->qp);
	R("create_qp twice", rdma_create_qp(id, NULL, &qa));
	show_attr("init_qp_attr INIT", id, IBV_QPS_INIT);
	R("listen resolved", rdma_listen(id, 0));
	R("notify comm_est unconnected", rdma_notify(id, IBV_EVENT_COMM_EST));
	R("notify path_mig unconnected", rdma_notify(id, IBV_EVENT_PATH_MIG));
	R("establish with qp", rdma_establish(id));
	R("get_request not sync", rdma_get_request(id, &id2));
	rdma_destroy_qp(id);
	printf("after destroy_qp: qp %s send_cq %s\n", id->qp ? "set" : "NULL",
	       id->send_cq ? "set" : "NULL");

	/* ---- port numbers ---- */
	R("create_id 2", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	a = sin4(self_ip, 7477);
	R("bind 7477", rdma_bind_addr(id2, (struct sockaddr *)&a));
	R("listen 7477", rdma_listen(id2, 4));
	show_id("listener", id2);
	R("listen again", rdma_listen(id2, 4));
	{
		struct rdma_cm_id *id3, *id4;

		R("create_id 3", rdma_create_id(ch, &id3, NULL, RDMA_PS_TCP));
		R("bind 7477 again", rdma_bind_addr(id3, (struct sockaddr *)&a));
		a = sin4("0.0.0.0", 7477);
		R("bind any 7477", rdma_bind_addr(id3, (struct sockaddr *)&a));
		R("create_id 4", rdma_create_id(ch, &id4, NULL, RDMA_PS_UDP));
		a = sin4(self_ip, 7477);
		R("bind 7477 udp", rdma_bind_addr(id4, (struct sockaddr *)&a));
		R("destroy 3", rdma_destroy_id(id3));
		R("destroy 4", rdma_destroy_id(id4));
	}
	{
		struct rdma_cm_id *id5;

		R("create_id 5", rdma_create_id(ch, &id5, NULL, RDMA_PS_TCP));
		R("listen unbound", rdma_listen(id5, 0));
		show_id("listen unbound", id5);
		R("destroy 5", rdma_destroy_id(id5));
	}
	R("destroy listener", rdma_destroy_id(id2));

	/* ---- UD ---- */
	R("create_id udp", rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP));
	show_id("udp id", ud);
	R("set_option ack_timeout udp", rdma_set_option(ud, RDMA_OPTION_ID,
							 RDMA_OPTION_ID_ACK_TIMEOUT, &u8, 1));
	a = sin4(peer_ip, 7999);
	R("resolve_addr udp", rdma_resolve_addr(ud, NULL, (struct sockaddr *)&a, 2000));
	skip_event("event", ch);
	show_id("udp resolved", ud);
	ud_qp_attr(&qa);
	R("create_qp ud", rdma_create_qp(ud, NULL, &qa));
	if (ud->qp)
		show_qp("ud qp", ud->qp);
	show_attr("init_qp_attr INIT ud", ud, IBV_QPS_INIT);
	rdma_destroy_qp(ud);

	/* ---- migration and destruction with waiting events ---- */
	ch2 = rdma_create_event_channel();
	R("create_id m", rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP));
	R("resolve_addr m", rdma_resolve_addr(id2, NULL, (struct sockaddr *)&a, 2000));
	{
		struct pollfd pf = { .fd = ch->fd, .events = POLLIN };

		printf("ch readable before migrate: %d\n", poll(&pf, 1, 2000));
	}
	R("migrate_id", rdma_migrate_id(id2, ch2));
	printf("id channel is ch2: %d\n", id2->channel == ch2);
	{
		struct pollfd pf = { .fd = ch->fd, .events = POLLIN };

		printf("ch readable after migrate: %d\n", poll(&pf, 1, 0));
	}
	skip_event("ch2 event", ch2);
	R("resolve_route m", rdma_resolve_route(id2, 2000));
	{
		struct pollfd pf = { .fd = ch2->fd, .events = POLLIN };

		printf("ch2 readable: %d\n", poll(&pf, 1, 2000));
	}
	/* destroy with the ROUTE_RESOLVED event still queued: it goes too */
	R("destroy with queued event", rdma_destroy_id(id2));
	fl = fcntl(ch2->fd, F_GETFL);
	fcntl(ch2->fd, F_SETFL, fl | O_NONBLOCK);
	R("get_cm_event after destroy", rdma_get_cm_event(ch2, &ev));
	rdma_destroy_event_channel(ch2);

	/* ---- endpoints ---- */
	{
		struct rdma_addrinfo h, *res;
		struct rdma_cm_id *ep;

		memset(&h, 0, sizeof(h));
		h.ai_port_space = RDMA_PS_TCP;
		if (rdma_getaddrinfo(peer_ip, "7999", &h, &res) == 0) {
			memset(&qa, 0, sizeof(qa));
			qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
			qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
			if (!R("create_ep active", rdma_create_ep(&ep, res, NULL, &qa))) {
				show_id("ep", ep);
				printf("ep: qp %s channel %s\n", ep->qp ? "set" : "NULL",
				       ep->channel ? "set" : "NULL");
				if (ep->qp)
					show_qp("ep qp", ep->qp);
				rdma_destroy_ep(ep);
			}
			rdma_freeaddrinfo(res);
		}
		h.ai_flags = RAI_PASSIVE;
		if (rdma_getaddrinfo(self_ip, "7478", &h, &res) == 0) {
			if (!R("create_ep passive", rdma_create_ep(&ep, res, NULL, &qa))) {
				show_id("passive ep", ep);
				R("listen ep", rdma_listen(ep, 0));
				rdma_destroy_ep(ep);
			}
			rdma_freeaddrinfo(res);
		}
	}

	probe_multicast(ch);
	probe_xrc();
	probe_ipoib(ch);

	R("destroy ud", rdma_destroy_id(ud));
	R("destroy id", rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
	printf("done\n");
	return 0;
}
