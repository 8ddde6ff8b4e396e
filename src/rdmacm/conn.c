/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, connections: rdma_connect, rdma_accept,
 * rdma_reject, rdma_disconnect, rdma_establish, rdma_init_qp_attr,
 * rdma_notify, and the translation of libcep's CM events into rdma_cm
 * events (the kernel's cma_ib_handler / cma_ib_req_handler and librdmacm's
 * rdma_get_cm_event processing together):
 *
 *   REQ / SIDR_REQ received  -> CONNECT_REQUEST on a new id (listener's)
 *   REP received, id has QP  -> ESTABLISHED: when the application takes it,
 *                               QP to RTR and RTS and the RTU sent
 *   REP received, no QP      -> CONNECT_RESPONSE (rdma_establish sends RTU)
 *   RTU received             -> ESTABLISHED (passive)
 *   rdma_notify(COMM_EST)    -> ESTABLISHED (passive, before the RTU)
 *   REJ received             -> REJECTED, status = reason, QP to ERR
 *   REQ/REP/SIDR_REQ timeout -> UNREACHABLE, status -ETIMEDOUT
 *   DREQ or DREP received    -> DISCONNECTED (once); DREQ timeout: -ETIMEDOUT
 *   timewait over            -> TIMEWAIT_EXIT
 *   SIDR_REP received        -> ESTABLISHED with the UD address, or
 *                               UNREACHABLE, status = SIDR status
 *
 * Guarantees: the translation runs on the id's libcep worker with the id's
 * mutex held, queues at most one event and makes no verbs call (the CM
 * worker stays free for MADs). The QP transitions librdmacm makes for the
 * application - RTR/RTS and the RTU at REP, ERR at REJ - happen, as there,
 * when the application takes the event (rcm_event_taken), under the id's
 * mutex, so they never race rdma_destroy_qp.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/ib.h>

#include <cep/rdma_cm.h>
#include <cep/verbs.h>

#include "cm/cm_internal.h" /* cm_request_drop, cm_*_nowait */
#include "ib.h"
#include "rdmacm.h"

/* ---- QPs and the port's CM ------------------------------------------------ */

int rcm_cep_create(struct rcm_id *r)
{
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = rcm_cep_handler,
				     .context = &r->hdr };
	struct cep_cm *cm;
	int ret;

	if (!r->port)
		return -EINVAL;
	ret = rcm_port_cm(r->port, &cm);
	if (!ret)
		ret = cep_cm_create_id(cm, &ia, &r->cep);
	if (!ret)
		rcm_id_get(r); /* libcep's, until DESTROYED */
	return ret;
}

/* The registry entry of @qpn on @p, created when @create. Caller holds
 * p->qpn_mtx. */
static struct rcm_qpn **qpn_slot(struct rcm_port *p, uint32_t qpn)
{
	struct rcm_qpn **pp;

	if (!p->qpns)
		p->qpns = calloc(RCM_QPN_BUCKETS, sizeof(*p->qpns));
	if (!p->qpns)
		return NULL;
	for (pp = &p->qpns[qpn % RCM_QPN_BUCKETS]; *pp; pp = &(*pp)->next)
		if ((*pp)->qpn == qpn)
			break;
	return pp;
}

int rcm_qp_register(struct rcm_id *r, uint32_t qpn)
{
	struct rcm_qpn **pp, *q;
	struct cep_cm *cm;
	int ret;

	if (r->qpn_registered == qpn)
		return 0;
	ret = r->port ? rcm_port_cm(r->port, &cm) : -EINVAL;
	if (ret)
		return ret;
	rcm_qp_unregister(r);
	pthread_mutex_lock(&r->port->qpn_mtx);
	pp = qpn_slot(r->port, qpn);
	if (!pp) {
		ret = -ENOMEM;
	} else if (*pp) {
		/* Another id registered this number and the kernel handed it
		 * to a new QP since, so that QP is gone (ibv_destroy_qp, not
		 * rdma_destroy_qp): its connection ends, the number is ours.
		 * The other id's later unregister finds the entry taken. */
		cm_qp_destroy_nowait(cm, qpn); /* the register follows it */
		ret = cm_qp_register_nowait(cm, qpn);
		if (!ret)
			(*pp)->owner = r;
	} else {
		q = malloc(sizeof(*q));
		/* through cepd without a round trip: its refusal is the
		 * error of the connect or accept that names the QP */
		ret = q ? cm_qp_register_nowait(cm, qpn) : -ENOMEM;
		if (!ret) {
			q->qpn = qpn;
			q->owner = r;
			q->next = NULL;
			*pp = q;
		} else {
			free(q);
		}
	}
	pthread_mutex_unlock(&r->port->qpn_mtx);
	if (!ret)
		r->qpn_registered = qpn;
	return ret;
}

void rcm_qp_unregister(struct rcm_id *r)
{
	struct rcm_qpn **pp, *q = NULL;
	struct cep_cm *cm;

	if (!r->qpn_registered)
		return;
	cm = atomic_load_explicit(&r->port->cm, memory_order_acquire);
	pthread_mutex_lock(&r->port->qpn_mtx);
	pp = qpn_slot(r->port, r->qpn_registered);
	if (pp && *pp && (*pp)->owner == r) {
		q = *pp;
		*pp = q->next;
		if (cm) /* no answer to wait for: cepd's round trip saved */
			cm_qp_destroy_nowait(cm, r->qpn_registered);
	}
	pthread_mutex_unlock(&r->port->qpn_mtx);
	free(q);
	r->qpn_registered = 0;
}

int rcm_qp_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	return qp ? ibv_modify_qp(qp, &a, IBV_QP_STATE) : 0;
}

static uint8_t dev_max(int v)
{
	return (uint8_t)(v > 255 ? 255 : v < 0 ? 0 : v);
}

/* The attributes for @state (kernel rdma_init_qp_attr): INIT before any
 * connection; after it, libcep's glue from the exchanged messages. Caller
 * holds r->mtx; a UD id's first INIT may ask the SA (rcm_qkey: IPoIB's
 * space). 0 or -errno. */
