/* SPDX-License-Identifier: MIT */
/*
 * cepd's limits: what one client and one uid may hold at once, so that no
 * local user can take the service from the others (cepd(8), LIMITS).
 *
 * Each uid with a client has one account; a client holds a reference on
 * its uid's account from accept to its end. Charges are exact: an id is
 * charged from its creation (by a request, or by a REQ to a listener)
 * until the engine holds nothing more of it, its DREQ and timewait after
 * the client destroyed it included; a QP from its registration until it
 * is forgotten; event bytes while they wait in the client's queue.
 *
 * Any thread: the accounts are under one mutex held for a few
 * instructions, never across a call out.
 */
#ifndef CEP_SERVICE_ACCT_H
#define CEP_SERVICE_ACCT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cepd_limits {
	unsigned clients;            /* clients (connections) in all */
	unsigned clients_per_uid;    /* clients of one uid, statistics readers included */
	uint32_t ids_per_client;     /* --max-ids */
	uint32_t ids_per_uid;        /* ids of one uid's clients, lingering ones included */
	uint32_t qps_per_uid;        /* QPNs registered by one uid's clients */
	size_t event_bytes_per_client; /* events queued for a client that does not read */
	size_t event_bytes_per_uid;
	unsigned hello_ms;           /* from accept to the HELLO */
};

/* The limits in force (defaults, then the configuration, then options):
 * set by main before any client exists, read-only afterwards. */
extern struct cepd_limits cepd_limits;

enum acct_kind { ACCT_IDS, ACCT_QPS, ACCT_EVENT_BYTES, ACCT_KINDS };

struct acct;

/* The account of @uid with one more client: 0 and *out; -EUSERS (the uid
 * has cepd_limits.clients_per_uid clients, or the service .clients);
 * -ENOMEM. */
int acct_client_get(uid_t uid, struct acct **out);
/* The client is gone: drop its reference (the account lives on while
 * charges remain, e.g. lingering ids of a dead client). */
void acct_client_put(struct acct *a);

/* Charge @n of @kind to @a: 0, or -EDQUOT when that passes the uid's
 * limit (nothing charged). */
int acct_charge(struct acct *a, enum acct_kind kind, uint64_t n);
/* Charge @n whatever the limit (a short-lived excess the caller bounds). */
void acct_add(struct acct *a, enum acct_kind kind, uint64_t n);
void acct_uncharge(struct acct *a, enum acct_kind kind, uint64_t n);

/* What @a holds now (statistics). */
uint64_t acct_held(struct acct *a, enum acct_kind kind);
uid_t acct_uid(const struct acct *a);

#endif /* CEP_SERVICE_ACCT_H */
