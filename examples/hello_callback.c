/* SPDX-License-Identifier: MIT */
/*
 * Quick start, callbacks: a server and a client on libcep's in-process
 * fabric, in one process. The client connects (REQ -> REP -> RTU) with
 * "hello" as private data, the server answers "world", the client
 * disconnects (DREQ -> DREP), both sides wait out timewait, and everything
 * is torn down in order. Events arrive as callbacks on the CM's worker
 * threads; main() waits for them. See docs/quickstart.md.
 * Build: cc hello_callback.c $(pkg-config --cflags --libs libcep) -o hello_callback
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cep/cep.h>

#define SERVICE_ID  0x1234ull   /* what the server listens on */
#define SERVER_QPN  0x100       /* QP numbers of the two sides (no real QPs */
#define CLIENT_QPN  0x200       /* on the fabric: the CM needs only numbers) */

/* Milestones the callbacks reach; main() waits for them in turn. */
static atomic_int server_established, server_timewait_done, server_ids_destroyed;
static atomic_int client_established, client_timewait_done, client_destroyed;

/* Server: the listener and every connection it accepts share this callback
 * (a passive id inherits its listener's). It runs on a CM worker thread. */
static int on_server(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	printf("server: %s\n", cep_cm_event_name(ev->type));
	switch (ev->type) {
	case CEP_CM_EV_REQ_RECEIVED: {
		struct cep_cm_accept_param ap = {
			.size = sizeof(ap),
			.qpn = SERVER_QPN,
			.starting_psn = 1000,
			.responder_resources = 1,
			.initiator_depth = 1,
			.rnr_retry_count = 7,
			.private_data = "world",
			.private_data_len = sizeof("world"),
		};

		printf("server: REQ from comm ID 0x%08" PRIx32 ", private data \"%s\"\n",
		       ev->msg.u.req.local_comm_id, (const char *)ev->private_data);
		if (cep_cm_accept(id, &ap)) /* sends the REP */
			return 1;           /* refused: destroy this id */
		return 0;
	}
	case CEP_CM_EV_RTU_RECEIVED:
		atomic_store(&server_established, 1);
		return 0;
	case CEP_CM_EV_TIMEWAIT_EXIT:
		/* The connection is over and its QP free again: this id is done. */
		atomic_store(&server_timewait_done, 1);
		return 1;   /* non-zero: destroy the id after this callback */
	case CEP_CM_EV_DESTROYED:
		/* The last event of an id (the connection's, then the listener's). */
		atomic_fetch_add(&server_ids_destroyed, 1);
		return 0;
	default:
		return 0;   /* DREQ_RECEIVED: the CM answers with a DREP itself */
	}
}

static int on_client(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	printf("client: %s\n", cep_cm_event_name(ev->type));
	switch (ev->type) {
	case CEP_CM_EV_REP_RECEIVED:
		printf("client: REP with private data \"%s\"\n", (const char *)ev->private_data);
		return 0;   /* the CM sends the RTU, then ESTABLISHED follows */
	case CEP_CM_EV_ESTABLISHED:
		atomic_store(&client_established, 1);
		return 0;
	case CEP_CM_EV_REJ_RECEIVED:
		printf("client: rejected: %s\n", cep_rej_reason_name((unsigned)ev->status));
		return 0;
	case CEP_CM_EV_TIMEWAIT_EXIT:
		atomic_store(&client_timewait_done, 1);
		return 0;
	case CEP_CM_EV_DESTROYED:
		atomic_store(&client_destroyed, 1);
		return 0;
	default:
		(void)id;
		return 0;
	}
}

/* Wait up to 10 s for a milestone; a quick start should not hang. */
static int wait_for(atomic_int *flag, int value, const char *what)
{
	struct timespec ms = { 0, 1000000 };

	for (int i = 0; i < 10000; i++) {
		if (atomic_load(flag) >= value)
			return 0;
		nanosleep(&ms, NULL);
	}
	fprintf(stderr, "timed out waiting for %s\n", what);
	return -1;
}

static int check(int ret, const char *what)
{
	if (ret < 0)
		fprintf(stderr, "%s: %s\n", what, strerror(-ret));
	return ret;
}

