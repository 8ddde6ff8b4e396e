/* SPDX-License-Identifier: MIT */
/*
 * cep-stress: scenarios that race libcep's concurrent paths, each checked
 * by the core's invariant checker at quiescent points. A scenario reports
 * violations through stress_fail() (report.c); the program exits non-zero
 * on any.
 */
#ifndef CEP_STRESS_H
#define CEP_STRESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct stress_opts {
	int threads;      /* racing threads per scenario */
	double duration;  /* seconds per scenario */
	uint64_t seed;    /* printed; the same seed replays the same choices */
	int verbose;
	int keep_going;   /* core scenarios: run the whole duration past a violation */
};

struct scenario {
	const char *name;
	const char *what;
	/* Returns 0 when every check held; violations also go to stress_fail. */
	int (*run)(const struct stress_opts *o);
};

/* Record a violation (thread-safe); the run fails. */
void stress_fail(const char *scenario, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int stress_failures(void);

/* Deterministic per-thread random stream. */
static inline uint64_t stress_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

double stress_now(void);

/* Called at every quiescent point: the watchdog fails a run that makes no
 * progress for too long (a livelock, or an index corrupted by a planted
 * bug looping inside liburcu, where no sanitizer looks). */
void stress_progress(void);
/* How many times stress_progress() was called (the watchdog's view). */
uint64_t stress_progress_count(void);

/* Called by a CM scenario with its two nodes once they are up, and with
 * NULLs before it destroys them (from the scenario's thread). NULL: none.
 * The soak (stress/soak) samples the nodes' counters in between. */
struct cep_cm;
extern void (*stress_cm_observer)(struct cep_cm *a, struct cep_cm *b);

/* Scenario sets, defined by the files that implement them. */
extern const struct scenario stress_core_scenarios[];
extern const int stress_core_count;
extern const struct scenario stress_cm_scenarios[];
extern const int stress_cm_count;

#endif /* CEP_STRESS_H */
