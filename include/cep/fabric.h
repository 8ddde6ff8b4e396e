/* SPDX-License-Identifier: MIT */
/*
 * libcep in-process fabric: simulated ports in one process that carry CM MADs
 * to each other as QP1 would, with reproducible fault injection.
 *
 * Guarantees: every port is a struct cep_transport; with no faults a MAD is
 * delivered synchronously in the sender's thread (lock-free route lookup, no
 * allocation); with faults every decision comes from a counter-based PRNG
 * keyed by (fabric seed, sending port, n-th send on that port), so a run
 * reproduces; after a port's stop() returns its receive function is never
 * called again.
 */
#ifndef CEP_FABRIC_H
#define CEP_FABRIC_H

#include <stddef.h>
#include <stdint.h>

#include <cep/clock.h>
#include <cep/export.h>
#include <cep/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cep_fabric;

struct cep_fabric_attr {
	size_t size;            /* sizeof(struct cep_fabric_attr): lets the struct grow */
	uint64_t seed;          /* fault PRNG seed; 0 = derived from the clock
				 * (read it back with cep_fabric_get_seed and print it) */
	uint32_t max_ports;     /* ports that may exist at once; 0 = 64; at most 4096 */
	uint32_t max_in_flight; /* cap on MADs held by the fabric (delayed, held for
				 * reordering); beyond it a MAD is dropped and counted
				 * as dropped_full; 0 = 65536 */
	/* Time of the injected delays and reorder holds: NULL =
	 * CLOCK_MONOTONIC; a virtual clock (cep/clock.h, it must outlive the
	 * fabric) delivers a delayed MAD only once an advance reaches its
	 * time, and cep_clock_quiesce() waits for the MADs due. Read only
	 * when @size covers it. */
	struct cep_clock *clock;
};

/* Create a fabric with no ports and no faults. 0, -EINVAL (bad attr),
 * -ENOMEM. Any thread. */
CEP_EXPORT int cep_fabric_create(const struct cep_fabric_attr *attr,
				 struct cep_fabric **out);

/* Destroy a fabric: stops its delivery thread and frees MADs still held
 * (they are not delivered). 0, -EINVAL (NULL), -EBUSY (and nothing
 * changes) while any port exists. Callers must have stopped every other use of @f; must not be
 * called from a receive function. */
CEP_EXPORT int cep_fabric_destroy(struct cep_fabric *f);

/* The seed in use (the one given, or the one derived from the clock).
 * 0 or -EINVAL (NULL). */
CEP_EXPORT int cep_fabric_get_seed(const struct cep_fabric *f, uint64_t *out);

#define CEP_FABRIC_LINK_IB   1 /* LID routed; lid in 0x0001..0xbfff */
#define CEP_FABRIC_LINK_ROCE 2 /* GID routed; lid must be 0 */

struct cep_fabric_port_attr {
	size_t size;         /* sizeof(struct cep_fabric_port_attr) */
	uint64_t ca_guid;    /* CA (node) GUID, host order; not 0 */
	uint16_t lid;        /* IB: unicast LID, unique in the fabric; RoCE: 0 */
	uint8_t gid[16];     /* port GID, network order, unique in the fabric;
			      * all-zero: fe80::(ca_guid + port_num - 1), so port 1
			      * gets fe80::ca_guid */
	uint8_t port_num;    /* 1..254 */
	uint8_t link_layer;  /* CEP_FABRIC_LINK_IB or CEP_FABRIC_LINK_ROCE */
	uint8_t ca_ack_delay; /* reported by query_port, 0..31 (a 5-bit IBTA
			       * exponent); read only when @size covers it */
};

/* Create a port. The returned transport is the port: ops->start() begins
 * delivery to it, ops->stop() ends it, ops->destroy() removes the port (it
 * stops it first if needed); ops->query_port() reports the attributes above
 * (gid_index 0, pkey 0xffff, active_mtu 4096 on IB and 1024 on RoCE,
 * ca_ack_delay as given).
 * MADs routed to a port that is not started, or stopped, are dropped and
 * counted (dropped_stopped). 0, -EINVAL (NULL, bad attr), -EEXIST (LID or
 * GID already used by another port of @f), -ENOSPC (max_ports reached),
 * -ENOMEM. Serialised with other port creations/destructions by a fabric
 * mutex; any thread, also concurrently with sends. The port's operations
 * follow the contracts below.
 */
CEP_EXPORT int cep_fabric_port_create(struct cep_fabric *f,
				      const struct cep_fabric_port_attr *attr,
				      struct cep_transport **out);

