/* SPDX-License-Identifier: MIT */
/*
 * Dispatcher workers. Receive rings are bounded MPSC queues with a sequence
 * number per slot (C11 atomics, so ThreadSanitizer sees every hand-off
 * without annotations); a producer that may wait for room sleeps on a
 * second condition variable the worker signals after a batch, if it saw a
 * waiter (fenced both sides, so no lost wake-up); the work stack is a Treiber stack the worker empties
 * with one exchange (no ABA: the consumer never pops single nodes). A worker
 * sleeps on a condition variable only after announcing it, and producers
 * wake it only when it announced, so a wake-up is never lost. An idle
 * worker yields a while before it sleeps only after MADs or work items
 * (and only when it may run on more than one CPU),
 * and sleeps until its next timer is due (at most SLEEP_REAL_MAX_MS), so armed
 * timers cost at most a wake-up per expiry, not one per millisecond (the CM
 * rounds its deadlines so that expiries close together share one:
 * cm_coarse_deadline). A thread that needs a sleeping
 * worker awake earlier than it sleeps - a guest that armed an earlier
 * timer, a lazy work item (cep_dispatch_post_work_lazy) - arms the
 * worker's timerfd instead of waking it now (soon()): one system call, no
 * context switch, and items posted meanwhile share the wake-up.
 * A worker holds its run lock while awake and drops it to sleep; a guest
 * thread that takes it meanwhile (trylock, never a wait) acts as that
 * worker - its ring, work stack, wheel - so a MAD read on a transport's
 * receive thread can run to completion there without waking the worker,
 * and an API thread can arm a timer on the wheel without a work item.
 * With a virtual clock (cep/clock.h) time moves only by an advance, which
 * posts a tick item to every worker; the tick runs the wheel, so timers due
 * after an advance fire inside an item that quiesce waits for.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "dispatch.h"
#include "cm/lead.h"
#include "core/yield.h"
#include "core/rcu.h"

struct slot {
	_Atomic size_t seq;  /* == pos: free for producer pos; pos+1: full */
	uint16_t len;
	struct cep_mad_addr from;
	uint8_t mad[CEP_MAD_SIZE];
};

/* Fields by writer, a cache line each: producers (any thread posting),
 * the worker, and read-mostly ones; a line written by both sides would
 * move between their CPUs on every MAD. */
struct worker {
	/* read-mostly */
	struct cep_dispatch *d;
	unsigned idx;
	pthread_t thread;
	struct slot *ring;
	size_t mask;
	/* producers */
	_Alignas(64) _Atomic size_t tail;  /* claim counter */
	_Atomic uint64_t posted;           /* items in (quiesce, sleep check) */
	struct cep_work *_Atomic works;    /* Treiber stack */
	_Atomic uint64_t st_full, st_waits;
	/* a sleeping worker woken now, by cause (any thread) */
	_Atomic uint64_t st_kick_mad, st_kick_work, st_kick_lead;
	_Atomic uint64_t st_early_timer;   /* guests' earlier timers (leave): soon() */
	_Atomic uint64_t st_soon;          /* timerfd armed earlier (soon()) */
	_Atomic uint64_t st_lazy;          /* lazy items that found it asleep */
	/* CLOCK_MONOTONIC ns tfd is armed for; UINT64_MAX: not armed (the
	 * worker resets it when it wakes). Lowered only, by CAS: soon(). */
	_Atomic uint64_t wake_by;
	_Atomic int room_waiters;          /* in cep_dispatch_post_mad_wait */
	/* read by producers on every post, written by the worker to sleep */
	_Alignas(64) _Atomic int sleeping;
	/* the worker */
	_Alignas(64) size_t head;          /* consumer only */
	_Atomic uint64_t done;             /* items out (quiesce) */
	_Atomic int in_timers;             /* firing timers now (quiesce) */
	_Atomic uint64_t st_mads, st_works, st_timers, st_sleeps, st_yields;
	_Atomic uint64_t st_timeouts;      /* sleeps its poll's timeout ended */
	_Atomic uint64_t st_inline;        /* MADs a guest ran (run_mad) */
	_Atomic uint64_t st_armed;         /* wheel.armed after the last item */
	int efd;                           /* eventfd: a sleeping worker's wake-up
					      (its poll also watches the lead's fd
					      while it holds the lead) */
	int tfd;                           /* timerfd (CLOCK_MONOTONIC): a wake-up
					      at a time, armed by soon() */
	/* Held by whoever acts as this worker: its thread while awake, or a
	 * guest (cep_dispatch_enter) while it sleeps. Guard of head, wheel,
	 * now and sleep_until. */
	pthread_mutex_t run;
	uint64_t sleep_until;              /* ms the sleeping worker wakes at */
	pthread_mutex_t room_mtx;          /* room_cv: producers wait for room */
	pthread_cond_t room_cv;
	struct cep_work tick;              /* virtual clock moved, or a guest left
					      timers due: run the wheel */
	_Atomic int tick_queued;           /* tick posted and not yet started */
	size_t timers_left;                /* run: timers this visit may still fire
					      (a guest's budget; SIZE_MAX on the
					      worker's own thread, run_wheel) */
	struct cep_wheel wheel;            /* worker thread only */
	uint64_t now;                      /* worker thread only */
} __attribute__((aligned(64)));

