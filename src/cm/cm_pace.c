/* SPDX-License-Identifier: MIT */
/*
 * CM engine: requester pacing. A context does not flood one peer with REQs
 * it has not answered: per destination (the peer's port, by GID or LID) a
 * window bounds the REQs in flight - sent, and not yet answered by a REP
 * or a REJ - and further REQs wait unsent, in order (retries of REQs that
 * timed out first, then first tries). The window doubles each round trip
 * while answers come in time (slow start), until the peer MRAs a REQ (it
 * has others unanswered: it is queueing), answers slowly or loses one;
 * then it grows by one REQ per window's worth of answers in time. It is
 * halved, once per window (TCP's rule: only a REQ sent after the last cut
 * can cut again), by a try that timed out when the peer answered no REQ
 * sent after it, and by bad outcomes (late answers, lost REQs) past a
 * quarter of the recent ones; a REQ lost now and then does not change its
 * size. A REQ's timer starts when it is sent. While it waits, each REQ
 * period costs it a try if the destination is silent, and each longest
 * MRAed try (the REQ period + 68.7 s) does while it answers others, so a
 * connection gives up no later than the spec's requester whose every try
 * is MRAed, and as soon as the spec's requester when nobody answers
 * (docs/protocol.md, "Requester pacing"). libcep's choice: the kernel's
 * CM sends every REQ at once.
 *
 * Locks: a destination's mutex is a leaf taken under an id's lock, never
 * the other way round; a waiting id is handed to its own worker (W_PACE)
 * to be sent under its lock. The table of destinations (cm->pace.mtx) is
 * taken when an id joins and when the last id of a destination leaves.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cm_internal.h"
#include "core/table_internal.h"

/* The window, in REQs: where it starts (measured, docs/protocol.md: with
 * 10% loss a lost REQ holds its place for a REQ period, and 128 keeps a
 * server taking 100 a second busy where 64 did not; far more than a server
 * answers in a round trip in the guest bed), its floor (one REQ is always
 * let out, so a peer that comes back is noticed) and its ceiling. */
#define PACE_WIN0 128u
#define PACE_WIN_MIN 1u
#define PACE_WIN_MAX 65536u

enum { PACE_NONE, PACE_QUEUED, PACE_SENDING, PACE_FLIGHT };
#define PACE_KEY 21 /* the pace group (4 bytes), then the address (17) */
enum { Q_RETRY, Q_FIRST };

struct cm_dest {
	struct cm_dest *next;          /* cm->pace.mtx: the bucket's chain */
	_Atomic uint32_t refs;         /* ids with pace_st != NONE; reaches 0
					  only under cm->pace.mtx, which then
					  removes and frees it */
	uint8_t key[PACE_KEY];         /* const: the id's pace group, then a GID
					  (key[4] 1) or a LID */
	pthread_mutex_t mtx;
	uint32_t out;                  /* mtx: REQs in flight (SENDING, FLIGHT) */
	uint32_t win, ssthresh, grow;  /* mtx: window; growth by one per answer
					  below ssthresh, by one per window's
					  worth of answers above it */
	uint64_t seq, cut_seq;         /* mtx: sends counted; the count at the
					  last cut */
	uint64_t last_answer;          /* mtx: ms of its last MRA, REP or REJ
					  of a REQ (0: none yet) */
	uint64_t answered_seq;         /* mtx: the latest send answered */
	uint32_t answers, late;        /* mtx: outcomes of REQs sent since the
					  last cut, and the bad ones of them */
	struct cep_cm_id *head[2], *tail[2]; /* mtx: waiting ids (Q_RETRY first) */
};

/* A destination is the peer's port within the id's pace group
 * (cep_cm_id_attr.pace_group): ids of two groups never share a window, so
 * one group's REQs that go unanswered cannot hold back another's (cepd:
 * one group per client). */
static void pace_key(const struct cep_cm_id *id, uint8_t key[PACE_KEY])
{
	uint8_t *a = key + 4;

	memset(key, 0, PACE_KEY);
	memcpy(key, &id->pace_group, 4);
	if (id->peer.grh_present) {
		a[0] = 1;
		memcpy(a + 1, id->peer.gid, 16);
	} else {
		a[1] = (uint8_t)(id->peer.lid >> 8);
		a[2] = (uint8_t)id->peer.lid;
	}
}