static int get_qp_attr(struct rcm_id *r, enum ibv_qp_state state, struct ibv_qp_attr *a,
		       int *mask)
{
	struct cep_qp_params p;
	uint16_t pk, pkey_index = 0;
	int ret;

	memset(a, 0, sizeof(*a));
	if (!r->port)
		return -EINVAL;
	/* the id's P_Key's place in the port's table (cma_ib_init_qp_attr:
	 * ib_find_cached_pkey; -ENOENT when the port has it not) */
	pk = ntohs(r->id.route.addr.addr.ibaddr.pkey);
	ret = state == IBV_QPS_INIT ? rcm_pkey_index(r->port, pk ? pk : 0xffff, &pkey_index) : 0;
	if (ret)
		return ret;
	if (r->id.qp_type == IBV_QPT_UD) {
		a->qp_state = state;
		*mask = IBV_QP_STATE;
		if (state == IBV_QPS_INIT) {
			/* cma_ib_init_qp_attr: the id's Q_Key, set now if not yet */
			ret = rcm_qkey(r, &a->qkey);
			if (ret)
				return ret;
			a->pkey_index = pkey_index;
			a->port_num = r->id.port_num;
			*mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
		} else if (state == IBV_QPS_RTS) {
			a->sq_psn = 0;
			*mask |= IBV_QP_SQ_PSN;
		} else if (state != IBV_QPS_RTR) {
			return -EINVAL;
		}
		return 0;
	}
	p = r->qpp;
	if (!(p.have & CEP_QP_HAVE_INIT)) {
		/* No connection yet: no remote access (cma_ib_init_qp_attr). */
		if (state != IBV_QPS_INIT)
			return -EINVAL;
		a->qp_state = IBV_QPS_INIT;
		a->pkey_index = pkey_index;
		a->port_num = r->id.port_num;
		a->qp_access_flags = 0;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		return 0;
	}
	if (p.role == CEP_QP_ROLE_PASSIVE && !(p.have & CEP_QP_HAVE_RTR)) {
		/* Before the accept: what it will send (ib_cm gives RTR/RTS
		 * from REQ_RCVD on). */
		struct cep_cm_accept_param acc = {
			.size = sizeof(acc),
			.qpn = r->id.qp ? r->id.qp->qp_num : (p.local_qpn ? p.local_qpn : 2),
			.starting_psn = r->seq,
			.responder_resources = (uint8_t)(r->resp_res < dev_max(r->port->dev->attr.max_qp_rd_atom) ?
				r->resp_res : dev_max(r->port->dev->attr.max_qp_rd_atom)),
			.initiator_depth = (uint8_t)(r->init_depth < dev_max(r->port->dev->attr.max_qp_init_rd_atom) ?
				r->init_depth : dev_max(r->port->dev->attr.max_qp_init_rd_atom)),
		};

		ret = cep_qp_params_passive_accept(&p, &acc);
		if (ret)
			return ret;
	}
	ret = cep_qp_params_init_attr(&p, state, a, mask);
	if (ret)
		return ret == -ENODATA ? -EINVAL : ret;
	if (state == IBV_QPS_INIT)
		a->pkey_index = pkey_index; /* the glue knows no port's table */
	if (state == IBV_QPS_RTR)
		a->rq_psn = r->seq;
	if (state == IBV_QPS_RTS && r->ack_timeout_set)
		a->timeout = r->ack_timeout;
	return 0;
}

RCM_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
				 int *qp_attr_mask)
{
	struct rcm_id *r;
	int ret;

	if (!id || !qp_attr || !qp_attr_mask)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	ret = get_qp_attr(r, qp_attr->qp_state, qp_attr, qp_attr_mask);
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(-ret) : 0;
}

/* INIT again (now with remote access), RTR, RTS, as librdmacm's
 * ucma_modify_qp_rtr/rts; 0xff keeps the negotiated depths. */
