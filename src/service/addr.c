/* SPDX-License-Identifier: MIT */
/*
 * The source addresses a cepd client may use (addr.h): entries of its
 * port's GID and P_Key tables and, on RoCE, only GIDs whose network
 * device is in the client's network namespace. A check reads the kernel's
 * tables as they are at that moment; per client only its namespace is
 * kept, never a verdict.
 *
 * The kernel's rule (drivers/infiniband/core, as of 6.1). rdma_cm binds
 * an id to the network namespace of the process that created it. On RoCE
 * a source address is resolved in that namespace to a net device
 * (bound_dev_if), and cma_validate_port accepts a GID entry only if the
 * entry's value and type match and its net device is that very device:
 * the GID cache compares device pointers. The entries come from
 * roce_gid_mgmt.c: default GIDs of the port's own device (fe80:: and the
 * EUI-64 of its MAC) and one entry per IP address of that device or of a
 * device stacked on it (VLAN, macvlan, bond master). Its netdevice and
 * address notifiers see every namespace, and a stacked device moved into
 * another namespace (a container's macvlan) gets entries for the
 * addresses it is given there, so one port's table holds the addresses
 * of several namespaces, with nothing in the table to say which. On InfiniBand an entry has no net
 * device and rdma_cm takes any entry of the value: so does cepd (the
 * entry must exist and be non-zero, nothing more). cepd assumes the RDMA
 * subsystem's shared namespace mode (the default); in exclusive mode the
 * kernel also requires the RDMA device to be the id's namespace's, which
 * is not checked here.
 *
 * What user space sees of a RoCE entry: its value and type and the
 * ifindex of its device (ibv_query_gid_ex), and the device's name (sysfs
 * gid_attrs/ndevs). Neither identifies a device across namespaces: every
 * namespace numbers and names its devices itself, so an "eth0" with
 * ifindex 2 is in most of them (a pod's veth, a container's macvlan), and
 * a user who runs `unshare -Urn` gets a namespace in which it may create
 * any device with any name, ifindex, MAC and address. cepd therefore
 * decides with what only a namespace's administrators control:
 *
 *   1. The client's namespace (the one its process was in at the HELLO)
 *      must be owned by cepd's user namespace (NS_GET_USERNS on it):
 *      devices, names, MACs and addresses of a namespace change only with
 *      CAP_NET_ADMIN in the user namespace that owns it, and an
 *      unprivileged user's namespaces are owned by its own user
 *      namespace. What such a namespace shows proves nothing, so its
 *      clients get no RoCE GID (-EACCES); the kernel would give them the
 *      entries of devices an administrator moved in, which cepd cannot
 *      tell from forgeries.
 *   2. There, the entry's ifindex must name a device of the entry's name,
 *   3. and the entry's value must be that device's own: one of its
 *      addresses (an IPv4 one mapped), or the default GID of its MAC. A
 *      namespace that merely has a device of the same number and name
 *      fails here: its device holds neither the other's address nor its
 *      MAC.
 *
 * Why a local user cannot get around it. To be granted an entry of
 * another namespace, a client needs a device in its own namespace with
 * the entry's ifindex, name and address (or MAC). In a namespace of its
 * own making it can build one, and rule 1 refuses everything there. In a
 * namespace owned by cepd's user namespace (the initial one, or one root
 * made) it cannot create, rename or re-address a device without
 * CAP_NET_ADMIN there, which is an administrator's. What is left:
 *   - a holder of CAP_NET_ADMIN over such a namespace (an administrator,
 *     or a container given CAP_NET_ADMIN without a user namespace) can
 *     dress a device up as another namespace's; and two namespaces an
 *     administrator configured alike (same address on devices of the
 *     same number and name) are not told apart;
 *   - the owner of a namespace that holds a stacked device (a macvlan
 *     root moved into a user's namespace) can number, name and address
 *     it like a device of the client's namespace; the entry it then lends
 *     carries an address the client's own namespace already holds, so
 *     the client gains no address, only that device's link, which its
 *     owner chose to lend.
 *
 * Freshness and cost (CONNECT checks a GID index, a path's local GID and
 * a P_Key; thousands per second per node are a goal):
 *   - GID entries are read live from the kernel's GID cache, one ioctl
 *     per entry (UVERBS_METHOD_QUERY_GID_ENTRY). No cache of cepd's
 *     decides: RoCE changes raise a GID_CHANGE event, but an InfiniBand
 *     port's entries change without one (the core's non-RoCE cache update
 *     does not dispatch it), and a live read costs about a system call.
 *     By value, the last read of the whole table says where to look; each
 *     entry found there is read again before it counts, and a value not
 *     granted there is looked for in the whole table read anew (which is
 *     then the next hint): a grant costs an entry read, a refusal the
 *     table's (the kernel walks every slot: rxe has 1024).
 *   - The entry's device name is read live from sysfs (a rename raises no
 *     GID event): its file stays open and is read again at offset 0,
 *     which makes sysfs write the name anew.
 *   - The P_Key table is cached per port and read again after any
 *     asynchronous event of the device, drained by the check itself
 *     (non-blocking): the core dispatches PKEY_CHANGE only after updating
 *     its own cache, the one rdma_cm's ib_find_cached_pkey reads, and a
 *     live read through sysfs asks the device (a firmware command on some
 *     HCAs).
 *   - A namespace's facts (links: ifindex, name, MAC; addresses) are kept
 *     once per namespace, shared by its clients, with a netlink socket in
 *     that namespace subscribed to link and address changes. Link changes
 *     (new, gone, renamed, new MAC), IPv4 address changes and every
 *     address removal are queued to it before the system call that made
 *     them returns, so a check that finds that socket empty (one recv)
 *     uses facts no older than any such change; anything queued, or an
 *     overflow, means new dumps first (if changes keep coming, four at
 *     most: the last answers). An addition announced later (IPv6 may
 *     announce one after duplicate address detection) is refused until
 *     then, never the reverse.
 *   So a granted check costs an ioctl, a pread of sysfs and a recv, plus
 *   two uncontended mutexes; a P_Key check a read of the event queue.
 *   tests/guests/addr.sh measures it on Soft-RoCE.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/nsfs.h>
#include <linux/rtnetlink.h>

#ifdef CEPD_HAVE_UMAD
#include <infiniband/verbs.h>
#endif

#include "service/addr.h"
#include "service/cepd.h"

static bool zero_gid(const uint8_t *g)
{
	for (int i = 0; i < 16; i++)
		if (g[i])
			return false;
	return true;
}

/* ---- the rule ------------------------------------------------------------------ */

