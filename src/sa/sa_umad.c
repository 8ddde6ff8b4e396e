/* SPDX-License-Identifier: MIT */
/*
 * libcep SA client over libibumad: an agent of class 0x03 version 2 on
 * QP1 (no RMPP: one record per answer), and the process's table of shared
 * clients, one per (CA, port). libibumad only, no verbs, one descriptor
 * polled at a time: what ibsim's preload library supports.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/umad.h>

#include <cep/sa.h>

#include "sa_backend.h"

#define GSI_QKEY 0x80010000u

struct sa_umad {
	int fd;
	int agent;
	int timeout_ms;          /* the kernel's: 7/8 of an attempt (see cep_sa_get) */
	uint8_t port_num;
	char ca_name[UMAD_CA_NAME_LEN];
};

/* Any thread: the buffer is on the stack, the kernel serialises writes. */
static int umad_sa_send(void *ctx, const uint8_t *mad, size_t len,
			uint16_t dlid, uint8_t sl)
{
	struct sa_umad *u = ctx;
	uint64_t buf[(sizeof(struct ib_user_mad) + CEP_SA_MAD_SIZE) / 8 + 2];
	void *umad = buf;

	if (len > CEP_SA_MAD_SIZE)
		return -EINVAL;
	memset(buf, 0, sizeof(buf));
	memcpy(umad_get_mad(umad), mad, len);
	umad_set_addr(umad, dlid, 1, sl, (int)GSI_QKEY);
	umad_set_pkey(umad, 0);
	/*
	 * The kernel delivers a response only to a request still
	 * outstanding, so it gets a timeout; no kernel retries: sa.c resends
	 * (with the same TID) on its own clock, which is what ibsim needs.
	 */
	errno = 0;
	if (umad_send(u->fd, u->agent, umad, CEP_SA_MAD_SIZE, u->timeout_ms, 0) < 0)
		return errno ? -errno : -EIO;
	return 0;
}

/* Receive thread only. */
static int umad_sa_recv(void *ctx, uint8_t *mad, size_t len, int timeout_ms)
{
	struct sa_umad *u = ctx;
	uint64_t buf[(sizeof(struct ib_user_mad) + CEP_SA_MAD_SIZE) / 8 + 2];
	int n = CEP_SA_MAD_SIZE;
	int ret;

	memset(buf, 0, sizeof(buf));
	ret = umad_recv(u->fd, buf, &n, timeout_ms);
	if (ret < 0) {
		if (ret == -ETIMEDOUT || errno == ETIMEDOUT || errno == EAGAIN ||
		    errno == EINTR)
			return 0;
		if (ret == -ENOSPC || errno == ENOSPC)
			return 0;   /* an RMPP answer we never asked for */
		return errno ? -errno : -EIO;
	}
	/* A send whose kernel timeout ran out comes back with a status and
	 * no answer: sa.c's own timer deals with it. */
	if (umad_status(buf) != 0 || n <= 0)
		return 0;
	if ((size_t)n > len)
		n = (int)len;
	memcpy(mad, umad_get_mad(buf), (size_t)n);
	return n;
}

static int umad_sa_port(void *ctx, struct cep_sa_port *out)
{
	struct sa_umad *u = ctx;
	umad_port_t p;
	uint64_t prefix, guid;
	int ret;

	ret = umad_get_port(u->ca_name, u->port_num, &p);
	if (ret < 0)
		return ret;
	memset(out, 0, sizeof(*out));
	out->lid = (uint16_t)p.base_lid;
	out->lmc = (uint8_t)p.lmc;
	out->sm_lid = (uint16_t)p.sm_lid;
	out->sm_sl = (uint8_t)p.sm_sl;
	out->state = (uint8_t)p.state;
	out->port_num = u->port_num;
	out->pkey = p.pkeys && p.pkeys_size ? p.pkeys[0] : 0xffff;
	/* gid_prefix and port_guid are kept in network order: copy bytes. */
	prefix = p.gid_prefix;
	guid = p.port_guid;
	memcpy(out->gid, &prefix, 8);
	memcpy(out->gid + 8, &guid, 8);
	umad_release_port(&p);
	return 0;
}

