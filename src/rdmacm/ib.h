/* SPDX-License-Identifier: MIT */
/*
 * librdmacm on libcep, InfiniBand pieces (ib.c): paths given with
 * RDMA_OPTION_IB_PATH, IPoIB neighbours' hardware addresses and
 * interfaces, AF_IB addresses, path records for rdma_cm's route. Pure
 * functions or reads of sysfs/netlink behind seams (a sysroot, a parser of
 * the netlink answer), so each can be tested without an HCA.
 */
#ifndef RCM_IB_H
#define RCM_IB_H

#include <net/if.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/sa.h>

#include <cep/sa.h>

/* RDMA_OPTION_IB_PATH's value checked as the kernel's ucma_set_ib_path:
 * a non-empty array of struct ibv_path_data (@optlen a multiple of its
 * size), of which the first entry whose flags are exactly GMP | PRIMARY |
 * BIDIRECTIONAL is used (any other entry is skipped). 0 and that record
 * in @out, or -EINVAL. */
int rcm_ib_path_option(const void *optval, size_t optlen, struct cep_sa_path *out);

/* The 20-byte hardware address of an IPoIB neighbour: byte 0 flags, bytes
 * 1-3 the peer's QPN, bytes 4-19 its port GID. 0, or -EINVAL when @len is
 * not 20. */
int rcm_ib_hwaddr(const uint8_t *hw, size_t len, uint32_t *qpn, uint8_t gid[16]);

/* An IPoIB interface's RDMA port: /sys/class/net/IF/type is 32
 * (ARPHRD_INFINIBAND), the device is the one entry of
 * /sys/class/net/IF/device/infiniband/, the port dev_port + 1 (dev_id + 1
 * when dev_port is absent), the P_Key /sys/class/net/IF/pkey. Read under
 * $CEP_RDMACM_SYSROOT when set. 0; -ENODEV (no such interface, or not
 * IPoIB); -EINVAL (a file that does not parse). */
struct rcm_ib_netdev {
	char dev[64];
	uint8_t port_num;
	uint16_t pkey;
};
int rcm_ib_netdev(const char *ifname, struct rcm_ib_netdev *out);

/* Find @dst's neighbour on interface @ifindex in a netlink RTM_NEWNEIGH
 * dump (@buf, @len bytes, as recv() gave it): 0 and its 20-byte hardware
 * address in @hw; -ENOENT not in this buffer; -EAGAIN the neighbour is
 * there but not (yet) reachable (NUD_INCOMPLETE/FAILED, no address);
 * 1 when the buffer ends the dump (NLMSG_DONE) without it. */
int rcm_ib_neigh_parse(const void *buf, size_t len, int ifindex,
		       const struct sockaddr *dst, uint8_t hw[20]);
/* Dump the kernel's neighbour table (RTM_GETNEIGH) and find @dst on
 * @ifindex: 0 and @hw, -ENOENT (not known: the kernel has not resolved it
 * yet), -EAGAIN (incomplete), or -errno of the socket. */
int rcm_ib_neigh(int ifindex, const struct sockaddr *dst, uint8_t hw[20]);

/* An AF_IB address: its GID (sib_addr), service ID and P_Key, host order.
 * 0, or -EAFNOSUPPORT when @a is not AF_IB. */
int rcm_ib_sockaddr(const struct sockaddr *a, uint8_t gid[16], uint64_t *sid,
		    uint16_t *pkey);

/* The port space an AF_IB source address binds in, as the kernel's
 * cma_select_ib_ps: the service ID under the mask's port-space part
 * (upper 48 bits) must name RDMA_PS_IB (an RDMA_PS_IB id only), TCP (a
 * TCP or IB id) or UDP (a UDP or IB id); then @sib's service ID becomes
 * that space's prefix | its port (the low 16 bits under the mask) and the
 * mask gains the port-space bits. Returns that space, or 0 (the kernel's
 * bind then fails with EPROTONOSUPPORT) with @sib untouched. */
struct sockaddr_ib;
int rcm_ib_select_ps(int id_ps, struct sockaddr_ib *sib);

/* The route's path record (id->route.path_rec) from a PathRecord. */
void rcm_ib_path_rec(const struct cep_sa_path *p, struct ibv_sa_path_rec *out);

/* The paths a REQ carries, as the receiving side sees them (the kernel's
 * cm_format_paths_from_req, which cma_ib_new_conn_id copies into the new
 * id's route): [0] the primary, [1] the alternate when the REQ has one
 * (its alternate local LID is not 0). SGID/SLID are the REQ's remote
 * (our) side, DGID/DLID its local (the requester's); flow label, hop
 * limit, traffic class, SL and rate per path; the REQ's P_Key and MTU;
 * the packet life time its local ACK timeout less one (not below 0);
 * reversible; selectors "exactly". Returns the number of paths, 1 or 2. */
struct cep_req;
int rcm_ib_paths_from_req(const struct cep_req *rq, struct ibv_sa_path_rec out[2]);

