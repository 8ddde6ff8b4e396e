/* SPDX-License-Identifier: MIT */
/*
 * Conformance suite: the line-based control channel between the scripted
 * peer (guest a) and the application under test (guest b), over TCP on the
 * guests' Ethernet link. One line per command, answer or event; every call
 * is bounded by a timeout. Single-threaded users only.
 */
#ifndef CONFORM_CTL_H
#define CONFORM_CTL_H

#include <stddef.h>
#include <stdint.h>

#define CTL_PORT 7600
#define CTL_LINE 1024

struct ctl {
	int fd;
	size_t len;
	char buf[8 * CTL_LINE];
};

/* Listen on @port (any address); returns the socket or -errno. */
int ctl_listen(uint16_t port);
/* Accept one peer on @lfd within @timeout_ms; 0 or -errno. */
int ctl_accept(struct ctl *c, int lfd, int timeout_ms);
/* Connect to @ip:@port, retrying until @timeout_ms; 0 or -errno. */
int ctl_connect(struct ctl *c, const char *ip, uint16_t port, int timeout_ms);
/* Send one line (a newline is appended); 0 or -errno. */
int ctl_send(struct ctl *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Next complete line without its newline: 1 got one, 0 none within
 * @timeout_ms (0 = do not wait), -1 the peer closed or an error. */
int ctl_read(struct ctl *c, char *line, size_t n, int timeout_ms);
void ctl_close(struct ctl *c);

/* Monotonic milliseconds. */
double ctl_now_ms(void);

#endif /* CONFORM_CTL_H */
