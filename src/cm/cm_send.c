/* SPDX-License-Identifier: MIT */
/*
 * CM engine: sending. Every MAD of an id is encoded and sent under the
 * id's lock, so one id's MADs leave in the order of its states; a MAD that
 * may be retried is kept (id->retry) for the timer to resend - a REQ also
 * for its window to send (cm_pace.c). REJ, MRA and the simple messages
 * (RTU, DREQ, DREP) have their builders here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_internal.h"
#include "core/table_internal.h"

/* ---- sending -------------------------------------------------------------- */

int cm_send_raw(struct cep_cm *cm, unsigned w, struct cep_msg *m,
		    const struct cep_mad_addr *to, uint8_t *keep)
{
	uint8_t buf[CEP_MAD_SIZE];
	int ret = cep_msg_encode(m, buf);

	if (ret)
		return ret;
	if (keep)
		memcpy(keep, buf, CEP_MAD_SIZE);
	STAT_ADD(cm, w, sent[m->type]);
	if (m->type == CEP_MSG_REJ && m->u.rej.reason <= CEP_REJ_REASON_MAX)
		STAT_ADD(cm, w, rej_sent[m->u.rej.reason]);
	ret = cm->tp->ops->send(cm->tp, buf, CEP_MAD_SIZE, to);
	if (ret)
		STAT_ADD(cm, w, send_errors);
	return 0; /* a failed send is a lost MAD: retries cover it */
}

/* Lock held: id->retry, the buffer a kept MAD is encoded into (made on
 * first use, kept for the id's life). 0 or -ENOMEM. */
static int retry_buf(struct cep_cm_id *id)
{
	if (!id->retry)
		id->retry = malloc(CEP_MAD_SIZE);
	return id->retry ? 0 : -ENOMEM;
}

/* Lock held: encode @m into id->retry without sending it (a REQ its
 * window holds back). 0, -ENOMEM, or the encoder's error. */
int cm_keep_msg(struct cep_cm_id *id, struct cep_msg *m)
{
	int ret = retry_buf(id);

	return ret ? ret : cep_msg_encode(m, id->retry);
}

/* Lock held. @retain: keep the encoded MAD for retries. */
int cm_send_msg(struct cep_cm_id *id, struct cep_msg *m, int retain)
{
	if (retain) {
		int ret = retry_buf(id);

		return ret ? ret : cm_send_raw(id->cm, id->worker, m, &id->peer, id->retry);
	}
	return cm_send_raw(id->cm, id->worker, m, &id->peer, NULL);
}

void cm_resend_retry(struct cep_cm_id *id)
{
	struct cep_cm *cm = id->cm;
	enum cep_msg_type t;

	if (!id->retry)
		return;
	if (cep_mad_peek(id->retry, CEP_MAD_SIZE, &t, NULL) == 0)
		STAT_ADD(cm, id->worker, sent[t]);
	STAT_ADD(cm, id->worker, retries);
	if (cm->tp->ops->send(cm->tp, id->retry, CEP_MAD_SIZE, &id->peer))
		STAT_ADD(cm, id->worker, send_errors);
}

void cm_send_req(struct cep_cm_id *id)
{
	struct cep_cm *cm = id->cm;

	/* a REQ that left before and went back to its window is a retry */
	if (id->flags & F_REQ_WIRE)
		STAT_ADD(cm, id->worker, retries);
	STAT_ADD(cm, id->worker, sent[CEP_MSG_REQ]);
	if (cm->tp->ops->send(cm->tp, id->retry, CEP_MAD_SIZE, &id->peer))
		STAT_ADD(cm, id->worker, send_errors);
	id->flags = (uint16_t)((id->flags | F_REQ_WIRE) & ~F_MRA_WAIT);
	if (id->dest)
		cm_pace_sent(id);
	cm_set_timer(id, TK_RETRY, id->timeout_ms);
}

void cm_copy_pdata(uint8_t *dst, const void *src, size_t len)
{
	if (len)
		memcpy(dst, src, len);
}

/* Lock held: REJ from this id. Before the peer's comm ID is known (our
 * REQ unanswered: REQ_SENT, MRA_REQ_RCVD) the peer can match only a REJ
 * "timeout" carrying our CA GUID in the ARI (remote comm ID 0: it finds
 * its id by our (comm ID, GUID)), which is what the kernel's destroy
 * sends: every REJ from those states takes that form, whatever reason
 * the caller gave; its private data is kept. From REQ_RCVD the REJ names
 * no local comm ID (0): the requester never heard ours, as the kernel's
 * cm_format_rej writes it for that state; from MRA_REQ_SENT our MRA gave
 * it, and the REJ names it as the kernel's does. A REQ that never left
 * (its window held it, cm_pace.c) gets no REJ: nobody knows of it. */
