/* SPDX-License-Identifier: MIT */
/*
 * libcep SA client: the SA MAD and record codecs (one row per row of the
 * spec's tables, read by one generic big-endian bit-field access), and the
 * client over a backend: requests (PathRecord and ClassPortInfo Gets,
 * MCMemberRecord Get, Set and Delete) wait on their own timeout and resend
 * (the transport's timeouts are never relied on: ibsim ignores them), one
 * receive thread matches answers by the low 32 bits of the TID (the kernel
 * and ibsim rewrite the upper half), and a path cache is flushed when the
 * port's SM LID, LID or state changes.
 *
 * Locking: sa->lock guards the waiter list, the cache, the ClassPortInfo
 * and the port snapshot; it is never held across a send, a backend port
 * read or a wait other than pthread_cond_timedwait on it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cep/sa.h>

#include "sa_backend.h"

/* ---- field tables ---- */

/*
 * Rows: U(member, byte, bit, width, mask) an unsigned big-endian field
 * (bit 0 = most significant bit of the byte), G(member, byte, mask) a
 * 128-bit GID. mask is the component mask bit of the row (0: none, the
 * row is always encoded).
 * Reserved rows are left out: encoders start from zeroes, decoders skip.
 */

/* 15.2.5.16, Table 205 (PathRecord), 64 bytes. */
#define SA_PATH_FIELDS(U, G) \
	U(service_id,                0, 0, 64, CEP_SA_PR_SERVICE_ID)   \
	G(dgid,                      8,        CEP_SA_PR_DGID)         \
	G(sgid,                     24,        CEP_SA_PR_SGID)         \
	U(dlid,                     40, 0, 16, CEP_SA_PR_DLID)         \
	U(slid,                     42, 0, 16, CEP_SA_PR_SLID)         \
	U(raw_traffic,              44, 0, 1,  CEP_SA_PR_RAW_TRAFFIC)  \
	U(flow_label,               44, 4, 20, CEP_SA_PR_FLOW_LABEL)   \
	U(hop_limit,                47, 0, 8,  CEP_SA_PR_HOP_LIMIT)    \
	U(traffic_class,            48, 0, 8,  CEP_SA_PR_TCLASS)       \
	U(reversible,               49, 0, 1,  CEP_SA_PR_REVERSIBLE)   \
	U(numb_path,                49, 1, 7,  CEP_SA_PR_NUMB_PATH)    \
	U(pkey,                     50, 0, 16, CEP_SA_PR_PKEY)         \
	U(qos_class,                52, 0, 12, CEP_SA_PR_QOS_CLASS)    \
	U(sl,                       53, 4, 4,  CEP_SA_PR_SL)           \
	U(mtu_selector,             54, 0, 2,  CEP_SA_PR_MTU_SELECTOR) \
	U(mtu,                      54, 2, 6,  CEP_SA_PR_MTU)          \
	U(rate_selector,            55, 0, 2,  CEP_SA_PR_RATE_SELECTOR)\
	U(rate,                     55, 2, 6,  CEP_SA_PR_RATE)         \
	U(packet_life_time_selector, 56, 0, 2, CEP_SA_PR_PLT_SELECTOR) \
	U(packet_life_time,         56, 2, 6,  CEP_SA_PR_PLT)          \
	U(preference,               57, 0, 8,  CEP_SA_PR_PREFERENCE)

/* 13.4.8.1, ClassPortInfo, 72 bytes (the rows a client reads). */
#define SA_CPI_FIELDS(U, G) \
	U(base_version,              0, 0, 8,  0) \
	U(class_version,             1, 0, 8,  0) \
	U(capability_mask,           2, 0, 16, 0) \
	U(capability_mask2,          4, 0, 27, 0) \
	U(resp_time_value,           7, 3, 5,  0) \
	G(redirect_gid,              8,        0) \
	U(redirect_lid,             28, 0, 16, 0) \
	U(redirect_pkey,            30, 0, 16, 0) \
	U(redirect_qp,              33, 0, 24, 0) \
	U(redirect_qkey,            36, 0, 32, 0)

