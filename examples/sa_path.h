/* SPDX-License-Identifier: MIT */
/*
 * --sa CA:PORT --sa-dest LID|GID of cep-storm and cep-bench connect: one
 * PathRecord from the subnet administrator, asked once per process, for
 * every connection of a storm (its SLID/SGID and DLID/DGID become the two
 * simulated ports, cep_sa_path_to_conn fills each REQ). Demo code, not
 * part of libcep's API.
 */
#ifndef CEP_EXAMPLES_SA_PATH_H
#define CEP_EXAMPLES_SA_PATH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cep/sa.h>

struct sa_path_opt {
	char ca[64];         /* "" : libibumad's default CA */
	uint8_t port;        /* 1.. */
	int dest_is_gid;
	uint16_t dlid;
	uint8_t dgid[16];
};

/* Parse "CA:PORT" (CA may be empty) and "LID" or a GID ("fe80::..."):
 * 0 or -EINVAL. */
int sa_path_parse(const char *ca_port, const char *dest, struct sa_path_opt *o);
/* Query the path from the port to the destination (by LIDs, or by GIDs
 * as the kernel's cma_query_ib_route asks: SGID, DGID, P_Key, one
 * reversible path), with the port's P_Key. 0, or a negative errno with a
 * reason in @why. A record whose two ends are the same port: -EINVAL. */
int sa_path_fetch(const struct sa_path_opt *o, struct cep_sa_path *rec,
		  char *why, size_t why_len);
/* One line: the record's ends and what the CM takes from it. */
void sa_path_print(FILE *f, const char *prog, const struct sa_path_opt *o,
		   const struct cep_sa_path *rec);
/* The CA GUID of a simulated port that stands for @gid: its interface ID. */
uint64_t sa_path_guid(const uint8_t gid[16]);

#endif
