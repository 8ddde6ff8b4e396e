/* SPDX-License-Identifier: MIT */
/*
 * Stream rsockets without a device (src/rdmacm/rsocket.c): what a program
 * sees before any connection - the arguments rsocket() refuses, the
 * number being a descriptor of the process (close-on-exec as asked), data
 * calls on an unconnected rsocket (ENOTCONN) and on other descriptors
 * (EBADF), the options as librdmacm keeps them (the I/O map table's size
 * on its scale, keepalives on and off), I/O maps before a connection, a loopback bind, raccept
 * on an rsocket that does not listen, rpoll and rselect mixing an rsocket
 * with a pipe, rclose; datagram rsockets likewise (their headers, refusals,
 * options, rpoll before a bind, rshutdown waking a blocked rrecv or rpoll).
 * The data path needs a device:
 * tests/guests/rdmacm.sh (rstream, rcopy against Debian's librdmacm); the
 * wire it rests on is checked here byte for byte (rsocket_wire.h).
 * The layer's objects are linked in. Usage: test-rdmacm-rsocket.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#include "../common/check.h"
#include "rdmacm.h"
#include "rsocket_wire.h"
#include "standin_dev.h"

static struct ibv_device fdev;
static struct ibv_context fctx;
static struct rcm_dev dev;
static struct rcm_port ports[1];

/* One RoCE port that is never used as one: without a device
 * rdma_create_event_channel, so rsocket(), is ENODEV, as librdmacm's. */
static void standin(void)
{
	standin_dev(&dev, &fctx, &fdev, "rxe_t", ports, 1);
	ports[0].link_layer = IBV_LINK_LAYER_ETHERNET;
	rcm.devs = &dev;
	rcm.ndevs = 1;
	rcm.init_err = 0;
	rcm.inited = 1;
}

static int64_t ms_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int geti(int s, int level, int name)
{
	int v = -12345;
	socklen_t l = sizeof(v);

	CHECK_EQ(rgetsockopt(s, level, name, &v, &l), 0);
	CHECK_EQ((int)l, (int)sizeof(int));
	return v;
}

static int seti(int s, int level, int name, int v)
{
	return rsetsockopt(s, level, name, &v, sizeof(v));
}

static void refusals(void)
{
	errno = 0;
	CHECK_EQ(rsocket(AF_UNIX, SOCK_STREAM, 0), -1);
	CHECK_EQ(errno, ENOTSUP);
	CHECK_EQ(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP), -1);
	CHECK_EQ(errno, ENOTSUP);
	CHECK_EQ(rsocket(AF_INET, SOCK_RAW, 0), -1);
	CHECK_EQ(errno, ENOTSUP);
	CHECK_EQ(rsocket(AF_UNIX, SOCK_DGRAM, 0), -1);
	CHECK_EQ(errno, ENOTSUP);
	CHECK_EQ(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP), -1);
	CHECK_EQ(errno, ENOTSUP);
	CHECK_EQ(rsocket(AF_IB, SOCK_DGRAM, 0), -1); /* no UDP socket of AF_IB */
	CHECK_EQ(errno, EAFNOSUPPORT);
}

