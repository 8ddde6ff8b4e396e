/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, the address and endpoint helpers: rdma_getaddrinfo /
 * rdma_freeaddrinfo (getaddrinfo(3) with rdma_cm's port spaces and QP
 * types; no ibacm route lookup) and the synchronous endpoint API
 * rdma_create_ep / rdma_destroy_ep / rdma_get_request, whose ids own a
 * private channel so that connect, accept, disconnect and get_request wait
 * for their event (librdmacm's ucma_complete).
 *
 * Guarantees: pure on caller memory apart from the ids they create; any
 * thread.
 */
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_verbs.h>

#include "rdmacm.h"

static int copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src,
		     socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return EAI_MEMORY;
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

/* rdma_addrinfo hints -> addrinfo hints (librdmacm's mapping). */
static void to_ai_hints(const struct rdma_addrinfo *h, struct addrinfo *ai)
{
	memset(ai, 0, sizeof(*ai));
	if (h->ai_flags & RAI_PASSIVE)
		ai->ai_flags |= AI_PASSIVE;
	if (h->ai_flags & RAI_NUMERICHOST)
		ai->ai_flags |= AI_NUMERICHOST;
	ai->ai_family = h->ai_family;
	if (h->ai_qp_type == IBV_QPT_RC || h->ai_qp_type == IBV_QPT_UC)
		ai->ai_socktype = SOCK_STREAM;
	else if (h->ai_qp_type == IBV_QPT_UD)
		ai->ai_socktype = SOCK_DGRAM;
	if (h->ai_port_space == RDMA_PS_TCP)
		ai->ai_protocol = IPPROTO_TCP;
	else if (h->ai_port_space == RDMA_PS_UDP || h->ai_port_space == RDMA_PS_IPOIB)
		ai->ai_protocol = IPPROTO_UDP;
}

static int from_ai(struct rdma_addrinfo *rai, const struct rdma_addrinfo *h,
		   const struct addrinfo *ai)
{
	rai->ai_qp_type = h->ai_qp_type ? h->ai_qp_type :
			  ai->ai_socktype == SOCK_STREAM ? IBV_QPT_RC :
			  ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : 0;
	rai->ai_port_space = h->ai_port_space ? h->ai_port_space :
			     ai->ai_protocol == IPPROTO_TCP ? RDMA_PS_TCP :
			     ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : 0;
	rai->ai_family = ai->ai_family;
	if (ai->ai_flags & AI_PASSIVE) {
		rai->ai_flags = RAI_PASSIVE;
		if (ai->ai_canonname)
			rai->ai_src_canonname = strdup(ai->ai_canonname);
		return copy_addr(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
	}
	if (ai->ai_canonname)
		rai->ai_dst_canonname = strdup(ai->ai_canonname);
	return copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
}

RCM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
				const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	struct rdma_addrinfo *rai;
	int ret = 0;

	if ((!service && !node && !hints) || !res)
		return rcm_err(EINVAL);
	ret = rcm_init();
	if (ret)
		return rcm_err(-ret);
	if (!hints)
		hints = &nohints;
	if (hints->ai_family == AF_IB)
		return EAI_FAMILY; /* InfiniBand addressing (AF_IB): not supported */
	rai = calloc(1, sizeof(*rai));
	if (!rai)
		return EAI_MEMORY;
	if (node || service) {
		struct addrinfo aih, *ai;

		to_ai_hints(hints, &aih);
		ret = getaddrinfo(node, service, hints == &nohints ? NULL : &aih, &ai);
		if (ret) {
			free(rai);
			return ret;
		}
		ret = from_ai(rai, hints, ai);
		freeaddrinfo(ai);
	} else {
		rai->ai_flags = hints->ai_flags;
		rai->ai_family = hints->ai_family;
		rai->ai_qp_type = hints->ai_qp_type;
		rai->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_len)
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, hints->ai_dst_addr,
					hints->ai_dst_len);
	}
	if (!ret && !rai->ai_src_len && hints->ai_src_len)
		ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, hints->ai_src_addr,
				hints->ai_src_len);
	if (ret) {
		rdma_freeaddrinfo(rai);
		return ret;
	}
	*res = rai;
	return 0;
}

RCM_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_connect);
		free(res->ai_route);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = next;
	}
}

RCM_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
			      struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct rcm_id *r;
	int ret = rcm_init();

	if (ret)
		return rcm_err(-ret);
	if (!id || !res)
		return rcm_err(EINVAL);
	if (res->ai_port_space != RDMA_PS_TCP && res->ai_port_space != RDMA_PS_UDP)
		return rcm_err(ENOSYS);
	r = rcm_id_new(NULL, NULL, (enum rdma_port_space)res->ai_port_space,
		       (enum ibv_qp_type)res->ai_qp_type);
	if (!r)
		return rcm_err(ENOMEM);
	if (res->ai_flags & RAI_PASSIVE) {
		ret = rdma_bind_addr(&r->id, res->ai_src_addr);
		if (ret)
			goto err;
		if (pd)
			r->id.pd = pd;
		if (qp_init_attr) {
			/* rdma_get_request creates each new id's QP with these */
			r->qp_init_attr = malloc(sizeof(*qp_init_attr));
			if (!r->qp_init_attr) {
				ret = rcm_err(ENOMEM);
				goto err;
			}
			*r->qp_init_attr = *qp_init_attr;
			r->qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		}
		goto out;
	}
	ret = rdma_resolve_addr(&r->id, res->ai_src_addr, res->ai_dst_addr, 2000);
	if (ret)
		goto err;
	if (res->ai_route_len) {
		ret = rcm_err(ENOSYS); /* given paths (RDMA_OPTION_IB_PATH) */
		goto err;
	}
	ret = rdma_resolve_route(&r->id, 2000);
	if (ret)
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		ret = rdma_create_qp(&r->id, pd, qp_init_attr);
		if (ret)
			goto err;
	}
	if (res->ai_connect_len) {
		r->connect_pdata = malloc(res->ai_connect_len);
		if (!r->connect_pdata) {
			ret = rcm_err(ENOMEM);
			goto err;
		}
		memcpy(r->connect_pdata, res->ai_connect, res->ai_connect_len);
		r->connect_len = res->ai_connect_len;
	}
out:
	*id = &r->id;
	return 0;
err:
	rdma_destroy_ep(&r->id);
	return ret;
}

RCM_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

RCM_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct rdma_cm_event *ev;
	struct rcm_id *l;
	int ret;

	if (!listen || !id)
		return rcm_err(EINVAL);
	l = rcm_id_of(listen);
	if (!l->sync)
		return rcm_err(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	ret = rdma_get_cm_event(listen->channel, &ev);
	if (ret)
		return ret;
	if (ev->event == RDMA_CM_EVENT_REJECTED) {
		ret = rcm_err(ECONNREFUSED);
	} else if (ev->status) {
		ret = rcm_err(ev->status < 0 ? -ev->status : ev->status);
	} else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		ret = rcm_err(EINVAL);
	} else if (l->qp_init_attr) {
		struct ibv_qp_init_attr attr = *l->qp_init_attr;

		ret = rdma_create_qp(ev->id, listen->pd, &attr);
	}
	if (ret) {
		listen->event = ev;
		return ret;
	}
	*id = ev->id;
	(*id)->event = ev;
	return 0;
}
