/* SPDX-License-Identifier: MIT */
/*
 * libcep capture: frames CM MADs as RoCEv2 or native-IB packets and writes
 * them to classic pcap files; the process-wide capture behind CEP_PCAP.
 * Guarantees: every record is complete when a write returns (flushed);
 * writers to one file are serialised by its mutex; capture off costs the
 * CM one relaxed load (src/wire/pcap.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cep/wire.h>

#include "pcap.h"

#define ETH_HDR 14
#define IP6_HDR 40
#define IP4_HDR 20
#define UDP_HDR 8
#define BTH_HDR 12
#define DETH_HDR 8
#define ICRC_LEN 4
#define LRH_HDR 8
#define GRH_HDR 40
#define VCRC_LEN 2
#define ROCEV2_PORT 4791
#define BTH_OP_UD_SEND_ONLY 0x64
#define GRH_NEXT_HDR_IBA 0x1b

struct cep_pcap {
	FILE *f;
	enum cep_pcap_link link;
	pthread_mutex_t lock;         /* serialises records */
	_Atomic uint64_t count;       /* read without the lock by cep_pcap_count */
};

/* ---- checksums ------------------------------------------------------------- */

uint32_t cep_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	while (n--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
	}
	return ~crc;
}

/* IB VCRC: CRC-16, polynomial 0x100b, seed 0xffff, complemented. */
static uint16_t vcrc16(const uint8_t *p, size_t n)
{
	uint16_t crc = 0xffff;

	while (n--) {
		crc ^= (uint16_t)(*p++ << 8);
		for (int k = 0; k < 8; k++)
			crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x100b : crc << 1);
	}
	return (uint16_t)~crc;
}

static uint32_t sum16(uint32_t s, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		s += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (n & 1)
		s += (uint32_t)(p[n - 1] << 8);
	return s;
}

static uint16_t fold16(uint32_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* ---- framing --------------------------------------------------------------- */

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put24(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 16); put16(p + 1, v); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v >> 16); put16(p + 2, v); }

static int gid_is_v4mapped(const uint8_t *g)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(g, pfx, sizeof(pfx)) == 0;
}

/* MAC of a GID: the EUI-64 of a link-local GID, else a locally
 * administered address made from the GID's last five bytes. */
static void gid_to_mac(const uint8_t *g, uint8_t *mac)
{
	if (g[11] == 0xff && g[12] == 0xfe && !gid_is_v4mapped(g)) {
		mac[0] = g[8] ^ 0x02; mac[1] = g[9]; mac[2] = g[10];
		mac[3] = g[13]; mac[4] = g[14]; mac[5] = g[15];
	} else {
		mac[0] = 0x02;
		memcpy(mac + 1, g + 11, 5);
	}
}

/* BTH + DETH for a UD SEND only to QP @meta->dst_qpn, @pad bytes of pad. */
static void put_bth_deth(uint8_t *p, const struct cep_pcap_meta *m, size_t pad)
{
	memset(p, 0, BTH_HDR + DETH_HDR);
	p[0] = BTH_OP_UD_SEND_ONLY;
	p[1] = (uint8_t)(pad << 4);             /* PadCnt */
	put16(p + 2, m->pkey ? m->pkey : CEP_DEFAULT_PKEY);
	put24(p + 5, m->dst_qpn ? m->dst_qpn : 1);
	put32(p + 12, m->qkey ? m->qkey : CEP_QP1_QKEY);
	put24(p + 17, m->src_qpn ? m->src_qpn : 1);
}

/* ICRC over (masked) network header, BTH..payload, as RoCEv2 and rxe do:
 * 8 bytes of ones for the absent LRH (native IB: the LRH with VL set to
 * ones), IP TClass/flow label/hop limit (v4: TOS, TTL, checksum) and the
 * UDP checksum as ones, BTH resv8a as ones. Stored little-endian. */
