/* SPDX-License-Identifier: MIT */
/*
 * Quick start, cepd: the server and the client of hello_callback.c as two
 * processes that share the node's CM service, cepd(8), instead of each
 * running a CM of its own. Start `cepd --fabric 2` (two ports of an
 * in-process fabric: no RDMA hardware), then `hello_cepd server`, then,
 * in another shell, `hello_cepd client`. Each attaches to one of cepd's
 * ports with cep_cm_attach() (the server to port 0, the client to port 1)
 * and takes its events from an event channel, one after the other: the
 * client connects with "hello", the server accepts with "world", the
 * client disconnects, both wait out timewait and tear down. Each exits 0
 * only if all of that happened. The socket: $CEP_SERVICE, else
 * /run/cep/cepd.sock. See docs/quickstart.md.
 * Build: cc hello_cepd.c $(pkg-config --cflags --libs libcep) -o hello_cepd
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <cep/cep.h>

#define SERVICE_ID  0x1234ull   /* what the server listens on */
#define SERVER_QPN  0x100       /* QP numbers: on the fabric the CM needs */
#define CLIENT_QPN  0x200       /* only numbers, unique per cepd port */
#define SERVER_GUID 0x0002c90300a00000ull /* cepd --fabric's port 0 */

static const char *side;        /* "server" or "client": every line says */

static int check(int ret, const char *what)
{
	if (ret < 0)
		fprintf(stderr, "%s: %s: %s\n", side, what, strerror(-ret));
	return ret;
}

/* The next event on @ch that is not an MRA, waiting up to @seconds for
 * each; NULL if none came. The caller acks it. cepd acknowledges a request
 * by itself when the application is slow to answer (cepd(8)): its
 * MRA_RECEIVED only means "wait longer". */
static struct cep_cm_event *next_event(struct cep_cm_channel *ch, int seconds)
{
	struct pollfd pf = { .fd = cep_cm_channel_fd(ch), .events = POLLIN };
	struct cep_cm_event *ev;

	for (;;) {
		if (cep_cm_get_event(ch, &ev) == 0) {
			printf("%s: %s\n", side, cep_cm_event_name(ev->type));
			if (ev->type != CEP_CM_EV_MRA_RECEIVED)
				return ev;
			cep_cm_ack_event(ev);
			continue;
		}
		if (poll(&pf, 1, seconds * 1000) != 1) {
			fprintf(stderr, "%s: no event for %d s\n", side, seconds);
			return NULL;
		}
	}
}

/* The next event, if it is @type (else it is acked and NULL returned: a
 * REJ says why, e.g. "Invalid Service ID" when no server listens). */
static struct cep_cm_event *expect(struct cep_cm_channel *ch, unsigned type, int seconds)
{
	struct cep_cm_event *ev = next_event(ch, seconds);

	if (!ev || ev->type == type)
		return ev;
	fprintf(stderr, "%s: expected %s", side, cep_cm_event_name(type));
	if (ev->type == CEP_CM_EV_REJ_RECEIVED)
		fprintf(stderr, ", rejected: %s", cep_rej_reason_name((unsigned)ev->status));
	fprintf(stderr, "\n");
	cep_cm_ack_event(ev);
	return NULL;
}

/* Take the next event, check it is @type, ack it. 0 or -1. */
static int wait_for(struct cep_cm_channel *ch, unsigned type)
{
	struct cep_cm_event *ev = expect(ch, type, 10);

	if (!ev)
		return -1;
	cep_cm_ack_event(ev);
	return 0;
}

/* An InfiniBand port's GID 0: the link-local subnet prefix and the port
 * GUID (on cepd's fabric, the CA GUID). */
static void port_gid(uint8_t gid[16], uint64_t guid)
{
	memset(gid, 0, 16);
	gid[0] = 0xfe;
	gid[1] = 0x80;
	for (int i = 0; i < 8; i++)
		gid[8 + i] = (uint8_t)(guid >> (56 - 8 * i));
}

/* Attach to cepd's CM of fabric port @port: from here on, every cep_cm_*
 * call works as on a CM of one's own (cep_cm_create), run by cepd. */
static struct cep_cm *attach(unsigned port)
{
	struct cep_cm_attach_attr aa = { .size = sizeof(aa), .socket = NULL, /* $CEP_SERVICE */
					 .device = NULL, .port_num = port };
	struct cep_cm *cm;

	if (check(cep_cm_attach(&aa, &cm), "attach to cepd (is `cepd --fabric 2` running?)"))
		return NULL;
	return cm;
}

/* Both sides end the same way, once their ids have delivered DESTROYED:
 * the QP's binding word, the context (which closes the connection to
 * cepd), then the channel. */
static int teardown(struct cep_cm *cm, struct cep_cm_channel *ch, uint32_t qpn)
{
	if (check(cep_cm_qp_destroy(cm, qpn), "destroy QP") ||
	    check(cep_cm_destroy(cm), "destroy CM") ||
	    check(cep_cm_channel_destroy(ch), "destroy channel"))
		return 1;
	printf("%s: done: connected, disconnected, everything destroyed\n", side);
	return 0;
}

