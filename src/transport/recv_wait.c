/* SPDX-License-Identifier: MIT */
/* The receive thread's posting mode (transport/recv_wait.h): its one
 * definition, in the transport layer so umad.c needs nothing above it. */
#include "transport/recv_wait.h"

_Thread_local const _Atomic int *cep_recv_wait_abort;
