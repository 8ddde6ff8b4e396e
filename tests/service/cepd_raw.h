/* SPDX-License-Identifier: MIT */
/*
 * Tests of cepd that speak its protocol raw (service.c, attack.c, client.c): open a
 * client connection with the HELLO libcep's client sends (credentials and
 * pidfd: cmr_hello_send), send a request and wait for its reply. Needs
 * src/ on the include path and the static library. No shared state.
 */
#ifndef CEPD_RAW_H
#define CEPD_RAW_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "service/remote.h"
#include "service/proto.h"

/* ---- the protocol, raw ------------------------------------------------------ */

/* Connect to @sock and say HELLO for port index @port as libcep's client
 * does (cmr_hello_send: credentials and pidfd): the socket, or -errno (of
 * socket/connect, or the HELLO's answer; -EPIPE: closed unanswered). */
static inline int cepd_raw_open(const char *sock, unsigned port)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct cepd_hello h;
	_Alignas(8) uint8_t buf[512];
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), ret;
	ssize_t n;

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		close(fd);
		return ret;
	}
	cepd_hello_init(&h, 0, port);
	ret = cmr_hello_send(fd, &h);
	/* a connection cepd refused at once is closed, its answer waiting;
	 * the first recv may report the reset (our HELLO was unread) */
	n = recv(fd, buf, sizeof(buf), ret ? MSG_DONTWAIT : 0);
	if (n < 0 && errno == ECONNRESET)
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (ret && n < (ssize_t)sizeof(struct cepd_rep)) {
		close(fd);
		return ret;
	}
	ret = n < (ssize_t)sizeof(struct cepd_rep) ? -EPIPE : ((struct cepd_rep *)buf)->ret;
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/* Send @len bytes, return the reply's ret (events skipped), or 1 on EOF,
 * 2 when no reply came within 5 s. */
static inline int cepd_raw_call(int fd, const void *msg, size_t len, void *out, size_t outlen)
{
	static _Alignas(8) _Thread_local uint8_t buf[CEPD_MSG_MAX];
	ssize_t n;

	if (send(fd, msg, len, MSG_NOSIGNAL) < 0)
		return 1;
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		if (poll(&pf, 1, 5000) != 1)
			return 2;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			return 1;
		if (((struct cepd_hdr *)buf)->op == CEPD_REPLY) {
			if (out)
				memcpy(out, buf + sizeof(struct cepd_rep),
				       (size_t)n - sizeof(struct cepd_rep) < outlen
				       ? (size_t)n - sizeof(struct cepd_rep) : outlen);
			return ((struct cepd_rep *)buf)->ret;
		}
	}
}

/* A request with no fixed part: @op on @handle with a = @a, x = @x,
 * y = @y; its reply's ret (cepd_raw_call). */
static inline int cepd_raw_req(int fd, uint32_t op, uint32_t handle, uint32_t a, uint64_t x,
			       uint64_t y, void *out, size_t outlen)
{
	struct cepd_req q;

	memset(&q, 0, sizeof(q));
	q.h.op = op;
	q.h.len = sizeof(q);
	q.h.seq = 7;
	q.handle = handle;
	q.a = a;
	q.x = x;
	q.y = y;
	return cepd_raw_call(fd, &q, sizeof(q), out, outlen);
}

/* A membership rdma_cm may ask (MC_JOIN's fields) from port GID
 * @port_gid: group ff12::@last, full member, rdma_cm's Q_Key, the default
 * P_Key. */
static inline void cepd_mc_rdma_cm(struct cepd_mc *m, const uint8_t port_gid[16], uint8_t last)
{
	memset(m, 0, sizeof(*m));
	m->mgid[0] = 0xff;
	m->mgid[1] = 0x12;
	m->mgid[15] = last;
	memcpy(m->port_gid, port_gid, 16);
	m->qkey = 0x01234567u;
	m->pkey = 0xffff;
}

#endif
