/* SPDX-License-Identifier: MIT */
/*
 * cepd's private header: the objects every part of the service shares
 * (the service, its ports, a client session, a client's id) and the calls
 * between its files. cepd is built on libcep's public API only.
 *
 * Files, one concern each:
 *   main.c     options, ports, the listening socket, signals, shutdown
 *   client.c   a client's session: accept, HELLO, its thread, its handle
 *              table and sids, its end (what a dead client leaves is
 *              destroyed)
 *   request.c  the request table: one handler per operation
 *   access.c   every check a request passes (who asks, what it names,
 *              what it may use): read it top to bottom to know what a
 *              client may do
 *   identity.c who a client is (pidfd, credentials, capabilities)
 *   acct.c     per-uid accounts and the limits
 *   config.c   the configuration file: grants, limits
 *   qps.c      each port's registry of QPNs and whose they are
 *   mcast.c    each port's multicast memberships at the SA, counted for
 *              the node's clients
 *   sa.c       each port's SA client; the clients' path queries
 *   addr.c     the source GIDs and P_Keys a client may use
 *   events.c   the engine's callback and the event queues to clients
 *   stats.c    --stats, both ends
 * Not cepd's, though in this folder: remote.c, remote_verbs.c and
 * remote.h, the client that speaks to it, compiled into libcep.
 *
 * Locks, outermost first: svc.lk (the client lists); then client.lk (its
 * table, sids and event queue) or port.lk (the port's listener and QP
 * registries), never both; then the accounts' lock (acct.c). port.mc_lk
 * (mcast.c: held across the SA's requests) is taken under no lock; under
 * it only port.sa_lk (sa.c), a leaf. No lock is held across a cep_cm_*
 * call but port.lk around a listen and a QP's
 * register or destroy (the engine calls back no cepd code in those);
 * cep_cm_destroy_id waits for a running callback, which takes client.lk.
 */
#ifndef CEP_SERVICE_CEPD_H
#define CEP_SERVICE_CEPD_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cep/cm.h>
#include <cep/fabric.h>

#include "service/identity.h"
#include "service/acct.h"
#include "service/proto.h"

struct listener;
struct qpent;
struct mc_group;
struct mc_ent;
struct cep_sa;
struct addr_client;

#define MAX_PORTS 64
#define HANDLE_IDX_BITS 20
#define HANDLE_IDX_MASK ((1u << HANDLE_IDX_BITS) - 1)

struct client;

struct port {
	char dev[CEPD_DEVICE_MAX];     /* "" on the fabric */
	uint8_t port_num;
	unsigned index;
	struct cep_transport *tp;
	struct cep_cm *cm;
	struct cep_port_info info;
	void *addr;                    /* addr.c's state of the port */
	pthread_mutex_t lk;            /* the two registries below */
	struct listener *listeners;    /* lk: every client's listens (access.c) */
	struct qpent **qpb;            /* lk: QPNs registered, by number (qps.c) */
	uint32_t qpnb, nqp;            /* lk: buckets, entries */
	pthread_mutex_t mc_lk;         /* mcast.c: groups, nmc's changes and
					  the clients' memberships; held
					  across the SA's requests */
	struct mc_group *groups;       /* mc_lk: groups joined, the node's
					  joins of each */
	pthread_mutex_t sa_lk;         /* sa.c: opening sa */
	struct cep_sa *sa;             /* sa_lk: the port's SA client, opened
					  at its first use (port_sa); then set
					  until the port ends */
	_Atomic uint64_t nmc;          /* joins held (all clients; --stats) */
};

/* One EVENTS message being filled or waiting to go out. */
struct chunk {
	struct chunk *next;
	size_t len;
	uint32_t count;
	_Alignas(8) uint8_t buf[CEPD_MSG_MAX]; /* holds proto.h structs */
};

