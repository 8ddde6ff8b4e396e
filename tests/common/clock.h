/* SPDX-License-Identifier: MIT */
/*
 * Time helpers for tests that measure how late something happened:
 * CLOCK_MONOTONIC in milliseconds, and a sleep in milliseconds.
 */
#ifndef CEP_TEST_CLOCK_H
#define CEP_TEST_CLOCK_H

#include <time.h>

static inline double mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

#endif /* CEP_TEST_CLOCK_H */
