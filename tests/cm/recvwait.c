/* SPDX-License-Identifier: MIT */
/*
 * The CM's receive path on a transport's own receive thread (as libibumad's,
 * issue 21), end to end: node B's port is a relay that queues what the
 * in-process fabric delivers (as the kernel's umad queue would) and hands it
 * to the CM from a thread of its own. B has one worker with a ring of 4,
 * held busy by a callback (the DESTROYED of an id, a work item on the
 * worker's thread); a raw port sends 32 REQs.
 *
 *   wait: the relay thread marks itself (transport/recv_wait.h, as umad's
 *         does): the ring fills, the thread waits, and once the worker is
 *         let go all 32 REQs arrive, none dropped (CEP_CM_DROP_QUEUE_FULL 0).
 *         Then, the worker asleep, one more REQ runs to completion on the
 *         relay thread itself (run-to-completion).
 *   drop: the same without the mark (a sender's thread): the ring takes 4,
 *         the other 28 are dropped and counted, as before.
 *
 * Usage: test-cm-recvwait wait|drop.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "harness.h"
#include "transport/recv_wait.h"
#include "cm/cm_internal.h"

struct item {
	struct item *next;
	size_t len;
	struct cep_mad_addr from;
	uint8_t mad[CEP_MAD_SIZE];
};

struct relay {
	struct cep_transport pub;
	struct cep_transport *inner;
	cep_recv_fn fn;
	void *ctx;
	int may_wait;
	pthread_t th;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	struct item *head, **tail;
	_Atomic int stopping;
};

static struct relay R;

/* The fabric's delivery (the sender's thread): queue it, unbounded. */
static void relay_in(void *ctx, const uint8_t *mad, size_t len, const struct cep_mad_addr *from)
{
	struct relay *r = ctx;
	struct item *it = calloc(1, sizeof(*it));

	CHECK(it != NULL);
	if (!it)
		return;
	memcpy(it->mad, mad, len);
	it->len = len;
	it->from = *from;
	pthread_mutex_lock(&r->mtx);
	*r->tail = it;
	r->tail = &it->next;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mtx);
}

static void *relay_thread(void *arg)
{
	struct relay *r = arg;

	if (r->may_wait)
		cep_recv_wait_abort = &r->stopping;
	for (;;) {
		struct item *it;

		pthread_mutex_lock(&r->mtx);
		while (!r->head && !atomic_load(&r->stopping))
			pthread_cond_wait(&r->cv, &r->mtx);
		it = r->head;
		if (it) {
			r->head = it->next;
			if (!r->head)
				r->tail = &r->head;
		}
		pthread_mutex_unlock(&r->mtx);
		if (!it)
			return NULL; /* stopping, queue empty */
		r->fn(r->ctx, it->mad, it->len, &it->from);
		free(it);
	}
}

static struct relay *to_relay(struct cep_transport *t)
{
	return (struct relay *)t;
}

static int relay_send(struct cep_transport *t, const uint8_t *mad, size_t len,
		      const struct cep_mad_addr *to)
{
	return to_relay(t)->inner->ops->send(to_relay(t)->inner, mad, len, to);
}

static int relay_query(struct cep_transport *t, struct cep_port_info *out)
{
	return to_relay(t)->inner->ops->query_port(to_relay(t)->inner, out);
}

static int relay_start(struct cep_transport *t, cep_recv_fn fn, void *ctx)
{
	struct relay *r = to_relay(t);

	r->fn = fn;
	r->ctx = ctx;
	if (pthread_create(&r->th, NULL, relay_thread, r))
		return -EAGAIN;
	return r->inner->ops->start(r->inner, relay_in, r);
}

static void relay_stop(struct cep_transport *t)
{
	struct relay *r = to_relay(t);

	r->inner->ops->stop(r->inner);
	pthread_mutex_lock(&r->mtx);
	atomic_store(&r->stopping, 1);
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mtx);
	pthread_join(r->th, NULL);
}

static void relay_destroy(struct cep_transport *t)
{
	to_relay(t)->inner->ops->destroy(to_relay(t)->inner);
}

static const struct cep_transport_ops relay_ops = {
	.send = relay_send, .query_port = relay_query, .start = relay_start,
	.stop = relay_stop, .destroy = relay_destroy,
};

static _Atomic int hold, reqs, reqs_on_relay, held_once;

static int handler(struct cep_cm_id *id, const struct cep_cm_event *ev)
{
	(void)id;
	if (ev->type == CEP_CM_EV_DESTROYED) {
		atomic_store(&held_once, 1);
		while (atomic_load(&hold))
			sched_yield();
	} else if (ev->type == CEP_CM_EV_REQ_RECEIVED) {
		atomic_fetch_add(&reqs, 1);
		if (pthread_equal(pthread_self(), R.th))
			atomic_fetch_add(&reqs_on_relay, 1);
	}
	return 0;
}

static void wait_for(_Atomic int *v, int want)
{
	for (int i = 0; i < 5000 && atomic_load(v) < want; i++)
		sleep_ms(1);
}