struct client {
	int fd;
	struct cepd_ident id;          /* who (identity.h); complete after HELLO */
	struct acct *acct;             /* its uid's account (acct.h) */
	struct addr_client *ac;        /* its source-address facts (addr.h) */
	unsigned serial;
	struct port *port;             /* NULL: a statistics reader */
	pthread_mutex_t lk;
	struct sid **slot;             /* lk: [cap], index = handle & mask */
	uint16_t *gen;                 /* lk: [cap] */
	uint32_t cap, nids, free_hint; /* lk */
	struct qpent *qps;             /* port->lk: its registered QPNs */
	uint32_t nqpn;                 /* port->lk */
	struct mc_ent *mcs;            /* port->mc_lk: its memberships (mcast.c) */
	_Atomic uint32_t nmcs;         /* written under port->mc_lk: how many */
	struct chunk *qhead, *qtail;   /* lk: events to send */
	uint64_t qbytes;               /* lk: bytes of those chunks (charged) */
	int flushing;                  /* lk: a thread is sending the queue */
	int blocked;                   /* lk: the socket was full (EAGAIN) */
	int dead;                      /* lk: no event goes out, no new id */
	_Atomic int refs;              /* thread + each sid + the pending list */
	_Atomic int pending;           /* written under svc.pend_lk: on svc.pend */
	struct client *pend_next;      /* svc.pend_lk */
	/* statistics: relaxed counters, no order with anything */
	_Atomic uint64_t requests, bad, refused, events, events_dropped;
	struct client *next;           /* svc.lk: the clients being served */
	struct client *anext, **aprev; /* svc.lk: every client not yet freed */
	struct sid *sids;              /* lk: every sid not yet freed */
};

/* One multicast membership of a client (mcast.c): how many of its joins
 * hold it. On the client's list, under its port's mc_lk. */
struct mc_ent {
	struct mc_ent *next;
	uint8_t mgid[16];
	uint8_t port_gid[16];
	uint8_t bit;
	uint32_t joins;
};

struct sid {
	struct client *c;
	struct cep_cm_id *id;
	uint32_t handle;               /* c->lk; 0: named by no handle (an orphan
					  of a dead client, or its destroy was
					  answered) */
	int gone;                      /* c->lk: destroy asked; names nothing */
	int requested;                 /* c->lk: the client's DESTROY_ID did it:
					  its DESTROYED went out then */
	int listening;                 /* port->lk: in the listener registry */
	int auto_rtu;                  /* client thread, before CONNECT of an
					  IDLE id (nothing reads it then): its
					  REP_RECEIVED is followed at once by
					  ESTABLISHED (sent together) */
	uint32_t qpn;                  /* client thread: the QP CONNECT or ACCEPT
					  named (LAP checks it again); 0 none */
	struct sid *snext, **sprev;    /* c->lk: the client's sids */
};

/* A request being handled (request.c), what the checks of access.c read. */
struct req {
	struct client *c;
	const struct cepd_req *r;
	const uint8_t *param, *pd, *aux;   /* its fixed part, private data, ARI */
	struct sid *s;                     /* the id it names (requests on an id) */
};

extern struct svc {
	struct port port[MAX_PORTS];
	unsigned nports;
	struct cep_fabric *fab;
	int lfd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int own_path;                  /* we created (and so unlink) it */
	pthread_mutex_t lk;
	struct client *clients;        /* lk: served (their thread runs) */
	struct client *all;            /* lk: not yet freed (anext) */
	unsigned nclients, serial;     /* lk */
	_Atomic uint64_t clients_total, clients_refused, bad_messages;
	_Atomic unsigned live_clients; /* client structs not yet freed */
	int check;                     /* --check: the tables at exit */
	_Atomic int stop;              /* set by the signal handler, which may run
					  on any thread (hence atomic, not volatile) */
	int sigpipe[2];
	/* Clients whose queued events wait for the main thread's look
	 * (events.c, client_pend): a held event, a full socket */
	pthread_mutex_t pend_lk;
	struct client *pend;           /* pend_lk: each holds a reference */
	int pend_closed;               /* pend_lk: shutting down: no more */
	int pend_efd;                  /* an eventfd: the list became non-empty */
	unsigned workers;
	int verbose;
} svc;

void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* client.c */
/* Serve the accepted connection @fd (or refuse it). Main thread. */
void accept_client(int fd);
void client_put(struct client *c);
int handle_add(struct client *c, struct sid *s);
void handle_del(struct client *c, uint32_t h);
struct sid *handle_get(struct client *c, uint32_t h);
void client_kill_locked(struct client *c, const char *why);
/* c->lk held, the client not dead. A new sid of @c for engine id @id
 * (NULL: set later), charged to the client's uid: NULL when over its
 * limit or out of memory. */