static void options_and_data(void)
{
	int s = rsocket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), p[2], v;
	char b[8] = "x";
	socklen_t l;

	CHECK(s >= 0);
	CHECK(fcntl(s, F_GETFD) & FD_CLOEXEC); /* a real descriptor */
	CHECK_EQ(rfcntl(s, F_GETFD), FD_CLOEXEC);
	CHECK_EQ(rfcntl(s, F_GETFL), 0);

	/* data before a connection */
	CHECK_EQ(rsend(s, b, 1, 0), -1);
	CHECK_EQ(errno, ENOTCONN);
	CHECK_EQ(rrecv(s, b, 1, MSG_DONTWAIT), -1);
	CHECK_EQ(errno, ENOTCONN);
	CHECK_EQ(pipe(p), 0);
	CHECK_EQ(rsend(p[1], b, 1, 0), -1); /* not an rsocket */
	CHECK_EQ(errno, EBADF);
	CHECK_EQ(rsend(-3, b, 1, 0), -1);
	CHECK_EQ(errno, EBADF);

	/* options, as librdmacm keeps them */
	CHECK_EQ(seti(s, SOL_SOCKET, SO_RCVBUF, 4096), 0);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_RCVBUF), 8192);
	CHECK_EQ(seti(s, SOL_SOCKET, SO_SNDBUF, 100), 0);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_SNDBUF), 4096); /* twice the low mark at least */
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_SQSIZE, 100), 0);
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_SQSIZE), 100);
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_RQSIZE, 70000), 0);
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_RQSIZE), 0xfffe);
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_INLINE, 0), 0);
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_INLINE), 0);
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_IOMAPSIZE), 0);
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_IOMAPSIZE, 4), 0);
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_IOMAPSIZE), 4);
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_IOMAPSIZE, 300), 0); /* librdmacm's scale: 256 */
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_IOMAPSIZE), 256);
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_IOMAPSIZE, -1), -1);
	CHECK_EQ(errno, EINVAL);
	/* I/O maps before a connection: no device (PD) to map on, nothing
	 * to write to */
	CHECK_EQ(riomap(s, b, sizeof(b), PROT_WRITE, 0, -1), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(riounmap(s, b, sizeof(b)), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(riowrite(s, b, 1, 0, 0), (size_t)-1);
	CHECK_EQ(errno, ENOTCONN);
	/* keepalives: the kernel's TCP time by default, TCP_KEEPIDLE's; the
	 * thread goes round an rsocket with no connection (nothing to send)
	 * and lets go of it at rclose (TSan and ASan watch) */
	CHECK_EQ(geti(s, SOL_SOCKET, SO_KEEPALIVE), 0);
	CHECK_EQ(seti(s, SOL_SOCKET, SO_KEEPALIVE, 1), 0);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_KEEPALIVE), 1);
	CHECK(geti(s, IPPROTO_TCP, TCP_KEEPIDLE) > 0);
	CHECK_EQ(seti(s, IPPROTO_TCP, TCP_KEEPIDLE, 0), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(seti(s, IPPROTO_TCP, TCP_KEEPIDLE, 1), 0);
	CHECK_EQ(geti(s, IPPROTO_TCP, TCP_KEEPIDLE), 1);
	usleep(1200 * 1000);
	CHECK_EQ(seti(s, SOL_SOCKET, SO_KEEPALIVE, 0), 0);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_KEEPALIVE), 0);
	CHECK_EQ(seti(s, SOL_SOCKET, SO_KEEPALIVE, 1), 0); /* on again: rclose takes it off */
	CHECK_EQ(geti(s, IPPROTO_TCP, TCP_NODELAY), 0);
	CHECK_EQ(seti(s, IPPROTO_TCP, TCP_NODELAY, 1), 0);
	CHECK_EQ(geti(s, IPPROTO_TCP, TCP_NODELAY), 1);
	CHECK_EQ(seti(s, SOL_SOCKET, SO_REUSEADDR, 1), 0);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_REUSEADDR), 1);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_ERROR), 0);
	CHECK_EQ(seti(s, SOL_SOCKET, SO_BINDTODEVICE, 1), -1);
	CHECK_EQ(errno, ENOTSUP);
	v = 1;
	CHECK_EQ(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, 2), -1); /* short */
	CHECK_EQ(errno, EINVAL);
	l = 2;
	CHECK_EQ(rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &l), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(rshutdown(s, SHUT_RDWR), 0); /* nothing to shut, as librdmacm */
	CHECK_EQ(rshutdown(s, 7), -1);
	CHECK_EQ(errno, EINVAL);

	CHECK_EQ(rclose(s), 0);
	CHECK_EQ(rsend(s, b, 1, 0), -1); /* the number is gone */
	CHECK_EQ(errno, EBADF);
	CHECK_EQ(rclose(s), -1);
	CHECK_EQ(errno, EBADF);
	close(p[0]);
	close(p[1]);
}

