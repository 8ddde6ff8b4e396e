/* SPDX-License-Identifier: MIT */
/*
 * CM engine: names of states, events and drop reasons; the time unit of
 * IBTA timeouts; byte-order helpers; the pseudo GUID of a SIDR requester.
 * Pure functions: any thread, no lock, no state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_internal.h"
#include "core/table_internal.h"

/* ---- names ---------------------------------------------------------------- */

static const char *const state_names[] = {
#define X_(n) #n,
	CEP_CM_STATE_MAP(X_)
#undef X_
};
static const char *const lap_names[] = {
#define X_(n) #n,
	CEP_CM_LAP_STATE_MAP(X_)
#undef X_
};
static const char *const event_names[] = {
#define X_(n, s) #n,
	CEP_CM_EVENT_MAP(X_)
#undef X_
};
static const char *const event_strs[] = {
#define X_(n, s) s,
	CEP_CM_EVENT_MAP(X_)
#undef X_
};
static const char *const drop_names[] = {
#define X_(n, s) #n,
	CEP_CM_DROP_MAP(X_)
#undef X_
};

const char *cep_cm_state_name(unsigned s)
{
	return s < CEP_CM_STATE_COUNT ? state_names[s] : "?";
}
const char *cep_cm_lap_state_name(unsigned s)
{
	return s < CEP_CM_LAP_STATE_COUNT ? lap_names[s] : "?";
}
const char *cep_cm_event_name(unsigned t)
{
	return t < CEP_CM_EVENT_COUNT ? event_names[t] : "?";
}
const char *cep_cm_event_str(unsigned t)
{
	return t < CEP_CM_EVENT_COUNT ? event_strs[t] : "unknown event";
}
const char *cep_cm_drop_name(unsigned w)
{
	return w < CEP_CM_DROP_COUNT ? drop_names[w] : "?";
}

/* ---- small helpers ----------------------------------------------------------- */

uint64_t cep_cm_time_us(unsigned t)
{
	if (t > 31)
		t = 31;
	/* 4.096 us * 2^t = 4096 ns << t */
	return ((uint64_t)4096 << t) / 1000u;
}

uint32_t cm_ms(unsigned t)
{
	uint64_t us = cep_cm_time_us(t);
	uint64_t ms = (us + 999) / 1000;

	return ms ? (uint32_t)ms : 1;
}

uint32_t cm_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t cm_be64(const uint8_t *p)
{
	return (uint64_t)cm_be32(p) << 32 | cm_be32(p + 4);
}

void cm_put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

/* Pseudo GUID naming a SIDR requester (SIDR_REQ carries no CA GUID). */
uint64_t cm_sidr_source(const struct cep_mad_addr *from)
{
	uint64_t h = 0xcbf29ce484222325ull ^ from->lid;

	for (int i = 0; i < 16; i++)
		h = (h ^ from->gid[i]) * 0x100000001b3ull;
	return h | 1;
}