/* Port operations of a fabric port (contracts):
 * - send(to): routes by LID when to->lid != 0, else by to->gid, to a port
 *   of the same link layer (else counted no_route; send still returns 0,
 *   as the wire would). The receiver gets from = {sender's LID and GID,
 *   grh_present (always 1 on RoCE, else to->grh_present), qpn 1, qkey
 *   0x80010000, pkey_index 0, sl/hop_limit/traffic_class/flow_label as in
 *   @to}. -EINVAL: NULL arguments, len 0 or > CEP_MAD_SIZE. -ESHUTDOWN: this
 *   port was stopped. Lock-free and allocation-free when no faults are set.
 *   Any thread, also from inside a receive function (delivery then nests;
 *   a receive function that answers every MAD synchronously between two
 *   ports recurses without bound, so only queue in it, as the CM does).
 *   Must not race with this port's destroy().
 * - start(fn, ctx): once; -EALREADY if started or stopped before.
 * - stop(): idempotent. When it returns, fn is not running for this port in
 *   any thread and will never be called again. It waits for deliveries in
 *   progress (which are short: fn must not block). If called from inside
 *   this port's own fn, it waits for every delivery but the caller's.
 * - destroy(): after it returns the transport pointer is dead (the slot's
 *   memory belongs to the fabric and may be reused by a new port). MADs
 *   still held by the fabric for this port are dropped on delivery. Not
 *   from inside this port's own fn, and not concurrently with this port's
 *   send() or start().
 */

/* Faults, applied per send in this order: loss (the MAD is dropped);
 * duplicate (a second copy is delivered too); delay (each copy waits a
 * uniform random time in [delay_min_us, delay_max_us]; none when both are
 * 0); reorder (the original is held until the next send from the same port
 * has been delivered or queued, then released behind it, or after
 * hold_max_us if no send comes). Probabilities are in [0, 1].
 *
 * Reproducibility: each port has its own decision stream, keyed by the
 * fabric seed and the port's (ca_guid, port_num); the n-th send() on a port
 * always gets the same decisions for the same fault settings. With one
 * sending thread per port a run is fully reproducible; with several threads
 * sending on one port the same multiset of decisions is drawn but which MAD
 * gets which depends on the interleaving of their send() calls.
 */
struct cep_fabric_faults {
	size_t size;            /* sizeof(struct cep_fabric_faults) */
	double loss;
	double duplicate;
	double reorder;
	uint32_t delay_min_us;
	uint32_t delay_max_us;  /* <= 10,000,000 */
	uint32_t hold_max_us;   /* longest a reordered MAD waits for the next
				 * send; 0 = 10,000 (10 ms); <= 10,000,000 */
};

/* Set the faults (all zero: none, back to the synchronous path). 0 or
 * -EINVAL (NULL, short size, a probability outside [0,1] or NaN,
 * delay_min_us > delay_max_us, a time above its bound), changing nothing.
 * Any thread. A send() concurrent with this call may see a mix of the old
 * and new fields; set faults before the sends whose pattern must reproduce.
 * MADs already held keep their delivery times. */
CEP_EXPORT int cep_fabric_set_faults(struct cep_fabric *f,
				     const struct cep_fabric_faults *faults);

/* Counters since cep_fabric_create(), over all ports, including destroyed
 * ones. Every send() that returned 0 is "sent"; every copy of it (the
 * original and, if duplicated, the copy) ends in exactly one of delivered,
 * lost, no_route, dropped_stopped, dropped_full, so once quiescent:
 *   delivered + lost + no_route + dropped_stopped + dropped_full
 *     == sent + duplicated.
 * reordered and delayed count MADs that took those paths. */
struct cep_fabric_stats {
	size_t size;            /* caller sets sizeof(struct cep_fabric_stats) */
	uint64_t sent;
	uint64_t delivered;
	uint64_t lost;
	uint64_t duplicated;
	uint64_t reordered;
	uint64_t delayed;
	uint64_t no_route;
	uint64_t dropped_stopped;
	uint64_t dropped_full;
};

/* Read the counters (each one atomically; the set is a snapshot only when
 * quiescent). 0 or -EINVAL (NULL, size too small). Any thread. */
CEP_EXPORT int cep_fabric_stats(struct cep_fabric *f, struct cep_fabric_stats *out);

/* Wait until the fabric holds no MAD (every delayed or held MAD delivered
 * or dropped) and no delivery is running in any thread. Sends that start
 * during the wait extend it. With a virtual clock, MADs due later than the
 * clock's time do not count. 0, -EINVAL (NULL), -ETIMEDOUT after
 * @timeout_ms (real time).
 * Must not be called from a receive function. */
CEP_EXPORT int cep_fabric_quiesce(struct cep_fabric *f, unsigned timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* CEP_FABRIC_H */
