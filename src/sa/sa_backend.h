/* SPDX-License-Identifier: MIT */
/*
 * libcep SA client (private): the port underneath a struct cep_sa. The
 * libibumad backend (sa_umad.c) is the real one; tests plug in a fake SA.
 */
#ifndef CEP_SA_BACKEND_H
#define CEP_SA_BACKEND_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cep/sa.h>

struct sa_backend_ops {
	/* Send one 256-byte MAD to QP1 of @dlid on @sl with the GSI Q_Key.
	 * Any thread, concurrently. 0 or -errno. */
	int (*send)(void *ctx, const uint8_t *mad, size_t len,
		    uint16_t dlid, uint8_t sl);
	/* The receive thread only: wait up to @timeout_ms for one MAD; its
	 * length, 0 if none came, or -errno. Must return within the time. */
	int (*recv)(void *ctx, uint8_t *mad, size_t len, int timeout_ms);
	/* Read the port now. Any thread. 0 or -errno. */
	int (*port)(void *ctx, struct cep_sa_port *out);
	/* After the receive thread has ended. */
	void (*close)(void *ctx);
};

/* A client over @ops with one reference; the last cep_sa_put stops its
 * receive thread and calls ops->close. Reads the port once (its error is
 * returned) and starts the receive thread. */
int sa_create(const struct sa_backend_ops *ops, void *ctx,
	      const struct cep_sa_attr *attr, struct cep_sa **out);

/* The process's table of shared clients (sa_umad.c). cep_sa_put drops a
 * registered client's reference under *lock and, for the last one, calls
 * unlink(sa) there before destroying it; sa_ref is called under *lock. */
struct sa_registry {
	pthread_mutex_t *lock;
	void (*unlink)(struct cep_sa *sa);
};

void sa_set_registry(struct cep_sa *sa, const struct sa_registry *reg);
void sa_ref(struct cep_sa *sa);

#endif /* CEP_SA_BACKEND_H */
