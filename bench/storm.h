/* SPDX-License-Identifier: MIT */
/*
 * Connection storms between two simulated nodes (private to bench/): two
 * ports on one in-process fabric, a CM context with W workers on each, a
 * listener on node B that accepts every REQ. Node A opens connections with
 * a bounded number in flight; each completion (on a CM worker) issues the
 * next, so the storm runs at the CM's pace, not a driver thread's.
 * One storm at a time per process; its functions are called from one
 * (main) thread.
 */
#ifndef CEP_BENCH_STORM_H
#define CEP_BENCH_STORM_H

#include <stddef.h>
#include <stdint.h>

#include <cep/cm.h>
#include <cep/fabric.h>
#include <cep/sa.h>

#include "bench.h"

struct storm;

struct storm_attr {
	unsigned workers;   /* CM workers per node */
	uint32_t capacity;  /* most connections this storm will ever open */
	unsigned window;    /* connects (or disconnects) in flight */
	const struct bench_cm_cfg *cfg; /* index, presized (a bucket per
			     * connection of capacity, else libcep's default), RCU */
	const struct bench_opts *opts; /* for progress lines */
	const struct cep_sa_path *path; /* NULL: LIDs 1 and 2; else node A is
			     * its source, node B its destination, every REQ
			     * its path (cep_sa_path_to_conn) */
};

/* One phase (a connect or a release storm). */
struct storm_phase {
	uint32_t ok, failed;
	double seconds;            /* first issue to last completion */
	double per_s;              /* ok / seconds */
	uint64_t mads;             /* MADs sent by both CMs during the phase */
	struct bench_samples lat;  /* connect: issue -> ESTABLISHED, all conns */
};

int storm_create(const struct storm_attr *attr, struct storm **out);
/* Destroys both CM contexts (ids left are destroyed without sending),
 * the ports and the fabric. */
void storm_destroy(struct storm *s);

/* Open @n more connections (registering their QPNs first, untimed).
 * @ph->lat must be initialised by the caller with room for @n. 0,
 * -ENOSPC (capacity), -ETIMEDOUT (completions stopped coming), -errno. */
int storm_connect(struct storm *s, uint32_t n, struct storm_phase *ph);
/* Disconnect (DREQ/DREP) the established connections among the ones
 * opened from the @first-th on (0: all). The ids stay (in timewait, then
 * idle) until storm_destroy(). */
int storm_release(struct storm *s, uint32_t first, struct storm_phase *ph);
/* Connections opened so far (established or not). */
uint32_t storm_opened(const struct storm *s);

/* Connections opened so far (established ones). */
uint32_t storm_established(const struct storm *s);
/* Local comm ID of the i-th established connection on node A. */
uint32_t storm_comm_id(const struct storm *s, uint32_t i);
/* Node B's comm ID of the i-th established connection (A's remote ID). */
uint32_t storm_remote_comm_id(const struct storm *s, uint32_t i);
/* Heap bytes the storm itself holds (its per-connection arrays), not libcep. */
size_t storm_bench_bytes(const struct storm *s);
/* Node A's core table, for lookups. */
struct cep_table *storm_table(const struct storm *s);
/* Node A's CM (0) or node B's (1); the fabric; node A's LID. */
struct cep_cm *storm_cm(const struct storm *s, int node);
struct cep_fabric *storm_fabric(const struct storm *s);
uint16_t storm_lid_a(const struct storm *s);
/* Node B's fabric port (sending through it sends as node B). */
struct cep_transport *storm_port_b(const struct storm *s);

#endif /* CEP_BENCH_STORM_H */