static void bind_and_poll(void)
{
	int s = rsocket(AF_INET, SOCK_STREAM, 0), p[2];
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct sockaddr_in got;
	socklen_t l = sizeof(got);
	struct pollfd f[2];
	fd_set rd;
	struct timeval tv = { 0, 0 };
	int64_t t0;

	CHECK(s >= 0);
	CHECK_EQ(inet_pton(AF_INET, "127.0.0.1", &a.sin_addr), 1);
	CHECK_EQ(rbind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(rbind(s, (struct sockaddr *)&a, sizeof(a)), -1); /* bound already */
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(rgetsockname(s, (struct sockaddr *)&got, &l), 0);
	CHECK_EQ((int)l, (int)sizeof(got));
	CHECK_EQ(got.sin_family, AF_INET);
	CHECK(got.sin_port != 0);
	CHECK_EQ(got.sin_addr.s_addr, a.sin_addr.s_addr);
	l = 0; /* the length alone (librspreload asks so) */
	CHECK_EQ(rgetsockname(s, NULL, &l), 0);
	CHECK_EQ((int)l, (int)sizeof(got));
	CHECK_EQ(rgetsockname(s, NULL, NULL), -1);
	CHECK_EQ(errno, EFAULT);
	/* raccept on an rsocket that does not listen (listening needs the
	 * port's CM: the guests) */
	CHECK_EQ(rfcntl(s, F_SETFL, O_NONBLOCK), 0);
	CHECK_EQ(rfcntl(s, F_GETFL), O_NONBLOCK);
	CHECK_EQ(raccept(s, NULL, NULL), -1);
	CHECK_EQ(errno, EINVAL);

	CHECK_EQ(pipe(p), 0);
	f[0] = (struct pollfd){ .fd = s, .events = POLLIN };
	f[1] = (struct pollfd){ .fd = p[0], .events = POLLIN };
	CHECK_EQ(rpoll(f, 2, 0), 0);
	t0 = ms_now();
	CHECK_EQ(rpoll(f, 1, 60), 0); /* the rsocket alone: the timeout */
	CHECK(ms_now() - t0 >= 55);
	CHECK_EQ(write(p[1], "x", 1), 1);
	CHECK_EQ(rpoll(f, 2, 1000), 1); /* the pipe, among an rsocket */
	CHECK_EQ(f[0].revents, 0);
	CHECK_EQ(f[1].revents, POLLIN);
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	FD_SET(p[0], &rd);
	CHECK_EQ(rselect((s > p[0] ? s : p[0]) + 1, &rd, NULL, NULL, &tv), 1);
	CHECK(!FD_ISSET(s, &rd));
	CHECK(FD_ISSET(p[0], &rd));
	CHECK_EQ(rclose(s), 0);
	close(p[0]);
	close(p[1]);
}

/* ---- datagram rsockets (rsocket_dgram.c) without a device ---------------
 * What needs no QP: the refusals, the UDP socket as the number, the
 * options, rpoll before a bind, rshutdown waking a blocked rrecv and an
 * rpoll in other threads, and the side channel's checks of the headers
 * (below, in wire). The data path: the guests' udpong and rsocket-dgram. */

static void dgram_calls(void)
{
	int s = rsocket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_UDP), t, v;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(9) };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 };
	struct sockaddr_in got;
	socklen_t l = sizeof(v);
	char b[2100] = "x";
	struct pollfd f;
	int64_t t0;

	CHECK(s >= 0);
	/* the number is the UDP socket's descriptor, flags as asked */
	CHECK_EQ(getsockopt(s, SOL_SOCKET, SO_TYPE, &v, &l), 0);
	CHECK_EQ(v, SOCK_DGRAM);
	CHECK(fcntl(s, F_GETFD) & FD_CLOEXEC);
	CHECK_EQ(rfcntl(s, F_GETFD), FD_CLOEXEC);
	CHECK_EQ(rfcntl(s, F_GETFL), O_NONBLOCK);
	CHECK_EQ(inet_pton(AF_INET, "127.0.0.1", &a.sin_addr), 1);

	/* refusals, each changing nothing */
	CHECK_EQ(rsend(s, b, 1, 0), -1); /* no default destination */
	CHECK_EQ(errno, EDESTADDRREQ);
	CHECK_EQ(rsendto(s, b, 1, 0, (struct sockaddr *)&a6, sizeof(a6)), -1);
	CHECK_EQ(errno, EAFNOSUPPORT);
	CHECK_EQ(rsendto(s, b, 1, 0, (struct sockaddr *)&a, 4), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(rsendto(s, b, sizeof(b), 0, (struct sockaddr *)&a, sizeof(a)), -1);
	CHECK_EQ(errno, EMSGSIZE); /* past a 2,048-byte slot */
	CHECK_EQ(rconnect(s, (struct sockaddr *)&a6, sizeof(a6)), -1);
	CHECK_EQ(errno, EAFNOSUPPORT);
	CHECK_EQ(rbind(s, NULL, 0), -1);
	CHECK_EQ(errno, EFAULT);
	CHECK_EQ(rrecv(s, b, sizeof(b), 0), -1); /* non-blocking, nothing */
	CHECK_EQ(errno, EWOULDBLOCK);
	CHECK_EQ(rrecvfrom(s, b, sizeof(b), 0, (struct sockaddr *)&got, NULL), -1);
	CHECK_EQ(errno, EFAULT);
	CHECK_EQ(rlisten(s, 1), -1);
	CHECK_EQ(errno, EOPNOTSUPP);
	CHECK_EQ(raccept(s, NULL, NULL), -1);
	CHECK_EQ(errno, EOPNOTSUPP);
	CHECK_EQ(riomap(s, b, 8, PROT_WRITE, 0, -1), -1);
	CHECK_EQ(errno, ENOTSUP);
	CHECK_EQ(riowrite(s, b, 1, 0, 0), (size_t)-1);
	CHECK_EQ(errno, ENOTSUP);
	l = sizeof(got);
	CHECK_EQ(rgetpeername(s, (struct sockaddr *)&got, &l), -1); /* not connected */
	CHECK_EQ(errno, ENOTCONN);

	/* options as librdmacm keeps them for datagrams: the UDP socket's
	 * refusal first, sizes doubled until the first bind */
	CHECK_EQ(seti(s, SOL_SOCKET, SO_RCVBUF, 1 << 19), 0);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_RCVBUF), 1 << 20);
	CHECK_EQ(seti(s, SOL_SOCKET, SO_SNDBUF, 1 << 16), 0);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_SNDBUF), 1 << 17);
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_SQSIZE, 100), 0);
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_SQSIZE), 100);
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_RQSIZE, 70000), 0);
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_RQSIZE), 0xfffe);
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_INLINE, 32), 0);
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_INLINE), 32);
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_IOMAPSIZE, 4), -1); /* a stream's */
	CHECK_EQ(errno, ENOTSUP);
	CHECK_EQ(seti(s, IPPROTO_IP, IP_TOS, 0x10), 0);
	CHECK_EQ(geti(s, IPPROTO_IP, IP_TOS), 0x10);
	CHECK_EQ(seti(s, SOL_SOCKET, SO_REUSEADDR, 1), 0);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_REUSEADDR), 1);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_ERROR), 0);
	v = 1;
	CHECK_EQ(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, 2), -1); /* the UDP socket's EINVAL */
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(geti(s, SOL_SOCKET, SO_RCVBUF), 1 << 20);

	/* rpoll before any bind: writable (a send would not wait), nothing
	 * to read: the timeout */
	f = (struct pollfd){ .fd = s, .events = POLLIN | POLLOUT };
	CHECK_EQ(rpoll(&f, 1, 0), 1);
	CHECK_EQ(f.revents, POLLOUT);
	f.events = POLLIN;
	t0 = ms_now();
	CHECK_EQ(rpoll(&f, 1, 60), 0);
	CHECK(ms_now() - t0 >= 55);

	/* rbind: the UDP socket's address; the queue sizes fixed from then
	 * on (librdmacm's slots of 2,048 bytes: at most the buffer's) */
	a.sin_port = 0;
	CHECK_EQ(rbind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(rbind(s, (struct sockaddr *)&a, sizeof(a)), -1);
	CHECK_EQ(errno, EINVAL);
	l = sizeof(got);
	CHECK_EQ(rgetsockname(s, (struct sockaddr *)&got, &l), 0);
	CHECK_EQ(got.sin_addr.s_addr, a.sin_addr.s_addr);
	CHECK(got.sin_port != 0);
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_RQSIZE), 512); /* 1 MiB of 2 KiB slots */
	CHECK_EQ(geti(s, SOL_RDMA, RDMA_SQSIZE), 64);  /* 128 KiB */
	CHECK_EQ(seti(s, SOL_RDMA, RDMA_SQSIZE, 8), -1);
	CHECK_EQ(errno, EINVAL);
	/* a raw UDP datagram that is not the side channel's (no tag): the
	 * service thread drops it, nothing to read */
	t = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(t >= 0);
	CHECK_EQ(sendto(t, "garbage-garbage-garbage", 23, 0, (struct sockaddr *)&got, sizeof(got)), 23);
	f.events = POLLIN;
	CHECK_EQ(rpoll(&f, 1, 100), 0);
	CHECK_EQ(rrecv(s, b, sizeof(b), 0), -1);
	CHECK_EQ(errno, EWOULDBLOCK);
	close(t);
	CHECK_EQ(rclose(s), 0);
	CHECK_EQ(rclose(s), -1);
	CHECK_EQ(errno, EBADF);
}

