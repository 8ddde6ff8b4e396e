/* SPDX-License-Identifier: MIT */
/*
 * Leader/followers over a receive queue (lead.h says what and why).
 *
 * State of a lead, under its mutex (held for a few instructions, never
 * across a drain, a poll or a wake): who holds it (nobody, an application
 * thread, the backstop), the backstop's kick, the followers (application
 * threads waiting for it, in arrival order) and when an application leader
 * last left. Taking and giving back are transitions of that state; the
 * source's fd is polled only by the holder, so a MAD wakes one thread.
 *
 * No lost work: whenever the lead is given back with followers waiting,
 * the first is woken to take it; with none, the backstop takes it at its
 * next wake-up, which take() bounds by the lease while an application
 * holds or recently held it. A follower woken for its own event (not its
 * turn) leaves the followers; if it was woken for its turn as well, it
 * passes the turn on (wake_next) before it returns.
 *
 * A drain may step aside (cep_lead_step_aside): its wait gives its leads
 * back as leave_locked does (the next turn, the lease) and follows them
 * again, so a drain that blocks never keeps the queue from being read.
 * The wait marks them W_FOLLOW itself; its loop drains only leads it
 * still holds.
 *
 * Waiters are never freed: a thread's waiter (its eventfd) goes to a free
 * list at the thread's exit and is reused by a later thread, so a late
 * wake from a producer that still holds the pointer is a spurious wake-up
 * of whoever has it now (who looks at its predicate again), never a write
 * to a descriptor that has become something else.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cm/lead.h"

enum holder { H_NONE, H_APP, H_BACKSTOP };

struct cep_lead_waiter {
	int efd;                        /* EFD_NONBLOCK; never closed */
	struct cep_lead_waiter *free_next; /* free_lk */
};

struct follower {
	struct follower *next;
	struct cep_lead_waiter *w;
};

struct cep_lead {
	struct cep_lead_source src;
	pthread_mutex_t mtx;
	enum holder holder;             /* mtx */
	void (*kick)(void *);           /* mtx: the backstop holder's */
	void *kick_arg;                 /* mtx */
	/* mtx: a backstop that sleeps without watching the lease while an
	 * application leads, to be told when that application leaves
	 * (cep_lead_backstop_take); NULL once told */
	void (*remind)(void *, uint64_t);
	void *remind_arg;
	struct follower *followers;     /* mtx: oldest first */
	uint64_t app_left_ms;           /* mtx: an application leader's last exit */
	struct cep_lead_waiter *app_w;  /* mtx: the application leader's waiter */
	int closed;                     /* mtx: cep_lead_close: nobody takes it */
	unsigned users;                 /* mtx: waits that may still touch it */
	/* statistics: relaxed, no order with anything */
	_Atomic uint64_t st_app_leads, st_app_drains, st_backstop_drains, st_kicks, st_handovers;
	_Atomic uint64_t st_asides, st_backstop_looks;
};

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* ---- waiters ------------------------------------------------------------------- */

static pthread_mutex_t free_lk = PTHREAD_MUTEX_INITIALIZER;
static struct cep_lead_waiter *free_list;   /* free_lk */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static _Thread_local struct cep_lead_waiter *self_w;

static void waiter_release(void *p)
{
	struct cep_lead_waiter *w = p;
	uint64_t v;

	(void)!read(w->efd, &v, sizeof(v)); /* the next owner starts clean */
	pthread_mutex_lock(&free_lk);
	w->free_next = free_list;
	free_list = w;
	pthread_mutex_unlock(&free_lk);
}

static void key_init(void)
{
	(void)pthread_key_create(&key, waiter_release);
}

/* Not inlined into cep_lead_wait: its locals would live across that
 * function's cleanup push (-Wclobbered). */
