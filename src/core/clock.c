/* SPDX-License-Identifier: MIT */
/*
 * Clocks (cep/clock.h). The monotonic clock is CLOCK_MONOTONIC; a virtual
 * clock is one atomic 64-bit nanosecond count that only
 * cep_clock_advance_ns() moves, plus the list of its subscribers (CM
 * dispatchers, fabrics) that an advance wakes and a quiesce polls.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "clock.h"

struct cep_clock {
	_Atomic uint64_t now_ns;
	pthread_mutex_t mtx;           /* advances, the subscriber list */
	struct cep_clock_sub *subs;    /* mtx */
};

int cep_clock_create(uint64_t start_ns, struct cep_clock **out)
{
	struct cep_clock *c;

	if (!out)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	atomic_init(&c->now_ns, start_ns);
	pthread_mutex_init(&c->mtx, NULL);
	*out = c;
	return 0;
}

int cep_clock_destroy(struct cep_clock *c)
{
	int busy;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->mtx);
	busy = c->subs != NULL;
	pthread_mutex_unlock(&c->mtx);
	if (busy)
		return -EBUSY;
	pthread_mutex_destroy(&c->mtx);
	free(c);
	return 0;
}

uint64_t cep_clock_now_ns(const struct cep_clock *c)
{
	struct timespec ts;

	if (c)
		/* seq_cst: pairs with the advance's store, which precedes its
		 * wake-ups, so a woken subscriber reads the new time. */
		return atomic_load((_Atomic uint64_t *)&c->now_ns);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int cep_clock_advance_ns(struct cep_clock *c, uint64_t delta_ns)
{
	uint64_t now;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->mtx);
	now = atomic_load_explicit(&c->now_ns, memory_order_relaxed);
	if (now + delta_ns < now) {
		pthread_mutex_unlock(&c->mtx);
		return -ERANGE;
	}
	/* seq_cst store before the wake-ups: a subscriber woken below (or
	 * checking on its own) reads at least this time. */
	atomic_store(&c->now_ns, now + delta_ns);
	for (struct cep_clock_sub *s = c->subs; s; s = s->next)
		s->wake(s);
	pthread_mutex_unlock(&c->mtx);
	return 0;
}

void cep_clock_subscribe(struct cep_clock *c, struct cep_clock_sub *s)
{
	pthread_mutex_lock(&c->mtx);
	s->next = c->subs;
	c->subs = s;
	pthread_mutex_unlock(&c->mtx);
}

void cep_clock_unsubscribe(struct cep_clock *c, struct cep_clock_sub *s)
{
	pthread_mutex_lock(&c->mtx);
	for (struct cep_clock_sub **p = &c->subs; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	pthread_mutex_unlock(&c->mtx);
}

/* One pass: 1 if every subscriber is idle; *activity = their sum. */
static int pass(struct cep_clock *c, uint64_t *activity, int *self)
{
	int idle = 1;

	*activity = 0;
	pthread_mutex_lock(&c->mtx);
	for (struct cep_clock_sub *s = c->subs; s; s = s->next) {
		uint64_t a = 0;

		if (s->is_self(s))
			*self = 1;
		if (s->busy(s, &a))
			idle = 0;
		*activity += a;
	}
	pthread_mutex_unlock(&c->mtx);
	return idle;
}

int cep_clock_quiesce(struct cep_clock *c, unsigned timeout_ms)
{
	uint64_t end, before, after;
	int self = 0;

	if (!c)
		return -EINVAL;
	end = cep_clock_now_ns(NULL) + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		/* Idle twice with no activity in between: nobody was fed by a
		 * subscriber checked later in the first pass (feeding counts
		 * as activity before the feeder goes idle). */
		int idle = pass(c, &before, &self);

		if (self)
			return -EDEADLK;
		if (idle && pass(c, &after, &self) && after == before)
			return 0;
		if (cep_clock_now_ns(NULL) > end)
			return -ETIMEDOUT;
		struct timespec ts = { 0, 100000 };
		nanosleep(&ts, NULL);
	}
}