static int qp_to_rts(struct rcm_id *r, struct ibv_qp *qp, uint8_t resp_res, uint8_t init_depth)
{
	static const enum ibv_qp_state steps[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	struct ibv_qp_attr a;
	int mask, ret;

	for (unsigned i = 0; i < 3; i++) {
		ret = get_qp_attr(r, steps[i], &a, &mask);
		if (ret)
			return ret;
		if (steps[i] == IBV_QPS_RTR && resp_res != RDMA_MAX_RESP_RES)
			a.max_dest_rd_atomic = resp_res;
		if (steps[i] == IBV_QPS_RTS && init_depth != RDMA_MAX_INIT_DEPTH)
			a.max_rd_atomic = init_depth;
		ret = ibv_modify_qp(qp, &a, mask);
		if (ret)
			return -ret;
	}
	return 0;
}

/* A new QP and ECE, as librdmacm's init_ece and set_local_ece: our ECE
 * becomes the device's (none when it does not support ECE); on the
 * passive side the device is told the peer's, or only our vendor when
 * the peer's differs. Caller holds r->mtx. */
int rcm_qp_ece(struct rcm_id *r, struct ibv_qp *qp)
{
	struct ibv_ece ece = { 0 };
	int ret = ibv_query_ece(qp, &ece);

	if (ret && ret != EOPNOTSUPP)
		return -ret;
	r->local_ece.vendor_id = ece.vendor_id;
	r->local_ece.options = ece.options;
	if (!r->remote_ece.vendor_id)
		return 0;
	if (r->remote_ece.vendor_id != r->local_ece.vendor_id) {
		ece.vendor_id = r->local_ece.vendor_id;
		ece.options = 0;
	} else {
		ece = r->remote_ece;
	}
	ret = ibv_set_ece(qp, &ece);
	if (ret && ret != EOPNOTSUPP)
		return -ret;
	memset(&ece, 0, sizeof(ece));
	ret = ibv_query_ece(qp, &ece);
	if (ret && ret != EOPNOTSUPP)
		return -ret;
	r->local_ece.options = ece.options;
	return 0;
}

/* Initialise a new QP for @r (librdmacm ucma_init_conn_qp/ucma_init_ud_qp)
 * and register a connected (RC, UC, XRC) QP's number with the CM. Caller
 * holds r->mtx. */
int rcm_qp_init(struct rcm_id *r, struct ibv_qp *qp)
{
	static const enum ibv_qp_state ud_steps[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	struct ibv_qp_attr a;
	int mask, ret;

	if (r->id.qp_type == IBV_QPT_UD) {
		for (unsigned i = 0; i < 3; i++) {
			ret = get_qp_attr(r, ud_steps[i], &a, &mask);
			if (!ret)
				ret = -ibv_modify_qp(qp, &a, mask);
			if (ret)
				return ret;
		}
		return 0;
	}
	ret = get_qp_attr(r, IBV_QPS_INIT, &a, &mask);
	if (!ret)
		ret = -ibv_modify_qp(qp, &a, mask);
	if (!ret)
		ret = rcm_qp_register(r, qp->qp_num);
	return ret;
}

/* ---- active side ------------------------------------------------------- */

static void peer_addr(const struct rcm_id *r, struct cep_mad_addr *to)
{
	memset(to, 0, sizeof(*to));
	to->grh_present = 1;
	to->gid_index = r->sgid_index;
	to->hop_limit = 64;
	to->traffic_class = r->tos;
	to->qpn = 1;
	to->qkey = CEP_QP1_QKEY;
	memcpy(to->gid, r->id.route.addr.addr.ibaddr.dgid.raw, 16);
}

/* The CMA header (rdma_cm's IP addressing) + the user's data into @buf;
 * AF_IB has no header (the kernel's cma_user_data_offset is 0 for it,
 * cma_format_hdr writes nothing): the user's data alone. */
static int cma_pdata(const struct rcm_id *r, const struct rdma_conn_param *param,
		     uint8_t *buf, size_t size)
{
	const struct sockaddr *s = &r->id.route.addr.src_addr, *d = &r->id.route.addr.dst_addr;
	uint8_t user[RCM_PDATA_MAX];
	struct cep_cma_hdr h;
	size_t n = 0;

	memset(&h, 0, sizeof(h));
	h.ip_version = s->sa_family == AF_INET ? 4 : 6;
	h.src_port = rcm_addr_port(s);
	h.dst_port = rcm_addr_port(d);
	if (h.ip_version == 4) {
		memcpy(h.src_addr + 12, &((const struct sockaddr_in *)(const void *)s)->sin_addr, 4);
		memcpy(h.dst_addr + 12, &((const struct sockaddr_in *)(const void *)d)->sin_addr, 4);
	} else {
		memcpy(h.src_addr, &((const struct sockaddr_in6 *)(const void *)s)->sin6_addr, 16);
		memcpy(h.dst_addr, &((const struct sockaddr_in6 *)(const void *)d)->sin6_addr, 16);
	}
	/* rdma_create_ep's ai_connect goes first (librdmacm). */
	if (r->connect_len + (param ? param->private_data_len : 0) > sizeof(user))
		return -EINVAL;
	if (r->connect_len) {
		memcpy(user, r->connect_pdata, r->connect_len);
		n = r->connect_len;
	}
	if (param && param->private_data && param->private_data_len) {
		memcpy(user + n, param->private_data, param->private_data_len);
		n += param->private_data_len;
	}
	if (s->sa_family == AF_IB) {
		if (n > size)
			return -EINVAL;
		if (n)
			memcpy(buf, user, n);
		return (int)n;
	}
	n = (size_t)cep_cma_hdr_encode(&h, user, n, buf, size);
	return (int)n < 0 ? -EINVAL : (int)n; /* too long for the message: EINVAL (kernel) */
}

/* The RDMA read depths of @r from @p, librdmacm's way: RDMA_MAX_* (or no
 * @p) means as much as the device allows - the connect side takes the
 * device's maximum, the accept side (@from_req) keeps what the REQ
 * offered, at most that. Caller holds r->mtx. */
static void set_depths(struct rcm_id *r, const struct rdma_conn_param *p, int from_req)
{
	const struct ibv_device_attr *da = &r->port->dev->attr;
	uint8_t imax = dev_max(da->max_qp_init_rd_atom), rmax = dev_max(da->max_qp_rd_atom);

	if (p && p->initiator_depth != RDMA_MAX_INIT_DEPTH)
		r->init_depth = p->initiator_depth;
	else if (!from_req || r->init_depth > imax)
		r->init_depth = imax;
	if (p && p->responder_resources != RDMA_MAX_RESP_RES)
		r->resp_res = p->responder_resources;
	else if (!from_req || r->resp_res > rmax)
		r->resp_res = rmax;
}

/* librdmacm's ucma_valid_param for the TCP port space. */
static int valid_param(const struct rcm_id *r, const struct rdma_conn_param *p)
{
	const struct ibv_device_attr *da = &r->port->dev->attr;

	if (r->id.ps != RDMA_PS_TCP)
		return 0;
	if (!r->id.qp && !p)
		return -EINVAL;
	if (!p)
		return 0;
	if (p->responder_resources != RDMA_MAX_RESP_RES &&
	    p->responder_resources > dev_max(da->max_qp_rd_atom))
		return -EINVAL;
	if (p->initiator_depth != RDMA_MAX_INIT_DEPTH &&
	    p->initiator_depth > dev_max(da->max_qp_init_rd_atom))
		return -EINVAL;
	return 0;
}

static int connect_ud(struct rcm_id *r, const struct rdma_conn_param *param)
{
	uint8_t buf[CEP_SIDR_REQ_PRIVATE_DATA_SIZE];
	struct cep_cm_sidr_param sp = { .size = sizeof(sp) };
	struct cep_mad_addr to;
	int n = cma_pdata(r, param, buf, sizeof(buf));

	if (n < 0)
		return n;
	peer_addr(r, &to);
	sp.service_id = rcm_service_id(r, 1);
	sp.pkey = 0xffff;
	if (r->route_given && r->id.route.path_rec) {
		/* InfiniBand: the path's LID, SL and P_Key; a GRH only off
		 * the subnet (hop limit > 1), as ib_init_ah_attr_from_path */
		const struct ibv_sa_path_rec *pr = r->id.route.path_rec;

		to.lid = be16toh(pr->dlid);
		to.sl = pr->sl & 0xf;
		to.grh_present = r->port->link_layer == IBV_LINK_LAYER_ETHERNET ||
				 pr->hop_limit > 1;
		sp.pkey = be16toh(pr->pkey);
	}
	sp.timeout = RCM_CM_RESPONSE_TIMEOUT;
	sp.max_cm_retries = RCM_MAX_CM_RETRIES;
	sp.private_data = buf;
	sp.private_data_len = (size_t)n;
	sp.peer = &to;
	return cep_cm_sidr_req(r->cep, &sp);
}

static int connect_rc(struct rcm_id *r, const struct rdma_conn_param *param)
{
	uint8_t buf[CEP_REQ_PRIVATE_DATA_SIZE];
	struct cep_cm_conn_param cp = { .size = sizeof(cp) };
	struct cep_port_info pinfo;
	struct cep_mad_addr to;
	int n = cma_pdata(r, param, buf, sizeof(buf)), ret;

	if (n < 0)
		return n;
	cp.qpn = r->id.qp ? r->id.qp->qp_num : param->qp_num;
	cp.srq = (uint8_t)(r->id.qp ? r->id.qp->srq != NULL : param->srq);
	ret = rcm_qp_register(r, cp.qpn);
	if (ret)
		return ret;
	peer_addr(r, &to);
	rcm_port_info(r, &pinfo);
	cp.service_id = rcm_service_id(r, 1);
	memcpy(cp.primary.local_gid, r->id.route.addr.addr.ibaddr.sgid.raw, 16);
	memcpy(cp.primary.remote_gid, r->id.route.addr.addr.ibaddr.dgid.raw, 16);
	cp.primary.hop_limit = 64;
	cp.primary.traffic_class = r->tos;
	/* ib_cm: the ACK timeout from the device's ACK delay and the path */
	cp.primary.local_ack_timeout = cep_qp_ack_timeout(r->port->dev->attr.local_ca_ack_delay,
							  RCM_ROCE_PACKET_LIFE);
	cp.packet_life_time = RCM_ROCE_PACKET_LIFE;
	cp.starting_psn = r->seq;
	cp.pkey = 0xffff;
	cp.responder_resources = r->resp_res;
	cp.initiator_depth = r->init_depth;
	cp.remote_cm_response_timeout = RCM_CM_RESPONSE_TIMEOUT;
	cp.local_cm_response_timeout = RCM_CM_RESPONSE_TIMEOUT;
	cp.max_cm_retries = RCM_MAX_CM_RETRIES;
	cp.retry_count = param ? (param->retry_count > 7 ? 7 : param->retry_count) : 7;
	cp.rnr_retry_count = param ? (param->rnr_retry_count > 7 ? 7 : param->rnr_retry_count) : 7;
	cp.path_mtu = pinfo.active_mtu;
	/* XRC: the initiator's REQ (libcep's engine leaves out what the
	 * kernel's cm_format_req does for IB_QPT_XRC_INI) */
	cp.transport_service_type = r->id.qp_type == IBV_QPT_UC ? CEP_TS_UC :
				    r->id.qp_type == IBV_QPT_XRC_SEND ? CEP_TS_EXTENDED : CEP_TS_RC;
	cp.manual_rtu = 1; /* RTU once the QP is in RTS */
	cp.ece_vendor_id = r->local_ece.vendor_id; /* librdmacm's REQ: ours */
	cp.ece_options = r->local_ece.options;
	cp.private_data = buf;
	cp.private_data_len = (size_t)n;
	cp.peer = &to;
	/* a route the application gave: the REQ's path is that record */
	if (r->route_given && r->id.route.path_rec) {
		ret = rcm_ib_conn_from_path(r->id.route.path_rec,
					    r->port->dev->attr.local_ca_ack_delay,
					    r->port->link_layer == IBV_LINK_LAYER_ETHERNET, &cp, &to);
		if (ret)
			return ret;
	}
	ret = cep_qp_params_active(&r->qpp, &pinfo, &cp);
	if (!ret)
		ret = cm_connect_nowait(r->cep, &cp);
	return ret;
}

RCM_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct rcm_id *r;
	int ret;

	if (!id)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	if (r->state != RCM_ROUTE_RESOLVED || r->cep || !r->port) {
		ret = -EINVAL;
		goto out;
	}
	if (r->id.qp_type == IBV_QPT_XRC_RECV) {
		/* A receive id's QP is a target: it answers REQs and sends
		 * none (the kernel would send an RC REQ naming it) */
		ret = -EINVAL;
		goto out;
	}
	ret = valid_param(r, conn_param);
	if (ret)
		goto out;
	if (r->id.qp_type != IBV_QPT_UD && !r->id.qp && (!conn_param || !conn_param->qp_num)) {
		ret = -EINVAL;
		goto out;
	}
	set_depths(r, conn_param, 0);
	ret = rcm_cep_create(r);
	if (ret)
		goto out;
	ret = r->id.qp_type == IBV_QPT_UD ? connect_ud(r, conn_param) : connect_rc(r, conn_param);
	if (ret) {
		/* Nothing was sent: the id stays usable for another try. */
		cep_cm_destroy_id(r->cep);
		r->cep = NULL;
		goto out;
	}
	free(r->connect_pdata);
	r->connect_pdata = NULL;
	r->connect_len = 0;
	r->state = RCM_CONNECT;
out:
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(-ret) : rcm_complete(r);
}

RCM_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	struct rcm_id *r;
	int ret;

	if (!id || id->qp)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	ret = r->cep ? cm_rtu_nowait(r->cep) : -EINVAL;
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(-ret) : 0;
}

