/* SPDX-License-Identifier: MIT */
/*
 * CM engine, alternate paths: LAP and APR handlers and API (an ESTABLISHED
 * connection's LAP sub-state). Same template and locking rules as cm.c describes.
 */
#include <errno.h>
#include <string.h>

#include "cm_internal.h"

/* Locked, id->paths set: the LAP's path is the alternate now (its APR said
 * success), armed for a migration again. */
static void cm_install_alt(struct cep_cm_id *id)
{
	id->paths->alt = id->paths->lap;
	id->paths->migrated = 0;
}

void cm_handle_lap(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
		       const struct cep_mad_addr *from)
{
	struct cep_cm_id *id = cm_find_peer(cm, w, m->u.lap.remote_comm_id, m->u.lap.local_comm_id,
					    from);
	struct cep_cm_event ev;

	if (!id)
		return;
	if (id->local_qpn != m->u.lap.remote_qpn_eecn) {
		cm_drop(cm, w, CEP_CM_DROP_MISMATCH);
		goto out;
	}
	if (id->state != CEP_CM_ESTABLISHED) {
		cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		goto out;
	}
	switch (id->lap_state) {
	case CEP_CM_LAP_IDLE:
		break;
	case CEP_CM_MRA_LAP_SENT: /* a retry: same TID as the recorded one */
		STAT_ADD(cm, w, duplicates);
		cm_send_mra(id, CEP_MSG_CODE_OTHER, id->mra_timeout, id->resend_pd, id->resend_len);
		goto out;
	case CEP_CM_LAP_RCVD:
		STAT_ADD(cm, w, duplicates);
		goto out;
	default: /* both sides sent LAP: ours wins nothing, refuse theirs */
		cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		goto out;
	}
	id->lap_state = CEP_CM_LAP_RCVD;
	if (cm_paths(id)) /* the sender's end, installed by our APR success */
		id->paths->lap = cm_path_addr(&m->u.lap.alternate, 0);
	id->tid = m->hdr.tid; /* our MRA and APR echo it (kernel cm_lap_handler) */
	id->peer_timeout_ms = cm_ms(cm_peer_t(m->u.lap.remote_cm_response_timeout));
	if (cm->auto_mra)
		cm_set_timer(id, TK_AUTO_MRA, id->peer_timeout_ms / 2 + 1);
	cm_ev_init(&ev, id, CEP_CM_EV_LAP_RECEIVED);
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
out:
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

void cm_handle_apr(struct cep_cm *cm, unsigned w, const struct cep_msg *m,
		       const struct cep_mad_addr *from)
{
	struct cep_cm_id *id = cm_find_peer(cm, w, m->u.apr.remote_comm_id, m->u.apr.local_comm_id,
					    from);
	struct cep_cm_event ev;

	if (!id)
		return;
	if (id->state != CEP_CM_ESTABLISHED ||
	    (id->lap_state != CEP_CM_LAP_SENT && id->lap_state != CEP_CM_MRA_LAP_RCVD)) {
		cm_drop(cm, w, CEP_CM_DROP_BAD_STATE);
		pthread_mutex_unlock(&id->lock);
		cm_id_put(id);
		return;
	}
	id->lap_state = CEP_CM_LAP_IDLE;
	cm_free_retry(id);
	cm_clear_timer(id);
	if (m->u.apr.ap_status == CEP_APR_SUCCESS && id->paths) /* the path is installed */
		cm_install_alt(id);
	cm_ev_init(&ev, id, CEP_CM_EV_APR_RECEIVED);
	ev.status = m->u.apr.ap_status;
	cm_ev_msg(&ev, m, from);
	cm_emit(id, &ev);
	pthread_mutex_unlock(&id->lock);
	cm_id_put(id);
}

/* The public functions: the checks both kinds make alike, then the
 * context's table (cm_ops.h). */
int cep_cm_lap(struct cep_cm_id *id, const struct cep_path *alt,
	       uint8_t remote_cm_response_timeout, const void *pdata, size_t len)
{
	if (!id || !alt)
		return -EINVAL;
	return id->cm->ops->lap(id, alt, remote_cm_response_timeout, pdata, len);
}

int cep_cm_apr(struct cep_cm_id *id, unsigned status, const void *info, size_t info_len,
	       const void *pdata, size_t len)
{
	return id ? id->cm->ops->apr(id, status, info, info_len, pdata, len) : -EINVAL;
}

int cep_cm_migrate(struct cep_cm_id *id)
{
	return id ? id->cm->ops->migrate(id) : -EINVAL;
}

int cm_local_lap(struct cep_cm_id *id, const struct cep_path *alt,
		 uint8_t remote_cm_response_timeout, const void *pdata, size_t len)
{
	struct cep_msg m;
	int ret = 0;

	if (remote_cm_response_timeout > 31 || (len && !pdata))
		return -EINVAL;
	if (len > CEP_LAP_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	if (id->state != CEP_CM_ESTABLISHED || id->lap_state != CEP_CM_LAP_IDLE) {
		ret = -EINVAL;
		goto out;
	}
	if (!remote_cm_response_timeout) /* librdmacm's default (cm.h) */
		remote_cm_response_timeout = CEP_CM_DEFAULT_RESPONSE_TIMEOUT;
	cep_msg_init(&m, CEP_MSG_LAP, cm_next_tid(id));
	m.u.lap.local_comm_id = cep_local_comm_id(id->cep);
	m.u.lap.remote_comm_id = id->remote_id;
	m.u.lap.remote_qpn_eecn = id->remote_qpn;
	m.u.lap.remote_cm_response_timeout = remote_cm_response_timeout;
	m.u.lap.alternate = *alt;
	cm_copy_pdata(m.u.lap.private_data, pdata, len);
	ret = cm_send_msg(id, &m, 1);
	if (ret)
		goto out;
	id->lap_state = CEP_CM_LAP_SENT;
	if (cm_paths(id))
		id->paths->lap = cm_path_addr(alt, 1);
	id->retries_left = id->max_retries;
	/* the LAP's own period: later DREQ retries keep the connection's */
	id->lap_timeout_ms = 2 * cm_ms(id->pkt_life) + cm_ms(remote_cm_response_timeout);
	cm_set_timer(id, TK_RETRY, id->lap_timeout_ms);
out:
	pthread_mutex_unlock(&id->lock);
	return ret;
}

int cm_local_apr(struct cep_cm_id *id, unsigned status, const void *info, size_t info_len,
		 const void *pdata, size_t len)
{
	struct cep_msg m;
	int ret = 0;

	if (status > CEP_APR_STATUS_MAX || (info_len && !info) || (len && !pdata))
		return -EINVAL;
	if (info_len > CEP_APR_INFO_SIZE || len > CEP_APR_PRIVATE_DATA_SIZE)
		return -EMSGSIZE;
	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	if (id->state != CEP_CM_ESTABLISHED ||
	    (id->lap_state != CEP_CM_LAP_RCVD && id->lap_state != CEP_CM_MRA_LAP_SENT)) {
		ret = -EINVAL;
		goto out;
	}
	cep_msg_init(&m, CEP_MSG_APR, id->tid);
	m.u.apr.local_comm_id = cep_local_comm_id(id->cep);
	m.u.apr.remote_comm_id = id->remote_id;
	m.u.apr.ap_status = (uint8_t)status;
	m.u.apr.additional_info_length = (uint8_t)info_len;
	cm_copy_pdata(m.u.apr.additional_info, info, info_len);
	cm_copy_pdata(m.u.apr.private_data, pdata, len);
	cm_send_msg(id, &m, 0);
	id->lap_state = CEP_CM_LAP_IDLE;
	if (status == CEP_APR_SUCCESS && id->paths) /* the path is installed */
		cm_install_alt(id);
	cm_clear_timer(id);
out:
	pthread_mutex_unlock(&id->lock);
	return ret;
}

/* The kernel's cm_migrate (ib_cm_notify(IB_EVENT_PATH_MIG)): the CM's
 * address vector becomes the alternate's. Stricter: with no alternate
 * path it refuses, where the kernel's would send by an empty one. */
int cm_local_migrate(struct cep_cm_id *id)
{
	struct cm_paths *p;
	struct cep_mad_addr to;
	int ret = 0;

	if (cm_lock_live(id))
		return -EINVAL; /* destroyed: no longer the caller's to drive */
	p = id->paths;
	if (id->state != CEP_CM_ESTABLISHED || id->lap_state != CEP_CM_LAP_IDLE || !p ||
	    !p->alt.valid) {
		ret = -EINVAL;
		goto out;
	}
	if (p->migrated)
		goto out; /* on the alternate already: as the kernel's, again */
	/* the primary it leaves: its messages still count as the peer's */
	memset(&p->old, 0, sizeof(p->old));
	memcpy(p->old.gid, id->peer.gid, 16);
	p->old.lid = id->peer.lid;
	p->old.grh = id->peer.grh_present;
	p->old.valid = 1;
	/* the alternate's end, from the same port, P_Key and QP1 */
	to = id->peer;
	memcpy(to.gid, p->alt.gid, 16);
	to.lid = p->alt.lid;
	to.grh_present = p->alt.grh;
	to.sl = p->alt.sl;
	to.hop_limit = p->alt.hop_limit;
	to.traffic_class = p->alt.traffic_class;
	to.flow_label = p->alt.flow_label;
	id->peer = to;
	p->migrated = 1;
out:
	pthread_mutex_unlock(&id->lock);
	return ret;
}
