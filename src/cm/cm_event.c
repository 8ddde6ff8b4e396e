/* SPDX-License-Identifier: MIT */
/*
 * CM event channels: a mutex-protected FIFO of event copies and an eventfd
 * that is readable exactly while the FIFO is not empty (both changed under
 * the channel mutex). Each queued event holds a reference on its id's CEP,
 * dropped by cep_cm_ack_event(), so the id outlives every event about it;
 * an event taken and not acked is counted in its context (cm->taken), so
 * the context outlives it too (cep_cm_destroy refuses meanwhile).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cm_internal.h"

struct chan_ev {
	struct cep_cm_event ev;   /* first: cep_cm_ack_event casts back */
	struct chan_ev *next;
	struct cep_cm_channel *ch;
	struct cep_cm *cm;        /* ev.id's context: alive while the event is
				     queued (its destroy purges it) or taken */
};

int cep_cm_channel_create(struct cep_cm_channel **out)
{
	struct cep_cm_channel *ch;

	if (!out)
		return -EINVAL;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	ch->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ch->efd < 0) {
		int e = -errno;

		free(ch);
		return e;
	}
	pthread_mutex_init(&ch->mtx, NULL);
	*out = ch;
	return 0;
}

int cep_cm_channel_destroy(struct cep_cm_channel *ch)
{
	int busy;

	if (!ch)
		return -EINVAL;
	pthread_mutex_lock(&ch->mtx);
	busy = ch->queued != 0 || atomic_load(&ch->users) != 0;
	pthread_mutex_unlock(&ch->mtx);
	if (busy)
		return -EBUSY;
	close(ch->efd);
	pthread_mutex_destroy(&ch->mtx);
	free(ch);
	return 0;
}

int cep_cm_channel_fd(const struct cep_cm_channel *ch)
{
	return ch ? ch->efd : -EINVAL;
}

int cm_channel_push(struct cep_cm_channel *ch, const struct cep_cm_event *ev)
{
	struct chan_ev *e = malloc(sizeof(*e));

	if (!e)
		return -ENOMEM;
	e->ev = *ev;
	if (ev->private_data) /* re-point into the copy */
		e->ev.private_data = (const uint8_t *)&e->ev.msg +
			(ev->private_data - (const uint8_t *)&ev->msg);
	e->next = NULL;
	e->ch = ch;
	e->cm = ev->id->cm;
	cep_get(cep_cm_id_cep(ev->id));
	if (ev->listen_id)
		cep_get(cep_cm_id_cep(ev->listen_id));
	pthread_mutex_lock(&ch->mtx);
	if (ch->tail)
		ch->tail->next = e;
	else
		ch->head = e;
	ch->tail = e;
	if (ch->queued++ == 0) {
		uint64_t one = 1;

		if (write(ch->efd, &one, sizeof(one)) < 0) {
			/* cannot overflow from 0: nothing to do */
		}
	}
	pthread_mutex_unlock(&ch->mtx);
	return 0;
}

/* Drop the references a queued event holds (no channel lock held). */
static void event_free(struct chan_ev *e)
{
	struct cep *cep = cep_cm_id_cep(e->ev.id);
	struct cep *lcep = e->ev.listen_id ? cep_cm_id_cep(e->ev.listen_id) : NULL;

	free(e);
	cep_put(cep);
	if (lcep)
		cep_put(lcep);
}

void cm_channel_purge(struct cep_cm_channel *ch, struct cep_cm_id *id, int all)
{
	struct chan_ev *gone = NULL, **pp, *e;

	pthread_mutex_lock(&ch->mtx);
	for (pp = &ch->head, ch->tail = NULL; (e = *pp) != NULL;) {
		if (e->ev.id == id && (all || e->ev.type != CEP_CM_EV_DESTROYED)) {
			*pp = e->next;
			e->next = gone;
			gone = e;
			ch->queued--;
			continue;
		}
		ch->tail = e;
		pp = &e->next;
	}
	if (gone && ch->queued == 0) {
		uint64_t v;

		if (read(ch->efd, &v, sizeof(v)) < 0) {
			/* already 0: nothing to do */
		}
	}
	pthread_mutex_unlock(&ch->mtx);
	while (gone) {
		e = gone;
		gone = e->next;
		event_free(e);
	}
}

/* Any thread. The oldest event whose context is not being destroyed: a
 * context's events stay queued, skipped, from the moment its destroy
 * commits until that destroy drops them (under this mutex too), so the
 * context read through e->cm here is alive. */
int cep_cm_get_event(struct cep_cm_channel *ch, struct cep_cm_event **out)
{
	struct chan_ev *e, **pp, *prev = NULL;

	if (!ch || !out)
		return -EINVAL;
	pthread_mutex_lock(&ch->mtx);
	for (pp = &ch->head; (e = *pp) != NULL; prev = e, pp = &e->next)
		if (cm_event_take(e->cm))
			break;
	if (e) {
		*pp = e->next;
		if (ch->tail == e)
			ch->tail = prev;
		if (--ch->queued == 0) {
			uint64_t v;

			if (read(ch->efd, &v, sizeof(v)) < 0) {
				/* already 0: nothing to do */
			}
		}
	}
	pthread_mutex_unlock(&ch->mtx);
	if (!e)
		return -EAGAIN;
	*out = &e->ev;
	return 0;
}

/* Any thread, no libcep lock held. The event's reference keeps its id
 * (locked below) and cm->taken keeps the context until cm_event_done. */
void cep_cm_ack_event(struct cep_cm_event *ev)
{
	struct chan_ev *e = (struct chan_ev *)ev;
	struct cep_cm *cm;

	if (!ev)
		return;
	cm = e->cm;
	if (ev->type == CEP_CM_EV_DESTROYED) {
		/* the id's last event: it no longer uses the channel */
		pthread_mutex_lock(&ev->id->lock);
		cm_channel_leave(ev->id);
		pthread_mutex_unlock(&ev->id->lock);
	}
	event_free(e);
	cm_event_done(cm);
}
