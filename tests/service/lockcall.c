/* SPDX-License-Identifier: MIT */
/*
 * A call on a cepd context made while holding a lock the context's
 * callback is waiting for must return, as on a local context (whose calls
 * never wait for a callback). The librdmacm drop-in does exactly this:
 * rdma_destroy_qp holds the id's mutex around cep_cm_qp_destroy, and the
 * id's callback takes that mutex; cmtime through cepd hung there (the
 * reply could only be read by the reader thread, blocked in the callback).
 *
 * One process, `cepd --fabric 2`, a context per port: B listens and
 * accepts, A connects (handler: every event under the mutex M). With A
 * established, the test thread takes M, B disconnects (A's DREQ_RECEIVED
 * callback now waits for M), and the test thread, still holding M, calls
 * cep_cm_get_stats, cep_cm_qp_destroy and cep_cm_qp_register on A. Each
 * must return within 10 s (SIGALRM otherwise: the test fails); then M is
 * released and the callback runs.
 * Usage: test-service-lockcall CEPD-PATH
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cep/cm.h>

#include "../common/check.h"

static char sock_path[108];
static pthread_mutex_t M = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int a_established, a_dreq, b_established;
static struct cep_cm_id *_Atomic b_conn;

static int a_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	pthread_mutex_lock(&M);
	if (ev->type == CEP_CM_EV_ESTABLISHED)
		atomic_store(&a_established, 1);
	if (ev->type == CEP_CM_EV_DREQ_RECEIVED)
		atomic_store(&a_dreq, 1);
	pthread_mutex_unlock(&M);
	return 0;
}

static int b_handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		struct cep_cm_accept_param p;

		memset(&p, 0, sizeof(p));
		p.size = sizeof(p);
		p.qpn = 0x200;
		p.starting_psn = 1;
		p.responder_resources = 1;
		p.initiator_depth = 1;
		p.rnr_retry_count = 7;
		atomic_store(&b_conn, id);
		CHECK_EQ(cep_cm_accept(id, &p), 0);
	}
	if (ev->type == CEP_CM_EV_RTU_RECEIVED || ev->type == CEP_CM_EV_ESTABLISHED)
		atomic_store(&b_established, 1);
	return 0;
}

static struct cep_cm *attach(unsigned port)
{
	struct cep_cm_attach_attr a = { .size = sizeof(a), .socket = sock_path, .port_num = port };
	struct cep_cm *cm = NULL;

	CHECK_EQ(cep_cm_attach(&a, &cm), 0);
	return cm;
}

static void wait_flag(_Atomic int *f)
{
	for (int i = 0; i < 2500 && !atomic_load(f); i++)
		usleep(2000);
	CHECK(atomic_load(f));
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/cepd-lockcall.XXXXXX";
	struct cep_cm *a, *b;
	struct cep_cm_id *ia, *lb;
	struct cep_cm_id_attr attr = { .size = sizeof(attr) };
	struct cep_cm_conn_param p;
	struct cep_cm_stats st = { .size = sizeof(st) };
	pid_t cepd;
	int status;

	if (argc != 2) {
		fprintf(stderr, "usage: test-service-lockcall CEPD-PATH\n");
		return 2;
	}
	CHECK(mkdtemp(dir) != NULL);
	snprintf(sock_path, sizeof(sock_path), "%s/cepd.sock", dir);
	cepd = fork();
	if (cepd == 0) {
		execl(argv[1], "cepd", "--fabric", "2", "--workers", "2", "--socket", sock_path,
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500 && access(sock_path, F_OK); i++)
		usleep(10000);
	usleep(50000);
	a = attach(0);
	b = attach(1);
	CHECK_EQ(cep_cm_qp_register(a, 0x100), 0);
	CHECK_EQ(cep_cm_qp_register(b, 0x200), 0);
	attr.handler = b_handler;
	CHECK_EQ(cep_cm_create_id(b, &attr, &lb), 0);
	CHECK_EQ(cep_cm_listen(lb, 0x4c4f434bull, ~0ull), 0);
	attr.handler = a_handler;
	CHECK_EQ(cep_cm_create_id(a, &attr, &ia), 0);
	memset(&p, 0, sizeof(p));
	p.size = sizeof(p);
	p.service_id = 0x4c4f434bull;
	p.primary.local_lid = 1;
	p.primary.remote_lid = 2;
	p.primary.local_gid[0] = p.primary.remote_gid[0] = 0xfe;
	p.primary.local_gid[1] = p.primary.remote_gid[1] = 0x80;
	for (int i = 0; i < 8; i++) {
		p.primary.local_gid[8 + i] = (uint8_t)(0x0002c90300a00000ull >> (56 - 8 * i));
		p.primary.remote_gid[8 + i] = (uint8_t)(0x0002c90300a00001ull >> (56 - 8 * i));
	}
	p.primary.subnet_local = 1;
	p.primary.local_ack_timeout = 14;
	p.qpn = 0x100;
	p.starting_psn = 1;
	p.pkey = 0xffff;
	p.responder_resources = 1;
	p.initiator_depth = 1;
	p.remote_cm_response_timeout = 16;
	p.local_cm_response_timeout = 16;
	p.max_cm_retries = 3;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	p.transport_service_type = CEP_TS_RC;
	CHECK_EQ(cep_cm_connect(ia, &p), 0);
	wait_flag(&a_established);
	wait_flag(&b_established);

	/* A's callback will wait for M, held here across A's calls */
	pthread_mutex_lock(&M);
	CHECK_EQ(cep_cm_disconnect(atomic_load(&b_conn), NULL, 0), 0);
	usleep(300000); /* the DREQ reaches A: its reader waits for M */
	alarm(10);      /* a call that never returns fails the test */
	CHECK_EQ(cep_cm_get_stats(a, &st), 0);
	CHECK_EQ(cep_cm_qp_destroy(a, 0x100), 0);
	{
		int ret = cep_cm_qp_register(a, 0x100); /* -EEXIST while its teardown runs */

		CHECK(ret == 0 || ret == -EEXIST);
	}
	alarm(0);
	CHECK(!atomic_load(&a_dreq)); /* the callback was still waiting */
	pthread_mutex_unlock(&M);
	wait_flag(&a_dreq);
	printf("lockcall: three calls returned while the callback waited for their caller's lock\n");
	CHECK_EQ(cep_cm_destroy(a), 0);
	CHECK_EQ(cep_cm_destroy(b), 0);
	kill(cepd, SIGTERM);
	CHECK_EQ(waitpid(cepd, &status, 0), cepd);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	rmdir(dir);
	return check_done("lockcall");
}