static void umad_sa_close(void *ctx)
{
	struct sa_umad *u = ctx;

	umad_unregister(u->fd, u->agent);
	umad_close_port(u->fd);
	free(u);
}

static const struct sa_backend_ops umad_sa_ops = {
	.send = umad_sa_send,
	.recv = umad_sa_recv,
	.port = umad_sa_port,
	.close = umad_sa_close,
};

/* ---- the process's shared clients ---- */

struct sa_shared {
	struct sa_shared *next;
	struct cep_sa *sa;
	char ca_name[UMAD_CA_NAME_LEN];
	uint8_t port_num;
};

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sa_shared *shared;

/* Under shared_lock (from cep_sa_put). */
static void shared_unlink(struct cep_sa *sa)
{
	for (struct sa_shared **pp = &shared; *pp; pp = &(*pp)->next) {
		if ((*pp)->sa == sa) {
			struct sa_shared *s = *pp;

			*pp = s->next;
			free(s);
			return;
		}
	}
}

static const struct sa_registry shared_registry = {
	.lock = &shared_lock,
	.unlink = shared_unlink,
};

CEP_EXPORT int cep_sa_get(const struct cep_sa_attr *attr, struct cep_sa **out)
{
	struct sa_shared *s;
	struct sa_umad *u = NULL;
	umad_ca_t ca;
	uint8_t port_num;
	int ret;

	if (!attr || !out || attr->size < offsetof(struct cep_sa_attr, timeout_ms))
		return -EINVAL;
	port_num = attr->port_num ? attr->port_num : 1;
	if (umad_init() < 0)
		return -ENODEV;
	if (umad_get_ca(attr->dev_name, &ca) < 0)
		return -ENODEV;
	ret = port_num > ca.numports ? -ENODEV : 0;

	pthread_mutex_lock(&shared_lock);
	for (s = shared; s && !ret; s = s->next) {
		if (s->port_num == port_num && strcmp(s->ca_name, ca.ca_name) == 0) {
			sa_ref(s->sa);
			*out = s->sa;
			goto unlock;
		}
	}
	if (ret)
		goto unlock;
	s = calloc(1, sizeof(*s));
	u = calloc(1, sizeof(*u));
	if (!s || !u) {
		ret = -ENOMEM;
		goto fail;
	}
	memcpy(u->ca_name, ca.ca_name, sizeof(u->ca_name));
	u->ca_name[sizeof(u->ca_name) - 1] = '\0';
	u->port_num = port_num;
	/* The kernel keeps a send in its list until its timeout and refuses
	 * a send whose TID is still there: retire it a little before sa.c
	 * resends with the same TID. */
	u->timeout_ms = attr->size >= offsetof(struct cep_sa_attr, attempts) &&
		attr->timeout_ms ? (int)attr->timeout_ms : 1000;
	u->timeout_ms -= u->timeout_ms / 8;
	errno = 0;
	u->fd = umad_open_port(u->ca_name, port_num);
	if (u->fd < 0) {
		ret = errno ? -errno : u->fd;
		goto fail;
	}
	errno = 0;
	u->agent = umad_register(u->fd, CEP_SA_MGMT_CLASS, CEP_SA_CLASS_VERSION, 0, NULL);
	if (u->agent < 0) {
		ret = errno ? -errno : -EIO;
		umad_close_port(u->fd);
		goto fail;
	}
	ret = sa_create(&umad_sa_ops, u, attr, &s->sa);
	if (ret) {
		umad_unregister(u->fd, u->agent);
		umad_close_port(u->fd);
		goto fail;
	}
	sa_set_registry(s->sa, &shared_registry);
	memcpy(s->ca_name, u->ca_name, sizeof(s->ca_name));
	s->port_num = port_num;
	s->next = shared;
	shared = s;
	*out = s->sa;
	goto unlock;
fail:
	free(u);
	free(s);
unlock:
	pthread_mutex_unlock(&shared_lock);
	umad_release_ca(&ca);
	return ret;
}
