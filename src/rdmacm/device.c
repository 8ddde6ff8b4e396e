/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, devices: every RDMA device opened once per process
 * (as librdmacm's ucma_init), IP address -> (device, port, GID index)
 * through the RoCE v2 GID table, and one libcep CM per port over libibumad,
 * opened on first use and stopped when the process exits.
 *
 * Guarantees: rcm.lock guards initialisation and each port's lazy fields;
 * a port's CM pointer is published with release order once the CM runs,
 * so readers that find it non-NULL need no lock.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/ib.h>

#include <cep/sa.h>
#include <cep/umad.h>

#include "ib.h"
#include "rdmacm.h"
#include "cm/cm_internal.h" /* cm_port: the port a cepd context serves */
#include "cm/lead.h"        /* cep_lead_stats, for CEP_RDMACM_STATS */
#include "service/remote.h" /* cmr_callbacks_inline */

struct rcm_global rcm = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* An InfiniBand port's P_Key table (the kernel's cache, read once: the
 * SM changes it rarely, and a connection's QP takes its index at INIT).
 * A port whose table cannot be read keeps none (index 0, no check). */
static void read_pkeys(struct rcm_port *p, int len)
{
	uint16_t n = (uint16_t)(len > 65535 ? 65535 : len);

	p->pkeys = calloc(n, sizeof(*p->pkeys));
	if (!p->pkeys)
		return;
	for (uint16_t i = 0; i < n; i++) {
		__be16 v;

		if (ibv_query_pkey(p->dev->verbs, p->port_num, i, &v)) {
			free(p->pkeys);
			p->pkeys = NULL;
			return;
		}
		p->pkeys[i] = be16toh(v);
	}
	p->npkeys = n;
}

int rcm_pkey_index(const struct rcm_port *p, uint16_t pkey, uint16_t *index)
{
	int partial = -1;

	*index = 0;
	if (!p->pkeys)
		return 0;
	for (uint16_t i = 0; i < p->npkeys; i++)
		if ((p->pkeys[i] & 0x7fff) == (pkey & 0x7fff)) {
			if (p->pkeys[i] & 0x8000) {
				*index = i;
				return 0;
			}
			if (partial < 0)
				partial = i;
		}
	if (partial < 0)
		return -ENOENT;
	*index = (uint16_t)partial;
	return 0;
}

static int init_dev(struct rcm_dev *d, struct ibv_device *dev)
{
	d->verbs = ibv_open_device(dev);
	if (!d->verbs)
		return -ENODEV;
	if (ibv_query_device(d->verbs, &d->attr)) {
		ibv_close_device(d->verbs);
		d->verbs = NULL;
		return -ENODEV;
	}
	d->nports = d->attr.phys_port_cnt;
	d->ports = calloc(d->nports ? d->nports : 1, sizeof(*d->ports));
	if (!d->ports)
		return -ENOMEM;
	for (unsigned i = 0; i < d->nports; i++) {
		struct rcm_port *p = &d->ports[i];
		struct ibv_port_attr pa;

		p->dev = d;
		p->port_num = (uint8_t)(i + 1);
		p->link_layer = ibv_query_port(d->verbs, p->port_num, &pa) ?
				IBV_LINK_LAYER_UNSPECIFIED : pa.link_layer;
		if (p->link_layer == IBV_LINK_LAYER_INFINIBAND && pa.pkey_tbl_len)
			read_pkeys(p, pa.pkey_tbl_len);
		pthread_mutex_init(&p->svc_mtx, NULL);
		pthread_mutex_init(&p->qpn_mtx, NULL);
		pthread_mutex_init(&p->mc_mtx, NULL);
	}
	return 0;
}

int rcm_init(void)
{
	struct ibv_device **list;
	int n = 0, ret = 0;

	pthread_mutex_lock(&rcm.lock);
	if (rcm.inited) {
		ret = rcm.init_err;
		goto out;
	}
	list = ibv_get_device_list(&n);
	if (!list || n <= 0) {
		ret = -ENODEV;
	} else {
		rcm.devs = calloc((size_t)n, sizeof(*rcm.devs));
		if (!rcm.devs)
			ret = -ENOMEM;
		for (int i = 0; !ret && i < n; i++)
			if (init_dev(&rcm.devs[rcm.ndevs], list[i]) == 0)
				rcm.ndevs++;
		if (!ret && rcm.ndevs == 0)
			ret = -ENODEV;
	}
	if (list)
		ibv_free_device_list(list);
	rcm.inited = 1;
	rcm.init_err = ret;
out:
	pthread_mutex_unlock(&rcm.lock);
	return ret;
}

unsigned rcm_port_count(void)
{
	unsigned n = 0;

	for (unsigned i = 0; i < rcm.ndevs; i++)
		n += rcm.devs[i].nports;
	return n;
}

unsigned rcm_leads(struct cep_lead **out, unsigned max)
{
	unsigned n = 0;

	for (unsigned d = 0; d < rcm.ndevs; d++)
		for (unsigned i = 0; i < rcm.devs[d].nports && n < max; i++) {
			/* acquire: the CM is complete (rcm_port_cm's release) */
			struct cep_cm *cm = atomic_load_explicit(&rcm.devs[d].ports[i].cm,
								 memory_order_acquire);
			struct cep_lead *l = cm ? cm_lead(cm) : NULL;

			if (l)
				out[n++] = l;
		}
	return n;
}

struct rcm_port *rcm_port_at(unsigned i)
{
	for (unsigned d = 0; d < rcm.ndevs; d++) {
		if (i < rcm.devs[d].nports)
			return &rcm.devs[d].ports[i];
		i -= rcm.devs[d].nports;
	}
	return NULL;
}

void rcm_addr_gid(const struct sockaddr *a, uint8_t gid[16])
{
	memset(gid, 0, 16);
	if (a->sa_family == AF_INET) {
		gid[10] = gid[11] = 0xff;
		memcpy(gid + 12, &((const struct sockaddr_in *)(const void *)a)->sin_addr, 4);
	} else if (a->sa_family == AF_INET6) {
		memcpy(gid, &((const struct sockaddr_in6 *)(const void *)a)->sin6_addr, 16);
	} else if (a->sa_family == AF_IB) {
		memcpy(gid, ((const struct sockaddr_ib *)(const void *)a)->sib_addr.sib_raw, 16);
	}
}

/* Refill @dev's GID table cache. Caller holds rcm.lock. */
static void gid_cache_fill(struct rcm_dev *dev)
{
	size_t max = 0;
	ssize_t n;

	for (unsigned i = 0; i < dev->nports; i++) {
		struct ibv_port_attr pa;

		if (ibv_query_port(dev->verbs, (uint8_t)(i + 1), &pa) == 0)
			max += (size_t)pa.gid_tbl_len;
	}
	free(dev->gids);
	dev->gids = max ? calloc(max, sizeof(*dev->gids)) : NULL;
	n = dev->gids ? ibv_query_gid_table(dev->verbs, dev->gids, max, 0) : 0;
	dev->ngids = n > 0 ? (size_t)n : 0;
}

/* Caller holds rcm.lock. */
static int gid_cache_find(const uint8_t want[16], enum ibv_gid_type type,
			  struct rcm_port **port, uint8_t *gid_index)
{
	for (unsigned d = 0; d < rcm.ndevs; d++) {
		struct rcm_dev *dev = &rcm.devs[d];

		for (size_t i = 0; i < dev->ngids; i++) {
			const struct ibv_gid_entry *e = &dev->gids[i];

			if (e->gid_type != type || memcmp(e->gid.raw, want, 16) ||
			    e->port_num < 1 || e->port_num > dev->nports)
				continue;
			if (type == IBV_GID_TYPE_IB &&
			    dev->ports[e->port_num - 1].link_layer != IBV_LINK_LAYER_INFINIBAND)
				continue;
			*port = &dev->ports[e->port_num - 1];
			*gid_index = (uint8_t)e->gid_index;
			return 0;
		}
	}
	return -EADDRNOTAVAIL;
}

/* @want of @type in the cache, reading the tables again on a miss (GIDs
 * follow the netdevs' addresses). */
static int gid_find(const uint8_t want[16], enum ibv_gid_type type, struct rcm_port **port,
		    uint8_t *gid_index)
{
	int ret;

	pthread_mutex_lock(&rcm.lock);
	ret = gid_cache_find(want, type, port, gid_index);
	if (ret) {
		for (unsigned d = 0; d < rcm.ndevs; d++)
			gid_cache_fill(&rcm.devs[d]);
		ret = gid_cache_find(want, type, port, gid_index);
	}
	pthread_mutex_unlock(&rcm.lock);
	return ret;
}

int rcm_find_addr(const struct sockaddr *addr, struct rcm_src *out)
{
	int ret, ifindex;

	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	memset(out, 0, sizeof(*out));
	out->pkey = 0xffff;
	rcm_addr_gid(addr, out->gid);
	/* RoCE first, from the cache: no system call on the common path */
	pthread_mutex_lock(&rcm.lock);
	ret = gid_cache_find(out->gid, IBV_GID_TYPE_ROCE_V2, &out->port, &out->gid_index);
	pthread_mutex_unlock(&rcm.lock);
	if (!ret)
		return 0;
	/* An IPoIB interface's address: the port holding its GID (the
	 * kernel's cma_acquire_dev by the netdev's hardware address) */
	if (rcm_ib_local(addr, out->gid, &out->pkey, &ifindex) == 0)
		return gid_find(out->gid, IBV_GID_TYPE_IB, &out->port, &out->gid_index);
	rcm_addr_gid(addr, out->gid);
	out->pkey = 0xffff;
	return gid_find(out->gid, IBV_GID_TYPE_ROCE_V2, &out->port, &out->gid_index);
}

/* Caller holds rcm.lock. The first InfiniBand GID whose subnet prefix
 * is @want's. */
static int gid_cache_prefix(const uint8_t want[16], struct rcm_src *out)
{
	for (unsigned d = 0; d < rcm.ndevs; d++) {
		struct rcm_dev *dev = &rcm.devs[d];

		for (size_t i = 0; i < dev->ngids; i++) {
			const struct ibv_gid_entry *e = &dev->gids[i];

			if (e->gid_type != IBV_GID_TYPE_IB || memcmp(e->gid.raw, want, 8) ||
			    e->port_num < 1 || e->port_num > dev->nports ||
			    dev->ports[e->port_num - 1].link_layer != IBV_LINK_LAYER_INFINIBAND)
				continue;
			out->port = &dev->ports[e->port_num - 1];
			out->gid_index = (uint8_t)e->gid_index;
			memcpy(out->gid, e->gid.raw, 16);
			return 0;
		}
	}
	return -EADDRNOTAVAIL;
}

int rcm_find_ib_gid(const uint8_t gid[16], int prefix_ok, struct rcm_src *out)
{
	int ret;

	memset(out, 0, sizeof(*out));
	memcpy(out->gid, gid, 16);
	out->pkey = 0xffff; /* the default P_Key */
	/* the cache first: a stand-in device has no verbs to refill it */
	pthread_mutex_lock(&rcm.lock);
	ret = gid_cache_find(gid, IBV_GID_TYPE_IB, &out->port, &out->gid_index);
	if (ret && prefix_ok)
		ret = gid_cache_prefix(gid, out);
	pthread_mutex_unlock(&rcm.lock);
	if (ret)
		ret = gid_find(gid, IBV_GID_TYPE_IB, &out->port, &out->gid_index);
	if (ret && prefix_ok) {
		pthread_mutex_lock(&rcm.lock);
		ret = gid_cache_prefix(gid, out);
		pthread_mutex_unlock(&rcm.lock);
	}
	return ret;
}

int rcm_port_sa(struct rcm_port *p, uint32_t timeout_ms, struct cep_sa **out)
{
	int ret = 0;

	pthread_mutex_lock(&rcm.lock);
	if (!p->sa)
		ret = rcm_ib_sys.sa_get(ibv_get_device_name(p->dev->verbs->device), p->port_num,
					timeout_ms, &p->sa);
	*out = p->sa;
	pthread_mutex_unlock(&rcm.lock);
	return ret;
}

struct ibv_xrcd *rcm_dev_xrcd(struct ibv_context *verbs)
{
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
						     IBV_XRCD_INIT_ATTR_OFLAGS,
					.fd = -1, .oflags = O_CREAT };
	struct ibv_xrcd *x = NULL;
	int err = ENODEV;

	pthread_mutex_lock(&rcm.lock);
	for (unsigned i = 0; i < rcm.ndevs; i++) {
		struct rcm_dev *d = &rcm.devs[i];

		if (d->verbs != verbs)
			continue;
		if (!d->xrcd)
			d->xrcd = ibv_open_xrcd(verbs, &a);
		x = d->xrcd;
		err = x ? 0 : errno; /* the device's answer (rxe: EOPNOTSUPP) */
		break;
	}
	pthread_mutex_unlock(&rcm.lock);
	errno = err;
	return x;
}