int main(void)
{
	struct cep_fabric *fabric;
	struct cep_transport *server_port, *client_port;
	struct cep_cm *server_cm, *client_cm;
	struct cep_cm_id *listener, *conn;

	unsigned v = cep_version();

	printf("libcep %u.%u.%u (built with headers %s)\n",
	       v >> 16, (v >> 8) & 0xff, v & 0xff, CEP_VERSION_STRING);

	/* 1. A fabric and two ports: InfiniBand, LIDs 1 (server) and 2 (client). */
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	struct cep_fabric_port_attr spa = { .size = sizeof(spa), .ca_guid = 0x1111,
		.lid = 1, .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_fabric_port_attr cpa = spa;

	cpa.ca_guid = 0x2222;
	cpa.lid = 2;
	if (check(cep_fabric_create(&fa, &fabric), "fabric") ||
	    check(cep_fabric_port_create(fabric, &spa, &server_port), "server port") ||
	    check(cep_fabric_port_create(fabric, &cpa, &client_port), "client port"))
		return 1;

	/* 2. A CM on each port (one worker thread each is plenty here), and
	 * each side's QP number registered with its CM. */
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 1 };

	ca.transport = server_port;
	if (check(cep_cm_create(&ca, &server_cm), "server CM"))
		return 1;
	ca.transport = client_port;
	if (check(cep_cm_create(&ca, &client_cm), "client CM") ||
	    check(cep_cm_qp_register(server_cm, SERVER_QPN), "server QP") ||
	    check(cep_cm_qp_register(client_cm, CLIENT_QPN), "client QP"))
		return 1;

	/* 3. The server listens on SERVICE_ID (mask: all 64 bits must match). */
	struct cep_cm_id_attr sa = { .size = sizeof(sa), .handler = on_server };

	if (check(cep_cm_create_id(server_cm, &sa, &listener), "listener") ||
	    check(cep_cm_listen(listener, SERVICE_ID, ~0ull), "listen"))
		return 1;

	/* 4. The client connects. CM times are IBTA exponents: 4.096 us * 2^t. */
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = on_client };
	struct cep_cm_conn_param p = {
		.size = sizeof(p),
		.service_id = SERVICE_ID,
		/* No local_ack_timeout: the CM computes the REQ's from the
		 * port's CA ACK delay and packet_life_time, and timewait
		 * lasts that long (cep_cm_id(3)). */
		.primary = { .local_lid = 2, .remote_lid = 1, .subnet_local = 1,
			     .packet_rate = 3 },          /* 10 Gb/s */
		.qpn = CLIENT_QPN,
		.starting_psn = 2000,
		.responder_resources = 1,
		.initiator_depth = 1,
		.remote_cm_response_timeout = 14,       /* the server may take 67 ms */
		.local_cm_response_timeout = 14,
		.packet_life_time = 8,                  /* 1 ms */
		.max_cm_retries = 8,
		.retry_count = 7,
		.rnr_retry_count = 7,
		.private_data = "hello",
		.private_data_len = sizeof("hello"),
	};

	if (check(cep_cm_create_id(client_cm, &ia, &conn), "client id") ||
	    check(cep_cm_connect(conn, &p), "connect") ||
	    wait_for(&client_established, 1, "the client's ESTABLISHED") ||
	    wait_for(&server_established, 1, "the server's RTU_RECEIVED"))
		return 1;
	printf("connected: client comm ID 0x%08" PRIx32 ", server comm ID 0x%08" PRIx32 "\n",
	       cep_cm_id_local_comm_id(conn), cep_cm_id_remote_comm_id(conn));

	/* 5. Teardown, in this order:
	 * a. disconnect (DREQ -> DREP), then wait out timewait on both sides:
	 *    until TIMEWAIT_EXIT the QP stays bound and the IDs reserved; */
	if (check(cep_cm_disconnect(conn, NULL, 0), "disconnect") ||
	    wait_for(&client_timewait_done, 1, "the client's TIMEWAIT_EXIT") ||
	    wait_for(&server_timewait_done, 1, "the server's TIMEWAIT_EXIT"))
		return 1;
	/* b. destroy the ids; DESTROYED is each id's last event, after which
	 *    its pointer is dead (the server's callback destroyed its
	 *    connection id by returning 1; the _sync calls wait for DESTROYED); */
	if (check(cep_cm_destroy_id_sync(conn), "destroy client id") ||
	    check(cep_cm_destroy_id_sync(listener), "destroy listener") ||
	    wait_for(&server_ids_destroyed, 2, "the server's DESTROYED events"))
		return 1;
	/* c. the QPs' binding words (with real QPs: before ibv_destroy_qp, so
	 *    the number is free here before the kernel can reuse it),
	 * d. the CMs (they stop their ports), e. the ports, f. the fabric. */
	if (check(cep_cm_qp_destroy(client_cm, CLIENT_QPN), "client QP") ||
	    check(cep_cm_qp_destroy(server_cm, SERVER_QPN), "server QP") ||
	    check(cep_cm_destroy(client_cm), "client CM") ||
	    check(cep_cm_destroy(server_cm), "server CM"))
		return 1;
	client_port->ops->destroy(client_port);
	server_port->ops->destroy(server_port);
	if (check(cep_fabric_destroy(fabric), "fabric"))
		return 1;
	printf("done: connected, disconnected, everything destroyed\n");
	return atomic_load(&client_destroyed) == 1 ? 0 : 1;
}
