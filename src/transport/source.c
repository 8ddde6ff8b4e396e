/* SPDX-License-Identifier: MIT */
/*
 * The registry of drivable transports (transport/source.h): a few (ops,
 * drive) pairs, added once per transport kind, read on each context's
 * creation. Any thread; a mutex held for a few instructions.
 */
#include <errno.h>
#include <pthread.h>

#include <cep/transport.h>

#include "transport/source.h"

#define KINDS 8

static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
static struct {
	const struct cep_transport_ops *ops;
	int (*drive)(struct cep_transport *t, struct cep_transport_source *src);
} kinds[KINDS];                 /* lk */

void cep_transport_register_source(const struct cep_transport_ops *ops,
				   int (*drive)(struct cep_transport *t,
						struct cep_transport_source *src))
{
	pthread_mutex_lock(&lk);
	for (int i = 0; i < KINDS; i++)
		if (kinds[i].ops == ops || !kinds[i].ops) {
			kinds[i].ops = ops;
			kinds[i].drive = drive;
			break;
		}
	pthread_mutex_unlock(&lk);
}

int cep_transport_drive(struct cep_transport *t, struct cep_transport_source *src)
{
	int (*drive)(struct cep_transport *, struct cep_transport_source *) = NULL;

	if (!t || !t->ops || !src)
		return -EINVAL;
	pthread_mutex_lock(&lk);
	for (int i = 0; i < KINDS && kinds[i].ops; i++)
		if (kinds[i].ops == t->ops)
			drive = kinds[i].drive;
	pthread_mutex_unlock(&lk);
	return drive ? drive(t, src) : -EOPNOTSUPP;
}
