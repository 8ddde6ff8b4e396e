/* SPDX-License-Identifier: MIT */
/*
 * The test of the quick start through cepd (examples/meson.build, suite
 * 'examples'): a `cepd --fabric 2 --check` of its own on a private
 * socket, `hello_cepd server` until it says it listens, then
 * `hello_cepd client`. Passes only if both print that they connected and
 * finished and exit 0, and cepd, stopped with SIGTERM, exits 0 (--check:
 * no id, CEP or registered QP left behind). Nothing waits for ever.
 * Usage: hello-cepd-test CEPD HELLO_CEPD
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cepd_test.h"

/* A child whose standard output (and error) the test reads. */
struct proc {
	const char *name;
	pid_t pid;
	int out;            /* read end; -1 at EOF */
	char text[8192];    /* everything it printed */
	size_t len;
};

static struct proc server = { .name = "server", .pid = -1, .out = -1 };
static struct proc client = { .name = "client", .pid = -1, .out = -1 };
static pid_t cepd = -1;
static char dir[] = "/tmp/hello-cepd.XXXXXX";
static char sock[sizeof(dir) + 16];

/* At exit, whichever way (cepd_spawn exits by itself if cepd does not
 * come up): no child or socket left behind. */
static void cleanup(void)
{
	pid_t pids[] = { client.pid, server.pid, cepd };

	for (unsigned i = 0; i < 3; i++)
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
		}
	unlink(sock);
	rmdir(dir);
}

static _Noreturn void fail(const char *why)
{
	fprintf(stderr, "FAIL: %s\n", why);
	exit(1);
}

static void start(struct proc *p, const char *path)
{
	int fd[2];

	if (pipe(fd))
		fail("pipe");
	p->pid = fork();
	if (p->pid < 0)
		fail("fork");
	if (p->pid == 0) {
		dup2(fd[1], 1);
		dup2(fd[1], 2);
		close(fd[0]);
		close(fd[1]);
		execl(path, "hello_cepd", p->name, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	p->out = fd[0];
}

/* Read @p's output (copied to ours) until it contains @needle, or, with
 * @needle NULL, until EOF: 1, or 0 at EOF without @needle or after
 * @seconds. */
static int read_until(struct proc *p, const char *needle, int seconds)
{
	time_t end = time(NULL) + seconds;

	while (!needle || !strstr(p->text, needle)) {
		struct pollfd pf = { .fd = p->out, .events = POLLIN };
		ssize_t n;

		if (p->out < 0)
			return !needle;
		if (time(NULL) >= end || poll(&pf, 1, 1000) < 0)
			return 0;
		if (!(pf.revents & (POLLIN | POLLHUP)))
			continue;
		n = read(p->out, p->text + p->len, sizeof(p->text) - 1 - p->len);
		if (n <= 0) {
			close(p->out);
			p->out = -1;
			continue;
		}
		fwrite(p->text + p->len, 1, (size_t)n, stdout);
		p->len += (size_t)n;
		p->text[p->len] = 0;
	}
	return 1;
}

/* @pid's exit status (128 + signal if killed), or -1 if it did not end
 * within @seconds (then it is killed). */
static int reap(pid_t *pid, int seconds)
{
	int st;

	for (int i = 0; i < seconds * 100; i++) {
		pid_t r = waitpid(*pid, &st, WNOHANG);

		if (r == *pid) {
			*pid = -1;
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		if (r < 0 && errno != EINTR)
			return -1;
		usleep(10000);
	}
	return -1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: hello-cepd-test CEPD HELLO_CEPD\n");
		return 2;
	}
	if (!mkdtemp(dir))
		fail("mkdtemp");
	atexit(cleanup);
	snprintf(sock, sizeof(sock), "%s/cepd.sock", dir);
	fflush(stdout);

	/* The service, as an operator would start it, on this test's socket;
	 * the examples find it through CEP_SERVICE. */
	char *const cepd_argv[] = { "cepd", "--fabric", "2", "--socket", sock, "--check", NULL };

	cepd = cepd_spawn(argv[1], cepd_argv, sock, 1000, "hello-cepd-test");
	if (setenv("CEP_SERVICE", sock, 1))
		fail("setenv");

	start(&server, argv[2]);
	if (!read_until(&server, "server: listening", 30))
		fail("the server did not listen");
	start(&client, argv[2]);
	if (!read_until(&client, NULL, 60) || !read_until(&server, NULL, 60))
		fail("the examples did not finish within a minute");
	if (reap(&client.pid, 10) != 0 || reap(&server.pid, 10) != 0)
		fail("an example failed (its output above)");
	if (!strstr(server.text, "server: connected") || !strstr(client.text, "client: connected") ||
	    !strstr(server.text, "server: done") || !strstr(client.text, "client: done"))
		fail("the examples exited 0 without saying they connected and finished");

	/* cepd --check: once the clients are gone, its tables must be empty. */
	kill(cepd, SIGTERM);
	if (reap(&cepd, 60) != 0)
		fail("cepd --check found something left behind, or did not stop");
	printf("hello_cepd: connected and torn down through cepd; cepd's tables empty\n");
	return 0;
}
