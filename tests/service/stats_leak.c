/* SPDX-License-Identifier: MIT */
/*
 * `cepd --stats` on its error paths (issue 26), in the ASan build with
 * LeakSanitizer on: with no socket at the path, a path too long for a
 * socket, a socket that refuses (bound, not listening) and a service that
 * closes without answering, cepd says why on standard error and exits 1,
 * and leaks nothing - a leak report makes the exit status LeakSanitizer's
 * instead, and is shown.
 * Usage: test-stats-leak CEPD CASE (nonexistent | too-long | refused | no-answer)
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/cepd-stats.XXXXXX";
static char path[300];
static pid_t child = -1;

static void cleanup(void)
{
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	unlink(path);
	rmdir(dir);
}

static _Noreturn void fail(const char *why)
{
	fprintf(stderr, "FAIL: %s\n", why);
	exit(1);
}

/* A SOCK_SEQPACKET socket bound at @path (listening if @listening). */
static int bound(int listening)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    (listening && listen(fd, 4)))
		fail("socket");
	return fd;
}

int main(int argc, char **argv)
{
	const char *what = argc == 3 ? argv[2] : "";
	char opts[512], err[16384];
	int lfd = -1, pfd[2], st;
	size_t len = 0;

	if (!mkdtemp(dir))
		fail("mkdtemp");
	atexit(cleanup);
	snprintf(path, sizeof(path), "%s/cepd.sock", dir);
	if (!strcmp(what, "nonexistent")) {
		snprintf(path, sizeof(path), "%s/none/cepd.sock", dir);
	} else if (!strcmp(what, "too-long")) {
		memset(path, 'x', 200); /* sun_path holds 108 */
		path[200] = 0;
	} else if (!strcmp(what, "refused")) {
		lfd = bound(0);
	} else if (!strcmp(what, "no-answer")) {
		lfd = bound(1);
	} else {
		fprintf(stderr, "usage: test-stats-leak CEPD nonexistent|too-long|refused|no-answer\n");
		return 2;
	}

	/* Leak checking on whatever the environment says (later options win). */
	snprintf(opts, sizeof(opts), "%s:detect_leaks=1",
		 getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "");
	if (setenv("ASAN_OPTIONS", opts, 1) || pipe(pfd))
		fail("setup");
	child = fork();
	if (child == 0) {
		dup2(pfd[1], 2);
		close(pfd[0]);
		close(pfd[1]);
		execl(argv[1], "cepd", "--stats", "--socket", path, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	if (lfd >= 0 && !strcmp(what, "no-answer")) {
		/* Take the connection and close it unanswered. */
		struct pollfd pf = { .fd = lfd, .events = POLLIN };
		int cfd;

		if (poll(&pf, 1, 30000) != 1 || (cfd = accept(lfd, NULL, NULL)) < 0)
			fail("cepd --stats did not connect");
		close(cfd);
	}
	for (;;) {
		ssize_t n = read(pfd[0], err + len, sizeof(err) - 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	err[len] = 0;
	if (waitpid(child, &st, 0) != child)
		fail("waitpid");
	child = -1;
	fputs(err, stderr);
	if (strstr(err, "LeakSanitizer") || strstr(err, "AddressSanitizer"))
		fail("cepd --stats leaked (report above)");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 1)
		fail("cepd --stats did not exit with status 1");
	if (!strstr(err, "cepd: --stats"))
		fail("cepd --stats did not say why it failed");
	printf("cepd --stats, %s: exit status 1, its reason given, nothing leaked\n", what);
	return 0;
}
