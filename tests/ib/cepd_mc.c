/* SPDX-License-Identifier: MIT */
/*
 * A client of cepd that joins an InfiniBand multicast group through it,
 * as the librdmacm drop-in does (cmr_mc: MC_JOIN, MC_LEAVE), for the ib
 * tier (ibsim.py): cepd runs `--fabric 1 --fabric-sa :1` under ibsim, so
 * its joins reach OpenSM.
 *
 *   cepd-mc SOCKET PORT-GID hold MGID        join (full member), print
 *                                            "joined status S mlid M", then
 *                                            wait to be killed
 *   cepd-mc SOCKET PORT-GID join-leave MGID  join, print the same, leave,
 *                                            print "left R"
 *   cepd-mc SOCKET PORT-GID bcast 0xffff     IPoIB's broadcast group of
 *                                            that P_Key through cepd
 *                                            (MC_BCAST): "qkey Q mlid M"
 *   cepd-mc SOCKET PORT-GID path DGID        a PathRecord query through
 *                                            cepd (cmr_path_query, as the
 *                                            drop-in's rdma_resolve_route):
 *                                            its fields as saquery names
 *                                            them, one "name value" a line
 *
 * The Set's other fields are cepd's (rdma_cm's Q_Key, P_Key 0xffff).
 * Exit 0 when every call returned 0, 1 otherwise.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cep/cm.h>
#include <cep/sa.h>

#include "service/proto.h"
#include "service/remote.h"

/* The path from @sgid to @dgid, asked as the kernel's rdma_cm asks it. */
static int path(struct cep_cm *cm, const uint8_t sgid[16], const uint8_t dgid[16])
{
	struct cep_sa_path q, p;
	char s[64], d[64];
	int ret;

	memset(&q, 0, sizeof(q));
	memcpy(q.sgid, sgid, 16);
	memcpy(q.dgid, dgid, 16);
	q.pkey = 0xffff;
	q.numb_path = 1;
	q.reversible = 1;
	ret = cmr_path_query(cm, CEP_SA_PR_SGID | CEP_SA_PR_DGID | CEP_SA_PR_PKEY |
			     CEP_SA_PR_NUMB_PATH | CEP_SA_PR_REVERSIBLE, 0, &q, &p);
	if (ret) {
		printf("path error %d\n", ret);
		return 1;
	}
	inet_ntop(AF_INET6, p.sgid, s, sizeof(s));
	inet_ntop(AF_INET6, p.dgid, d, sizeof(d));
	printf("sgid %s\ndgid %s\nslid %u\ndlid %u\npkey 0x%x\nsl %u\nmtu 0x%x\nrate 0x%x\n"
	       "pkt_life 0x%x\n", s, d, p.slid, p.dlid, p.pkey, p.sl,
	       (unsigned)(p.mtu_selector << 6 | p.mtu), (unsigned)(p.rate_selector << 6 | p.rate),
	       (unsigned)(p.packet_life_time_selector << 6 | p.packet_life_time));
	(void)cep_cm_destroy(cm);
	return 0;
}

int main(int argc, char **argv)
{
	struct cep_cm_attach_attr a = { .size = sizeof(a) };
	struct cep_sa_mcmember rec;
	struct cepd_mc m;
	struct cepd_mc_rep rep;
	struct cep_cm *cm = NULL;
	int ret, hold;

	if (argc != 5 || (strcmp(argv[3], "hold") && strcmp(argv[3], "join-leave") &&
			  strcmp(argv[3], "path") && strcmp(argv[3], "bcast"))) {
		fprintf(stderr, "usage: %s SOCKET PORT-GID hold|join-leave MGID|path DGID|"
			"bcast PKEY\n", argv[0]);
		return 2;
	}
	hold = !strcmp(argv[3], "hold");
	memset(&m, 0, sizeof(m));
	if (inet_pton(AF_INET6, argv[2], m.port_gid) != 1 ||
	    (strcmp(argv[3], "bcast") && inet_pton(AF_INET6, argv[4], m.mgid) != 1)) {
		fprintf(stderr, "cepd-mc: bad GID\n");
		return 2;
	}
	m.qkey = 0x01234567u; /* rdma_cm's RDMA_UDP_QKEY */
	m.pkey = 0xffff;
	a.socket = argv[1];
	ret = cep_cm_attach(&a, &cm);
	if (ret) {
		printf("attach error %d\n", ret);
		return 1;
	}
	if (!strcmp(argv[3], "path"))
		return path(cm, m.port_gid, m.mgid);
	if (!strcmp(argv[3], "bcast")) {
		memset(&m, 0, sizeof(m));
		m.pkey = (uint16_t)strtoul(argv[4], NULL, 0);
		ret = cmr_mc(cm, CEPD_MC_BCAST, &m, &rep);
		if (ret) {
			printf("bcast error %d\n", ret);
			return 1;
		}
		cep_sa_mcmember_decode(rep.rec, &rec);
		printf("qkey 0x%x\nmlid 0x%x\n", rec.qkey, rec.mlid);
		(void)cep_cm_destroy(cm);
		return 0;
	}
	ret = cmr_mc(cm, CEPD_MC_JOIN, &m, &rep);
	if (ret) {
		printf("join error %d\n", ret);
		return 1;
	}
	cep_sa_mcmember_decode(rep.rec, &rec);
	printf("joined status %d mlid 0x%x\n", rep.status, rep.status ? 0 : rec.mlid);
	fflush(stdout);
	if (rep.status)
		return 1;
	if (hold) {
		for (;;)
			pause(); /* until killed: cepd must end the join */
	}
	ret = cmr_mc(cm, CEPD_MC_LEAVE, &m, NULL);
	printf("left %d\n", ret);
	(void)cep_cm_destroy(cm);
	return ret ? 1 : 0;
}