struct ibv_pd *rcm_dev_pd(struct rcm_dev *d)
{
	struct ibv_pd *pd;

	pthread_mutex_lock(&rcm.lock);
	if (!d->pd)
		d->pd = ibv_alloc_pd(d->verbs);
	pd = d->pd;
	pthread_mutex_unlock(&rcm.lock);
	return pd;
}

/* The routing table's answers, kept RCM_ROUTE_TTL_MS: asking it costs a
 * socket and three more system calls, and rdma_resolve_addr asks once per
 * connection (cmtime: 1,000 times for one destination). A route that
 * changes is seen at the latest after the TTL; a failed lookup is never
 * kept. Direct-mapped by destination; any thread (route.lock). */
#define RCM_ROUTE_TTL_MS 1000
#define RCM_ROUTE_SLOTS 64
static struct {
	pthread_mutex_t lock;
	struct {
		struct sockaddr_storage dst, src;
		uint64_t until_ms;    /* 0: empty */
	} slot[RCM_ROUTE_SLOTS];
} route = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* @dst without its port (the route does not depend on it) in @key. */
static unsigned route_key(const struct sockaddr *dst, size_t len, struct sockaddr_storage *key)
{
	const uint8_t *b = (const uint8_t *)key;
	uint32_t h = 2166136261u;

	memset(key, 0, sizeof(*key));
	memcpy(key, dst, len);
	if (dst->sa_family == AF_INET)
		((struct sockaddr_in *)key)->sin_port = 0;
	else
		((struct sockaddr_in6 *)key)->sin6_port = 0;
	for (size_t i = 0; i < len; i++) /* FNV-1a */
		h = (h ^ b[i]) * 16777619u;
	return h % RCM_ROUTE_SLOTS;
}