/* @g is the default GID of a device with hardware address @mac: fe80::/64
 * and the EUI-64 of the MAC (universal/local bit flipped). Bytes 11-12 are
 * not compared: they are ff:fe, or the device's dev_id on NICs whose
 * ports share a MAC (the kernel's addrconf_ifid_eui48). */
static bool default_gid_of(const uint8_t g[16], const uint8_t mac[6])
{
	static const uint8_t ll[8] = { 0xfe, 0x80 };

	return !memcmp(g, ll, 8) && g[8] == (mac[0] ^ 2) && g[9] == mac[1] &&
	       g[10] == mac[2] && g[13] == mac[3] && g[14] == mac[4] && g[15] == mac[5];
}

int addr_roce_rule(const struct addr_gid_entry *e, const struct addr_ns_facts *ns)
{
	const struct addr_ns_link *l = NULL;

	/* 1: a namespace its own users administer proves nothing */
	if (!ns->owned || !e->ifindex || !e->ndev[0])
		return -EACCES;
	/* 2: the entry's number names a device of the entry's name there */
	for (unsigned i = 0; i < ns->nlinks && !l; i++)
		if (ns->links[i].ifindex == e->ifindex)
			l = &ns->links[i];
	if (!l || strncmp(l->name, e->ndev, ADDR_IFNAMSIZ))
		return -EACCES;
	/* 3: and the value is that device's own */
	for (unsigned i = 0; i < ns->naddrs; i++)
		if (ns->addrs[i].ifindex == e->ifindex && !memcmp(ns->addrs[i].gid, e->gid, 16))
			return 0;
	return l->has_mac && default_gid_of(e->gid, l->mac) ? 0 : -EACCES;
}

/* ---- namespaces ----------------------------------------------------------------- */

/* What cepd knows of one network namespace, shared by its clients. */
struct nsview {
	struct nsview *next;            /* views_lk */
	unsigned refs;                  /* views_lk */
	dev_t dev;                      /* the namespace's nsfs identity; */
	ino_t ino;                      /* not reused while mon pins it */
	int mon;                        /* in the namespace: change notifications */
	int q;                          /* in the namespace: dumps */
	pthread_mutex_t lk;             /* what follows, and reading the sockets */
	uint32_t seq;                   /* lk: of the last dump request */
	int fresh;                      /* lk: facts as of the last notification read */
	struct addr_ns_link *links;     /* lk */
	unsigned nlinks;
	struct addr_ns_addr *addrs;     /* lk */
	unsigned naddrs;
};

static pthread_mutex_t views_lk = PTHREAD_MUTEX_INITIALIZER;
static struct nsview *views;        /* views_lk */

struct addr_client {
	int netfd;                      /* the namespace at the HELLO; -1: none kept */
	int owned;                      /* by cepd's user namespace */
	struct nsview *view;            /* owned namespaces only */
};

#define NL_GROUPS (RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR)
#define NL_DUMP_CAP 65536

/* A NETLINK_ROUTE socket in the calling thread's namespace: subscribed
 * to @groups (non-blocking, a large buffer) or, with 0, for dumps (a 5 s
 * receive timeout). */
