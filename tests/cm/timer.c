/* SPDX-License-Identifier: MIT */
/* Timer wheel unit test: order of expiry, cancel, re-arm from a callback,
 * timers beyond one revolution, bulk drain, the next expiry a sleeping
 * worker waits for, runs with a budget; the CM's coarse deadlines. */
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "cm/cm_internal.h"
#include "cm/timer.h"

struct item {
	struct cep_timer t;
	int fired;
	uint64_t at;
};

static uint64_t now;
static int rearm_left;
static struct cep_wheel wheel;

static void on_fire(struct cep_timer *t)
{
	struct item *it = (struct item *)t;

	it->fired++;
	it->at = now;
}

static void on_fire_rearm(struct cep_timer *t)
{
	on_fire(t);
	if (rearm_left-- > 0)
		cep_timer_arm(&wheel, t, now, on_fire_rearm); /* clamped to now+1 */
}

static void on_drain(struct cep_timer *t, void *ctx)
{
	(void)t;
	(*(int *)ctx)++;
}

/* cep_wheel_run_max: a burst of due timers fires in batches, in tick
 * order, none twice, none lost; what is left stays due (next = last) and
 * fires first, before timers due later; a timer armed from a callback
 * does not land in a slot the run has passed. */
static void budgeted(void)
{
	enum { N = 40 };
	static struct item b[N], late;
	uint64_t last_at = 0;
	int total = 0;

	cep_wheel_init(&wheel, 2000);
	for (int i = 0; i < N; i++) /* ticks 2001..2010, four per tick */
		cep_timer_arm(&wheel, &b[i].t, 2001 + (uint64_t)i / 4, on_fire);
	now = 2020;
	CHECK_EQ(cep_wheel_run_max(&wheel, now, 6), 6);
	CHECK(cep_wheel_pending(&wheel));
	CHECK_EQ(cep_wheel_next(&wheel, 50), 2020); /* due already */
	for (int i = 0; i < 6; i++)
		CHECK_EQ(b[i].fired, 1);
	CHECK_EQ(b[6].fired, 0);
	/* the clock moved on: the left-over ones still fire, and first */
	cep_timer_arm(&wheel, &late.t, 2021, on_fire);
	now = 2021;
	CHECK_EQ(cep_wheel_run_max(&wheel, now, 30), 30);
	CHECK_EQ(late.fired, 0);
	CHECK_EQ(cep_wheel_run_max(&wheel, now, 30), 5); /* 4 left + late */
	CHECK(!cep_wheel_pending(&wheel));
	CHECK_EQ(late.fired, 1);
	for (int i = 0; i < N; i++) {
		total += b[i].fired;
		CHECK_EQ(b[i].fired, 1);
		CHECK(b[i].at >= last_at || i % 4); /* tick order */
		last_at = b[i].at;
	}
	CHECK_EQ(total, N);
	CHECK_EQ(wheel.armed, 0);
	CHECK_EQ(cep_wheel_run_max(&wheel, now, 30), 0);
	/* re-armed from a callback during a budgeted run: next tick, once */
	rearm_left = 1;
	cep_timer_arm(&wheel, &b[0].t, 2022, on_fire_rearm);
	b[0].fired = 0;
	now = 2025;
	CHECK_EQ(cep_wheel_run_max(&wheel, now, 1), 1);
	CHECK_EQ(cep_wheel_run_max(&wheel, now, 1), 0); /* at 2026: not due */
	now = 2026;
	CHECK_EQ(cep_wheel_run_max(&wheel, now, 1), 1);
	CHECK_EQ(b[0].fired, 2);
}

/* cm_coarse_deadline: never early, at most an eighth (and 64 ms) late,
 * exact under 16 ms; a storm's 200 timers of 300-349 ms armed over 50 ms
 * (a timewait each) come due at a handful of ticks, not 200 - so a worker
 * wakes a handful of times for them. */
