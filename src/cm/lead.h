/* SPDX-License-Identifier: MIT */
/*
 * Who reads a receive queue: leader/followers (issue 27, "one wake-up per
 * MAD"). A lead is one source of work that a thread must read and handle:
 * a transport's receive queue (libibumad's fd) or, for a context served
 * by cepd, the service's socket. At most one thread reads it at a time,
 * the leader, and it handles what it reads on its own thread (the MAD's
 * engine work, its answer, the event) instead of handing it on:
 *
 * - an application thread that waits for events (rdma_get_cm_event, a
 *   channel wait) leads while it waits, so a MAD that brings its event
 *   wakes exactly that thread, once;
 * - when no application thread waits, a backstop leads: a CM worker as it
 *   goes to sleep (dispatch.c), or the remote context's reader thread;
 * - an application thread that wants the lead while the backstop holds it
 *   asks the backstop to let go (its kick) and takes it; several waiting
 *   application threads take turns (followers wait on their own eventfd,
 *   and the leader wakes one when it leaves);
 * - an application leader that returns keeps the lead warm for LEAD_LEASE_MS:
 *   the backstop takes it only after that, so an application that waits
 *   again at once (an event loop) leads again without any other thread
 *   waking, and a MAD that comes meanwhile waits at most the lease.
 *
 * Thread wake-ups: every waiter (application thread) has one eventfd of its
 * thread (cep_lead_self); whoever produces its event writes it
 * (cep_lead_wake), unless the producer is that thread itself.
 *
 * Contract: a source's drain runs on the leader only, never with a lock
 * of this module held. A thread leads at most the leads of one wait at a
 * time. Cancellation: a thread cancelled in cep_lead_wait (poll is a
 * cancellation point) gives its leads back (cleanup handlers).
 *
 * A drain that is about to run code which may wait for another thread
 * (a callback that takes an application's lock, whose holder may be
 * waiting on one of these leads for a reply only a reader brings) steps
 * aside first (cep_lead_step_aside): nobody is kept from reading while it
 * waits.
 */
#ifndef CEP_CM_LEAD_H
#define CEP_CM_LEAD_H

#include <stdint.h>

/* How long an application leader that returned keeps the lead from the
 * backstop: the longest a MAD waits unread when the application does not
 * come back (and, for a backstop without a remind, its wake-up period
 * while an application leads). */
#define LEAD_LEASE_MS 20

struct cep_lead;
struct cep_lead_waiter;

struct cep_lead_source {
	int fd;          /* readable while work waits (poll POLLIN) */
	/* Leader only, no lock of this module held: handle what waits now,
	 * without blocking; > 0 if something was handled. */
	int (*drain)(void *ctx);
	void *ctx;
};

int cep_lead_create(const struct cep_lead_source *src, struct cep_lead **out);
/* The context stops: from now nobody takes the lead; every wait that
 * names it (its application leader, its followers) is woken and leaves
 * it for good; this returns once none can touch it any more (bounded by a
 * drain in progress). The backstop may still hold it: its owner stops
 * the backstop. Any thread but one waiting on @l. */
void cep_lead_close(struct cep_lead *l);
/* After cep_lead_close and the backstop's end. */
void cep_lead_destroy(struct cep_lead *l);
/* The source's fd (the backstop polls it while it holds the lead). */
int cep_lead_fd(const struct cep_lead *l);

/* ---- application threads ------------------------------------------------------ */

/* The calling thread's waiter (its eventfd, made on first use; NULL when
 * none can be made: then the thread waits without leading). */
struct cep_lead_waiter *cep_lead_self(void);
/* Wake @w, whose thread waits (or will wait) in cep_lead_wait: a write
 * to its eventfd, none when @w is the calling thread's own. Any thread,
 * any lock held; a wake of a thread that no longer waits makes its next
 * wait look at its predicate once more. */
void cep_lead_wake(struct cep_lead_waiter *w);

/* Wait until @ready(@arg) is true, leading the @n leads (at most 8)
 * meanwhile when it can, else waiting for its event or its turn on its
 * eventfd, and on @extra_fd (>= 0: a level-triggered fd readable while
 * the wait may be over, e.g. an event channel's eventfd; -1: none).
 * @ready is called without locks of this module, by this thread, after
 * every wake-up and every drain. 0 (ready), -ETIMEDOUT (@timeout_ms
 * passed; < 0: no limit), -EINTR (a signal interrupted the wait: the
 * caller decides whether to wait again). Leads are given back before it
 * returns; a lead closed meanwhile is left at once. */
int cep_lead_wait(struct cep_lead *const *leads, unsigned n, int extra_fd,
		  int (*ready)(void *arg), void *arg, int timeout_ms);

/* Inside a drain that cep_lead_wait runs (on an application leader): the
 * calling thread stops leading every lead of that wait, at once, as if it
 * had returned (the first follower of each takes its turn; with none the
 * lead is free, and the lease keeps the backstop off). The wait goes on
 * after the drain, following them again (it takes them back when free).
 * For a drain that will run code that may block on another thread (see
 * above). A no-op anywhere else (the backstop's drain: it gives the lead
 * back with cep_lead_backstop_put). Nothing of the source is touched. */
void cep_lead_step_aside(void);

/* ---- the backstop --------------------------------------------------------------- */

/* The backstop's side (a worker about to sleep, the reader thread): 1 if
 * the caller now leads @l (it polls the source's fd too, and must call
 * cep_lead_backstop_put when it wakes), 0 if not. When an application
 * leader left less than LEAD_LEASE_MS ago, it does not take the lead and
 * lowers *@sleep_ms (in/out, < 0: none) to the rest of the lease.
 * @kick(@kick_arg) must wake the caller's sleep: an application thread
 * that wants the lead calls it. While an application leads: with @remind
 * (may be NULL), *@sleep_ms stays and @remind(@kick_arg, at_ms) is called
 * once, when that application leaves with no follower to take the turn,
 * under the lead's mutex: it must end the caller's sleep by at_ms
 * (CLOCK_MONOTONIC ms: the lease's end) without blocking, and the caller
 * must outlive the lead's close; without it, *@sleep_ms is lowered to
 * LEAD_LEASE_MS (a look every lease). */
int cep_lead_backstop_take(struct cep_lead *l, int *sleep_ms, void (*kick)(void *),
			   void (*remind)(void *, uint64_t), void *kick_arg);
void cep_lead_backstop_put(struct cep_lead *l);
/* The backstop holding @l found its fd readable: drain it (counted). */
int cep_lead_backstop_drain(struct cep_lead *l);

/* Statistics: relaxed counters. */
struct cep_lead_stats {
	uint64_t app_leads;      /* waits that led */
	uint64_t app_drains;     /* drains by application threads */
	uint64_t backstop_drains;/* drains by the backstop */
	uint64_t kicks;          /* backstops asked to let go */
	uint64_t handovers;      /* leaders that woke a follower */
	uint64_t asides;         /* leads given up inside a drain (step aside) */
	uint64_t backstop_looks; /* cep_lead_backstop_take calls: a backstop's
				    wake-ups (each sleep begins with one) */
	uint64_t backstop_now;   /* 1 while the backstop holds the lead (read
				    under the lead's mutex: a state, not a count) */
};
/* Any thread; takes the lead's mutex for backstop_now only. */
void cep_lead_stats(struct cep_lead *l, struct cep_lead_stats *st);

#endif /* CEP_CM_LEAD_H */
