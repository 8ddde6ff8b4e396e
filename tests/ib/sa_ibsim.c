/* SPDX-License-Identifier: MIT */
/*
 * The SA client on ibsim: run under libumad2sim.so with SIM_HOST naming
 * the node, against the real OpenSM. Prints what it got as "name value"
 * lines, named and packed as saquery(8) prints them, so ibsim.py can
 * compare the two field by field. Exit 0 when the call did what the mode
 * expects, 1 otherwise.
 *
 *   sa-ibsim port                      this node's LID, SM LID, GID
 *   sa-ibsim path-lid SLID DLID        PathRecord by LIDs (twice: cache)
 *   sa-ibsim path-gid SGID DGID        PathRecord by GIDs
 *   sa-ibsim cpi                       the SA's ClassPortInfo
 *   sa-ibsim fail SLID DLID MS N       must fail (any error) within N x MS
 *   sa-ibsim timeout SLID DLID MS N    must end in -ETIMEDOUT after N sends
 *   sa-ibsim mcast-get MGID            the group's MCMemberRecord (Get)
 *   sa-ibsim mcast-join MGID TEMPLATE  join MGID as a full member with the
 *                                      TEMPLATE group's parameters, as the
 *                                      kernel's rdma_cm joins with IPoIB's
 *                                      broadcast group's; prints the answer
 *   sa-ibsim mcast-leave MGID          end this port's full membership
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>

#include <cep/sa.h>

static void print_gid(const char *name, const uint8_t gid[16])
{
	char s[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, gid, s, sizeof(s));
	printf("%s %s\n", name, s);
}

static void print_path(const struct cep_sa_path *p)
{
	printf("service_id 0x%016" PRIx64 "\n", p->service_id);
	print_gid("dgid", p->dgid);
	print_gid("sgid", p->sgid);
	printf("dlid %u\nslid %u\n", p->dlid, p->slid);
	printf("hop_flow_raw 0x%" PRIx32 "\n",
	       (uint32_t)p->raw_traffic << 31 | p->flow_label << 8 | p->hop_limit);
	printf("tclass 0x%x\n", p->traffic_class);
	printf("num_path_revers 0x%x\n", p->reversible << 7 | p->numb_path);
	printf("pkey 0x%x\n", p->pkey);
	printf("qos_class 0x%x\nsl 0x%x\n", p->qos_class, p->sl);
	printf("mtu 0x%x\n", p->mtu_selector << 6 | p->mtu);
	printf("rate 0x%x\n", p->rate_selector << 6 | p->rate);
	printf("pkt_life 0x%x\n", p->packet_life_time_selector << 6 | p->packet_life_time);
	printf("preference 0x%x\n", p->preference);
}

static void print_mcm(const struct cep_sa_mcmember *m)
{
	print_gid("mgid", m->mgid);
	print_gid("port_gid", m->port_gid);
	printf("mlid 0x%x\nqkey 0x%x\n", m->mlid, m->qkey);
	printf("mtu 0x%x\n", m->mtu_selector << 6 | m->mtu);
	printf("tclass 0x%x\npkey 0x%x\n", m->traffic_class, m->pkey);
	printf("rate 0x%x\n", m->rate_selector << 6 | m->rate);
	printf("pkt_life 0x%x\n", m->packet_life_time_selector << 6 | m->packet_life_time);
	printf("sl 0x%x\nflow_label 0x%x\nhop_limit 0x%x\n", m->sl, m->flow_label,
	       m->hop_limit);
	printf("scope_state 0x%x\nproxy_join %u\n", m->scope << 4 | m->join_state,
	       m->proxy_join);
}

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static struct cep_sa_path lid_query(const char *s, const char *d)
{
	struct cep_sa_path q;

	memset(&q, 0, sizeof(q));
	q.slid = (uint16_t)strtoul(s, NULL, 0);
	q.dlid = (uint16_t)strtoul(d, NULL, 0);
	q.pkey = 0xffff;
	q.numb_path = 1;
	q.reversible = 1;
	return q;
}

#define LID_MASK (CEP_SA_PR_SLID | CEP_SA_PR_DLID | CEP_SA_PR_PKEY | \
		  CEP_SA_PR_NUMB_PATH | CEP_SA_PR_REVERSIBLE)
/* What the kernel's cma_query_ib_route asks, less the service ID. */
#define GID_MASK (CEP_SA_PR_SGID | CEP_SA_PR_DGID | CEP_SA_PR_PKEY | \
		  CEP_SA_PR_NUMB_PATH | CEP_SA_PR_REVERSIBLE)

