/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep without a device: rdma_bind_addr's answers compared
 * with the kernel's rdma_cm, as measured in the guests (Debian 12, 6.1):
 * a loopback address (127.0.0.1, 127.0.0.2, ::1) binds, on no device
 * (id->verbs NULL), keeps the address and gets an ephemeral port, and the
 * id listens. libfabric's verbs provider binds 127.0.0.1 in fi_getinfo()
 * for a passive endpoint without an address (fi_pingpong's server); libcep
 * said EADDRNOTAVAIL and fi_getinfo() failed with -61 ENODATA.
 * The layer's objects are linked in. Usage: test-rdmacm-addr.
 */
#include <arpa/inet.h>

#include "../common/check.h"
#include "rdmacm.h"

static void bind_loopback(int fam, const char *text)
{
	struct rcm_channel *ch = rcm_channel_new();
	struct sockaddr_storage ss;
	struct rcm_id *r;
	char got[INET6_ADDRSTRLEN] = "";

	CHECK(ch != NULL);
	r = rcm_id_new(ch, NULL, RDMA_PS_TCP, IBV_QPT_RC);
	CHECK(r != NULL);
	memset(&ss, 0, sizeof(ss));
	ss.ss_family = (sa_family_t)fam;
	if (fam == AF_INET)
		CHECK_EQ(inet_pton(fam, text, &((struct sockaddr_in *)&ss)->sin_addr), 1);
	else
		CHECK_EQ(inet_pton(fam, text, &((struct sockaddr_in6 *)&ss)->sin6_addr), 1);
	CHECK_EQ(rdma_bind_addr(&r->id, (struct sockaddr *)&ss), 0);
	CHECK(r->id.verbs == NULL);
	CHECK(rdma_get_src_port(&r->id) != 0);
	inet_ntop(fam, fam == AF_INET ? (void *)&r->id.route.addr.src_sin.sin_addr :
					(void *)&r->id.route.addr.src_sin6.sin6_addr, got, sizeof(got));
	CHECK(!strcmp(got, text));
	CHECK_EQ(rdma_destroy_id(&r->id), 0);
	rcm_channel_free(ch);
}

int main(void)
{
	bind_loopback(AF_INET, "127.0.0.1");
	bind_loopback(AF_INET, "127.0.0.2");
	bind_loopback(AF_INET6, "::1");
	return check_done("rdmacm-addr");
}
