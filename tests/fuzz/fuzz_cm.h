/* SPDX-License-Identifier: MIT */
/*
 * The fuzz-cm program format, shared by the target (fuzz_cm.c) and the seed
 * generator (gen_cm_seeds.c). An input is one header byte followed by
 * operations; each operation is an opcode byte (taken modulo FZ_NOPS) and a
 * fixed number of argument bytes (missing bytes read as 0), so a mutation
 * changes one operation and leaves the rest of the program in step.
 */
#ifndef CEP_FUZZ_CM_H
#define CEP_FUZZ_CM_H

#include <stddef.h>
#include <stdint.h>

/* Header byte. */
#define FZ_H_WORKERS2 0x01 /* 2 workers per node (the races between workers) */
#define FZ_H_AUTO_MRA_A 0x02
#define FZ_H_AUTO_MRA_B 0x04
#define FZ_H_CHANNEL_A 0x08 /* node A has an event channel from the start */
#define FZ_H_CHANNEL_B 0x10

/* Nodes and peers an argument can name. */
enum { FZ_A = 0, FZ_B = 1, FZ_C = 2 };

/* X(name, argument bytes). Arguments in the comment: t = ticket selector,
 * n = node (A/B), q = QPN selector, s = service selector. */
#define FZ_OP_MAP(X) \
	X(CREATE_ID, 2)    /* n, channel? */ \
	X(LISTEN, 2)       /* t, s (bit 7: masked) */ \
	X(CONNECT, 5)      /* t, q, peer, timing profile, flags */ \
	X(ACCEPT, 3)       /* t, q, flags */ \
	X(REJECT, 2)       /* t, reason */ \
	X(MRA, 2)          /* t, service timeout */ \
	X(RTU, 1)          /* t */ \
	X(DISCONNECT, 1)   /* t */ \
	X(DREP, 1)         /* t */ \
	X(LAP, 2)          /* t, response timeout */ \
	X(APR, 2)          /* t, status */ \
	X(SIDR_REQ, 4)     /* t, peer, s, timing */ \
	X(SIDR_REP, 2)     /* t, status */ \
	X(DESTROY_ID, 2)   /* t, mode (0 async, 1 sync, 2 listener, 3 again) */ \
	X(QP_DESTROY, 2)   /* n, q */ \
	X(QP_REGISTER, 2)  /* n, q */ \
	X(CHANNEL, 2)      /* n, action (poll all, poll one, destroy, create) */ \
	X(CM_RESTART, 1)   /* n: destroy the CM (ids left in it) and make a new one */ \
	X(RAW, 8)          /* type, to, local, remote, qpn, guid, misc, tid */ \
	X(FAULTS, 4)       /* loss, duplicate, reorder, delay */ \
	X(ADVANCE, 1)      /* step */ \
	X(POLICY, 4)       /* n, on REQ/REP, on the rest, extra */ \
	X(RACE, 0)         /* the next two operations run at once */ \
	X(LOOKUPS, 1)      /* in a RACE: a reader of every table until the other op settles */ \
	X(CORE_CREATE, 1)  /* slot */ \
	X(CORE_BIND, 2)    /* slot, q */ \
	X(CORE_UNBIND, 1)  /* slot */ \
	X(CORE_DESTROY, 1) /* slot */ \
	X(CORE_QP_CYCLE, 1) /* q: destroy begin, unregister, register */

enum fz_op {
#define FZ_OP_ENUM_(n, a) FZ_##n,
	FZ_OP_MAP(FZ_OP_ENUM_)
#undef FZ_OP_ENUM_
	FZ_NOPS
};

static const uint8_t fz_op_args[FZ_NOPS] = {
#define FZ_OP_ARGS_(n, a) a,
	FZ_OP_MAP(FZ_OP_ARGS_)
#undef FZ_OP_ARGS_
};

static const char *const fz_op_names[FZ_NOPS] = {
#define FZ_OP_NAME_(n, a) #n,
	FZ_OP_MAP(FZ_OP_NAME_)
#undef FZ_OP_NAME_
};

/* Ticket selectors: the low 7 bits pick among the candidate ids of the
 * operation (modulo their number, in creation order); bit 7 picks from
 * the end, so "the newest" stays the newest when ids are added before. */
#define FZ_T_LAST 0x80

