/* SPDX-License-Identifier: MIT */
/*
 * The source addresses a cepd client may use on a port: the GID (by
 * index, for the MAD's GRH, or by value, a path's local GID) and the P_Key
 * (by index, for the MAD, or by value, the connection's partition).
 *
 * The rule is the kernel rdma_cm's: a GID is usable only if it is an
 * entry of the port's GID table and, on RoCE, its network device belongs
 * to the client's network namespace (rdma_cm binds an id to the
 * namespace of the process that created it and finds GIDs through that
 * namespace's devices); a P_Key only if it is in the port's P_Key table.
 * On the in-process fabric a port has one GID (index 0) and one P_Key
 * (0xffff at index 0). addr.c's head comment says how cepd decides that
 * a device is the client's namespace's, and why a local user cannot make
 * it decide wrongly.
 *
 * Contract: any client thread may call the checks concurrently; the
 * port's state is made by addr_port_open() before any client exists and
 * freed by addr_port_close() after the last is gone. A client's network
 * namespace is the one its process was in at the HELLO
 * (addr_client_open()). Checks block for a few system calls; none waits
 * for another client beyond a short mutex.
 */
#ifndef CEP_SERVICE_ADDR_H
#define CEP_SERVICE_ADDR_H

#include <stdint.h>

struct port;
struct cepd_ident;

/* What a client's checks need, taken at its HELLO (its network namespace);
 * opaque. */
struct addr_client;

/* At port start, before clients: 0 or -errno (the port is not served). */
int addr_port_open(struct port *p);
void addr_port_close(struct port *p);

/* At the HELLO of a client of port @p (identity complete): 0 and *out,
 * or -errno (the client is refused: -ESRCH its process is gone). */
int addr_client_open(struct port *p, const struct cepd_ident *id, struct addr_client **out);
void addr_client_close(struct addr_client *ac);

/* May the client send from GID index @index of its port? 0; -EINVAL (no
 * such entry, or an empty one); -EACCES (the entry's device is not in the
 * client's network namespace); -EAGAIN (that namespace changed during
 * every reading of it: try again); another -errno when the port's table
 * cannot be read (-ENODEV: the device is gone). */
int addr_gid_index(struct port *p, struct addr_client *ac, unsigned index);
/* The same for GID value @gid (network order), granted when any entry of
 * that value is: -EINVAL when none is an entry of the port's table. */
int addr_gid(struct port *p, struct addr_client *ac, const uint8_t gid[16]);
/* P_Key index @index is a valid (non-zero) entry of the port's table: 0,
 * -EINVAL, or another -errno when the table cannot be read. */
int addr_pkey_index(struct port *p, unsigned index);
/* P_Key @pkey (its low 15 bits) is in the port's table: 0, -EINVAL, or
 * another -errno when the table cannot be read. */
int addr_pkey(struct port *p, uint16_t pkey);

/* ---- The RoCE rule apart from the device (addr.c; tests/service/addr.c) ---- */

#define ADDR_IFNAMSIZ 16

/* A RoCE GID entry as the kernel shows it: value, the ifindex of its
 * network device (in whatever namespace that device is) and that
 * device's name. */
struct addr_gid_entry {
	uint8_t gid[16];
	uint32_t ifindex;              /* 0: no device */
	char ndev[ADDR_IFNAMSIZ];
};

/* What cepd knows of a network namespace. */
struct addr_ns_link {
	uint32_t ifindex;
	char name[ADDR_IFNAMSIZ];
	uint8_t mac[6];
	uint8_t has_mac;               /* a 6-byte hardware address */
};
struct addr_ns_addr {
	uint32_t ifindex;
	uint8_t gid[16];               /* the address as a GID (IPv4 mapped) */
};
struct addr_ns_facts {
	int owned;                     /* owned by cepd's user namespace */
	const struct addr_ns_link *links;
	unsigned nlinks;
	const struct addr_ns_addr *addrs;
	unsigned naddrs;
};

/* The verdict on entry @e for a client whose namespace is @ns: 0 or
 * -EACCES. Pure. */
int addr_roce_rule(const struct addr_gid_entry *e, const struct addr_ns_facts *ns);

/* A client as a RoCE port's HELLO makes it, without a port; and the
 * verdict addr_gid_index() would give it for entry @e (its namespace's
 * facts as they are now): 0, -EACCES, -EAGAIN, or another -errno. */
int addr_client_open_ns(const struct cepd_ident *id, struct addr_client **out);
int addr_client_entry(struct addr_client *ac, const struct addr_gid_entry *e);

#endif /* CEP_SERVICE_ADDR_H */