int rcm_route_source(const struct sockaddr *dst, struct sockaddr_storage *src)
{
	socklen_t len = sizeof(*src);
	size_t dlen = (size_t)rcm_addr_len(dst);
	struct sockaddr_storage key;
	unsigned k = route_key(dst, dlen, &key);
	uint64_t now = coarse_ms();
	int fd, ret = 0;

	pthread_mutex_lock(&route.lock);
	if (route.slot[k].until_ms > now && !memcmp(&route.slot[k].dst, &key, sizeof(key))) {
		*src = route.slot[k].src;
		pthread_mutex_unlock(&route.lock);
		return 0;
	}
	pthread_mutex_unlock(&route.lock);
	/* A connected UDP socket asks the routing table; nothing is sent. */
	fd = rcm_socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memset(src, 0, sizeof(*src));
	if (connect(fd, dst, (socklen_t)dlen) ||
	    getsockname(fd, (struct sockaddr *)src, &len))
		ret = -errno;
	close(fd);
	if (!ret) {
		pthread_mutex_lock(&route.lock);
		route.slot[k].dst = key;
		route.slot[k].src = *src;
		route.slot[k].until_ms = now + RCM_ROUTE_TTL_MS;
		pthread_mutex_unlock(&route.lock);
	}
	return ret;
}