int main(int argc, char **argv)
{
	struct cep_fabric_attr fa = { .size = sizeof(fa), .seed = 1 };
	struct cep_fabric_port_attr pb = { .size = sizeof(pb), .ca_guid = GUID_B, .lid = LID_B,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_fabric_port_attr pc = { .size = sizeof(pc), .ca_guid = GUID_C, .lid = LID_C,
					   .port_num = 1, .link_layer = CEP_FABRIC_LINK_IB };
	struct cep_cm_attr ca = { .size = sizeof(ca), .workers = 1, .queue_depth = 4 };
	struct cep_cm_id_attr ia = { .size = sizeof(ia), .handler = handler };
	struct cep_cm_stats st = { .size = sizeof(st) };
	struct cep_cm_id *l, *dummy;
	int wait;

	if (argc != 2 || (strcmp(argv[1], "wait") && strcmp(argv[1], "drop"))) {
		fprintf(stderr, "usage: test-cm-recvwait wait|drop\n");
		return 2;
	}
	wait = !strcmp(argv[1], "wait");
	CHECK_EQ(cep_fabric_create(&fa, &fab), 0);
	R.pub.ops = &relay_ops;
	R.may_wait = wait;
	R.tail = &R.head;
	pthread_mutex_init(&R.mtx, NULL);
	pthread_cond_init(&R.cv, NULL);
	CHECK_EQ(cep_fabric_port_create(fab, &pb, &R.inner), 0);
	ca.transport = &R.pub;
	CHECK_EQ(cep_cm_create(&ca, &B.cm), 0);
	pthread_mutex_init(&C.mtx, NULL);
	CHECK_EQ(cep_fabric_port_create(fab, &pc, &C.tp), 0);
	CHECK_EQ(C.tp->ops->start(C.tp, raw_recv, &C), 0);

	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &l), 0);
	CHECK_EQ(cep_cm_listen(l, SID, ~0ull), 0);
	/* Hold B's only worker in a callback on its own thread. */
	atomic_store(&hold, 1);
	CHECK_EQ(cep_cm_create_id(B.cm, &ia, &dummy), 0);
	CHECK_EQ(cep_cm_destroy_id(dummy), 0);
	wait_for(&held_once, 1);
	CHECK_EQ(atomic_load(&held_once), 1);

	for (uint32_t i = 0; i < 32; i++) {
		struct cep_msg m;

		raw_req(&m, 0x5000 + i, 0x300 + i);
		raw_send(&m, LID_B);
	}
	sleep_ms(200); /* the relay thread has read what it can */
	CHECK_EQ(atomic_load(&reqs), 0);
	atomic_store(&hold, 0);
	wait_for(&reqs, wait ? 32 : 4);
	sleep_ms(100); /* nothing more comes (drop) */
	CHECK_EQ(cep_cm_quiesce(B.cm, 5000), 0);
	CHECK_EQ(cep_cm_get_stats(B.cm, &st), 0);
	printf("%s: %d of 32 REQs received, %llu dropped (queue full)\n", argv[1],
	       atomic_load(&reqs), (unsigned long long)st.drops[CEP_CM_DROP_QUEUE_FULL]);
	if (wait) {
		CHECK_EQ(atomic_load(&reqs), 32);
		CHECK_EQ(st.drops[CEP_CM_DROP_QUEUE_FULL], 0);
		/* Once the worker sleeps (its yields after work may take long
		 * on a loaded host), a REQ runs on the relay thread. It wakes
		 * every 50 ms for a moment: a REQ that lands then is posted,
		 * so up to 10 are sent, one at a time. */
		struct cep_dispatch_stats ds;
		uint64_t s0;
		int sent = 0;

		cep_dispatch_stats(B.cm->d, &ds);
		s0 = ds.sleeps;
		for (int i = 0; i < 5000 && ds.sleeps == s0; i++) {
			sleep_ms(1);
			cep_dispatch_stats(B.cm->d, &ds);
		}
		CHECK(ds.sleeps > s0);
		while (sent < 10 && atomic_load(&reqs_on_relay) == 0) {
			struct cep_msg m;

			raw_req(&m, 0x6000 + (uint32_t)sent, 0x400 + (uint32_t)sent);
			raw_send(&m, LID_B);
			sent++;
			wait_for(&reqs, 32 + sent);
		}
		CHECK_EQ(atomic_load(&reqs), 32 + sent);
		CHECK(atomic_load(&reqs_on_relay) >= 1);
		cep_dispatch_stats(B.cm->d, &ds);
		CHECK(ds.inline_mads >= 1);
		printf("wait: a REQ ran on the relay thread (%d sent)\n", sent);
	} else {
		CHECK_EQ(atomic_load(&reqs), 4);
		CHECK_EQ(st.drops[CEP_CM_DROP_QUEUE_FULL], 28);
		CHECK_EQ(atomic_load(&reqs_on_relay), 0);
	}
	CHECK_EQ(cep_cm_destroy(B.cm), 0);
	R.pub.ops->destroy(&R.pub);
	C.tp->ops->destroy(C.tp);
	CHECK_EQ(cep_fabric_destroy(fab), 0);
	return check_done(argv[1]);
}
