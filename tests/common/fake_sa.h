/* SPDX-License-Identifier: MIT */
/*
 * Fake SAs of the tests (tests/sa, tests/rdmacm/ib.c, tests/service/mcast.c)
 * behind a real libcep SA client (sa_backend.h): their answers wait in a
 * ring of MADs that the fake's send fills under its lock and the
 * backend's recv empties here.
 */
#ifndef CEP_TEST_FAKE_SA_H
#define CEP_TEST_FAKE_SA_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cep/sa.h>

/* The backend's recv: wait up to @timeout_ms (on @cond, under @lock) for
 * an answer in ring @q of @slots MADs (*head taken, *tail filled), and
 * copy it to @mad: its length, or 0 when none came in time. */
static inline int fake_sa_take(pthread_mutex_t *lock, pthread_cond_t *cond, unsigned *head,
			       const unsigned *tail, uint8_t (*q)[CEP_SA_MAD_SIZE], unsigned slots,
			       uint8_t *mad, size_t len, int timeout_ms)
{
	struct timespec ts;
	int n = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)timeout_ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_mutex_lock(lock);
	while (*head == *tail)
		if (pthread_cond_timedwait(cond, lock, &ts) == ETIMEDOUT)
			break;
	if (*head != *tail) {
		n = (int)(len < CEP_SA_MAD_SIZE ? len : CEP_SA_MAD_SIZE);
		memcpy(mad, q[*head % slots], (size_t)n);
		(*head)++;
	}
	pthread_mutex_unlock(lock);
	return n;
}

#endif /* CEP_TEST_FAKE_SA_H */
