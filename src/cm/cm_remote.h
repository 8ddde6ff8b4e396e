/* SPDX-License-Identifier: MIT */
/*
 * The remote CM context (cm_remote.c): a struct cep_cm that speaks to cepd
 * (src/service/proto.h) instead of running an engine. The public cep_cm_*
 * functions branch here with one line each:
 *   - a context is remote iff cm->tp == NULL (a local one always has its
 *     transport);
 *   - an id is remote iff id->cep == NULL (a local id has its CEP from
 *     creation to its free).
 * cep_cm_workers, cep_cm_ca_guid, cep_cm_id_context/set_context,
 * cep_cm_table (NULL) and cep_cm_id_cep (NULL) need no branch: the remote
 * context and ids fill the same fields. Channels hold remote ids' events as
 * local ones (cm_event.c takes a remote id's reference with cmr_id_get).
 */
#ifndef CEP_CM_REMOTE_H
#define CEP_CM_REMOTE_H

#include <errno.h>

#include <cep/cm.h>

#include "cm/cm_internal.h"

static inline int cm_remote(const struct cep_cm *cm)
{
	return cm->tp == NULL;
}

static inline int cm_remote_id(const struct cep_cm_id *id)
{
	return id->cep == NULL;
}

/* The port a remote context serves, as cepd's query_port gave it (for the
 * librdmacm drop-in, which needs what a local transport's query_port
 * tells). Const after cep_cm_attach. */
static inline const struct cep_port_info *cmr_port(const struct cep_cm *cm)
{
	return &cm->port;
}

/* The error of every call once the service has gone (closed its socket,
 * restarted, or was never answering again). */
#define CMR_GONE (-ECONNRESET)

/* cep_cm_attach's bound on the service's connect and HELLO answer when
 * the caller gives none (cep_cm_attach_attr.timeout_ms 0). */
#define CMR_ATTACH_TIMEOUT_MS 10000u

struct cepd_hello;
/* Send the HELLO @h on the connected socket @fd with the ancillary data
 * that tells cepd who sends it (src/service/proto.h): SCM_CREDENTIALS,
 * then SCM_RIGHTS with this process's pidfd (none where pidfd_open is
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

/* 1 if @cm is a live remote context (a pointer compare: @cm need not be
 * valid memory, as cep_cm_destroy's own liveness check). */
int cmr_is_live(const struct cep_cm *cm);

int cmr_destroy(struct cep_cm *cm);
int cmr_qp_register(struct cep_cm *cm, uint32_t qpn);
int cmr_qp_destroy(struct cep_cm *cm, uint32_t qpn);
int cmr_quiesce(struct cep_cm *cm, unsigned timeout_ms);
int cmr_get_stats(struct cep_cm *cm, struct cep_cm_stats *st);
int cmr_create_id(struct cep_cm *cm, const struct cep_cm_id_attr *attr,
		  struct cep_cm_id **out);
int cmr_destroy_id(struct cep_cm_id *id);
int cmr_destroy_id_sync(struct cep_cm_id *id);
uint32_t cmr_id_local_comm_id(const struct cep_cm_id *id);
uint32_t cmr_id_remote_comm_id(struct cep_cm_id *id);
enum cep_cm_state cmr_id_state(struct cep_cm_id *id);
enum cep_cm_lap_state cmr_id_lap_state(struct cep_cm_id *id);
int cmr_listen(struct cep_cm_id *id, uint64_t service_id, uint64_t mask, unsigned backlog);
int cmr_connect(struct cep_cm_id *id, const struct cep_cm_conn_param *p);
int cmr_accept(struct cep_cm_id *id, const struct cep_cm_accept_param *p);
int cmr_rtu(struct cep_cm_id *id, const void *pdata, size_t len);
int cmr_notify_established(struct cep_cm_id *id);
int cmr_reject(struct cep_cm_id *id, unsigned reason, const void *ari, size_t ari_len,
	       const void *pdata, size_t len);
int cmr_mra(struct cep_cm_id *id, uint8_t service_timeout, const void *pdata, size_t len);
int cmr_disconnect(struct cep_cm_id *id, const void *pdata, size_t len);
int cmr_drep(struct cep_cm_id *id, const void *pdata, size_t len);
int cmr_lap(struct cep_cm_id *id, const struct cep_path *alt, uint8_t timeout,
	    const void *pdata, size_t len);
int cmr_apr(struct cep_cm_id *id, unsigned status, const void *info, size_t info_len,
	    const void *pdata, size_t len);
int cmr_sidr_req(struct cep_cm_id *id, const struct cep_cm_sidr_param *p);
int cmr_sidr_rep(struct cep_cm_id *id, unsigned status, uint32_t qpn, uint32_t qkey,
		 const void *pdata, size_t len);

/* cep/verbs.h on a remote context (cm_remote_verbs.c, with libibverbs):
 * @state is an enum ibv_qp_state. */
struct ibv_qp_attr;
struct ibv_async_event;
int cmr_init_qp_attr(struct cep_cm_id *id, int state, struct ibv_qp_attr *attr, int *mask);
int cmr_qp_event(struct cep_cm *cm, const struct ibv_async_event *ev);
/* For cm_remote_verbs.c: a request on @id with argument @a whose reply
 * payload lands in @out; a request on the context with arguments a, b. */
int cmr_id_call_out(struct cep_cm_id *id, uint32_t op, uint32_t a, void *out, size_t outlen);
int cmr_cm_call(struct cep_cm *cm, uint32_t op, uint32_t a, uint32_t b);

/* A channel event's reference on a remote id (cm_event.c): the id's memory
 * stays until every queued event about it is freed. Any thread. */
void cmr_id_get(struct cep_cm_id *id);
void cmr_id_put(struct cep_cm_id *id);

#endif /* CEP_CM_REMOTE_H */