/* CONNECT flags. */
#define FZ_C_MANUAL_RTU 0x01
#define FZ_C_ALT_PATH 0x02
#define FZ_C_PDATA 0x04
#define FZ_C_SID1 0x08  /* the second service ID */
#define FZ_C_UC 0x10    /* UC instead of RC */
/* ACCEPT flags. */
#define FZ_A_MANUAL_DREP 0x01
/* CHANNEL actions. */
enum { FZ_CH_POLL_ALL, FZ_CH_POLL_ONE, FZ_CH_DESTROY, FZ_CH_CREATE };
/* DESTROY_ID modes. */
enum { FZ_D_ASYNC, FZ_D_SYNC, FZ_D_LISTENER, FZ_D_AGAIN };

/* POLICY: what a node does by itself when an event comes (in the callback,
 * or when the main thread polls a channel). Byte 1 = on REQ (low nibble) |
 * on REP (high nibble); byte 2 = FZ_P_* bits | the QPN to accept on << 5;
 * byte 3 = FZ_PX_* bits. */
enum { FZ_P_REQ_NOTHING, FZ_P_REQ_ACCEPT, FZ_P_REQ_REJECT, FZ_P_REQ_MRA, FZ_P_REQ_RETURN1,
       FZ_P_REQ_DESTROY, FZ_P_REQ_N };
enum { FZ_P_REP_NOTHING, FZ_P_REP_REJECT, FZ_P_REP_MRA, FZ_P_REP_RTU, FZ_P_REP_RETURN1,
       FZ_P_REP_N };
#define FZ_P_END_DESTROY 0x01  /* REJ, *_ERROR, TIMEWAIT_EXIT, QP_DESTROYED: destroy */
#define FZ_P_DREP 0x02         /* DREQ_RECEIVED: cep_cm_drep */
#define FZ_P_APR 0x04          /* LAP_RECEIVED: cep_cm_apr */
#define FZ_P_SIDR_REP 0x08     /* SIDR_REQ_RECEIVED: cep_cm_sidr_rep */
#define FZ_P_DISCONNECT 0x10   /* ESTABLISHED / RTU_RECEIVED: disconnect */
#define FZ_PX_UNLISTEN 0x01    /* REQ_RECEIVED: destroy the listener (one connection) */

/* RAW argument 0: the message (enum cep_msg_type order, modulo 12; 0 is a
 * MAD of random bytes from the other arguments). */

/* Timing profiles of CONNECT (index modulo FZ_NPROFILES). */
struct fz_profile {
	uint8_t remote_tmo, local_tmo, retries, pkt_life, ack_tmo;
};
static const struct fz_profile fz_profiles[] = {
	{ 15, 15, 3, 8, 10 },  /* the scenario tests' */
	{ 8, 8, 1, 5, 8 },     /* short, one retry */
	{ 12, 13, 15, 10, 14 }, /* many retries */
	{ 20, 20, 2, 12, 16 }, /* seconds */
	{ 31, 31, 15, 31, 31 }, /* the largest the wire allows */
	{ 0, 0, 0, 0, 0 },     /* all zero (librdmacm-like defaults, or shortest) */
};
#define FZ_NPROFILES (sizeof(fz_profiles) / sizeof(fz_profiles[0]))

/* ADVANCE steps in milliseconds (index modulo FZ_NSTEPS). */
static const uint32_t fz_steps_ms[] = { 1, 2, 5, 10, 17, 34, 100, 300, 1000, 5000,
					60000, 3600000 };
#define FZ_NSTEPS (sizeof(fz_steps_ms) / sizeof(fz_steps_ms[0]))

/* ---- writing programs (the seed generator, regression notes) ---------- */

struct fz_prog {
	uint8_t b[4096];
	size_t n;
};

static inline void fz_begin(struct fz_prog *p, uint8_t header)
{
	p->n = 0;
	p->b[p->n++] = header;
}

/* Append one operation; @args must hold fz_op_args[op] bytes. */
static inline void fz_emit(struct fz_prog *p, enum fz_op op, const uint8_t *args)
{
	if (p->n + 1 + fz_op_args[op] > sizeof(p->b))
		return;
	p->b[p->n++] = (uint8_t)op;
	for (unsigned i = 0; i < fz_op_args[op]; i++)
		p->b[p->n++] = args[i];
}

#define FZ_EMIT(p, op, ...) fz_emit((p), FZ_##op, (const uint8_t[]){ __VA_ARGS__, 0 })

#endif /* CEP_FUZZ_CM_H */
