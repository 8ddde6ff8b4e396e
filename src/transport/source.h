/* SPDX-License-Identifier: MIT */
/*
 * A transport whose receive queue other threads read (issue 27): instead of
 * a receive thread of its own, the transport gives its queue's fd and a
 * drain, and whoever leads (cm/lead.h: an application thread that waits,
 * or a sleeping CM worker) polls the fd and drains it on its own thread, so
 * a MAD is handled where it is read, waking nobody else. Internal: not part
 * of struct cep_transport_ops (a public struct without a size field);
 * libcep's own transports register here (libibumad's at open), tests may
 * register theirs.
 */
#ifndef CEP_TRANSPORT_SOURCE_H
#define CEP_TRANSPORT_SOURCE_H

struct cep_transport;
struct cep_transport_ops;

struct cep_transport_source {
	int fd;                 /* readable (POLLIN) while a MAD waits */
	/* Read and deliver (to start()'s function) what waits now, a bounded
	 * batch, without blocking; > 0 if a MAD was delivered. Any thread,
	 * one at a time (the leader); the function it calls may run the
	 * MAD to completion there (cep_recv_wait_abort is set meanwhile:
	 * transport/recv_wait.h). */
	int (*drain)(void *ctx);
	void *ctx;
};

/* How transports of @ops are driven: @drive(t, src) fills *src and makes
 * @t's start() start no receive thread (0), or refuses (-errno: the
 * transport keeps its own thread). Once per ops, before any drive. */
void cep_transport_register_source(const struct cep_transport_ops *ops,
				   int (*drive)(struct cep_transport *t,
						struct cep_transport_source *src));

/* Make @t driven, before its start(): 0 and *src, or -EOPNOTSUPP (a
 * transport that delivers on its own threads: the in-process fabric's
 * senders, a user's transport). */
int cep_transport_drive(struct cep_transport *t, struct cep_transport_source *src);

#endif /* CEP_TRANSPORT_SOURCE_H */