static int nl_socket(unsigned groups)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = groups };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | (groups ? SOCK_NONBLOCK : 0),
			NETLINK_ROUTE);

	if (fd < 0)
		return -errno;
	if (groups) {
		/* room for a burst of changes; an overflow costs a dump, no more */
		int sz = 1 << 20;

		if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
			(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	} else {
		struct timeval tv = { .tv_sec = 5 };

		(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	return fd;
}

static int nl_pair(int *mon, int *q)
{
	*mon = nl_socket(NL_GROUPS);
	if (*mon < 0)
		return *mon;
	*q = nl_socket(0);
	if (*q < 0) {
		int ret = *q;

		close(*mon);
		*mon = -1;
		return ret;
	}
	return 0;
}

struct mkarg {
	int netfd, mon, q, err;
};

/* A thread of its own enters the client's namespace to make the view's
 * sockets there (a socket keeps the namespace it was made in) and ends:
 * nothing else ever runs in that namespace. */
static void *mk_sockets(void *arg)
{
	struct mkarg *a = arg;

	if (setns(a->netfd, CLONE_NEWNET))
		a->err = -errno;
	else
		a->err = nl_pair(&a->mon, &a->q);
	return NULL;
}

static int nl_pair_in(int netfd, int *mon, int *q)
{
	struct mkarg a = { .netfd = netfd, .mon = -1, .q = -1 };
	pthread_attr_t at;
	pthread_t t;
	int ret;

	if (pthread_attr_init(&at))
		return -ENOMEM;
	(void)pthread_attr_setstacksize(&at, 256 * 1024);
	ret = -pthread_create(&t, &at, mk_sockets, &a);
	pthread_attr_destroy(&at);
	if (ret)
		return ret;
	pthread_join(t, NULL);
	*mon = a.mon;
	*q = a.q;
	return a.err;
}

/* The facts being built by one load. */
struct build {
	struct addr_ns_link *links;
	unsigned nlinks, clinks;
	struct addr_ns_addr *addrs;
	unsigned naddrs, caddrs;
};

static int take_link(struct build *b, const struct nlmsghdr *h)
{
	const struct ifinfomsg *ifi = NLMSG_DATA(h);
	struct addr_ns_link l = { 0 };
	const struct rtattr *a;
	int len;

	if (h->nlmsg_type != RTM_NEWLINK)
		return 0;
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*ifi)))
		return -EPROTO;
	l.ifindex = (uint32_t)ifi->ifi_index;
	len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*ifi)));
	for (a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		size_t n = RTA_PAYLOAD(a);

		if (a->rta_type == IFLA_IFNAME) {
			n = strnlen(RTA_DATA(a), n);
			if (n >= ADDR_IFNAMSIZ)
				return -EPROTO;
			memcpy(l.name, RTA_DATA(a), n);
		} else if (a->rta_type == IFLA_ADDRESS && n == 6) {
			memcpy(l.mac, RTA_DATA(a), 6);
			l.has_mac = 1;
		}
	}
	if (!l.name[0])
		return -EPROTO;
	if (b->nlinks == b->clinks) {
		unsigned c = b->clinks ? 2 * b->clinks : 16;
		struct addr_ns_link *n = realloc(b->links, c * sizeof(*n));

		if (!n)
			return -ENOMEM;
		b->links = n;
		b->clinks = c;
	}
	b->links[b->nlinks++] = l;
	return 0;
}

static int add_addr(struct build *b, uint32_t ifindex, int family, const void *p, size_t n)
{
	struct addr_ns_addr x = { .ifindex = ifindex };

	if (family == AF_INET && n == 4) {
		x.gid[10] = x.gid[11] = 0xff;
		memcpy(x.gid + 12, p, 4);
	} else if (family == AF_INET6 && n == 16) {
		memcpy(x.gid, p, 16);
	} else {
		return 0;
	}
	if (b->naddrs == b->caddrs) {
		unsigned c = b->caddrs ? 2 * b->caddrs : 16;
		struct addr_ns_addr *m = realloc(b->addrs, c * sizeof(*m));

		if (!m)
			return -ENOMEM;
		b->addrs = m;
		b->caddrs = c;
	}
	b->addrs[b->naddrs++] = x;
	return 0;
}

static int take_addr(struct build *b, const struct nlmsghdr *h)
{
	const struct ifaddrmsg *ifa = NLMSG_DATA(h);
	const struct rtattr *a;
	int len, ret = 0;

	if (h->nlmsg_type != RTM_NEWADDR)
		return 0;
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*ifa)))
		return -EPROTO;
	len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*ifa)));
	/* IFA_ADDRESS is what roce_gid_mgmt makes the GID of (ifa_address; the
	 * peer's on a point-to-point link), IFA_LOCAL the device's own: both
	 * are the device's configuration */
	for (a = IFA_RTA(ifa); RTA_OK(a, len) && !ret; a = RTA_NEXT(a, len))
		if (a->rta_type == IFA_ADDRESS || a->rta_type == IFA_LOCAL)
			ret = add_addr(b, ifa->ifa_index, ifa->ifa_family, RTA_DATA(a), RTA_PAYLOAD(a));
	return ret;
}

/* One dump of @type (RTM_GETLINK, RTM_GETADDR) through v->q, each message
 * to @take: 0; -EINTR (the kernel says the dump was interrupted by a
 * change: do it again); -errno. */
