/* SPDX-License-Identifier: MIT */
/*
 * The operations of a CM context: one const table per kind, chosen once
 * and kept in cm->ops (const) - cep_cm_create gives a context the
 * engine's of this process (cm_local_ops, cm.c), cep_cm_attach the
 * client of cepd's (cmr_ops, src/service/remote.c). Every public
 * cep_cm_* function that differs by kind checks the arguments both
 * kinds check alike, once, then calls through its context's table; no
 * function asks which kind it has.
 *
 * An operation gets a context or id of its own kind (non-NULL) and
 * arguments that passed those common checks; it checks what only it
 * knows, and keeps its own kind's contract of cep/cm.h. Any thread, as
 * the public function it serves. Each is named after its public function:
 * cep_cm_connect -> ops->connect -> cm_local_connect or cmr_connect.
 */
#ifndef CEP_CM_OPS_H
#define CEP_CM_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <cep/cm.h>

struct ibv_qp_attr;
struct ibv_async_event;

struct cm_ops {
	/* ---- the context (cep_cm_*) ---- */
	/* cep_cm_destroy of a context found live: it may be destroyed
	 * meanwhile by a racing call, so nothing of it is read before
	 * cm_live_close() says it is this call's. */
	int (*destroy)(struct cep_cm *cm);
	/* 1 if the calling thread delivers @cm's callbacks (a worker of a
	 * local context, an attached one's callback thread): it must not
	 * wait for @cm (-EDEADLK). */
	int (*on_callback_thread)(const struct cep_cm *cm);
	int (*qp_register)(struct cep_cm *cm, uint32_t qpn);
	/* cm_qp_register_nowait (cm_internal.h): qp_register, its refusal
	 * told by the next connect or accept that names the QP. */
	int (*qp_register_nowait)(struct cep_cm *cm, uint32_t qpn);
	int (*qp_destroy)(struct cep_cm *cm, uint32_t qpn);
	/* cm_qp_destroy_nowait (cm_internal.h): qp_destroy, not waiting to
	 * learn how it went. */
	int (*qp_destroy_nowait)(struct cep_cm *cm, uint32_t qpn);
	int (*quiesce)(struct cep_cm *cm, unsigned timeout_ms);
	int (*get_stats)(struct cep_cm *cm, struct cep_cm_stats *st);

	/* ---- ids (cep_cm_*_id, getters, listen) ---- */
	/* @flags: cep_cm_id_attr.flags, already checked against those known */
	int (*create_id)(struct cep_cm *cm, const struct cep_cm_id_attr *attr, uint64_t flags,
			 struct cep_cm_id **out);
	int (*destroy_id)(struct cep_cm_id *id);
	int (*destroy_id_sync)(struct cep_cm_id *id);
	uint32_t (*id_local_comm_id)(const struct cep_cm_id *id);
	uint32_t (*id_remote_comm_id)(struct cep_cm_id *id);
	enum cep_cm_state (*id_state)(struct cep_cm_id *id);
	enum cep_cm_lap_state (*id_lap_state)(struct cep_cm_id *id);
	int (*listen)(struct cep_cm_id *id, uint64_t service_id, uint64_t mask,
		      unsigned backlog);

	/* ---- a connection's messages ---- */
	int (*connect)(struct cep_cm_id *id, const struct cep_cm_conn_param *p);
	/* cm_connect_nowait (cm_internal.h): connect, a refusal told by an
	 * event of the id. */
	int (*connect_nowait)(struct cep_cm_id *id, const struct cep_cm_conn_param *p);
	int (*accept)(struct cep_cm_id *id, const struct cep_cm_accept_param *p);
	/* cm_accept_nowait (cm_internal.h): accept, a refusal told by an
	 * event of the id. */
	int (*accept_nowait)(struct cep_cm_id *id, const struct cep_cm_accept_param *p);
	int (*rtu)(struct cep_cm_id *id, const void *pdata, size_t len);
	/* cm_rtu_nowait (cm_internal.h): rtu without private data, not
	 * waiting for the answer. */
	int (*rtu_nowait)(struct cep_cm_id *id);
	int (*notify_established)(struct cep_cm_id *id);
	int (*reject)(struct cep_cm_id *id, unsigned reason, const void *ari, size_t ari_len,
		      const void *pdata, size_t len);
	int (*mra)(struct cep_cm_id *id, uint8_t service_timeout, const void *pdata, size_t len);
	int (*disconnect)(struct cep_cm_id *id, const void *pdata, size_t len);
	/* cm_disconnect_nowait (cm_internal.h): disconnect without private
	 * data, not waiting to learn how it went. */
	int (*disconnect_nowait)(struct cep_cm_id *id);
	int (*drep)(struct cep_cm_id *id, const void *pdata, size_t len);
	int (*lap)(struct cep_cm_id *id, const struct cep_path *alt, uint8_t timeout,
		   const void *pdata, size_t len);
	int (*apr)(struct cep_cm_id *id, unsigned status, const void *info, size_t info_len,
		   const void *pdata, size_t len);
	int (*migrate)(struct cep_cm_id *id);
	int (*sidr_req)(struct cep_cm_id *id, const struct cep_cm_sidr_param *p);
	int (*sidr_rep)(struct cep_cm_id *id, unsigned status, uint32_t qpn, uint32_t qkey,
			const void *pdata, size_t len);

	/* ---- the librdmacm drop-in's backlog (cm_state.c) ---- */
	void (*request_taken)(struct cep_cm_id *id);
	int (*request_drop)(struct cep_cm_id *id);

	/* ---- channel events (cm_event.c) ----
	 * A queued or taken event holds its id (and listener, @lid, may be
	 * NULL) until it is freed. @destroyed_acked: the event was the id's
	 * DESTROYED and the user acked it, which for some kinds ends the
	 * user's own hold too. No channel lock held. */
	void (*event_hold)(struct cep_cm_id *id, struct cep_cm_id *lid);
	void (*event_release)(struct cep_cm_id *id, struct cep_cm_id *lid, int destroyed_acked);

	/* ---- cep/verbs.h (built with libibverbs only; NULL and never
	 * called otherwise): @state is an enum ibv_qp_state; @ev is a
	 * COMM_EST event of a QP (cep_cm_qp_event checked it) ---- */
	int (*init_qp_attr)(struct cep_cm_id *id, int state, struct ibv_qp_attr *attr, int *mask);
	int (*qp_event)(struct cep_cm *cm, const struct ibv_async_event *ev);
};

/* The engine of this process (cm.c fills it from cm*.c and, with
 * libibverbs, src/verbs/verbs.c). */
extern const struct cm_ops cm_local_ops;

#endif /* CEP_CM_OPS_H */