struct cep_dispatch {
	struct cep_dispatch_attr attr;
	unsigned spin;                    /* const: yields before a sleep */
	_Atomic int stop;
	unsigned started;
	struct worker *w;
	struct cep_clock_sub sub;         /* on attr.clock when virtual */
};

/* A producer waiting for room re-reads its abort flag, the stop flag and
 * its bound this often (the worker signals room, nobody signals those). */
#define ROOM_SLICE_NS 10000000L

static _Thread_local const struct cep_dispatch *self_d;
static _Thread_local int self_idx = -1;

/* Wake @w's sleep (its poll): a write of its eventfd, which its poll
 * reads before it looks at its queues again. Any thread. */
static void kick(struct worker *w)
{
	uint64_t one = 1;

	/* Only fails when the counter would overflow: woken already. */
	(void)!write(w->efd, &one, sizeof(one));
}

/* The lead's backstop asks us to let go of it (lead.h: an application
 * thread wants it): the same wake-up. */
static void lead_kick(void *arg)
{
	struct worker *w = arg;

	atomic_fetch_add_explicit(&w->st_kick_lead, 1, memory_order_relaxed);
	kick(w);
}

#ifdef CEP_TEST_HOOKS
void (*cep_dispatch_soon_hook)(uint64_t ns);
#define SOON_HOOK(ns) do { if (cep_dispatch_soon_hook) cep_dispatch_soon_hook(ns); } while (0)
#else
#define SOON_HOOK(ns) CEP_YIELD()
#endif

/* Make the sleeping worker @w wake by @ns (CLOCK_MONOTONIC) without waking
 * it now: arm its timerfd unless it is armed for that time or earlier. Any
 * thread; no lock. Relaxed atomics suffice: the items the wake-up is for
 * are published by the seq_cst posted/sleeping pair (wake_worker's
 * argument), this only sets when. Two threads may arm at once: wake_by
 * holds the earliest (CAS), and whoever armed a later time than it holds
 * after its own arm arms again, so the timer ends at the earliest asked
 * for. A time armed after the worker woke and reset wake_by is a spurious
 * wake-up later (the worker reads the timerfd and sleeps again), never a
 * busy loop and never a lost one. A failed arm wakes the worker now. */
static void soon(struct worker *w, uint64_t ns)
{
	uint64_t cur = atomic_load_explicit(&w->wake_by, memory_order_relaxed);

	do {
		if (ns >= cur)
			return;
	} while (!atomic_compare_exchange_weak_explicit(&w->wake_by, &cur, ns,
							memory_order_relaxed,
							memory_order_relaxed));
	atomic_fetch_add_explicit(&w->st_soon, 1, memory_order_relaxed);
	SOON_HOOK(ns); /* tests: between our CAS and our arm */
	for (;;) {
		struct itimerspec its = { .it_value = { .tv_sec = (time_t)(ns / 1000000000u),
							.tv_nsec = (long)(ns % 1000000000u) } };

		if (timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &its, NULL)) {
			kick(w);
			return;
		}
		cur = atomic_load_explicit(&w->wake_by, memory_order_relaxed);
		if (cur >= ns)
			return; /* ours is the earliest (or the worker woke) */
		ns = cur;   /* an earlier arm may have gone before ours */
	}
}

/* The lead's application leader left (lead.h: cep_lead_backstop_take's
 * remind, under the lead's mutex): be awake by the lease's end, @at_ms
 * (CLOCK_MONOTONIC), without a wake-up now. Workers outlive the lead's
 * close (cep_cm_destroy closes it before it stops them). */
static void lead_remind(void *arg, uint64_t at_ms)
{
	soon(arg, at_ms * 1000000u);
}

/* Whether @w sleeps and the caller is not acting as it. Call after the
 * item is published and counted in w->posted (seq_cst). Dekker pair with
 * worker_main: the worker stores sleeping then reads posted, we add to
 * posted then read sleeping, all seq_cst, so either it sees our item or
 * we see it asleep (no lost wake-up). */
static int asleep_other(struct worker *w)
{
	/* A guest acting as w drains what it posts to w before it leaves
	 * (the worker itself is awake: sleeping is 0). */
	if (self_d == w->d && self_idx == (int)w->idx)
		return 0;
	return atomic_load_explicit(&w->sleeping, memory_order_seq_cst);
}

/* The same, and wake it: counted in @cause (may be NULL). */
static void wake_worker(struct worker *w, _Atomic uint64_t *cause)
{
	if (asleep_other(w)) {
		if (cause)
			atomic_fetch_add_explicit(cause, 1, memory_order_relaxed);
		kick(w);
	}
}

/* One attempt to copy a MAD into worker @w's ring: 0, or -ENOBUFS when the
 * ring is full (not counted here). Lock-free; any thread. */
static int ring_put(struct worker *w, const uint8_t *mad, size_t len,
		    const struct cep_mad_addr *from)
{
	size_t pos;
	struct slot *s;

	pos = atomic_load_explicit(&w->tail, memory_order_relaxed);
	for (;;) {
		size_t seq;
		intptr_t dif;

		s = &w->ring[pos & w->mask];
		/* acquire: the consumer's reads of this slot's last use happen
		 * before our overwrite. */
		seq = atomic_load_explicit(&s->seq, memory_order_acquire);
		dif = (intptr_t)seq - (intptr_t)pos;
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&w->tail, &pos, pos + 1,
						memory_order_relaxed, memory_order_relaxed))
				break;
		} else if (dif < 0) {
			return -ENOBUFS;
		} else {
			pos = atomic_load_explicit(&w->tail, memory_order_relaxed);
		}
	}
	s->len = (uint16_t)len;
	s->from = *from;
	memcpy(s->mad, mad, len);
	/* release: the slot's contents are visible to the consumer that sees
	 * seq == pos + 1. */
	atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
	atomic_fetch_add_explicit(&w->posted, 1, memory_order_seq_cst);
	wake_worker(w, &w->st_kick_mad);
	return 0;
}