static int nl_dump(struct nsview *v, uint16_t type, char *buf, struct build *b,
		   int (*take)(struct build *, const struct nlmsghdr *))
{
	struct {
		struct nlmsghdr h;
		union {
			struct ifinfomsg ifi;
			struct ifaddrmsg ifa;
		} u;
		char attrs[16];
	} req;
	struct sockaddr_nl to = { .nl_family = AF_NETLINK };
	int intr = 0;

	memset(&req, 0, sizeof(req));
	req.h.nlmsg_type = type;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.h.nlmsg_seq = ++v->seq;
	if (type == RTM_GETLINK) {
		struct rtattr *a;
		uint32_t mask = RTEXT_FILTER_SKIP_STATS; /* names and MACs only */

		req.u.ifi.ifi_family = AF_UNSPEC;
		req.h.nlmsg_len = NLMSG_LENGTH(sizeof(req.u.ifi));
		a = (struct rtattr *)((char *)&req + NLMSG_ALIGN(req.h.nlmsg_len));
		a->rta_type = IFLA_EXT_MASK;
		a->rta_len = RTA_LENGTH(sizeof(mask));
		memcpy(RTA_DATA(a), &mask, sizeof(mask));
		req.h.nlmsg_len = NLMSG_ALIGN(req.h.nlmsg_len) + RTA_ALIGN(a->rta_len);
	} else {
		req.u.ifa.ifa_family = AF_UNSPEC;
		req.h.nlmsg_len = NLMSG_LENGTH(sizeof(req.u.ifa));
	}
	if (sendto(v->q, &req, req.h.nlmsg_len, 0, (struct sockaddr *)&to, sizeof(to)) < 0)
		return -errno;
	for (;;) {
		struct sockaddr_nl from;
		struct iovec iov = { .iov_base = buf, .iov_len = NL_DUMP_CAP };
		struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof(from),
				     .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n = recvmsg(v->q, &mh, 0);
		size_t off;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		}
		if (mh.msg_flags & MSG_TRUNC)
			return -EMSGSIZE;
		if (from.nl_pid != 0)
			continue; /* not the kernel's */
		for (off = 0; off + sizeof(struct nlmsghdr) <= (size_t)n;) {
			const struct nlmsghdr *h = (const struct nlmsghdr *)(buf + off);
			int ret;

			if (h->nlmsg_len < sizeof(*h) || h->nlmsg_len > (size_t)n - off)
				return -EPROTO;
			off += NLMSG_ALIGN(h->nlmsg_len);
			if (h->nlmsg_seq != v->seq)
				continue; /* a reply to an earlier, abandoned dump */
			if (h->nlmsg_flags & NLM_F_DUMP_INTR)
				intr = 1;
			if (h->nlmsg_type == NLMSG_DONE) {
				if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(int))) {
					int err;

					memcpy(&err, NLMSG_DATA(h), sizeof(err));
					if (err < 0)
						return err;
				}
				return intr ? -EINTR : 0;
			}
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);

				if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
					return -EPROTO;
				return e->error ? e->error : -EPROTO;
			}
			ret = take(b, h);
			if (ret)
				return ret;
		}
	}
}

/* Dump the namespace's links and addresses into v (lk held). */
static int view_load(struct nsview *v)
{
	struct build b = { 0 };
	char *buf = malloc(NL_DUMP_CAP);
	int ret;

	if (!buf)
		return -ENOMEM;
	ret = nl_dump(v, RTM_GETLINK, buf, &b, take_link);
	if (!ret)
		ret = nl_dump(v, RTM_GETADDR, buf, &b, take_addr);
	free(buf);
	if (ret) {
		free(b.links);
		free(b.addrs);
		return ret;
	}
	free(v->links);
	free(v->addrs);
	v->links = b.links;
	v->nlinks = b.nlinks;
	v->addrs = b.addrs;
	v->naddrs = b.naddrs;
	return 0;
}

/* Read what the subscribed socket holds: 1 if anything (or an overflow:
 * notifications were lost), 0 if nothing, or -errno. */
static int drain(int fd)
{
	char buf[256];
	int any = 0;

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);

		if (n >= 0 || errno == ENOBUFS)
			any = 1;
		else if (errno == EAGAIN || errno == EWOULDBLOCK)
			return any;
		else if (errno != EINTR)
			return -errno;
	}
}

/* Make v's facts current (lk held): 0, -EAGAIN when every dump was
 * interrupted by changes, or -errno. While changes keep arriving, four
 * complete dumps at most: then the last answers this check (its facts
 * all held during the check) and the next check dumps again. */
static int view_refresh_locked(struct nsview *v)
{
	int have = 0;

	for (int tries = 0; tries < 4; tries++) {
		/* read the queue before dumping: a change made after the read
		 * is either in the dump or queued for the next read */
		int ret = drain(v->mon);

		if (ret < 0)
			return ret;
		if (!ret && (v->fresh || have)) {
			v->fresh = 1;
			return 0;
		}
		v->fresh = 0;
		ret = view_load(v);
		if (!ret)
			have = 1;
		else if (ret != -EINTR)
			return ret;
	}
	return have ? 0 : -EAGAIN;
}