/* ---- passive side ------------------------------------------------------ */

RCM_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cep_cm_accept_param acc = { .size = sizeof(acc) };
	struct rcm_id *r;
	int ret;

	if (!id)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	if (r->state != RCM_CONNECT || !r->cep || !r->port ||
	    (r->id.qp_type != IBV_QPT_UD && !r->have_req)) {
		ret = -EINVAL;
		goto out;
	}
	ret = valid_param(r, conn_param);
	if (ret)
		goto out;
	if (!r->id.qp && !conn_param) {
		ret = -EINVAL;
		goto out;
	}
	acc.private_data = conn_param ? conn_param->private_data : NULL;
	acc.private_data_len = conn_param && conn_param->private_data ?
			       conn_param->private_data_len : 0;
	/* more than the REP / SIDR_REP carries: EINVAL, as the kernel's
	 * ib_send_cm_rep / ib_send_cm_sidr_rep (libcep says -EMSGSIZE) */
	if (acc.private_data_len > (r->id.qp_type == IBV_QPT_UD ? CEP_SIDR_REP_PRIVATE_DATA_SIZE :
				    CEP_REP_PRIVATE_DATA_SIZE)) {
		ret = -EINVAL;
		goto out;
	}
	set_depths(r, conn_param, 1);
	acc.qpn = r->id.qp ? r->id.qp->qp_num : conn_param->qp_num;
	if (r->id.qp_type == IBV_QPT_UD) {
		uint32_t qkey;

		/* SIDR_REP with the id's Q_Key (kernel cma_send_sidr_rep):
		 * rdma_cm's, or in IPoIB's space the broadcast group's */
		ret = rcm_qkey(r, &qkey);
		if (!ret)
			ret = cep_cm_sidr_rep(r->cep, CEP_SIDR_SUCCESS, acc.qpn, qkey,
					      acc.private_data, acc.private_data_len);
		pthread_mutex_unlock(&r->mtx);
		return ret ? rcm_err(-ret) : 0;
	}
	acc.srq = (uint8_t)(r->id.qp ? r->id.qp->srq != NULL : conn_param->srq);
	acc.starting_psn = r->seq;
	acc.responder_resources = r->resp_res;
	acc.initiator_depth = r->init_depth;
	acc.target_ack_delay = r->port->dev->attr.local_ca_ack_delay;
	acc.failover_accepted = CEP_FAILOVER_ACCEPTED; /* as ib_cm: RoCE has no alternate */
	/* librdmacm's REP: the vendor the REQ named, our options */
	acc.ece_vendor_id = r->remote_ece.vendor_id;
	acc.ece_options = r->local_ece.options;
	acc.rnr_retry_count = conn_param ? (conn_param->rnr_retry_count > 7 ? 7 :
					    conn_param->rnr_retry_count) : 7;
	ret = rcm_qp_register(r, acc.qpn);
	if (!ret)
		ret = cep_qp_params_passive_accept(&r->qpp, &acc);
	/* The QP is ready before the REP leaves (librdmacm rdma_accept). */
	if (!ret && r->id.qp)
		ret = qp_to_rts(r, r->id.qp, r->resp_res, r->init_depth);
	if (!ret)
		ret = cm_accept_nowait(r->cep, &acc);
	if (ret == -EINVAL && cep_cm_id_state(r->cep) == CEP_CM_IDLE) {
		/* The request ended before this answer: the requester gave
		 * up (the CM's half-open expiry) or rejected it. The kernel's
		 * REQ_RCVD never expires, so there rdma_accept succeeds and
		 * the REP's timeout or the peer's REJ ends the connection;
		 * here that event (UNREACHABLE or REJECTED) is queued, or
		 * will be once we unlock. Failing instead killed cmtime's
		 * server in a storm ("failure accepting: Invalid argument",
		 * issue 21). */
		rcm_qp_error(r->id.qp);
		ret = 0;
	} else if (ret) {
		rcm_qp_error(r->id.qp);
	}
out:
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(-ret) : rcm_complete(r);
}

