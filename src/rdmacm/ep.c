/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, the address and endpoint helpers: rdma_getaddrinfo /
 * rdma_freeaddrinfo (getaddrinfo(3) with rdma_cm's port spaces and QP
 * types, AF_IB as librdmacm converts it; no ibacm route lookup) and the
 * synchronous endpoint API
 * rdma_create_ep / rdma_destroy_ep / rdma_get_request, whose ids own a
 * private channel so that connect, accept, disconnect and get_request wait
 * for their event (librdmacm's ucma_complete).
 *
 * Guarantees: pure on caller memory apart from the ids they create; any
 * thread.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/ib.h>
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

/* Hints asking for AF_IB results: librdmacm converts only a numeric host
 * whose hints say RAI_FAMILY; AF_IB without them answers IP addresses. */
static int af_ib_convert(const struct rdma_addrinfo *h)
{
	return h->ai_family == AF_IB && (h->ai_flags & RAI_FAMILY) &&
	       (h->ai_flags & RAI_NUMERICHOST);
}

/* rdma_addrinfo hints -> addrinfo hints (librdmacm's mapping). */
static void to_ai_hints(const struct rdma_addrinfo *h, struct addrinfo *ai)
{
	memset(ai, 0, sizeof(*ai));
	if (h->ai_flags & RAI_PASSIVE)
		ai->ai_flags |= AI_PASSIVE;
	if (h->ai_flags & RAI_NUMERICHOST)
		ai->ai_flags |= AI_NUMERICHOST;
	/* librdmacm's ucma_convert_to_ai: getaddrinfo knows no AF_IB. Asked
	 * to convert (RAI_FAMILY | RAI_NUMERICHOST), the host must be an
	 * IPv6 literal - a GID - where librdmacm would read any family's
	 * address as a sockaddr_in6; stricter, an IPv4 literal fails there. */
	if (h->ai_family != AF_IB)
		ai->ai_family = h->ai_family;
	else if (af_ib_convert(h))
		ai->ai_family = AF_INET6;
	if (h->ai_qp_type == IBV_QPT_RC || h->ai_qp_type == IBV_QPT_UC ||
	    h->ai_qp_type == IBV_QPT_XRC_SEND || h->ai_qp_type == IBV_QPT_XRC_RECV)
		ai->ai_socktype = SOCK_STREAM;
	else if (h->ai_qp_type == IBV_QPT_UD)
		ai->ai_socktype = SOCK_DGRAM;
	if (h->ai_port_space == RDMA_PS_TCP)
		ai->ai_protocol = IPPROTO_TCP;
	else if (h->ai_port_space == RDMA_PS_UDP || h->ai_port_space == RDMA_PS_IPOIB)
		ai->ai_protocol = IPPROTO_UDP;
	else if (h->ai_port_space == RDMA_PS_IB)
		/* the IB space carries either: the QP type says which */
		ai->ai_protocol = ai->ai_socktype == SOCK_STREAM ? IPPROTO_TCP :
				  ai->ai_socktype == SOCK_DGRAM ? IPPROTO_UDP : 0;
}

/* An IPv6 address -> an AF_IB one, as librdmacm's ucma_convert_in6: the
 * GID the address, P_Key 0xffff, the service ID the port space's prefix |
 * port, its mask the prefix's (and the port's when one was given). */
static int to_sib(int ps, struct sockaddr **dst, socklen_t *dst_len, const struct addrinfo *ai)
{
	const struct sockaddr_in6 *in6 = (const void *)ai->ai_addr;
	struct sockaddr_ib *sib;
	uint16_t port;
	uint64_t mask = 0;

	if (ai->ai_family != AF_INET6 || ai->ai_addrlen < sizeof(*in6))
		return EAI_FAMILY;
	sib = calloc(1, sizeof(*sib));
	if (!sib)
		return EAI_MEMORY;
	port = ntohs(in6->sin6_port);
	sib->sib_family = AF_IB;
	sib->sib_pkey = htobe16(0xffff);
	sib->sib_flowinfo = in6->sin6_flowinfo;
	memcpy(&sib->sib_addr, &in6->sin6_addr, sizeof(sib->sib_addr));
	sib->sib_sid = htobe64(((uint64_t)(unsigned)ps << 16) + port);
	if (ps)
		mask |= RDMA_IB_IP_PS_MASK;
	if (port)
		mask |= RDMA_IB_IP_PORT_MASK;
	sib->sib_sid_mask = htobe64(mask);
	sib->sib_scope_id = in6->sin6_scope_id;
	*dst = (struct sockaddr *)sib;
	*dst_len = sizeof(*sib);
	return 0;
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
	rai->ai_family = af_ib_convert(h) ? AF_IB : ai->ai_family;
	if (ai->ai_flags & AI_PASSIVE) {
		rai->ai_flags = RAI_PASSIVE;
		if (ai->ai_canonname)
			rai->ai_src_canonname = strdup(ai->ai_canonname);
		return rai->ai_family == AF_IB ?
		       to_sib(rai->ai_port_space, &rai->ai_src_addr, &rai->ai_src_len, ai) :
		       copy_addr(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
	}
	if (ai->ai_canonname)
		rai->ai_dst_canonname = strdup(ai->ai_canonname);
	return rai->ai_family == AF_IB ?
	       to_sib(rai->ai_port_space, &rai->ai_dst_addr, &rai->ai_dst_len, ai) :
	       copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
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
	enum ibv_qp_type qp_type;
	struct rcm_id *r;
	int ret = rcm_init();

	if (ret)
		return rcm_err(-ret);
	if (!id || !res)
		return rcm_err(EINVAL);
	/* the spaces rdma_create_id takes; the QP type the result's (as
	 * librdmacm's rdma_create_id2), or the space's own when it names none */
	if (res->ai_port_space != RDMA_PS_TCP && res->ai_port_space != RDMA_PS_UDP &&
	    res->ai_port_space != RDMA_PS_IB && res->ai_port_space != RDMA_PS_IPOIB)
		return rcm_err(EINVAL); /* the kernel's ucma_create_id */
	qp_type = res->ai_qp_type ? (enum ibv_qp_type)res->ai_qp_type :
		  res->ai_port_space == RDMA_PS_UDP || res->ai_port_space == RDMA_PS_IPOIB ?
		  IBV_QPT_UD : IBV_QPT_RC;
	if (res->ai_port_space == RDMA_PS_IB && qp_type != IBV_QPT_RC &&
	    qp_type != IBV_QPT_UC && qp_type != IBV_QPT_UD && qp_type != IBV_QPT_XRC_SEND &&
	    qp_type != IBV_QPT_XRC_RECV)
		return rcm_err(EINVAL); /* the kernel takes any: stricter */
	r = rcm_id_new(NULL, NULL, (enum rdma_port_space)res->ai_port_space, qp_type);
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
			r->qp_init_attr->qp_type = qp_type;
		}
		goto out;
	}
	ret = rdma_resolve_addr(&r->id, res->ai_src_addr, res->ai_dst_addr, 2000);
	if (ret)
		goto err;
	/* Paths given with the result (ibacm's, or the application's): the
	 * route is theirs, no SA query - librdmacm hands them to
	 * RDMA_OPTION_IB_PATH, which here also waits for ROUTE_RESOLVED */
	if (res->ai_route_len)
		ret = rdma_set_option(&r->id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, res->ai_route,
				      res->ai_route_len);
	else
		ret = rdma_resolve_route(&r->id, 2000);
	if (ret)
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = qp_type;
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
