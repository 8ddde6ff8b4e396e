/* SPDX-License-Identifier: MIT */
/*
 * Conformance suite: the main loop of the application under test (see
 * target.h). It serves one control connection from the peer; each command
 * gets exactly one answer line ("ok ..." or "err ..."), events are "ev H
 * NAME ..." lines sent as they happen. Exits 0 on "quit", 1 on a lost
 * control connection or a failed set-up.
 *
 *   conform-target-{kernel,libcep} DEV SELF_IP PEER_IP READYFILE
 */
#include "target.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conn *conn_new(struct app *a)
{
	for (int i = 0; i < MAX_CONN; i++) {
		struct conn *c = &a->conns[i];

		if (!c->used) {
			memset(c, 0, sizeof(*c));
			c->used = 1;
			c->h = ++a->next_h;
			return c;
		}
	}
	return NULL;
}

struct conn *conn_by_id(struct app *a, void *id)
{
	for (int i = 0; i < MAX_CONN; i++)
		if (a->conns[i].used && a->conns[i].id == id)
			return &a->conns[i];
	return NULL;
}

static struct conn *conn_by_h(struct app *a, int h)
{
	for (int i = 0; i < MAX_CONN; i++)
		if (a->conns[i].used && a->conns[i].h == h)
			return &a->conns[i];
	return NULL;
}

void conn_free(struct conn *c)
{
	free(c->priv);
	memset(c, 0, sizeof(*c));
}

static uint8_t *conn_buf(struct app *a, struct conn *c)
{
	return a->buf + (size_t)(c - a->conns) * MSG_BYTES;
}

int app_post_recv(struct app *a, struct conn *c)
{
	struct ibv_sge sge = { (uintptr_t)conn_buf(a, c), MSG_BYTES, a->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)c->h, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return ibv_post_recv(c->qp, &wr, &bad) ? -EIO : 0;
}

struct ibv_qp *app_qp_create(struct app *a, struct conn *c)
{
	struct ibv_qp_init_attr qa;

	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = a->cq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	return ibv_create_qp(a->pd, &qa);
}

void app_ev(struct app *a, struct conn *c, const char *name, const char *fmt, ...)
{
	char extra[512] = "";

	if (fmt) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(extra, sizeof(extra), fmt, ap);
		va_end(ap);
	}
	printf("%.3f ev %d %s %s\n", ctl_now_ms() / 1e3, c ? c->h : 0, name, extra);
	ctl_send(&a->ctl, "ev %d %s%s%s", c ? c->h : 0, name, extra[0] ? " " : "", extra);
}

void app_established(struct app *a, struct conn *c)
{
	if (c->established)
		return;
	c->established = 1;
	app_ev(a, c, "established", NULL);
}

/* librdmacm reports one DISCONNECTED per connection (rdma_cm moves its id
 * from CONNECT to DISCONNECT once) and TIMEWAIT_EXIT only after it. */
void app_disconnected(struct app *a, struct conn *c)
{
	if (c->disconnected)
		return;
	c->disconnected = 1;
	app_ev(a, c, "disconnected", NULL);
}

void app_timewait_exit(struct app *a, struct conn *c)
{
	if (c->disconnected)
		app_ev(a, c, "timewait_exit", NULL);
}