__attribute__((noinline)) struct cep_lead_waiter *cep_lead_self(void)
{
	struct cep_lead_waiter *w = self_w;

	if (w)
		return w;
	pthread_once(&key_once, key_init);
	pthread_mutex_lock(&free_lk);
	w = free_list;
	if (w)
		free_list = w->free_next;
	pthread_mutex_unlock(&free_lk);
	if (!w) {
		w = calloc(1, sizeof(*w));
		if (!w)
			return NULL;
		w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (w->efd < 0) {
			free(w);
			return NULL;
		}
	}
	if (pthread_setspecific(key, w)) {
		waiter_release(w);
		return NULL;
	}
	self_w = w;
	return w;
}

void cep_lead_wake(struct cep_lead_waiter *w)
{
	uint64_t one = 1;

	if (!w || w == self_w)
		return; /* our own: we look at our predicate before we sleep */
	/* Only fails when the counter would overflow: it is woken already. */
	(void)!write(w->efd, &one, sizeof(one));
}

/* ---- leads -------------------------------------------------------------------------- */

int cep_lead_create(const struct cep_lead_source *src, struct cep_lead **out)
{
	struct cep_lead *l;

	if (!src || src->fd < 0 || !src->drain || !out)
		return -EINVAL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->src = *src;
	pthread_mutex_init(&l->mtx, NULL);
	*out = l;
	return 0;
}

void cep_lead_close(struct cep_lead *l)
{
	struct timespec ms = { 0, 1000000 };

	pthread_mutex_lock(&l->mtx);
	l->closed = 1;
	/* Every wait that names it leads or follows it: wake them all; each
	 * leaves it for good (try_take, or after its drain) and drops its
	 * use. Bounded by a drain in progress. */
	while (l->users) {
		cep_lead_wake(l->app_w);
		for (struct follower *f = l->followers; f; f = f->next)
			cep_lead_wake(f->w);
		pthread_mutex_unlock(&l->mtx);
		nanosleep(&ms, NULL);
		pthread_mutex_lock(&l->mtx);
	}
	pthread_mutex_unlock(&l->mtx);
}

void cep_lead_destroy(struct cep_lead *l)
{
	if (!l)
		return;
	pthread_mutex_destroy(&l->mtx);
	free(l);
}

/* mtx held: the first follower's waiter (to wake after unlocking), or NULL. */
static struct cep_lead_waiter *next_turn(struct cep_lead *l)
{
	if (!l->followers)
		return NULL;
	atomic_fetch_add_explicit(&l->st_handovers, 1, memory_order_relaxed);
	return l->followers->w;
}

/* mtx held: add @f (whose waiter is ours) to the followers, unless in. */
static void follow(struct cep_lead *l, struct follower *f)
{
	struct follower **pp = &l->followers;

	while (*pp && *pp != f)
		pp = &(*pp)->next;
	if (!*pp) {
		f->next = NULL;
		*pp = f;
	}
}

/* mtx held: remove @f if it follows; 1 if it was the first (the turn
 * may have been given to it). */
static int unfollow(struct cep_lead *l, struct follower *f)
{
	struct follower **pp = &l->followers;
	int first = l->followers == f;

	while (*pp && *pp != f)
		pp = &(*pp)->next;
	if (*pp)
		*pp = f->next;
	return first;
}

/* What one wait holds of each of its leads. */
enum { W_FOLLOW, W_LEAD, W_GONE };
#define WAIT_LEADS_MAX 8

struct wait_state {
	struct cep_lead *const *leads;
	unsigned n;
	unsigned char *st;        /* [n]: W_* */
	struct follower *fol;     /* [n]: our place among its followers */
};

/* The wait whose source's drain runs on this thread now (set around each
 * drain: cep_lead_step_aside's), or NULL. */
static _Thread_local struct wait_state *drain_wait;

/* mtx held: the application thread that holds @l lets it go (the lease
 * counts from now). The waiter whose turn is next, or NULL. */
static struct cep_lead_waiter *app_release_locked(struct cep_lead *l)
{
	struct cep_lead_waiter *w;