static int usage(void)
{
	fprintf(stderr, "usage: sa-ibsim port | path-lid S D | path-gid S D | cpi | "
		"fail S D MS N | timeout S D MS N | mcast-get MGID | "
		"mcast-join MGID TEMPLATE | mcast-leave MGID\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct cep_sa_attr attr = { .size = sizeof(attr), .port_num = 1 };
	struct cep_sa_stats st;
	struct cep_sa *sa;
	const char *mode = argc > 1 ? argv[1] : "";
	int ret, ok = 0;

	if (argc < 2)
		return usage();
	if ((!strcmp(mode, "fail") || !strcmp(mode, "timeout")) && argc == 6) {
		attr.timeout_ms = (uint32_t)strtoul(argv[4], NULL, 0);
		attr.attempts = (uint32_t)strtoul(argv[5], NULL, 0);
	}
	ret = cep_sa_get(&attr, &sa);
	if (ret) {
		fprintf(stderr, "cep_sa_get: %s\n", strerror(-ret));
		return 1;
	}

	if (!strcmp(mode, "port") && argc == 2) {
		struct cep_sa_port p;

		ret = cep_sa_port_info(sa, &p);
		if (ret == 0) {
			printf("lid %u\nsm_lid %u\nstate %u\n", p.lid, p.sm_lid, p.state);
			print_gid("gid", p.gid);
			ok = p.state == 4 && p.lid && p.sm_lid;
		}
	} else if (!strcmp(mode, "path-lid") && argc == 4) {
		struct cep_sa_path q = lid_query(argv[2], argv[3]), p, again;

		ret = cep_sa_path_query(sa, LID_MASK, &q, 0, &p);
		if (ret == 0) {
			print_path(&p);
			/* The second answer comes from the cache, unchanged. */
			ret = cep_sa_path_query(sa, LID_MASK, &q, 0, &again);
			cep_sa_get_stats(sa, &st);
			printf("cache_hits %" PRIu64 "\nsent %" PRIu64 "\n",
			       st.cache_hits, st.sent);
			ok = ret == 0 && st.cache_hits == 1 && st.sent == 1 &&
			     memcmp(&p, &again, sizeof(p)) == 0;
		}
	} else if (!strcmp(mode, "path-gid") && argc == 4) {
		struct cep_sa_path q, p;

		memset(&q, 0, sizeof(q));
		if (inet_pton(AF_INET6, argv[2], q.sgid) != 1 ||
		    inet_pton(AF_INET6, argv[3], q.dgid) != 1)
			return usage();
		q.pkey = 0xffff;
		q.numb_path = 1;
		q.reversible = 1;
		ret = cep_sa_path_query(sa, GID_MASK, &q, 0, &p);
		if (ret == 0) {
			print_path(&p);
			ok = 1;
		}
	} else if (!strcmp(mode, "cpi") && argc == 2) {
		struct cep_sa_class_port_info c;

		ret = cep_sa_class_port_info(sa, &c);
		if (ret == 0) {
			printf("base_version %u\nclass_version %u\n", c.base_version,
			       c.class_version);
			printf("capability_mask 0x%x\ncapability_mask2 0x%x\n",
			       c.capability_mask, c.capability_mask2);
			printf("resp_time_value 0x%x\nredirect_lid %u\n",
			       c.resp_time_value, c.redirect_lid);
			printf("redirect_qp 0x%x\nredirect_qkey 0x%x\n", c.redirect_qp,
			       c.redirect_qkey);
			ok = 1;
		}
	} else if ((!strcmp(mode, "fail") || !strcmp(mode, "timeout")) && argc == 6) {
		struct cep_sa_path q = lid_query(argv[2], argv[3]), p;
		uint64_t t0 = ms_now(), dt;

		ret = cep_sa_path_query(sa, LID_MASK, &q, CEP_SA_QUERY_FRESH, &p);
		dt = ms_now() - t0;
		cep_sa_get_stats(sa, &st);
		printf("result %d\nelapsed_ms %" PRIu64 "\nsent %" PRIu64 "\ntimeouts %" PRIu64 "\n",
		       ret, dt, st.sent, st.timeouts);
		/* Bounded: never much longer than the attempts allow (5 s of
		 * slack for a loaded machine; a hang is caught far beyond). */
		ok = ret != 0 && dt <= (uint64_t)attr.timeout_ms * attr.attempts + 5000;
		if (!strcmp(mode, "timeout"))
			ok = ok && ret == -ETIMEDOUT && st.sent == attr.attempts &&
			     st.timeouts == 1 && dt >= (uint64_t)attr.timeout_ms * attr.attempts;
		ret = 0;
	} else if (!strcmp(mode, "mcast-get") && argc == 3) {
		struct cep_sa_mcmember q, m;

		memset(&q, 0, sizeof(q));
		if (inet_pton(AF_INET6, argv[2], q.mgid) != 1)
			return usage();
		ret = cep_sa_mcmember(sa, CEP_SA_METHOD_GET, CEP_SA_MCM_MGID, &q, &m);
		if (ret == 0) {
			print_mcm(&m);
			ok = memcmp(m.mgid, q.mgid, 16) == 0;
		}
	} else if (!strcmp(mode, "mcast-join") && argc == 4) {
		struct cep_sa_mcmember q, t, m;
		struct cep_sa_port p;

		memset(&q, 0, sizeof(q));
		if (inet_pton(AF_INET6, argv[3], q.mgid) != 1)
			return usage();
		ret = cep_sa_mcmember(sa, CEP_SA_METHOD_GET, CEP_SA_MCM_MGID, &q, &t);
		if (ret == 0)
			ret = cep_sa_port_info(sa, &p);
		if (ret == 0) {
			/* cma_join_ib_multicast's record and mask (RDMA_PS_UDP) */
			q = t;
			if (inet_pton(AF_INET6, argv[2], q.mgid) != 1)
				return usage();
			memcpy(q.port_gid, p.gid, 16);
			q.qkey = 0x01234567;       /* RDMA_UDP_QKEY */
			q.join_state = CEP_SA_JOIN_FULL;
			ret = cep_sa_mcmember(sa, CEP_SA_METHOD_SET,
					      CEP_SA_MCM_MGID | CEP_SA_MCM_PORT_GID |
					      CEP_SA_MCM_PKEY | CEP_SA_MCM_JOIN_STATE |
					      CEP_SA_MCM_QKEY | CEP_SA_MCM_SL |
					      CEP_SA_MCM_FLOW_LABEL | CEP_SA_MCM_TCLASS,
					      &q, &m);
		}
		if (ret == 0) {
			print_mcm(&m);
			ok = memcmp(m.mgid, q.mgid, 16) == 0 &&
			     memcmp(m.port_gid, p.gid, 16) == 0 && m.qkey == q.qkey &&
			     m.pkey == t.pkey && m.mlid >= 0xc000 &&
			     (m.join_state & CEP_SA_JOIN_FULL);
		}
	} else if (!strcmp(mode, "mcast-leave") && argc == 3) {
		struct cep_sa_mcmember q, m;
		struct cep_sa_port p;

		memset(&q, 0, sizeof(q));
		if (inet_pton(AF_INET6, argv[2], q.mgid) != 1)
			return usage();
		ret = cep_sa_port_info(sa, &p);
		if (ret == 0) {
			memcpy(q.port_gid, p.gid, 16);
			q.join_state = CEP_SA_JOIN_FULL;
			ret = cep_sa_mcmember(sa, CEP_SA_METHOD_DELETE,
					      CEP_SA_MCM_MGID | CEP_SA_MCM_PORT_GID |
					      CEP_SA_MCM_JOIN_STATE, &q, &m);
		}
		if (ret == 0) {
			print_mcm(&m);
			ok = 1;
		}
	} else {
		cep_sa_put(sa);
		return usage();
	}
	if (ret)
		printf("error %d %s\n", ret, strerror(-ret));
	cep_sa_put(sa);
	return ok ? 0 : 1;
}
