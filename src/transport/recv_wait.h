/* SPDX-License-Identifier: MIT */
/*
 * The posting mode of the thread that runs a transport's receive function.
 * A transport whose receive thread is its own (libibumad's: not a CM worker,
 * not a sender's thread) sets cep_recv_wait_abort on that thread to a flag
 * that turns nonzero when the transport stops; the CM then waits for room
 * in a full worker ring (back-pressure into the kernel's receive queue)
 * instead of dropping the MAD. NULL (every other thread, the in-process
 * fabric's deliveries on the sender's thread, which may be a worker that
 * must never wait for another worker): a full ring is a counted drop.
 * Internal: not part of struct cep_transport_ops.
 */
#ifndef CEP_TRANSPORT_RECV_WAIT_H
#define CEP_TRANSPORT_RECV_WAIT_H

#include <stdatomic.h>

/* Set once by the receive thread before its first delivery; read by the
 * receive function on the same thread. */
extern _Thread_local const _Atomic int *cep_recv_wait_abort;

#endif /* CEP_TRANSPORT_RECV_WAIT_H */
