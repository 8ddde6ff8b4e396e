/* SPDX-License-Identifier: MIT */
/*
 * The client of cepd (remote.c, remote_verbs.c): compiled into libcep,
 * not into cepd. A context of cep_cm_attach() carries this client's table
 * of operations, cmr_ops (src/cm/cm_ops.h), chosen once at attach; the
 * public cep_cm_* functions check what both kinds check and call through
 * it, never asking which kind they have. The attached context and its ids
 * fill the fields of struct cep_cm / cep_cm_id that need no request
 * (cep_cm_workers, cep_cm_ca_guid, the port, an id's context and
 * channel); cep_cm_table and cep_cm_id_cep are NULL.
 *
 * Also here for tests that speak the protocol raw: the HELLO's sender,
 * and the client's test hook.
 */
#ifndef CEP_SERVICE_REMOTE_H
#define CEP_SERVICE_REMOTE_H

#include <errno.h>
#include <stdint.h>

#include <cep/cm.h>

#include "cm/cm_internal.h"

/* The attached kind's operations (remote.c). */
extern const struct cm_ops cmr_ops;

/* The error of every call once the service has gone (closed its socket,
 * restarted, or was never answering again). */
#define CMR_GONE (-ECONNRESET)

/* cep_cm_attach's bound on the service's connect and HELLO answer when
 * the caller gives none (cep_cm_attach_attr.timeout_ms 0). */
#define CMR_ATTACH_TIMEOUT_MS 10000u

struct cepd_hello;
/* Send the HELLO @h on the connected socket @fd with the ancillary data
 * that tells cepd who sends it (proto.h): SCM_CREDENTIALS, then
 * SCM_RIGHTS with this process's pidfd (none where pidfd_open is
 * ENOSYS). 0 or -errno (-EAGAIN: SO_SNDTIMEO passed). Any thread; for
 * tests that speak the protocol raw as well. */
int cmr_hello_send(int fd, const struct cepd_hello *h);

/* Test hook points: compiled only into the tests' copy of the library
 * (-DCEP_TEST_HOOKS, tests/service/meson.build); a test holds a race
 * window open by blocking in the hook (bounded). A stress yield otherwise. */
enum cmr_hook_point {
	CMR_HOOK_DESTROY, /* cep_cm_destroy: cm.c found the context live,
			     cmr_destroy has not decided yet */
};
#ifdef CEP_TEST_HOOKS
extern void (*cmr_test_hook)(enum cmr_hook_point p, struct cep_cm *cm);
#define CMR_HOOK(p, cm) do { if (cmr_test_hook) cmr_test_hook((p), (cm)); } while (0)
#else
#define CMR_HOOK(p, cm) CEP_YIELD()
#endif

/* The librdmacm drop-in's contexts (src/rdmacm/device.c, right after
 * cep_cm_attach, before any id): callbacks run on the thread that reads
 * their events from the socket - a thread waiting in rdma_get_cm_event,
 * at the end of its read, or the backstop - instead of the callback
 * thread, still one at a time and in the order the service sent them,
 * never inside a call that waits for its reply, and with the socket
 * given up meanwhile (cm/lead.h, cep_lead_step_aside). For handlers that
 * may run on any thread holding no lock of the application: the
 * drop-in's only pushes to its own channels. 0, or -EINVAL (not an
 * attached context). */
int cmr_callbacks_inline(struct cep_cm *cm);

/* cep/verbs.h on an attached context (remote_verbs.c, with libibverbs):
 * cmr_ops' init_qp_attr and qp_event (cm_ops.h says what they get). */
struct ibv_qp_attr;
struct ibv_async_event;
int cmr_init_qp_attr(struct cep_cm_id *id, int state, struct ibv_qp_attr *attr, int *mask);
int cmr_qp_event(struct cep_cm *cm, const struct ibv_async_event *ev);
/* For remote_verbs.c: a request on @id with argument @a whose reply
 * payload lands in @out; a request on the context with arguments a, b. */
int cmr_id_call_out(struct cep_cm_id *id, uint32_t op, uint32_t a, void *out, size_t outlen);
int cmr_cm_call(struct cep_cm *cm, uint32_t op, uint32_t a, uint32_t b);
/* InfiniBand multicast through cepd (the librdmacm drop-in's mcast.c):
 * CEPD_MC_JOIN or CEPD_MC_LEAVE (@op) of membership @m (proto.h's struct
 * cepd_mc), or CEPD_MC_BCAST (IPoIB's broadcast group of m->pkey);
 * cepd's answer in @rep (may be NULL for a leave).
 * 0 or the service's -errno (-EOPNOTSUPP also from a service that has no
 * such request, or a port without an SA); -EINVAL when @cm is not an
 * attached context; -EPROTO for a reply without its payload.
 * Blocks for the SA's answer (cepd waits for it). Any thread. */
struct cepd_mc;
struct cepd_mc_rep;
int cmr_mc(struct cep_cm *cm, uint32_t op, const struct cepd_mc *m, struct cepd_mc_rep *rep);

/* A PathRecord Get through cepd (the librdmacm drop-in's
 * rdma_resolve_route on an InfiniBand port, PATH_QUERY): cep_sa_path_query's
 * arguments and answer, asked of cepd's SA client. 0 or the service's
 * -errno (its SA client's, its refusal; -EOPNOTSUPP also from a service
 * without the request); -EINVAL when @cm is not an attached context;
 * -EPROTO for a reply without the record. Blocks for the SA. Any thread. */
struct cep_sa_path;
int cmr_path_query(struct cep_cm *cm, uint64_t comp_mask, uint32_t flags,
		   const struct cep_sa_path *query, struct cep_sa_path *out);

/* The outgoing queue of an attached context (remote.c, OUT_BATCH): the
 * requests sent from it, the system calls that sent them, and how many
 * wait now. Any thread; takes the context's lock. For tests and stats. */
void cmr_out_counts(struct cep_cm *cm, uint64_t *msgs, uint64_t *sends, unsigned *queued);

#endif /* CEP_SERVICE_REMOTE_H */
