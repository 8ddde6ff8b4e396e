/* SPDX-License-Identifier: MIT */
/*
 * What a cepd client may do: every check a request passes beyond its
 * shape (proto.h's cepd_req_check) and the id it names (a handle of the
 * client's own table, request.c). access.c reads top to bottom as the
 * service's rules; cepd(8) ("ACCESS") says the same in prose.
 *
 * Each check runs on the client's thread before its request acts, and
 * changes nothing when it refuses: 0, or the -errno the client gets.
 */
#ifndef CEP_SERVICE_ACCESS_H
#define CEP_SERVICE_ACCESS_H

#include <stdbool.h>
#include <stdint.h>

#include "service/cepd.h"

/* Each check reads the request's own fields (q->r, q->param, q->s). */

/* LISTEN: whether the client may listen on the IDs (service ID x, mask y)
 * match: 0, -EINVAL (mask 0), -EACCES (needs a capability or a grant it
 * has not). */
int access_listen(struct req *q);
/* LISTEN's act: the listen itself under the port's lock, so that no other
 * client's listen can overlap it: 0, -EADDRINUSE (it overlaps another
 * client's listener), or the engine's error. */
int access_listen_bind(struct req *q, uint64_t service_id, uint64_t mask, unsigned backlog);
/* The listener @s is being destroyed (before cep_cm_destroy_id): its
 * service IDs are free for others. Client threads. */
void access_unlisten(struct sid *s);

/* The connection requests: the QP they name (qps_named), the Q_Key, and
 * the source addresses (addr.h). */
int access_connect(struct req *q);
int access_accept(struct req *q);
int access_sidr_req(struct req *q);
int access_sidr_rep(struct req *q);
int access_lap(struct req *q);
/* A QP event (COMM_EST): for a QP the client registered. */
int access_qp_event(struct req *q);

/* Statistics: whether @reader may see client @c (its own uid, or root). */
/* MC_JOIN, MC_LEAVE: the membership asked; MC_BCAST: its P_Key. */
int access_mc(struct req *q);
/* PATH_QUERY: the query's source. */
int access_path(struct req *q);

bool access_sees(const struct client *reader, const struct client *c);

#endif /* CEP_SERVICE_ACCESS_H */