static void say_busy(const struct rcm_port *p, int err)
{
	static atomic_int said;

	if (atomic_exchange(&said, 1))
		return;
	if (err == -EBUSY)
		fprintf(stderr, "librdmacm (libcep): %s port %u: the connection manager class "
			"is already registered on this port, by another process using libcep's "
			"librdmacm or by the kernel's ib_cm module. libcep runs the CM inside the "
			"application: one process per port, and only while ib_cm is not loaded "
			"(docs/rdmacm.md).\n", ibv_get_device_name(p->dev->verbs->device),
			p->port_num);
	else
		fprintf(stderr, "librdmacm (libcep): %s port %u: cannot open the port's CM "
			"(libibumad): %s\n", ibv_get_device_name(p->dev->verbs->device),
			p->port_num, strerror(-err));
}

static unsigned env_unsigned(const char *name, unsigned dflt)
{
	const char *s = getenv(name);

	return s && *s ? (unsigned)strtoul(s, NULL, 10) : dflt;
}

static void stats_on_signal(void);

int rcm_port_cm(struct rcm_port *p, struct cep_cm **out)
{
	struct cep_umad_attr ua = { .size = sizeof(ua), .gid_index = CEP_UMAD_GID_AUTO };
	struct cep_cm_attr ca = { .size = sizeof(ca) };
	struct cep_transport *t = NULL;
	struct cep_cm *cm;
	int ret;

	/* Acquire: pairs with the release store below (CM fully started). */
	cm = atomic_load_explicit(&p->cm, memory_order_acquire);
	if (cm) {
		*out = cm;
		return 0;
	}
	pthread_mutex_lock(&rcm.lock);
	cm = atomic_load_explicit(&p->cm, memory_order_relaxed);
	if (cm) {
		pthread_mutex_unlock(&rcm.lock);
		*out = cm;
		return 0;
	}
	if (!rcm_port_usable(p)) {
		ret = -EPROTONOSUPPORT; /* iWARP, or a port that did not answer */
		goto out;
	}
	ua.dev_name = ibv_get_device_name(p->dev->verbs->device);
	ua.port_num = p->port_num;
	/* The node's CM service, when one serves this port (cepd(8),
	 * docs/rdmacm.md): the port is shared with every other process, as
	 * the kernel's CM shares it. Else (no service: ENOENT, ECONNREFUSED;
	 * CEP_SERVICE=none; not this port: ENODEV) the CM runs here. */
	{
		struct cep_cm_attach_attr aa = { .size = sizeof(aa), .device = ua.dev_name,
						 .port_num = p->port_num };

		ret = cep_cm_attach(&aa, &cm);
		if (!ret) {
			/* rcm_cep_handler only pushes to our channels: it runs
			 * on the thread that reads its event (the one waiting in
			 * rdma_get_cm_event), not on a callback thread */
			(void)cmr_callbacks_inline(cm);
			p->info = *cm_port(cm);
			p->attached = 1; /* published with cm (release) */
			atomic_store_explicit(&p->cm, cm, memory_order_release);
			*out = cm;
			goto out;
		}
		if (ret != -ENOENT && ret != -ECONNREFUSED && ret != -ENODEV)
			fprintf(stderr, "librdmacm (libcep): %s port %u: the CM service did not "
				"take this process (%s): running the CM in the process\n",
				ua.dev_name, p->port_num, strerror(-ret));
	}
	ret = cep_umad_open(&ua, &t);
	if (ret) {
		say_busy(p, ret);
		goto out;
	}
	ret = t->ops->query_port(t, &p->info);
	if (ret)
		goto fail;
	ca.transport = t;
	ca.workers = env_unsigned("CEP_RDMACM_WORKERS", 0);
	ca.table_size = env_unsigned("CEP_RDMACM_TABLE_SIZE", 0);
	ca.mra_service_timeout = RCM_MRA_TIMEOUT;
	ca.auto_mra = 1;
	ret = cep_cm_create(&ca, &cm);
	if (ret)
		goto fail;
	p->t = t;
	/* An id's last events (QP_DESTROYED, which this layer ignores, and
	 * DESTROYED, which only drops its reference: rdma_destroy_id never
	 * waits for it) may come late: no worker wake-up each (a context
	 * switch there and back per QP and per id on a one-CPU guest). */
	cm->lazy_ms = RCM_LAZY_MS;
	/* Release: the CM and p->info are complete before anyone sees cm. */
	atomic_store_explicit(&p->cm, cm, memory_order_release);
	*out = cm;
	goto out;
fail:
	t->ops->destroy(t);
out:
	p->open_err = ret;
	if (!ret)
		stats_on_signal();
	pthread_mutex_unlock(&rcm.lock);
	return ret;
}

