/* SPDX-License-Identifier: MIT */
/*
 * libcep libibumad transport: QP1 of one port of a real HCA or Soft-RoCE
 * (rxe) device, as a struct cep_transport (cep/transport.h). It registers the
 * CM management class (0x07, version 2, method Send) and so cannot coexist
 * with the kernel's ib_cm on the same port: open fails with -EBUSY then.
 */
#ifndef CEP_UMAD_H
#define CEP_UMAD_H

#include <stddef.h>
#include <stdint.h>

#include <cep/export.h>
#include <cep/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cep_umad_attr {
	size_t size;            /* sizeof(struct cep_umad_attr) */
	const char *dev_name;   /* e.g. "rxe0", "mlx5_0"; NULL: the default CA */
	uint8_t port_num;       /* 1-based; 0 means 1 */
	/* Local GID index reported by query_port and used as source GID on
	 * RoCE; CEP_UMAD_GID_AUTO picks the first IPv4-mapped RoCE v2 GID
	 * (else the first RoCE v2 GID) on Ethernet, index 0 on InfiniBand. */
	int32_t gid_index;
};

#define CEP_UMAD_GID_AUTO (-1)

/*
 * Open @attr's port and register the CM class on QP1. The transport comes
 * back through @out (t->ops is the umad implementation); nothing runs until
 * ops->start(). Errors: -EINVAL bad attr; -ENODEV no such device or port;
 * -EBUSY the CM class is already owned on this port (kernel ib_cm loaded, or
 * another process); -EACCES no permission on /dev/infiniband/umad*;
 * -ENOMEM; other -errno from libibumad/libibverbs.
 *
 * Transport contract (in addition to cep/transport.h):
 * - send(): any thread, concurrently, until destroy(). On RoCE ports the
 *   GRH is always sent (to->gid must be set; hop_limit 0 means 64); on
 *   InfiniBand it is sent when to->grh_present. to->gid_index is the local
 *   source GID index. Short MADs are zero-padded to 256 bytes.
 * - The kernel rewrites the upper 32 bits of the transaction ID of outgoing
 *   request-method MADs (all CM MADs use Send): only the low 32 bits of a
 *   TID survive the wire. Never match on the upper half.
 * - One receive thread calls the receive function; received MADs shorter
 *   than 24 bytes, receive errors and send-status (timeout) completions are
 *   counted and dropped, and the thread carries on.
 * - start/stop/destroy are serialised internally. stop() from inside the
 *   receive function cannot wait for itself: there it only asks the thread
 *   to end after the callback returns, and a later stop()/destroy() from
 *   another thread joins it. destroy() must not be called from the receive
 *   function.
 */
CEP_EXPORT int cep_umad_open(const struct cep_umad_attr *attr,
			     struct cep_transport **out);

/* Counters since open; each is read atomically (relaxed), the set is not a
 * snapshot. */
struct cep_umad_stats {
	uint64_t sent;          /* MADs accepted by the kernel */
	uint64_t send_errors;   /* umad_send failures */
	uint64_t received;      /* MADs handed to the receive function */
	uint64_t recv_errors;   /* umad_recv / poll failures */
	uint64_t recv_status;   /* completions with status != 0 (timeouts) */
	uint64_t recv_dropped;  /* too short or too long for a CM MAD */
};

/* Fill @out for a transport made by cep_umad_open (-EINVAL otherwise). Any
 * thread, until destroy(). */
CEP_EXPORT int cep_umad_get_stats(struct cep_transport *t,
				  struct cep_umad_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* CEP_UMAD_H */