	l->holder = H_NONE;
	l->app_w = NULL;
	l->app_left_ms = now_ms();
	w = next_turn(l);
	/* No follower takes the turn: the backstop that stopped watching
	 * while we led must wake when the lease ends. Told here, under mtx:
	 * the call only sets when (a timerfd, no wake-up now), and a closed
	 * lead's backstop may be gone once its users are (cep_lead_close). */
	if (!w && l->remind && !l->closed) {
		void (*fn)(void *, uint64_t) = l->remind;

		l->remind = NULL;
		fn(l->remind_arg, l->app_left_ms + LEAD_LEASE_MS + 1);
	}
	return w;
}

/* mtx held: we stop touching @l (it is closed, or the wait ends): give it
 * back or leave its followers, drop our use. The waiter to wake (the next
 * turn), or NULL. */
static struct cep_lead_waiter *leave_locked(struct cep_lead *l, unsigned char *st,
					    struct follower *f)
{
	struct cep_lead_waiter *wake = NULL;

	if (*st == W_LEAD) {
		wake = app_release_locked(l);
	} else if (*st == W_FOLLOW && unfollow(l, f) && l->holder == H_NONE) {
		/* the turn may have been ours: the next one's */
		wake = next_turn(l);
	}
	if (*st != W_GONE)
		l->users--;
	*st = W_GONE;
	return wake;
}

/* Give back every lead of @s: the normal exit and the cancellation
 * cleanup handler. */
static void give_back(void *arg)
{
	struct wait_state *s = arg;

	for (unsigned i = 0; i < s->n; i++) {
		struct cep_lead *l = s->leads[i];
		struct cep_lead_waiter *wake;

		if (s->st[i] == W_GONE)
			continue;
		pthread_mutex_lock(&l->mtx);
		wake = leave_locked(l, &s->st[i], &s->fol[i]);
		pthread_mutex_unlock(&l->mtx);
		cep_lead_wake(wake);
	}
}

/* Take @l if free, else follow it (and ask a backstop holder to let go);
 * a closed one is left for good. */
static void try_take(struct cep_lead *l, unsigned char *st, struct follower *f,
		     struct cep_lead_waiter *me)
{
	void (*kick)(void *) = NULL;
	void *kick_arg = NULL;
	struct cep_lead_waiter *wake = NULL;

	pthread_mutex_lock(&l->mtx);
	if (l->closed) {
		wake = leave_locked(l, st, f);
	} else if (l->holder == H_NONE) {
		(void)unfollow(l, f);
		l->holder = H_APP;
		l->app_w = me;
		*st = W_LEAD;
		atomic_fetch_add_explicit(&l->st_app_leads, 1, memory_order_relaxed);
	} else {
		follow(l, f);
		if (l->holder == H_BACKSTOP && l->kick) {
			kick = l->kick;
			kick_arg = l->kick_arg;
			l->kick = NULL; /* once: it lets go at once */
			atomic_fetch_add_explicit(&l->st_kicks, 1, memory_order_relaxed);
		}
	}
	pthread_mutex_unlock(&l->mtx);
	cep_lead_wake(wake);
	if (kick)
		kick(kick_arg);
}

/* cep_lead_wait's loop, between its cleanup push and pop (a function of
 * its own: the push may set a jump buffer, and this frame's variables
 * live across it). */