/* 15.2.5.17, Table 207 (MCMemberRecord), 52 bytes. */
#define SA_MCM_FIELDS(U, G) \
	G(mgid,                      0,        CEP_SA_MCM_MGID)          \
	G(port_gid,                 16,        CEP_SA_MCM_PORT_GID)      \
	U(qkey,                     32, 0, 32, CEP_SA_MCM_QKEY)          \
	U(mlid,                     36, 0, 16, CEP_SA_MCM_MLID)          \
	U(mtu_selector,             38, 0, 2,  CEP_SA_MCM_MTU_SELECTOR)  \
	U(mtu,                      38, 2, 6,  CEP_SA_MCM_MTU)           \
	U(traffic_class,            39, 0, 8,  CEP_SA_MCM_TCLASS)        \
	U(pkey,                     40, 0, 16, CEP_SA_MCM_PKEY)          \
	U(rate_selector,            42, 0, 2,  CEP_SA_MCM_RATE_SELECTOR) \
	U(rate,                     42, 2, 6,  CEP_SA_MCM_RATE)          \
	U(packet_life_time_selector, 43, 0, 2, CEP_SA_MCM_PLT_SELECTOR)  \
	U(packet_life_time,         43, 2, 6,  CEP_SA_MCM_PLT)           \
	U(sl,                       44, 0, 4,  CEP_SA_MCM_SL)            \
	U(flow_label,               44, 4, 20, CEP_SA_MCM_FLOW_LABEL)    \
	U(hop_limit,                47, 0, 8,  CEP_SA_MCM_HOP_LIMIT)     \
	U(scope,                    48, 0, 4,  CEP_SA_MCM_SCOPE)         \
	U(join_state,               48, 4, 4,  CEP_SA_MCM_JOIN_STATE)    \
	U(proxy_join,               49, 0, 1,  CEP_SA_MCM_PROXY_JOIN)

/* 13.4.2 (common MAD header), 13.6.2.1 (RMPP header, left zero: no RMPP
 * here), 15.2.1.1 (SA header): 56 bytes before the data. */
#define SA_HDR_FIELDS(U, G) \
	U(base_version,              0, 0, 8,  0) \
	U(mgmt_class,                1, 0, 8,  0) \
	U(class_version,             2, 0, 8,  0) \
	U(method,                    3, 0, 8,  0) \
	U(status,                    4, 0, 16, 0) \
	U(tid,                       8, 0, 64, 0) \
	U(attr_id,                  16, 0, 16, 0) \
	U(attr_mod,                 20, 0, 32, 0) \
	U(sm_key,                   36, 0, 64, 0) \
	U(attr_offset,              44, 0, 16, 0) \
	U(comp_mask,                48, 0, 64, 0)

