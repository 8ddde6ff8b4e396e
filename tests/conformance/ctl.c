/* SPDX-License-Identifier: MIT */
/*
 * Conformance suite: line-based control channel over TCP (see ctl.h).
 * Lines longer than CTL_LINE are cut; a line never spans two reads' worth of
 * state beyond the buffer.
 */
#include "ctl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double ctl_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void nodelay(int fd)
{
	int one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int ctl_listen(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 1)) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

int ctl_accept(struct ctl *c, int lfd, int timeout_ms)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	int r = poll(&p, 1, timeout_ms);

	if (r <= 0)
		return r ? -errno : -ETIMEDOUT;
	c->fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c->fd < 0)
		return -errno;
	nodelay(c->fd);
	c->len = 0;
	return 0;
}

int ctl_connect(struct ctl *c, const char *ip, uint16_t port, int timeout_ms)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	double end = ctl_now_ms() + timeout_ms;

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		return -EINVAL;
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			nodelay(fd);
			c->fd = fd;
			c->len = 0;
			return 0;
		}
		close(fd);
		if (ctl_now_ms() > end)
			return -ETIMEDOUT;
		usleep(20000);
	}
}

int ctl_send(struct ctl *c, const char *fmt, ...)
{
	char line[CTL_LINE + 1];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	for (int off = 0; off < n;) {
		ssize_t w = send(c->fd, line + off, (size_t)(n - off), MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		off += (int)w;
	}
	return 0;
}

/* Take one line out of the buffer if there is one. */
static int take_line(struct ctl *c, char *line, size_t n)
{
	char *nl = memchr(c->buf, '\n', c->len);
	size_t l;

	if (!nl)
		return 0;
	l = (size_t)(nl - c->buf);
	if (n) {
		size_t k = l < n - 1 ? l : n - 1;

		memcpy(line, c->buf, k);
		line[k] = '\0';
	}
	memmove(c->buf, nl + 1, c->len - l - 1);
	c->len -= l + 1;
	return 1;
}

int ctl_read(struct ctl *c, char *line, size_t n, int timeout_ms)
{
	double end = ctl_now_ms() + timeout_ms;

	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int left, r;
		ssize_t got;

		if (take_line(c, line, n))
			return 1;
		if (c->len == sizeof(c->buf)) /* no newline in a full buffer: cut */
			c->buf[c->len - 1] = '\n';
		left = (int)(end - ctl_now_ms());
		r = poll(&p, 1, left > 0 ? left : 0);
		if (r < 0 && errno != EINTR)
			return -1;
		if (r <= 0) {
			if (left <= 0)
				return 0;
			continue;
		}
		got = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
		if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
			return -1;
		if (got > 0)
			c->len += (size_t)got;
	}
}

void ctl_close(struct ctl *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}