static void view_free(struct nsview *v)
{
	if (v->mon >= 0)
		close(v->mon);
	if (v->q >= 0)
		close(v->q);
	pthread_mutex_destroy(&v->lk);
	free(v->links);
	free(v->addrs);
	free(v);
}

/* The view of namespace @netfd (identity @st), made on first use: 0 and
 * a reference in *out, or -errno. HELLOs only (views_lk is held while a
 * new view is made: a thread and two dumps). */
static int view_get(int netfd, const struct stat *st, struct nsview **out)
{
	struct stat self;
	struct nsview *v;
	int ret;

	pthread_mutex_lock(&views_lk);
	for (v = views; v; v = v->next)
		if (v->dev == st->st_dev && v->ino == st->st_ino) {
			v->refs++;
			*out = v;
			pthread_mutex_unlock(&views_lk);
			return 0;
		}
	v = calloc(1, sizeof(*v));
	if (!v) {
		pthread_mutex_unlock(&views_lk);
		return -ENOMEM;
	}
	v->mon = v->q = -1;
	v->dev = st->st_dev;
	v->ino = st->st_ino;
	v->refs = 1;
	pthread_mutex_init(&v->lk, NULL);
	if (stat("/proc/self/ns/net", &self) == 0 && self.st_dev == st->st_dev &&
	    self.st_ino == st->st_ino)
		ret = nl_pair(&v->mon, &v->q);      /* cepd's own namespace */
	else
		ret = nl_pair_in(netfd, &v->mon, &v->q);
	if (!ret) {
		pthread_mutex_lock(&v->lk);
		ret = view_refresh_locked(v);
		pthread_mutex_unlock(&v->lk);
	}
	if (ret) {
		pthread_mutex_unlock(&views_lk);
		view_free(v);
		return ret;
	}
	v->next = views;
	views = v;
	pthread_mutex_unlock(&views_lk);
	*out = v;
	return 0;
}

static void view_put(struct nsview *v)
{
	struct nsview **pp;

	if (!v)
		return;
	pthread_mutex_lock(&views_lk);
	if (--v->refs) {
		pthread_mutex_unlock(&views_lk);
		return;
	}
	for (pp = &views; *pp != v; pp = &(*pp)->next)
		;
	*pp = v->next;
	pthread_mutex_unlock(&views_lk);
	view_free(v);
}

/* Whether namespace @netfd is owned by cepd's user namespace: 1, 0, or
 * -errno. */
static int ns_owned(int netfd)
{
	struct stat mine, owner;
	int u = ioctl(netfd, NS_GET_USERNS);
	int ret;

	if (u < 0)
		return errno == EPERM ? 0 : -errno; /* EPERM: an ancestor of ours owns it */
	ret = fstat(u, &owner) ? -errno : 0;
	close(u);
	if (!ret)
		ret = stat("/proc/self/ns/user", &mine) ? -errno : 0;
	if (ret)
		return ret;
	return mine.st_dev == owner.st_dev && mine.st_ino == owner.st_ino;
}

/* The client's namespace now (its HELLO), its owner, and the view. */
static int client_ns(const struct cepd_ident *id, struct addr_client *ac)
{
	struct stat st;
	int ret;

	if (id->procfd < 0)
		return -ESRCH;
	ac->netfd = openat(id->procfd, "ns/net", O_RDONLY | O_CLOEXEC);
	if (ac->netfd < 0)
		return errno == ENOENT ? -ESRCH : -errno; /* ENOENT: the process is gone */
	if (fstat(ac->netfd, &st))
		return -errno;
	ret = ns_owned(ac->netfd);
	if (ret <= 0)
		return ret;
	ac->owned = 1;
	return view_get(ac->netfd, &st, &ac->view);
}

int addr_client_open_ns(const struct cepd_ident *id, struct addr_client **out)
{
	struct addr_client *ac = calloc(1, sizeof(*ac));
	int ret;

	if (!ac)
		return -ENOMEM;
	ac->netfd = -1;
	ret = client_ns(id, ac);
	if (ret) {
		addr_client_close(ac);
		return ret;
	}
	*out = ac;
	return 0;
}

void addr_client_close(struct addr_client *ac)
{
	if (!ac)
		return;
	view_put(ac->view);
	if (ac->netfd >= 0)
		close(ac->netfd);
	free(ac);
}

int addr_client_entry(struct addr_client *ac, const struct addr_gid_entry *e)
{
	struct addr_ns_facts f = { 0 };
	int ret;

	if (!ac || !ac->view)
		return -EACCES; /* no namespace kept, or one not owned */
	pthread_mutex_lock(&ac->view->lk);
	ret = view_refresh_locked(ac->view);
	if (!ret) {
		f.owned = ac->owned;
		f.links = ac->view->links;
		f.nlinks = ac->view->nlinks;
		f.addrs = ac->view->addrs;
		f.naddrs = ac->view->naddrs;
		ret = addr_roce_rule(e, &f);
	}
	pthread_mutex_unlock(&ac->view->lk);
	return ret;
}