static void put_icrc(uint8_t *out, const uint8_t *lrh, const uint8_t *ip, size_t iplen,
		     int ipv4, const uint8_t *udp, const uint8_t *bth, size_t tail)
{
	uint8_t tmp[LRH_HDR + IP6_HDR + UDP_HDR + BTH_HDR];
	size_t n = 0;
	uint32_t crc;

	if (lrh) {
		memcpy(tmp, lrh, LRH_HDR);
		tmp[0] |= 0xf0;
	} else {
		memset(tmp, 0xff, LRH_HDR);
	}
	n = LRH_HDR;
	if (ip) {
		memcpy(tmp + n, ip, iplen);
		if (ipv4) {
			tmp[n + 1] = 0xff;                 /* TOS */
			tmp[n + 8] = 0xff;                 /* TTL */
			tmp[n + 10] = tmp[n + 11] = 0xff;  /* header checksum */
		} else {
			tmp[n] |= 0x0f;                    /* TClass, high nibble */
			memset(tmp + n + 1, 0xff, 3);      /* TClass low, flow label */
			tmp[n + 7] = 0xff;                 /* hop limit */
		}
		n += iplen;
	}
	if (udp) {
		memcpy(tmp + n, udp, UDP_HDR);
		tmp[n + 6] = tmp[n + 7] = 0xff;
		n += UDP_HDR;
	}
	memcpy(tmp + n, bth, BTH_HDR);
	tmp[n + 4] = 0xff;                                 /* resv8a */
	n += BTH_HDR;
	crc = cep_crc32(0, tmp, n);
	crc = cep_crc32(crc, bth + BTH_HDR, tail);
	out[0] = (uint8_t)crc; out[1] = (uint8_t)(crc >> 8);
	out[2] = (uint8_t)(crc >> 16); out[3] = (uint8_t)(crc >> 24);
}

static void put_ip6(uint8_t *p, uint32_t paylen, uint8_t next, const struct cep_pcap_meta *m)
{
	memset(p, 0, IP6_HDR);
	p[0] = 0x60;
	put16(p + 4, paylen);
	p[6] = next;
	p[7] = 64;
	memcpy(p + 8, m->sgid, 16);
	memcpy(p + 24, m->dgid, 16);
}

static size_t frame_rocev2(const uint8_t *mad, size_t len, const struct cep_pcap_meta *m,
			   uint8_t *buf)
{
	int v4 = gid_is_v4mapped(m->sgid) && gid_is_v4mapped(m->dgid);
	size_t iplen = v4 ? IP4_HDR : IP6_HDR;
	size_t plen = (len + 3) & ~(size_t)3;  /* payload padded to whole words */
	uint32_t udplen = (uint32_t)(UDP_HDR + BTH_HDR + DETH_HDR + plen + ICRC_LEN);
	uint8_t *ip = buf + ETH_HDR, *udp = ip + iplen, *bth = udp + UDP_HDR;
	uint8_t *icrc = bth + BTH_HDR + DETH_HDR + plen;
	uint32_t s;

	gid_to_mac(m->dgid, buf);
	gid_to_mac(m->sgid, buf + 6);
	put16(buf + 12, v4 ? 0x0800 : 0x86dd);
	if (v4) {
		memset(ip, 0, IP4_HDR);
		ip[0] = 0x45;
		put16(ip + 2, IP4_HDR + udplen);
		put16(ip + 6, 0x4000);  /* DF */
		ip[8] = 64;
		ip[9] = 17;
		memcpy(ip + 12, m->sgid + 12, 4);
		memcpy(ip + 16, m->dgid + 12, 4);
		put16(ip + 10, fold16(sum16(0, ip, IP4_HDR)));
	} else {
		put_ip6(ip, udplen, 17, m);
	}
	put16(udp, 0xc000 | ((m->src_qpn ? m->src_qpn : 1) & 0x3fff));
	put16(udp + 2, ROCEV2_PORT);
	put16(udp + 4, udplen);
	put16(udp + 6, 0);
	put_bth_deth(bth, m, plen - len);
	memcpy(bth + BTH_HDR + DETH_HDR, mad, len);
	memset(bth + BTH_HDR + DETH_HDR + len, 0, plen - len);
	put_icrc(icrc, NULL, ip, iplen, v4, udp, bth, DETH_HDR + plen);
	/* UDP checksum over the pseudo header and the datagram (ICRC included). */
	if (v4)
		s = sum16(0, ip + 12, 8);
	else
		s = sum16(0, ip + 8, 32);
	s += 17 + udplen;
	s = sum16(s, udp, udplen);
	s = fold16(s);
	put16(udp + 6, s ? s : 0xffff);
	return ETH_HDR + iplen + udplen;
}

