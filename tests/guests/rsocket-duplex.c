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

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct dir out, in;
	pthread_t ts, tr;
	int server, ls = -1, fails = 0;

	if (argc != 4 || inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
		fprintf(stderr, "usage: rsocket-duplex server|client ADDR PORT\n");
		return 2;
	}
	server = !strcmp(argv[1], "server");
	a.sin_port = htons((uint16_t)atoi(argv[3]));
	if (server) {
		ls = rsocket(AF_INET, SOCK_STREAM, 0);
		if (ls < 0 || rbind(ls, (struct sockaddr *)&a, sizeof(a)) || rlisten(ls, 1)) {
			perror("rsocket/rbind/rlisten");
			return 1;
		}
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