RCM_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data,
			   uint8_t private_data_len)
{
	struct rcm_id *r;
	int ret;

	if (!id)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	if (!private_data)
		private_data_len = 0;
	/* more than the REJ / SIDR_REP carries: EINVAL, as the kernel's
	 * ib_send_cm_rej / ib_send_cm_sidr_rep (libcep says -EMSGSIZE) */
	if (private_data_len > (r->id.qp_type == IBV_QPT_UD ? CEP_SIDR_REP_PRIVATE_DATA_SIZE :
				CEP_REJ_PRIVATE_DATA_SIZE))
		return rcm_err(EINVAL);
	pthread_mutex_lock(&r->mtx);
	if (!r->cep)
		ret = -EINVAL;
	else if (r->id.qp_type == IBV_QPT_UD)
		ret = cep_cm_sidr_rep(r->cep, CEP_SIDR_REJECT, 0, 0, private_data, private_data_len);
	else
		ret = cep_cm_reject(r->cep, CEP_REJ_CONSUMER_DEFINED, NULL, 0, private_data,
				    private_data_len);
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(-ret) : 0;
}

/* ECE needs no device support here, as in librdmacm: the values travel in
 * the REQ (vendor ID, attribute modifier) and REP, and a QP is told of
 * them when the device supports it (rcm_qp_ece, rep_ece). Both calls
 * refuse an id that has a QP, as librdmacm's. */
RCM_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	struct rcm_id *r;

	if (!id || id->qp || !ece || !ece->vendor_id || ece->comp_mask)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	r->local_ece.vendor_id = ece->vendor_id;
	r->local_ece.options = ece->options;
	pthread_mutex_unlock(&r->mtx);
	return 0;
}

RCM_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	struct rcm_id *r;

	if (!id || id->qp || !ece)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	ece->vendor_id = r->remote_ece.vendor_id;
	ece->options = r->remote_ece.options;
	pthread_mutex_unlock(&r->mtx);
	ece->comp_mask = 0;
	return 0;
}

/* REJ reason 35 "vendor option not supported", as librdmacm's (the
 * kernel's ucma lets 28 and 35 through); a UD id: rdma_reject's SIDR_REP. */
RCM_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			       uint8_t private_data_len)
{
	struct rcm_id *r;
	int ret;

	if (!id || id->qp_type == IBV_QPT_UD)
		return rdma_reject(id, private_data, private_data_len);
	r = rcm_id_of(id);
	if (!private_data)
		private_data_len = 0;
	if (private_data_len > CEP_REJ_PRIVATE_DATA_SIZE)
		return rcm_err(EINVAL); /* as the kernel's ib_send_cm_rej */
	pthread_mutex_lock(&r->mtx);
	ret = r->cep ? cep_cm_reject(r->cep, CEP_REJ_VENDOR_OPTION_NOT_SUPPORTED, NULL, 0,
				     private_data, private_data_len) : -EINVAL;
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(-ret) : 0;
}

RCM_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct rcm_id *r;
	int ret = 0;

	if (!id)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	pthread_mutex_lock(&r->mtx);
	if (!r->cep || !r->id.verbs) {
		ret = -EINVAL;
		goto out;
	}
	/* The QP first: posted work flushes (librdmacm ucma_shutdown). */
	ret = -rcm_qp_error(r->id.qp);
	if (ret)
		goto out;
	/* Start the disconnect, or answer the peer's DREQ with a DREP: both
	 * are cep_cm_disconnect's (0 also when already disconnecting). Its
	 * -EINVAL before the connection is up is ignored, as the kernel's
	 * rdma_disconnect ignores ib_send_cm_dreq's and ib_send_cm_drep's -
	 * so through cepd it need not be waited for (cm_disconnect_nowait). */
	if (r->id.qp_type != IBV_QPT_UD)
		(void)cm_disconnect_nowait(r->cep);
out:
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(-ret) : rcm_complete(r);
}

RCM_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	struct rcm_id *r;
	int ret;

	if (!id)
		return rcm_err(EINVAL);
	r = rcm_id_of(id);
	/* The kernel's rdma_notify -> ib_cm_notify: COMM_EST establishes a
	 * passive connection whose RTU has not come (ESTABLISHED follows as
	 * an event; a later RTU is a duplicate); PATH_MIG moves the CM's
	 * messages to the alternate path the QP migrated to (cm_migrate) -
	 * refused (EINVAL) with none, as on RoCE, where the kernel's would
	 * address them by an empty one. */
	if (event != IBV_EVENT_COMM_EST && event != IBV_EVENT_PATH_MIG)
		return rcm_err(EINVAL);
	pthread_mutex_lock(&r->mtx);
	if (!r->cep || r->id.qp_type == IBV_QPT_UD)
		ret = -EINVAL;
	else if (event == IBV_EVENT_COMM_EST)
		ret = cep_cm_notify_established(r->cep);
	else
		ret = cep_cm_migrate(r->cep);
	pthread_mutex_unlock(&r->mtx);
	return ret ? rcm_err(-ret) : 0;
}

/* ---- libcep events -> rdma_cm events -------------------------------------- */

static void copy_pdata(struct rcm_event *e, const uint8_t *p, size_t len, int ud)
{
	if (len > RCM_PDATA_MAX)
		len = RCM_PDATA_MAX;
	if (p && len)
		memcpy(e->pdata, p, len);
	if (ud) {
		e->ev.param.ud.private_data = len ? e->pdata : NULL;
		e->ev.param.ud.private_data_len = (uint8_t)len;
	} else {
		e->ev.param.conn.private_data = len ? e->pdata : NULL;
		e->ev.param.conn.private_data_len = (uint8_t)len;
	}
}

static void refuse(struct cep_cm_id *cid, int ud, unsigned why)
{
	cep_cm_id_set_context(cid, NULL);
	if (ud)
		cep_cm_sidr_rep(cid, why, 0, 0, NULL, 0);
	else
		cep_cm_reject(cid, why, NULL, 0, NULL, 0);
	cep_cm_destroy_id(cid);
}

/* No memory to take the request: as the kernel when cma_ib_req_handler
 * fails with -ENOMEM (its conn_id, or ucma's event), ib_cm's cm_destroy_id
 * drops a REQ unanswered so the requester retries it, and answers a
 * SIDR_REQ with status 2 "reject" (it does whatever the error). Through
 * cepd a REQ cannot be dropped silently: REJ 28 there. */
static void refuse_no_memory(struct cep_cm_id *cid, int ud)
{
	if (!ud && cm_request_drop(cid) == 0) {
		cep_cm_id_set_context(cid, NULL);
		cep_cm_destroy_id(cid);
		return;
	}
	refuse(cid, ud, ud ? CEP_SIDR_REJECT : CEP_REJ_CONSUMER_DEFINED);
}

/* Does listener @l take a request for @h (kernel cma_match_private_data)? */
static int listener_match(struct rcm_id *l, const struct cep_cma_hdr *h, int *exact)
{
	const struct sockaddr *la = &l->id.route.addr.src_addr;
	int fam = h->ip_version == 4 ? AF_INET : AF_INET6;
	uint8_t g[16];

	*exact = 0;
	if (l->any_addr)
		return la->sa_family == fam ||
		       (la->sa_family == AF_INET6 && fam == AF_INET && !l->afonly);
	if (la->sa_family != fam)
		return 0;
	rcm_addr_gid(la, g);
	if (fam == AF_INET ? memcmp(g + 12, h->dst_addr + 12, 4) : memcmp(g, h->dst_addr, 16))
		return 0;
	*exact = 1;
	return 1;
}

