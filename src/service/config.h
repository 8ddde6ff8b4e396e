/* SPDX-License-Identifier: MIT */
/*
 * cepd's configuration file (default /etc/cep/cepd.conf; cepd(8),
 * CONFIGURATION): the administrator's grants of service IDs to users and
 * groups, and the limits. One statement a line, '#' starts a comment:
 *
 *   listen WHO FIRST[-LAST]   WHO may listen on the service IDs FIRST to
 *                             LAST (one ID without -LAST); a listen with a
 *                             mask is granted when every ID it matches is
 *                             in one grant of its user. WHO: a user name or
 *                             uid, @group name or @gid, or * (everyone).
 *   limit NAME VALUE          one of acct.h's limits, by the names of
 *                             config_limit_names
 *
 * Names are resolved when the file is read. Grants are read again on
 * SIGHUP (config_reload); limits only at start.
 */
#ifndef CEP_SERVICE_CONFIG_H
#define CEP_SERVICE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "service/identity.h"

#define CEPD_DEFAULT_CONFIG "/etc/cep/cepd.conf"

/* Read @path: its grants replace the current ones, and (@limits) its
 * limits are set in cepd_limits. 0; -ENOENT when the file does not exist
 * (nothing changed); -EINVAL after printing "PATH:LINE: why" to @err
 * (nothing changed); -errno. Main thread. */
int config_load(const char *path, bool limits, FILE *err);

/* Set one limit from "NAME=VALUE" (--limit): 0 or -EINVAL. */
int config_limit_arg(const char *arg);

/* Whether the client @id is granted every service ID in [@lo, @hi]:
 * its uid, or one of its groups now (ident_groups), or everyone, has a
 * grant that covers the range. Any thread (a read lock; SIGHUP's reload
 * takes the write side). */
bool config_granted(const struct cepd_ident *id, uint64_t lo, uint64_t hi);

/* Print the limit names and values in force (cepd --help, --stats). */
void config_print_limits(FILE *f);

#endif /* CEP_SERVICE_CONFIG_H */