void rcm_port_info(const struct rcm_id *r, struct cep_port_info *out)
{
	const struct rcm_port *p = r->port;

	*out = p->info;
	out->gid_index = r->sgid_index;
	memcpy(out->gid, r->id.route.addr.addr.ibaddr.sgid.raw, 16);
}

/* "; REJ <dir> reason R (name) xN" for each reason counted in @n. */
static void print_rejs(const char *dir, const uint64_t n[CEP_REJ_REASON_MAX + 1])
{
	for (unsigned r = 0; r <= CEP_REJ_REASON_MAX; r++)
		if (n[r])
			fprintf(stderr, "; REJ %s reason %u (%s) x%" PRIu64, dir, r,
				cep_rej_reason_name(r), n[r]);
}

/* "; dispatch ...; lead ...": who ran the MADs and why sleeping threads
 * were woken (a CM of this process; a cepd client's has no workers). */
static void print_path_stats(struct cep_cm *cm)
{
	struct cep_dispatch_stats ds;
	struct cep_lead_stats ls;

	if (!cm->d)
		return;
	cep_dispatch_stats(cm->d, &ds);
	fprintf(stderr, "; dispatch mads %" PRIu64 " inline %" PRIu64 " works %" PRIu64
		" timers %" PRIu64 " sleeps %" PRIu64 " (timeouts %" PRIu64 ") kicks mad %" PRIu64
		" work %" PRIu64
		" lead %" PRIu64 "; early wake-ups timer %" PRIu64 " lazy %" PRIu64 " armed %" PRIu64,
		ds.mads, ds.inline_mads, ds.works, ds.timers, ds.sleeps, ds.timeouts, ds.kick_mad,
		ds.kick_work,
		ds.kick_lead, ds.early_timer, ds.lazy, ds.soon);
	if (!cm->lead)
		return;
	cep_lead_stats(cm->lead, &ls);
	fprintf(stderr, "; lead app leads %" PRIu64 " app drains %" PRIu64
		" backstop drains %" PRIu64 " kicks %" PRIu64 " handovers %" PRIu64
		" asides %" PRIu64, ls.app_leads, ls.app_drains, ls.backstop_drains, ls.kicks,
		ls.handovers, ls.asides);
}