struct blocked {
	int s;
	bool use_poll;
	ssize_t ret;
	short revents;
	_Atomic int done;
};

static void *block_recv(void *arg)
{
	struct blocked *bl = arg;
	char b[64];

	if (bl->use_poll) {
		struct pollfd f = { .fd = bl->s, .events = POLLIN };

		bl->ret = rpoll(&f, 1, -1);
		bl->revents = f.revents;
	} else {
		bl->ret = rrecv(bl->s, b, sizeof(b), 0);
	}
	bl->done = 1;
	return NULL;
}

/* rshutdown(SHUT_RD) from another thread wakes a thread asleep in a
 * blocking rrecv (it returns 0, as recv(2) after shutdown) and one in
 * rpoll (POLLIN) - the eventfd that says so. Checked within 3 s. */
static void dgram_shutdown_wakes(bool use_poll)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct blocked bl = { .s = rsocket(AF_INET, SOCK_DGRAM, 0) };
	pthread_t th;
	int i;

	CHECK(bl.s >= 0);
	bl.use_poll = use_poll;
	CHECK_EQ(inet_pton(AF_INET, "127.0.0.1", &a.sin_addr), 1);
	CHECK_EQ(rbind(bl.s, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(pthread_create(&th, NULL, block_recv, &bl), 0);
	usleep(100 * 1000);
	CHECK_EQ(bl.done, 0); /* asleep */
	CHECK_EQ(rshutdown(bl.s, SHUT_RD), 0);
	for (i = 0; i < 300 && !bl.done; i++)
		usleep(10 * 1000);
	CHECK_EQ(bl.done, 1);
	if (!bl.done) { /* unblock it to end the test: a datagram won't do */
		fprintf(stderr, "dgram: the blocked %s was not woken\n", use_poll ? "rpoll" : "rrecv");
		exit(1);
	}
	pthread_join(th, NULL);
	if (use_poll) {
		CHECK_EQ(bl.ret, 1);
		CHECK(bl.revents & POLLIN);
	} else {
		CHECK_EQ(bl.ret, 0);
	}
	CHECK_EQ(rsend(bl.s, "x", 1, 0), -1); /* still no destination */
	CHECK_EQ(errno, EDESTADDRREQ);
	CHECK_EQ(rshutdown(bl.s, SHUT_WR), 0);
	CHECK_EQ(rsendto(bl.s, "x", 1, 0, (struct sockaddr *)&a, sizeof(a)), -1);
	CHECK_EQ(errno, EPIPE);
	CHECK_EQ(rclose(bl.s), 0);
}

/* The datagram headers, byte for byte as librdmacm's struct ds_header
 * and struct ds_udp_header, and the checks a received one passes. */
static void dgram_wire(void)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(0x1234),
				  .sin_addr.s_addr = htonl(0x0a000102) };
	struct sockaddr_in6 in6 = { .sin6_family = AF_INET6, .sin6_port = htons(7174),
				    .sin6_flowinfo = htonl(0x00012345) };
	static const uint8_t h4[] = { 4, 8, 0x12, 0x34, 10, 0, 1, 2 };
	static const uint8_t u4[] = { 0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0,
				      0x00, 0xab, 0xcd, 0xef, 10, 0, 1, 2 };
	struct rds_hdr h;
	struct rds_udp_hdr u;
	struct sockaddr_storage ss;
	uint8_t buf[64], op;
	uint32_t qpn;

	CHECK_EQ(sizeof(struct rds_hdr), 24u);
	CHECK_EQ(sizeof(struct rds_udp_hdr), 28u);
	CHECK_EQ(rds_hdr_encode(&h, (struct sockaddr *)&in), 0);
	CHECK(!memcmp(&h, h4, sizeof(h4)));
	CHECK_EQ(rds_hdr_parse(h4, sizeof(h4), AF_INET, &ss), 8);
	CHECK_EQ(ss.ss_family, AF_INET);
	CHECK(!memcmp(&((struct sockaddr_in *)&ss)->sin_addr, &in.sin_addr, 4));
	CHECK_EQ(((struct sockaddr_in *)&ss)->sin_port, in.sin_port);
	CHECK_EQ(rds_hdr_parse(h4, sizeof(h4), AF_INET6, &ss), -EPROTO); /* another family */
	CHECK_EQ(rds_hdr_parse(h4, 7, AF_INET, &ss), -EPROTO);           /* short */
	memcpy(buf, h4, sizeof(h4));
	buf[1] = 24; /* a length that is not version 4's */
	CHECK_EQ(rds_hdr_parse(buf, sizeof(h4), AF_INET, &ss), -EPROTO);
	buf[1] = 8;
	buf[0] = 5;
	CHECK_EQ(rds_hdr_parse(buf, sizeof(h4), AF_INET, &ss), -EPROTO);
	inet_pton(AF_INET6, "fd77::2", &in6.sin6_addr);
	CHECK_EQ(rds_hdr_encode(&h, (struct sockaddr *)&in6), 0);
	memcpy(buf, &h, sizeof(h));
	CHECK_EQ(buf[0], 6);
	CHECK_EQ(buf[1], 24);
	CHECK_EQ(buf[2] << 8 | buf[3], 7174);
	CHECK_EQ(buf[4] << 24 | buf[5] << 16 | buf[6] << 8 | buf[7], 0x00012345);
	CHECK(!memcmp(buf + 8, &in6.sin6_addr, 16));
	CHECK_EQ(rds_hdr_parse(buf, 24, AF_INET6, &ss), 24);
	CHECK(!memcmp(&((struct sockaddr_in6 *)&ss)->sin6_addr, &in6.sin6_addr, 16));
	CHECK_EQ(rds_hdr_parse(buf, 23, AF_INET6, &ss), -EPROTO); /* cut */

	CHECK_EQ(rds_hdr_encode(&h, (struct sockaddr *)&in), 0);
	CHECK_EQ(rds_udp_hdr_encode(&u, &h, RDS_UDP_OP_DATA, 0xffabcdef), 16u);
	CHECK(!memcmp(&u, u4, sizeof(u4)));
	CHECK_EQ(rds_udp_hdr_parse(u4, sizeof(u4), AF_INET, &op, &qpn), 16);
	CHECK_EQ(op, 0);
	CHECK_EQ(qpn, 0xabcdefu);
	CHECK_EQ(rds_udp_hdr_encode(&u, &h, RDS_UDP_OP_CTRL, 1), 16u);
	CHECK_EQ(u.op, 7); /* librdmacm's RS_OP_CTRL */
	memcpy(buf, u4, sizeof(u4));
	buf[3] = 0x54; /* tag */
	CHECK_EQ(rds_udp_hdr_parse(buf, sizeof(u4), AF_INET, &op, &qpn), -EPROTO);
	memcpy(buf, u4, sizeof(u4));
	CHECK_EQ(rds_udp_hdr_parse(buf, sizeof(u4), AF_INET6, &op, &qpn), -EPROTO); /* family */
	CHECK_EQ(rds_udp_hdr_parse(buf, 15, AF_INET, &op, &qpn), -EPROTO);           /* short */
	buf[5] = 3; /* an operation librdmacm never sends */
	CHECK_EQ(rds_udp_hdr_parse(buf, sizeof(u4), AF_INET, &op, &qpn), -EPROTO);
	buf[5] = 0;
	buf[6] = 28; /* version 6's length with version 4 */
	CHECK_EQ(rds_udp_hdr_parse(buf, sizeof(u4), AF_INET, &op, &qpn), -EPROTO);
	CHECK_EQ(rds_hdr_encode(&h, (struct sockaddr *)&in6), 0);
	CHECK_EQ(rds_udp_hdr_encode(&u, &h, RDS_UDP_OP_DATA, 5), 28u);
	CHECK_EQ(rds_udp_hdr_parse(&u, 27, AF_INET6, &op, &qpn), -EPROTO); /* past the datagram */
	CHECK_EQ(rds_udp_hdr_parse(&u, 28, AF_INET6, &op, &qpn), 28);
	CHECK(!memcmp(u.addr.ipv6, &in6.sin6_addr, 16));
}

