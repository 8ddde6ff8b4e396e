/* SPDX-License-Identifier: MIT */
/*
 * Virtual clock (cep/clock.h): time moves only by an advance; an advance
 * followed by a quiesce fires exactly the dispatcher timers due by then,
 * on their workers, and delivers exactly the fabric MADs whose injected
 * delay has passed. Nothing here sleeps for a timer.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include <cep/clock.h>
#include <cep/fabric.h>

#include "../common/check.h"
#include "cm/dispatch.h"

#define MS 1000000ull

static struct cep_dispatch *d;

struct job {
	struct cep_work work;
	struct cep_timer timer;
	unsigned want;
	_Atomic int fired;        /* times fired on the right worker, -100 if wrong */
	_Atomic int quiesce_rc;   /* cep_clock_quiesce from a worker */
	struct cep_clock *clk;
};

static void on_timer(struct cep_timer *t)
{
	struct job *j = (struct job *)((char *)t - offsetof(struct job, timer));

	atomic_fetch_add(&j->fired, cep_dispatch_self(d) == (int)j->want ? 1 : -100);
}

static void arm_work(struct cep_work *w)
{
	struct job *j = (struct job *)w;
	unsigned self = (unsigned)cep_dispatch_self(d);

	/* due 5 ms after the clock's time now */
	cep_timer_arm(cep_dispatch_wheel(d, self), &j->timer, cep_dispatch_clock_ms(d) + 5, on_timer);
	atomic_store(&j->quiesce_rc, cep_clock_quiesce(j->clk, 100));
}

static void on_mad(void *ctx, unsigned worker, const uint8_t *mad, size_t len,
		   const struct cep_mad_addr *from)
{
	(void)ctx; (void)worker; (void)mad; (void)len; (void)from;
}

static _Atomic int delivered;

static void on_recv(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	(void)ctx; (void)mad; (void)len; (void)from;
	atomic_fetch_add(&delivered, 1);
}

int main(void)
{
	struct cep_clock *clk;
	uint64_t t0 = cep_clock_now_ns(NULL);

	/* the monotonic clock moves on its own; a virtual one does not */
	CHECK_EQ(cep_clock_create(5 * MS, NULL), -EINVAL);
	CHECK_EQ(cep_clock_create(5 * MS, &clk), 0);
	CHECK_EQ(cep_clock_now_ns(clk), 5 * MS);
	CHECK(cep_clock_now_ns(NULL) >= t0);
	CHECK_EQ(cep_clock_advance_ns(clk, 3 * MS), 0);
	CHECK_EQ(cep_clock_now_ns(clk), 8 * MS);
	CHECK_EQ(cep_clock_advance_ns(clk, UINT64_MAX), -ERANGE);
	CHECK_EQ(cep_clock_now_ns(clk), 8 * MS);
	CHECK_EQ(cep_clock_advance_ns(NULL, 1), -EINVAL);
	CHECK_EQ(cep_clock_quiesce(clk, 100), 0); /* nobody uses it */

	/* Dispatcher: one timer per worker, 5 ms after the clock's time. */
	struct cep_dispatch_attr da = { .workers = 2, .queue_depth = 16,
					.ops = { .mad = on_mad }, .clock = clk };
	static struct job jobs[2];

	CHECK_EQ(cep_dispatch_create(&da, &d), 0);
	CHECK_EQ(cep_clock_destroy(clk), -EBUSY);
	for (unsigned w = 0; w < 2; w++) {
		jobs[w].want = w;
		jobs[w].clk = clk;
		jobs[w].work.fn = arm_work;
		atomic_store(&jobs[w].quiesce_rc, 1);
		cep_dispatch_post_work(d, w, &jobs[w].work);
	}
	struct cep_dispatch_stats ds;

	CHECK_EQ(cep_clock_quiesce(clk, 5000), 0);
	for (unsigned w = 0; w < 2; w++)
		CHECK_EQ(atomic_load(&jobs[w].quiesce_rc), -EDEADLK); /* from a worker */
	cep_dispatch_stats(d, &ds);
	CHECK_EQ(ds.armed, 2);
	CHECK_EQ(cep_clock_advance_ns(clk, 4 * MS), 0);
	CHECK_EQ(cep_dispatch_quiesce(d, 5000), 0);
	for (unsigned w = 0; w < 2; w++)
		CHECK_EQ(atomic_load(&jobs[w].fired), 0);    /* 1 ms early */
	CHECK_EQ(cep_clock_advance_ns(clk, 1 * MS), 0);
	CHECK_EQ(cep_dispatch_quiesce(d, 5000), 0);      /* the tick is an item */
	for (unsigned w = 0; w < 2; w++)
		CHECK_EQ(atomic_load(&jobs[w].fired), 1);    /* due: fired, on its worker */
	cep_dispatch_stats(d, &ds);
	CHECK_EQ(ds.armed, 0);
	CHECK_EQ(cep_clock_advance_ns(clk, 3600000 * MS), 0); /* an hour: nothing more */
	CHECK_EQ(cep_clock_quiesce(clk, 5000), 0);
	for (unsigned w = 0; w < 2; w++)
		CHECK_EQ(atomic_load(&jobs[w].fired), 1);
	cep_dispatch_destroy(d);

	/* Fabric: an injected delay of 2 ms passes only with the clock. */
	struct cep_fabric *fab;
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 7, .clock = clk };
	struct cep_fabric_port_attr pa = { .size = sizeof(pa), .ca_guid = 1, .lid = 1,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_fabric_faults f = { .size = sizeof(f), .delay_min_us = 2000,
				       .delay_max_us = 2000 };
	struct cep_transport *x, *y;
	uint8_t mad[CEP_MAD_SIZE] = { 1 };
	struct cep_mad_addr to = { .lid = 2, .qpn = 1 };

	CHECK_EQ(cep_fabric_create(&fa, &fab), 0);
	CHECK_EQ(cep_fabric_port_create(fab, &pa, &x), 0);
	pa.ca_guid = 2;
	pa.lid = 2;
	CHECK_EQ(cep_fabric_port_create(fab, &pa, &y), 0);
	CHECK_EQ(y->ops->start(y, on_recv, NULL), 0);
	CHECK_EQ(cep_fabric_set_faults(fab, &f), 0);
	CHECK_EQ(x->ops->send(x, mad, sizeof(mad), &to), 0);
	CHECK_EQ(cep_fabric_quiesce(fab, 5000), 0); /* held: not due, not counted */
	CHECK_EQ(cep_clock_quiesce(clk, 5000), 0);
	CHECK_EQ(atomic_load(&delivered), 0);
	CHECK_EQ(cep_clock_advance_ns(clk, 1 * MS), 0);
	CHECK_EQ(cep_clock_quiesce(clk, 5000), 0);
	CHECK_EQ(atomic_load(&delivered), 0);
	CHECK_EQ(cep_clock_advance_ns(clk, 1 * MS), 0);
	CHECK_EQ(cep_clock_quiesce(clk, 5000), 0);
	CHECK_EQ(atomic_load(&delivered), 1);
	x->ops->destroy(x);
	y->ops->destroy(y);
	CHECK_EQ(cep_clock_destroy(clk), -EBUSY);
	CHECK_EQ(cep_fabric_destroy(fab), 0);
	CHECK_EQ(cep_clock_destroy(clk), 0);
	return check_done("clock");
}
