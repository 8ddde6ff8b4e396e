/* SPDX-License-Identifier: MIT */
/*
 * Stream rsockets from two threads at once (tests/guests/rdmacm.sh,
 * program "rsduplex"): linked against Debian's librdmacm, run on libcep's
 * through cep-rdmacm or on Debian's as it is.
 *   rsocket-duplex server ADDR PORT | client ADDR PORT
 * After connecting, each side sends 8 MiB (its own byte pattern) from one
 * thread while another thread receives the peer's 8 MiB and checks every
 * byte: the sender and the receiver share the rsocket's completion queue,
 * so each often sleeps on completions the other takes. Then the server
 * blocks a thread in rrecv and shuts the rsocket down from its main
 * thread: the reader must return within 5 s; the client's reader, blocked
 * meanwhile, must get end of file from the server's disconnect.
 * Prints one "ok" line per check; exit 0 when all held.
 *   rsocket-duplex hostile-server ADDR PORT | hostile-client ADDR PORT
 * A hostile peer on the wire: the client speaks rsockets' connection
 * data itself (rdma_cm and verbs, no rsocket) and then writes twice as
 * many messages as the server's credits allow; the server only rpolls
 * (reads nothing), and its rsocket must end the connection with EPROTO
 * (POLLERR; rrecv gives the messages the credits allowed, no more, then
 * -1 EPROTO) instead of overwriting unread data.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#define TOTAL (8u << 20)
#define CHUNK 100000u

static int rs;

static uint8_t pattern(unsigned seed, size_t i)
{
	return (uint8_t)(i * 7 + seed * 131 + (i >> 13));
}

struct dir {
	unsigned seed;
	size_t done;
	int err;
};

static void *sender(void *arg)
{
	struct dir *d = arg;
	static uint8_t buf[CHUNK];

	while (d->done < TOTAL) {
		size_t n = TOTAL - d->done < CHUNK ? TOTAL - d->done : CHUNK;
		ssize_t w;

		for (size_t k = 0; k < n; k++)
			buf[k] = pattern(d->seed, d->done + k);
		for (size_t off = 0; off < n; off += (size_t)w) {
			w = rsend(rs, buf + off, n - off, 0);
			if (w <= 0) {
				d->err = w < 0 ? errno : EPIPE;
				return NULL;
			}
		}
		d->done += n;
	}
	return NULL;
}

static void *receiver(void *arg)
{
	struct dir *d = arg;
	static uint8_t buf[CHUNK];

	while (d->done < TOTAL) {
		ssize_t r = rrecv(rs, buf, sizeof(buf), 0);

		if (r <= 0) {
			d->err = r < 0 ? errno : EPIPE;
			return NULL;
		}
		for (ssize_t k = 0; k < r; k++)
			if (buf[k] != pattern(d->seed, d->done + (size_t)k)) {
				fprintf(stderr, "byte %zu differs\n", d->done + (size_t)k);
				d->err = EILSEQ;
				return NULL;
			}
		d->done += (size_t)r;
	}
	return NULL;
}

static volatile int reader_ret = -2;

static void *blocked_reader(void *arg)
{
	char c;

	(void)arg;
	reader_ret = (int)rrecv(rs, &c, 1, 0);
	return NULL;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}


/* rsockets' connection data (librdmacm's struct rs_conn_data), big-endian. */
struct conn_data {
	uint8_t version, flags;
	uint16_t credits;
	uint8_t reserved[3], iomap;
	uint64_t sgl_addr;
	uint32_t sgl_key, sgl_len;
	uint64_t buf_addr;
	uint32_t buf_key, buf_len;
} __attribute__((packed));

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(ch, &ev)) {
		perror("rdma_get_cm_event");
		exit(1);
	}
	if (ev->event != t) {
		fprintf(stderr, "event %s, wanted %s\n", rdma_event_str(ev->event), rdma_event_str(t));
		exit(1);
	}
	return ev;
}

static int hostile_client(struct sockaddr_in *a)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
				       .cap = { .max_send_wr = 64, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_conn_param p = { .retry_count = 7, .rnr_retry_count = 7, .flow_control = 1 };
	static uint8_t mem[4096];
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct conn_data cd, peer;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	unsigned credits, sent = 0, done = 0;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)a, 2000))
		return perror("hostile: id"), 1;
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 2000))
		return perror("hostile: route"), 1;
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	cq = ibv_create_cq(id->verbs, 128, NULL, NULL, 0);
	qa.send_cq = qa.recv_cq = cq;
	mr = ibv_reg_mr(id->pd, mem, sizeof(mem), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!cq || !mr || rdma_create_qp(id, id->pd, &qa))
		return perror("hostile: qp"), 1;
	memset(&cd, 0, sizeof(cd));
	cd.version = 1;
	cd.flags = 2; /* IOMAP, little-endian */
	cd.credits = htobe16(16);
	cd.sgl_addr = htobe64((uintptr_t)mem);
	cd.sgl_key = htobe32(mr->rkey);
	cd.sgl_len = htobe32(2);
	cd.buf_addr = htobe64((uintptr_t)mem + 1024);
	cd.buf_key = htobe32(mr->rkey);
	cd.buf_len = htobe32(1024);
	p.private_data = &cd;
	p.private_data_len = sizeof(cd);
	if (rdma_connect(id, &p))
		return perror("hostile: connect"), 1;
	ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	memcpy(&peer, ev->param.conn.private_data, sizeof(peer));
	rdma_ack_cm_event(ev);
	credits = be16toh(peer.credits);
	printf("hostile: connected, the server grants %u messages\n", credits);
	/* twice the credits, one byte each into the first grant (30 s at
	 * most: a server that stops reposting receives leaves us waiting) */
	double t0 = now_s();

	while (done < 2 * credits + 8 && now_s() - t0 < 30) {
		struct ibv_wc wc;

		while (sent < 2 * credits + 8 && sent - done < 32) {
			struct ibv_sge sge = { .addr = (uintptr_t)mem + 2048, .length = 1,
					       .lkey = mr->lkey };
			struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
						  .imm_data = htobe32(1) }, *bad;

			wr.wr.rdma.remote_addr = be64toh(peer.buf_addr) + sent % 64;
			wr.wr.rdma.rkey = be32toh(peer.buf_key);
			if (ibv_post_send(id->qp, &wr, &bad))
				return perror("hostile: post"), 1;
			sent++;
		}
		if (ibv_poll_cq(cq, 1, &wc) == 1) {
			done++;
			if (wc.status != IBV_WC_SUCCESS) {
				/* the server's QP gone to error: what we wanted */
				printf("hostile: write %u ended %s\n", done, ibv_wc_status_str(wc.status));
				break;
			}
		}
	}
	printf("hostile: %u writes posted: done\n", sent);
	ev = NULL;
	sleep(3); /* the server's verdict before we go */
	rdma_disconnect(id);
	return 0;
}

