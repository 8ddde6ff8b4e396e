/* SPDX-License-Identifier: MIT */
/*
 * ck_rhs_get misses a key that is present throughout the call, in a map of
 * fewer than 1,024 slots, when the single writer deletes another entry of
 * the same probe sequence while the reader probes (SPMC mode). ConcurrencyKit
 * public API only; a reproducer for an upstream report.
 *
 * Cause (ck 0.7.1 src/ck_rhs.c): ck_rhs_get validates its probe with
 * map->generation[h & CK_RHS_G_MASK], h being the caller's full hash, but
 * the writers that move entries - the backward shift of
 * ck_rhs_do_backward_shift_delete and the displacement of
 * ck_rhs_put_robin_hood - bump map->generation[h' & CK_RHS_G_MASK] with h'
 * the moved entry's home slot (hash & map->mask). With fewer than
 * CK_RHS_G (1,024) slots the two differ whenever the hash has bits between
 * the map's mask and bit 10, so a reader that the shift overtakes (its key
 * moved back to a slot it already passed) sees no generation change and
 * returns NULL.
 *
 * To make the interleaving deterministic, the "writer" runs inside the
 * reader's probe: the compare callback, which ck_rhs_get calls between its
 * loads of the slots, performs one ck_rhs_remove on the same thread (the
 * reader holds no lock, so this is exactly what a concurrent writer thread
 * may do at that point). For each victim (an entry inserted before the
 * target, same home slot) and each comparison index, a fresh set is
 * built, the target looked up with the removal injected at that
 * comparison, and the result checked; then the same lookup is repeated
 * with nothing injected (it finds the target, which was never removed).
 *
 * Build and run:  cc -O2 -o ck_rhs_get_miss ck_rhs_get_miss.c -lck && ./ck_rhs_get_miss
 * Exit status 1 and one line per missed lookup when the defect is present;
 * 0 when every lookup found its key. `./ck_rhs_get_miss control` runs the
 * same cases with hashes below the map's size (generation index = home
 * slot): then ck's own retry catches every shift and nothing is missed. libcep builds it (never runs it) in
 * tests/table/meson.build so it keeps compiling.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <ck_rhs.h>

struct obj {
	unsigned long hash; /* the key is the object's address; the hash is chosen */
	int id;
};

static void *m_malloc(size_t n) { return malloc(n); }
static void m_free(void *p, size_t n, bool defer) { (void)n; (void)defer; free(p); }
static struct ck_malloc alloc = { .malloc = m_malloc, .free = m_free };

static unsigned long hash_cb(const void *o, unsigned long seed)
{
	(void)seed;
	return ((const struct obj *)o)->hash;
}

/* The injection: at comparison number fire_at of the armed lookup, remove
 * the victim (single writer: no other writer exists). */
static ck_rhs_t set;
static struct obj *victim;
static int compares, fire_at;
static bool armed;

static bool compare_cb(const void *stored, const void *key)
{
	if (armed && compares++ == fire_at) {
		armed = false;
		ck_rhs_remove(&set, victim->hash, victim);
	}
	return stored == key;
}

int main(int argc, char **argv)
{
	unsigned long high = argc > 1 ? 0 : 0x300ul; /* control: no bits above the mask */

	enum { SLOTS = 64, CLUSTER = 6 };
	int missed = 0, lookups = 0;

	for (int v = 0; v < CLUSTER - 1; v++) {
		for (fire_at = 0; fire_at < 2 * CLUSTER; fire_at++) {
			struct obj o[CLUSTER];
			struct obj *target = &o[CLUSTER - 1];
			void *got, *again;

			if (!ck_rhs_init(&set, CK_RHS_MODE_SPMC | CK_RHS_MODE_OBJECT, hash_cb,
					 compare_cb, &alloc, SLOTS, 0)) {
				fprintf(stderr, "ck_rhs_init failed\n");
				return 2;
			}
			/* One home slot (5) for the whole cluster; bits 8-9 set, as
			 * in any random hash: generation index 0x305, home 5. */
			for (int i = 0; i < CLUSTER; i++) {
				o[i].hash = high + 5;
				o[i].id = i;
				ck_rhs_put_unique(&set, o[i].hash, &o[i]);
			}
			victim = &o[v];
			compares = 0;
			armed = true;
			got = ck_rhs_get(&set, target->hash, target);
			if (armed) { /* fewer comparisons than fire_at */
				armed = false;
				ck_rhs_destroy(&set);
				break;
			}
			lookups++;
			again = ck_rhs_get(&set, target->hash, target);
			if (got != target) {
				missed++;
				printf("MISS: target present throughout; removing entry %d at "
				       "comparison %d made ck_rhs_get return %p (a second get "
				       "returns %s)\n", v, fire_at, got,
				       again == target ? "the target" : "NULL too");
			}
			ck_rhs_destroy(&set);
		}
	}
	(void)argv;
	printf("%d lookups with a removal injected, %d missed a present key\n", lookups, missed);
	return missed ? 1 : 0;
}
