/* SPDX-License-Identifier: MIT */
/*
 * cepd's private header: the objects every part of the service shares
 * (the service, its ports, a client session, a client's id) and the calls
 * between its files. cepd is built on libcep's public API only.
 *
 * Files, one concern each:
 *   main.c     options, ports, the listening socket, signals, shutdown
 *   client.c   a client's session: accept, HELLO, its thread, its handle
 *              table, its end (what a dead client leaves is destroyed)
 *   request.c  the requests: checked, then carried out
 *   events.c   the engine's callback and the event queues to clients
 *   stats.c    --stats, both ends
 *
 * Locks: svc.lk (the client list), client.lk (its table, QPNs and event
 * queue). No lock is held across a cep_cm_* call (cep_cm_destroy_id
 * waits for a running callback, which takes client.lk).
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

#include "service/proto.h"

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
	pid_t pid;
	uid_t uid;
	unsigned serial;
	struct port *port;             /* NULL: a statistics reader */
	pthread_mutex_t lk;
	struct sid **slot;             /* lk: [cap], index = handle & mask */
	uint16_t *gen;                 /* lk: [cap] */
	uint32_t cap, nids, free_hint; /* lk */
	uint32_t *qpn;                 /* lk: registered by this client */
	uint32_t nqpn, qpcap;          /* lk */
	struct chunk *qhead, *qtail;   /* lk: events to send */
	uint32_t queued;               /* lk: chunks */
	int flushing;                  /* lk: a thread is sending the queue */
	int blocked;                   /* lk: the socket was full (EAGAIN) */
	int dead;                      /* lk: no event goes out, no new id */
	_Atomic int refs;              /* thread + each sid */
	/* statistics: relaxed counters, no order with anything */
	_Atomic uint64_t requests, bad, events, events_dropped;
	struct client *next;           /* svc.lk */
};

struct sid {
	struct client *c;
	struct cep_cm_id *id;
	uint32_t handle;               /* 0: an orphan (its client is gone) */
	int gone;                      /* c->lk: destroy asked; names nothing */
	int auto_rtu;                  /* client thread, before CONNECT: its
					  REP_RECEIVED is followed at once by
					  ESTABLISHED (sent together) */
};

extern struct svc {
	struct port port[MAX_PORTS];
	unsigned nports;
	struct cep_fabric *fab;
	int lfd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int own_path;                  /* we created (and so unlink) it */
	pthread_mutex_t lk;
	struct client *clients;        /* lk */
	unsigned nclients, serial;     /* lk */
	_Atomic uint64_t clients_total, clients_dropped, bad_messages;
	_Atomic unsigned live_clients; /* client structs not yet freed */
	int check;                     /* --check: the tables at exit */
	volatile sig_atomic_t stop;
	int sigpipe[2];
	unsigned workers;
	uint32_t max_ids;              /* per client (--max-ids) */
	int verbose;
} svc;

void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* client.c */
void accept_client(void);
void client_put(struct client *c);
int handle_add(struct client *c, struct sid *s);
void handle_del(struct client *c, struct sid *s);
struct sid *handle_get(struct client *c, uint32_t h);
void client_kill_locked(struct client *c, const char *why);

/* events.c */
int sid_handler(struct cep_cm_id *id, const struct cep_cm_event *ev);
void flush_locked(struct client *c);

/* request.c */
int reply(struct client *c, uint64_t seq, int ret, const void *payload, size_t len);
void handle_request(struct client *c, const uint8_t *buf, size_t len);

/* stats.c */
void print_stats(FILE *f);
int stats_command(const char *path);

#endif /* CEP_SERVICE_CEPD_H */
