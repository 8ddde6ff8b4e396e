/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, multicast on a RoCE port without a device
 * (src/rdmacm/mcast.c): a stand-in device whose port 1 is RoCE, its GID
 * entry on the loopback netdev, and ids put where rdma_resolve_addr /
 * rdma_bind_addr leave them.
 * - rdma_join_multicast: MULTICAST_JOIN with the join's context, QPN
 *   0xffffff, Q_Key 0x01234567, a global address handle (MGID
 *   ::ffff:a.b.c.d for an IPv4 group, the group itself for IPv6, the id's
 *   GID index, hop limit 64, port 1); the node's membership of the IP
 *   group on the netdev (/proc/net/igmp, igmp6) for as long as the join,
 *   none for a send-only member; gone at leave and at rdma_destroy_id;
 * - the kernel's refusals: an id without a device or address, or not UD
 *   (EINVAL), a zero or unicast address (EINVAL, stricter than the
 *   kernel), an InfiniBand port (ENOSYS); librdmacm's checks of
 *   rdma_join_multicast_ex (ENOTSUP, EINVAL);
 * - rdma_leave_multicast: the first join of that address, then the next,
 *   then EADDRNOTAVAIL; a join's event still queued is taken back, the
 *   id's other events stay; an event the application holds is waited for;
 *   a synchronous id's kept event is acked.
 * Attaching a QP needs verbs: the guest tier runs mckey.
 * The layer's objects are linked in. Usage: test-rdmacm-mcast.
 */
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../common/check.h"
#include "rdmacm.h"
#include "standin_dev.h"

static struct ibv_device fdev;
static struct ibv_context fctx;
static struct rcm_dev dev;
static struct rcm_port ports[2];
static struct ibv_gid_entry gids[1];

/* Port 1 RoCE (GID index 3 on lo), port 2 InfiniBand. */
static void standin(void)
{
	standin_dev(&dev, &fctx, &fdev, "rxe_t", ports, 2);
	ports[0].link_layer = IBV_LINK_LAYER_ETHERNET;
	ports[1].link_layer = IBV_LINK_LAYER_INFINIBAND;
	inet_pton(AF_INET6, "::ffff:10.0.0.1", gids[0].gid.raw);
	gids[0].port_num = 1;
	gids[0].gid_index = 3;
	gids[0].gid_type = IBV_GID_TYPE_ROCE_V2;
	gids[0].ndev_ifindex = 1; /* lo */
	dev.gids = gids;
	dev.ngids = 1;
	rcm.devs = &dev;
	rcm.ndevs = 1;
	rcm.inited = 1;
}

/* A UD id of @ps on @ch where rdma_resolve_addr leaves it, on @port. */
static struct rcm_id *resolved(struct rcm_channel *ch, enum rdma_port_space ps,
			       enum ibv_qp_type qpt, struct rcm_port *port, void *ctx)
{
	struct rcm_id *r = rcm_id_new(ch, ctx, ps, qpt);

	CHECK(r != NULL);
	r->port = port;
	r->sgid_index = 3;
	r->id.verbs = &fctx;
	r->id.port_num = port->port_num;
	r->state = RCM_ADDR_RESOLVED;
	return r;
}

/* Group @last of this process's own range (239.255.P.last, ff05::P:last
 * when @v6; P from the pid), so that runs side by side do not share. */
static const char *gname(int v6, unsigned last)
{
	static char buf[8][48];
	static unsigned n;
	char *b = buf[n++ % 8];

	snprintf(b, sizeof(buf[0]), v6 ? "ff05::%x:%x" : "239.255.%u.%u",
		 (unsigned)getpid() & 0xffu, last);
	return b;
}

static void group(struct sockaddr_storage *ss, const char *text)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(text, ':')) {
		ss->ss_family = AF_INET6;
		CHECK_EQ(inet_pton(AF_INET6, text, &((struct sockaddr_in6 *)ss)->sin6_addr), 1);
	} else {
		ss->ss_family = AF_INET;
		CHECK_EQ(inet_pton(AF_INET, text, &((struct sockaddr_in *)ss)->sin_addr), 1);
	}
}

