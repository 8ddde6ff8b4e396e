/* SPDX-License-Identifier: MIT */
/*
 * Core-only cep-stress (the planted-bug variants): no CM scenarios.
 */
#include <stddef.h>

#include "stress.h"

const struct scenario stress_cm_scenarios[] = { { NULL, NULL, NULL } };
const int stress_cm_count = 0;
