/* SPDX-License-Identifier: MIT */
/*
 * cepd_sd_listen_fd() as systemd would call it: fd 3 and LISTEN_PID /
 * LISTEN_FDS set up in this process the way socket activation leaves them
 * (ListenSequentialPacket= of debian/cepd.socket), then every way it can
 * be wrong.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "service/sd_listen.h"
#include "../common/check.h"

static struct sockaddr_un addr;

/* A socket of @family/@type on fd 3, bound (AF_UNIX: to an abstract name)
 * and listening when asked. */
static void fd3_socket(int family, int type, int listening)
{
	int fd = socket(family, type, 0);

	if (fd < 0) {
		perror("socket");
		exit(2);
	}
	if (family == AF_UNIX) {
		memset(&addr, 0, sizeof(addr));
		addr.sun_family = AF_UNIX;
		snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1,
			 "cep-sd-listen-test-%d", (int)getpid());
		if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
			perror("bind");
			exit(2);
		}
	}
	if (listening && listen(fd, 4) < 0) {
		perror("listen");
		exit(2);
	}
	if (fd != 3) {
		if (dup2(fd, 3) < 0) {
			perror("dup2");
			exit(2);
		}
		close(fd);
	}
}

static void env(const char *pid, const char *fds)
{
	char mine[32];

	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (pid && strcmp(pid, "self") == 0) {
		snprintf(mine, sizeof(mine), "%d", (int)getpid());
		pid = mine;
	}
	if (pid)
		setenv("LISTEN_PID", pid, 1);
	if (fds)
		setenv("LISTEN_FDS", fds, 1);
	setenv("LISTEN_FDNAMES", "cepd.socket", 1);
}

static int gone(void)
{
	return !getenv("LISTEN_PID") && !getenv("LISTEN_FDS") && !getenv("LISTEN_FDNAMES");
}

int main(void)
{
	char other[32];
	int fd, c;

	/* Nothing passed. */
	close(3);
	env(NULL, NULL);
	CHECK_EQ(cepd_sd_listen_fd(), -ENOENT);

	/* The activated case: accepts a client, close-on-exec, variables gone. */
	fd3_socket(AF_UNIX, SOCK_SEQPACKET, 1);
	fcntl(3, F_SETFD, 0);
	env("self", "1");
	fd = cepd_sd_listen_fd();
	CHECK_EQ(fd, 3);
	CHECK(gone());
	CHECK(fcntl(3, F_GETFD) & FD_CLOEXEC);
	c = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	CHECK_EQ(connect(c, (struct sockaddr *)&addr, sizeof(addr)), 0);
	fd = accept(3, NULL, NULL);
	CHECK(fd >= 0);
	CHECK_EQ(send(c, "x", 1, 0), 1);
	{
		char b[4];
		CHECK_EQ(recv(fd, b, sizeof(b), 0), 1);
	}
	close(fd);
	close(c);
	/* a second call finds nothing */
	CHECK_EQ(cepd_sd_listen_fd(), -ENOENT);

	/* Meant for another process: not ours, and left for it. */
	snprintf(other, sizeof(other), "%d", (int)getpid() + 1);
	env(other, "1");
	CHECK_EQ(cepd_sd_listen_fd(), -ENOENT);
	CHECK(getenv("LISTEN_PID") && getenv("LISTEN_FDS"));

	/* Ours, but no sockets. */
	env("self", "0");
	CHECK_EQ(cepd_sd_listen_fd(), -ENOENT);
	CHECK(gone());
	env("self", NULL);
	CHECK_EQ(cepd_sd_listen_fd(), -ENOENT);

	/* Malformed variables. */
	static const char *bad_fds[] = { "", "1x", "-1", "+1", " 1", "01", "2", "99999999999999999999999" };
	for (size_t i = 0; i < sizeof(bad_fds) / sizeof(bad_fds[0]); i++) {
		env("self", bad_fds[i]);
		CHECK_EQ(cepd_sd_listen_fd(), -EINVAL);
		CHECK(gone());
	}
	static const char *bad_pid[] = { "", "12a", "-5", "0x10" };
	for (size_t i = 0; i < sizeof(bad_pid) / sizeof(bad_pid[0]); i++) {
		env(bad_pid[i], "1");
		CHECK_EQ(cepd_sd_listen_fd(), -EINVAL);
	}

	/* fd 3 of the wrong kind. */
	close(3);
	env("self", "1");
	CHECK_EQ(cepd_sd_listen_fd(), -EBADF);
	{
		int p[2];

		if (pipe(p) < 0)
			return 2;
		if (p[0] != 3) {
			dup2(p[0], 3);
			close(p[0]);
		}
		close(p[1]);
		env("self", "1");
		CHECK_EQ(cepd_sd_listen_fd(), -ENOTSOCK);
		close(3);
	}
	fd3_socket(AF_UNIX, SOCK_STREAM, 1);
	env("self", "1");
	CHECK_EQ(cepd_sd_listen_fd(), -EPROTOTYPE);
	close(3);
	fd3_socket(AF_UNIX, SOCK_DGRAM, 0);
	env("self", "1");
	CHECK_EQ(cepd_sd_listen_fd(), -EPROTOTYPE);
	close(3);
	fd3_socket(AF_INET, SOCK_STREAM, 1);
	env("self", "1");
	CHECK_EQ(cepd_sd_listen_fd(), -EAFNOSUPPORT);
	close(3);
	fd3_socket(AF_UNIX, SOCK_SEQPACKET, 0);
	env("self", "1");
	CHECK_EQ(cepd_sd_listen_fd(), -EINVAL);
	/* the misconfigured fd is left open as it was */
	CHECK(fcntl(3, F_GETFD) >= 0);
	close(3);

	return check_done("sd_listen");
}
