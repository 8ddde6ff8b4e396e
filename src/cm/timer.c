/* SPDX-License-Identifier: MIT */
/*
 * Hashed timer wheel: slot = expiry tick mod CEP_WHEEL_SLOTS; each timer
 * keeps its absolute expiry, so timers beyond one revolution simply stay
 * in their slot until their tick comes round. Single-threaded by contract.
 */
#include "timer.h"

void cep_wheel_init(struct cep_wheel *w, uint64_t now_ms)
{
	for (size_t i = 0; i < CEP_WHEEL_SLOTS; i++) {
		w->slot[i].next = &w->slot[i];
		w->slot[i].prev = &w->slot[i];
	}
	w->last = now_ms;
	w->resume = 0;
	w->armed = 0;
}

static void unlink_timer(struct cep_wheel *w, struct cep_timer *t)
{
	t->prev->next = t->next;
	t->next->prev = t->prev;
	t->next = t->prev = NULL;
	w->armed--;
}

void cep_timer_arm(struct cep_wheel *w, struct cep_timer *t, uint64_t expires_ms,
		   cep_timer_fn fn)
{
	struct cep_timer *head;

	if (t->next)
		unlink_timer(w, t);
	if (expires_ms <= w->last)
		expires_ms = w->last + 1;
	t->expires = expires_ms;
	t->fn = fn;
	head = &w->slot[expires_ms & (CEP_WHEEL_SLOTS - 1)];
	t->next = head;
	t->prev = head->prev;
	head->prev->next = t;
	head->prev = t;
	w->armed++;
}

int cep_timer_cancel(struct cep_wheel *w, struct cep_timer *t)
{
	if (!t->next)
		return 0;
	unlink_timer(w, t);
	return 1;
}

/* Fire at most @max of the slot's due timers; *@more when it keeps some. */
static size_t run_slot(struct cep_wheel *w, struct cep_timer *head, uint64_t now, size_t max,
		       int *more)
{
	struct cep_timer pending;
	size_t fired = 0, taken = 0;

	/* Move due timers to a private list first: a fn may re-arm into this
	 * very slot, and must not be visited again in this pass. */
	pending.next = pending.prev = &pending;
	for (struct cep_timer *t = head->next, *n; t != head; t = n) {
		n = t->next;
		if (t->expires > now)
			continue;
		if (taken == max) {
			*more = 1;
			break;
		}
		taken++;
		t->prev->next = t->next;
		t->next->prev = t->prev;
		t->next = &pending;
		t->prev = pending.prev;
		pending.prev->next = t;
		pending.prev = t;
	}
	while (pending.next != &pending) {
		struct cep_timer *t = pending.next;

		t->prev->next = t->next;
		t->next->prev = t->prev;
		t->next = t->prev = NULL;
		w->armed--;
		fired++;
		t->fn(t);
	}
	return fired;
}

size_t cep_wheel_run_max(struct cep_wheel *w, uint64_t now_ms, size_t max)
{
	size_t fired = 0;
	uint64_t from = w->resume ? w->resume : w->last + 1;
	uint64_t end = now_ms > w->last ? now_ms : w->last;

	if (now_ms <= w->last && !w->resume)
		return 0;
	if (w->armed == 0) {
		w->last = end;
		w->resume = 0;
		return 0;
	}
	if (end - from >= CEP_WHEEL_SLOTS)
		from = end - CEP_WHEEL_SLOTS + 1; /* every slot once */
	/* last first: a fn arms at last + 1 at the earliest, never into a
	 * slot this run has passed */
	w->last = end;
	w->resume = 0;
	for (uint64_t tick = from; tick <= end; tick++) {
		int more = 0;

		fired += run_slot(w, &w->slot[tick & (CEP_WHEEL_SLOTS - 1)], end, max - fired, &more);
		if (more) {
			w->resume = tick; /* this slot and the later ones */
			break;
		}
	}
	return fired;
}

size_t cep_wheel_run(struct cep_wheel *w, uint64_t now_ms)
{
	return cep_wheel_run_max(w, now_ms, SIZE_MAX);
}

/* Timers looked at by one cep_wheel_next before it settles for "now". */
#define NEXT_BUDGET 256

uint64_t cep_wheel_next(const struct cep_wheel *w, uint64_t within)
{
	unsigned budget = NEXT_BUDGET;

	if (w->armed == 0)
		return w->last + within;
	if (w->resume)
		return w->last; /* due already */
	for (uint64_t tick = w->last + 1; tick <= w->last + within; tick++) {
		const struct cep_timer *head = &w->slot[tick & (CEP_WHEEL_SLOTS - 1)];

		/* A slot also holds timers of later revolutions: due only if
		 * one expires at this tick (none expires earlier: run fired
		 * those and arm clamps to last + 1). */
		for (const struct cep_timer *t = head->next; t != head; t = t->next) {
			if (t->expires <= tick || --budget == 0)
				return tick;
		}
	}
	return w->last + within;
}

void cep_wheel_drain(struct cep_wheel *w, void (*fn)(struct cep_timer *t, void *ctx),
		     void *ctx)
{
	for (size_t i = 0; i < CEP_WHEEL_SLOTS; i++) {
		struct cep_timer *head = &w->slot[i];

		while (head->next != head) {
			struct cep_timer *t = head->next;

			unlink_timer(w, t);
			fn(t, ctx);
		}
	}
	w->resume = 0;
}