static unsigned pace_bucket(const uint8_t key[PACE_KEY])
{
	uint32_t h = 2166136261u; /* FNV-1a: keys are addresses, not secrets */

	for (int i = 0; i < PACE_KEY; i++)
		h = (h ^ key[i]) * 16777619u;
	return h % CM_PACE_BUCKETS;
}

void cm_pace_init(struct cep_cm *cm)
{
	pthread_mutex_init(&cm->pace.mtx, NULL);
	memset(cm->pace.tab, 0, sizeof(cm->pace.tab));
}

/* cep_cm_destroy, workers joined and every id gone: the destinations are
 * the context's alone. */
void cm_pace_fini(struct cep_cm *cm)
{
	for (unsigned b = 0; b < CM_PACE_BUCKETS; b++)
		while (cm->pace.tab[b]) {
			struct cm_dest *d = cm->pace.tab[b];

			cm->pace.tab[b] = d->next;
			pthread_mutex_destroy(&d->mtx);
			free(d);
		}
	pthread_mutex_destroy(&cm->pace.mtx);
}

/* The destination of @key with a reference, made if new; NULL: no memory. */
static struct cm_dest *dest_get(struct cep_cm *cm, const uint8_t key[PACE_KEY])
{
	unsigned b = pace_bucket(key);
	struct cm_dest *d;

	pthread_mutex_lock(&cm->pace.mtx);
	for (d = cm->pace.tab[b]; d; d = d->next)
		if (!memcmp(d->key, key, PACE_KEY))
			break;
	if (!d && (d = calloc(1, sizeof(*d))) != NULL) {
		memcpy(d->key, key, PACE_KEY);
		pthread_mutex_init(&d->mtx, NULL);
		d->win = PACE_WIN0;
		d->ssthresh = PACE_WIN_MAX;
		d->next = cm->pace.tab[b];
		cm->pace.tab[b] = d;
	}
	if (d) /* relaxed: the table's mutex orders it against the last put */
		atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
	pthread_mutex_unlock(&cm->pace.mtx);
	return d;
}

/* Drop a reference, not under d->mtx. The last one is dropped under the
 * table's mutex, so a dest_get cannot find it meanwhile: its window starts
 * afresh when a later burst comes. */
static void dest_put(struct cep_cm *cm, struct cm_dest *d)
{
	uint32_t r = atomic_load_explicit(&d->refs, memory_order_relaxed);

	/* Not the last: no lock. (A holder's own reference keeps it >= 1.) */
	while (r > 1)
		if (atomic_compare_exchange_weak_explicit(&d->refs, &r, r - 1,
							  memory_order_release,
							  memory_order_relaxed))
			return;
	pthread_mutex_lock(&cm->pace.mtx);
	/* acq_rel: every holder's use of d happens before the free */
	if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1) {
		struct cm_dest **pp = &cm->pace.tab[pace_bucket(d->key)];

		while (*pp != d)
			pp = &(*pp)->next;
		*pp = d->next;
		pthread_mutex_destroy(&d->mtx);
		free(d);
	}
	pthread_mutex_unlock(&cm->pace.mtx);
}

/* d->mtx: queue @id at the tail of @q / take it out. */
static void q_push(struct cm_dest *d, int q, struct cep_cm_id *id)
{
	id->pace_next = NULL;
	id->pace_prev = d->tail[q];
	if (d->tail[q])
		d->tail[q]->pace_next = id;
	else
		d->head[q] = id;
	d->tail[q] = id;
	id->pace_q = (uint8_t)q;
	id->pace_st = PACE_QUEUED;
}

static void q_unlink(struct cm_dest *d, struct cep_cm_id *id)
{
	int q = id->pace_q;

	if (id->pace_prev)
		id->pace_prev->pace_next = id->pace_next;
	else
		d->head[q] = id->pace_next;
	if (id->pace_next)
		id->pace_next->pace_prev = id->pace_prev;
	else
		d->tail[q] = id->pace_prev;
	id->pace_next = id->pace_prev = NULL;
}

