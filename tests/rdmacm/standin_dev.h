/* SPDX-License-Identifier: MIT */
/*
 * A stand-in RDMA device for the librdmacm layer's tests that run without
 * one (ib.c, mcast.c): a named device and context that are never used as
 * verbs, a dummy PD, and @n ports numbered from 1 with their mutexes; the
 * caller sets the link layers, GID table and rcm's device list. Include
 * after "rdmacm.h". Test threads only.
 */
#ifndef CEP_TEST_RDMACM_STANDIN_DEV_H
#define CEP_TEST_RDMACM_STANDIN_DEV_H

#include <stdio.h>

static void standin_dev(struct rcm_dev *dev, struct ibv_context *ctx, struct ibv_device *idev,
			const char *name, struct rcm_port *ports, unsigned n)
{
	static int fake_pd;

	snprintf(idev->name, sizeof(idev->name), "%s", name);
	ctx->device = idev;
	memset(dev, 0, sizeof(*dev));
	memset(ports, 0, n * sizeof(*ports));
	dev->verbs = ctx;
	dev->pd = (struct ibv_pd *)(void *)&fake_pd; /* never used as one */
	dev->nports = n;
	dev->ports = ports;
	for (unsigned i = 0; i < n; i++) {
		ports[i].dev = dev;
		ports[i].port_num = (uint8_t)(i + 1);
		pthread_mutex_init(&ports[i].svc_mtx, NULL);
		pthread_mutex_init(&ports[i].qpn_mtx, NULL);
		pthread_mutex_init(&ports[i].mc_mtx, NULL);
	}
}

#endif /* CEP_TEST_RDMACM_STANDIN_DEV_H */