static int wait_loop(struct wait_state *s, struct cep_lead_waiter *me, int extra_fd,
		     int (*ready)(void *arg), void *arg, uint64_t end)
{
	struct cep_lead *const *leads = s->leads;
	unsigned char *st = s->st;
	unsigned char polled[WAIT_LEADS_MAX];
	struct pollfd pf[WAIT_LEADS_MAX + 2];

	for (;;) {
		unsigned np = 0, k;
		int wait_ms, r;
		uint64_t t;

		if (ready(arg))
			return 0;
		for (unsigned i = 0; i < s->n; i++)
			if (st[i] == W_FOLLOW)
				try_take(leads[i], &st[i], &s->fol[i], me);
		if (me) {
			pf[np].fd = me->efd;
			pf[np++].events = POLLIN;
		}
		if (extra_fd >= 0) {
			pf[np].fd = extra_fd;
			pf[np++].events = POLLIN;
		}
		for (unsigned i = 0; i < s->n; i++) {
			/* the leads this poll watches: a drain may step aside
			 * from the others before their turn below */
			polled[i] = st[i] == W_LEAD;
			if (polled[i]) {
				pf[np].fd = leads[i]->src.fd;
				pf[np++].events = POLLIN;
			}
		}
		t = now_ms();
		if (t >= end)
			return -ETIMEDOUT;
		wait_ms = end == UINT64_MAX ? -1 : (int)(end - t);
		if (!me && (wait_ms < 0 || wait_ms > 1))
			wait_ms = 1; /* no eventfd: look again every millisecond */
		r = poll(pf, np, wait_ms); /* a cancellation point: give_back */
		if (r < 0 && errno == EINTR)
			return -EINTR;
		if (r <= 0)
			continue;
		k = 0;
		if (me) {
			if (pf[k].revents & POLLIN) {
				uint64_t v;

				(void)!read(me->efd, &v, sizeof(v));
			}
			k++;
		}
		if (extra_fd >= 0)
			k++; /* level: ready() says what it means */
		for (unsigned i = 0; i < s->n; i++) {
			struct cep_lead *l = leads[i];
			struct cep_lead_waiter *wake = NULL;

			if (!polled[i])
				continue;
			/* st[i] may have left W_LEAD: an earlier drain stepped
			 * aside (its new holder reads it now) */
			if ((pf[k++].revents & (POLLIN | POLLERR | POLLHUP)) && st[i] == W_LEAD) {
				struct wait_state *outer = drain_wait;
				int cs;

				/* not cancelled in the middle of the engine's
				 * work (it holds id locks) */
				pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
				drain_wait = s;
				l->src.drain(l->src.ctx);
				drain_wait = outer;
				pthread_setcancelstate(cs, NULL);
				atomic_fetch_add_explicit(&l->st_app_drains, 1, memory_order_relaxed);
			}
			/* a lead being closed is given back at once
			 * (cep_lead_close woke us) and never touched again */
			pthread_mutex_lock(&l->mtx);
			if (l->closed)
				wake = leave_locked(l, &st[i], &s->fol[i]);
			pthread_mutex_unlock(&l->mtx);
			cep_lead_wake(wake);
		}
	}
}

int cep_lead_wait(struct cep_lead *const *leads, unsigned n, int extra_fd,
		  int (*ready)(void *arg), void *arg, int timeout_ms)
{
	struct cep_lead_waiter *me = cep_lead_self();
	unsigned char st[WAIT_LEADS_MAX];
	struct follower fol[WAIT_LEADS_MAX];
	struct wait_state s = { leads, n > WAIT_LEADS_MAX ? WAIT_LEADS_MAX : n, st, fol };
	uint64_t end = timeout_ms >= 0 ? now_ms() + (uint64_t)timeout_ms : UINT64_MAX;
	int ret;

	memset(fol, 0, sizeof(fol));
	for (unsigned i = 0; i < s.n; i++) {
		fol[i].w = me;
		st[i] = W_GONE;
		if (!me)
			continue; /* no eventfd: it cannot be woken for a turn */
		pthread_mutex_lock(&leads[i]->mtx);
		if (!leads[i]->closed) {
			leads[i]->users++;
			st[i] = W_FOLLOW;
		}
		pthread_mutex_unlock(&leads[i]->mtx);
	}
	pthread_cleanup_push(give_back, &s);
	ret = wait_loop(&s, me, extra_fd, ready, arg, end);
	pthread_cleanup_pop(1); /* give_back */
	return ret;
}