/* The wire, byte for byte as librdmacm's rsocket.c lays it out (struct
 * rs_conn_data, struct rs_sge, rs_msg_set): what interoperability rests
 * on, checked without a device. */
static void wire(void)
{
	static const uint8_t want[40] = {
		1, RSO_FLAG_IOMAP | (__BYTE_ORDER == __BIG_ENDIAN ? RSO_FLAG_NET : 0),
		0x01, 0x80,             /* credits 384, big-endian */
		0, 0, 0, 4,             /* reserved, I/O-map entries 4 */
		0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, /* target_sgl.addr */
		0xa1, 0xb2, 0xc3, 0xd4, /* .key */
		0, 0, 0, 2,             /* .length: two grant entries */
		0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x00, /* data_buf.addr */
		0x01, 0x02, 0x03, 0x04, /* .key */
		0x00, 0x01, 0x00, 0x00, /* .length: half of a 128 KiB ring */
	};
	uint8_t ib[RSO_IB_HDR + sizeof(struct rso_conn)];
	struct rso_conn c, got;

	rso_conn_encode(&c, 384, 4, 0x0011223344556677ull, 0xa1b2c3d4u, 0x7f0000001000ull,
			0x10000u, 0x01020304u);
	CHECK(!memcmp(&c, want, sizeof(want)));
	CHECK_EQ(rso_conn_parse(want, sizeof(want), 0, &got), 0);
	CHECK_EQ(be16toh(got.credits), 384);
	CHECK_EQ(be64toh(got.target_sgl.addr), 0x0011223344556677ull);
	CHECK_EQ(be32toh(got.data_buf.length), 0x10000u);
	/* AF_IB: the data after room for the IB header */
	memset(ib, 0xee, RSO_IB_HDR);
	memcpy(ib + RSO_IB_HDR, want, sizeof(want));
	CHECK_EQ(rso_conn_parse(ib, sizeof(ib), RSO_IB_HDR, &got), 0);
	CHECK_EQ(be32toh(got.target_sgl.key), 0xa1b2c3d4u);
	/* refusals: short, another version, no grant table */
	CHECK_EQ(rso_conn_parse(want, sizeof(want) - 1, 0, &got), -EPROTO);
	CHECK_EQ(rso_conn_parse(NULL, 0, 0, &got), -EPROTO);
	memcpy(&c, want, sizeof(c));
	c.version = 2;
	CHECK_EQ(rso_conn_parse(&c, sizeof(c), 0, &got), -EPROTONOSUPPORT);
	memcpy(&c, want, sizeof(c));
	c.target_sgl.length = 0;
	CHECK_EQ(rso_conn_parse(&c, sizeof(c), 0, &got), -EPROTO);
	/* the I/O-map size's 8-bit scale: 128 as is, 300 as 129 = 256 */
	CHECK_EQ(rso_value_to_scale(128), 128u);
	CHECK_EQ(rso_value_to_scale(300), 129u);
	CHECK_EQ(rso_scale_to_value(129), 256u);
	rso_conn_encode(&c, 16, 300, 0, 0, 0, 1, 0);
	CHECK_EQ(c.target_iomap_size, 129);
	/* immediates: operation in bits 31-29 */
	CHECK_EQ(RSO_MSG(RSO_OP_DATA, 65536), 0x00010000u);
	CHECK_EQ(RSO_MSG(RSO_OP_SGL, 0x1234), 0x80001234u);
	CHECK_EQ(RSO_MSG(RSO_OP_IOMAP_SGL, 3), 0xc0000003u);
	CHECK_EQ(RSO_MSG(RSO_OP_CTRL, RSO_CTRL_DISCONNECT), 0xe0000000u);
	CHECK_EQ(RSO_MSG(RSO_OP_CTRL, RSO_CTRL_KEEPALIVE), 0xe0000001u);
	CHECK_EQ(RSO_MSG(RSO_OP_CTRL, RSO_CTRL_SHUTDOWN), 0xe0000002u);
	CHECK_EQ(RSO_MSG_OP(0xc0000003u), (unsigned)RSO_OP_IOMAP_SGL);
	CHECK_EQ(RSO_MSG_DATA(0x9fffffffu), 0x1fffffffu);
	CHECK_EQ(sizeof(struct rso_sge), 16u);
	CHECK_EQ(offsetof(struct rso_sge, key), 8u);
	CHECK_EQ(sizeof(struct rso_iomap), 24u);
}

int main(void)
{
	wire();
	dgram_wire();
	dgram_calls(); /* no device needed before a destination */
	errno = 0;
	CHECK_EQ(rsocket(AF_INET, SOCK_STREAM, 0), -1); /* no device */
	CHECK_EQ(errno, ENODEV);
	standin();
	refusals();
	options_and_data();
	bind_and_poll();
	dgram_shutdown_wakes(false);
	dgram_shutdown_wakes(true);
	return check_done("rdmacm-rsocket");
}
