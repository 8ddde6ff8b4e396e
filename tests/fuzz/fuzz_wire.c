/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the CM MAD decoder and validator: any input must be
 * decoded or refused without a crash or sanitizer report; a refused MAD
 * leaves the output untouched and counts once; an accepted MAD must
 * re-encode to the input with reserved bits cleared, and decode again to
 * the same message. Build: meson -Dfuzz=true with CC=clang.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cep/wire.h>

#include "wire/wire_fields.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input with every reserved bit of its message (and header) cleared. */
static void clear_reserved(enum cep_msg_type t, uint8_t *mad)
{
	size_t n;
	const struct cep_field *f = cep_wire_fields(t, &n);
	const struct cep_field *h = cep_wire_hdr_fields(&(size_t){0});

	(void)h;
	mad[18] = mad[19] = 0;   /* header reserved */
	for (size_t i = 0; i < n; i++)
		if (f[i].kind == CEP_FIELD_RESERVED)
			cep_bits_set(mad + CEP_MAD_HDR_SIZE + f[i].byte, f[i].bit, f[i].width, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cep_wire_stats st;
	enum cep_wire_error why = CEP_WIRE_ERR_COUNT, why2;
	struct cep_msg m, m2, guard;
	uint8_t out[CEP_MAD_SIZE], in[CEP_MAD_SIZE];
	uint64_t before = 0;
	enum cep_msg_type t;
	int rc, rc_peek;

	memset(&m, 0x6b, sizeof(m));
	memcpy(&guard, &m, sizeof(m));
	for (int e = 0; e < CEP_WIRE_ERR_COUNT; e++)
		before += cep_wire_stats_refused(&st, (enum cep_wire_error)e);
	rc = cep_msg_decode_counted(data, size, &m, &why, &st);
	rc_peek = cep_mad_peek(data, size, &t, &why2);
	(void)cep_wire_error_name(why);
	(void)cep_wire_error_str(why);
	if (rc) {
		uint64_t after = 0;

		for (int e = 0; e < CEP_WIRE_ERR_COUNT; e++)
			after += cep_wire_stats_refused(&st, (enum cep_wire_error)e);
		if (rc >= 0 || why == CEP_WIRE_ERR_OK || why >= CEP_WIRE_ERR_COUNT ||
		    memcmp(&m, &guard, sizeof(m)) != 0 || after != before + 1)
			abort();
		/* a header fault is seen by peek too, and the same one */
		if (rc_peek && (rc_peek != rc || why2 != why))
			abort();
		return 0;
	}
	if (rc_peek || t != m.type || size != CEP_MAD_SIZE)
		abort();
	(void)cep_msg_name(m.type);
	if (m.type == CEP_MSG_REJ)
		(void)cep_rej_reason_name(m.u.rej.reason);
	if (cep_msg_encode(&m, out) != 0)
		abort();
	memcpy(in, data, CEP_MAD_SIZE);
	clear_reserved(m.type, in);
	if (memcmp(in, out, CEP_MAD_SIZE) != 0)
		abort();
	memset(&m2, 0, sizeof(m2));
	if (cep_msg_decode(out, sizeof(out), &m2, NULL) != 0 || memcmp(&m, &m2, sizeof(m)) != 0)
		abort();
	return 0;
}
