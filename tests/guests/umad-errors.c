/* SPDX-License-Identifier: MIT */
/*
 * Host-side checks of cep_umad_open's argument and device errors: they need
 * no RDMA device (and pass the same way on a host that has one).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cep/transport.h>
#include <cep/umad.h>

static int failures;
#define CHECK(cond, ...) do { \
	if (!(cond)) { failures++; printf("FAIL line %d: ", __LINE__); \
		printf(__VA_ARGS__); printf("\n"); } } while (0)

static int fake_send(struct cep_transport *t, const uint8_t *m, size_t l,
		     const struct cep_mad_addr *to)
{
	(void)t; (void)m; (void)l; (void)to;
	return 0;
}

int main(void)
{
	struct cep_transport *t = (struct cep_transport *)0x1;
	struct cep_umad_attr a;
	struct cep_umad_stats st;
	static const struct cep_transport_ops fake_ops = { .send = fake_send };
	struct cep_transport fake = { .ops = &fake_ops };
	int ret;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.dev_name = "cep-no-such-dev";
	a.port_num = 1;
	a.gid_index = CEP_UMAD_GID_AUTO;

	ret = cep_umad_open(NULL, &t);
	CHECK(ret == -EINVAL, "NULL attr: %d", ret);
	ret = cep_umad_open(&a, NULL);
	CHECK(ret == -EINVAL, "NULL out: %d", ret);
	a.size = 4;
	ret = cep_umad_open(&a, &t);
	CHECK(ret == -EINVAL, "size 4: %d", ret);
	a.size = sizeof(a);
	a.gid_index = -2;
	ret = cep_umad_open(&a, &t);
	CHECK(ret == -EINVAL, "gid_index -2: %d", ret);
	a.gid_index = 256;
	ret = cep_umad_open(&a, &t);
	CHECK(ret == -EINVAL, "gid_index 256: %d", ret);
	a.gid_index = CEP_UMAD_GID_AUTO;
	ret = cep_umad_open(&a, &t);
	CHECK(ret == -ENODEV, "unknown device: %d", ret);
	CHECK(t == (struct cep_transport *)0x1, "out written on failure");

	ret = cep_umad_get_stats(&fake, &st);
	CHECK(ret == -EINVAL, "stats of a non-umad transport: %d", ret);
	ret = cep_umad_get_stats(NULL, &st);
	CHECK(ret == -EINVAL, "stats of NULL: %d", ret);

	printf("umad-errors: %s\n", failures ? "FAILED" : "OK");
	return failures ? 1 : 0;
}
