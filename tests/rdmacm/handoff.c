/* SPDX-License-Identifier: MIT */
/*
 * An event for a thread already blocked in rdma_get_cm_event (issue 21):
 * it is handed to that thread (a futex wake) and never queued, so the
 * channel's fd does not become readable for it - no eventfd write and read
 * - while a poll() user still sees the fd readable exactly while events
 * wait: with no getter blocked, a pushed event makes the fd readable until
 * it is taken. Two getters blocked take two events, oldest first. The
 * layer's objects are linked in. Usage: test-rdmacm-handoff.
 */
#include <poll.h>
#include <pthread.h>
#include <time.h>

#include "../common/check.h"
#include "rdmacm.h"

static struct rcm_channel *ch;
static struct rcm_id *owner;

struct getter {
	pthread_t t;
	struct rdma_cm_event *ev;
	_Atomic int done;
};

static void *getter(void *arg)
{
	struct getter *g = arg;

	CHECK_EQ(rdma_get_cm_event(&ch->ch, &g->ev), 0);
	atomic_store(&g->done, 1);
	return NULL;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int readable(void)
{
	struct pollfd p = { .fd = ch->ch.fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/* Wait until @n getters are blocked on the channel. */
static void wait_blocked(int n)
{
	for (int i = 0; i < 5000; i++) {
		int k = 0;

		pthread_mutex_lock(&ch->mtx);
		for (struct rcm_getter *g = ch->waiting; g; g = g->next)
			k++;
		pthread_mutex_unlock(&ch->mtx);
		if (k == n)
			return;
		sleep_ms(1);
	}
	CHECK(!"getters never blocked");
}

static void push(enum rdma_cm_event_type type)
{
	struct rcm_event *e = rcm_event_new(owner, type, 0);

	CHECK(e != NULL);
	pthread_mutex_lock(&owner->mtx);
	rcm_push_locked(e);
	pthread_mutex_unlock(&owner->mtx);
}

int main(void)
{
	struct getter g1 = { 0 }, g2 = { 0 };
	struct rdma_cm_event *ev;

	ch = rcm_channel_new();
	CHECK(ch != NULL);
	owner = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	CHECK(owner != NULL);

	/* A blocked getter: the event goes to it, the fd never readable. */
	CHECK_EQ(pthread_create(&g1.t, NULL, getter, &g1), 0);
	wait_blocked(1);
	push(RDMA_CM_EVENT_ESTABLISHED);
	CHECK(!readable());
	CHECK_EQ(ch->signaled, 0);
	pthread_join(g1.t, NULL);
	CHECK_EQ(g1.ev->event, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(g1.ev->id == &owner->id);
	CHECK_EQ(atomic_load(&owner->events_reported), 1);
	CHECK(!readable());
	CHECK_EQ(rdma_ack_cm_event(g1.ev), 0);

	/* Two blocked getters, two events: one each, in the order they came. */
	CHECK_EQ(pthread_create(&g1.t, NULL, getter, &g1), 0);
	wait_blocked(1);
	CHECK_EQ(pthread_create(&g2.t, NULL, getter, &g2), 0);
	wait_blocked(2);
	push(RDMA_CM_EVENT_DISCONNECTED);
	push(RDMA_CM_EVENT_TIMEWAIT_EXIT);
	CHECK(!readable());
	pthread_join(g1.t, NULL);
	pthread_join(g2.t, NULL);
	CHECK_EQ(g1.ev->event, RDMA_CM_EVENT_DISCONNECTED);
	CHECK_EQ(g2.ev->event, RDMA_CM_EVENT_TIMEWAIT_EXIT);
	CHECK_EQ(rdma_ack_cm_event(g1.ev), 0);
	CHECK_EQ(rdma_ack_cm_event(g2.ev), 0);

	/* Nobody blocked (a poll() user): queued, readable until taken. */
	push(RDMA_CM_EVENT_ESTABLISHED);
	CHECK(readable());
	CHECK_EQ(rdma_get_cm_event(&ch->ch, &ev), 0);
	CHECK(!readable());
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	CHECK_EQ(atomic_load(&owner->events_reported), 4);

	rcm_id_put(owner);
	rcm_channel_free(ch);
	return check_done("rdmacm-handoff");
}
