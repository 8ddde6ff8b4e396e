/* SPDX-License-Identifier: MIT */
/*
 * QP ownership for cepd: which process owns a QP on an RDMA device, from the
 * kernel's RDMA resource tracking (NETLINK_RDMA, the source `rdma resource
 * show qp` reads). cepd compares the answer with a client's SO_PEERCRED pid
 * before it binds a CM id to that QP. No state: each call opens its own
 * netlink socket, so any thread may call it at any time.
 */
#ifndef CEP_SERVICE_QP_OWNER_H
#define CEP_SERVICE_QP_OWNER_H

#include <stdint.h>
#include <sys/types.h>

/*
 * The pid of the process that owns QP @qpn on RDMA device @ibdev (e.g. "rxe0"),
 * from the kernel's RDMA resource tracking (NETLINK_RDMA, RDMA_NLDEV_CMD_RES_QP_GET).
 * 0 and *pid; -ENOENT no such QP (or no such device); -EOPNOTSUPP no resource
 * tracking; -EPERM the QP exists but is owned by the kernel (no pid: e.g. an
 * in-kernel ULP's or the GSI QP), *pid untouched; -EPROTO a malformed or
 * truncated reply; -EINVAL bad arguments; other -errno from the socket.
 *
 * Pid namespaces: the kernel reports the owner's pid as seen from the pid
 * namespace of the process that opened the netlink socket, and omits the
 * QP of a process outside that namespace, so cepd must run in the
 * namespace of its clients (the initial one, as a system service). The
 * answer is a snapshot: the QP may be destroyed and its number reused
 * right after; callers that need more hold a reference on their side.
 *
 * Any thread; blocking (one netlink round trip, a few system calls); not
 * for a CM callback's hot path.
 */
int cepd_qp_owner(const char *ibdev, uint32_t qpn, pid_t *pid);

#endif