/* Every row fits its record, starts inside its byte and fits its member. */
#define SA_ROW_U(T, SZ, m, byte, bit, width, mask)                                \
	_Static_assert((byte) * 8 + (bit) + (width) <= (SZ) * 8, #m " outside");  \
	_Static_assert((bit) < 8, #m " bit offset");                              \
	_Static_assert((width) <= 8 * sizeof(((T *)0)->m), #m " too narrow");
#define SA_ROW_G(T, SZ, m, byte, mask)                                            \
	_Static_assert((byte) + 16 <= (SZ), #m " outside");                       \
	_Static_assert(sizeof(((T *)0)->m) == 16, #m " not a GID");
#define PATH_U(m, byte, bit, width, mask) SA_ROW_U(struct cep_sa_path, CEP_SA_PATH_REC_SIZE, m, byte, bit, width, mask)
#define PATH_G(m, byte, mask) SA_ROW_G(struct cep_sa_path, CEP_SA_PATH_REC_SIZE, m, byte, mask)
#define CPI_U(m, byte, bit, width, mask) SA_ROW_U(struct cep_sa_class_port_info, CEP_SA_CPI_SIZE, m, byte, bit, width, mask)
#define CPI_G(m, byte, mask) SA_ROW_G(struct cep_sa_class_port_info, CEP_SA_CPI_SIZE, m, byte, mask)
#define MCM_U(m, byte, bit, width, mask) SA_ROW_U(struct cep_sa_mcmember, CEP_SA_MCM_REC_SIZE, m, byte, bit, width, mask)
#define MCM_G(m, byte, mask) SA_ROW_G(struct cep_sa_mcmember, CEP_SA_MCM_REC_SIZE, m, byte, mask)
#define HDR_U(m, byte, bit, width, mask) SA_ROW_U(struct cep_sa_mad_hdr, CEP_SA_HDR_SIZE, m, byte, bit, width, mask)
#define HDR_G(m, byte, mask) SA_ROW_G(struct cep_sa_mad_hdr, CEP_SA_HDR_SIZE, m, byte, mask)
SA_PATH_FIELDS(PATH_U, PATH_G)
SA_CPI_FIELDS(CPI_U, CPI_G)
SA_MCM_FIELDS(MCM_U, MCM_G)
SA_HDR_FIELDS(HDR_U, HDR_G)
_Static_assert(CEP_SA_HDR_SIZE + CEP_SA_DATA_SIZE == CEP_SA_MAD_SIZE, "MAD size");

static uint64_t bits_get(const uint8_t *b, unsigned byte, unsigned bit,
			 unsigned width)
{
	unsigned pos = byte * 8 + bit;
	uint64_t v = 0;

	for (unsigned i = 0; i < width; i++, pos++)
		v = v << 1 | ((b[pos / 8] >> (7 - pos % 8)) & 1u);
	return v;
}

static void bits_set(uint8_t *b, unsigned byte, unsigned bit, unsigned width,
		     uint64_t v)
{
	unsigned pos = byte * 8 + bit + width;

	for (unsigned i = 0; i < width; i++, v >>= 1) {
		pos--;
		uint8_t m = (uint8_t)(1u << (7 - pos % 8));

		b[pos / 8] = (uint8_t)((b[pos / 8] & ~m) | ((v & 1u) ? m : 0));
	}
}

static bool fits(uint64_t v, unsigned width)
{
	return width >= 64 || v >> width == 0;
}

/* Encode the rows of @p whose mask bit is in @mask into a zeroed @rec
 * (the cache key when @mask is a query's); -EINVAL on a value too wide. */
static int path_encode_masked(const struct cep_sa_path *p, uint64_t mask,
			      uint8_t *rec)
{
	memset(rec, 0, CEP_SA_PATH_REC_SIZE);
#define ENC_U(m, byte, bit, width, mb)                                  \
	if ((mb) == 0 || ((mb) & mask)) {                                           \
		if (!fits(p->m, width))                                 \
			return -EINVAL;                                 \
		bits_set(rec, byte, bit, width, p->m);                  \
	}
#define ENC_G(m, byte, mb) \
	if ((mb) == 0 || ((mb) & mask)) \
		memcpy(rec + (byte), p->m, 16);
	SA_PATH_FIELDS(ENC_U, ENC_G)
	return 0;
}

/* The same for an MCMemberRecord: the rows @mask names. */
static int mcm_encode_masked(const struct cep_sa_mcmember *p, uint64_t mask,
			     uint8_t *rec)
{
	memset(rec, 0, CEP_SA_MCM_REC_SIZE);
	SA_MCM_FIELDS(ENC_U, ENC_G)
	return 0;
}

CEP_EXPORT int cep_sa_path_encode(const struct cep_sa_path *p,
				  uint8_t rec[CEP_SA_PATH_REC_SIZE])
{
	if (!p || !rec)
		return -EINVAL;
	return path_encode_masked(p, ~UINT64_C(0), rec);
}

#define DEC_U(m, byte, bit, width, mb) \
	out->m = (__typeof__(out->m))bits_get(rec, byte, bit, width);
#define DEC_G(m, byte, mb) memcpy(out->m, rec + (byte), 16);

CEP_EXPORT void cep_sa_path_decode(const uint8_t rec[CEP_SA_PATH_REC_SIZE],
				   struct cep_sa_path *out)
{
	memset(out, 0, sizeof(*out));
	SA_PATH_FIELDS(DEC_U, DEC_G)
}

CEP_EXPORT void cep_sa_cpi_decode(const uint8_t rec[CEP_SA_CPI_SIZE],
				  struct cep_sa_class_port_info *out)
{
	memset(out, 0, sizeof(*out));
	SA_CPI_FIELDS(DEC_U, DEC_G)
}

CEP_EXPORT int cep_sa_mcmember_encode(const struct cep_sa_mcmember *m,
				      uint8_t rec[CEP_SA_MCM_REC_SIZE])
{
	if (!m || !rec)
		return -EINVAL;
	return mcm_encode_masked(m, ~UINT64_C(0), rec);
}

CEP_EXPORT void cep_sa_mcmember_decode(const uint8_t rec[CEP_SA_MCM_REC_SIZE],
				       struct cep_sa_mcmember *out)
{
	memset(out, 0, sizeof(*out));
	SA_MCM_FIELDS(DEC_U, DEC_G)
}

CEP_EXPORT int cep_sa_mad_encode(uint8_t mad[CEP_SA_MAD_SIZE],
				 const struct cep_sa_mad_hdr *h,
				 const void *data, size_t data_len)
{
	const struct cep_sa_mad_hdr *p = h;
	uint8_t *rec = mad;
	uint64_t mask = ~UINT64_C(0);

	if (!mad || !h || data_len > CEP_SA_DATA_SIZE || (data_len && !data))
		return -EINVAL;
	memset(mad, 0, CEP_SA_MAD_SIZE);
	SA_HDR_FIELDS(ENC_U, ENC_G)
	if (data_len)
		memcpy(mad + CEP_SA_HDR_SIZE, data, data_len);
	return 0;
}

CEP_EXPORT int cep_sa_mad_decode(const uint8_t *mad, size_t len,
				 struct cep_sa_mad_hdr *out)
{
	const uint8_t *rec = mad;

	if (!mad || !out || len < CEP_SA_HDR_SIZE)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	SA_HDR_FIELDS(DEC_U, DEC_G)
	if (out->base_version != 1 || out->mgmt_class != CEP_SA_MGMT_CLASS ||
	    out->class_version != CEP_SA_CLASS_VERSION)
		return -EPROTO;
	return 0;
}

CEP_EXPORT int cep_sa_path_to_conn(const struct cep_sa_path *rec,
				   struct cep_cm_conn_param *p)
{
	struct cep_path *pp;

	if (!rec || !p || rec->mtu == 0 || rec->mtu > 5)
		return -EINVAL;
	pp = &p->primary;
	memset(pp, 0, sizeof(*pp));
	pp->local_lid = rec->slid;
	pp->remote_lid = rec->dlid;
	memcpy(pp->local_gid, rec->sgid, 16);
	memcpy(pp->remote_gid, rec->dgid, 16);
	pp->flow_label = rec->flow_label;
	pp->packet_rate = rec->rate;
	pp->traffic_class = rec->traffic_class;
	pp->hop_limit = rec->hop_limit;
	pp->sl = rec->sl;
	pp->subnet_local = rec->hop_limit <= 1;
	p->pkey = rec->pkey;
	p->path_mtu = rec->mtu;
	/* The REQ carries 5 bits; a longer life is clamped, not wrapped. */
	p->packet_life_time = rec->packet_life_time > 31 ? 31 : rec->packet_life_time;
	return 0;
}

/* ---- the client ---- */

#define SA_DEFAULT_TIMEOUT_MS   1000u
#define SA_DEFAULT_ATTEMPTS     4u
#define SA_DEFAULT_TTL_MS       300000u
#define SA_DEFAULT_PORT_CHECK_MS 1000u
#define SA_RECV_STEP_MS         100
#define SA_CACHE_BUCKETS        256u
#define SA_CACHE_MAX            4096u
#define PORT_ACTIVE             4

/* MAD status (13.4.7): common bits, then the SA's class-specific codes
 * in bits 8-14 (15.2.1.1, Table 182). */
#define MAD_STATUS_BUSY         0x0001u
#define SA_STATUS_CODE(s)       (((s) >> 8) & 0x7fu)

struct sa_cache_entry {
	struct sa_cache_entry *next;
	uint64_t mask;
	uint8_t key[CEP_SA_PATH_REC_SIZE];
	struct cep_sa_path path;
	uint64_t expires_ns;
};

/* A query waiting for its answer; lives on the querying thread's stack,
 * linked in sa->waiters while it waits. */
struct sa_waiter {
	struct sa_waiter *next, *prev;
	uint32_t tid32;
	uint16_t attr_id;
	uint8_t resp;                    /* the answer's method */
	bool done;
	pthread_cond_t cond;
	uint8_t mad[CEP_SA_MAD_SIZE];
};

struct cep_sa {
	const struct sa_backend_ops *ops;
	void *ctx;
	uint32_t timeout_ms, attempts, port_check_ms, flags;
	uint64_t ttl_ns;

	_Atomic unsigned refs;
	const struct sa_registry *reg;   /* NULL: not shared */
	_Atomic uint32_t next_tid;

	pthread_t thread;
	_Atomic bool stop;

	pthread_mutex_t lock;
	struct sa_waiter waiters;        /* list head */
	struct sa_cache_entry *buckets[SA_CACHE_BUCKETS];
	unsigned entries;
	struct cep_sa_port port;
	uint64_t port_read_ns;
	bool cpi_valid;
	struct cep_sa_class_port_info cpi;

	_Atomic uint64_t queries, cache_hits, cache_misses, sent, send_errors,
		retries, timeouts, answers, errors, dropped, invalidations;
};

static void count(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Under sa->lock. */
static void cache_flush_locked(struct cep_sa *sa)
{
	for (unsigned b = 0; b < SA_CACHE_BUCKETS; b++) {
		struct sa_cache_entry *e = sa->buckets[b];

		while (e) {
			struct sa_cache_entry *n = e->next;

			free(e);
			e = n;
		}
		sa->buckets[b] = NULL;
	}
	sa->entries = 0;
	sa->cpi_valid = false;
}

static unsigned cache_bucket(uint64_t mask, const uint8_t *key)
{
	uint64_t h = 14695981039346656037ull;   /* FNV-1a */

	for (unsigned i = 0; i < 8; i++, mask >>= 8)
		h = (h ^ (mask & 0xff)) * 1099511628211ull;
	for (unsigned i = 0; i < CEP_SA_PATH_REC_SIZE; i++)
		h = (h ^ key[i]) * 1099511628211ull;
	return (unsigned)(h % SA_CACHE_BUCKETS);
}

/* Under sa->lock: the live entry for (mask, key), expired ones unlinked. */
static struct sa_cache_entry *cache_find_locked(struct cep_sa *sa, uint64_t mask,
						const uint8_t *key, uint64_t now)
{
	struct sa_cache_entry **pp = &sa->buckets[cache_bucket(mask, key)];

	while (*pp) {
		struct sa_cache_entry *e = *pp;

		if (e->expires_ns <= now) {
			*pp = e->next;
			free(e);
			sa->entries--;
			continue;
		}
		if (e->mask == mask && memcmp(e->key, key, sizeof(e->key)) == 0)
			return e;
		pp = &e->next;
	}
	return NULL;
}

static void cache_store(struct cep_sa *sa, uint64_t mask, const uint8_t *key,
			const struct cep_sa_path *path)
{
	uint64_t now = now_ns();
	struct sa_cache_entry *e;

	if (sa->flags & CEP_SA_ATTR_NO_CACHE)
		return;
	pthread_mutex_lock(&sa->lock);
	e = cache_find_locked(sa, mask, key, now);
	if (!e) {
		if (sa->entries >= SA_CACHE_MAX)
			cache_flush_locked(sa);   /* bounded memory, simply */
		e = calloc(1, sizeof(*e));
		if (e) {
			unsigned b = cache_bucket(mask, key);

			e->mask = mask;
			memcpy(e->key, key, sizeof(e->key));
			e->next = sa->buckets[b];
			sa->buckets[b] = e;
			sa->entries++;
		}
	}
	if (e) {
		e->path = *path;
		e->expires_ns = now + sa->ttl_ns;
	}
	pthread_mutex_unlock(&sa->lock);
}

/*
 * The port snapshot, re-read if older than port_check_ms or @force. A
 * change of SM LID, LID or state flushes the cache: paths from another SM,
 * or to a port that went down and came back, may no longer hold.
 */
static int port_current(struct cep_sa *sa, bool force, struct cep_sa_port *out)
{
	struct cep_sa_port p;
	uint64_t now = now_ns();
	int ret;

	pthread_mutex_lock(&sa->lock);
	if (!force && sa->port_read_ns &&
	    now - sa->port_read_ns < (uint64_t)sa->port_check_ms * 1000000u) {
		*out = sa->port;
		pthread_mutex_unlock(&sa->lock);
		return 0;
	}
	pthread_mutex_unlock(&sa->lock);

	ret = sa->ops->port(sa->ctx, &p);
	if (ret)
		return ret;
	pthread_mutex_lock(&sa->lock);
	if (sa->port_read_ns &&
	    (p.sm_lid != sa->port.sm_lid || p.lid != sa->port.lid ||
	     p.state != sa->port.state)) {
		cache_flush_locked(sa);
		count(&sa->invalidations);
	}
	sa->port = p;
	sa->port_read_ns = now ? now : 1;
	*out = p;
	pthread_mutex_unlock(&sa->lock);
	return 0;
}

static int status_errno(uint16_t status)
{
	if (status & MAD_STATUS_BUSY)
		return -EBUSY;
	switch (SA_STATUS_CODE(status)) {
	case 1: return -EAGAIN;         /* ERR_NO_RESOURCES */
	case 2: return -EINVAL;         /* ERR_REQ_INVALID */
	case 3: return -EHOSTUNREACH;   /* ERR_NO_RECORDS */
	case 4: return -EPROTO;         /* ERR_TOO_MANY_RECORDS (one wanted) */
	case 5: return -EINVAL;         /* ERR_REQ_INVALID_GID */
	case 6: return -EINVAL;         /* ERR_REQ_INSUFFICIENT_COMPONENTS */
	default: break;
	}
	/* Common codes: bad version, method or attribute unsupported, invalid
	 * attribute value (13.4.7, Table 111). */
	if ((status & 0x1c) != 0)
		return (status & 0x1c) == 0x1c ? -EINVAL : -EOPNOTSUPP;
	return -EPROTO;
}

static void waiter_link(struct cep_sa *sa, struct sa_waiter *w)
{
	w->next = sa->waiters.next;
	w->prev = &sa->waiters;
	sa->waiters.next->prev = w;
	sa->waiters.next = w;
}

static void waiter_unlink(struct sa_waiter *w)
{
	w->prev->next = w->next;
	w->next->prev = w->prev;
}

static void deadline_ts(uint64_t ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ns / 1000000000u);
	ts->tv_nsec = (long)(ns % 1000000000u);
}

/*
 * One request (@method Get, Set or Delete of @attr_id) and its answer
 * (GetResp, or DeleteResp for a Delete): resend, with the same TID, every
 * timeout_ms, at most attempts sends; a BUSY answer waits for the next
 * send. On success the answer's data (one record) goes to @data
 * (CEP_SA_DATA_SIZE bytes).
 */
static int sa_request(struct cep_sa *sa, uint8_t method, uint16_t attr_id,
		      uint64_t comp_mask, const uint8_t *rec, size_t rec_len,
		      uint8_t *data)
{
	struct cep_sa_mad_hdr h = {
		.base_version = 1, .mgmt_class = CEP_SA_MGMT_CLASS,
		.class_version = CEP_SA_CLASS_VERSION,
		.method = method, .attr_id = attr_id,
		.comp_mask = comp_mask,
	};
	struct cep_sa_port port;
	struct sa_waiter w;
	pthread_condattr_t ca;
	uint8_t mad[CEP_SA_MAD_SIZE];
	int ret, last = -ETIMEDOUT;

	ret = port_current(sa, false, &port);
	if (ret)
		return ret;
	if (port.state != PORT_ACTIVE || port.sm_lid == 0)
		return -ENETDOWN;

	memset(&w, 0, sizeof(w));
	w.tid32 = atomic_fetch_add_explicit(&sa->next_tid, 1, memory_order_relaxed);
	w.attr_id = attr_id;
	w.resp = method == CEP_SA_METHOD_DELETE ? CEP_SA_METHOD_DELETE_RESP
						: CEP_SA_METHOD_GET_RESP;
	h.tid = w.tid32;
	ret = cep_sa_mad_encode(mad, &h, rec, rec_len);
	if (ret)
		return ret;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w.cond, &ca);
	pthread_condattr_destroy(&ca);

	pthread_mutex_lock(&sa->lock);
	waiter_link(sa, &w);
	pthread_mutex_unlock(&sa->lock);

	ret = -ETIMEDOUT;
	for (uint32_t a = 0; a < sa->attempts; a++) {
		struct timespec ts;
		int err;

		if (a)
			count(&sa->retries);
		err = sa->ops->send(sa->ctx, mad, sizeof(mad), port.sm_lid, port.sm_sl);
		if (err) {
			count(&sa->send_errors);
			ret = err;
			break;
		}
		count(&sa->sent);
		deadline_ts(now_ns() + (uint64_t)sa->timeout_ms * 1000000u, &ts);
		pthread_mutex_lock(&sa->lock);
		for (;;) {
			while (!w.done) {
				if (pthread_cond_timedwait(&w.cond, &sa->lock, &ts) == ETIMEDOUT)
					break;
			}
			if (!w.done)
				break;
			struct cep_sa_mad_hdr r;

			(void)cep_sa_mad_decode(w.mad, sizeof(w.mad), &r);
			if (r.status & MAD_STATUS_BUSY) {
				/* Ask again at the next attempt. */
				last = -EBUSY;
				w.done = false;
				continue;
			}
			ret = r.status ? status_errno(r.status) : 0;
			if (!ret)
				memcpy(data, w.mad + CEP_SA_HDR_SIZE, CEP_SA_DATA_SIZE);
			break;
		}
		pthread_mutex_unlock(&sa->lock);
		if (ret != -ETIMEDOUT)
			break;
	}
	if (ret == -ETIMEDOUT && last == -EBUSY)
		ret = -EBUSY;   /* answered, but only ever BUSY */
	pthread_mutex_lock(&sa->lock);
	waiter_unlink(&w);
	pthread_mutex_unlock(&sa->lock);
	pthread_cond_destroy(&w.cond);

	if (ret == -ETIMEDOUT) {
		count(&sa->timeouts);
		/* The SM may have moved: look again, so the next query goes
		 * to the new one (and the cache is flushed). */
		(void)port_current(sa, true, &port);
	}
	return ret;
}

/* Receive thread: match GetResp and DeleteResp MADs to waiters by the
 * TID's low half, the attribute and the method the request expects. */
static void dispatch(struct cep_sa *sa, const uint8_t *mad, size_t len)
{
	struct cep_sa_mad_hdr h;
	struct sa_waiter *w;
	bool matched = false;

	if (len < CEP_SA_HDR_SIZE || cep_sa_mad_decode(mad, len, &h) != 0 ||
	    (h.method != CEP_SA_METHOD_GET_RESP && h.method != CEP_SA_METHOD_DELETE_RESP)) {
		count(&sa->dropped);
		return;
	}
	pthread_mutex_lock(&sa->lock);
	for (w = sa->waiters.next; w != &sa->waiters; w = w->next) {
		if (w->tid32 == (uint32_t)h.tid && w->attr_id == h.attr_id &&
		    w->resp == h.method) {
			if (!w->done) {
				memset(w->mad, 0, sizeof(w->mad));
				memcpy(w->mad, mad, len < sizeof(w->mad) ? len : sizeof(w->mad));
				/* Counted before the waiter can see it, so a
				 * caller's stats include its own answer. */
				count(&sa->answers);
				if (h.status & ~MAD_STATUS_BUSY)
					count(&sa->errors);
				w->done = true;
				pthread_cond_signal(&w->cond);
				matched = true;
			}
			break;
		}
	}
	pthread_mutex_unlock(&sa->lock);
	if (!matched)
		count(&sa->dropped);
}

static void *recv_thread(void *arg)
{
	struct cep_sa *sa = arg;
	uint8_t mad[CEP_SA_MAD_SIZE];

	while (!atomic_load_explicit(&sa->stop, memory_order_acquire)) {
		int n = sa->ops->recv(sa->ctx, mad, sizeof(mad), SA_RECV_STEP_MS);

		if (n > 0)
			dispatch(sa, mad, (size_t)n);
		else if (n < 0)
			usleep(10000);  /* a sick descriptor must not spin */
	}
	return NULL;
}

int sa_create(const struct sa_backend_ops *ops, void *ctx,
			  const struct cep_sa_attr *attr, struct cep_sa **out)
{
	struct cep_sa_attr a;
	struct cep_sa_port port;
	struct cep_sa *sa;
	struct timespec ts;
	int ret;

	if (!ops || !attr || !out || attr->size < offsetof(struct cep_sa_attr, timeout_ms))
		return -EINVAL;
	memset(&a, 0, sizeof(a));
	memcpy(&a, attr, attr->size < sizeof(a) ? attr->size : sizeof(a));
	sa = calloc(1, sizeof(*sa));
	if (!sa)
		return -ENOMEM;
	sa->ops = ops;
	sa->ctx = ctx;
	sa->timeout_ms = a.timeout_ms ? a.timeout_ms : SA_DEFAULT_TIMEOUT_MS;
	sa->attempts = a.attempts ? a.attempts : SA_DEFAULT_ATTEMPTS;
	sa->ttl_ns = (uint64_t)(a.cache_ttl_ms ? a.cache_ttl_ms : SA_DEFAULT_TTL_MS) * 1000000u;
	sa->port_check_ms = a.port_check_ms ? a.port_check_ms : SA_DEFAULT_PORT_CHECK_MS;
	sa->flags = a.flags;
	atomic_init(&sa->refs, 1);
	/* TIDs need not be secret, only distinct from a previous run's late
	 * answers: start from the clock. */
	clock_gettime(CLOCK_REALTIME, &ts);
	atomic_init(&sa->next_tid, (uint32_t)(ts.tv_nsec ^ ts.tv_sec ^ getpid()) | 1u);
	pthread_mutex_init(&sa->lock, NULL);
	sa->waiters.next = sa->waiters.prev = &sa->waiters;

	ret = port_current(sa, true, &port);
	if (ret == 0)
		ret = -pthread_create(&sa->thread, NULL, recv_thread, sa);
	if (ret) {
		pthread_mutex_destroy(&sa->lock);
		free(sa);
		return ret;
	}
	*out = sa;
	return 0;
}

void sa_set_registry(struct cep_sa *sa, const struct sa_registry *reg)
{
	sa->reg = reg;
}

void sa_ref(struct cep_sa *sa)
{
	atomic_fetch_add_explicit(&sa->refs, 1, memory_order_relaxed);
}

CEP_EXPORT void cep_sa_put(struct cep_sa *sa)
{
	bool last;

	if (!sa)
		return;
	if (sa->reg) {
		/* Under the registry lock, so a cep_sa_get cannot find and
		 * take a reference on a client whose last one is going. */
		pthread_mutex_lock(sa->reg->lock);
		last = atomic_fetch_sub_explicit(&sa->refs, 1, memory_order_acq_rel) == 1;
		if (last)
			sa->reg->unlink(sa);
		pthread_mutex_unlock(sa->reg->lock);
	} else {
		last = atomic_fetch_sub_explicit(&sa->refs, 1, memory_order_acq_rel) == 1;
	}
	if (!last)
		return;
	atomic_store_explicit(&sa->stop, true, memory_order_release);
	pthread_join(sa->thread, NULL);
	if (sa->ops->close)
		sa->ops->close(sa->ctx);
	cache_flush_locked(sa);
	pthread_mutex_destroy(&sa->lock);
	free(sa);
}

CEP_EXPORT int cep_sa_path_query(struct cep_sa *sa, uint64_t comp_mask,
				 const struct cep_sa_path *query,
				 uint32_t flags, struct cep_sa_path *out)
{
	uint8_t key[CEP_SA_PATH_REC_SIZE], data[CEP_SA_DATA_SIZE];
	struct cep_sa_port port;
	int ret;

	if (!sa || !query || !out || (comp_mask & ~((UINT64_C(1) << 23) - 1)) ||
	    (flags & ~CEP_SA_QUERY_FRESH))
		return -EINVAL;
	ret = path_encode_masked(query, comp_mask, key);
	if (ret)
		return ret;
	count(&sa->queries);
	/* A port change must flush before the lookup, not after it. */
	ret = port_current(sa, false, &port);
	if (ret)
		return ret;
	if (!(flags & CEP_SA_QUERY_FRESH) && !(sa->flags & CEP_SA_ATTR_NO_CACHE)) {
		struct sa_cache_entry *e;

		pthread_mutex_lock(&sa->lock);
		e = cache_find_locked(sa, comp_mask, key, now_ns());
		if (e)
			*out = e->path;
		pthread_mutex_unlock(&sa->lock);
		if (e) {
			count(&sa->cache_hits);
			return 0;
		}
	}
	count(&sa->cache_misses);
	ret = sa_request(sa, CEP_SA_METHOD_GET, CEP_SA_ATTR_PATH_REC, comp_mask, key,
			 sizeof(key), data);
	if (ret)
		return ret;
	cep_sa_path_decode(data, out);
	cache_store(sa, comp_mask, key, out);
	return 0;
}

CEP_EXPORT int cep_sa_class_port_info(struct cep_sa *sa,
				      struct cep_sa_class_port_info *out)
{
	uint8_t data[CEP_SA_DATA_SIZE];
	struct cep_sa_port port;
	bool hit;
	int ret;

	if (!sa || !out)
		return -EINVAL;
	count(&sa->queries);
	ret = port_current(sa, false, &port);
	if (ret)
		return ret;
	pthread_mutex_lock(&sa->lock);
	hit = sa->cpi_valid;
	if (hit)
		*out = sa->cpi;
	pthread_mutex_unlock(&sa->lock);
	if (hit) {
		count(&sa->cache_hits);
		return 0;
	}
	count(&sa->cache_misses);
	ret = sa_request(sa, CEP_SA_METHOD_GET, CEP_SA_ATTR_CLASS_PORT_INFO, 0, NULL, 0,
			 data);
	if (ret)
		return ret;
	cep_sa_cpi_decode(data, out);
	pthread_mutex_lock(&sa->lock);
	sa->cpi = *out;
	sa->cpi_valid = true;
	pthread_mutex_unlock(&sa->lock);
	return 0;
}

CEP_EXPORT int cep_sa_mcmember(struct cep_sa *sa, uint8_t method, uint64_t comp_mask,
			       const struct cep_sa_mcmember *rec,
			       struct cep_sa_mcmember *out)
{
	uint8_t key[CEP_SA_MCM_REC_SIZE], data[CEP_SA_DATA_SIZE];
	int ret;

	if (!sa || !rec || (comp_mask & ~((UINT64_C(1) << 18) - 1)) ||
	    (method != CEP_SA_METHOD_GET && method != CEP_SA_METHOD_SET &&
	     method != CEP_SA_METHOD_DELETE))
		return -EINVAL;
	ret = mcm_encode_masked(rec, comp_mask, key);
	if (ret)
		return ret;
	count(&sa->queries);
	ret = sa_request(sa, method, CEP_SA_ATTR_MCMEMBER_REC, comp_mask, key,
			 sizeof(key), data);
	if (ret == 0 && out)
		cep_sa_mcmember_decode(data, out);
	return ret;
}

CEP_EXPORT int cep_sa_port_info(struct cep_sa *sa, struct cep_sa_port *out)
{
	if (!sa || !out)
		return -EINVAL;
	return port_current(sa, true, out);
}

CEP_EXPORT void cep_sa_invalidate(struct cep_sa *sa)
{
	if (!sa)
		return;
	pthread_mutex_lock(&sa->lock);
	cache_flush_locked(sa);
	pthread_mutex_unlock(&sa->lock);
	count(&sa->invalidations);
}

CEP_EXPORT int cep_sa_get_stats(struct cep_sa *sa, struct cep_sa_stats *out)
{
	if (!sa || !out)
		return -EINVAL;
#define LOAD(f) out->f = atomic_load_explicit(&sa->f, memory_order_relaxed)
	LOAD(queries);
	LOAD(cache_hits);
	LOAD(cache_misses);
	LOAD(sent);
	LOAD(send_errors);
	LOAD(retries);
	LOAD(timeouts);
	LOAD(answers);
	LOAD(errors);
	LOAD(dropped);
	LOAD(invalidations);
#undef LOAD
	pthread_mutex_lock(&sa->lock);
	out->cache_entries = sa->entries;
	pthread_mutex_unlock(&sa->lock);
	return 0;
}