static size_t frame_ib(const uint8_t *mad, size_t len, const struct cep_pcap_meta *m,
		       uint8_t *buf)
{
	size_t grh = m->grh ? GRH_HDR : 0;
	size_t plen = (len + 3) & ~(size_t)3;
	size_t tail = BTH_HDR + DETH_HDR + plen + ICRC_LEN; /* BTH..ICRC */
	size_t pktlen = LRH_HDR + grh + tail;               /* LRH..ICRC */
	uint8_t *bth = buf + LRH_HDR + grh;

	memset(buf, 0, LRH_HDR);
	buf[1] = (uint8_t)((m->sl & 0xf) << 4 | (grh ? 3 : 2));
	put16(buf + 2, m->dlid);
	put16(buf + 4, (uint32_t)(pktlen / 4) & 0x7ff);
	put16(buf + 6, m->slid);
	if (grh)
		put_ip6(buf + LRH_HDR, (uint32_t)tail, GRH_NEXT_HDR_IBA, m);
	put_bth_deth(bth, m, plen - len);
	memcpy(bth + BTH_HDR + DETH_HDR, mad, len);
	memset(bth + BTH_HDR + DETH_HDR + len, 0, plen - len);
	put_icrc(bth + BTH_HDR + DETH_HDR + plen, buf, grh ? buf + LRH_HDR : NULL, grh, 0,
		 NULL, bth, DETH_HDR + plen);
	put16(buf + pktlen, vcrc16(buf, pktlen));
	return pktlen + VCRC_LEN;
}

size_t cep_pcap_frame(enum cep_pcap_link link, const uint8_t *mad, size_t len,
		      const struct cep_pcap_meta *meta, uint8_t *buf)
{
	static const struct cep_pcap_meta zero;
	const struct cep_pcap_meta *m = meta ? meta : &zero;

	if (link == CEP_PCAP_INFINIBAND)
		return frame_ib(mad, len, m, buf);
	return frame_rocev2(mad, len, m, buf);
}

/* ---- files ------------------------------------------------------------------ */

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

