/* SPDX-License-Identifier: MIT */
/*
 * The seam under cepd_qp_owner(): the netlink conversation and the
 * thread-to-process lookup as function pointers, so tests can stand a
 * scripted kernel in for NETLINK_RDMA and /proc (tests/service/qp_owner.c).
 * cepd itself calls only cepd_qp_owner() (qp_owner.h).
 */
#ifndef CEP_SERVICE_QP_OWNER_OPS_H
#define CEP_SERVICE_QP_OWNER_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cepd_nl_ops {
	/* Send one request (a whole netlink message) to the kernel: 0 or -errno. */
	int (*send)(void *ctx, const void *msg, size_t len);
	/* Receive one datagram from the kernel into @buf: its full length,
	 * greater than @cap when it was truncated; -errno (-ETIMEDOUT when
	 * the kernel does not answer). Datagrams from other senders are not
	 * returned. */
	ssize_t (*recv)(void *ctx, void *buf, size_t cap);
	/* The process (thread group) of thread @tid: 0 and *tgid, -ESRCH
	 * when no such thread exists any more, other -errno. */
	int (*tgid)(void *ctx, pid_t tid, pid_t *tgid);
	void *ctx;
};

/* cepd_qp_owner() over @ops (same answers, qp_owner.h). */
int cepd_qp_owner_ops(const struct cepd_nl_ops *ops, const char *ibdev,
		      uint32_t qpn, pid_t *pid);

/* The Tgid field of a /proc/<tid>/status text of @len bytes: 0 and *tgid,
 * -EPROTO when absent or malformed. */
int cepd_parse_tgid(const char *status, size_t len, pid_t *tgid);

/* cepd_qp_owner()'s thread-to-process lookup (the real /proc): the
 * process of thread @tid, when the caller expects @expect (0: none) - for
 * @expect itself and a thread of it, without reading a status file. 0
 * and *tgid, -ESRCH (no such thread), other -errno. Any thread. */
int cepd_proc_tgid(pid_t expect, pid_t tid, pid_t *tgid);

/* Empties the cache of device indexes (by name) that cepd_qp_owner() keeps
 * so that a check costs one netlink round trip; entries are validated by
 * every reply anyway, this is for tests that count requests. Any thread. */
void cepd_qp_owner_forget_devices(void);

/* The size of the receive buffer cepd_qp_owner_ops() gives ops->recv. */
#define CEPD_NL_RECV_CAP 65536u

#endif
