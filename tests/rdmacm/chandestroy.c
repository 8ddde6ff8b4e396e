/* SPDX-License-Identifier: MIT */
/*
 * A channel destroyed while another thread is inside rdma_get_cm_event on
 * it, as rping's client does: its CM thread acks DISCONNECTED and calls
 * rdma_get_cm_event again while main destroys the id and the channel. With
 * librdmacm that thread stays blocked in read() on the ucma fd (a closed
 * fd does not wake a blocked read) and rping exits 0; libcep's getter used
 * to find the fd closed (EBADF: rping printed "rdma_get_cm_event: Bad file
 * descriptor" and exited 255, seen in guests-rdmacm) or the channel freed.
 * Now the channel stays, fd open, until the getter leaves.
 *
 * The test: a thread blocks in rdma_get_cm_event; main destroys the
 * channel; the getter must still be blocked and the fd still open; then
 * main sets the fd non-blocking and interrupts the getter's poll with a
 * signal, so the getter returns EAGAIN (not EBADF) and, the last one out,
 * frees the channel (AddressSanitizer checks no use after free, no leak).
 * The layer's objects are linked in. Usage: test-rdmacm-chandestroy.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "../common/check.h"
#include "rdmacm.h"

static struct rcm_channel *ch;
static _Atomic int returned, ret_errno;

static void on_sig(int sig)
{
	(void)sig; /* only interrupts poll() */
}

static void *getter(void *arg)
{
	struct rdma_cm_event *ev;
	int r;

	(void)arg;
	r = rdma_get_cm_event(&ch->ch, &ev);
	atomic_store(&ret_errno, r < 0 ? errno : 0);
	atomic_store(&returned, 1);
	return NULL;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

int main(void)
{
	struct sigaction sa = { .sa_handler = on_sig }; /* no SA_RESTART */
	pthread_t t;
	int fd, fl;

	sigemptyset(&sa.sa_mask);
	CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
	ch = rcm_channel_new();
	CHECK(ch != NULL);
	fd = ch->ch.fd;
	CHECK_EQ(pthread_create(&t, NULL, getter, NULL), 0);
	for (int i = 0; i < 5000 && atomic_load(&ch->getters) == 0; i++)
		sleep_ms(1);
	CHECK_EQ(atomic_load(&ch->getters), 1);
	sleep_ms(20); /* into its poll */

	rdma_destroy_event_channel(&ch->ch);
	sleep_ms(50);
	CHECK_EQ(atomic_load(&returned), 0); /* still blocked, as on librdmacm */
	fl = fcntl(fd, F_GETFL);
	CHECK(fl >= 0); /* the fd was not closed under it */

	/* Let it out: non-blocking, and interrupt the poll. */
	CHECK_EQ(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
	for (int i = 0; i < 500 && !atomic_load(&returned); i++) {
		pthread_kill(t, SIGUSR1);
		sleep_ms(2);
	}
	pthread_join(t, NULL);
	CHECK_EQ(atomic_load(&returned), 1);
	CHECK_EQ(atomic_load(&ret_errno), EAGAIN); /* not EBADF */
	/* The getter, last out of a destroyed channel, freed it and its fd. */
	CHECK(fcntl(fd, F_GETFL) < 0);
	return check_done("rdmacm-chandestroy");
}
