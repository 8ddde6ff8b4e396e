/* SPDX-License-Identifier: MIT */
/*
 * Datagram rsockets, every byte checked (tests/guests/rdmacm.sh, program
 * "rsdgram"): linked against Debian's librdmacm, run on libcep's through
 * cep-rdmacm.
 *   rsocket-dgram server ADDR PORT PEER | client ADDR PORT
 * The client rconnects to the server and sends 20 datagrams of each of
 * several sizes up to the largest the path allows (the port's MTU less
 * the 8-byte address header), each filled with a pattern of its sequence
 * number and size and carrying the client's own UDP port (rgetsockname).
 * The server checks every byte and that rrecvfrom's source is PEER and
 * that port, and sends the datagram back with rsendto to that source;
 * the client checks every byte of the answer and that its source is the
 * server's address. One byte past the largest is refused (EMSGSIZE). A
 * lost datagram is sent again (up to 5 times; UD, like UDP, may drop).
 * The server writes CEP_RDMACM_READY's file once bound (there is no
 * rdma_listen to do it). Prints one line per check; exit 0 when all held.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#define PER_SIZE 20
#define MAGIC 0x44475231u /* "DGR1" */
#define OP_DATA 1
#define OP_END 2

struct msg {
	uint32_t magic, op, seq, size; /* size: the whole datagram */
	uint16_t port;                 /* the client's UDP port, network order */
	uint8_t bad;                   /* the server's verdict on it */
	uint8_t pad;
	uint8_t data[];
};

static uint8_t pattern(uint32_t seq, uint32_t size, size_t i)
{
	return (uint8_t)(i * 7 + seq * 131 + size);
}

static void fill(uint8_t *b, uint32_t op, uint32_t seq, uint32_t size, uint16_t port)
{
	struct msg *m = (struct msg *)b;

	memset(b, 0, sizeof(*m));
	m->magic = MAGIC;
	m->op = op;
	m->seq = seq;
	m->size = size;
	m->port = port;
	for (size_t i = sizeof(*m); i < size; i++)
		b[i] = pattern(seq, size, i);
}

/* The datagram's own checks: magic, size, every byte of the pattern. */
static int intact(const uint8_t *b, size_t n)
{
	const struct msg *m = (const struct msg *)b;

	if (n < sizeof(*m) || m->magic != MAGIC || m->size != n)
		return 0;
	for (size_t i = sizeof(*m); i < n; i++)
		if (b[i] != pattern(m->seq, m->size, i))
			return 0;
	return 1;
}

static int parse(const char *ip, const char *port, struct sockaddr_in *a)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)atoi(port));
	return inet_pton(AF_INET, ip, &a->sin_addr) == 1 ? 0 : -1;
}

static int server(const struct sockaddr_in *self, const char *peer_ip)
{
	static uint8_t b[4096];
	struct in_addr peer;
	const char *ready = getenv("CEP_RDMACM_READY");
	unsigned ok = 0, bad = 0;
	int s;

	if (inet_pton(AF_INET, peer_ip, &peer) != 1)
		return 2;
	s = rsocket(AF_INET, SOCK_DGRAM, 0);
	if (s < 0 || rbind(s, (const struct sockaddr *)self, sizeof(*self))) {
		perror("server: rsocket/rbind");
		return 1;
	}
	if (ready) { /* as libcep's own readiness file: written, then renamed */
		char tmp[4096];
		int fd;

		snprintf(tmp, sizeof(tmp), "%s.tmp", ready);
		fd = open(tmp, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, "bound\n", 6) != 6 || close(fd) || rename(tmp, ready)) {
			perror("server: readiness file");
			return 1;
		}
	}
	for (;;) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t n = rrecvfrom(s, b, sizeof(b), 0, (struct sockaddr *)&from, &fl);
		struct msg *m = (struct msg *)b;

		if (n < 0) {
			perror("server: rrecvfrom");
			return 1;
		}
		m->bad = 0;
		if (!intact(b, (size_t)n)) {
			printf("server: datagram of %zd bytes damaged\n", n);
			m->bad = 1;
		} else if (fl != sizeof(from) || from.sin_family != AF_INET ||
			   from.sin_addr.s_addr != peer.s_addr || from.sin_port != m->port) {
			printf("server: datagram %u from %s:%u, not %s:%u\n", m->seq,
			       inet_ntoa(from.sin_addr), ntohs(from.sin_port), peer_ip,
			       ntohs(m->port));
			m->bad = 1;
		}
		if (n >= (ssize_t)sizeof(*m) && m->op == OP_END && !m->bad) {
			printf("server: %u datagrams intact from %s:%u%s\n", ok, peer_ip,
			       ntohs(m->port), bad ? "" : ": ok");
			rsendto(s, b, (size_t)n, 0, (struct sockaddr *)&from, fl);
			rclose(s);
			return bad ? 1 : 0;
		}
		if (m->bad)
			bad++;
		else
			ok++;
		if (rsendto(s, b, (size_t)n, 0, (struct sockaddr *)&from, fl) != n) {
			perror("server: rsendto");
			return 1;
		}
	}
}

