/* SPDX-License-Identifier: MIT */
/*
 * cepd's configuration file (config.h has its grammar): parsed whole into
 * a new grant list and limit set, which replace the old ones only when
 * the file had no error. Grants are read by client threads under a read
 * lock; a reload swaps the list under the write lock.
 */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include "service/config.h"
#include "service/acct.h"

enum who { WHO_UID, WHO_GID, WHO_ALL };

struct grant {
	enum who who;
	uint32_t id;                 /* uid or gid */
	uint64_t lo, hi;             /* service IDs, inclusive */
};

static pthread_rwlock_t grants_lk = PTHREAD_RWLOCK_INITIALIZER;
static struct grant *grants;     /* grants_lk */
static size_t ngrants;           /* grants_lk */

/* Each limit by name: where it is and its width. */
static const struct {
	const char *name;
	size_t off;
	size_t size;
} limit_names[] = {
#define L(n, f) { n, offsetof(struct cepd_limits, f), sizeof(((struct cepd_limits *)0)->f) }
	L("clients", clients),
	L("clients-per-uid", clients_per_uid),
	L("ids-per-client", ids_per_client),
	L("ids-per-uid", ids_per_uid),
	L("qps-per-uid", qps_per_uid),
	L("event-bytes-per-client", event_bytes_per_client),
	L("event-bytes-per-uid", event_bytes_per_uid),
	L("hello-timeout-ms", hello_ms),
#undef L
};

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!*s || *s == '-')
		return -EINVAL;
	errno = 0;
	*v = strtoull(s, &end, 0);
	return errno || *end ? -EINVAL : 0;
}

/* Set limit @name of @l to @value: 0 or -EINVAL (unknown, 0, too wide). */
static int set_limit(struct cepd_limits *l, const char *name, const char *value)
{
	uint64_t v;

	if (parse_u64(value, &v) || v == 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(limit_names) / sizeof(limit_names[0]); i++) {
		uint8_t *p = (uint8_t *)l + limit_names[i].off;

		if (strcmp(limit_names[i].name, name))
			continue;
		if (limit_names[i].size == sizeof(uint32_t)) {
			uint32_t w = (uint32_t)v;

			if (v > UINT32_MAX)
				return -EINVAL;
			memcpy(p, &w, sizeof(w));
		} else {
			size_t w = (size_t)v;

			memcpy(p, &w, sizeof(w));
		}
		return 0;
	}
	return -EINVAL;
}

int config_limit_arg(const char *arg)
{
	char name[64];
	const char *eq = strchr(arg, '=');

	if (!eq || (size_t)(eq - arg) >= sizeof(name))
		return -EINVAL;
	memcpy(name, arg, (size_t)(eq - arg));
	name[eq - arg] = 0;
	return set_limit(&cepd_limits, name, eq + 1);
}

/* WHO of a listen line: 0 or -EINVAL. */
static int parse_who(const char *s, struct grant *g)
{
	uint64_t v;

	if (!strcmp(s, "*")) {
		g->who = WHO_ALL;
		return 0;
	}
	if (*s == '@') {
		struct group *gr;

		g->who = WHO_GID;
		if (!parse_u64(s + 1, &v) && v <= UINT32_MAX) {
			g->id = (uint32_t)v;
			return 0;
		}
		gr = getgrnam(s + 1);
		if (!gr)
			return -EINVAL;
		g->id = gr->gr_gid;
		return 0;
	}
	g->who = WHO_UID;
	if (!parse_u64(s, &v) && v <= UINT32_MAX) {
		g->id = (uint32_t)v;
		return 0;
	}
	{
		struct passwd *pw = getpwnam(s);

		if (!pw)
			return -EINVAL;
		g->id = pw->pw_uid;
	}
	return 0;
}

static int parse_range(char *s, struct grant *g)
{
	char *dash = strchr(s, '-');

	if (dash)
		*dash = 0;
	if (parse_u64(s, &g->lo))
		return -EINVAL;
	if (!dash) {
		g->hi = g->lo;
		return 0;
	}
	if (parse_u64(dash + 1, &g->hi) || g->hi < g->lo)
		return -EINVAL;
	return 0;
}

