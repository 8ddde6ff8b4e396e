/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, QPs and SRQs of an id: rdma_create_qp(_ex),
 * rdma_destroy_qp, rdma_create_srq(_ex), rdma_destroy_srq. As librdmacm:
 * the QP is created on the id's device (its default PD unless one is
 * given), completion queues with their own channels are made for whatever
 * queue the caller leaves out, and the QP leaves here in INIT (UD: in RTS
 * with rdma_cm's Q_Key). An RC QP's number is registered with the port's
 * CM, which binds the connection to it (cep/cm.h); so is an XRC QP's (a
 * send id's initiator, a receive id's target in the device's XRC domain,
 * as librdmacm makes them - or the device refuses them: rxe has no XRC).
 *
 * Guarantees: id.qp changes under the id's mutex (the CM worker reads it
 * there at REP and REJ time).
 */
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_verbs.h>

#include "rdmacm.h"

static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq && id->send_cq != id->recv_cq)
			ibv_destroy_cq(id->send_cq);
	} else if (id->send_cq) {
		ibv_destroy_cq(id->send_cq);
	}
	id->recv_cq = id->send_cq = NULL;
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
			ibv_destroy_comp_channel(id->send_cq_channel);
	} else if (id->send_cq_channel) {
		ibv_destroy_comp_channel(id->send_cq_channel);
	}
	id->recv_cq_channel = id->send_cq_channel = NULL;
}

static int create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if (recv_size) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (id->recv_cq_channel)
			id->recv_cq = ibv_create_cq(id->verbs, (int)recv_size, id,
						    id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto err;
	}
	if (send_size) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (id->send_cq_channel)
			id->send_cq = ibv_create_cq(id->verbs, (int)send_size, id,
						    id->send_cq_channel, 0);
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	destroy_cqs(id);
	return -1;
}

RCM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct rcm_id *r;
	struct ibv_qp *qp;
	int ret;

	if (!id || !attr || id->qp || !id->verbs)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (attr->pd->context != id->verbs) {
		return rcm_err(EINVAL);
	}
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return rcm_err(EINVAL);
	/* XRC as librdmacm: a receive id's QP in the device's XRC domain; the
	 * QPs are the device's to make or refuse (rxe: EOPNOTSUPP) */
	if (id->qp_type == IBV_QPT_XRC_RECV &&
	    (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd)) {
		attr->xrcd = rcm_dev_xrcd(id->verbs);
		if (!attr->xrcd)
			return -1;
		attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
	}
	if (create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
		       attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr))
		return -1;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		ret = errno;
		destroy_cqs(id);
		return rcm_err(ret ? ret : ENOMEM);
	}
	pthread_mutex_lock(&r->mtx);
	/* RC, UC and XRC alike (librdmacm's ucma_init_conn_qp): ECE, INIT,
	 * the number registered with the CM */
	ret = rcm_qp_ece(r, qp);
	if (!ret)
		ret = rcm_qp_init(r, qp);
	if (!ret) {
		id->pd = qp->pd;
		id->qp = qp;
	}
	pthread_mutex_unlock(&r->mtx);
	if (ret) {
		ibv_destroy_qp(qp);
		destroy_cqs(id);
		return rcm_err(-ret);
	}
	return 0;
}

RCM_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ax;
	int ret;

	if (!id || !qp_init_attr)
		return rcm_err(EINVAL);
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, qp_init_attr, sizeof(*qp_init_attr));
	ax.comp_mask = IBV_QP_INIT_ATTR_PD;
	ax.pd = pd ? pd : id->pd;
	ret = rdma_create_qp_ex(id, &ax);
	/* The caps the device granted flow back (as librdmacm). */
	memcpy(qp_init_attr, &ax, sizeof(*qp_init_attr));
	return ret;
}

RCM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	struct rcm_id *r;
	struct ibv_qp *qp;

	if (!id)
		return;
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	qp = id->qp;
	id->qp = NULL;
	/* The CM forgets the number first (a connection bound to it ends),
	 * then the QP goes: the kernel may hand the number out again. */
	rcm_qp_unregister(r);
	pthread_mutex_unlock(&r->mtx);
	if (qp)
		ibv_destroy_qp(qp);
	destroy_cqs(id);
}

RCM_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *srq;
	int made_cq = 0;

	if (!id || !attr || !id->verbs || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return rcm_err(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (attr->srq_type == IBV_SRQT_XRC) {
		/* librdmacm: the device's XRC domain and a receive CQ unless
		 * given; the device makes or refuses it (rxe: EOPNOTSUPP) */
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd) {
			attr->xrcd = rcm_dev_xrcd(id->verbs);
			if (!attr->xrcd)
				return -1;
		}
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
			if (!id->recv_cq) {
				if (create_cqs(id, 0, attr->attr.max_wr))
					return -1;
				made_cq = 1;
			}
			attr->cq = id->recv_cq;
		}
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	}
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq) {
		int err = errno;

		if (made_cq)
			destroy_cqs(id);
		errno = err;
		return -1;
	}
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

RCM_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			       struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ax;
	int ret;

	if (!id || !attr)
		return rcm_err(EINVAL);
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, attr, sizeof(*attr));
	ax.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ax.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
	ax.pd = pd;
	ret = rdma_create_srq_ex(id, &ax);
	memcpy(attr, &ax, sizeof(*attr));
	return ret;
}

RCM_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
	destroy_cqs(id);
}