/* Send b (n bytes), wait up to 2 s for the answer to seq; again up to 5
 * times. 0: the answer is intact and from the server; -1 otherwise. */
static int exchange(int s, const uint8_t *b, size_t n, uint32_t seq,
		    const struct sockaddr_in *srv)
{
	static uint8_t r[4096];

	for (int attempt = 0; attempt < 5; attempt++) {
		if (rsend(s, b, n, 0) != (ssize_t)n) {
			perror("client: rsend");
			return -1;
		}
		for (;;) {
			struct pollfd f = { .fd = s, .events = POLLIN };
			struct sockaddr_in from;
			socklen_t fl = sizeof(from);
			const struct msg *m = (const struct msg *)r;
			ssize_t got;

			if (rpoll(&f, 1, 2000) <= 0)
				break; /* lost: again */
			got = rrecvfrom(s, r, sizeof(r), 0, (struct sockaddr *)&from, &fl);
			if (got < 0) {
				perror("client: rrecvfrom");
				return -1;
			}
			if (got >= (ssize_t)sizeof(*m) && m->seq != seq)
				continue; /* an answer to an earlier try */
			if (fl != sizeof(from) || from.sin_addr.s_addr != srv->sin_addr.s_addr ||
			    from.sin_port != srv->sin_port) {
				printf("client: answer %u from %s:%u, not the server\n", seq,
				       inet_ntoa(from.sin_addr), ntohs(from.sin_port));
				return -1;
			}
			if ((size_t)got != n || memcmp(r + offsetof(struct msg, data),
						       b + offsetof(struct msg, data),
						       n - offsetof(struct msg, data)) ||
			    !intact(r, (size_t)got) || m->bad) {
				printf("client: answer %u of %zd bytes differs (server: %s)\n", seq,
				       got, m->bad ? "bad" : "good");
				return -1;
			}
			return 0;
		}
		printf("client: datagram %u (%zu bytes) unanswered, again\n", seq, n);
	}
	return -1;
}

static int client(const struct sockaddr_in *srv)
{
	static uint8_t b[4096];
	struct sockaddr_in self;
	socklen_t sl = sizeof(self);
	uint32_t sizes[] = { sizeof(struct msg), 64, 100, 512, 1000, 0 /* the largest */ };
	uint32_t seq = 0, max;
	int s = rsocket(AF_INET, SOCK_DGRAM, 0);

	if (s < 0 || rconnect(s, (const struct sockaddr *)srv, sizeof(*srv))) {
		perror("client: rsocket/rconnect");
		return 1;
	}
	if (rgetsockname(s, (struct sockaddr *)&self, &sl)) {
		perror("client: rgetsockname");
		return 1;
	}
	/* the largest the path takes: the first size refused, searched down
	 * from a 2,048-byte slot */
	for (max = 2048; max > 0; max--) {
		fill(b, OP_DATA, 0, max, self.sin_port);
		if (rsend(s, b, max, MSG_DONTWAIT) >= 0 || errno != EMSGSIZE)
			break;
	}
	printf("client: largest datagram %u bytes (refused past it: EMSGSIZE)\n", max);
	if (max != 1016) /* rxe's 1,024-byte MTU less the 8-byte header */
		printf("client: expected 1016\n");
	sizes[sizeof(sizes) / sizeof(sizes[0]) - 1] = max;
	/* the size probe went out (over UDP: the first datagram): its
	 * answer, whenever it comes, is passed over */
	{
		struct pollfd f = { .fd = s, .events = POLLIN };

		while (rpoll(&f, 1, 1000) > 0)
			rrecv(s, b, sizeof(b), 0);
	}
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (int i = 0; i < PER_SIZE; i++) {
			seq++;
			fill(b, OP_DATA, seq, sizes[k], self.sin_port);
			if (exchange(s, b, sizes[k], seq, srv)) {
				printf("client: datagram %u of %u bytes: failed\n", seq, sizes[k]);
				return 1;
			}
		}
	fill(b, OP_END, ++seq, sizeof(struct msg), self.sin_port);
	if (exchange(s, b, sizeof(struct msg), seq, srv))
		return 1;
	printf("client: %u datagrams of %zu sizes up to %u bytes, every byte and source checked: %s\n",
	       seq - 1, sizeof(sizes) / sizeof(sizes[0]), max, max == 1016 ? "ok" : "wrong size");
	rclose(s);
	return max == 1016 ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 5 && !strcmp(argv[1], "server") && !parse(argv[2], argv[3], &a))
		return server(&a, argv[4]);
	if (argc >= 4 && !strcmp(argv[1], "client") && !parse(argv[2], argv[3], &a))
		return client(&a);
	fprintf(stderr, "usage: %s server ADDR PORT PEER | client ADDR PORT\n", argv[0]);
	return 2;
}
