/* SPDX-License-Identifier: MIT */
/*
 * Connection parameters for a QP (cep/qp.h): what INIT/RTR/RTS need, filled
 * from the CM's messages on each side with the kernel CM's mapping of every
 * field. Pure functions on caller-owned values: no shared state, no locks,
 * no libibverbs (the CM stores the result in each id; cep/verbs.h turns it
 * into struct ibv_qp_attr).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <cep/qp.h>

#define LINK_IB  1
#define LINK_ETH 2

uint8_t cep_qp_ack_timeout(uint8_t ack_delay, uint8_t packet_life_time)
{
	/* log2(2^(plt+1) + 2^delay), rounded the kernel's way: the larger
	 * exponent, plus one when the smaller is within one of it. */
	unsigned a = (unsigned)packet_life_time + 1, b = ack_delay;
	unsigned hi = a > b ? a : b, lo = a > b ? b : a;
	unsigned t = hi + (lo + 1 >= hi ? 1 : 0);

	return (uint8_t)(t > 31 ? 31 : t);
}

static int path_empty(const struct cep_path *cp)
{
	static const struct cep_path zero;

	return memcmp(cp, &zero, sizeof(zero)) == 0;
}

static int port_ok(const struct cep_port_info *port)
{
	return port && port->port_num >= 1 &&
	       (port->link_layer == LINK_IB || port->link_layer == LINK_ETH);
}

/* One CM path as an address vector towards @remote_lid/@remote_gid. */
static void path_from_cm(struct cep_qp_path *q, const struct cep_path *cp,
			 const struct cep_port_info *port, uint16_t remote_lid,
			 const uint8_t remote_gid[16])
{
	int eth = port->link_layer == LINK_ETH;

	memset(q, 0, sizeof(*q));
	q->dlid = eth ? 0 : remote_lid; /* RoCE: LIDs are permissive or 0 */
	q->sl = cp->sl & 0xf;
	q->static_rate = cp->packet_rate & 0x3f;
	/* RoCE always routes by GID; on IB a non-local subnet needs a GRH. */
	q->is_global = eth || !cp->subnet_local;
	q->sgid_index = port->gid_index;
	/* 0 is no usable TTL on RoCE: same default as the umad transport. */
	q->hop_limit = (eth && cp->hop_limit == 0) ? 64 : cp->hop_limit;
	q->traffic_class = cp->traffic_class;
	q->flow_label = cp->flow_label & 0xfffff;
	memcpy(q->dgid, remote_gid, 16);
	q->port_num = port->port_num;
	q->pkey_index = 0;
}

static uint32_t access_for(const struct cep_qp_params *p)
{
	uint32_t a = CEP_QP_ACCESS_LOCAL_WRITE | CEP_QP_ACCESS_REMOTE_WRITE;

	/* As the kernel CM: reads and atomics only when we accept them. */
	if ((p->transport == CEP_TS_RC || p->transport == CEP_TS_EXTENDED) &&
	    p->max_dest_rd_atomic)
		a |= CEP_QP_ACCESS_REMOTE_READ | CEP_QP_ACCESS_REMOTE_ATOMIC;
	return a;
}

static void params_reset(struct cep_qp_params *p, const struct cep_port_info *port)
{
	memset(p, 0, sizeof(*p));
	p->size = sizeof(*p);
	p->link_layer = port->link_layer;
	p->port_num = port->port_num;
	p->pkey_index = 0;
}

int cep_qp_params_active(struct cep_qp_params *p, const struct cep_port_info *port,
			 const struct cep_cm_conn_param *conn)
{
	uint8_t mtu;

	/* a caller built before flow_control existed is still whole */
	if (!p || !port_ok(port) || !conn ||
	    conn->size < offsetof(struct cep_cm_conn_param, flow_control) ||
	    conn->qpn < 2 || conn->qpn > 0xffffff || conn->starting_psn > 0xffffff ||
	    conn->path_mtu > 5 || conn->packet_life_time > 31 ||
	    conn->transport_service_type == CEP_TS_RD ||
	    conn->transport_service_type > CEP_TS_EXTENDED)
		return -EINVAL;
	/* The MTU cep_cm_connect puts in the REQ. */
	mtu = conn->path_mtu ? conn->path_mtu
			     : (port->active_mtu >= 1 && port->active_mtu <= 5 ? port->active_mtu : 5);
	params_reset(p, port);
	p->role = CEP_QP_ROLE_ACTIVE;
	p->transport = conn->transport_service_type;
	path_from_cm(&p->primary, &conn->primary, port, conn->primary.remote_lid,
		     conn->primary.remote_gid);
	p->packet_life_time = conn->packet_life_time;
	p->primary.timeout = (uint8_t)(conn->packet_life_time + 1 > 31 ? 31
					: conn->packet_life_time + 1);
	if (port->link_layer == LINK_IB && !path_empty(&conn->alternate) &&
	    conn->alternate.remote_lid) {
		path_from_cm(&p->alternate, &conn->alternate, port,
			     conn->alternate.remote_lid, conn->alternate.remote_gid);
		p->alternate.timeout = p->primary.timeout;
		p->has_alternate = 1;
	}
	p->local_qpn = conn->qpn;
	/* A CM starting PSN is where the sender's receive queue starts: the
	 * REQ's is ours to receive with and the peer's to send with. */
	p->rq_psn = conn->starting_psn;
	p->path_mtu = mtu;
	/* Until the REP says otherwise: what we asked for. */
	p->max_dest_rd_atomic = conn->responder_resources;
	p->max_rd_atomic = conn->initiator_depth;
	p->retry_count = conn->retry_count & 7;
	p->rnr_retry = conn->rnr_retry_count & 7;
	p->min_rnr_timer = 0; /* the kernel CM's value */
	p->access_flags = access_for(p);
	p->have = CEP_QP_HAVE_INIT;
	return 0;
}