/* ---- ports ---------------------------------------------------------------------- */

struct addr_port {
	int rdma;                       /* 0: the in-process fabric */
	int roce;                       /* Ethernet link layer: the namespace rule */
#ifdef CEPD_HAVE_UMAD
	struct ibv_context *ctx;        /* its own, for the queries and the events */
#endif
	int ndevs;                      /* O_PATH: sysfs gid_attrs/ndevs of the port */
	size_t gids;                    /* the device's GID table lengths, all ports */
	unsigned port_gids;             /* this port's */
	pthread_mutex_t lk;             /* what follows */
	uint16_t *pkeys;                /* lk: host order */
	unsigned npkeys;
	int pkeys_fresh;                /* lk: no event since the table was read */
	int *ndev_fd;                   /* lk: [port_gids] ndevs/INDEX, opened on
					   first use (-1), read again each time */
#ifdef CEPD_HAVE_UMAD
	struct ibv_gid_entry *seen;     /* lk: the last table read: where to look
					   first for a value (each hint read again) */
	unsigned nseen;
#endif
};

#ifdef CEPD_HAVE_UMAD
/* What one table read (UVERBS_METHOD_QUERY_GID_TABLE) can return: the
 * ioctl's attribute length is 16 bits. */
#define GID_TABLE_MAX (UINT16_MAX / sizeof(struct ibv_gid_entry))

static int open_device(struct port *p, struct addr_port *ap)
{
	struct ibv_device **list;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	char path[128];
	int n = 0, fl, ret;

	list = ibv_get_device_list(&n);
	if (!list)
		return errno ? -errno : -ENODEV;
	for (int i = 0; i < n && !ap->ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), p->dev))
			ap->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ap->ctx)
		return -ENODEV;
	ret = ibv_query_device(ap->ctx, &da);
	if (!ret)
		ret = ibv_query_port(ap->ctx, p->port_num, &pa);
	if (ret)
		return -ret; /* both answer an errno */
	ap->roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	for (unsigned pn = 1; pn <= da.phys_port_cnt; pn++) {
		struct ibv_port_attr o;

		ret = ibv_query_port(ap->ctx, (uint8_t)pn, &o);
		if (ret)
			return -ret;
		ap->gids += (size_t)o.gid_tbl_len;
	}
	ap->port_gids = (unsigned)pa.gid_tbl_len;
	ap->ndev_fd = malloc((ap->port_gids ? ap->port_gids : 1) * sizeof(*ap->ndev_fd));
	if (!ap->ndev_fd)
		return -ENOMEM;
	for (unsigned i = 0; i < ap->port_gids; i++)
		ap->ndev_fd[i] = -1;
	ap->npkeys = (unsigned)pa.pkey_tbl_len;
	ap->pkeys = calloc(ap->npkeys ? ap->npkeys : 1, sizeof(*ap->pkeys));
	if (!ap->pkeys)
		return -ENOMEM;
	/* the checks drain the device's events without blocking */
	fl = fcntl(ap->ctx->async_fd, F_GETFL);
	if (fl < 0 || fcntl(ap->ctx->async_fd, F_SETFL, fl | O_NONBLOCK))
		return -errno;
	if (ap->roce) {
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/ndevs",
			 p->dev, (unsigned)p->port_num);
		ap->ndevs = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (ap->ndevs < 0)
			return -errno;
	}
	return 0;
}

/* Drain the device's events; read the P_Key table again if there were
 * any (or it was never read): lk held; 0 or -errno. */
static int pkeys_locked(struct port *p, struct addr_port *ap)
{
	struct ibv_async_event ev;

	for (;;) {
		errno = 0;
		if (ibv_get_async_event(ap->ctx, &ev))
			break;
		ibv_ack_async_event(&ev);
		ap->pkeys_fresh = 0;
	}
	if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return errno ? -errno : -EIO;
	if (ap->pkeys_fresh)
		return 0;
	for (unsigned i = 0; i < ap->npkeys; i++) {
		__be16 v;

		if (ibv_query_pkey(ap->ctx, p->port_num, (int)i, &v))
			return errno ? -errno : -EIO;
		ap->pkeys[i] = be16toh(v);
	}
	ap->pkeys_fresh = 1;
	return 0;
}

/* The name of the device of GID entry @index now (sysfs): 0, -EINVAL
 * when the entry is gone, -EACCES when it has no device. The file is
 * opened once (one per entry that was valid when a check read it) and
 * read at offset 0 each time: sysfs makes the text anew on every such
 * read, and a third of an open, read and close costs. */