int cep_pcap_open(const char *path, enum cep_pcap_link link, struct cep_pcap **out)
{
	uint8_t hdr[24];
	struct cep_pcap *pc;
	int err;

	if (!path || !out)
		return -EINVAL;
	if (link == 0)
		link = CEP_PCAP_ROCEV2;
	if (link != CEP_PCAP_ROCEV2 && link != CEP_PCAP_INFINIBAND)
		return -EINVAL;
	pc = calloc(1, sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	pc->f = fopen(path, "wb");
	if (!pc->f) {
		err = errno;
		free(pc);
		return -err;
	}
	pc->link = link;
	pthread_mutex_init(&pc->lock, NULL);
	/* Classic pcap, little-endian, microsecond timestamps. */
	put_le32(hdr, 0xa1b2c3d4u);
	hdr[4] = 2; hdr[5] = 0; hdr[6] = 4; hdr[7] = 0;
	put_le32(hdr + 8, 0);
	put_le32(hdr + 12, 0);
	put_le32(hdr + 16, 65535);
	put_le32(hdr + 20, (uint32_t)link);
	if (fwrite(hdr, sizeof(hdr), 1, pc->f) != 1 || fflush(pc->f) != 0) {
		fclose(pc->f);
		pthread_mutex_destroy(&pc->lock);
		free(pc);
		return -EIO;
	}
	*out = pc;
	return 0;
}

int cep_pcap_write_mad(struct cep_pcap *pc, const uint8_t *mad, size_t len,
		       const struct cep_pcap_meta *meta)
{
	uint8_t rec[16 + CEP_PCAP_MAX_FRAME];
	struct timespec now;
	uint64_t ns;
	size_t n;
	int rc = 0;

	if (!pc || !mad || len == 0 || len > CEP_MAD_SIZE)
		return -EINVAL;
	if (meta && meta->ts_ns) {
		ns = meta->ts_ns;
	} else {
		clock_gettime(CLOCK_REALTIME, &now);
		ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	}
	n = cep_pcap_frame(pc->link, mad, len, meta, rec + 16);
	put_le32(rec, (uint32_t)(ns / 1000000000u));
	put_le32(rec + 4, (uint32_t)(ns % 1000000000u / 1000u));
	put_le32(rec + 8, (uint32_t)n);
	put_le32(rec + 12, (uint32_t)n);
	pthread_mutex_lock(&pc->lock);
	if (fwrite(rec, 16 + n, 1, pc->f) != 1 || fflush(pc->f) != 0)
		rc = -EIO;
	else
		/* Statistics only: relaxed. */
		atomic_fetch_add_explicit(&pc->count, 1, memory_order_relaxed);
	pthread_mutex_unlock(&pc->lock);
	return rc;
}

uint64_t cep_pcap_count(struct cep_pcap *pc)
{
	return pc ? atomic_load_explicit(&pc->count, memory_order_relaxed) : 0;
}

int cep_pcap_close(struct cep_pcap *pc)
{
	int rc = 0;

	if (!pc)
		return 0;
	if (fclose(pc->f) != 0)
		rc = -EIO;
	pthread_mutex_destroy(&pc->lock);
	free(pc);
	return rc;
}

/* ---- process-wide capture ---------------------------------------------------- */

/* Hint for the hook's fast path only; the truth is cap, under cap_lock. */
_Atomic int cep_capture_state = CEP_CAPTURE_UNKNOWN;
static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cep_pcap *cap;   /* under cap_lock */
static pthread_once_t cap_once = PTHREAD_ONCE_INIT;

static void cap_atexit(void)
{
	cep_capture_stop();
}

/* Once per process: honour CEP_PCAP. */
static void cap_env_init(void)
{
	const char *path = getenv("CEP_PCAP");
	const char *lk = getenv("CEP_PCAP_LINK");
	enum cep_pcap_link link = CEP_PCAP_ROCEV2;
	struct cep_pcap *pc = NULL;

	if (lk && (strcmp(lk, "ib") == 0 || strcmp(lk, "247") == 0))
		link = CEP_PCAP_INFINIBAND;
	if (path && *path) {
		int rc = cep_pcap_open(path, link, &pc);

		if (rc)
			fprintf(stderr, "libcep: CEP_PCAP=%s: cannot open: %s\n", path,
				strerror(-rc));
		else
			atexit(cap_atexit);
	}
	pthread_mutex_lock(&cap_lock);
	if (pc && !cap)
		cap = pc;
	else if (pc)
		cep_pcap_close(pc);
	/* Relaxed is enough: readers recheck cap under cap_lock. */
	atomic_store_explicit(&cep_capture_state, cap ? CEP_CAPTURE_ON : CEP_CAPTURE_OFF,
			      memory_order_relaxed);
	pthread_mutex_unlock(&cap_lock);
}

void cep_capture_mad_slow(const uint8_t *mad, size_t len, const struct cep_pcap_meta *meta)
{
	pthread_once(&cap_once, cap_env_init);
	pthread_mutex_lock(&cap_lock);
	if (cap)
		(void)cep_pcap_write_mad(cap, mad, len, meta);
	pthread_mutex_unlock(&cap_lock);
}

int cep_capture_start(const char *path, enum cep_pcap_link link)
{
	struct cep_pcap *pc;
	int rc;

	if (!path)
		return -EINVAL;
	pthread_once(&cap_once, cap_env_init);
	pthread_mutex_lock(&cap_lock);
	if (cap) {
		rc = -EBUSY;
	} else {
		rc = cep_pcap_open(path, link, &pc);
		if (rc == 0) {
			cap = pc;
			/* Relaxed: hooks that miss it skip a MAD; cap is read under cap_lock. */
			atomic_store_explicit(&cep_capture_state, CEP_CAPTURE_ON,
					      memory_order_relaxed);
		}
	}
	pthread_mutex_unlock(&cap_lock);
	return rc;
}

int cep_capture_stop(void)
{
	struct cep_pcap *pc;

	pthread_once(&cap_once, cap_env_init);
	pthread_mutex_lock(&cap_lock);
	pc = cap;
	cap = NULL;
	/* Relaxed: a hook that still sees ON finds cap NULL under cap_lock. */
	atomic_store_explicit(&cep_capture_state, CEP_CAPTURE_OFF, memory_order_relaxed);
	pthread_mutex_unlock(&cap_lock);
	return cep_pcap_close(pc);
}

uint64_t cep_capture_count(void)
{
	uint64_t n;

	pthread_mutex_lock(&cap_lock);
	n = cep_pcap_count(cap);
	pthread_mutex_unlock(&cap_lock);
	return n;
}