/* d->mtx: let waiting REQs out while the window has room, retries first.
 * Each goes to its own worker (W_PACE), which sends it under its lock;
 * @self (the caller's id, locked) is only marked: the caller sends it. A
 * waiting id is alive (its leave takes it out under d->mtx before it can
 * be freed), so the work's reference can be taken here. */
static void pump(struct cm_dest *d, struct cep_cm_id *self)
{
	while (d->out < d->win) {
		struct cep_cm_id *id = d->head[Q_RETRY] ? d->head[Q_RETRY] : d->head[Q_FIRST];

		if (!id)
			break;
		q_unlink(d, id);
		id->pace_st = PACE_SENDING;
		d->out++;
		if (id != self)
			cm_post_bits(id, W_PACE);
	}
}

/* d->mtx: a sign that the peer is behind (an answer late, a try timed
 * out). Halve the window, once per window: a REQ sent before the last cut
 * was sent into the old window and says nothing of the new one. */
static void cut(struct cm_dest *d, uint64_t sent_seq)
{
	if (sent_seq <= d->cut_seq)
		return;
	d->win = d->win / 2 > PACE_WIN_MIN ? d->win / 2 : PACE_WIN_MIN;
	d->ssthresh = d->win;
	d->grow = 0;
	d->cut_seq = d->seq;
	d->answers = d->late = 0;
}

/* d->mtx: the try sent as @sent_seq ended, @bad (answered late, or lost
 * while the peer answered later REQs) or not. Bad outcomes cut once they
 * are more than a quarter of the recent outcomes of REQs sent since the
 * last cut (counting 8 good ones beforehand; the counts halve every two
 * windows' worth, so a long calm does not hide a new overload): a peer
 * that queues more than it answers in time answers every REQ late, one
 * that drops what it cannot hold drops most of a burst, while a lost MAD
 * makes a late answer (a lost REP's retry comes a response timeout later)
 * or a lost REQ now and then (10% loss: about one in five). */
static void outcome(struct cm_dest *d, uint64_t sent_seq, int bad)
{
	if (sent_seq <= d->cut_seq)
		return; /* sent into the window before the cut */
	if (d->answers >= 2 * d->win + 16) {
		d->answers /= 2;
		d->late /= 2;
	}
	d->answers++;
	if (bad && 4 * ++d->late > d->answers + 8)
		cut(d, sent_seq);
}

/* d->mtx: the peer is queueing (it MRAed a REQ, or one was lost while it
 * answered others): the window stops doubling and grows by one REQ per
 * window's worth of answers from now. */
static void slow(struct cm_dest *d)
{
	if (d->ssthresh > d->win)
		d->ssthresh = d->win;
}

/* d->mtx, @id locked: its try timed out. A try the peer MRAed and did
 * not answer within the wait it asked for, or one after which the peer
 * answered no REQ sent later: it is behind or gone, cut. One that got
 * nothing while the peer answered REQs sent after it was lost on the way
 * (or dropped while the peer was full): the window stops doubling, and
 * many such cut (outcome). */
static void timed_out(struct cm_dest *d, const struct cep_cm_id *id)
{
	if (id->pace_allow <= id->timeout_ms && d->answered_seq > id->pace_seq) {
		slow(d);
		outcome(d, id->pace_seq, 1);
	} else {
		cut(d, id->pace_seq);
	}
}

/* d->mtx: an answer in time: one more REQ below ssthresh (the window
 * doubles each round trip), one more per window's worth above it. */
static void grow(struct cm_dest *d)
{
	if (d->win >= PACE_WIN_MAX)
		return;
	if (d->win < d->ssthresh || ++d->grow >= d->win) {
		d->win++;
		d->grow = 0;
	}
}

/* Locked: the longest a try of @id may last when its peer MRAs it with
 * the longest service timeout libcep honours (cm_handle_mra): a waiting
 * REQ whose destination answers others spends a try per such span. */
static uint32_t long_try_ms(const struct cep_cm_id *id)
{
	return id->timeout_ms + cm_ms(CM_PEER_TIMEOUT_MAX) + cm_ms(id->path_timeout);
}