static int ndev_name(struct addr_port *ap, unsigned index, char name[ADDR_IFNAMSIZ])
{
	char buf[ADDR_IFNAMSIZ + 2];
	ssize_t n;
	int fd;

	if (index >= ap->port_gids)
		return -EINVAL;
	pthread_mutex_lock(&ap->lk);
	fd = ap->ndev_fd[index];
	if (fd < 0) {
		char file[16];

		snprintf(file, sizeof(file), "%u", index);
		fd = ap->ndev_fd[index] = openat(ap->ndevs, file, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			fd = -errno;
	}
	pthread_mutex_unlock(&ap->lk);
	if (fd < 0)
		return fd == -ENOENT ? -EINVAL : fd;
	/* the fd lives as long as the port: concurrent preads are serialised
	 * by sysfs itself */
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n < 0)
		n = -errno;
	if (n == -ENODATA)
		return -EINVAL; /* the entry went away */
	if (n <= 0)
		return -EACCES; /* no device (the kernel answers EINVAL) */
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	if (!buf[0] || strlen(buf) >= ADDR_IFNAMSIZ)
		return -EACCES;
	memcpy(name, buf, strlen(buf) + 1);
	return 0;
}

/* The verdict on one RoCE entry read from the kernel. */
static int roce_entry(struct addr_port *ap, struct addr_client *ac, const struct ibv_gid_entry *g)
{
	struct addr_gid_entry e = { .ifindex = g->ndev_ifindex };
	int ret;

	if (!ac || !ac->owned)
		return -EACCES; /* rule 1, before reading anything more */
	memcpy(e.gid, g->gid.raw, 16);
	ret = ndev_name(ap, g->gid_index, e.ndev);
	return ret ? ret : addr_client_entry(ac, &e);
}

/* One more entry of the value addr_gid() looks for: true when it is
 * granted (*ret 0); else *ret keeps the first refusal of an entry that
 * exists (-EINVAL until one does). */
static bool judge(struct addr_port *ap, struct addr_client *ac, const struct ibv_gid_entry *g,
		  int *ret)
{
	int r = ap->roce ? roce_entry(ap, ac, g) : 0;

	if (!r || *ret == -EINVAL)
		*ret = r;
	return !r;
}

/* ibv_query_gid_ex's errno as the checks answer it. */
static int gid_errno(int err)
{
	/* EINVAL: index past the table; ENODATA (ENOENT before 5.x): empty */
	return err == EINVAL || err == ENODATA || err == ENOENT ? -EINVAL : -err;
}

/* addr_gid() from the port's whole table, read now. */
static int gid_table(struct port *p, struct addr_port *ap, struct addr_client *ac,
		     const uint8_t gid[16])
{
	struct ibv_gid_entry *t;
	ssize_t n;
	unsigned k = 0;
	int ret = -EINVAL;

	if (ap->gids > GID_TABLE_MAX) {
		/* more entries than one read returns: entry by entry */
		for (unsigned i = 0; i < ap->port_gids; i++) {
			struct ibv_gid_entry g;
			int err = ibv_query_gid_ex(ap->ctx, p->port_num, i, &g, 0);

			if (err && gid_errno(err) != -EINVAL)
				return gid_errno(err);
			if (!err && !memcmp(g.gid.raw, gid, 16) && judge(ap, ac, &g, &ret))
				break;
		}
		return ret;
	}
	t = malloc((ap->gids ? ap->gids : 1) * sizeof(*t));
	if (!t)
		return -ENOMEM;
	n = ibv_query_gid_table(ap->ctx, t, ap->gids, 0);
	if (n < 0) {
		free(t);
		return (int)n;
	}
	for (ssize_t i = 0; i < n; i++)
		if (t[i].port_num == p->port_num)
			t[k++] = t[i];
	for (unsigned i = 0; i < k; i++)
		if (!memcmp(t[i].gid.raw, gid, 16) && judge(ap, ac, &t[i], &ret))
			break;
	pthread_mutex_lock(&ap->lk);
	free(ap->seen);
	ap->seen = t;
	ap->nseen = k;
	pthread_mutex_unlock(&ap->lk);
	return ret;
}
#endif /* CEPD_HAVE_UMAD */

int addr_port_open(struct port *p)
{
	struct addr_port *ap = calloc(1, sizeof(*ap));
	int ret = 0;

	if (!ap)
		return -ENOMEM;
	ap->ndevs = -1;
	pthread_mutex_init(&ap->lk, NULL);
	p->addr = ap;
	if (!p->dev[0])
		return 0; /* the fabric: its tables are p->info's */
	ap->rdma = 1;
#ifdef CEPD_HAVE_UMAD
	ret = open_device(p, ap);
	if (!ret) {
		pthread_mutex_lock(&ap->lk);
		ret = pkeys_locked(p, ap);
		pthread_mutex_unlock(&ap->lk);
	}
	if (!ret) {
		static const uint8_t none[16] = { 0xff }; /* no entry: only the hints */
		int r = gid_table(p, ap, NULL, none);

		ret = r == -EINVAL ? 0 : r;
	}
#else
	ret = -EOPNOTSUPP;
#endif
	if (ret)
		addr_port_close(p);
	return ret;
}