int config_load(const char *path, bool limits, FILE *err)
{
	FILE *f = fopen(path, "re");
	struct cepd_limits nl = cepd_limits;
	struct grant *ng = NULL, *old;
	size_t n = 0, cap = 0;
	char line[512];
	unsigned lineno = 0;
	int ret = 0;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *w[4], *save = NULL, *hash = strchr(line, '#');
		int nw = 0;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fprintf(err, "%s:%u: line too long\n", path, lineno);
			ret = -EINVAL;
			break;
		}
		if (hash)
			*hash = 0;
		for (char *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
			if (nw == 4) {
				nw = 5;
				break;
			}
			w[nw++] = t;
		}
		if (nw == 0)
			continue;
		if (nw == 3 && !strcmp(w[0], "listen")) {
			struct grant g = { 0 };

			if (parse_who(w[1], &g)) {
				fprintf(err, "%s:%u: unknown user or group '%s'\n", path, lineno, w[1]);
				ret = -EINVAL;
				break;
			}
			if (parse_range(w[2], &g)) {
				fprintf(err, "%s:%u: not a service ID or range: '%s'\n", path, lineno, w[2]);
				ret = -EINVAL;
				break;
			}
			if (n == cap) {
				struct grant *m = realloc(ng, (cap ? cap * 2 : 8) * sizeof(*m));

				if (!m) {
					ret = -ENOMEM;
					break;
				}
				ng = m;
				cap = cap ? cap * 2 : 8;
			}
			ng[n++] = g;
		} else if (nw == 3 && !strcmp(w[0], "limit")) {
			if (set_limit(&nl, w[1], w[2])) {
				fprintf(err, "%s:%u: bad limit '%s %s'\n", path, lineno, w[1], w[2]);
				ret = -EINVAL;
				break;
			}
		} else {
			fprintf(err, "%s:%u: not 'listen WHO FIRST[-LAST]' or 'limit NAME VALUE'\n",
				path, lineno);
			ret = -EINVAL;
			break;
		}
	}
	fclose(f);
	if (ret) {
		free(ng);
		return ret;
	}
	if (limits)
		cepd_limits = nl;
	pthread_rwlock_wrlock(&grants_lk);
	old = grants;
	grants = ng;
	ngrants = n;
	pthread_rwlock_unlock(&grants_lk);
	free(old);
	return 0;
}

bool config_granted(const struct cepd_ident *id, uint64_t lo, uint64_t hi)
{
	gid_t gids[64];
	unsigned ng = 0;
	bool groups_read = false, ok = false;

	pthread_rwlock_rdlock(&grants_lk);
	for (size_t i = 0; i < ngrants && !ok; i++) {
		const struct grant *g = &grants[i];

		if (lo < g->lo || hi > g->hi)
			continue;
		switch (g->who) {
		case WHO_ALL:
			ok = true;
			break;
		case WHO_UID:
			ok = g->id == id->uid;
			break;
		case WHO_GID:
			if (!groups_read) {
				/* the groups of the process now, as the kernel
				 * checks a file's group at open */
				if (ident_groups(id, gids, 64, &ng))
					ng = 0;
				groups_read = true;
			}
			for (unsigned k = 0; k < ng && !ok; k++)
				ok = gids[k] == g->id;
			break;
		}
	}
	pthread_rwlock_unlock(&grants_lk);
	return ok;
}

void config_print_limits(FILE *f)
{
	for (size_t i = 0; i < sizeof(limit_names) / sizeof(limit_names[0]); i++) {
		const uint8_t *p = (const uint8_t *)&cepd_limits + limit_names[i].off;
		unsigned long long v;

		if (limit_names[i].size == sizeof(uint32_t)) {
			uint32_t w;

			memcpy(&w, p, sizeof(w));
			v = w;
		} else {
			size_t w;

			memcpy(&w, p, sizeof(w));
			v = w;
		}
		fprintf(f, "%s%s %llu", i ? " " : "", limit_names[i].name, v);
	}
	fputc('\n', f);
}