/* Locked: charge the REQ periods @id has waited by @now to its tries: a
 * period costs a try while its destination is silent (no answer to any
 * REQ within the longest try before it), and a try per long_try_ms while
 * it answers. Periods are counted from when it began to wait, so a
 * period's end charges the same whether its timer or its dispatch comes
 * first. 0, or -ETIMEDOUT when its tries are spent. */
static int charge(struct cep_cm_id *id, uint64_t now)
{
	uint32_t t = id->timeout_ms, per_try = (long_try_ms(id) + t - 1) / t;
	uint64_t due = (now - id->pace_since) / t, last;

	pthread_mutex_lock(&id->dest->mtx);
	last = id->dest->last_answer;
	pthread_mutex_unlock(&id->dest->mtx);
	while (id->pace_done < due) {
		uint64_t at = id->pace_since + (uint64_t)++id->pace_done * t;

		if (last && last + long_try_ms(id) > at && ++id->pace_alive < per_try)
			continue; /* the peer answers others: a fraction of a try */
		id->pace_alive = 0;
		if (id->retries_left == 0)
			return -ETIMEDOUT;
		id->retries_left--;
	}
	return 0;
}

/* Locked, @d->mtx not held: @id waits in its queue: its timer checks each
 * REQ period what the wait has cost. */
static void wait_armed(struct cep_cm_id *id)
{
	id->pace_since = cep_clock_ms(id->cm->clock);
	id->pace_done = 0;
	id->pace_alive = 0;
	cm_set_timer(id, TK_PACE, id->timeout_ms);
}

int cm_pace_join(struct cep_cm_id *id)
{
	uint8_t key[PACE_KEY];
	struct cm_dest *d;
	int now;

	pace_key(id, key);
	d = dest_get(id->cm, key);
	if (!d)
		return 1; /* no memory for its window: sent at once, as before */
	id->dest = d;
	id->pace_sent = 0;
	pthread_mutex_lock(&d->mtx);
	id->pace_seq = 0; /* nothing sent yet: no answer of it can cut */
	now = d->out < d->win && !d->head[Q_RETRY] && !d->head[Q_FIRST];
	if (now) {
		d->out++;
		id->pace_st = PACE_FLIGHT;
	} else {
		q_push(d, Q_FIRST, id);
	}
	pthread_mutex_unlock(&d->mtx);
	if (!now)
		wait_armed(id);
	return now;
}

void cm_pace_sent(struct cep_cm_id *id)
{
	struct cm_dest *d = id->dest;

	id->pace_sent = cep_clock_ms(id->cm->clock);
	id->pace_allow = id->timeout_ms;
	pthread_mutex_lock(&d->mtx);
	id->pace_seq = ++d->seq;
	pthread_mutex_unlock(&d->mtx);
}

/* Locked: how long the try in flight has waited, in eighths of what it
 * was allowed (the REQ period, or after an MRA the wait the MRA asked
 * for). More than 4: late, the peer is close to making us retry; more
 * than 1: the peer is queueing, the window stops doubling (one more
 * doubling would have it queue twice as long). */
static uint32_t waited(const struct cep_cm_id *id, uint32_t *elapsed)
{
	uint64_t e = cep_clock_ms(id->cm->clock) - id->pace_sent;

	*elapsed = e > UINT32_MAX ? UINT32_MAX : (uint32_t)e;
	e = 8 * e / (id->pace_allow ? id->pace_allow : 1);
	return e > 8 ? 8 : (uint32_t)e;
}

/* d->mtx: the peer answered the try sent as @seq. */
static void heard(struct cm_dest *d, const struct cep_cm_id *id)
{
	d->last_answer = cep_clock_ms(id->cm->clock);
	if (d->answered_seq < id->pace_seq)
		d->answered_seq = id->pace_seq;
}

void cm_pace_answer(struct cep_cm_id *id)
{
	struct cm_dest *d = id->dest;
	uint32_t e, w = waited(id, &e);

	pthread_mutex_lock(&d->mtx);
	heard(d, id);
	outcome(d, id->pace_seq, w >= 4);
	if (w >= 1)
		slow(d);
	if (w < 4)
		grow(d);
	pthread_mutex_unlock(&d->mtx);
}

