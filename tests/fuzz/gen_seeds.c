/* SPDX-License-Identifier: MIT */
/*
 * Writes the fuzz seed corpus: the golden vectors of tests/wire (every
 * message with all fields at their maximum, alternating bits 0xaa/0x55 and
 * zero), plus truncated and header-damaged variants. Usage: gen-seeds DIR.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../wire/golden.h"

static int put(const char *dir, const char *name, const uint8_t *p, size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n) {
		perror(path);
		return 1;
	}
	return fclose(f) != 0;
}

int main(int argc, char **argv)
{
	static const uint8_t fills[] = { 0xff, 0xaa, 0x55, 0x00 };
	uint8_t pat[CEP_CM_DATA_SIZE], mad[CEP_MAD_SIZE];
	char name[64];
	int err = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: gen-seeds DIR\n");
		return 2;
	}
	mkdir(argv[1], 0755);
	for (size_t i = 0; i < G_NMSGS; i++) {
		for (size_t p = 0; p < sizeof(fills); p++) {
			memset(pat, fills[p], sizeof(pat));
			g_build(&g_msgs[i], pat, 0x1234 + p, mad);
			snprintf(name, sizeof(name), "%s-%02x", cep_msg_name(g_msgs[i].type), fills[p]);
			err |= put(argv[1], name, mad, sizeof(mad));
		}
		snprintf(name, sizeof(name), "%s-short", cep_msg_name(g_msgs[i].type));
		err |= put(argv[1], name, mad, 200);
		mad[2] = 1;
		snprintf(name, sizeof(name), "%s-classver", cep_msg_name(g_msgs[i].type));
		err |= put(argv[1], name, mad, sizeof(mad));
	}
	return err;
}
