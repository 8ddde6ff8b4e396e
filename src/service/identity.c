/* SPDX-License-Identifier: MIT */
/*
 * Who a cepd client is (identity.h says how and why it cannot be
 * recycled): SO_PEERCRED, SO_PEERPIDFD or the HELLO's pidfd checked
 * against its SCM_CREDENTIALS, then /proc/PID pinned to that process for
 * reading its capabilities and groups when a request needs them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/identity.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5; older kernels answer ENOPROTOOPT */
#endif

int ident_accept(int fd, struct cepd_ident *id)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	const char *no = getenv("CEPD_NO_PEERPIDFD");
	int one = 1;

	memset(id, 0, sizeof(*id));
	id->pidfd = id->procfd = -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len))
		return -errno;
	id->pid = cr.pid;
	id->uid = cr.uid;
	id->gid = cr.gid;
	/* the HELLO's credentials: attached to what the client sends from now
	 * (the kernel records them with every message) */
	if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)))
		return -errno;
	if (!(no && !strcmp(no, "1"))) {
		int pfd = -1;

		len = sizeof(pfd);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &len) == 0 && pfd >= 0) {
			id->pidfd = pfd;
			id->from_peer = 1;
		} else if (errno == ESRCH) {
			return -ESRCH; /* the connecting process is gone already */
		}
		/* ENOPROTOOPT (or EINVAL on some kernels): the HELLO's way */
	}
	return 0;
}

/* The pid a pidfd names (its "Pid:" line in /proc/self/fdinfo): 0 and
 * *pid; -EPERM when @fd is not a pidfd (no such line); -ESRCH when its
 * process was reaped (-1). */
static int pidfd_pid(int fd, pid_t *pid)
{
	char path[64], line[256];
	FILE *f;
	int ret = -EPERM;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Pid:", 4)) {
			long v = strtol(line + 4, NULL, 10);

			ret = v > 0 ? 0 : -ESRCH;
			if (v > 0)
				*pid = (pid_t)v;
			break;
		}
	fclose(f);
	return ret;
}

static bool pidfd_alive(int fd)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	/* a pidfd polls readable once its process has exited */
	return fd >= 0 && poll(&pf, 1, 0) == 0;
}

int ident_hello(struct cepd_ident *id, const struct ucred *cred, int passed_fd)
{
	char path[32];
	int ret = 0;

	if (!cred || cred->uid != id->uid) {
		ret = -EPERM; /* compare uids: the sender is not the connection's user */
		goto out;
	}
	if (id->pidfd < 0) {
		pid_t p;

		if (passed_fd < 0) {
			ret = -EPERM;
			goto out;
		}
		ret = pidfd_pid(passed_fd, &p);
		if (ret)
			goto out;
		if (p != cred->pid) {
			ret = -EPERM; /* someone else's pidfd */
			goto out;
		}
		if (!pidfd_alive(passed_fd)) {
			ret = -ESRCH;
			goto out;
		}
		id->pidfd = passed_fd;
		passed_fd = -1;
		id->pid = p;
	} else {
		pid_t p;

		/* SO_PEERPIDFD's process: its pid (a child that inherited the
		 * socket may send the HELLO; the connecting process stays the
		 * client) */
		ret = pidfd_pid(id->pidfd, &p);
		if (ret)
			goto out;
		id->pid = p;
	}
	snprintf(path, sizeof(path), "/proc/%d", (int)id->pid);
	id->procfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (id->procfd < 0) {
		ret = errno == ENOENT ? -ESRCH : -errno;
		goto out;
	}
	/* opened while the pidfd's process lived: it is that process's */
	if (!pidfd_alive(id->pidfd))
		ret = -ESRCH;
out:
	if (passed_fd >= 0)
		close(passed_fd);
	return ret;
}

bool ident_alive(const struct cepd_ident *id)
{
	return id->procfd >= 0 && pidfd_alive(id->pidfd);
}

/* The client's /proc/PID/status into @buf (NUL-terminated): 0 or -ESRCH. */
static int read_status(const struct cepd_ident *id, char *buf, size_t cap)
{
	ssize_t n, got = 0;
	int fd;

	if (id->procfd < 0)
		return -ESRCH;
	fd = openat(id->procfd, "status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ESRCH; /* the process is gone (its pid may be another's now) */
	while (got < (ssize_t)cap - 1 && (n = read(fd, buf + got, cap - 1 - (size_t)got)) > 0)
		got += n;
	close(fd);
	buf[got] = 0;
	return got > 0 ? 0 : -ESRCH;
}

/* The value of status field @key ("CapEff:"), or NULL. */
static const char *field(const char *status, const char *key)
{
	size_t kl = strlen(key);

	for (const char *l = status; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (!strncmp(l, key, kl))
			return l + kl;
	return NULL;
}

/* Whether the process lives in cepd's own user namespace. */
static bool same_userns(const struct cepd_ident *id)
{
	struct stat mine, theirs;

	if (stat("/proc/self/ns/user", &mine) ||
	    fstatat(id->procfd, "ns/user", &theirs, 0))
		return false;
	return mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
}

int ident_caps(const struct cepd_ident *id, uint64_t *eff)
{
	char st[4096];
	const char *v;
	int ret = read_status(id, st, sizeof(st));

	if (ret)
		return ret;
	v = field(st, "CapEff:");
	*eff = v ? strtoull(v, NULL, 16) : 0;
	if (!same_userns(id))
		*eff = 0;
	/* still the same process: what was read was its */
	return ident_alive(id) ? 0 : -ESRCH;
}

bool ident_capable(const struct cepd_ident *id, int cap)
{
	uint64_t eff;

	return ident_caps(id, &eff) == 0 && (eff >> cap) & 1;
}

int ident_groups(const struct cepd_ident *id, gid_t *gids, unsigned cap, unsigned *n)
{
	char st[4096];
	const char *v;
	char *end;
	int ret = read_status(id, st, sizeof(st));

	*n = 0;
	if (ret)
		return ret;
	v = field(st, "Gid:"); /* real, effective, saved, fs */
	if (v) {
		unsigned long g;

		(void)strtoul(v, &end, 10);
		g = strtoul(end, NULL, 10);
		if (*n < cap)
			gids[*n] = (gid_t)g;
		(*n)++;
	}
	v = field(st, "Groups:");
	while (v && *v && *v != '\n') {
		unsigned long g = strtoul(v, &end, 10);

		if (end == v)
			break;
		if (*n < cap)
			gids[*n] = (gid_t)g;
		(*n)++;
		v = end;
		while (*v == ' ' || *v == '\t')
			v++;
	}
	if (*n > cap)
		*n = cap;
	return ident_alive(id) ? 0 : -ESRCH;
}

void ident_fini(struct cepd_ident *id)
{
	if (id->pidfd >= 0)
		close(id->pidfd);
	if (id->procfd >= 0)
		close(id->procfd);
	id->pidfd = id->procfd = -1;
}
