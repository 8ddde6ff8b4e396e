/* SPDX-License-Identifier: MIT */
/*
 * cepd --stats: the service's statistics as text (print_stats, answered
 * to a CEPD_SERVICE_STATS request) and the command that asks a running
 * service for them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "service/cepd.h"

/* ---- statistics ------------------------------------------------------------ */

void print_stats(FILE *f)
{
	fprintf(f, "ports %u\n", svc.nports);
	for (unsigned i = 0; i < svc.nports; i++) {
		struct port *p = &svc.port[i];
		struct cep_cm_stats st = { .size = sizeof(st) };
		struct cep_table_stats ts;
		uint64_t sent = 0, rcvd = 0, drops = 0;

		if (cep_cm_get_stats(p->cm, &st) == 0) {
			for (unsigned m = 0; m < CEP_MSG_COUNT; m++) {
				sent += st.sent[m];
				rcvd += st.received[m];
			}
			for (unsigned d = 0; d < CEP_CM_DROP_COUNT; d++)
				drops += st.drops[d];
		}
		/* the engine's table: CEPs alive (timewait included) and QPNs
		 * registered, so a dead client's leftovers show */
		cep_table_stats(cep_cm_table(p->cm), &ts);
		fprintf(f, "port %u %s:%u guid %016llx mads_sent %llu mads_received %llu "
			"drops %llu retries %llu ids %llu ceps %llu qps %llu\n", i,
			p->dev[0] ? p->dev : "fabric",
			p->port_num, (unsigned long long)cep_cm_ca_guid(p->cm),
			(unsigned long long)sent, (unsigned long long)rcvd,
			(unsigned long long)drops, (unsigned long long)st.retries,
			(unsigned long long)st.ids, (unsigned long long)ts.live,
			(unsigned long long)ts.qps);
	}
	pthread_mutex_lock(&svc.lk);
	{
		unsigned n = 0;

		for (struct client *c = svc.clients; c; c = c->next)
			n += c->port != NULL;
		fprintf(f, "clients %u total %llu bad_messages %llu\n", n,
			(unsigned long long)svc.clients_total,
			(unsigned long long)svc.bad_messages);
	}
	for (struct client *c = svc.clients; c; c = c->next) {
		uint32_t nids, nq;

		if (!c->port) /* statistics readers: not clients of a port */
			continue;
		pthread_mutex_lock(&c->lk);
		nids = c->nids;
		nq = c->nqpn;
		pthread_mutex_unlock(&c->lk);
		fprintf(f, "client %u pid %d uid %u port %d ids %u qps %u requests %llu "
			"bad %llu events %llu events_dropped %llu\n", c->serial, (int)c->pid,
			(unsigned)c->uid, c->port ? (int)c->port->index : -1, nids, nq,
			(unsigned long long)c->requests, (unsigned long long)c->bad,
			(unsigned long long)c->events, (unsigned long long)c->events_dropped);
	}
	pthread_mutex_unlock(&svc.lk);
}

/* `cepd --stats`: ask a running service. */
int stats_command(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct cepd_hello h;
	struct cepd_req r;
	uint8_t *buf = malloc(CEPD_MSG_MAX);
	ssize_t n;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0 || !buf || strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "cepd: --stats: %s\n", strerror(fd < 0 ? errno : ENAMETOOLONG));
		return 1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr, "cepd: --stats: %s: %s\n", path, strerror(errno));
		return 1;
	}
	cepd_hello_init(&h, CEPD_HELLO_STATS, 0);
	memset(&r, 0, sizeof(r));
	r.h.op = CEPD_SERVICE_STATS;
	r.h.len = sizeof(r);
	r.h.seq = 2;
	if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) < 0 ||
	    (n = recv(fd, buf, CEPD_MSG_MAX, 0)) < (ssize_t)sizeof(struct cepd_rep) ||
	    ((struct cepd_rep *)buf)->ret != 0 ||
	    send(fd, &r, sizeof(r), MSG_NOSIGNAL) < 0 ||
	    (n = recv(fd, buf, CEPD_MSG_MAX, 0)) < (ssize_t)sizeof(struct cepd_rep) ||
	    ((struct cepd_rep *)buf)->ret != 0) {
		fprintf(stderr, "cepd: --stats: no answer from %s\n", path);
		return 1;
	}
	fwrite(buf + sizeof(struct cepd_rep), 1, (size_t)n - sizeof(struct cepd_rep), stdout);
	free(buf);
	close(fd);
	return 0;
}
