/* SPDX-License-Identifier: MIT */
/*
 * cep-stress: runs the selected scenarios (all by default) for a duration
 * each, prints its seed so any failure replays, and exits 1 if any
 * invariant was violated (sanitizer reports end the process on their own).
 * Usage: cep-stress [--threads N] [--duration S] [--seed X] [--keep-going] [--list] [names...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#include "stress.h"

static double watchdog_s = 60;

static void *watchdog(void *arg)
{
	uint64_t last = stress_progress_count();
	double since = stress_now();

	(void)arg;
	for (;;) {
		struct timespec ts = { 1, 0 };
		uint64_t now;

		nanosleep(&ts, NULL);
		now = stress_progress_count();
		if (now != last) {
			last = now;
			since = stress_now();
		} else if (stress_now() - since > watchdog_s) {
			fprintf(stderr, "VIOLATION [watchdog]: no quiescent point for %.0f s: "
				"livelock or a corrupted index\n", watchdog_s);
			_exit(3);
		}
	}
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: cep-stress [--threads N] [--duration SECONDS] [--seed X] "
			"[--watchdog SECONDS] [--keep-going] [-v] [--list] [scenario...]\n");
}

int main(int argc, char **argv)
{
	struct stress_opts o = { .threads = 4, .duration = 2.0, .seed = 0 };
	const char *names[64];
	int nnames = 0, ran = 0;
	const struct scenario *sets[2] = { stress_core_scenarios, stress_cm_scenarios };
	const int counts[2] = { stress_core_count, stress_cm_count };

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			o.threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--duration") && i + 1 < argc)
			o.duration = atof(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			o.seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--watchdog") && i + 1 < argc)
			watchdog_s = atof(argv[++i]);
		else if (!strcmp(argv[i], "-v"))
			o.verbose = 1;
		else if (!strcmp(argv[i], "--keep-going"))
			o.keep_going = 1;
		else if (!strcmp(argv[i], "--list")) {
			for (int s = 0; s < 2; s++)
				for (int j = 0; j < counts[s]; j++)
					printf("%-22s %s\n", sets[s][j].name, sets[s][j].what);
			return 0;
		} else if (argv[i][0] == '-') {
			usage();
			return 2;
		} else if (nnames < 64)
			names[nnames++] = argv[i];
	}
	if (o.threads < 2 || o.threads > 64 || o.duration <= 0) {
		usage();
		return 2;
	}
	if (!o.seed)
		o.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
	{
		pthread_t wd;

		/* A round lasts well under a second; a CM round's drain waits at
		 * most ~75 s before failing on its own: the default 90 s is above. */
		pthread_create(&wd, NULL, watchdog, NULL);
		pthread_detach(wd);
	}
	printf("cep-stress: seed %llu, %d threads, %.2f s per scenario\n",
	       (unsigned long long)o.seed, o.threads, o.duration);
	fflush(stdout);
	for (int s = 0; s < 2; s++) {
		for (int j = 0; j < counts[s]; j++) {
			const struct scenario *sc = &sets[s][j];
			bool selected = nnames == 0;
			int before = stress_failures(), r;
			double t0;

			for (int k = 0; k < nnames; k++)
				if (!strcmp(names[k], sc->name))
					selected = true;
			if (!selected)
				continue;
			t0 = stress_now();
			r = sc->run(&o);
			printf("%-22s %s (%.2f s)\n", sc->name,
			       r == 0 && stress_failures() == before ? "ok" : "FAILED",
			       stress_now() - t0);
			fflush(stdout);
			if (r && stress_failures() == before)
				stress_fail(sc->name, "scenario returned %d", r);
			ran++;
		}
	}
	if (ran == 0 || ran < nnames) {
		fprintf(stderr, "cep-stress: unknown scenario name\n");
		return 2;
	}
	if (stress_failures()) {
		fprintf(stderr, "cep-stress: %d violation(s), seed %llu\n", stress_failures(),
			(unsigned long long)o.seed);
		return 1;
	}
	printf("cep-stress: all %d scenario(s) passed\n", ran);
	return 0;
}
