/* SPDX-License-Identifier: MIT */
/*
 * Private side of cep/clock.h: how the dispatcher and the fabric read a
 * clock and how a virtual clock reaches them. A user of a virtual clock
 * subscribes once; cep_clock_advance_ns() calls every subscriber's wake()
 * and cep_clock_quiesce() polls every subscriber's busy().
 */
#ifndef CEP_CLOCK_INTERNAL_H
#define CEP_CLOCK_INTERNAL_H

#include <stdint.h>

#include <cep/clock.h>

struct cep_clock_sub {
	/* Time moved: make the subscriber run what is now due. Called with
	 * the clock's mutex held, from the advancing thread: must not block
	 * for long nor call back into the clock. */
	void (*wake)(struct cep_clock_sub *s);
	/* For cep_clock_quiesce: 1 while something due at the clock's time is
	 * pending or running. *activity: a count that grows with every item
	 * the subscriber accepts (MADs, work, deliveries), so a quiesce pass
	 * can tell that one subscriber fed another after it was checked. Must
	 * not block. Called with the clock's mutex held. */
	int (*busy)(struct cep_clock_sub *s, uint64_t *activity);
	/* 1 if the calling thread is one of the subscriber's own (waiting for
	 * it from there would deadlock). */
	int (*is_self)(struct cep_clock_sub *s);
	struct cep_clock_sub *next;    /* clock's mutex */
};

/* Add / remove a subscriber (any thread; not from inside wake or busy). */
void cep_clock_subscribe(struct cep_clock *c, struct cep_clock_sub *s);
void cep_clock_unsubscribe(struct cep_clock *c, struct cep_clock_sub *s);

/* 1 for a virtual clock, 0 for NULL (CLOCK_MONOTONIC). */
static inline int cep_clock_is_virtual(const struct cep_clock *c)
{
	return c != 0;
}

/* Milliseconds of @c (NULL: CLOCK_MONOTONIC), the CM's timer unit. */
static inline uint64_t cep_clock_ms(const struct cep_clock *c)
{
	return cep_clock_now_ns(c) / 1000000u;
}

#endif /* CEP_CLOCK_INTERNAL_H */