static struct rcm_id *pick_listener(struct rcm_service *s, const struct cep_cma_hdr *h)
{
	struct rcm_id *best = NULL;
	int exact;

	pthread_mutex_lock(&s->mtx);
	for (unsigned i = 0; i < s->nlisteners; i++) {
		if (!listener_match(s->listeners[i], h, &exact))
			continue;
		best = s->listeners[i];
		if (exact)
			break;
	}
	if (best)
		rcm_id_get(best);
	pthread_mutex_unlock(&s->mtx);
	return best;
}

/* An AF_IB listener of @s (cma_match_private_data: AF_IB matches any
 * request), a reference taken; NULL when none. */
static struct rcm_id *pick_ib_listener(struct rcm_service *s)
{
	struct rcm_id *l = NULL;

	pthread_mutex_lock(&s->mtx);
	for (unsigned i = 0; i < s->nlisteners && !l; i++)
		if (s->listeners[i]->id.route.addr.src_addr.sa_family == AF_IB)
			l = s->listeners[i];
	if (l)
		rcm_id_get(l);
	pthread_mutex_unlock(&s->mtx);
	return l;
}

/* A new id's AF_IB addresses (the kernel's cma_save_ib_info): source our
 * GID, the REQ's P_Key, flow label and service ID, mask all ones;
 * destination the requester's GID, same P_Key and flow label. A SIDR_REQ
 * has no path: the source the listener's; the destination the SIDR_REQ's
 * P_Key and, when the MAD came with a GRH (always on RoCE), its source
 * GID. Stricter than the kernel's cma_save_ib_info, which leaves a
 * SIDR id's destination without either. */
static void set_ib_addrs(struct rcm_id *c, const struct rcm_id *l, const struct cep_cm_event *ev,
			 int ud)
{
	struct sockaddr_ib *src = (struct sockaddr_ib *)(void *)&c->id.route.addr.src_storage;
	struct sockaddr_ib *dst = (struct sockaddr_ib *)(void *)&c->id.route.addr.dst_storage;

	memset(&c->id.route.addr.src_storage, 0, sizeof(c->id.route.addr.src_storage));
	memset(&c->id.route.addr.dst_storage, 0, sizeof(c->id.route.addr.dst_storage));
	src->sib_family = dst->sib_family = AF_IB;
	if (ud) {
		memcpy(src, &l->id.route.addr.src_storage, sizeof(*src));
		dst->sib_pkey = htobe16(ev->msg.u.sidr_req.partition_key);
		if (ev->from.grh_present)
			memcpy(dst->sib_addr.sib_raw, ev->from.gid, 16);
	} else {
		const struct cep_req *rq = &ev->msg.u.req;

		src->sib_pkey = dst->sib_pkey = htobe16(rq->partition_key);
		src->sib_flowinfo = dst->sib_flowinfo = htobe32(rq->primary.flow_label);
		memcpy(src->sib_addr.sib_raw, rq->primary.remote_gid, 16);
		memcpy(dst->sib_addr.sib_raw, rq->primary.local_gid, 16);
		src->sib_sid = htobe64(rq->service_id);
	}
	src->sib_sid_mask = htobe64(~0ull);
}

static void set_addr(struct sockaddr_storage *ss, int v4, const uint8_t a[16], uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (v4) {
		struct sockaddr_in *s = (struct sockaddr_in *)(void *)ss;

		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, a + 12, 4);
		s->sin_port = htons(port);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)(void *)ss;

		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_addr, a, 16);
		s->sin6_port = htons(port);
	}
}

/* A REQ or SIDR_REQ for service @s: a new id for the listener it names.
 * A request no listener can take is refused the way the kernel's ib_cm
 * refuses it when cma_ib_req_handler fails (a header that does not parse,
 * no listener for its address: cma_ib_id_from_event; a listener of
 * another QP type: cma_ib_check_req_qp_type; a listener being destroyed,
 * no longer in RDMA_CM_LISTEN: -ECONNABORTED): it destroys the new cm_id,
 * so REJ 28 "consumer defined" (cm_destroy_id in REQ_RCVD) or SIDR_REP
 * status 2 "reject" (cm_destroy_id in SIDR_REQ_RCVD). Out of memory:
 * refuse_no_memory. CM worker, from rcm_cep_handler. */
static void on_request(struct cep_cm_id *cid, const struct cep_cm_event *ev,
		       struct rcm_service *s)
{
	int ud = ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED;
	uint64_t sid = ud ? ev->msg.u.sidr_req.service_id : ev->msg.u.req.service_id;
	struct cep_port_info pinfo;
	struct rcm_id *l, *c = NULL;
	struct rcm_channel *ch;
	struct rcm_event *e = NULL;
	struct cep_cma_hdr h;
	struct rcm_dev *d;
	size_t off = CEP_CMA_HDR_SIZE; /* where the user's data starts */
	int ib, af_ib = 0, gone;

