/* SPDX-License-Identifier: MIT */
/*
 * cepd_sd_listen_fd(): the receiving side of systemd socket activation
 * (sd_listen_fds(3): LISTEN_PID names the process the sockets are for,
 * LISTEN_FDS how many, starting at fd 3), for one AF_UNIX SOCK_SEQPACKET
 * listener. Strict: a variable that is not a plain decimal number, or a
 * socket of another kind, is an error, never silently accepted.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "service/sd_listen.h"

#define SD_LISTEN_FDS_START 3 /* sd_listen_fds(3) */

/* A plain decimal number without sign, spaces or leading zeros: 0 and *out,
 * or -EINVAL. */
static int parse_uint(const char *s, unsigned long *out)
{
	unsigned long v = 0;
	const char *p = s;

	if (*p == '\0' || (p[0] == '0' && p[1] != '\0'))
		return -EINVAL;
	for (; *p; p++) {
		if (*p < '0' || *p > '9' || v > (ULONG_MAX - 9) / 10)
			return -EINVAL;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	*out = v;
	return 0;
}

static void unset_all(void)
{
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
}

static int sockopt_int(int fd, int opt, int *val)
{
	socklen_t len = sizeof(*val);

	if (getsockopt(fd, SOL_SOCKET, opt, val, &len) < 0)
		return -errno;
	return len == sizeof(*val) ? 0 : -EINVAL;
}

/* fd is an AF_UNIX SOCK_SEQPACKET socket that listens: 0, or -errno. */
static int check_listener(int fd)
{
	int domain, type, listening, ret, flags;

	flags = fcntl(fd, F_GETFD);
	if (flags < 0)
		return -errno; /* -EBADF: not open */
	if ((ret = sockopt_int(fd, SO_DOMAIN, &domain)) < 0)
		return ret;    /* -ENOTSOCK: not a socket */
	if (domain != AF_UNIX)
		return -EAFNOSUPPORT;
	if ((ret = sockopt_int(fd, SO_TYPE, &type)) < 0)
		return ret;
	if (type != SOCK_SEQPACKET)
		return -EPROTOTYPE;
	if ((ret = sockopt_int(fd, SO_ACCEPTCONN, &listening)) < 0)
		return ret;
	if (!listening)
		return -EINVAL;
	if (!(flags & FD_CLOEXEC) && fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0)
		return -errno;
	return 0;
}

int cepd_sd_listen_fd(void)
{
	const char *pid_s = getenv("LISTEN_PID");
	const char *fds_s = getenv("LISTEN_FDS");
	unsigned long pid, fds;
	int ret;

	if (!pid_s)
		return -ENOENT;
	if (parse_uint(pid_s, &pid) < 0) {
		unset_all();
		return -EINVAL;
	}
	if (pid != (unsigned long)getpid())
		return -ENOENT; /* meant for another process: leave it be */
	if (!fds_s) {
		unset_all();
		return -ENOENT;
	}
	ret = parse_uint(fds_s, &fds);
	unset_all();
	if (ret < 0)
		return ret;
	if (fds == 0)
		return -ENOENT;
	if (fds != 1)
		return -EINVAL;
	ret = check_listener(SD_LISTEN_FDS_START);
	return ret < 0 ? ret : SD_LISTEN_FDS_START;
}