/* CEP_RDMACM_STATS=1: the port CM's counters on stderr at exit (where a
 * run's time went: retries, duplicates, drops, umad errors). */
static void print_stats(struct rcm_port *p, struct cep_cm *cm)
{
	struct cep_cm_stats st = { .size = sizeof(st) };
	struct cep_umad_stats us;
	const char *name = ibv_get_device_name(p->dev->verbs->device);

	if (cep_cm_get_stats(cm, &st))
		return;
	fprintf(stderr, "librdmacm (libcep) %s/%u: MADs sent", name, p->port_num);
	for (int t = 0; t < CEP_MSG_COUNT; t++)
		if (st.sent[t])
			fprintf(stderr, " %s %" PRIu64, cep_msg_name((enum cep_msg_type)t), st.sent[t]);
	fprintf(stderr, "; received");
	for (int t = 0; t < CEP_MSG_COUNT; t++)
		if (st.received[t])
			fprintf(stderr, " %s %" PRIu64, cep_msg_name((enum cep_msg_type)t),
				st.received[t]);
	/* REJs by reason: what a test needs to tell a known race of the
	 * program (a REQ before its server's listen: 8, Invalid Service ID)
	 * from a fault. */
	print_rejs("sent", st.rej_sent);
	print_rejs("received", st.rej_received);
	fprintf(stderr, "; retries %" PRIu64 " timeouts %" PRIu64 " duplicates %" PRIu64
		" send errors %" PRIu64, st.retries, st.timeouts, st.duplicates, st.send_errors);
	for (int d = 0; d < CEP_CM_DROP_COUNT; d++)
		if (st.drops[d])
			fprintf(stderr, " drop %s %" PRIu64, cep_cm_drop_name((unsigned)d), st.drops[d]);
	if (p->t && cep_umad_get_stats(p->t, &us) == 0)
		fprintf(stderr, "; umad sent %" PRIu64 " send errors %" PRIu64 " received %" PRIu64
			" receive errors %" PRIu64, us.sent, us.send_errors, us.received,
			us.recv_errors);
	print_path_stats(cm);
	fprintf(stderr, "\n");
}

