/* SPDX-License-Identifier: MIT */
/*
 * cepd --stats: the service's statistics as text (print_stats, answered
 * to a CEPD_SERVICE_STATS request) and the command that asks a running
 * service for them. A reader sees the ports' counters, the limits, and
 * the clients access_sees() lets it see (root: all; anyone else: its own
 * uid's).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "service/access.h"
#include "service/cepd.h"
#include "service/config.h"

/* ---- statistics ------------------------------------------------------------ */

/* " @what" and each kind of MAD counted in @n with its count. */
static void print_by_kind(FILE *f, const char *what, const uint64_t n[CEP_MSG_COUNT])
{
	fprintf(f, " %s", what);
	for (unsigned m = 0; m < CEP_MSG_COUNT; m++)
		if (n[m])
			fprintf(f, " %s %llu", cep_msg_name((enum cep_msg_type)m),
				(unsigned long long)n[m]);
}

void print_stats(FILE *f, const struct client *reader)
{
	unsigned n = 0;

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
			"drops %llu retries %llu ids %llu ceps %llu qps %llu mc_joins %llu\n", i,
			p->dev[0] ? p->dev : "fabric",
			p->port_num, (unsigned long long)cep_cm_ca_guid(p->cm),
			(unsigned long long)sent, (unsigned long long)rcvd,
			(unsigned long long)drops, (unsigned long long)st.retries,
			(unsigned long long)st.ids, (unsigned long long)ts.live,
			(unsigned long long)ts.qps,
			(unsigned long long)atomic_load_explicit(&p->nmc, memory_order_relaxed));
		/* what the MADs were (a run's MRAs, repeats and REJs) */
		fprintf(f, "mads port %u", i);
		print_by_kind(f, "sent", st.sent);
		print_by_kind(f, "received", st.received);
		fprintf(f, " duplicates %llu timeouts %llu\n", (unsigned long long)st.duplicates,
			(unsigned long long)st.timeouts);
	}
	pthread_mutex_lock(&svc.lk);
	for (struct client *c = svc.clients; c; c = c->next)
		n += c->port != NULL && access_sees(reader, c);
	fprintf(f, "clients %u total %llu refused %llu bad_messages %llu\n", n,
		(unsigned long long)svc.clients_total, (unsigned long long)svc.clients_refused,
		(unsigned long long)svc.bad_messages);
	for (struct client *c = svc.clients; c; c = c->next) {
		uint32_t nids, nq;

		/* statistics readers are not clients of a port; another
		 * user's clients are not this reader's business */
		if (!c->port || !access_sees(reader, c))
			continue;
		pthread_mutex_lock(&c->lk);
		nids = c->nids;
		pthread_mutex_unlock(&c->lk);
		pthread_mutex_lock(&c->port->lk);
		nq = c->nqpn;
		pthread_mutex_unlock(&c->port->lk);
		fprintf(f, "client %u pid %d uid %u port %d ids %u qps %u requests %llu "
			"bad %llu refused %llu events %llu events_dropped %llu uid_ids %llu "
			"uid_qps %llu uid_event_bytes %llu mc %u\n", c->serial, (int)c->id.pid,
			(unsigned)c->id.uid, (int)c->port->index, nids, nq,
			(unsigned long long)c->requests, (unsigned long long)c->bad,
			(unsigned long long)c->refused,
			(unsigned long long)c->events, (unsigned long long)c->events_dropped,
			(unsigned long long)acct_held(c->acct, ACCT_IDS),
			(unsigned long long)acct_held(c->acct, ACCT_QPS),
			(unsigned long long)acct_held(c->acct, ACCT_EVENT_BYTES),
			(unsigned)atomic_load_explicit(&c->nmcs, memory_order_relaxed));
	}
	pthread_mutex_unlock(&svc.lk);
	fputs("limits ", f);
	config_print_limits(f);
}

/* `cepd --stats`: ask a running service. 0, or 1 after saying why. */
int stats_command(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct cepd_hello h;
	struct cepd_req r;
	uint8_t *buf = NULL;
	ssize_t n;
	int fd = -1, status = 1;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "cepd: --stats: %s: %s\n", path, strerror(ENAMETOOLONG));
		return 1;
	}
	buf = malloc(CEPD_MSG_MAX);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || !buf) {
		fprintf(stderr, "cepd: --stats: %s\n", strerror(fd < 0 ? errno : ENOMEM));
		goto out;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr, "cepd: --stats: %s: %s\n", path, strerror(errno));
		goto out;
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
		goto out;
	}
	fwrite(buf + sizeof(struct cepd_rep), 1, (size_t)n - sizeof(struct cepd_rep), stdout);
	status = 0;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	return status;
}