void cep_lead_step_aside(void)
{
	struct wait_state *s = drain_wait;

	if (!s)
		return;
	for (unsigned i = 0; i < s->n; i++) {
		struct cep_lead *l = s->leads[i];
		struct cep_lead_waiter *wake;

		if (s->st[i] != W_LEAD)
			continue;
		pthread_mutex_lock(&l->mtx);
		/* as leave_locked, but the wait goes on: it follows again
		 * (not queued; try_take queues it when it finds a holder) */
		s->st[i] = W_FOLLOW;
		wake = app_release_locked(l);
		pthread_mutex_unlock(&l->mtx);
		atomic_fetch_add_explicit(&l->st_asides, 1, memory_order_relaxed);
		cep_lead_wake(wake);
	}
}

/* ---- the backstop ----------------------------------------------------------------- */

int cep_lead_backstop_take(struct cep_lead *l, int *sleep_ms, void (*kick)(void *),
			   void (*remind)(void *, uint64_t), void *kick_arg)
{
	uint64_t t = now_ms();
	int took = 0, clip = -1;

	atomic_fetch_add_explicit(&l->st_backstop_looks, 1, memory_order_relaxed);
	pthread_mutex_lock(&l->mtx);
	if (l->closed) {
		/* nothing: the context stops */
	} else if (l->holder == H_APP && remind) {
		/* an application leads: sleep on, and be told when it leaves
		 * (app_release_locked), instead of a look every lease while it
		 * leads - an idle event loop woke its CM's worker 50 times a
		 * second */
		l->remind = remind;
		l->remind_arg = kick_arg;
	} else if (l->holder == H_APP || l->followers) {
		/* an application leads, or waits for its turn: look again
		 * within the lease, in case it leaves for good */
		clip = LEAD_LEASE_MS;
	} else if (l->holder == H_NONE && l->app_left_ms && t - l->app_left_ms < LEAD_LEASE_MS) {
		clip = (int)(LEAD_LEASE_MS - (t - l->app_left_ms)) + 1;
	} else if (l->holder == H_NONE) {
		l->holder = H_BACKSTOP;
		l->kick = kick;
		l->kick_arg = kick_arg;
		took = 1;
	}
	pthread_mutex_unlock(&l->mtx);
	if (clip >= 0 && (*sleep_ms < 0 || *sleep_ms > clip))
		*sleep_ms = clip;
	return took;
}

void cep_lead_backstop_put(struct cep_lead *l)
{
	struct cep_lead_waiter *wake = NULL;

	pthread_mutex_lock(&l->mtx);
	if (l->holder == H_BACKSTOP) {
		l->holder = H_NONE;
		l->kick = NULL;
		l->kick_arg = NULL;
		wake = next_turn(l);
	}
	pthread_mutex_unlock(&l->mtx);
	cep_lead_wake(wake);
}

int cep_lead_backstop_drain(struct cep_lead *l)
{
	atomic_fetch_add_explicit(&l->st_backstop_drains, 1, memory_order_relaxed);
	return l->src.drain(l->src.ctx);
}

int cep_lead_fd(const struct cep_lead *l)
{
	return l->src.fd;
}

void cep_lead_stats(struct cep_lead *l, struct cep_lead_stats *st)
{
	st->app_leads = atomic_load_explicit(&l->st_app_leads, memory_order_relaxed);
	st->app_drains = atomic_load_explicit(&l->st_app_drains, memory_order_relaxed);
	st->backstop_drains = atomic_load_explicit(&l->st_backstop_drains, memory_order_relaxed);
	st->kicks = atomic_load_explicit(&l->st_kicks, memory_order_relaxed);
	st->handovers = atomic_load_explicit(&l->st_handovers, memory_order_relaxed);
	st->asides = atomic_load_explicit(&l->st_asides, memory_order_relaxed);
	st->backstop_looks = atomic_load_explicit(&l->st_backstop_looks, memory_order_relaxed);
	pthread_mutex_lock(&l->mtx);
	st->backstop_now = l->holder == H_BACKSTOP;
	pthread_mutex_unlock(&l->mtx);
}