static int hostile_server(int ls)
{
	struct pollfd f;
	double t0 = now_s();
	char c;
	ssize_t r;

	rs = raccept(ls, NULL, NULL);
	if (rs < 0)
		return perror("raccept"), 1;
	f.fd = rs;
	f.events = 0; /* no POLLIN: read nothing, only let the rsocket work */
	while (now_s() - t0 < 20) {
		f.revents = 0;
		if (rpoll(&f, 1, 100) < 0)
			return perror("rpoll"), 1;
		if (f.revents & (POLLERR | POLLHUP))
			break;
	}
	/* the bytes that came within the credits, then the error */
	size_t got = 0;

	while ((r = rrecv(rs, &c, 1, MSG_DONTWAIT)) == 1)
		got++;
	/* exactly the messages the credits allowed (one byte each), no more */
	int rq = 0;
	socklen_t l = sizeof(rq);

	rgetsockopt(rs, SOL_RDMA, RDMA_RQSIZE, &rq, &l);
	if ((f.revents & POLLERR) && r < 0 && errno == EPROTO && got == (size_t)rq) {
		printf("hostile: POLLERR after %.1f s, the %zu bytes of the credits read, "
		       "then rrecv EPROTO: ok\n", now_s() - t0, got);
		return 0;
	}
	printf("hostile: revents 0x%x, %zu bytes, rrecv %zd (%s)\n", f.revents, got, r,
	       strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct dir out, in;
	pthread_t ts, tr;
	int server, ls = -1, fails = 0;

	if (argc != 4 || inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
		fprintf(stderr, "usage: rsocket-duplex server|client|hostile-server|hostile-client "
				"ADDR PORT\n");
		return 2;
	}
	a.sin_port = htons((uint16_t)atoi(argv[3]));
	if (!strcmp(argv[1], "hostile-client"))
		return hostile_client(&a);
	server = !strcmp(argv[1], "server") || !strcmp(argv[1], "hostile-server");
	if (server) {
		ls = rsocket(AF_INET, SOCK_STREAM, 0);
		if (ls < 0 || rbind(ls, (struct sockaddr *)&a, sizeof(a)) || rlisten(ls, 1)) {
			perror("rsocket/rbind/rlisten");
			return 1;
		}
		if (!strcmp(argv[1], "hostile-server"))
			return hostile_server(ls);
		rs = raccept(ls, NULL, NULL);
	} else {
		rs = rsocket(AF_INET, SOCK_STREAM, 0);
		if (rs >= 0 && rconnect(rs, (struct sockaddr *)&a, sizeof(a)))
			rs = -1;
	}
	if (rs < 0) {
		perror(server ? "raccept" : "rconnect");
		return 1;
	}

	memset(&out, 0, sizeof(out));
	memset(&in, 0, sizeof(in));
	out.seed = server ? 1 : 2;
	in.seed = server ? 2 : 1;
	pthread_create(&ts, NULL, sender, &out);
	pthread_create(&tr, NULL, receiver, &in);
	pthread_join(ts, NULL);
	pthread_join(tr, NULL);
	if (!out.err && !in.err && out.done == TOTAL && in.done == TOTAL) {
		printf("duplex: sent %zu, received %zu checked: ok\n", out.done, in.done);
	} else {
		printf("duplex: sent %zu (%s), received %zu (%s)\n", out.done, strerror(out.err),
		       in.done, strerror(in.err));
		fails++;
	}

	if (server) {
		pthread_t t;
		double t0;

		pthread_create(&t, NULL, blocked_reader, NULL);
		usleep(500 * 1000);
		t0 = now_s();
		rshutdown(rs, SHUT_RDWR);
		while (reader_ret == -2 && now_s() - t0 < 5)
			usleep(1000);
		if (reader_ret != -2) {
			pthread_join(t, NULL);
			printf("shutdown: the blocked reader returned %d after %.3f s: ok\n",
			       reader_ret, now_s() - t0);
		} else {
			printf("shutdown: the blocked reader still blocked after 5 s\n");
			fails++;
		}
	} else {
		char c;
		ssize_t r = rrecv(rs, &c, 1, 0); /* blocked until the server's disconnect */

		if (r == 0) {
			printf("eof: the server's disconnect ended the blocked read: ok\n");
		} else {
			printf("eof: rrecv returned %zd (%s)\n", r, strerror(errno));
			fails++;
		}
	}
	rclose(rs);
	if (ls >= 0)
		rclose(ls);
	return fails ? 1 : 0;
}
