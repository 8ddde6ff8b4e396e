/* SPDX-License-Identifier: MIT */
/*
 * Tests of cepd (service.c, stress.c, attack.c, examples): start a `cepd`
 * and wait until its socket takes a connection (the service is ready
 * then: it binds and listens before it serves); the connect parameters of
 * an RC connection between two ports of `cepd --fabric`. Public API only
 * (cepd_raw.h has the raw protocol). No shared state.
 */
#ifndef CEPD_TEST_H
#define CEPD_TEST_H

#include <string.h>

#include <cep/cm.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Fork and exec @path with @argv (argv[0] "cepd", NULL-terminated), then
 * poll @sock every 10 ms, at most @tries times: cepd's pid, or exit(1)
 * with "@who: cepd did not come up". cepd gets SIGTERM when the calling
 * thread ends (PR_SET_PDEATHSIG), so a test that crashes, fails before its
 * teardown or is killed at meson's timeout leaves no cepd behind. Call it
 * from a thread that outlives the cepd (the main thread). */
static inline pid_t cepd_spawn(const char *path, char *const argv[], const char *sock,
			       int tries, const char *who)
{
	pid_t parent = getpid(), pid = fork();

	if (pid == 0) {
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
			_exit(127); /* the test is already gone */
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

/* RC from fabric port @from to port @to (LID index + 1, GUID
 * 0002:c903:00a0:0000 + index, as cepd --fabric names them), service @sid,
 * QP @qpn, CM response timeouts @cm_timeout both ways, 3 retries. */
static inline void cepd_fabric_conn(struct cep_cm_conn_param *p, unsigned from, unsigned to,
				    uint64_t sid, uint32_t qpn, uint8_t cm_timeout)
{
	uint64_t g0 = 0x0002c90300a00000ull + from, g1 = 0x0002c90300a00000ull + to;

	memset(p, 0, sizeof(*p));
	p->size = sizeof(*p);
	p->service_id = sid;
	p->primary.local_lid = (uint16_t)(from + 1);
	p->primary.remote_lid = (uint16_t)(to + 1);
	p->primary.local_gid[0] = p->primary.remote_gid[0] = 0xfe;
	p->primary.local_gid[1] = p->primary.remote_gid[1] = 0x80;
	for (int i = 0; i < 8; i++) {
		p->primary.local_gid[8 + i] = (uint8_t)(g0 >> (56 - 8 * i));
		p->primary.remote_gid[8 + i] = (uint8_t)(g1 >> (56 - 8 * i));
	}
	p->primary.subnet_local = 1;
	p->primary.local_ack_timeout = 14;
	p->qpn = qpn;
	p->starting_psn = 1;
	p->pkey = 0xffff;
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->remote_cm_response_timeout = cm_timeout;
	p->local_cm_response_timeout = cm_timeout;
	p->max_cm_retries = 3;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->transport_service_type = CEP_TS_RC;
}

#endif