	if (!s || s->hdr.kind != RCM_KIND_SERVICE) {
		refuse(cid, ud, ud ? CEP_SIDR_REJECT : CEP_REJ_CONSUMER_DEFINED);
		return;
	}
	/* An IP listener the header names; else an AF_IB listener, which
	 * takes the request with or without a header, all of its private
	 * data the user's */
	l = cep_cma_hdr_decode(ev->private_data, ev->private_data_len, sid, &h) ? NULL :
	    pick_listener(s, &h);
	if (!l && (l = pick_ib_listener(s)) != NULL) {
		af_ib = 1;
		off = 0;
	}
	if (!l) {
		refuse(cid, ud, ud ? CEP_SIDR_REJECT : CEP_REJ_CONSUMER_DEFINED);
		return;
	}
	/* qp_type is set at creation: no lock needed */
	/* the listener's QP type is the request's (the kernel's
	 * cma_ib_check_req_qp_type): an XRC REQ is for a receive id */
	if (l->id.qp_type != (ud ? IBV_QPT_UD :
			      ev->msg.u.req.transport_service_type == CEP_TS_UC ? IBV_QPT_UC :
			      ev->msg.u.req.transport_service_type == CEP_TS_EXTENDED ?
			      IBV_QPT_XRC_RECV : IBV_QPT_RC)) {
		refuse(cid, ud, ud ? CEP_SIDR_REJECT : CEP_REJ_CONSUMER_DEFINED);
		rcm_id_put(l);
		return;
	}
	pthread_mutex_lock(&l->mtx);
	ch = l->sync ? NULL : rcm_channel_of(l->id.channel);
	gone = l->destroying;
	c = gone ? NULL : rcm_id_new(ch, l->id.context, l->id.ps, l->id.qp_type);
	pthread_mutex_unlock(&l->mtx);
	if (c)
		e = rcm_event_new(l, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e) {
		if (c)
			rcm_id_abandon(c);
		if (gone) /* rdma_destroy_id has begun: no longer listening */
			refuse(cid, ud, ud ? CEP_SIDR_REJECT : CEP_REJ_CONSUMER_DEFINED);
		else
			refuse_no_memory(cid, ud);
		rcm_id_put(l);
		return;
	}
	d = s->port->dev;
	c->port = s->port;
	c->sgid_index = ev->from.gid_index;
	c->id.verbs = d->verbs;
	c->id.pd = rcm_dev_pd(d);
	c->id.port_num = s->port->port_num;
	c->state = RCM_CONNECT;
	c->cr_pending = 1;
	c->reuseaddr = l->reuseaddr;
	c->afonly = l->afonly;
	if (!ud) { /* the REQ's ECE (librdmacm ucma_process_conn_req) */
		c->remote_ece.vendor_id = ev->msg.u.req.vendor_id;
		c->remote_ece.options = ev->msg.hdr.attr_mod;
	}
	if (af_ib) {
		set_ib_addrs(c, l, ev, ud);
	} else {
		set_addr(&c->id.route.addr.src_storage, h.ip_version == 4, h.dst_addr, h.dst_port);
		set_addr(&c->id.route.addr.dst_storage, h.ip_version == 4, h.src_addr, h.src_port);
	}
	rcm_addr_gid(&c->id.route.addr.src_addr, c->id.route.addr.addr.ibaddr.sgid.raw);
	rcm_addr_gid(&c->id.route.addr.dst_addr, c->id.route.addr.addr.ibaddr.dgid.raw);
	ib = s->port->link_layer == IBV_LINK_LAYER_INFINIBAND && !ud;
	c->id.route.path_rec = malloc((ib ? 2 : 1) * sizeof(*c->id.route.path_rec));
	e->ev.id = &c->id;
	e->ev.listen_id = &l->id;
	if (ud) {
		copy_pdata(e, ev->private_data + off, CEP_SIDR_REQ_PRIVATE_DATA_SIZE - off, 1);
	} else {
		const struct cep_req *rq = &ev->msg.u.req;

		/* The requester's path, seen from here. */
		memcpy(c->id.route.addr.addr.ibaddr.sgid.raw, rq->primary.remote_gid, 16);
		memcpy(c->id.route.addr.addr.ibaddr.dgid.raw, rq->primary.local_gid, 16);
		c->tos = rq->primary.traffic_class;
		rcm_port_info(c, &pinfo);
		c->have_req = cep_qp_params_passive(&c->qpp, &pinfo, rq) == 0;
		/* ib_cm's view: our responder resources are their depth */
		c->resp_res = rq->initiator_depth;
		c->init_depth = rq->responder_resources;
		e->ev.param.conn.responder_resources = rq->initiator_depth;
		e->ev.param.conn.initiator_depth = rq->responder_resources;
		e->ev.param.conn.flow_control = rq->end_to_end_flow_control;
		e->ev.param.conn.retry_count = rq->retry_count;
		e->ev.param.conn.rnr_retry_count = rq->rnr_retry_count;
		e->ev.param.conn.srq = rq->srq;
		e->ev.param.conn.qp_num = rq->local_qpn;
		copy_pdata(e, ev->private_data + off, CEP_REQ_PRIVATE_DATA_SIZE - off, 0);
	}
	if (c->id.route.path_rec && ib) {
		/* InfiniBand: the REQ's paths (kernel cma_ib_new_conn_id), its
		 * P_Key the route's */
		c->id.route.num_paths = rcm_ib_paths_from_req(&ev->msg.u.req,
							      c->id.route.path_rec);
		c->id.route.addr.addr.ibaddr.pkey = c->id.route.path_rec[0].pkey;
	} else if (c->id.route.path_rec) {
		rcm_fill_path(c, c->id.route.path_rec);
		c->id.route.num_paths = 1;
	}
	/* From here on the connection's events are c's. */
	c->cep = cid;
	rcm_id_get(c); /* libcep's, until DESTROYED */
	cep_cm_id_set_context(cid, &c->hdr);
	rcm_push_request(e);
	rcm_id_put(l);
}