/* The inverse: a PathRecord from the route's path record. */
void rcm_ib_path_of_rec(const struct ibv_sa_path_rec *r, struct cep_sa_path *out);

/* A REQ on a route the application gave (RDMA_OPTION_IB_PATH): @p's
 * primary path, P_Key, MTU and packet life time from @rec as the kernel's
 * cm_format_req (cep_sa_path_to_conn), the path's ACK timeout from
 * @ack_delay and that life time, and the CM's address @to (LID, SL, GRH
 * from the path: GRH when the path is not subnet-local or @roce).
 * 0, or -EINVAL for a record without an MTU. */
struct cep_cm_conn_param;
struct cep_mad_addr;
int rcm_ib_conn_from_path(const struct ibv_sa_path_rec *rec, uint8_t ack_delay, int roce,
			  struct cep_cm_conn_param *p, struct cep_mad_addr *to);


/* ---- the layer on InfiniBand ports ---------------------------------- */

/* What the layer asks the system about IPoIB and the SA: the seams tests
 * replace (set before any id is used; read without a lock). */
struct cep_cm;
struct cep_sa_path;
struct rcm_port;
struct cepd_mc;
struct cepd_mc_rep;
struct rcm_ib_sys {
	/* The interface holding local address @a: 0 and its name and index,
	 * -EADDRNOTAVAIL when none does, or -errno (getifaddrs). */
	int (*ifname_of)(const struct sockaddr *a, char name[IF_NAMESIZE], int *ifindex);
	/* rcm_ib_neigh's contract. */
	int (*neigh)(int ifindex, const struct sockaddr *dst, uint8_t hw[20]);
	/* Make the kernel resolve @dst's neighbour: a datagram from @src to
	 * @dst (the discard port), as an ARP/ND trigger. 0 or -errno. */
	int (*kick)(const struct sockaddr *src, const struct sockaddr *dst);
	/* The port's SA client (cep_sa_get, a reference). */
	int (*sa_get)(const char *dev, uint8_t port_num, uint32_t timeout_ms,
		      struct cep_sa **out);
	/* InfiniBand multicast through cepd: cmr_mc's contract
	 * (src/service/remote.h). */
	int (*mc_remote)(struct cep_cm *cm, uint32_t op, const struct cepd_mc *m,
			 struct cepd_mc_rep *rep);
	/* A path query through cepd: cmr_path_query's contract. */
	int (*path_remote)(struct cep_cm *cm, uint64_t comp_mask, uint32_t flags,
			   const struct cep_sa_path *query, struct cep_sa_path *out);
};
extern struct rcm_ib_sys rcm_ib_sys;

/* @p's CM when it is cepd's (the port's SA requests are cepd's then:
 * the SA is asked there, and the port's memberships are the node's),
 * else NULL. Any thread. */
struct cep_cm *rcm_port_cepd(struct rcm_port *p);

/* One PathRecord Get for an id on InfiniBand port @p (rdma_resolve_route):
 * through cepd when the port's CM is cepd's (the SA is asked there: the
 * umad devices are root's, as the kernel's rdma_cm asks it for any user),
 * else of the process's SA client for the port (opened with @timeout_ms
 * per attempt). 0 or cep_sa_path_query's errors (cepd's refusal). Blocks
 * for the SA; takes rcm.lock when it opens the client. */
int rcm_ib_path_query(struct rcm_port *p, uint32_t timeout_ms, uint64_t comp_mask,
		      const struct cep_sa_path *query, struct cep_sa_path *out);

/* The port GID of IPoIB interface @ifname: its 20-byte hardware address
 * (/sys/class/net/IF/address under $CEP_RDMACM_SYSROOT), bytes 4-19.
 * 0, -ENODEV, -EINVAL. */
int rcm_ib_netdev_gid(const char *ifname, uint8_t gid[16]);

/* Local IP address @a on an IPoIB interface: 0 with the port GID, P_Key
 * and interface index; -ENODEV when @a is on no IPoIB interface. */
int rcm_ib_local(const struct sockaddr *a, uint8_t gid[16], uint16_t *pkey, int *ifindex);

/* @dst's GID from the IPoIB neighbour table of @ifindex, waiting for
 * the kernel to resolve it (triggered with rcm_ib_sys.kick, as the
 * kernel's addr.c asks the neighbour layer) for up to @timeout_ms: 0,
 * -ETIMEDOUT, or -errno of the netlink socket. Blocks the caller. */
int rcm_ib_resolve_neigh(int ifindex, const struct sockaddr *src, const struct sockaddr *dst,
			 int timeout_ms, uint8_t gid[16]);

/* The kernel's cma_query_ib_route: a PathRecord query by SGID, DGID,
 * P_Key, one reversible path and the service ID, with the QoS class
 * (IPv4: the id's ToS) or traffic class (IPv6: the source's flow info).
 * Fills @q and returns the component mask. */
struct rcm_id;
uint64_t rcm_ib_route_query(const struct rcm_id *r, struct cep_sa_path *q);

#endif /* RCM_IB_H */