static int server(void)
{
	struct cep_cm *cm = attach(0);
	struct cep_cm_channel *ch;
	struct cep_cm_id *listener, *conn;
	struct cep_cm_event *ev;

	if (!cm || check(cep_cm_channel_create(&ch), "channel") ||
	    check(cep_cm_qp_register(cm, SERVER_QPN), "register QP"))
		return 1;

	/* Listen. Another process listening on the same ID would make this
	 * fail with EADDRINUSE. */
	struct cep_cm_id_attr la = { .size = sizeof(la), .channel = ch };

	if (check(cep_cm_create_id(cm, &la, &listener), "listener") ||
	    check(cep_cm_listen(listener, SERVICE_ID, ~0ull), "listen"))
		return 1;
	printf("server: listening on service ID 0x%llx\n", SERVICE_ID);

	/* A minute for someone to start the client; the REQ creates the
	 * connection's id, which reports to the listener's channel. */
	ev = expect(ch, CEP_CM_EV_REQ_RECEIVED, 60);
	if (!ev)
		return 1;
	printf("server: REQ with private data \"%s\"\n", (const char *)ev->private_data);
	conn = ev->id;

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
	int ret = check(cep_cm_accept(conn, &ap), "accept");   /* the REP */

	cep_cm_ack_event(ev);
	if (ret || wait_for(ch, CEP_CM_EV_RTU_RECEIVED))
		return 1;
	printf("server: connected\n");

	/* The client hangs up: the CM answers its DREQ with a DREP by itself;
	 * timewait follows. Then destroy both ids and wait for their last
	 * events (one at a time: each DESTROYED acked is that id's end). */
	if (wait_for(ch, CEP_CM_EV_DREQ_RECEIVED) ||
	    wait_for(ch, CEP_CM_EV_TIMEWAIT_EXIT) ||
	    check(cep_cm_destroy_id(conn), "destroy connection id") ||
	    wait_for(ch, CEP_CM_EV_DESTROYED) ||
	    check(cep_cm_destroy_id(listener), "destroy listener") ||
	    wait_for(ch, CEP_CM_EV_DESTROYED))
		return 1;
	return teardown(cm, ch, SERVER_QPN);
}

static int client(void)
{
	struct cep_cm *cm = attach(1);
	struct cep_cm_channel *ch;
	struct cep_cm_id *conn;
	struct cep_cm_event *ev;

	if (!cm || check(cep_cm_channel_create(&ch), "channel") ||
	    check(cep_cm_qp_register(cm, CLIENT_QPN), "register QP"))
		return 1;

	/* The path, as a path record would give it: cepd --fabric N gives
	 * port i LID i + 1 and GUID SERVER_GUID + i, so from port 1 (LID 2)
	 * to the server's port 0 (LID 1), in the default partition. cepd
	 * sends only from a GID and P_Key of the client's port. The timing
	 * values are hello_callback.c's, with 268 ms (16) for each side's
	 * answer: it goes through cepd. */
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .channel = ch };
	struct cep_cm_conn_param p = {
		.size = sizeof(p),
		.service_id = SERVICE_ID,
		.primary = { .local_lid = 2, .remote_lid = 1, .subnet_local = 1,
			     .packet_rate = 3 },          /* 10 Gb/s */
		.pkey = 0xffff,
		.qpn = CLIENT_QPN,
		.starting_psn = 2000,
		.responder_resources = 1,
		.initiator_depth = 1,
		.remote_cm_response_timeout = 16,
		.local_cm_response_timeout = 16,
		.packet_life_time = 8,                  /* 1 ms */
		.max_cm_retries = 8,
		.retry_count = 7,
		.rnr_retry_count = 7,
		.private_data = "hello",
		.private_data_len = sizeof("hello"),
	};

	port_gid(p.primary.local_gid, cep_cm_ca_guid(cm));
	port_gid(p.primary.remote_gid, SERVER_GUID);
	if (check(cep_cm_create_id(cm, &ia, &conn), "client id") ||
	    check(cep_cm_connect(conn, &p), "connect"))
		return 1;
	ev = expect(ch, CEP_CM_EV_REP_RECEIVED, 10);
	if (!ev)
		return 1;
	printf("client: REP with private data \"%s\"\n", (const char *)ev->private_data);
	cep_cm_ack_event(ev);   /* the CM sends the RTU, then ESTABLISHED */
	if (wait_for(ch, CEP_CM_EV_ESTABLISHED))
		return 1;
	printf("client: connected\n");

	/* Hang up (DREQ, the server's CM answers DREP), wait out timewait,
	 * destroy the id and wait for its last event. */
	if (check(cep_cm_disconnect(conn, NULL, 0), "disconnect") ||
	    wait_for(ch, CEP_CM_EV_DREP_RECEIVED) ||
	    wait_for(ch, CEP_CM_EV_TIMEWAIT_EXIT) ||
	    check(cep_cm_destroy_id(conn), "destroy id") ||
	    wait_for(ch, CEP_CM_EV_DESTROYED))
		return 1;
	return teardown(cm, ch, CLIENT_QPN);
}

/* On any failure the process just exits: cepd ends a dead client's ids
 * and QPs itself, and tells their peers, as the kernel does for a process
 * whose rdma_cm file closes. */
int main(int argc, char **argv)
{
	/* Line by line, so two processes' output interleaves as it happens. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	side = argc == 2 ? argv[1] : "";
	if (!strcmp(side, "server"))
		return server();
	if (!strcmp(side, "client"))
		return client();
	fprintf(stderr, "usage: hello_cepd server|client (with `cepd --fabric 2` running)\n");
	return 2;
}