static void coarse_deadlines(void)
{
	uint64_t ticks[200];
	unsigned distinct = 0;

	for (uint64_t t0 = 1000; t0 < 1100; t0++)
		for (uint32_t ms = 0; ms < 3000; ms += 7) {
			uint64_t at = cm_coarse_deadline(t0, ms);
			uint64_t late = ms / 8 < 64 ? ms / 8 : 64;

			CHECK(at >= t0 + ms);
			CHECK(at <= t0 + ms + late);
			if (ms < 16)
				CHECK_EQ(at, t0 + ms);
		}
	for (unsigned i = 0; i < 200; i++) {
		uint64_t at = cm_coarse_deadline(7000 + i / 4, 300 + (i % 50));
		unsigned j;

		for (j = 0; j < distinct && ticks[j] != at; j++)
			;
		if (j == distinct)
			ticks[distinct++] = at;
	}
	printf("coarse deadlines: 200 timers of 300-349 ms armed over 50 ms due at %u ticks\n",
	       distinct);
	CHECK(distinct <= 6);
}

int main(void)
{
	coarse_deadlines();
	static struct item it[8];
	int drained = 0;

	cep_wheel_init(&wheel, 1000);
	cep_timer_arm(&wheel, &it[0].t, 1005, on_fire);
	cep_timer_arm(&wheel, &it[1].t, 1003, on_fire);
	cep_timer_arm(&wheel, &it[2].t, 1000 + CEP_WHEEL_SLOTS + 5, on_fire); /* same slot as 0 */
	cep_timer_arm(&wheel, &it[3].t, 1010, on_fire);
	CHECK_EQ(wheel.armed, 4);
	/* Next due: 1003; a timer one revolution out shares 1005's slot
	 * without being due there; within 2 ticks nothing is due. */
	CHECK_EQ(cep_wheel_next(&wheel, 50), 1003);
	CHECK_EQ(cep_wheel_next(&wheel, 2), 1002);
	CHECK_EQ(cep_timer_cancel(&wheel, &it[3].t), 1);
	CHECK_EQ(cep_timer_cancel(&wheel, &it[3].t), 0);
	now = 1004;
	CHECK_EQ(cep_wheel_run(&wheel, now), 1);
	CHECK_EQ(it[1].fired, 1);
	CHECK_EQ(it[0].fired, 0);
	now = 1006;
	CHECK_EQ(cep_wheel_run(&wheel, now), 1);
	CHECK_EQ(it[0].fired, 1);
	CHECK_EQ(it[2].fired, 0); /* a revolution later */
	CHECK(cep_timer_armed(&it[2].t));
	/* only the far one is left: not due within a revolution's wait */
	CHECK_EQ(cep_wheel_next(&wheel, 50), 1006 + 50);
	CHECK_EQ(cep_wheel_next(&wheel, CEP_WHEEL_SLOTS), 1000 + CEP_WHEEL_SLOTS + 5);
	/* move an armed timer earlier */
	cep_timer_arm(&wheel, &it[2].t, 1008, on_fire);
	now = 1008;
	CHECK_EQ(cep_wheel_run(&wheel, now), 1);
	CHECK_EQ(it[2].fired, 1);
	CHECK_EQ(it[3].fired, 0);
	/* re-arm from the callback fires once per tick, never twice per run */
	rearm_left = 3;
	cep_timer_arm(&wheel, &it[4].t, 1009, on_fire_rearm);
	for (now = 1009; now <= 1020; now++)
		cep_wheel_run(&wheel, now);
	CHECK_EQ(it[4].fired, 4);
	/* a long jump fires everything due once */
	cep_timer_arm(&wheel, &it[5].t, 1100, on_fire);
	cep_timer_arm(&wheel, &it[6].t, 5000, on_fire);
	now = 4000;
	CHECK_EQ(cep_wheel_run(&wheel, now), 1);
	CHECK_EQ(it[5].fired, 1);
	CHECK_EQ(it[6].fired, 0);
	cep_timer_arm(&wheel, &it[7].t, 4500, on_fire);
	cep_wheel_drain(&wheel, on_drain, &drained);
	CHECK_EQ(drained, 2);
	CHECK_EQ(wheel.armed, 0);
	CHECK(!cep_timer_armed(&it[6].t));
	budgeted();
	return check_done("timer");
}