int cep_dispatch_post_mad(struct cep_dispatch *d, unsigned wi, const uint8_t *mad,
			  size_t len, const struct cep_mad_addr *from)
{
	struct worker *w = &d->w[wi];

	if (len > CEP_MAD_SIZE)
		return -EINVAL;
	if (ring_put(w, mad, len, from) == 0)
		return 0;
	atomic_fetch_add_explicit(&w->st_full, 1, memory_order_relaxed);
	return -ENOBUFS;
}

/* Is the slot the next producer would claim still unconsumed? */
static int ring_full(struct worker *w)
{
	size_t pos = atomic_load_explicit(&w->tail, memory_order_relaxed);
	size_t seq = atomic_load_explicit(&w->ring[pos & w->mask].seq, memory_order_acquire);

	return (intptr_t)seq - (intptr_t)pos < 0;
}

int cep_dispatch_post_mad_wait(struct cep_dispatch *d, unsigned wi, const uint8_t *mad,
			       size_t len, const struct cep_mad_addr *from,
			       const _Atomic int *abort, unsigned max_ms)
{
	struct worker *w = &d->w[wi];
	uint64_t end = 0;

	if (len > CEP_MAD_SIZE)
		return -EINVAL;
	if (cep_dispatch_self(d) >= 0) /* a worker waiting on a ring: deadlock */
		return cep_dispatch_post_mad(d, wi, mad, len, from);
	for (;;) {
		struct timespec ts;

		if (ring_put(w, mad, len, from) == 0)
			return 0;
		if (!end) {
			end = cep_clock_ms(NULL) + max_ms;
			atomic_fetch_add_explicit(&w->st_waits, 1, memory_order_relaxed);
		}
		if ((abort && atomic_load_explicit(abort, memory_order_relaxed)) ||
		    atomic_load_explicit(&d->stop, memory_order_relaxed) ||
		    cep_clock_ms(NULL) >= end) {
			atomic_fetch_add_explicit(&w->st_full, 1, memory_order_relaxed);
			return -ENOBUFS;
		}
		/* Dekker pair with room_signal (fences seq_cst on both
		 * sides): the consumer sees us waiting, or we see the slot it
		 * freed; the mutex keeps its broadcast after our check. */
		atomic_fetch_add_explicit(&w->room_waiters, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		pthread_mutex_lock(&w->room_mtx);
		if (ring_full(w)) {
			/* A slice: abort, stop and the bound are read again
			 * after it (nobody signals those). */
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += ROOM_SLICE_NS;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&w->room_cv, &w->room_mtx, &ts);
		}
		pthread_mutex_unlock(&w->room_mtx);
		atomic_fetch_sub_explicit(&w->room_waiters, 1, memory_order_relaxed);
	}
}

/* Worker, after it freed slots: wake producers waiting for room. The fence
 * pairs with the one in cep_dispatch_post_mad_wait (after its waiter count
 * goes up): our slot release before our read of the count, its count
 * before its read of the slot, so one of us sees the other. */
static void room_signal(struct worker *w)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&w->room_waiters, memory_order_relaxed)) {
		pthread_mutex_lock(&w->room_mtx);
		pthread_cond_broadcast(&w->room_cv);
		pthread_mutex_unlock(&w->room_mtx);
	}
}

/* Push @work on @w's stack and count it posted (seq_cst: the Dekker pair
 * with the worker's sleep, wake_worker). */
static void push_work(struct worker *w, struct cep_work *work)
{
	struct cep_work *top = atomic_load_explicit(&w->works, memory_order_relaxed);

	do {
		atomic_store_explicit(&work->next, top, memory_order_relaxed);
		/* release: the work's fields (and the poster's writes) are visible
		 * to the worker that takes the stack. */
	} while (!atomic_compare_exchange_weak_explicit(&w->works, &top, work,
				memory_order_release, memory_order_relaxed));
	atomic_fetch_add_explicit(&w->posted, 1, memory_order_seq_cst);
}

void cep_dispatch_post_work(struct cep_dispatch *d, unsigned wi, struct cep_work *work)
{
	struct worker *w = &d->w[wi];

	push_work(w, work);
	wake_worker(w, &w->st_kick_work);
}

void cep_dispatch_wake(struct cep_dispatch *d, unsigned wi)
{
	struct worker *w = &d->w[wi];

	/* The item is queued (posted counted it): a worker that has not
	 * gone to sleep yet runs it first; one asleep is woken here. */
	wake_worker(w, &w->st_kick_work);
}

void cep_dispatch_post_work_lazy(struct cep_dispatch *d, unsigned wi, struct cep_work *work,
				 unsigned max_delay_ms)
{
	struct worker *w = &d->w[wi];

	push_work(w, work);
	/* The worker sees the item before it sleeps, or we see it asleep and
	 * set its wake-up. A guest that runs as w meanwhile (a MAD read by
	 * the lead) drains it sooner. */
	if (asleep_other(w)) {
		atomic_fetch_add_explicit(&w->st_lazy, 1, memory_order_relaxed);
		soon(w, cep_clock_now_ns(NULL) + (uint64_t)max_delay_ms * 1000000u);
	}
}