/* Does lo hold the membership of @text (/proc/net/igmp or igmp6)? */
static int lo_member(const char *text)
{
	char line[256], want[40];
	int v6 = strchr(text, ':') != NULL, in_lo = 0, found = 0;
	FILE *f = fopen(v6 ? "/proc/net/igmp6" : "/proc/net/igmp", "r");

	CHECK(f != NULL);
	if (!f)
		return -1;
	if (v6) {
		uint8_t a[16];

		CHECK_EQ(inet_pton(AF_INET6, text, a), 1);
		for (int i = 0; i < 16; i++)
			snprintf(want + 2 * i, 3, "%02x", a[i]);
	} else {
		uint32_t a;

		CHECK_EQ(inet_pton(AF_INET, text, &a), 1);
		snprintf(want, sizeof(want), "%08X", a); /* as the kernel prints it */
	}
	while (fgets(line, sizeof(line), f)) {
		if (v6) {
			if (strstr(line, " lo ") && strstr(line, want))
				found = 1;
			continue;
		}
		if (line[0] != '\t') /* an interface's line: "1\tlo  : ..." */
			in_lo = strstr(line, "\tlo ") != NULL;
		else if (in_lo && strstr(line, want))
			found = 1;
	}
	fclose(f);
	return found;
}

static struct rdma_cm_event *next_event(struct rcm_channel *ch)
{
	struct rdma_cm_event *ev = NULL;

	CHECK_EQ(poll(&(struct pollfd){ .fd = ch->ch.fd, .events = POLLIN }, 1, 5000), 1);
	CHECK_EQ(rdma_get_cm_event(&ch->ch, &ev), 0);
	return ev;
}

static int queued(struct rcm_channel *ch)
{
	return poll(&(struct pollfd){ .fd = ch->ch.fd, .events = POLLIN }, 1, 0);
}

static void join_ipv4(struct rcm_channel *ch)
{
	const char *g = gname(0, 11);
	const uint8_t mgid[16] = { [10] = 0xff, [11] = 0xff, 239, 255,
				   (uint8_t)(getpid() & 0xff), 11 };
	struct sockaddr_storage ss;
	struct rdma_cm_event *ev;
	int tag;
	struct rcm_id *r = resolved(ch, RDMA_PS_UDP, IBV_QPT_UD, &ports[0], &tag);

	group(&ss, g);
	CHECK_EQ(lo_member(g), 0);
	CHECK_EQ(rdma_join_multicast(&r->id, (struct sockaddr *)&ss, &tag), 0);
	CHECK_EQ(lo_member(g), 1); /* the membership, before the event */
	ev = next_event(ch);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK_EQ(ev->status, 0);
	CHECK(ev->id == &r->id);
	CHECK(ev->param.ud.private_data == &tag);
	CHECK_EQ(ev->param.ud.private_data_len, 0);
	CHECK_EQ(ev->param.ud.qp_num, 0xffffff);
	CHECK_EQ(ev->param.ud.qkey, RDMA_UDP_QKEY);
	CHECK_EQ(ev->param.ud.ah_attr.is_global, 1);
	CHECK_EQ(ev->param.ud.ah_attr.port_num, 1);
	CHECK_EQ(ev->param.ud.ah_attr.dlid, 0);
	CHECK_EQ(ev->param.ud.ah_attr.sl, 0);
	CHECK_EQ(ev->param.ud.ah_attr.static_rate, 0);
	CHECK(!memcmp(ev->param.ud.ah_attr.grh.dgid.raw, mgid, 16));
	CHECK_EQ(ev->param.ud.ah_attr.grh.sgid_index, 3);
	CHECK_EQ(ev->param.ud.ah_attr.grh.hop_limit, 64);
	CHECK_EQ(ev->param.ud.ah_attr.grh.flow_label, 0);
	CHECK_EQ(ev->param.ud.ah_attr.grh.traffic_class, 0);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	/* the same group again (the kernel keeps both joins): two leaves,
	 * then none left */
	CHECK_EQ(rdma_join_multicast(&r->id, (struct sockaddr *)&ss, NULL), 0);
	ev = next_event(ch);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK(ev->param.ud.private_data == NULL);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	CHECK_EQ(rdma_leave_multicast(&r->id, (struct sockaddr *)&ss), 0);
	CHECK_EQ(lo_member(g), 1); /* the other join still holds it */
	CHECK_EQ(rdma_leave_multicast(&r->id, (struct sockaddr *)&ss), 0);
	CHECK_EQ(lo_member(g), 0);
	errno = 0;
	CHECK_EQ(rdma_leave_multicast(&r->id, (struct sockaddr *)&ss), -1);
	CHECK_EQ(errno, EADDRNOTAVAIL);
	CHECK_EQ(queued(ch), 0);

	/* a join whose event is still queued, behind another event of the
	 * id: leave takes the join's back, the other stays */
	CHECK_EQ(rdma_join_multicast(&r->id, (struct sockaddr *)&ss, &tag), 0);
	pthread_mutex_lock(&r->mtx);
	rcm_push_locked(rcm_event_new(r, RDMA_CM_EVENT_ADDR_CHANGE, 0));
	pthread_mutex_unlock(&r->mtx);
	CHECK_EQ(rdma_leave_multicast(&r->id, (struct sockaddr *)&ss), 0);
	CHECK_EQ(lo_member(g), 0);
	ev = next_event(ch);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ADDR_CHANGE);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	CHECK_EQ(queued(ch), 0);

	/* rdma_destroy_id ends a membership the application never left */
	CHECK_EQ(rdma_join_multicast(&r->id, (struct sockaddr *)&ss, &tag), 0);
	ev = next_event(ch);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	CHECK_EQ(lo_member(g), 1);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	CHECK_EQ(lo_member(g), 0);
}

