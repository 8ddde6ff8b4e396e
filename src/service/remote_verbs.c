/* SPDX-License-Identifier: MIT */
/*
 * The client of cepd, its libibverbs part (compiled into libcep with
 * libibverbs, not into cepd): cmr_ops' entries for cep/verbs.h on a
 * context of cep_cm_attach() - the QP attributes an id negotiated and the
 * COMM_EST and PATH_MIG notices, asked of cepd, which holds the ids. Same
 * contracts as the engine's cep_cm_init_qp_attr / cep_cm_qp_event, after
 * the same checks of the public functions.
 */
#include <errno.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "service/proto.h"
#include "service/remote.h"

int cmr_init_qp_attr(struct cep_cm_id *id, int state, struct ibv_qp_attr *attr, int *mask)
{
	uint8_t buf[sizeof(struct cepd_qp_attr_rep) + sizeof(struct ibv_qp_attr)];
	struct cepd_qp_attr_rep rep;
	int ret;

	memset(buf, 0, sizeof(buf));
	ret = cmr_id_call_out(id, CEPD_INIT_QP_ATTR, (uint32_t)state, buf, sizeof(buf));
	if (ret)
		return ret;
	memcpy(&rep, buf, sizeof(rep));
	if (rep.attr_size != sizeof(*attr))
		return -EPROTO;
	memcpy(attr, buf + sizeof(rep), sizeof(*attr));
	*mask = rep.mask;
	return 0;
}

int cmr_qp_event(struct cep_cm *cm, const struct ibv_async_event *ev)
{
	return cmr_cm_call(cm, CEPD_QP_EVENT, ev->element.qp->qp_num, (uint32_t)ev->event_type);
}