void addr_port_close(struct port *p)
{
	struct addr_port *ap = p->addr;

	if (!ap)
		return;
#ifdef CEPD_HAVE_UMAD
	if (ap->ctx)
		ibv_close_device(ap->ctx);
#endif
	if (ap->ndevs >= 0)
		close(ap->ndevs);
	for (unsigned i = 0; ap->ndev_fd && i < ap->port_gids; i++)
		if (ap->ndev_fd[i] >= 0)
			close(ap->ndev_fd[i]);
	free(ap->ndev_fd);
#ifdef CEPD_HAVE_UMAD
	free(ap->seen);
#endif
	pthread_mutex_destroy(&ap->lk);
	free(ap->pkeys);
	free(ap);
	p->addr = NULL;
}

int addr_client_open(struct port *p, const struct cepd_ident *id, struct addr_client **out)
{
	struct addr_port *ap = p->addr;
	struct addr_client *ac = calloc(1, sizeof(*ac));
	int ret = 0;

	if (!ac)
		return -ENOMEM;
	ac->netfd = -1;
	/* only RoCE has namespaces to check: elsewhere nothing is read (a
	 * client's /proc may be closed to a cepd of another user) */
	if (ap->roce)
		ret = client_ns(id, ac);
	if (ret) {
		addr_client_close(ac);
		return ret;
	}
	*out = ac;
	return 0;
}

int addr_gid_index(struct port *p, struct addr_client *ac, unsigned index)
{
	struct addr_port *ap = p->addr;

	if (!ap->rdma)
		return index == p->info.gid_index && !zero_gid(p->info.gid) ? 0 : -EINVAL;
#ifdef CEPD_HAVE_UMAD
	{
		struct ibv_gid_entry g;
		int err = ibv_query_gid_ex(ap->ctx, p->port_num, index, &g, 0);

		if (err)
			return gid_errno(err);
		if (zero_gid(g.gid.raw))
			return -EINVAL;
		return ap->roce ? roce_entry(ap, ac, &g) : 0;
	}
#else
	return -EOPNOTSUPP;
#endif
}

int addr_gid(struct port *p, struct addr_client *ac, const uint8_t gid[16])
{
	struct addr_port *ap = p->addr;

	if (zero_gid(gid))
		return -EINVAL;
	if (!ap->rdma)
		return memcmp(gid, p->info.gid, 16) ? -EINVAL : 0;
#ifdef CEPD_HAVE_UMAD
	{
		/* any entry of that value the client may use: v1 and v2, and
		 * one per device that holds the address */
		unsigned hint[8], nh = 0;
		int ret = -EINVAL;

		/* where the value was at the last table read, each entry read
		 * again: a grant costs an entry read, not the table's */
		pthread_mutex_lock(&ap->lk);
		for (unsigned i = 0; i < ap->nseen && nh < 8; i++)
			if (!memcmp(ap->seen[i].gid.raw, gid, 16))
				hint[nh++] = ap->seen[i].gid_index;
		pthread_mutex_unlock(&ap->lk);
		for (unsigned i = 0; i < nh; i++) {
			struct ibv_gid_entry g;

			if (!ibv_query_gid_ex(ap->ctx, p->port_num, hint[i], &g, 0) &&
			    !memcmp(g.gid.raw, gid, 16) && judge(ap, ac, &g, &ret))
				return 0;
		}
		/* not granted there: the whole table decides (and is the next hint) */
		return gid_table(p, ap, ac, gid);
	}
#else
	return -EOPNOTSUPP;
#endif
}

int addr_pkey_index(struct port *p, unsigned index)
{
	struct addr_port *ap = p->addr;

	if (!ap->rdma)
		return index == 0 && (p->info.pkey & 0x7fff) ? 0 : -EINVAL;
#ifdef CEPD_HAVE_UMAD
	{
		int ret;

		pthread_mutex_lock(&ap->lk);
		ret = pkeys_locked(p, ap);
		if (!ret)
			ret = index < ap->npkeys && (ap->pkeys[index] & 0x7fff) ? 0 : -EINVAL;
		pthread_mutex_unlock(&ap->lk);
		return ret;
	}
#else
	return -EOPNOTSUPP;
#endif
}

int addr_pkey(struct port *p, uint16_t pkey)
{
	struct addr_port *ap = p->addr;

	/* as ib_find_cached_pkey: the partition is the low 15 bits, the
	 * membership bit may differ; 0 is no partition */
	if (!(pkey & 0x7fff))
		return -EINVAL;
	if (!ap->rdma)
		return (pkey & 0x7fff) == (p->info.pkey & 0x7fff) ? 0 : -EINVAL;
#ifdef CEPD_HAVE_UMAD
	{
		int ret;

		pthread_mutex_lock(&ap->lk);
		ret = pkeys_locked(p, ap);
		if (!ret) {
			ret = -EINVAL;
			for (unsigned i = 0; i < ap->npkeys && ret; i++)
				if ((ap->pkeys[i] & 0x7fff) == (pkey & 0x7fff))
					ret = 0;
		}
		pthread_mutex_unlock(&ap->lk);
		return ret;
	}
#else
	return -EOPNOTSUPP;
#endif
}
