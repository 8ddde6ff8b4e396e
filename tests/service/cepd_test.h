/* SPDX-License-Identifier: MIT */
/*
 * Tests of cepd: start a `cepd` and wait until its socket takes a
 * connection (the service is ready then: it binds and listens before it
 * serves). Used by service.c and stress.c; single-threaded callers.
 */
#ifndef CEPD_SPAWN_H
#define CEPD_SPAWN_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Fork and exec @path with @argv (argv[0] "cepd", NULL-terminated), then
 * poll @sock every 10 ms, at most @tries times: cepd's pid, or exit(1)
 * with "@who: cepd did not come up". */
static inline pid_t cepd_spawn(const char *path, char *const argv[], const char *sock,
			       int tries, const char *who)
{
	pid_t pid = fork();

	if (pid == 0) {
		execv(path, argv);
		_exit(127);
	}
	for (int i = 0; i < tries; i++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		struct timespec ten_ms = { 0, 10 * 1000 * 1000 };

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(fd);
			return pid;
		}
		if (fd >= 0)
			close(fd);
		nanosleep(&ten_ms, NULL);
	}
	fprintf(stderr, "%s: cepd did not come up\n", who);
	exit(1);
}

#endif
