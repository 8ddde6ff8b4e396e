/* SPDX-License-Identifier: MIT */
/*
 * cepdump's connection reports: --summary and --flow over the groups of
 * conn.h, problems first. Output on stdout; single-threaded.
 */
#ifndef CEPDUMP_REPORT_H
#define CEPDUMP_REPORT_H

#include "capture.h"
#include "conn.h"

/* Problems (worst first), then counts per message type with retries,
 * duplicates and invalid fields, REJ reasons by name, and the REQ -> RTU
 * setup latency percentiles (nearest rank) over established connections. */
void report_summary(const struct conns *c, const struct dump_reader *r);

/* Every group as a ladder between its two ports, problems first. */
void report_flow(const struct conns *c, const struct dump_reader *r);

#endif /* CEPDUMP_REPORT_H */
