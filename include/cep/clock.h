/* SPDX-License-Identifier: MIT */
/*
 * libcep clocks: the time source of a CM's timers (retries, MRA extensions,
 * timewait, half-open expiry, the dispatcher's sleep) and of the in-process
 * fabric's injected delays. By default both read CLOCK_MONOTONIC; a
 * virtual clock created here moves only when cep_clock_advance_ns() moves
 * it, so every timeout path of a test or a fuzzer runs at once and
 * reproduces exactly.
 *
 * Guarantees: time read through a clock never goes backwards. After
 * cep_clock_advance_ns() returns, every CM worker and fabric using the
 * clock has been told; after cep_cm_quiesce() (one CM) or
 * cep_clock_quiesce() (every user of the clock, until none has anything
 * left to do) returns 0, every timer due at the clock's new time has fired
 * and what it caused has been processed (see each function).
 */
#ifndef CEP_CLOCK_H
#define CEP_CLOCK_H

#include <stdint.h>

#include <cep/export.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cep_clock;

/* Create a virtual clock reading @start_ns (nanoseconds, any value).
 * 0, -EINVAL (NULL @out), -ENOMEM. Any thread. */
CEP_EXPORT int cep_clock_create(uint64_t start_ns, struct cep_clock **out);

/* Destroy a virtual clock. -EBUSY (and nothing changes) while a CM context
 * or fabric created with it still exists; destroy them first. -EINVAL for
 * NULL. Not concurrently with any other call on @c. */
CEP_EXPORT int cep_clock_destroy(struct cep_clock *c);

/* Current time in nanoseconds. NULL: CLOCK_MONOTONIC. Any thread, also
 * from CM callbacks; lock-free. */
CEP_EXPORT uint64_t cep_clock_now_ns(const struct cep_clock *c);

/* Move the virtual clock forward by @delta_ns and wake every CM worker and
 * fabric delivery thread using it, so each runs the timers now due.
 * It does not wait for them: follow it with cep_cm_quiesce() or
 * cep_clock_quiesce(). Advances are serialised with each other (one mutex
 * per clock) and never move time backwards. 0, -EINVAL (NULL), -ERANGE
 * (the time would wrap; nothing changes). Any thread, also from a CM
 * callback. */
CEP_EXPORT int cep_clock_advance_ns(struct cep_clock *c, uint64_t delta_ns);

/* Wait until every CM context and fabric using @c is idle at the clock's
 * current time, all at once: no MAD queued or being handled, no work item
 * pending, no timer due and not yet fired, no fabric MAD due and not yet
 * delivered. It repeats its pass over them until one full pass saw all
 * idle and none received anything meanwhile, so the consequences of a
 * timer (a MAD to another CM on the same fabric, that CM's answer, ...)
 * are processed too. Timers due later do not count. 0, -EINVAL (NULL),
 * -ETIMEDOUT after @timeout_ms of real time. -EDEADLK from a CM callback.
 * Other threads that keep sending or advancing extend the wait. */
CEP_EXPORT int cep_clock_quiesce(struct cep_clock *c, unsigned timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* CEP_CLOCK_H */
