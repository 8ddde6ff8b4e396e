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
 * tests/guests/rdmacm.sh (rstream, rcopy against Debian's librdmacm); the
 * wire it rests on is checked here byte for byte (rsocket_wire.h).
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
	errno = 0;
	CHECK_EQ(rsocket(AF_INET, SOCK_STREAM, 0), -1); /* no device */
	CHECK_EQ(errno, ENODEV);
	standin();
	refusals();
	options_and_data();
	bind_and_poll();
	return check_done("rdmacm-rsocket");
}