/* Worker: publish the wheel's armed count for cep_dispatch_stats before
 * the item that changed it counts as done, so it is exact once quiesce
 * returns. Relaxed: a monitoring figure; quiesce's acquire of done orders
 * it for a reader that quiesced first. */
static void note_armed(struct worker *w)
{
	atomic_store_explicit(&w->st_armed, w->wheel.armed, memory_order_relaxed);
}

static size_t drain_ring(struct worker *w, size_t budget)
{
	size_t n = 0;

	while (n < budget) {
		struct slot *s = &w->ring[w->head & w->mask];

		/* acquire: pairs with the producer's release of this slot. */
		if (atomic_load_explicit(&s->seq, memory_order_acquire) != w->head + 1)
			break;
		w->d->attr.ops.mad(w->d->attr.ctx, w->idx, s->mad, s->len, &s->from);
		/* release: our reads of the slot happen before a producer reuses it. */
		atomic_store_explicit(&s->seq, w->head + w->mask + 1, memory_order_release);
		w->head++;
		n++;
	}
	if (n) {
		note_armed(w); /* once per batch, before the batch counts as done */
		/* release: the batch's processing before quiesce sees it done */
		atomic_fetch_add_explicit(&w->done, n, memory_order_release);
		atomic_fetch_add_explicit(&w->st_mads, n, memory_order_relaxed);
		room_signal(w);
	}
	return n;
}

static size_t drain_works(struct worker *w)
{
	/* acquire: pairs with the posters' release CAS. */
	struct cep_work *list = atomic_exchange_explicit(&w->works, NULL, memory_order_acquire);
	struct cep_work *rev = NULL;
	size_t n = 0;

	while (list) { /* reverse: run in posting order */
		struct cep_work *next = atomic_load_explicit(&list->next, memory_order_relaxed);

		atomic_store_explicit(&list->next, rev, memory_order_relaxed);
		rev = list;
		list = next;
	}
	while (rev) {
		struct cep_work *next = atomic_load_explicit(&rev->next, memory_order_relaxed);

		/* The node may be re-posted by fn (or after it): read next first. */
		rev->fn(rev);
		note_armed(w);
		rev = next;
		n++;
		atomic_fetch_add_explicit(&w->done, 1, memory_order_release);
	}
	if (n)
		atomic_fetch_add_explicit(&w->st_works, n, memory_order_relaxed);
	return n;
}

/* Timers fired per turn of the worker loop, between its ring batches of
 * 256 MADs, and per visit of a guest (run_wheel, cep_dispatch_run_mad). */
#define TIMER_BATCH 64

/* Fire what is due on this worker's wheel at the clock's time, at most
 * TIMER_BATCH and at most w->timers_left. Worker, or a guest (run lock). */
static size_t run_wheel(struct worker *w)
{
	size_t f, max = w->timers_left < TIMER_BATCH ? w->timers_left : TIMER_BATCH;

	w->now = cep_clock_ms(w->d->attr.clock);
	if (!w->wheel.armed || !max) {
		/* Empty: only moves its time, and forgets a budgeted run whose
		 * rest was cancelled meanwhile (an RTU cancels the REP retry
		 * due with it). in_timers must drop with it, or quiesce waits
		 * for timers that no longer exist (issue 26). A guest whose
		 * budget is spent leaves the wheel alone (run_mad hands the
		 * rest to the worker). */
		f = w->wheel.armed ? 0 : cep_wheel_run(&w->wheel, w->now);
		/* relaxed load: only whoever acts as this worker writes the
		 * flag; the store is seq_cst as the other stores of it. */
		if (!cep_wheel_pending(&w->wheel) &&
		    atomic_load_explicit(&w->in_timers, memory_order_relaxed))
			atomic_store_explicit(&w->in_timers, 0, memory_order_seq_cst);
		return f;
	}
	/* seq_cst: quiesce must see either this flag or the effects of the
	 * timers it covers, not neither. */
	atomic_store_explicit(&w->in_timers, 1, memory_order_seq_cst);
	/* At most TIMER_BATCH, then the ring again: the worker loop comes
	 * back for the rest (it sees fired > 0). A burst of due retries
	 * (10,000 REPs sent together time out together) must not hold the
	 * ring - and the receive thread waiting for room in it - for the
	 * seconds their sends take: the RTUs that end those retries are
	 * behind it (issue 21). The flag stays set while some are left, so
	 * quiesce still waits for every timer due. */
	f = cep_wheel_run_max(&w->wheel, w->now, max);
	if (w->timers_left != SIZE_MAX)
		w->timers_left -= f;
	note_armed(w);
	atomic_store_explicit(&w->in_timers, cep_wheel_pending(&w->wheel), memory_order_seq_cst);
	if (f)
		atomic_fetch_add_explicit(&w->st_timers, f, memory_order_relaxed);
	return f;
}

/* The tick item: a virtual clock's advance (dispatch_clock_wake), or the
 * rest of a guest's due timers (cep_dispatch_run_mad). Worker or guest. */