int cep_qp_params_active_rep(struct cep_qp_params *p, const struct cep_rep *rep)
{
	/* an XRC initiator's peer is the target QP the REP's local EECN
	 * names (local QPN 0: the kernel's cm_rep_get_qpn) */
	int xrc = p && p->transport == CEP_TS_EXTENDED;
	uint32_t qpn = !rep ? 0 : xrc ? rep->local_eecn : rep->local_qpn;

	if (!p || !rep || p->role != CEP_QP_ROLE_ACTIVE || !(p->have & CEP_QP_HAVE_INIT) ||
	    (xrc && rep->local_qpn != 0) ||
	    qpn < 2 || qpn > 0xffffff || rep->starting_psn > 0xffffff ||
	    rep->target_ack_delay > 31 || rep->failover_accepted > 2)
		return -EINVAL;
	p->dest_qpn = qpn;
	p->sq_psn = rep->starting_psn;
	/* The peer's initiator depth bounds what we must answer, and its
	 * responder resources bound what we may have outstanding. */
	p->max_dest_rd_atomic = rep->initiator_depth;
	p->max_rd_atomic = rep->responder_resources;
	p->rnr_retry = rep->rnr_retry_count & 7;
	p->primary.timeout = cep_qp_ack_timeout(rep->target_ack_delay, p->packet_life_time);
	if (p->has_alternate) {
		p->alternate.timeout = p->primary.timeout;
		p->has_alternate = rep->failover_accepted == CEP_FAILOVER_ACCEPTED;
	}
	p->access_flags = access_for(p);
	p->have |= CEP_QP_HAVE_RTR | CEP_QP_HAVE_RTS;
	return 0;
}

int cep_qp_params_passive(struct cep_qp_params *p, const struct cep_port_info *port,
			  const struct cep_req *req)
{
	if (!p || !port_ok(port) || !req || req->local_qpn < 2 || req->local_qpn > 0xffffff ||
	    req->starting_psn > 0xffffff || req->path_mtu < 1 || req->path_mtu > 5 ||
	    req->transport_service_type == CEP_TS_RD ||
	    (req->transport_service_type == CEP_TS_EXTENDED &&
	     req->extended_transport_type != CEP_EXT_TRANSPORT_XRC) ||
	    req->transport_service_type > CEP_TS_EXTENDED)
		return -EINVAL;
	params_reset(p, port);
	p->role = CEP_QP_ROLE_PASSIVE;
	p->transport = req->transport_service_type;
	/* The REQ's path seen from here: its local end is our remote. */
	path_from_cm(&p->primary, &req->primary, port, req->primary.local_lid,
		     req->primary.local_gid);
	/* The requester computed the whole ACK timeout of the path. The
	 * kernel's round trip through packet life time maps 0 to 1. */
	p->primary.timeout = req->primary.local_ack_timeout ? req->primary.local_ack_timeout : 1;
	if (port->link_layer == LINK_IB && !path_empty(&req->alternate) &&
	    req->alternate.local_lid) {
		path_from_cm(&p->alternate, &req->alternate, port, req->alternate.local_lid,
			     req->alternate.local_gid);
		p->alternate.timeout = req->alternate.local_ack_timeout ?
				       req->alternate.local_ack_timeout : 1;
		p->has_alternate = 1;
	}
	p->dest_qpn = req->local_qpn;
	p->sq_psn = req->starting_psn; /* the requester receives from here */
	p->path_mtu = req->path_mtu;
	/* Until the accept: the requester's offer mirrored. */
	p->max_dest_rd_atomic = req->initiator_depth;
	p->max_rd_atomic = req->responder_resources;
	p->retry_count = req->retry_count & 7;
	p->rnr_retry = req->rnr_retry_count & 7;
	p->min_rnr_timer = 0;
	p->access_flags = access_for(p);
	p->have = CEP_QP_HAVE_INIT; /* RTR needs our RQ PSN: the accept's */
	return 0;
}

int cep_qp_params_passive_accept(struct cep_qp_params *p, const struct cep_cm_accept_param *acc)
{
	if (!p || !acc || acc->size < offsetof(struct cep_cm_accept_param, flow_control) ||
	    p->role != CEP_QP_ROLE_PASSIVE ||
	    !(p->have & CEP_QP_HAVE_INIT) || acc->qpn < 2 || acc->qpn > 0xffffff ||
	    acc->starting_psn > 0xffffff || acc->failover_accepted > 2)
		return -EINVAL;
	p->local_qpn = acc->qpn;
	p->rq_psn = acc->starting_psn;
	p->max_dest_rd_atomic = acc->responder_resources;
	p->max_rd_atomic = acc->initiator_depth;
	if (acc->failover_accepted != CEP_FAILOVER_ACCEPTED)
		p->has_alternate = 0;
	p->access_flags = access_for(p);
	p->have |= CEP_QP_HAVE_RTR | CEP_QP_HAVE_RTS;
	return 0;
}
