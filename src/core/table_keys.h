/* SPDX-License-Identifier: MIT */
/*
 * Secondary keys of the CEP table (private to libcep, not exported): the
 * remote-ID, remote-QPN and listener indexes the CM uses for duplicate
 * REQs, stale connections and incoming REQs. Lookups are lock-free and
 * return a reference; inserts have exactly one winner per key.
 */
#ifndef CEP_TABLE_KEYS_H
#define CEP_TABLE_KEYS_H

#include <stdint.h>

#include <cep/table.h>

/* --- Lookups: lock-free, return a reference (cep_put() it) ------------ */

/* By (remote comm ID, remote CA GUID): duplicate REQ detection. */
int cep_lookup_remote_id(struct cep_table *table, uint32_t remote_comm_id,
			 uint64_t remote_ca_guid, struct cep **out);
/* By (remote QPN, remote CA GUID): stale connection detection. */
int cep_lookup_remote_qpn(struct cep_table *table, uint32_t remote_qpn,
			  uint64_t remote_ca_guid, struct cep **out);
/* The listener whose (service ID, mask) matches @service_id; the most
 * specific mask wins. 0, -ENOENT. */
int cep_lookup_listener(struct cep_table *table, uint64_t service_id,
			struct cep **out);

/* --- Secondary keys: insert with add_unique, removed by cep_destroy ---- */

/* Publish @cep under (remote comm ID, CA GUID). A CEP holds at most one key
 * per index at a time; once removed (cep_remove_*) it may insert one again
 * at once (each insert publishes a fresh entry: no grace period to wait).
 * 0; -EEXIST with *existing (a reference, may be NULL) set to the CEP that
 * holds the key; -EALREADY if @cep already has a key in this index (or
 * another thread is inserting or removing one); -ESTALE if @cep is being
 * destroyed; -ENOMEM. */
int cep_insert_remote_id(struct cep *cep, uint32_t remote_comm_id,
			 uint64_t remote_ca_guid, struct cep **existing);
int cep_insert_remote_qpn(struct cep *cep, uint32_t remote_qpn,
			  uint64_t remote_ca_guid, struct cep **existing);
/* Listen: (service_id & mask, mask). mask 0 is refused (-EINVAL). */
int cep_insert_listener(struct cep *cep, uint64_t service_id,
			uint64_t mask, struct cep **existing);
/* Remove one secondary key early (e.g. when timewait ends); the CEP may
 * then insert a key in that index again. 0 or -ENOENT. */
int cep_remove_remote_id(struct cep *cep);
int cep_remove_remote_qpn(struct cep *cep);
int cep_remove_listener(struct cep *cep);

#endif /* CEP_TABLE_KEYS_H */
