/* SPDX-License-Identifier: MIT */
/*
 * Quick start, event channels: the same server and client as
 * hello_callback.c, but every event goes to an event channel whose file
 * descriptor sits in one epoll set, and a single-threaded loop drives
 * both sides: accept on REQ_RECEIVED, disconnect on ESTABLISHED, destroy
 * each id when its timewait is over, stop when every id has delivered
 * DESTROYED. Then the teardown, in order. See docs/quickstart.md.
 * Build: cc hello_channel.c $(pkg-config --cflags --libs libcep) -o hello_channel
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include <cep/cep.h>

#define SERVICE_ID  0x1234ull
#define SERVER_QPN  0x100
#define CLIENT_QPN  0x200

struct side {
	const char *name;
	struct cep_transport *port;
	struct cep_cm *cm;
	struct cep_cm_channel *ch;
	int live_ids;        /* ids created and not yet DESTROYED */
};

static int check(int ret, const char *what)
{
	if (ret < 0)
		fprintf(stderr, "%s: %s\n", what, strerror(-ret));
	return ret;
}

/* One event of either side. Returns -1 on a failure. */
static int handle(struct side *s, struct side *server, const struct cep_cm_event *ev)
{
	printf("%s: %s\n", s->name, cep_cm_event_name(ev->type));
	switch (ev->type) {
	case CEP_CM_EV_REQ_RECEIVED: {   /* server: a new id, accept it */
		struct cep_cm_accept_param ap = {
			.size = sizeof(ap), .qpn = SERVER_QPN, .starting_psn = 1000,
			.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7,
			.private_data = "world", .private_data_len = sizeof("world"),
		};

		server->live_ids++;
		printf("%s: private data \"%s\"\n", s->name, (const char *)ev->private_data);
		return check(cep_cm_accept(ev->id, &ap), "accept");
	}
	case CEP_CM_EV_ESTABLISHED:      /* client: connected; hang up at once */
		return check(cep_cm_disconnect(ev->id, NULL, 0), "disconnect");
	case CEP_CM_EV_REJ_RECEIVED:
		printf("%s: rejected: %s\n", s->name, cep_rej_reason_name((unsigned)ev->status));
		return -1;
	case CEP_CM_EV_REQ_ERROR:
	case CEP_CM_EV_REP_ERROR:
	case CEP_CM_EV_DREQ_ERROR:
		return -1;
	case CEP_CM_EV_TIMEWAIT_EXIT:    /* both: the connection is over */
		return check(cep_cm_destroy_id(ev->id), "destroy id");
	case CEP_CM_EV_DESTROYED:        /* the id's last event */
		s->live_ids--;
		return 0;
	default:
		return 0;
	}
}

int main(void)
{
	struct cep_fabric *fabric;
	struct side server = { .name = "server" }, client = { .name = "client" };
	struct side *sides[2] = { &server, &client };
	struct cep_cm_id *listener, *conn;
	int ep, ok = 1;

	/* 1. Fabric, ports, CMs, QP numbers, one event channel per side, both
	 * channels' file descriptors in one epoll set. */
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };

	if (check(cep_fabric_create(&fa, &fabric), "fabric"))
		return 1;
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		return 1;
	for (int i = 0; i < 2; i++) {
		struct cep_fabric_port_attr pa = { .size = sizeof(pa),
			.ca_guid = 0x1111u * (i + 1u), .lid = (uint16_t)(i + 1),
			.port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
		struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 1 };
		struct epoll_event ee = { .events = EPOLLIN, .data.ptr = sides[i] };

		if (check(cep_fabric_port_create(fabric, &pa, &sides[i]->port), "port"))
			return 1;
		ca.transport = sides[i]->port;
		if (check(cep_cm_create(&ca, &sides[i]->cm), "CM") ||
		    check(cep_cm_channel_create(&sides[i]->ch), "channel") ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, cep_cm_channel_fd(sides[i]->ch), &ee))
			return 1;
	}
	if (check(cep_cm_qp_register(server.cm, SERVER_QPN), "server QP") ||
	    check(cep_cm_qp_register(client.cm, CLIENT_QPN), "client QP"))
		return 1;

	/* 2. Listen and connect; both ids report to their side's channel (a
	 * passive id inherits its listener's). */
	struct cep_cm_id_attr sa = { .size = sizeof(sa), .channel = server.ch };
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .channel = client.ch };
	struct cep_cm_conn_param p = {
		.size = sizeof(p), .service_id = SERVICE_ID,
		.primary = { .local_lid = 2, .remote_lid = 1, .subnet_local = 1,
			     .packet_rate = 3 }, /* local_ack_timeout: the CM's */
		.qpn = CLIENT_QPN, .starting_psn = 2000,
		.responder_resources = 1, .initiator_depth = 1,
		.remote_cm_response_timeout = 14, .local_cm_response_timeout = 14,
		.packet_life_time = 8, .max_cm_retries = 8,
		.retry_count = 7, .rnr_retry_count = 7,
		.private_data = "hello", .private_data_len = sizeof("hello"),
	};

	if (check(cep_cm_create_id(server.cm, &sa, &listener), "listener") ||
	    check(cep_cm_listen(listener, SERVICE_ID, ~0ull), "listen") ||
	    check(cep_cm_create_id(client.cm, &ia, &conn), "client id") ||
	    check(cep_cm_connect(conn, &p), "connect"))
		return 1;
	server.live_ids = 1;   /* the listener */
	client.live_ids = 1;   /* the connection */

	/* 3. The event loop: until both connection ids are gone (the
	 * listener stays), taking every waiting event of a ready channel and
	 * acking each one when handled. */
	while (ok && (client.live_ids > 0 || server.live_ids > 1)) {
		struct epoll_event ee;
		struct cep_cm_event *ev;
		int n = epoll_wait(ep, &ee, 1, 10000);

		if (n <= 0) {
			fprintf(stderr, "no event for 10 s\n");
			return 1;
		}
		struct side *s = ee.data.ptr;

		while (ok && cep_cm_get_event(s->ch, &ev) == 0) {
			if (handle(s, &server, ev) < 0)
				ok = 0;
			cep_cm_ack_event(ev);   /* after this, a DESTROYED id is dead */
		}
	}
	if (!ok)
		return 1;

	/* 4. Teardown, in this order: the listener (wait for its DESTROYED and
	 * ack it), the QPs' binding words, the CMs, the channels (no event
	 * queued, every id's DESTROYED acked), the ports, the fabric. */
	if (check(cep_cm_destroy_id(listener), "destroy listener"))
		return 1;
	while (server.live_ids > 0) {
		struct epoll_event ee;
		struct cep_cm_event *ev;

		if (epoll_wait(ep, &ee, 1, 10000) <= 0)
			return 1;
		while (cep_cm_get_event(server.ch, &ev) == 0) {
			handle(&server, &server, ev);
			cep_cm_ack_event(ev);
		}
	}
	if (check(cep_cm_qp_destroy(client.cm, CLIENT_QPN), "client QP") ||
	    check(cep_cm_qp_destroy(server.cm, SERVER_QPN), "server QP"))
		return 1;
	for (int i = 0; i < 2; i++) {
		if (check(cep_cm_destroy(sides[i]->cm), "CM") ||
		    check(cep_cm_channel_destroy(sides[i]->ch), "channel"))
			return 1;
		sides[i]->port->ops->destroy(sides[i]->port);
	}
	if (check(cep_fabric_destroy(fabric), "fabric"))
		return 1;
	printf("done: connected, disconnected, everything destroyed\n");
	return 0;
}
