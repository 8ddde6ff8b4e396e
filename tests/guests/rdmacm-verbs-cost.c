/* SPDX-License-Identifier: MIT */
/*
 * What the verbs work of one cmtime connection costs on this machine,
 * without any CM: the calls librdmacm (and libcep's librdmacm) make for a
 * connection, each timed over N connections' worth. bench/rdmacm-cmtime.sh
 * runs it in the guests to show where cmtime's time goes
 * (docs/benchmarks.md, "librdmacm on libcep: cmtime").
 *
 *   rdmacm-verbs-cost DEVICE PEER_IPV4 [N]
 *
 * Prints one line per operation: microseconds per call (mean over N).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* The body may hold commas: it is the variadic part. */
#define TIME(label, n, ...) do { \
		double t0_ = now_us(); \
		for (int i = 0; i < (n); i++) { __VA_ARGS__; } \
		printf("%-44s %9.1f us\n", label, (now_us() - t0_) / (n)); \
	} while (0)

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_comp_channel **ch;
	struct ibv_cq **cq;
	struct ibv_qp **qp;
	struct ibv_pd *pd;
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7471) };
	int n = argc > 3 ? atoi(argv[3]) : 200, fd;

	if (argc < 3 || n <= 0 || inet_pton(AF_INET, argv[2], &dst.sin_addr) != 1) {
		fprintf(stderr, "usage: %s DEVICE PEER_IPV4 [N]\n", argv[0]);
		return 2;
	}
	list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (!ctx || !(pd = ibv_alloc_pd(ctx))) {
		fprintf(stderr, "cannot open %s\n", argv[1]);
		return 1;
	}
	ch = calloc(2 * (size_t)n, sizeof(*ch));
	cq = calloc(2 * (size_t)n, sizeof(*cq));
	qp = calloc((size_t)n, sizeof(*qp));
	if (!ch || !cq || !qp)
		return 1;
	printf("verbs cost per call, %d calls each:\n", n);
	/* rdma_resolve_addr's route lookup (libcep: a connected UDP socket) */
	TIME("route lookup (socket, connect, getsockname)", n, {
		struct sockaddr_storage s;
		socklen_t l = sizeof(s);

		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd >= 0) {
			connect(fd, (struct sockaddr *)&dst, sizeof(dst));
			getsockname(fd, (struct sockaddr *)&s, &l);
			close(fd);
		}
	});
	/* rdma_create_qp without CQs: two completion channels and CQs, a QP,
	 * INIT */
	TIME("2 x (completion channel + CQ)", n, {
		ch[2 * i] = ibv_create_comp_channel(ctx);
		cq[2 * i] = ibv_create_cq(ctx, 1, NULL, ch[2 * i], 0);
		ch[2 * i + 1] = ibv_create_comp_channel(ctx);
		cq[2 * i + 1] = ibv_create_cq(ctx, 1, NULL, ch[2 * i + 1], 0);
	});
	TIME("ibv_create_qp (RC)", n, {
		struct ibv_qp_init_attr a = { .send_cq = cq[2 * i], .recv_cq = cq[2 * i + 1],
					      .cap = { 1, 1, 1, 1, 0 }, .qp_type = IBV_QPT_RC };

		qp[i] = ibv_create_qp(pd, &a);
	});
	TIME("ibv_modify_qp to INIT", n, {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

		if (qp[i])
			ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS);
	});
	/* the REP's RTR and RTS (towards the peer's address; no QP answers) */
	{
		struct ibv_gid_entry ge;
		uint8_t gidx = 0;

		for (uint32_t k = 0; k < 16; k++)
			if (ibv_query_gid_ex(ctx, 1, k, &ge, 0) == 0 &&
			    ge.gid_type == IBV_GID_TYPE_ROCE_V2 && ge.gid.raw[10] == 0xff &&
			    ge.gid.raw[11] == 0xff) {
				gidx = (uint8_t)k;
				break;
			}
		TIME("ibv_modify_qp to RTR", n, {
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
						 .dest_qp_num = 0x100 + (uint32_t)i,
						 .max_dest_rd_atomic = 1,
						 .ah_attr = { .is_global = 1, .port_num = 1,
							      .grh = { .sgid_index = gidx,
								       .hop_limit = 64 } } };

			a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
			memcpy(&a.ah_attr.grh.dgid.raw[12], &dst.sin_addr, 4);
			if (qp[i])
				ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
		});
		TIME("ibv_modify_qp to RTS", n, {
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .timeout = 14,
						 .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1 };

			if (qp[i])
				ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					      IBV_QP_MAX_QP_RD_ATOMIC);
		});
	}
	/* rdma_disconnect's QP to ERR, rdma_destroy_qp */
	TIME("ibv_modify_qp to ERR", n, {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		if (qp[i])
			ibv_modify_qp(qp[i], &a, IBV_QP_STATE);
	});
	TIME("ibv_destroy_qp", n, { if (qp[i]) ibv_destroy_qp(qp[i]); });
	TIME("2 x (ibv_destroy_cq + completion channel)", n, {
		for (int k = 2 * i; k < 2 * i + 2; k++) {
			if (cq[k])
				ibv_destroy_cq(cq[k]);
			if (ch[k])
				ibv_destroy_comp_channel(ch[k]);
		}
	});
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
