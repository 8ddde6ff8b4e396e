/* SPDX-License-Identifier: MIT */
/*
 * cepd's per-uid accounts (acct.h): a small list of accounts, one per
 * uid with clients or with charges left, under one mutex. The number of
 * accounts is bounded by the clients (each client's uid has one) plus the
 * uids whose dead clients still have lingering ids.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "service/acct.h"

struct cepd_limits cepd_limits = {
	.clients = 4096,
	.clients_per_uid = 64,
	.ids_per_client = 65536,
	.ids_per_uid = 65536,
	.qps_per_uid = 65536,
	.event_bytes_per_client = 16u << 20,
	.event_bytes_per_uid = 64u << 20,
	.hello_ms = 5000,
};

struct acct {
	uid_t uid;
	unsigned clients;            /* lk */
	uint64_t held[ACCT_KINDS];   /* lk */
	struct acct *next;           /* lk */
};

static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
static struct acct *accts;       /* lk */
static unsigned nclients;        /* lk */

static uint64_t limit_of(enum acct_kind kind)
{
	switch (kind) {
	case ACCT_IDS: return cepd_limits.ids_per_uid;
	case ACCT_QPS: return cepd_limits.qps_per_uid;
	case ACCT_EVENT_BYTES: return cepd_limits.event_bytes_per_uid;
	default: return 0;
	}
}

/* lk held: free @a if nothing holds it any more. */
static void maybe_free(struct acct *a)
{
	if (a->clients)
		return;
	for (int k = 0; k < ACCT_KINDS; k++)
		if (a->held[k])
			return;
	for (struct acct **pp = &accts; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			free(a);
			return;
		}
}

int acct_client_get(uid_t uid, struct acct **out)
{
	struct acct *a;

	pthread_mutex_lock(&lk);
	for (a = accts; a && a->uid != uid; a = a->next)
		;
	if (nclients >= cepd_limits.clients || (a && a->clients >= cepd_limits.clients_per_uid)) {
		pthread_mutex_unlock(&lk);
		return -EUSERS;
	}
	if (!a) {
		a = calloc(1, sizeof(*a));
		if (!a) {
			pthread_mutex_unlock(&lk);
			return -ENOMEM;
		}
		a->uid = uid;
		a->next = accts;
		accts = a;
	}
	a->clients++;
	nclients++;
	pthread_mutex_unlock(&lk);
	*out = a;
	return 0;
}

void acct_client_put(struct acct *a)
{
	pthread_mutex_lock(&lk);
	a->clients--;
	nclients--;
	maybe_free(a);
	pthread_mutex_unlock(&lk);
}

int acct_charge(struct acct *a, enum acct_kind kind, uint64_t n)
{
	int ret = 0;

	pthread_mutex_lock(&lk);
	if (a->held[kind] + n > limit_of(kind))
		ret = -EDQUOT;
	else
		a->held[kind] += n;
	pthread_mutex_unlock(&lk);
	return ret;
}

void acct_add(struct acct *a, enum acct_kind kind, uint64_t n)
{
	pthread_mutex_lock(&lk);
	a->held[kind] += n;
	pthread_mutex_unlock(&lk);
}

void acct_uncharge(struct acct *a, enum acct_kind kind, uint64_t n)
{
	pthread_mutex_lock(&lk);
	a->held[kind] -= n;
	maybe_free(a);
	pthread_mutex_unlock(&lk);
}

uint64_t acct_held(struct acct *a, enum acct_kind kind)
{
	uint64_t v;

	pthread_mutex_lock(&lk);
	v = a->held[kind];
	pthread_mutex_unlock(&lk);
	return v;
}

uid_t acct_uid(const struct acct *a)
{
	return a->uid;
}