struct holder {
	struct rcm_channel *ch;
	struct rdma_cm_event *ev;
	_Atomic int acked;
};

static void *ack_later(void *arg)
{
	struct holder *h = arg;

	usleep(200 * 1000);
	atomic_store(&h->acked, 1);
	CHECK_EQ(rdma_ack_cm_event(h->ev), 0);
	return NULL;
}

/* A leave while the application holds the join's event waits for its ack
 * (librdmacm: events_reported), then returns. */
static void leave_waits(struct rcm_channel *ch)
{
	struct sockaddr_storage ss;
	struct holder h = { .ch = ch };
	pthread_t t;
	struct rcm_id *r = resolved(ch, RDMA_PS_IB, IBV_QPT_UD, &ports[0], NULL);

	group(&ss, gname(0, 12));
	CHECK_EQ(rdma_join_multicast(&r->id, (struct sockaddr *)&ss, NULL), 0);
	h.ev = next_event(ch);
	CHECK_EQ(h.ev->event, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK_EQ(h.ev->param.ud.qkey, RDMA_UDP_QKEY); /* the IB space's too */
	CHECK_EQ(pthread_create(&t, NULL, ack_later, &h), 0);
	CHECK_EQ(rdma_leave_multicast(&r->id, (struct sockaddr *)&ss), 0);
	CHECK_EQ(atomic_load(&h.acked), 1);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);

	/* a synchronous id (rdma_create_ep's): the join waits for its event,
	 * which the id keeps; the leave acks it instead of waiting forever */
	r = resolved(NULL, RDMA_PS_UDP, IBV_QPT_UD, &ports[0], NULL);
	CHECK(r->sync);
	CHECK_EQ(rdma_join_multicast(&r->id, (struct sockaddr *)&ss, &h), 0);
	CHECK(r->id.event != NULL);
	CHECK_EQ(r->id.event->event, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK(r->id.event->param.ud.private_data == &h);
	CHECK_EQ(rdma_leave_multicast(&r->id, (struct sockaddr *)&ss), 0);
	CHECK(r->id.event == NULL);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
}

static void join_ipv6_and_send_only(struct rcm_channel *ch)
{
	struct sockaddr_storage ss;
	struct rdma_cm_join_mc_attr_ex ax;
	struct rdma_cm_event *ev;
	uint8_t want[16];
	struct rcm_id *r = resolved(ch, RDMA_PS_UDP, IBV_QPT_UD, &ports[0], NULL);

	/* IPv6: the group is the MGID, the membership MLD's */
	if (access("/proc/net/igmp6", R_OK) == 0) {
		const char *g6 = gname(1, 13);

		group(&ss, g6);
		inet_pton(AF_INET6, g6, want);
		CHECK_EQ(rdma_join_multicast(&r->id, (struct sockaddr *)&ss, NULL), 0);
		CHECK_EQ(lo_member(g6), 1);
		ev = next_event(ch);
		CHECK_EQ(ev->event, RDMA_CM_EVENT_MULTICAST_JOIN);
		CHECK(!memcmp(ev->param.ud.ah_attr.grh.dgid.raw, want, 16));
		CHECK_EQ(rdma_ack_cm_event(ev), 0);
		CHECK_EQ(rdma_leave_multicast(&r->id, (struct sockaddr *)&ss), 0);
		CHECK_EQ(lo_member(g6), 0);
	} else {
		printf("# no /proc/net/igmp6 (IPv6 off): the IPv6 join not run\n");
	}

	/* send-only (rdma_join_multicast_ex): the event, no membership */
	group(&ss, gname(0, 14));
	memset(&ax, 0, sizeof(ax));
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ax.addr = (struct sockaddr *)&ss;
	ax.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	CHECK_EQ(rdma_join_multicast_ex(&r->id, &ax, &ax), 0);
	CHECK_EQ(lo_member(gname(0, 14)), 0);
	ev = next_event(ch);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK(ev->param.ud.private_data == &ax);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	CHECK_EQ(rdma_leave_multicast(&r->id, (struct sockaddr *)&ss), 0);

	/* librdmacm's checks of the _ex call */
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED;
	errno = 0;
	CHECK_EQ(rdma_join_multicast_ex(&r->id, &ax, NULL), -1);
	CHECK_EQ(errno, ENOTSUP);
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	errno = 0;
	CHECK_EQ(rdma_join_multicast_ex(&r->id, &ax, NULL), -1);
	CHECK_EQ(errno, EINVAL);
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	errno = 0;
	CHECK_EQ(rdma_join_multicast_ex(&r->id, &ax, NULL), -1);
	CHECK_EQ(errno, EINVAL);
	ax.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ax.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	errno = 0;
	CHECK_EQ(rdma_join_multicast_ex(&r->id, &ax, NULL), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(queued(ch), 0);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
}

/* A join of @grp by @r refused with @err. */
static void join_refused(struct rcm_id *r, const char *grp, int err)
{
	struct sockaddr_storage ss;

	group(&ss, grp);
	errno = 0;
	CHECK_EQ(rdma_join_multicast(&r->id, (struct sockaddr *)&ss, NULL), -1);
	CHECK_EQ(errno, err);
}

/* What the kernel refuses, and nothing changes: no event, no membership. */
static void refused(struct rcm_channel *ch)
{
	struct sockaddr_storage ss;
	struct rcm_id *r;

	/* no device yet (IDLE) */
	r = rcm_id_new(ch, NULL, RDMA_PS_UDP, IBV_QPT_UD);
	join_refused(r, gname(0, 15), EINVAL);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	/* a connected id (RC) */
	r = resolved(ch, RDMA_PS_TCP, IBV_QPT_RC, &ports[0], NULL);
	join_refused(r, gname(0, 15), EINVAL);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	/* zero and unicast addresses; a leave of what was never joined */
	r = resolved(ch, RDMA_PS_UDP, IBV_QPT_UD, &ports[0], NULL);
	join_refused(r, "0.0.0.0", EINVAL);
	join_refused(r, "10.0.0.9", EINVAL);
	join_refused(r, "fe80::1", EINVAL);
	errno = 0;
	CHECK_EQ(rdma_join_multicast(&r->id, NULL, NULL), -1);
	CHECK_EQ(errno, EINVAL);
	group(&ss, gname(0, 15));
	errno = 0;
	CHECK_EQ(rdma_leave_multicast(&r->id, (struct sockaddr *)&ss), -1);
	CHECK_EQ(errno, EADDRNOTAVAIL);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	/* an InfiniBand port joins through the SA (tests/rdmacm/ib.c); this
	 * stand-in's has none (no umad device of its name): the client's
	 * error, at once */
	r = resolved(ch, RDMA_PS_UDP, IBV_QPT_UD, &ports[1], NULL);
	join_refused(r, gname(0, 15), ENODEV);
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	CHECK_EQ(lo_member(gname(0, 15)), 0);
	CHECK_EQ(queued(ch), 0);
}

int main(void)
{
	struct rcm_channel *ch;

	standin();
	ch = rcm_channel_new();
	CHECK(ch != NULL);
	join_ipv4(ch);
	leave_waits(ch);
	join_ipv6_and_send_only(ch);
	refused(ch);
	rcm.ndevs = 0;
	rcm.devs = NULL;
	rcm_channel_free(ch);
	return check_done("rdmacm-mcast");
}