void cm_pace_mra(struct cep_cm_id *id, uint32_t ext)
{
	struct cm_dest *d = id->dest;
	uint32_t e, w = waited(id, &e);

	/* The MRA says the peer holds the request: the try waits what it
	 * asked for (cm_handle_mra arms it), not the window. The REQ keeps
	 * its place in the window until the REP or REJ: the peer's answer
	 * comes from what it holds, and a window that let more out on MRAs
	 * alone had the peer hold more than it answers within the MRA's
	 * time (docs/protocol.md, "Requester pacing"). */
	id->pace_allow = e + ext;
	pthread_mutex_lock(&d->mtx);
	heard(d, id);
	if (w >= 4) /* the REQ waited long unread: the REP ends the outcome */
		outcome(d, id->pace_seq, 1);
	slow(d); /* it holds others unanswered: stop doubling */
	if (id->pace_st == PACE_QUEUED) { /* its retry waited: it is answered */
		q_unlink(d, id);
		d->out++;
	}
	id->pace_st = PACE_FLIGHT;
	pthread_mutex_unlock(&d->mtx);
}

int cm_pace_retry(struct cep_cm_id *id)
{
	struct cm_dest *d = id->dest;
	int now;

	pthread_mutex_lock(&d->mtx);
	timed_out(d, id);
	/* Its slot goes back; the retry queues behind the retries already
	 * waiting, so REQs that timed out together leave as the window
	 * lets them, not all at once. */
	if (id->pace_st == PACE_SENDING || id->pace_st == PACE_FLIGHT)
		d->out--;
	q_push(d, Q_RETRY, id);
	pump(d, id);
	now = id->pace_st == PACE_SENDING;
	if (now)
		id->pace_st = PACE_FLIGHT;
	pthread_mutex_unlock(&d->mtx);
	if (!now)
		wait_armed(id);
	return !now;
}

void cm_pace_timeout(struct cep_cm_id *id)
{
	struct cm_dest *d = id->dest;

	pthread_mutex_lock(&d->mtx);
	timed_out(d, id);
	pthread_mutex_unlock(&d->mtx);
}

void cm_pace_leave(struct cep_cm_id *id)
{
	struct cm_dest *d = id->dest;

	pthread_mutex_lock(&d->mtx);
	if (id->pace_st == PACE_QUEUED)
		q_unlink(d, id);
	else if (id->pace_st != PACE_NONE)
		d->out--;
	id->pace_st = PACE_NONE;
	pump(d, NULL);
	pthread_mutex_unlock(&d->mtx);
	id->dest = NULL;
	dest_put(id->cm, d);
}

void cm_pace_go(struct cep_cm_id *id)
{
	struct cm_dest *d = id->dest;
	int go;

	if (!d || (id->state != CEP_CM_REQ_SENT && id->state != CEP_CM_MRA_REQ_RCVD))
		return; /* it left: cm_pace_leave gave the slot back */
	pthread_mutex_lock(&d->mtx);
	go = id->pace_st == PACE_SENDING;
	if (go)
		id->pace_st = PACE_FLIGHT;
	pthread_mutex_unlock(&d->mtx);
	if (!go)
		return; /* an MRA came first and set its timer */
	if (charge(id, cep_clock_ms(id->cm->clock))) {
		cm_req_give_up(id); /* its tries were spent waiting */
		return;
	}
	cm_send_req(id);
}

void cm_pace_expire(struct cep_cm_id *id)
{
	struct cm_dest *d = id->dest;
	uint64_t now = cep_clock_ms(id->cm->clock);
	int waiting;

	if (!d || id->state != CEP_CM_REQ_SENT)
		return;
	pthread_mutex_lock(&d->mtx);
	waiting = id->pace_st == PACE_QUEUED;
	pthread_mutex_unlock(&d->mtx);
	if (!waiting)
		return; /* let out meanwhile: W_PACE sends it */
	if (charge(id, now)) {
		cm_req_give_up(id); /* its tries are spent waiting: it gives up unsent */
		return;
	}
	cm_set_timer(id, TK_PACE, (uint32_t)(id->pace_since +
		     (uint64_t)(id->pace_done + 1) * id->timeout_ms - now));
}