void cm_send_rej(struct cep_cm_id *id, unsigned reason, unsigned msg_code,
		     const void *ari, size_t ari_len, const void *pdata, size_t len)
{
	struct cep_msg m;

	if (id->state == CEP_CM_REQ_SENT && !(id->flags & F_REQ_WIRE))
		return; /* its window held the REQ back: the peer never heard of it */
	if (id->state == CEP_CM_REQ_SENT || id->state == CEP_CM_MRA_REQ_RCVD) {
		reason = CEP_REJ_TIMEOUT;
		msg_code = CEP_MSG_CODE_OTHER;
		ari = NULL;
		ari_len = 0;
	}
	cep_msg_init(&m, CEP_MSG_REJ, id->tid);
	m.u.rej.local_comm_id = id->state == CEP_CM_REQ_RCVD ? 0 : cep_local_comm_id(id->cep);
	m.u.rej.remote_comm_id = id->remote_id;
	m.u.rej.message_rejected = (uint8_t)msg_code;
	m.u.rej.reason = (uint16_t)reason;
	if (reason == CEP_REJ_TIMEOUT && !ari) {
		cm_put_be64(m.u.rej.ari, id->cm->ca_guid);
		m.u.rej.reject_info_length = 8;
	} else if (ari_len) {
		memcpy(m.u.rej.ari, ari, ari_len);
		m.u.rej.reject_info_length = (uint8_t)ari_len;
	}
	cm_copy_pdata(m.u.rej.private_data, pdata, len);
	cm_send_msg(id, &m, 0);
}

void cm_keep_pdata(struct cep_cm_id *id, const void *pdata, size_t len)
{
	free(id->resend_pd);
	id->resend_pd = NULL;
	id->resend_len = 0;
	if (len && (id->resend_pd = malloc(len)) != NULL) { /* none: resent without */
		memcpy(id->resend_pd, pdata, len);
		id->resend_len = (uint8_t)len;
	}
}

void cm_send_mra(struct cep_cm_id *id, unsigned msg_code, uint8_t service_timeout,
		     const void *pdata, size_t len)
{
	struct cep_msg m;

	cep_msg_init(&m, CEP_MSG_MRA, id->tid);
	m.u.mra.local_comm_id = cep_local_comm_id(id->cep);
	m.u.mra.remote_comm_id = id->remote_id;
	m.u.mra.message_mraed = (uint8_t)msg_code;
	m.u.mra.service_timeout = service_timeout & 31;
	cm_copy_pdata(m.u.mra.private_data, pdata, len);
	id->mra_timeout = service_timeout & 31;
	cm_send_msg(id, &m, 0);
}

void cm_send_auto_mra(struct cep_cm_id *id, unsigned msg_code)
{
	cm_send_mra(id, msg_code, id->cm->mra_timeout, NULL, 0);
	cm_keep_pdata(id, NULL, 0);
	id->flags |= F_MRA_AUTO; /* the application's MRA may replace it */
}

void cm_send_simple(struct cep_cm_id *id, enum cep_msg_type t, const void *pdata,
			size_t len, int retain)
{
	struct cep_msg m;

	cep_msg_init(&m, t, id->tid);
	switch (t) {
	case CEP_MSG_RTU:
		m.u.rtu.local_comm_id = cep_local_comm_id(id->cep);
		m.u.rtu.remote_comm_id = id->remote_id;
		cm_copy_pdata(m.u.rtu.private_data, pdata, len);
		break;
	case CEP_MSG_DREQ:
		m.u.dreq.local_comm_id = cep_local_comm_id(id->cep);
		m.u.dreq.remote_comm_id = id->remote_id;
		m.u.dreq.remote_qpn_eecn = id->remote_qpn;
		cm_copy_pdata(m.u.dreq.private_data, pdata, len);
		break;
	case CEP_MSG_DREP:
		m.u.drep.local_comm_id = cep_local_comm_id(id->cep);
		m.u.drep.remote_comm_id = id->remote_id;
		cm_copy_pdata(m.u.drep.private_data, pdata, len);
		break;
	default:
		return;
	}
	cm_send_msg(id, &m, retain);
}