struct sid *sid_new(struct client *c, struct cep_cm_id *id);
/* The engine is done with @s (its DESTROYED, or its id was never made, or
 * the port's CM is destroyed): uncharge and free it, drop its client
 * reference. c->lk not held. */
void sid_free(struct sid *s);
/* At shutdown, once every port's CM is destroyed: free the sids whose
 * DESTROYED never came (ids still lingering in the engine's timewait). */
void sids_release_all(void);

/* events.c */
int sid_handler(struct cep_cm_id *id, const struct cep_cm_event *ev);
void flush_locked(struct client *c);
/* c->lk held: queue an event of type @type for handle @h with no message
 * (a DESTROYED the service makes). */
void post_simple_event(struct client *c, uint32_t type, uint32_t h, uint32_t local_comm_id);
/* c->lk held, no flush running: send what is queued. */
void flush_now(struct client *c);
/* c->lk held. @c has queued events that no thread is about to send (one
 * held for the event that should follow it, or a full socket): the main
 * thread sends them within PEND_LOOK_MS (pend_look). */
void client_pend(struct client *c);
#define PEND_LOOK_MS 100
/* Main thread. Send what each pending client has queued (again pending
 * if its socket is still full); the poll timeout for the next look: -1
 * when nothing is pending, else PEND_LOOK_MS. */
int pend_look(void);
/* At shutdown, every client dead: drop the list and its references; no
 * client is added after. */
void pend_close(void);

/* request.c */
int reply(struct client *c, uint64_t seq, int ret, const void *payload, size_t len);
void handle_request(struct client *c, const uint8_t *buf, size_t len);

/* mcast.c: the port's multicast memberships at the SA, counted for the
 * node. mc_join and mc_leave on the client's thread, after access_mc;
 * mc_client_gone at its end (client_cleanup). Each blocks for the SA. */
int mc_join(struct client *c, const struct cepd_mc *m, struct cepd_mc_rep *out);
int mc_leave(struct client *c, const struct cepd_mc *m);
void mc_client_gone(struct client *c);
/* Before any client of the port; after the last (ending, with an SA
 * Delete, any join still counted), before sa_port_fini. */
void mc_port_init(struct port *p);
void mc_port_fini(struct port *p);

/* sa.c: each port's SA client and the clients' path queries. */
/* Before any client of the port (@sa: one opened already, or NULL);
 * after the last. */
void sa_port_init(struct port *p, struct cep_sa *sa);
void sa_port_fini(struct port *p);
/* The port's SA client, opened at its first use: 0 and *out (valid until
 * sa_port_fini), or port_sa_open's error (tried again next time). Any
 * client thread. */
int port_sa(struct port *p, struct cep_sa **out);
/* How port_sa opens it (tests put in a fake): cep_sa_get of the port's
 * device; -EOPNOTSUPP on the fabric. */
extern int (*port_sa_open)(struct port *p, struct cep_sa **out);
/* PATH_QUERY, after access_path: the SA's PathRecord, encoded, or -errno
 * (cep_sa_path_query's, port_sa's). Client thread; blocks for the SA. */
int sa_path_query(struct client *c, const struct cepd_path_q *q, uint8_t out[64]);
/* MC_BCAST, after access_mc: IPoIB's broadcast group of m->pkey, or
 * -errno (-EADDRNOTAVAIL: none). Client thread; blocks for the SA. */
int sa_bcast(struct client *c, const struct cepd_mc *m, struct cepd_mc_rep *out);

/* qps.c: each port's registry of QPNs, who registered them. port->lk
 * taken inside; any client thread. */
int qps_register(struct client *c, uint32_t qpn);
int qps_destroy(struct client *c, uint32_t qpn);
/* Whether @qpn is registered by @c (the registry only, no kernel check). */
int qps_mine(struct client *c, uint32_t qpn);
/* @c names @qpn for a connection: registered by it and, on an RDMA port,
 * still its QP by the kernel's word; a QPN whose QP is gone or is another
 * process's now is forgotten (cep_cm_qp_destroy). 0, -ENOENT, -EPERM. */
int qps_named(struct client *c, uint32_t qpn);
/* The client is gone: destroy every QPN it registered. */
void qps_client_gone(struct client *c);
void qps_port_init(struct port *p);
void qps_port_fini(struct port *p);

/* stats.c */
void print_stats(FILE *f, const struct client *reader);
int stats_command(const char *path);

#endif /* CEP_SERVICE_CEPD_H */
