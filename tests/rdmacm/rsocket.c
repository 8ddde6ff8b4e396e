/* SPDX-License-Identifier: MIT */
/*
 * Stream rsockets without a device (src/rdmacm/rsocket.c): what a program
 * sees before any connection - the arguments rsocket() refuses, the
 * number being a descriptor of the process (close-on-exec as asked), data
 * calls on an unconnected rsocket (ENOTCONN) and on other descriptors
 * (EBADF), the options as librdmacm keeps them (the I/O map table's size
 * on its scale, keepalives on and off), I/O maps before a connection, a loopback bind, raccept
 * on an rsocket that does not listen, rpoll and rselect mixing an rsocket
 * with a pipe, rclose. The data path needs a device:
 * tests/guests/rdmacm.sh (rstream, rcopy against Debian's librdmacm).
 * The layer's objects are linked in. Usage: test-rdmacm-rsocket.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#include "../common/check.h"
#include "rdmacm.h"
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
	CHECK_EQ(rsocket(AF_INET, SOCK_DGRAM, 0), -1); /* datagram rsockets: not built */
	CHECK_EQ(errno, ENOSYS);
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

int main(void)
{
	errno = 0;
	CHECK_EQ(rsocket(AF_INET, SOCK_STREAM, 0), -1); /* no device */
	CHECK_EQ(errno, ENODEV);
	standin();
	refusals();
	options_and_data();
	bind_and_poll();
	return check_done("rdmacm-rsocket");
}
