/* SPDX-License-Identifier: MIT */
/*
 * Who a cepd client is: a process known by a handle that cannot be
 * recycled (a pidfd), its uid, and its capabilities read at the moment
 * they are needed, never remembered.
 *
 * How the process is learnt (the first that works):
 *   1. SO_PEERPIDFD of the accepted socket (Linux 6.5): the process that
 *      connected, pinned by the kernel.
 *   2. The HELLO's ancillary data (proto.h): SCM_CREDENTIALS, which the
 *      kernel checks against the sender, and SCM_RIGHTS carrying the
 *      sender's own pidfd. The pidfd must name a live process whose pid is
 *      the credentials' pid: the pidfd was opened before the HELLO was sent
 *      and its process has lived since, so at the send it held that pid,
 *      as did the sender; two live processes never share a pid, so they
 *      are the same process.
 * In both cases the credentials' uid must be the socket's SO_PEERCRED uid
 * (the uid the connection was made with, which is what the client is
 * charged to). A client whose identity cannot be established is refused.
 *
 * Then /proc/PID of that process is opened once and checked against the
 * pidfd (alive after the open): reads through it fail once the process is
 * gone, whatever process later gets its pid.
 *
 * Any thread; an identity is used by its client's thread only, except
 * ident_alive() (any thread, no state changed).
 */
#ifndef CEP_SERVICE_IDENTITY_H
#define CEP_SERVICE_IDENTITY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Capability bits of CapEff (linux/capability.h numbers). */
#define IDENT_CAP_NET_BIND_SERVICE 10
#define IDENT_CAP_NET_ADMIN 12
#define IDENT_CAP_NET_RAW 13

struct cepd_ident {
	pid_t pid;          /* the client process, in cepd's pid namespace */
	uid_t uid;          /* SO_PEERCRED's: what the client is charged to */
	gid_t gid;
	int pidfd;          /* -1 until known */
	int procfd;         /* /proc/PID of that process, -1 until known */
	int from_peer;      /* the pidfd came from SO_PEERPIDFD */
};

/* At accept, on the new socket @fd: SO_PEERCRED, SO_PEERPIDFD (unless the
 * environment has CEPD_NO_PEERPIDFD=1: tests of the second way), and
 * SO_PASSCRED so the HELLO carries the sender's credentials. 0, or
 * -errno (the client is refused). */
int ident_accept(int fd, struct cepd_ident *id);

/* With the HELLO's credentials @cred (NULL: none came) and the fd it
 * passed (@passed_fd, -1: none; always closed here): complete @id as the
 * head comment says. 0; -EPERM (no credentials, another uid, a passed fd
 * that is not the sender's pidfd); -ESRCH (the process is gone). */
int ident_hello(struct cepd_ident *id, const struct ucred *cred, int passed_fd);

/* Whether the client's process still lives (false once it exited, or if
 * the identity was never completed). */
bool ident_alive(const struct cepd_ident *id);

/* The client process's effective capabilities now, as they count in
 * cepd's user namespace (none for a process of another user namespace:
 * capabilities there are not capabilities here, as the kernel's capable()
 * checks them in the initial namespace): 0 and *eff (bit n = capability
 * n); -ESRCH when the process is gone. Reads /proc: blocking, cheap. */
int ident_caps(const struct cepd_ident *id, uint64_t *eff);

/* Whether the client process has capability @cap now (ident_caps). */
bool ident_capable(const struct cepd_ident *id, int cap);

/* The client process's effective gid and supplementary groups now: 0, the
 * count in *n (at most @cap written to @gids, egid first); -ESRCH. */
int ident_groups(const struct cepd_ident *id, gid_t *gids, unsigned cap, unsigned *n);

/* Close what @id holds. */
void ident_fini(struct cepd_ident *id);

#endif /* CEP_SERVICE_IDENTITY_H */