/* Report the completions waiting on the CQ. */
static void drain_cq(struct app *a)
{
	struct ibv_wc wc[8];
	int n;

	while ((n = ibv_poll_cq(a->cq, 8, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			struct conn *c = conn_by_h(a, (int)wc[i].wr_id);

			if (wc[i].status == IBV_WC_WR_FLUSH_ERR || !c)
				continue;
			if (wc[i].opcode == IBV_WC_RECV) {
				c->recv_seen = 1;
				app_ev(a, c, "recv", "status=%s bytes=%u",
				       wc[i].status == IBV_WC_SUCCESS ? "ok" : "error",
				       wc[i].byte_len);
			}
		}
	}
}

/* The completion channel is readable: re-arm it, then drain the CQ. */
static void poll_cq(struct app *a)
{
	struct ibv_cq *cq;
	void *cctx;

	if (ibv_get_cq_event(a->cc, &cq, &cctx) == 0) {
		ibv_ack_cq_events(cq, 1);
		ibv_req_notify_cq(cq, 0);
	}
	drain_cq(a);
}

static int verbs_setup(struct app *a)
{
	a->pd = ibv_alloc_pd(a->ctx);
	a->cc = ibv_create_comp_channel(a->ctx);
	a->cq = a->cc ? ibv_create_cq(a->ctx, 4 * MAX_CONN, NULL, a->cc, 0) : NULL;
	a->mr = a->pd ? ibv_reg_mr(a->pd, a->buf, sizeof(a->buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!a->pd || !a->cq || !a->mr || ibv_req_notify_cq(a->cq, 0)) {
		printf("verbs set-up failed\n");
		return -1;
	}
	{
		struct ibv_device_attr da;

		if (ibv_query_device(a->ctx, &da) == 0)
			a->guid = be64toh(da.node_guid);
	}
	return 0;
}

/* One command line -> one answer line. Returns 1 on "quit". */
static int command(struct app *a, char *line)
{
	char *save = NULL, *cmd = strtok_r(line, " ", &save);
	char *arg = strtok_r(NULL, " ", &save), *arg2 = strtok_r(NULL, " ", &save);
	struct conn *c = NULL;
	int ret;

	if (!cmd)
		return 0;
	printf("%.3f cmd %s %s %s\n", ctl_now_ms() / 1e3, cmd, arg ? arg : "", arg2 ? arg2 : "");
	if (!strcmp(cmd, "quit")) {
		ctl_send(&a->ctl, "ok");
		return 1;
	}
	if (!strcmp(cmd, "sync")) {
		/* The peer's barrier: every event the CM has queued is
		 * reported before this answer. */
		a->be->events(a);
		drain_cq(a);
		ctl_send(&a->ctl, "ok");
		return 0;
	}
	if (!strcmp(cmd, "hello")) {
		ctl_send(&a->ctl, "ok cm=%s guid=%016llx", a->be->name, (unsigned long long)a->guid);
		return 0;
	}
	if (!strcmp(cmd, "listen") && arg) {
		ret = a->be->listen(a, (uint16_t)atoi(arg));
		ctl_send(&a->ctl, ret ? "err rc=%d" : "ok rc=%d", ret);
		return 0;
	}
	if (!strcmp(cmd, "connect") && arg) {
		struct conn *reuse = NULL;

		if (arg2 && !strncmp(arg2, "reuse=", 6))
			reuse = conn_by_h(a, atoi(arg2 + 6));
		if (reuse && reuse->id && !strcmp(a->be->name, "libcep")) {
			c = reuse; /* libcep connects the same id again (issue 10 item 1) */
		} else {
			c = conn_new(a);
		}
		if (!c) {
			ctl_send(&a->ctl, "err no handle");
			return 0;
		}
		ret = a->be->connect(a, c, (uint16_t)atoi(arg), reuse);
		ctl_send(&a->ctl, "%s h=%d qpn=%u rc=%d", ret ? "err" : "ok", c->h,
			 c->qp ? c->qp->qp_num : 0, ret);
		return 0;
	}
	if (!strcmp(cmd, "destroyall")) {
		for (int i = 0; i < MAX_CONN; i++)
			if (a->conns[i].used)
				a->be->destroy(a, &a->conns[i]);
		ctl_send(&a->ctl, "ok");
		return 0;
	}
	if (arg)
		c = conn_by_h(a, atoi(arg));
	if (!c) {
		ctl_send(&a->ctl, "err no such handle");
		return 0;
	}
	if (!strcmp(cmd, "accept")) {
		ret = a->be->accept(a, c);
		if (ret) {
			ctl_send(&a->ctl, "err rc=%d", ret);
		} else {
			struct ibv_qp_attr at;
			struct ibv_qp_init_attr ia;
			unsigned psn = 0;

			/* The REP's starting PSN is the one this QP expects to
			 * receive (ib_send_cm_rep: rq_psn). */
			if (c->qp && ibv_query_qp(c->qp, &at, IBV_QP_RQ_PSN, &ia) == 0)
				psn = at.rq_psn;
			ctl_send(&a->ctl, "ok qpn=%u psn=%u", c->qp ? c->qp->qp_num : 0, psn);
		}
	} else if (!strcmp(cmd, "reject")) {
		ret = a->be->reject(a, c, arg2 ? (unsigned)atoi(arg2) : 28);
		ctl_send(&a->ctl, "ok rc=%d", ret);
	} else if (!strcmp(cmd, "disconnect")) {
		ret = a->be->disconnect(a, c);
		ctl_send(&a->ctl, "ok rc=%d", ret);
	} else if (!strcmp(cmd, "destroy")) {
		ret = a->be->destroy(a, c);
		ctl_send(&a->ctl, "ok rc=%d", ret);
	} else if (!strcmp(cmd, "destroyqp")) {
		ret = a->be->destroy_qp(a, c);
		ctl_send(&a->ctl, "ok rc=%d", ret);
	} else if (!strcmp(cmd, "notify")) {
		ret = a->be->notify(a, c);
		ctl_send(&a->ctl, "ok rc=%d", ret);
	} else {
		ctl_send(&a->ctl, "err unknown command %s", cmd);
	}
	return 0;
}

int target_main(const struct backend *be, int argc, char **argv)
{
	static struct app a;
	struct in_addr ip;
	char line[CTL_LINE];
	int lfd, rc = 1;
	FILE *f;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 5) {
		fprintf(stderr, "usage: %s DEV SELF_IP PEER_IP READYFILE\n", argv[0]);
		return 2;
	}
	a.be = be;
	a.ctl.fd = -1;
	if (inet_pton(AF_INET, argv[2], &ip) != 1)
		return 2;
	a.self_ip = ip.s_addr;
	if (inet_pton(AF_INET, argv[3], &ip) != 1)
		return 2;
	a.peer_ip = ip.s_addr;
	a.self_gid[10] = a.self_gid[11] = 0xff;
	memcpy(a.self_gid + 12, &a.self_ip, 4);
	a.peer_gid[10] = a.peer_gid[11] = 0xff;
	memcpy(a.peer_gid + 12, &a.peer_ip, 4);
	if (be->init(&a, argv[1]) || verbs_setup(&a)) {
		printf("%s: set-up failed\n", be->name);
		return 1;
	}
	lfd = ctl_listen(CTL_PORT);
	if (lfd < 0) {
		printf("control listen: %s\n", strerror(-lfd));
		return 1;
	}
	f = fopen(argv[4], "w");
	if (!f || fclose(f)) {
		printf("cannot create %s\n", argv[4]);
		return 1;
	}
	if (ctl_accept(&a.ctl, lfd, 300000)) {
		printf("no peer on the control port\n");
		return 1;
	}
	printf("%s: peer connected\n", be->name);
	for (;;) {
		struct pollfd p[3] = {
			{ .fd = a.ctl.fd, .events = POLLIN },
			{ .fd = be->event_fd(&a), .events = POLLIN },
			{ .fd = a.cc->fd, .events = POLLIN },
		};
		int r;

		/* Lines already buffered first: poll() cannot see them. */
		while ((r = ctl_read(&a.ctl, line, sizeof(line), 0)) == 1)
			if (command(&a, line)) {
				rc = 0;
				goto out;
			}
		if (r < 0) {
			printf("control connection lost\n");
			goto out;
		}
		if (poll(p, 3, 100) < 0 && errno != EINTR)
			goto out;
		be->events(&a);
		if (p[2].revents & POLLIN)
			poll_cq(&a);
	}
out:
	for (int i = 0; i < MAX_CONN; i++)
		if (a.conns[i].used)
			be->destroy(&a, &a.conns[i]);
	/* Every QP went with its connection: the rest of verbs, then the CM. */
	ibv_dereg_mr(a.mr);
	ibv_destroy_cq(a.cq);
	ibv_destroy_comp_channel(a.cc);
	ibv_dealloc_pd(a.pd);
	be->fini(&a);
	ctl_close(&a.ctl);
	printf("%s: exit %d\n", be->name, rc);
	return rc;
}
