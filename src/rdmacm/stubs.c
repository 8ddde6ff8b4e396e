/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, what is out of scope: rsockets
 * return -1 with errno ENOSYS (docs/rdmacm.md lists them). They exist so
 * that every program linked against librdmacm 44 loads (Debian's are
 * linked with BIND_NOW). rpoll and rselect keep working: rsocket() never
 * makes an rsocket here, and on other descriptors librdmacm's rpoll and
 * rselect are poll(2) and select(2) - rping and cmtime import rpoll.
 *
 * Guarantees: no state; any thread.
 */
#include <poll.h>
#include <sys/select.h>

#include <rdma/rsocket.h>

#include "rdmacm.h"

/* ---- rsockets ---------------------------------------------------------- */

RCM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

RCM_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		       struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}

RCM_EXPORT int rsocket(int domain, int type, int protocol)
{
	(void)domain, (void)type, (void)protocol;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rbind(int s, const struct sockaddr *a, socklen_t l)
{
	(void)s, (void)a, (void)l;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rlisten(int s, int backlog)
{
	(void)s, (void)backlog;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int raccept(int s, struct sockaddr *a, socklen_t *l)
{
	(void)s, (void)a, (void)l;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rconnect(int s, const struct sockaddr *a, socklen_t l)
{
	(void)s, (void)a, (void)l;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rshutdown(int s, int how)
{
	(void)s, (void)how;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rclose(int s)
{
	(void)s;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rrecv(int s, void *b, size_t n, int f)
{
	(void)s, (void)b, (void)n, (void)f;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rrecvfrom(int s, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l)
{
	(void)s, (void)b, (void)n, (void)f, (void)a, (void)l;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rrecvmsg(int s, struct msghdr *m, int f)
{
	(void)s, (void)m, (void)f;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rsend(int s, const void *b, size_t n, int f)
{
	(void)s, (void)b, (void)n, (void)f;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rsendto(int s, const void *b, size_t n, int f, const struct sockaddr *a,
			   socklen_t l)
{
	(void)s, (void)b, (void)n, (void)f, (void)a, (void)l;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rsendmsg(int s, const struct msghdr *m, int f)
{
	(void)s, (void)m, (void)f;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rread(int s, void *b, size_t n)
{
	(void)s, (void)b, (void)n;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rreadv(int s, const struct iovec *v, int n)
{
	(void)s, (void)v, (void)n;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rwrite(int s, const void *b, size_t n)
{
	(void)s, (void)b, (void)n;
	return rcm_err(ENOSYS);
}

RCM_EXPORT ssize_t rwritev(int s, const struct iovec *v, int n)
{
	(void)s, (void)v, (void)n;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rgetpeername(int s, struct sockaddr *a, socklen_t *l)
{
	(void)s, (void)a, (void)l;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rgetsockname(int s, struct sockaddr *a, socklen_t *l)
{
	(void)s, (void)a, (void)l;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rsetsockopt(int s, int level, int name, const void *v, socklen_t l)
{
	(void)s, (void)level, (void)name, (void)v, (void)l;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rgetsockopt(int s, int level, int name, void *v, socklen_t *l)
{
	(void)s, (void)level, (void)name, (void)v, (void)l;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int rfcntl(int s, int cmd, ...)
{
	(void)s, (void)cmd;
	return rcm_err(ENOSYS);
}

RCM_EXPORT off_t riomap(int s, void *b, size_t n, int prot, int flags, off_t off)
{
	(void)s, (void)b, (void)n, (void)prot, (void)flags, (void)off;
	return rcm_err(ENOSYS);
}

RCM_EXPORT int riounmap(int s, void *b, size_t n)
{
	(void)s, (void)b, (void)n;
	return rcm_err(ENOSYS);
}

RCM_EXPORT size_t riowrite(int s, const void *b, size_t n, off_t off, int flags)
{
	(void)s, (void)b, (void)n, (void)off, (void)flags;
	return (size_t)rcm_err(ENOSYS); /* librdmacm: (size_t)-1 and errno */
}
