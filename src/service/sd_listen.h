/* SPDX-License-Identifier: MIT */
/*
 * Socket activation for cepd without libsystemd: the listening socket
 * systemd hands over by the sd_listen_fds(3) protocol (LISTEN_PID,
 * LISTEN_FDS, first fd 3), as debian/cepd.socket passes it.
 */
#ifndef CEP_SERVICE_SD_LISTEN_H
#define CEP_SERVICE_SD_LISTEN_H

/*
 * The socket systemd passed to this process: when LISTEN_PID is this
 * process's pid and LISTEN_FDS is 1, fd 3, checked to be an AF_UNIX
 * SOCK_SEQPACKET socket that listens; it is made close-on-exec and
 * LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are removed from the
 * environment, so a second call (or a child) finds nothing.
 * Returns 3, or:
 *   -ENOENT      nothing passed to this process (no LISTEN_PID, one for
 *                another process, or LISTEN_FDS absent or 0): cepd binds
 *                its socket itself;
 *   -EINVAL      a malformed LISTEN_PID/LISTEN_FDS, LISTEN_FDS above 1,
 *                or fd 3 does not listen;
 *   -EBADF       fd 3 is not open;  -ENOTSOCK  fd 3 is not a socket;
 *   -EAFNOSUPPORT not AF_UNIX;      -EPROTOTYPE not SOCK_SEQPACKET.
 * On any error but -ENOENT the unit is misconfigured; the variables are
 * still removed and fd 3 is left as it was.
 *
 * Call once, at start-up, before any thread exists (it edits the
 * environment, which is not thread-safe).
 */
int cepd_sd_listen_fd(void);

#endif