static void tick_fn(struct cep_work *wk)
{
	struct worker *w = (struct worker *)((char *)wk - offsetof(struct worker, tick));

	/* seq_cst: clear before reading the clock, so an advance that finds
	 * the flag set is read by this run, and one that finds it clear posts
	 * a new tick (pairs with dispatch_clock_wake's exchange). */
	atomic_store(&w->tick_queued, 0);
	run_wheel(w);
}

/* cep_clock_sub.wake: the virtual clock moved (clock mutex held). */
static void dispatch_clock_wake(struct cep_clock_sub *s)
{
	struct cep_dispatch *d = (struct cep_dispatch *)((char *)s - offsetof(struct cep_dispatch, sub));

	for (unsigned i = 0; i < d->attr.workers; i++)
		if (!atomic_exchange(&d->w[i].tick_queued, 1))
			cep_dispatch_post_work(d, i, &d->w[i].tick);
}

static int dispatch_busy(struct cep_dispatch *d, uint64_t *activity)
{
	int busy = 0;

	*activity = 0;
	for (unsigned i = 0; i < d->attr.workers; i++) {
		struct worker *w = &d->w[i];
		/* acquire: the worker's processing of those items happened. */
		uint64_t done = atomic_load_explicit(&w->done, memory_order_acquire);
		/* seq_cst: every item is counted in posted (seq_cst) before the
		 * poster can be seen idle. */
		uint64_t posted = atomic_load_explicit(&w->posted, memory_order_seq_cst);

		if (done != posted || atomic_load_explicit(&w->in_timers, memory_order_seq_cst))
			busy = 1;
		*activity += posted;
	}
	return busy;
}

static int dispatch_clock_busy(struct cep_clock_sub *s, uint64_t *activity)
{
	return dispatch_busy((struct cep_dispatch *)((char *)s - offsetof(struct cep_dispatch, sub)),
			     activity);
}

static int dispatch_clock_is_self(struct cep_clock_sub *s)
{
	return cep_dispatch_self((struct cep_dispatch *)((char *)s -
							 offsetof(struct cep_dispatch, sub))) >= 0;
}

/* Yields of an idle worker before it sleeps, after it did work, when the
 * process may run on more than one CPU. On one CPU the producer cannot
 * post while the worker spins: each yield is a system call, and a context
 * switch when another thread is runnable, where one sleep and one futex
 * wake would do (issue 21: with this and batched umad reads a one-vCPU
 * guest's libcep server made 58-66 system calls per connection, not
 * 183-197). */
#define SPIN_YIELDS 64
/* The longest sleep with a virtual clock, whose advance posts a tick to
 * wake the worker. */
#define SLEEP_MAX_MS 50
/* The longest sleep in real time: a safety net only (a post wakes the
 * worker, and so does a guest that arms a timer due earlier than its
 * wake-up: cep_dispatch_leave). Each wake-up of an idle worker is a
 * context switch there and back on a one-vCPU guest: at 50 ms, 20 a
 * second, 1-2 per connection of cmtime's 1,000 (issue 21). */
#define SLEEP_REAL_MAX_MS 1000

/* How long the worker may sleep: until its next timer is due (real time),
 * at most SLEEP_REAL_MAX_MS (virtual: SLEEP_MAX_MS); 0 if one is due now.
 * Worker. */
static long sleep_ns(struct worker *w)
{
	const struct cep_clock *c = w->d->attr.clock;
	int virt = cep_clock_is_virtual(c);
	unsigned max = virt ? SLEEP_MAX_MS : SLEEP_REAL_MAX_MS;
	uint64_t due, now;

	/* What a guest compares its timers with (cep_dispatch_leave); with a
	 * virtual clock only an advance's tick fires timers. */
	w->sleep_until = virt ? UINT64_MAX : cep_wheel_next(&w->wheel, max);
	if (!w->wheel.armed || virt)
		return (long)max * 1000000L;
	/* The wheel fires a timer of tick t once the clock's ms reach t. */
	due = w->sleep_until * 1000000u;
	now = cep_clock_now_ns(c);
	return due > now ? (long)(due - now) : 0;
}

