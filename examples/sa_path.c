/* SPDX-License-Identifier: MIT */
/* --sa / --sa-dest of the demos: see sa_path.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "sa_path.h"

int sa_path_parse(const char *ca_port, const char *dest, struct sa_path_opt *o)
{
	const char *colon = ca_port ? strrchr(ca_port, ':') : NULL;
	unsigned long port, lid;
	char *end;

	memset(o, 0, sizeof(*o));
	if (!colon || !dest || (size_t)(colon - ca_port) >= sizeof(o->ca))
		return -EINVAL;
	memcpy(o->ca, ca_port, (size_t)(colon - ca_port));
	errno = 0;
	port = strtoul(colon + 1, &end, 0);
	if (errno || *end || port < 1 || port > 254)
		return -EINVAL;
	o->port = (uint8_t)port;
	if (strchr(dest, ':')) {
		o->dest_is_gid = 1;
		return inet_pton(AF_INET6, dest, o->dgid) == 1 ? 0 : -EINVAL;
	}
	lid = strtoul(dest, &end, 0);
	if (*end || lid == 0 || lid >= 0xc000) /* unicast LIDs only */
		return -EINVAL;
	o->dlid = (uint16_t)lid;
	return 0;
}

int sa_path_fetch(const struct sa_path_opt *o, struct cep_sa_path *rec,
		  char *why, size_t why_len)
{
	struct cep_sa_attr attr = { .size = sizeof(attr), .port_num = o->port };
	struct cep_sa_path q;
	struct cep_sa_port port;
	struct cep_sa *sa;
	uint64_t mask = CEP_SA_PR_PKEY | CEP_SA_PR_NUMB_PATH | CEP_SA_PR_REVERSIBLE;
	int ret;

	attr.dev_name = o->ca[0] ? o->ca : NULL;
	ret = cep_sa_get(&attr, &sa);
	if (ret) {
		snprintf(why, why_len, "cannot open the SA client of %s:%u: %s",
			 o->ca[0] ? o->ca : "(default CA)", o->port, strerror(-ret));
		return ret;
	}
	ret = cep_sa_port_info(sa, &port);
	if (ret) {
		snprintf(why, why_len, "cannot read the port: %s", strerror(-ret));
		goto out;
	}
	memset(&q, 0, sizeof(q));
	q.pkey = port.pkey ? port.pkey : 0xffff;
	q.numb_path = 1;
	q.reversible = 1;
	if (o->dest_is_gid) {
		memcpy(q.sgid, port.gid, 16);
		memcpy(q.dgid, o->dgid, 16);
		mask |= CEP_SA_PR_SGID | CEP_SA_PR_DGID;
	} else {
		q.slid = port.lid;
		q.dlid = o->dlid;
		mask |= CEP_SA_PR_SLID | CEP_SA_PR_DLID;
	}
	ret = cep_sa_path_query(sa, mask, &q, 0, rec);
	if (ret) {
		snprintf(why, why_len, "PathRecord query: %s", strerror(-ret));
		goto out;
	}
	/* the storm needs two distinct simulated ports */
	if (rec->slid == rec->dlid || !memcmp(rec->sgid, rec->dgid, 16)) {
		snprintf(why, why_len, "the SA's path leads back to this port (LID %u): "
			 "--sa-dest must name another port", rec->slid);
		ret = -EINVAL;
	}
out:
	cep_sa_put(sa);
	return ret;
}

void sa_path_print(FILE *f, const char *prog, const struct sa_path_opt *o,
		   const struct cep_sa_path *rec)
{
	char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, rec->sgid, s, sizeof(s));
	inet_ntop(AF_INET6, rec->dgid, d, sizeof(d));
	fprintf(f, "%s: path from the SA of %s:%u: SLID %u DLID %u SGID %s DGID %s "
		"P_Key 0x%04x SL %u MTU %u rate %u packet life time %u hop limit %u\n",
		prog, o->ca[0] ? o->ca : "(default CA)", o->port, rec->slid, rec->dlid,
		s, d, rec->pkey, rec->sl, rec->mtu, rec->rate, rec->packet_life_time,
		rec->hop_limit);
}

uint64_t sa_path_guid(const uint8_t gid[16])
{
	uint64_t g = 0;

	for (int i = 8; i < 16; i++)
		g = g << 8 | gid[i];
	return g;
}
