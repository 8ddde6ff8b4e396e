/* SPDX-License-Identifier: MIT */
/*
 * QP ownership for cepd: which process owns a QP on an RDMA device, from the
 * kernel's RDMA resource tracking (NETLINK_RDMA, the source `rdma resource
 * show qp` reads). cepd compares the answer with a client's SO_PEERCRED pid
 * before it binds a CM id to that QP. Any thread may call it at any time.
 */
#ifndef CEP_SERVICE_QP_OWNER_H
#define CEP_SERVICE_QP_OWNER_H

#include <stdint.h>
#include <sys/types.h>

/*
 * The pid of the process that owns QP @qpn on RDMA device @ibdev (e.g. "rxe0"),
 * from the kernel's RDMA resource tracking (NETLINK_RDMA, RDMA_NLDEV_CMD_RES_QP_GET).
 * 0 and *pid; -ENOENT no such QP (or no such device); -EOPNOTSUPP no resource
 * tracking; other -errno. Beyond those:
 *   -EPERM   the QP exists and belongs to the kernel (no pid: an in-kernel
 *            ULP's QP, or QP0/QP1);
 *   -ESRCH   the QP exists but the kernel reports no live owner: the thread
 *            that created it has exited (the kernel keeps the creating
 *            thread, not the process, and drops its pid when that thread
 *            is gone, even if the rest of the process lives on);
 *   -EPROTO  a malformed or truncated reply;
 *   -ETIMEDOUT no reply within 5 s, or datagrams from another process
 *            (dropped) still arriving 5 s after the call began;
 *   -EINVAL  NULL arguments, an empty or over-long device name, or a QPN
 *            wider than 24 bits.
 * *pid is written only on success.
 *
 * Owner: the kernel records the thread that called ibv_create_qp; *pid is
 * that thread's process (the thread's own id when it is the main thread,
 * else its Tgid from /proc), the same id SO_PEERCRED gives for a socket.
 * @expect: the process the caller expects (cepd: its client's pid), or 0.
 * It changes no answer, only its cost: a creating thread whose id is
 * @expect is that process's main thread, so the check of the thread's
 * process (a pidfd_open() and a close()) is skipped; one that is another
 * thread of @expect is found as such by one lookup of
 * /proc/@expect/task/<thread> instead of a status file's read.
 *
 * Pid namespaces: the kernel shows a QP only to a caller in the pid
 * namespace of the QP's creator (kernel QPs only in the initial one) and
 * reports the pid as seen from there; a QP of a process in another
 * namespace is -ENOENT. cepd must therefore run in the pid namespace of its
 * clients (the initial one, as a system service), with /proc of that
 * namespace mounted. RDMA devices in another network namespace (exclusive
 * netns mode) are -ENOENT.
 *
 * The answer is a snapshot: the QP may be destroyed and its number reused
 * right after; callers that need more hold a reference on their side.
 *
 * Any thread, any time: a call has a netlink socket to itself, taken from
 * a pool of at most four idle ones (or opened) and given back when the
 * call answered 0 (closed otherwise); the other shared state is a small
 * cache of device indexes by name, checked against the device handle of
 * every reply and looked up again when it is out of date (a mutex each,
 * held only to copy an entry). Blocking: usually one netlink round trip
 * (the doit: a sendto() and a recvmsg()); a QP in RESET, QP0/1 or an old
 * kernel costs a dump of the device's QPs; a QP created by a thread other
 * than @expect's main thread costs a /proc lookup (a faccessat), and, when
 * that thread is not @expect's, a pidfd_open() and for a thread other than
 * a main thread a /proc status read. Not for a CM callback.
 */
int cepd_qp_owner(const char *ibdev, uint32_t qpn, pid_t expect, pid_t *pid);

#endif