/*
 * CEP_RDMACM_STATS also prints the counters when the process gets SIGUSR1
 * (for servers that never exit by themselves, as cmtime's): installed
 * only with the variable set and only over SIG_DFL, so an application's
 * own handler is never replaced. The handler writes a byte to a pipe (all
 * it does: async-signal-safe); a thread of ours, blocked on the pipe,
 * prints every port's counters under stats_lock, which rcm_fini holds
 * while it destroys the CMs, so the printing never reads a freed CM.
 */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static int stats_pipe[2] = { -1, -1 };

static void print_all_stats(void)
{
	for (unsigned d = 0; d < rcm.ndevs; d++)
		for (unsigned i = 0; i < rcm.devs[d].nports; i++) {
			struct rcm_port *p = &rcm.devs[d].ports[i];
			struct cep_cm *cm = atomic_load_explicit(&p->cm, memory_order_acquire);

			if (cm)
				print_stats(p, cm);
		}
}

static void stats_signal(int sig)
{
	int saved = errno;
	char c = 1;

	(void)sig;
	(void)!write(stats_pipe[1], &c, 1);
	errno = saved;
}

static void *stats_thread(void *arg)
{
	char c;

	(void)arg;
	for (;;) {
		ssize_t n = read(stats_pipe[0], &c, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return NULL;
		pthread_mutex_lock(&stats_lock);
		print_all_stats();
		pthread_mutex_unlock(&stats_lock);
	}
}

/* Once, rcm.lock held, when the first CM of the process starts. */
static void stats_on_signal(void)
{
	struct sigaction old, sa = { .sa_handler = stats_signal, .sa_flags = SA_RESTART };
	sigset_t all, prev;
	pthread_t th;

	if (stats_pipe[0] >= 0 || !getenv("CEP_RDMACM_STATS") ||
	    sigaction(SIGUSR1, NULL, &old) || old.sa_handler != SIG_DFL ||
	    pipe2(stats_pipe, O_CLOEXEC | O_NONBLOCK))
		return;
	/* the reading end blocks; the handler's end never does */
	(void)fcntl(stats_pipe[0], F_SETFL, 0);
	sigfillset(&all);
	/* our thread takes no signal of the application's */
	pthread_sigmask(SIG_SETMASK, &all, &prev);
	if (pthread_create(&th, NULL, stats_thread, NULL) == 0) {
		pthread_detach(th);
		sigemptyset(&sa.sa_mask);
		(void)sigaction(SIGUSR1, &sa, NULL);
	}
	pthread_sigmask(SIG_SETMASK, &prev, NULL);
}

/*
 * At exit: stop every CM (transport thread and workers) before liburcu's
 * own destructor runs (it runs after ours: liburcu is loaded first), so no
 * libcep thread touches RCU state that is being torn down. Application
 * threads still blocked in rdma_get_cm_event stay blocked; exit ends them.
 */
__attribute__((destructor)) static void rcm_fini(void)
{
	pthread_mutex_lock(&stats_lock); /* not while the stats thread prints */
	for (unsigned d = 0; d < rcm.ndevs; d++) {
		for (unsigned i = 0; i < rcm.devs[d].nports; i++) {
			struct rcm_port *p = &rcm.devs[d].ports[i];
			struct cep_cm *cm = atomic_exchange(&p->cm, NULL);

			if (p->sa) {
				cep_sa_put(p->sa);
				p->sa = NULL;
			}
			if (!cm)
				continue;
			if (getenv("CEP_RDMACM_STATS"))
				print_stats(p, cm);
			cep_cm_destroy(cm);
			if (p->t) /* NULL: the CM was cepd's */
				p->t->ops->destroy(p->t);
		}
	}
	pthread_mutex_unlock(&stats_lock);
}