/* An event for a connection, @r->mtx held. */
static void on_conn_event(struct rcm_id *r, struct cep_cm_id *cid, const struct cep_cm_event *ev)
{
	struct rcm_event *e = NULL;

	switch (ev->type) {
	case CEP_CM_EV_REP_RECEIVED: {
		const struct cep_rep *rp = &ev->msg.u.rep;

		/* The QP moves and the RTU leaves when the application takes
		 * the event (librdmacm's rdma_get_cm_event): rcm_event_taken. */
		if (cep_qp_params_active_rep(&r->qpp, rp))
			r->rep_bad = 1;
		r->rep_ece.vendor_id = (uint32_t)rp->vendor_id_h << 16 |
				       (uint32_t)rp->vendor_id_m << 8 | rp->vendor_id_l;
		r->rep_ece.options = ev->msg.hdr.attr_mod;
		e = rcm_event_new(r, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
		if (!e)
			break;
		e->work = RCM_WORK_REP;
		e->ev.param.conn.responder_resources = rp->initiator_depth;
		e->ev.param.conn.initiator_depth = rp->responder_resources;
		e->ev.param.conn.flow_control = rp->end_to_end_flow_control;
		e->ev.param.conn.rnr_retry_count = rp->rnr_retry_count;
		e->ev.param.conn.srq = rp->srq;
		/* an XRC target names its QP in the local EECN (the
		 * kernel's cm_format_rep_event) */
		e->ev.param.conn.qp_num = r->id.qp_type == IBV_QPT_XRC_SEND ? rp->local_eecn :
					  rp->local_qpn;
		copy_pdata(e, rp->private_data, CEP_REP_PRIVATE_DATA_SIZE, 0);
		break;
	}
	case CEP_CM_EV_RTU_RECEIVED:
	case CEP_CM_EV_ESTABLISHED: /* rdma_notify(COMM_EST): passive only (manual_rtu) */
		e = rcm_event_new(r, RDMA_CM_EVENT_ESTABLISHED, 0);
		break;
	case CEP_CM_EV_REJ_RECEIVED:
		e = rcm_event_new(r, RDMA_CM_EVENT_REJECTED, ev->status);
		if (!e)
			break;
		e->work = RCM_WORK_QP_ERR;
		copy_pdata(e, ev->msg.u.rej.private_data, CEP_REJ_PRIVATE_DATA_SIZE, 0);
		break;
	case CEP_CM_EV_REQ_ERROR:
	case CEP_CM_EV_REP_ERROR:
	case CEP_CM_EV_SIDR_REQ_ERROR:
		if (ev->type != CEP_CM_EV_SIDR_REQ_ERROR && ev->status < 0 &&
		    ev->status != -ETIMEDOUT) {
			/* not the peer's silence but this side's CM: cepd
			 * refused a connect or an accept sent without waiting
			 * (cm_connect_nowait: no REQ left; cm_accept_nowait:
			 * cepd has rejected the request, as the kernel's failed
			 * rdma_accept does), or has gone. After an accept the
			 * QP goes to ERR, as librdmacm's failed rdma_accept
			 * does; after a connect it stays, as after a failed
			 * rdma_connect. */
			e = rcm_event_new(r, RDMA_CM_EVENT_CONNECT_ERROR, ev->status);
			if (e && ev->type == CEP_CM_EV_REP_ERROR)
				e->work = RCM_WORK_QP_ERR;
			break;
		}
		e = rcm_event_new(r, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
		break;
	case CEP_CM_EV_DREQ_RECEIVED:
	case CEP_CM_EV_DREP_RECEIVED:
	case CEP_CM_EV_DREQ_ERROR:
		if (r->disconnected)
			break;
		r->disconnected = 1;
		r->state = RCM_DISCONNECT;
		e = rcm_event_new(r, RDMA_CM_EVENT_DISCONNECTED,
				  ev->type == CEP_CM_EV_DREQ_ERROR ? -ETIMEDOUT : 0);
		break;
	case CEP_CM_EV_TIMEWAIT_EXIT:
		e = rcm_event_new(r, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
		break;
	case CEP_CM_EV_SIDR_REP_RECEIVED: {
		const struct cep_sidr_rep *sr = &ev->msg.u.sidr_rep;
		struct ibv_ah_attr *ah;

		if (sr->status != CEP_SIDR_SUCCESS) {
			e = rcm_event_new(r, RDMA_CM_EVENT_UNREACHABLE, sr->status);
			break;
		}
		/* The peer's Q_Key must be one, and the id's own once set (its
		 * QP took it at INIT: RDMA_UDP_QKEY, IPoIB's broadcast group's),
		 * as the kernel's cma_sidr_rep_handler + cma_set_qkey: else
		 * ADDR_ERROR -EINVAL; a Q_Key taken here is the id's now. */
		if (!sr->qkey || (r->qkey && r->qkey != sr->qkey)) {
			e = rcm_event_new(r, RDMA_CM_EVENT_ADDR_ERROR, -EINVAL);
			break;
		}
		r->qkey = sr->qkey;
		e = rcm_event_new(r, RDMA_CM_EVENT_ESTABLISHED, 0);
		if (!e)
			break;
		/* The UD address of the route (ib_init_ah_attr_from_path). */
		ah = &e->ev.param.ud.ah_attr;
		ah->is_global = 1;
		if (r->route_given && r->id.route.path_rec &&
		    r->port->link_layer == IBV_LINK_LAYER_INFINIBAND) {
			const struct ibv_sa_path_rec *pr = r->id.route.path_rec;

			ah->dlid = be16toh(pr->dlid);
			ah->sl = pr->sl & 0xf;
			ah->is_global = pr->hop_limit > 1;
		}
		memcpy(ah->grh.dgid.raw, r->id.route.addr.addr.ibaddr.dgid.raw, 16);
		ah->grh.sgid_index = r->sgid_index;
		ah->grh.hop_limit = 64;
		ah->grh.traffic_class = r->tos;
		ah->port_num = r->id.port_num;
		e->ev.param.ud.qp_num = sr->qpn;
		e->ev.param.ud.qkey = sr->qkey;
		copy_pdata(e, sr->private_data, CEP_SIDR_REP_PRIVATE_DATA_SIZE, 1);
		break;
	}
	default:
		/* MRA, LAP/APR (no alternate paths on RoCE), QP_DESTROYED: nothing
		 * for the application, as from the kernel's rdma_cm. */
		break;
	}
	if (e)
		rcm_push_locked(e);
}

/* The REP's ECE on an id with a QP, as librdmacm's
 * ucma_process_conn_resp_ece: a vendor other than ours is an error
 * (-EINVAL: CONNECT_ERROR); none, or ours, goes to the device (which may
 * not support ECE: EOPNOTSUPP is fine). Caller holds r->mtx. */
static int rep_ece(struct rcm_id *r)
{
	struct ibv_ece ece = { .vendor_id = r->rep_ece.vendor_id, .options = r->rep_ece.options };
	int ret;

	if (!ece.vendor_id) {
		ece.vendor_id = r->local_ece.vendor_id;
		ece.options = 0;
	} else if (ece.vendor_id != r->local_ece.vendor_id) {
		return -EINVAL;
	}
	r->remote_ece.vendor_id = r->rep_ece.vendor_id;
	ret = ibv_set_ece(r->id.qp, &ece);
	if (ret && ret != EOPNOTSUPP)
		return -ret;
	memset(&ece, 0, sizeof(ece));
	ret = ibv_query_ece(r->id.qp, &ece);
	if (ret && ret != EOPNOTSUPP)
		return -ret;
	r->local_ece.options = ret ? 0 : ece.options;
	return 0;
}

void rcm_event_taken(struct rcm_event *e)
{
	struct rcm_id *r = e->owner;
	int ret = 0;

	pthread_mutex_lock(&r->mtx);
	if (e->work == RCM_WORK_QP_ERR) {
		rcm_qp_error(r->id.qp);
	} else if (e->work == RCM_WORK_JOIN) {
		rcm_mc_join_taken(r, e);
	} else if (e->work == RCM_WORK_REP && r->id.qp) {
		/* librdmacm ucma_process_conn_resp_ece: ECE, RTR, RTS, RTU. */
		ret = r->rep_bad ? -EINVAL : rep_ece(r);
		if (!ret)
			ret = qp_to_rts(r, r->id.qp, RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH);
		if (!ret)
			ret = r->cep ? cm_rtu_nowait(r->cep) : -EINVAL;
		if (ret) {
			/* librdmacm: CONNECT_ERROR and nothing more from this
			 * connection; the peer hears of it here (REJ). */
			rcm_qp_error(r->id.qp);
			if (r->cep)
				cep_cm_reject(r->cep, CEP_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0);
			e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
			e->ev.status = ret;
			r->connect_error = 1;
		} else {
			e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
		}
	}
	/* No QP: CONNECT_RESPONSE stays; rdma_establish sends the RTU. */
	if (e->work == RCM_WORK_REP && !r->id.qp)
		r->remote_ece = r->rep_ece;
	e->work = RCM_WORK_NONE;
	pthread_mutex_unlock(&r->mtx);
}

int rcm_cep_handler(struct cep_cm_id *cid, const struct cep_cm_event *ev)
{
	struct rcm_ctx *ctx = ev->context;
	struct rcm_id *r;

	if (ev->type == CEP_CM_EV_REQ_RECEIVED || ev->type == CEP_CM_EV_SIDR_REQ_RECEIVED) {
		on_request(cid, ev, (struct rcm_service *)ctx);
		return 0;
	}
	/* Listeners (services) and refused requests have nothing to report. */
	if (!ctx || ctx->kind != RCM_KIND_ID)
		return 0;
	r = RCM_CONTAINER(ctx, struct rcm_id, hdr);
	if (ev->type == CEP_CM_EV_DESTROYED) {
		pthread_mutex_lock(&r->mtx);
		if (r->cep == cid)
			r->cep = NULL;
		pthread_mutex_unlock(&r->mtx);
		rcm_id_put(r); /* libcep's reference */
		return 0;
	}
	pthread_mutex_lock(&r->mtx);
	if (!r->destroying && r->cep == cid)
		on_conn_event(r, cid, ev);
	pthread_mutex_unlock(&r->mtx);
	return 0;
}
