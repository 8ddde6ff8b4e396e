/* SPDX-License-Identifier: MIT */
/*
 * Violation reports and progress of the stress programs (cep-stress and
 * the soak): stress_fail() counts every violation and prints the first
 * twenty; stress_progress() feeds cep-stress's watchdog. Any thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <pthread.h>

#include "stress.h"

static atomic_int failures;
static _Atomic uint64_t progress;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

void stress_fail(const char *scenario, const char *fmt, ...)
{
	va_list ap;

	/* Print the first few only; count them all. */
	if (atomic_fetch_add(&failures, 1) >= 20)
		return;
	pthread_mutex_lock(&fail_lock);
	fprintf(stderr, "VIOLATION [%s]: ", scenario);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	pthread_mutex_unlock(&fail_lock);
}

int stress_failures(void)
{
	return atomic_load(&failures);
}

double stress_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void stress_progress(void)
{
	atomic_fetch_add_explicit(&progress, 1, memory_order_relaxed);
}

uint64_t stress_progress_count(void)
{
	return atomic_load_explicit(&progress, memory_order_relaxed);
}