/* CPUs the creating thread (and so its workers) may run on. */
static int cpus_allowed(void)
{
	cpu_set_t set;
	long n;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		return CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* Sleep @ns at most, until kicked (a post, a guest's early timer, stop,
 * an application that wants the lead). A worker that takes the lead for
 * its sleep (the backstop: no application thread waits, lead.h) also
 * polls the receive queue, and on a MAD drains it on this thread (the
 * MADs go to their workers' rings: ours is handled next), then gives the
 * lead back: it holds it only asleep. Worker, run lock held (dropped
 * while asleep: a guest may act as this worker meanwhile). */
static void sleep_on(struct worker *w, long ns)
{
	struct cep_dispatch *d = w->d;
	int ms = (int)((ns + 999999) / 1000000), leading = 0, r;
	struct pollfd pf[3] = { { .fd = w->efd, .events = POLLIN },
				{ .fd = w->tfd, .events = POLLIN } };

	if (d->attr.lead)
		leading = cep_lead_backstop_take(d->attr.lead, &ms, lead_kick, lead_remind, w);
	if (leading) {
		pf[2].fd = cep_lead_fd(d->attr.lead);
		pf[2].events = POLLIN;
	}
	cep_rcu_worker_idle_begin(); /* grace periods do not wait for a sleeper */
	/* Asleep, a guest may act as this worker (run-to-completion,
	 * cep_dispatch_enter); awake, we wait for it to leave. */
	pthread_mutex_unlock(&w->run);
	r = poll(pf, leading ? 3 : 2, ms);
	if (r == 0)
		atomic_fetch_add_explicit(&w->st_timeouts, 1, memory_order_relaxed);
	if (r > 0) {
		uint64_t v;

		if (pf[0].revents & POLLIN)
			(void)!read(w->efd, &v, sizeof(v));
		if (pf[1].revents & POLLIN) /* fired: read, or it stays ready */
			(void)!read(w->tfd, &v, sizeof(v));
	}
	/* Awake: what soon() armed is ours to forget (an arm that races
	 * with this is a spurious wake-up later; the items it was for are
	 * drained before we sleep again: posted/sleeping). Not disarmed: an
	 * early wake-up (a post) leaves it to fire once, spuriously, rather
	 * than a system call on every wake-up. (Written only when set: the
	 * line is the producers'.) */
	if (atomic_load_explicit(&w->wake_by, memory_order_relaxed) != UINT64_MAX)
		atomic_store_explicit(&w->wake_by, UINT64_MAX, memory_order_relaxed);
	pthread_mutex_lock(&w->run);
	cep_rcu_worker_idle_end();
	if (leading) {
		if (pf[2].revents & (POLLIN | POLLERR | POLLHUP))
			(void)cep_lead_backstop_drain(d->attr.lead);
		cep_lead_backstop_put(d->attr.lead);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct cep_dispatch *d = w->d;
	unsigned idle = 0;

	self_d = d;
	self_idx = (int)w->idx;
	{
		char name[16];

		/* Named for per-thread CPU and wake-up counts (/proc, perf). */
		snprintf(name, sizeof(name), "cep-worker%u", w->idx % 10000);
		(void)pthread_setname_np(pthread_self(), name);
	}
	/* urcu-qsbr (CEP_RCU=qsbr): online for good, quiescent between
	 * batches, offline asleep; no-ops with urcu-memb (rcu.h). */
	cep_rcu_worker_begin();
	pthread_mutex_lock(&w->run); /* ours while awake */
	if (d->attr.ops.thread_start)
		d->attr.ops.thread_start(d->attr.ctx, w->idx);
	for (;;) {
		size_t n = drain_ring(w, 256);
		size_t fired;

		n += drain_works(w);
		fired = run_wheel(w);
		/* Between batches the worker holds nothing it found under RCU
		 * without a reference. */
		cep_rcu_worker_quiescent();
		if (n) {
			idle = 0;
			continue;
		}
		if (fired)
			continue; /* look again, but timers alone earn no spinning */
		if (atomic_load_explicit(&d->stop, memory_order_acquire))
			break;
		/* Yield a while before sleeping only after work: within a burst
		 * the next MAD is likely soon, and a sleep costs a futex wake to
		 * the producer. A wake-up that found nothing (a timer not due
		 * yet, the bound) sleeps again at once. */
		if (idle < d->spin) {
			idle++;
			atomic_fetch_add_explicit(&w->st_yields, 1, memory_order_relaxed);
			sched_yield();
			continue;
		}
		/* Dekker pair with wake_worker (both seq_cst): see the item or be
		 * seen asleep. done is ours; posted may lag a published item, never
		 * lead it. */
		atomic_store_explicit(&w->sleeping, 1, memory_order_seq_cst);
		if (atomic_load_explicit(&w->posted, memory_order_seq_cst) ==
			    atomic_load_explicit(&w->done, memory_order_relaxed) &&
		    !atomic_load_explicit(&d->stop, memory_order_relaxed)) {
			long ns = sleep_ns(w);

			if (ns == 0) {
				idle = d->spin;
				atomic_store_explicit(&w->sleeping, 0, memory_order_relaxed);
				continue; /* a timer is due: run the wheel */
			}
			atomic_fetch_add_explicit(&w->st_sleeps, 1, memory_order_relaxed);
			sleep_on(w, ns);
		}
		atomic_store_explicit(&w->sleeping, 0, memory_order_relaxed);
		idle = d->spin; /* spin again once work came */
	}
	pthread_mutex_unlock(&w->run);
	cep_rcu_worker_end();
	self_d = NULL;
	self_idx = -1;
	return NULL;
}

int cep_dispatch_create(const struct cep_dispatch_attr *attr, struct cep_dispatch **out)
{
	struct cep_dispatch *d;

	if (!attr || !out || attr->workers == 0 || attr->workers > 1024 ||
	    attr->queue_depth < 2 || (attr->queue_depth & (attr->queue_depth - 1)) ||
	    !attr->ops.mad)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->attr = *attr;
	d->spin = cpus_allowed() > 1 ? SPIN_YIELDS : 0;
	if (posix_memalign((void **)&d->w, 64, sizeof(*d->w) * attr->workers)) {
		free(d);
		return -ENOMEM;
	}
	memset(d->w, 0, sizeof(*d->w) * attr->workers);
	for (unsigned i = 0; i < attr->workers; i++)
		d->w[i].efd = d->w[i].tfd = -1;
	for (unsigned i = 0; i < attr->workers; i++) {
		struct worker *w = &d->w[i];

		w->d = d;
		w->idx = i;
		w->mask = attr->queue_depth - 1;
		w->ring = calloc(attr->queue_depth, sizeof(*w->ring));
		if (!w->ring)
			goto fail;
		for (size_t j = 0; j < attr->queue_depth; j++)
			atomic_init(&w->ring[j].seq, j);
		w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (w->efd < 0)
			goto fail;
		w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (w->tfd < 0)
			goto fail;
		atomic_init(&w->wake_by, UINT64_MAX);
		pthread_mutex_init(&w->run, NULL);
		pthread_mutex_init(&w->room_mtx, NULL);
		pthread_cond_init(&w->room_cv, NULL);
		w->tick.fn = tick_fn;
		w->timers_left = SIZE_MAX;
		/* The wheel is set up before the thread starts: work posted at
		 * once (a tick, a timer) may touch it from the worker. */
		w->now = cep_clock_ms(attr->clock);
		cep_wheel_init(&w->wheel, w->now);
	}
	for (unsigned i = 0; i < attr->workers; i++) {
		if (pthread_create(&d->w[i].thread, NULL, worker_main, &d->w[i])) {
			atomic_store(&d->stop, 1);
			for (unsigned j = 0; j < i; j++) {
				wake_worker(&d->w[j], NULL);
				pthread_join(d->w[j].thread, NULL);
			}
			goto fail;
		}
		d->started = i + 1;
	}
	if (attr->clock) {
		d->sub.wake = dispatch_clock_wake;
		d->sub.busy = dispatch_clock_busy;
		d->sub.is_self = dispatch_clock_is_self;
		cep_clock_subscribe(attr->clock, &d->sub);
	}
	*out = d;
	return 0;
fail:
	for (unsigned i = 0; i < attr->workers; i++) {
		free(d->w[i].ring);
		if (d->w[i].efd >= 0)
			close(d->w[i].efd);
		if (d->w[i].tfd >= 0)
			close(d->w[i].tfd);
	}
	free(d->w);
	free(d);
	return -ENOMEM;
}

void cep_dispatch_stop(struct cep_dispatch *d,
		       void (*drain)(struct cep_timer *t, void *ctx), void *ctx)
{
	if (!d->started)
		return;
	if (d->attr.clock)
		/* No tick may be posted to a joined worker. */
		cep_clock_unsubscribe(d->attr.clock, &d->sub);
	atomic_store_explicit(&d->stop, 1, memory_order_release);
	for (unsigned i = 0; i < d->started; i++) {
		struct worker *w = &d->w[i];

		kick(w);
		pthread_join(w->thread, NULL);
	}
	for (unsigned i = 0; i < d->started; i++) {
		/* Workers are joined: their items and wheels are ours now. */
		struct worker *w = &d->w[i];

		while (drain_ring(w, SIZE_MAX) || drain_works(w))
			;
		if (drain)
			cep_wheel_drain(&w->wheel, drain, ctx);
	}
	d->started = 0;
}

void cep_dispatch_destroy(struct cep_dispatch *d)
{
	if (!d)
		return;
	cep_dispatch_stop(d, NULL, NULL);
	for (unsigned i = 0; i < d->attr.workers; i++) {
		close(d->w[i].efd);
		close(d->w[i].tfd);
		pthread_mutex_destroy(&d->w[i].run);
		pthread_mutex_destroy(&d->w[i].room_mtx);
		pthread_cond_destroy(&d->w[i].room_cv);
		free(d->w[i].ring);
	}
	free(d->w);
	free(d);
}

unsigned cep_dispatch_workers(const struct cep_dispatch *d)
{
	return d->attr.workers;
}

int cep_dispatch_self(const struct cep_dispatch *d)
{
	return self_d == d ? self_idx : -1;
}

int cep_dispatch_enter(struct cep_dispatch *d, unsigned wi)
{
	struct worker *w = &d->w[wi];

	/* QSBR: the worker's read-side protocol (online between batches)
	 * is its thread's; a guest would need it too. A worker (or a guest)
	 * never acts as a second one. */
	if (cep_rcu_qsbr || self_d ||
	    atomic_load_explicit(&d->stop, memory_order_relaxed))
		return -EBUSY;
	/* Never waits: a guest may hold an id lock (cm_set_timer), and the
	 * worker holds run while it takes id locks. */
	if (pthread_mutex_trylock(&w->run))
		return -EBUSY;
	/* Under run: stop set before we got it means the worker may be gone
	 * (it leaves run unlocked when it exits). */
	if (atomic_load_explicit(&d->stop, memory_order_relaxed)) {
		pthread_mutex_unlock(&w->run);
		return -EBUSY;
	}
	/* seq_cst: quiesce counts a guest inside as an item not done. */
	atomic_fetch_add_explicit(&w->posted, 1, memory_order_seq_cst);
	w->now = cep_clock_ms(d->attr.clock);
	return 0;
}

void cep_dispatch_leave(struct cep_dispatch *d, unsigned wi, uint64_t armed_ms)
{
	struct worker *w = &d->w[wi];
	uint64_t at = 0;
	int wake = 0;

	note_armed(w);
	/* A timer the guest armed that is due before the sleeping worker
	 * wakes: wake it to sleep less. Later timers wait for its wake-up.
	 * The caller names its earliest, or asks us to look (a scan of up
	 * to SLEEP_REAL_MAX_MS slots: not on an API thread's path). */
	if (armed_ms == CEP_DISPATCH_ARMED_UNKNOWN && w->wheel.armed)
		armed_ms = cep_wheel_next(&w->wheel, SLEEP_REAL_MAX_MS);
	if (armed_ms < w->sleep_until && !cep_clock_is_virtual(d->attr.clock)) {
		/* the worker's new wake-up: later guests compare with it */
		at = armed_ms;
		w->sleep_until = at;
		wake = 1;
	}
	/* release: the guest's work before quiesce sees it done. */
	atomic_fetch_add_explicit(&w->done, 1, memory_order_release);
	pthread_mutex_unlock(&w->run);
	if (wake) {
		/* asleep (we held its run lock) or about to sleep again with
		 * the new timer in its wheel: its timerfd, not a wake-up now */
		atomic_fetch_add_explicit(&w->st_early_timer, 1, memory_order_relaxed);
		soon(w, at * 1000000u);
	}
}

int cep_dispatch_run_mad(struct cep_dispatch *d, unsigned wi, const uint8_t *mad,
			 size_t len, const struct cep_mad_addr *from)
{
	struct worker *w = &d->w[wi];
	int spent;

	if (len > CEP_MAD_SIZE)
		return -EINVAL;
	if (cep_dispatch_enter(d, wi))
		return -EBUSY;
	self_d = d;
	self_idx = (int)wi;
	/* At most TIMER_BATCH timers in this whole visit, the ticks it runs
	 * included (run_wheel): the receive thread goes back to its queue,
	 * where the MADs that end those timers (RTUs for REP retries) wait,
	 * as the worker goes back to its ring (issue 26). */
	w->timers_left = TIMER_BATCH;
	/* What was queued for this worker first: its MADs in order. */
	while (drain_ring(w, SIZE_MAX) || drain_works(w))
		;
	d->attr.ops.mad(d->attr.ctx, wi, mad, len, from);
	atomic_fetch_add_explicit(&w->st_mads, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&w->st_inline, 1, memory_order_relaxed);
	/* And what the MAD and the timers due queued for it (posts to
	 * ourselves do not wake the worker: wake_worker). */
	while (drain_ring(w, SIZE_MAX) + drain_works(w) + run_wheel(w))
		;
	spent = w->timers_left == 0;
	w->timers_left = SIZE_MAX;
	self_d = NULL;
	self_idx = -1;
	/* Budget spent: the rest (due or left by a budgeted run) is the
	 * worker's, as a tick item - it wakes the worker (we are no longer
	 * self), and quiesce, which counts us until leave, counts it from
	 * here. */
	/* The exchange: one tick queued at a time, against an advance's
	 * (dispatch_clock_wake); tick_fn clears it before it runs the wheel. */
	if (spent && !atomic_exchange(&w->tick_queued, 1))
		cep_dispatch_post_work(d, wi, &w->tick);
	cep_dispatch_leave(d, wi, CEP_DISPATCH_ARMED_UNKNOWN);
	return 0;
}

struct cep_wheel *cep_dispatch_wheel(struct cep_dispatch *d, unsigned w)
{
	return &d->w[w].wheel;
}

uint64_t cep_dispatch_now(struct cep_dispatch *d, unsigned w)
{
	return d->w[w].now;
}

uint64_t cep_dispatch_clock_ms(const struct cep_dispatch *d)
{
	return cep_clock_ms(d->attr.clock);
}

int cep_dispatch_quiesce(struct cep_dispatch *d, unsigned timeout_ms)
{
	uint64_t end = cep_clock_ms(NULL) + timeout_ms;

	for (;;) {
		uint64_t activity;

		if (!dispatch_busy(d, &activity))
			return 0;
		if (cep_clock_ms(NULL) > end)
			return -ETIMEDOUT;
		struct timespec ts = { 0, 200000 };
		nanosleep(&ts, NULL);
	}
}

void cep_dispatch_stats(struct cep_dispatch *d, struct cep_dispatch_stats *st)
{
	memset(st, 0, sizeof(*st));
	for (unsigned i = 0; i < d->attr.workers; i++) {
		struct worker *w = &d->w[i];

		st->mads += atomic_load_explicit(&w->st_mads, memory_order_relaxed);
		st->works += atomic_load_explicit(&w->st_works, memory_order_relaxed);
		st->full += atomic_load_explicit(&w->st_full, memory_order_relaxed);
		st->waits += atomic_load_explicit(&w->st_waits, memory_order_relaxed);
		st->inline_mads += atomic_load_explicit(&w->st_inline, memory_order_relaxed);
		st->timers += atomic_load_explicit(&w->st_timers, memory_order_relaxed);
		st->sleeps += atomic_load_explicit(&w->st_sleeps, memory_order_relaxed);
		st->timeouts += atomic_load_explicit(&w->st_timeouts, memory_order_relaxed);
		st->yields += atomic_load_explicit(&w->st_yields, memory_order_relaxed);
		st->armed += atomic_load_explicit(&w->st_armed, memory_order_relaxed);
		st->kick_mad += atomic_load_explicit(&w->st_kick_mad, memory_order_relaxed);
		st->kick_work += atomic_load_explicit(&w->st_kick_work, memory_order_relaxed);
		st->early_timer += atomic_load_explicit(&w->st_early_timer, memory_order_relaxed);
		st->kick_lead += atomic_load_explicit(&w->st_kick_lead, memory_order_relaxed);
		st->lazy += atomic_load_explicit(&w->st_lazy, memory_order_relaxed);
		st->soon += atomic_load_explicit(&w->st_soon, memory_order_relaxed);
	}
}
