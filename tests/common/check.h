/* SPDX-License-Identifier: MIT */
/*
 * Minimal assertion helpers for libcep's tests: each failed check prints
 * where and what, the test keeps going, and check_done() sets the exit code.
 */
#ifndef CEP_TEST_CHECK_H
#define CEP_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			check_failures++;                                      \
		}                                                              \
	} while (0)

#define CHECK_EQ(a, b)                                                         \
	do {                                                                   \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b);   \
		if (check_a_ != check_b_) {                                    \
			fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld, %s = %lld\n", \
				__FILE__, __LINE__, #a, check_a_, #b, check_b_); \
			check_failures++;                                      \
		}                                                              \
	} while (0)

static inline int check_done(const char *name)
{
	if (check_failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
		return 1;
	}
	printf("%s: all checks passed\n", name);
	return 0;
}

#endif /* CEP_TEST_CHECK_H */
