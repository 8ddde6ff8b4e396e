/* SPDX-License-Identifier: MIT */
/*
 * The remote CM context's libibverbs glue (cep/verbs.h on a context of
 * cep_cm_attach()): the QP attributes an id negotiated and the COMM_EST
 * notice, asked of cepd, which holds the ids. Built with libibverbs only.
 * Same contracts as the local cep_cm_init_qp_attr / cep_cm_qp_event.
 */
#include <errno.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "cm/cm_remote.h"
#include "service/proto.h"

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
	if (ev->event_type != IBV_EVENT_COMM_EST)
		return -EOPNOTSUPP;
	if (!ev->element.qp)
		return -EINVAL;
	return cmr_cm_call(cm, CEPD_QP_EVENT, ev->element.qp->qp_num, (uint32_t)ev->event_type);
}
