/* SPDX-License-Identifier: MIT */
/*
 * A plain TCP socket program for librspreload (tests/guests/rdmacm.sh,
 * program "rspreload"): it knows nothing of RDMA and links no RDMA
 * library; under LD_PRELOAD=librspreload.so its sockets are rsockets.
 *   sock-copy server ADDR PORT   one connection's bytes to stdout
 *   sock-copy client ADDR PORT   stdin to the server, then shutdown(SHUT_WR)
 *                                and wait for the server's close
 * Both wait in poll(2) before each read and write. accept(2), not
 * accept4(2): Python's socket module and OpenBSD netcat, which use
 * accept4, get "Socket operation on non-socket" from accept under Debian
 * 12's librspreload, with Debian's librdmacm as with libcep's (measured
 * with netcat). Exit 0 when every byte went.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int wait_for(int fd, short ev)
{
	struct pollfd p = { .fd = fd, .events = ev };

	while (poll(&p, 1, 30000) < 0)
		if (errno != EINTR)
			return -1;
	return p.revents ? 0 : -1;
}

static int write_all(int fd, const char *b, size_t n, int sock)
{
	while (n) {
		ssize_t w;

		if (sock && wait_for(fd, POLLOUT))
			return -1;
		w = sock ? send(fd, b, n, 0) : write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	static char buf[65536];
	long long total = 0;
	int s, c, one = 1;
	ssize_t n;

	if (argc != 4 || inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
		fprintf(stderr, "usage: sock-copy server|client ADDR PORT\n");
		return 2;
	}
	a.sin_port = htons((uint16_t)atoi(argv[3]));
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0) {
		perror("socket");
		return 1;
	}
	if (!strcmp(argv[1], "server")) {
		if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
		    bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 1)) {
			perror("bind/listen");
			return 1;
		}
		c = accept(s, NULL, NULL);
		if (c < 0) {
			perror("accept");
			return 1;
		}
		for (;;) {
			if (wait_for(c, POLLIN)) {
				fprintf(stderr, "poll: nothing for 30 s\n");
				return 1;
			}
			n = recv(c, buf, sizeof(buf), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				perror("recv");
				return 1;
			}
			if (!n)
				break;
			if (write_all(1, buf, (size_t)n, 0))
				return 1;
			total += n;
		}
		close(c);
		close(s);
		fprintf(stderr, "server: %lld bytes\n", total);
		return 0;
	}
	if (connect(s, (struct sockaddr *)&a, sizeof(a))) {
		perror("connect");
		return 1;
	}
	while ((n = read(0, buf, sizeof(buf))) > 0) {
		if (write_all(s, buf, (size_t)n, 1)) {
			perror("send");
			return 1;
		}
		total += n;
	}
	if (n < 0 || shutdown(s, SHUT_WR)) {
		perror("read/shutdown");
		return 1;
	}
	/* the server's close: its EOF */
	if (wait_for(s, POLLIN) || recv(s, buf, 1, 0) != 0) {
		fprintf(stderr, "client: no orderly close from the server\n");
		return 1;
	}
	close(s);
	fprintf(stderr, "client: %lld bytes\n", total);
	return 0;
}
