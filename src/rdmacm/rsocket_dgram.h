/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep: datagram rsockets (SOCK_DGRAM), the interface
 * rsocket.c dispatches to (rsocket_dgram.c says what they are). Every
 * call returns 0 / a count or a negative errno and changes nothing on
 * error; rsocket.c turns that into -1 and errno. Any call may run in any
 * application thread at the same time as another on the same rsocket
 * (the rsocket's mutex inside), but never concurrently with rds_destroy
 * (closing an rsocket in use is the caller's error, as close(2)).
 */
#ifndef RCM_RSOCKET_DGRAM_H
#define RCM_RSOCKET_DGRAM_H

#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct rds;

/* Queue and buffer sizes to start from (librdmacm's defaults and
 * configuration files, read by rsocket.c). */
struct rds_sizes {
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline;
};

/* A new datagram rsocket of domain AF_INET or AF_INET6 (else
 * -EAFNOSUPPORT); type's SOCK_NONBLOCK and SOCK_CLOEXEC are kept. Its
 * number is rds_fd's: the descriptor of its UDP socket. */
int rds_create(int domain, int type, const struct rds_sizes *sz, struct rds **out);
int rds_fd(const struct rds *ds);
/* Stops the service thread, then frees everything. */
void rds_destroy(struct rds *ds);

int rds_bind(struct rds *ds, const struct sockaddr *sa, socklen_t len);
int rds_connect(struct rds *ds, const struct sockaddr *sa, socklen_t len);
ssize_t rds_sendmsg(struct rds *ds, const struct iovec *iov, int iovcnt, int flags,
		    const struct sockaddr *to, socklen_t tolen);
ssize_t rds_recvmsg(struct rds *ds, const struct iovec *iov, int iovcnt, int flags,
		    struct sockaddr *from, socklen_t *fromlen);
int rds_getsockname(struct rds *ds, struct sockaddr *sa, socklen_t *len);
int rds_getpeername(struct rds *ds, struct sockaddr *sa, socklen_t *len);
int rds_setsockopt(struct rds *ds, int level, int name, const void *v, socklen_t l);
int rds_getsockopt(struct rds *ds, int level, int name, void *v, socklen_t *l);
/* F_GETFL, F_SETFL (O_NONBLOCK), F_GETFD, F_SETFD; the result of a GET. */
int rds_fcntl(struct rds *ds, int cmd, int arg);
int rds_shutdown(struct rds *ds, int how);

/* rpoll: what the rsocket is ready for, without sleeping. */
short rds_poll(struct rds *ds, short events);
/* rpoll's wait: rds_wait_begin arms the completion queues and fills
 * up to RDS_WAIT_FDS descriptors to poll(2) for events (returns how
 * many); rds_wait_end, once the poll is over, with the same events. */
#define RDS_WAIT_FDS 3
int rds_wait_begin(struct rds *ds, short events, struct pollfd *w);
void rds_wait_end(struct rds *ds, short events);

#endif /* RCM_RSOCKET_DGRAM_H */
