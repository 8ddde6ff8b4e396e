/* SPDX-License-Identifier: MIT */
/*
 * Conformance suite: the application under test (guest b). One program per
 * CM - the kernel's (librdmacm over rdma_cm/ib_cm) and libcep's (cep_cm over
 * umad) - sharing this main loop: it obeys the peer's commands on the
 * control channel and reports the application's events, normalised to
 * librdmacm's event names so both transcripts speak one language.
 * Single-threaded: commands, CM events and completions run on one thread.
 */
#ifndef CONFORM_TARGET_H
#define CONFORM_TARGET_H

#include <stdint.h>

#include <infiniband/verbs.h>

#include "ctl.h"

#define MAX_CONN 64
#define MSG_BYTES 64

struct conn {
	int used;
	int h;                /* handle the peer names it by */
	int passive;
	struct ibv_qp *qp;
	int qp_shared;        /* the QP belongs to another handle (reconnect) */
	void *id;             /* rdma_cm_id / cep_cm_id */
	int established;      /* ESTABLISHED reported */
	int disconnected;     /* DISCONNECTED reported */
	int recv_seen;
	void *priv;           /* backend's per-connection state */
};

struct app;

/* A CM backend. Every call runs on the app's thread; 0 or -errno unless
 * said otherwise. */
struct backend {
	const char *name;
	int (*init)(struct app *a, const char *dev);
	int (*event_fd)(struct app *a);
	void (*events)(struct app *a);              /* drain pending CM events */
	int (*listen)(struct app *a, uint16_t port);
	int (*accept)(struct app *a, struct conn *c);
	int (*reject)(struct app *a, struct conn *c, unsigned reason);
	int (*disconnect)(struct app *a, struct conn *c);
	int (*destroy)(struct app *a, struct conn *c); /* id and its QP */
	int (*destroy_qp)(struct app *a, struct conn *c);
	/* New connection on @c to the peer's @port; @reuse: a finished
	 * connection whose QP (libcep: whose id too) is reused, or NULL. */
	int (*connect)(struct app *a, struct conn *c, uint16_t port, struct conn *reuse);
	int (*notify)(struct app *a, struct conn *c); /* communication established */
	/* Last: every QP, the CQ and the PD are gone; free what init made. */
	void (*fini)(struct app *a);
};

struct app {
	const struct backend *be;
	struct ctl ctl;
	struct ibv_context *ctx;   /* set by the backend's init */
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t buf[MAX_CONN * MSG_BYTES];
	struct conn conns[MAX_CONN];
	int next_h;
	uint32_t self_ip, peer_ip; /* network order */
	uint8_t self_gid[16], peer_gid[16];
	uint64_t guid;             /* node GUID, host order */
	void *priv;                /* backend's */
};

/* The application's private data in REP/REJ/RTU (first bytes). */
#define APP_PDATA "conform-app"

struct conn *conn_new(struct app *a);
struct conn *conn_by_id(struct app *a, void *id);
void conn_free(struct conn *c);
/* An RC QP on the app's CQ with one receive posted. NULL on failure. */
struct ibv_qp *app_qp_create(struct app *a, struct conn *c);
int app_post_recv(struct app *a, struct conn *c);

/* Event reports (normalised, see docs/protocol.md "Conformance"). */
void app_ev(struct app *a, struct conn *c, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void app_established(struct app *a, struct conn *c);
void app_disconnected(struct app *a, struct conn *c);
void app_timewait_exit(struct app *a, struct conn *c);

int target_main(const struct backend *be, int argc, char **argv);

#endif /* CONFORM_TARGET_H */
