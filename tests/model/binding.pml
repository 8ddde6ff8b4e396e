/* SPDX-License-Identifier: MIT */
/*
 * Promela model of libcep's binding-word protocol (src/core/binding.c and
 * cep_destroy): bind, unbind, destroy, qp_destroy_begin, comm-ID lookup,
 * references freed after an RCU grace period. spin checks every
 * interleaving: no leak, no second binding, no binding left to a dead CEP,
 * no touch of a freed CEP. See docs/model.md.
 *
 * Variants (spin -DNAME, see run-spin.sh):
 *   PLANTED_A  bind's CAS INVALID -> cid as a load then a store
 *   PLANTED_B  the last put frees at once (no grace period)
 *   PLANTED_C  the binding's reference taken after the CAS
 *   CONCURRENT_DESTROY  another thread destroys binder 0's CEP while it binds
 *   SAME_CEP_RACE       another thread unbinds and rebinds binder 0's CEP
 *   CID_REUSE           a new CEP draws CEP 0's comm ID after it left the index
 *   FIX_REF_FIRST  bind takes the binding's reference before claiming qp_link
 *   FIX_BINDING    qp_link gets a BINDING(qpn) state that unbind cannot take
 *   FIX_QPD_CHECK  qp_destroy_begin tears down only a CEP linked to its QP
 *   OLD_PROTOCOL   without the three fixes (the protocol as first written,
 *                  which this model found flawed); by default the FIX_*
 *                  are on, as in src/core/binding.c
 *   NO_READER      leave the reader out (smaller state space)
 * Trail legend: binding 0 = INVALID, 255 = RESERVED, else a comm ID;
 * CEP c has comm ID c + 1 (the CID_REUSE CEP 2 reuses comm ID 1).
 */

/* The implemented protocol (src/core/binding.c) has all three fixes; planted
 * bug (c) replaces the first (its reference comes after the CAS). */
#ifndef OLD_PROTOCOL
#define FIX_BINDING
#define FIX_QPD_CHECK
#ifndef PLANTED_C
#define FIX_REF_FIRST
#endif
#endif

#ifdef CID_REUSE
#define NCEP 3
#else
#define NCEP 2
#endif
#define NONE 255

/* the QP's binding word */
#define INVALID  0
#define RESERVED 255

/* a CEP's qp_link word (one QP: LINKED means LINKED(that QPN)) and state */
mtype = { UNLINKED, LINKED, DEAD, BINDING };
mtype = { LIVE, DESTROYING };

/* results (negative errnos in C) */
#define OK         0
#define ESTALE     1
#define EALREADY   2
#define ESHUTDOWN  3
#define EISCONN    4
#define ENOENT     6

byte  binding = INVALID;
byte  rc[NCEP];        /* reference count */
mtype state[NCEP];
mtype qp_link[NCEP];
byte  cid[NCEP];       /* comm ID: the key in the comm-ID index */
bit   in_index[NCEP];  /* findable by comm-ID lookup */
bit   created[NCEP];
bit   pending[NCEP];   /* refcount reached 0: handed to call_rcu */
bit   freed[NCEP];     /* memory released: never to be touched again */
byte  gp_wait[NCEP];   /* readers (bit per pid) this CEP's grace period awaits */
byte  readers;         /* pids inside an RCU read-side section (bit mask) */

/* ghosts: not in the implementation, only for the properties */
bit  believes[NCEP];   /* bind returned 0 and nobody moved qp_link since */
bit  ever_bound[NCEP]; /* bind's CAS INVALID -> cid succeeded once */
bit  reserved;         /* qp_destroy_begin's XCHG happened */
byte ndone;            /* workers finished */

/* Every access to a CEP's memory. */
#define touch(c) assert(created[c] && !freed[c])

inline rcu_lock() {
	readers = readers | (1 << _pid)
}

/* Leaving the read side ends this reader's part of every grace period. */
inline rcu_unlock() {
	atomic {
		readers = readers & ~(1 << _pid);
		for (i : 0 .. NCEP - 1) {
			gp_wait[i] = gp_wait[i] & ~(1 << _pid)
		}
		i = 0
	}
}

/* The last put: the CEP must be unreachable and unbound by now. */
inline on_zero(c) {
	assert(!in_index[c] && state[c] == DESTROYING);
	assert(qp_link[c] != LINKED && qp_link[c] != BINDING);
	assert(binding != cid[c] || c == 2);
#ifdef PLANTED_B
	freed[c] = 1;
	printf("p%d: cep%d ref 0: freed at once\n", _pid, c)
#else
	pending[c] = 1;
	gp_wait[c] = readers;
	printf("p%d: cep%d ref 0: call_rcu\n", _pid, c)
#endif
}

inline get(c) {
	atomic {
		touch(c); assert(rc[c] > 0);
		rc[c]++;
		printf("p%d: get cep%d -> ref %d\n", _pid, c, rc[c])
	}
}

inline put(c) {
	atomic {
		touch(c); assert(rc[c] > 0);
		rc[c]--;
		printf("p%d: put cep%d -> ref %d\n", _pid, c, rc[c]);
		if
		:: rc[c] == 0 -> on_zero(c)
		:: else
		fi
	}
}

/* Increment-if-not-zero: an RCU reader that found c in the index. */
inline get_unless_zero(c, ok) {
	atomic {
		touch(c); assert(readers & (1 << _pid));
		if
		:: rc[c] > 0 -> rc[c]++; ok = 1
		:: else -> ok = 0
		fi;
		printf("p%d: get_unless_zero cep%d: %d (ref %d)\n", _pid, c, ok, rc[c])
	}
}

/* Comm-ID index lookup (one linearisable rculfhash lookup). */
inline index_lookup(id, out) {
	atomic {
		out = NONE;
		for (i : 0 .. NCEP - 1) {
			if
			:: in_index[i] && cid[i] == id -> out = i
			:: else
			fi
		}
		i = 0;
		printf("p%d: index lookup comm ID %d -> cep%d (255: none)\n", _pid, id, out)
	}
}

/* cep_lookup_comm_id: RCU read side, find, get_unless_zero; NONE if not
 * found. */
inline lookup(id, out) {
	rcu_lock();
	index_lookup(id, out);
	if
	:: out != NONE ->
		get_unless_zero(out, lk);
		if
		:: !lk -> out = NONE
		:: else
		fi
	:: else
	fi;
	rcu_unlock()
}

/* CAS binding cid -> INVALID: fails harmlessly on RESERVED or another cid. */
inline cas_binding_to_invalid(c) {
	atomic {
		if
		:: binding == cid[c] -> binding = INVALID
		:: else
		fi;
		printf("p%d: CAS binding %d -> INVALID: binding now %d\n", _pid, cid[c], binding)
	}
}

/* cep_destroy: the caller holds a reference. */
inline destroy(c, r) {
	atomic {
		touch(c);
		if
		:: state[c] == LIVE -> state[c] = DESTROYING; r = OK
		:: else -> r = EALREADY
		fi;
		printf("p%d: destroy cep%d: %d (0: won)\n", _pid, c, r)
	}
	if
	:: r == OK ->
		atomic {
			touch(c);
			dold = qp_link[c]; qp_link[c] = DEAD; believes[c] = 0;
			printf("p%d: XCHG cep%d qp_link %e -> DEAD\n", _pid, c, dold)
		}
		if
		:: dold == LINKED ->
			/* the link's own QP record: no lookup (issue 17) */
			cas_binding_to_invalid(c);
			put(c) /* the binding's reference */
		:: dold == BINDING ->
			/* the binder's CAS to LINKED fails on DEAD and it undoes
			 * its own word: only the reference is ours */
			put(c)
		:: else
		fi;
		atomic {
			touch(c); in_index[c] = 0;
			printf("p%d: cep%d removed from the index\n", _pid, c)
		}
		put(c) /* the table's reference */
	:: else
	fi;
	dold = 0
}

/* cep_bind(c, the QP): the caller holds a reference. */
inline bind(c, r) {
#ifdef FIX_REF_FIRST
	get(c); /* the binding's reference, before qp_link is claimed */
#endif
	atomic {
		touch(c);
		if
		:: qp_link[c] == UNLINKED ->
#ifdef FIX_BINDING
			qp_link[c] = BINDING;
#else
			qp_link[c] = LINKED;
#endif
			r = OK
		:: qp_link[c] == DEAD -> r = ESTALE
		:: qp_link[c] == LINKED || qp_link[c] == BINDING -> r = EALREADY
		fi;
		printf("p%d: bind cep%d: CAS qp_link UNLINKED -> %e: %d (0: ok)\n",
		       _pid, c, qp_link[c], r)
	}
#ifdef FIX_REF_FIRST
	if
	:: r != OK -> put(c)
	:: else
	fi;
#endif
	if
	:: r == OK ->
#if !defined(PLANTED_C) && !defined(FIX_REF_FIRST)
		get(c); /* the binding's reference, before the CAS */
#endif
#ifdef PLANTED_A
		/* planted bug (a): load, then store */
		bold = binding;
		if
		:: bold == INVALID ->
			atomic {
				binding = cid[c]; ever_bound[c] = 1;
				printf("p%d: bind cep%d: STORE binding %d (loaded INVALID)\n",
				       _pid, c, cid[c])
			}
		:: else
		fi;
#else
		atomic {
			bold = binding;
			if
			:: bold == INVALID -> binding = cid[c]; ever_bound[c] = 1
			:: else
			fi;
			printf("p%d: bind cep%d: CAS binding INVALID -> %d: found %d\n",
			       _pid, c, cid[c], bold)
		}
#endif
#ifdef PLANTED_C
		get(c); /* planted bug (c): the reference after the CAS */
#endif
		if
		:: bold != INVALID ->
			/* take the link back; if a destroy took it, it owns the ref */
			atomic {
				touch(c);
				if
				:: qp_link[c] == LINKED || qp_link[c] == BINDING ->
					qp_link[c] = UNLINKED; believes[c] = 0; bok = 1
				:: else -> bok = 0
				fi;
				printf("p%d: bind cep%d: CAS qp_link back to UNLINKED: %d\n",
				       _pid, c, bok)
			}
			if
			:: bok -> put(c)
			:: else
			fi;
			if
			:: bold == RESERVED -> destroy(c, br); r = ESHUTDOWN
			:: else -> r = EISCONN
			fi
		:: else ->
			/* a successful bind takes effect at this re-read */
			atomic {
				touch(c);
#ifdef FIX_BINDING
				if
				:: qp_link[c] == BINDING -> qp_link[c] = LINKED; bok = 1
				:: else -> bok = 0
				fi;
#else
				bok = (qp_link[c] == LINKED);
#endif
				believes[c] = bok;
				printf("p%d: bind cep%d: re-read qp_link %e: %d (1: bound)\n",
				       _pid, c, qp_link[c], bok)
			}
			if
			:: !bok -> cas_binding_to_invalid(c); r = ESTALE
			:: else
			fi
		fi
	:: else
	fi;
	bold = 0; bok = 0; br = 0
}

/* cep_unbind: the caller holds a reference. */
inline unbind(c, r) {
#ifdef FIX_BINDING
	/* The implemented protocol (issue 17): take the link to BINDING, so
	 * the QP record the link carries stays ours and no rebind starts;
	 * clear the word; then BINDING -> UNLINKED and put, unless a destroy
	 * took it (DEAD) and dropped the reference itself. */
	atomic {
		touch(c);
		if
		:: qp_link[c] == LINKED -> qp_link[c] = BINDING; believes[c] = 0; r = OK
		:: else -> r = ENOENT
		fi;
		printf("p%d: unbind cep%d: CAS qp_link LINKED -> BINDING: %d (0: ok)\n",
		       _pid, c, r)
	}
	if
	:: r == OK ->
		cas_binding_to_invalid(c);
		atomic {
			touch(c);
			if
			:: qp_link[c] == BINDING -> qp_link[c] = UNLINKED; lk = 1
			:: else -> lk = 0
			fi;
			printf("p%d: unbind cep%d: CAS qp_link BINDING -> UNLINKED: %d\n",
			       _pid, c, lk)
		}
		if
		:: lk == 1 -> put(c)
		:: else
		fi;
		lk = 0
	:: else
	fi
#else
	atomic {
		touch(c);
		if
		:: qp_link[c] == LINKED -> qp_link[c] = UNLINKED; believes[c] = 0; r = OK
		:: else -> r = ENOENT
		fi;
		printf("p%d: unbind cep%d: CAS qp_link LINKED -> UNLINKED: %d (0: ok)\n",
		       _pid, c, r)
	}
	if
	:: r == OK -> cas_binding_to_invalid(c); put(c)
	:: else
	fi
#endif
}

/* cep_create: fully initialised with the table's and the caller's
 * reference, then published in the comm-ID index. */
inline create(c, id) {
	atomic {
		assert(!created[c]);
		cid[c] = id; rc[c] = 2; state[c] = LIVE; qp_link[c] = UNLINKED;
		created[c] = 1; in_index[c] = 1;
		printf("p%d: create cep%d, comm ID %d, ref 2, in the index\n", _pid, c, id)
	}
}

/* Locals of every worker (inline bodies share them). */
#define WORKER_LOCALS byte i, r, bold, bok, br, dold, lk, c, found

/* Create, bind, maybe unbind, destroy (binder 1 may instead leave its CEP
 * to cep_table_destroy), drop its own reference. */
proctype binder(byte me; bit may_keep) {
	WORKER_LOCALS;
	create(me, me + 1);
	bind(me, r);
	if
	:: r == OK -> unbind(me, r)
	:: r == OK
	:: r != OK
	fi;
	if
	:: destroy(me, r)
	:: may_keep
	fi;
	put(me);
	ndone++
}

/* cep_qp_destroy_begin with the default teardown (cep_destroy at once),
 * or nothing: the QP outlives the run and the final check sees its word. */
proctype qp_destroyer() {
	WORKER_LOCALS;
	if
	:: atomic {
		bold = binding; binding = RESERVED; reserved = 1;
		printf("p%d: qp_destroy_begin: XCHG binding %d -> RESERVED\n", _pid, bold)
	   }
	:: bold = INVALID
	fi;
	if
	:: bold != INVALID && bold != RESERVED ->
		lookup(bold, found);
#ifdef FIX_QPD_CHECK
		/* the comm ID may name a newer CEP: tear down only one whose
		 * link still names this QP */
		if
		:: found != NONE ->
			atomic {
				touch(found);
				r = (qp_link[found] == LINKED || qp_link[found] == BINDING)
			}
			if
			:: !r -> put(found); found = NONE
			:: else
			fi
		:: else
		fi;
#endif
		if
		:: found != NONE ->
			/* a CEP never bound to this QP must not be torn down */
			assert(ever_bound[found]);
			destroy(found, r);
			put(found) /* the lookup's reference */
		:: else /* a concurrent destroy owns it */
		fi
	:: else
	fi;
	ndone++
}

/* Comm-ID lookup, use, put. */
proctype reader() {
	WORKER_LOCALS;
	if
	:: bold = 1
	:: bold = 2
	fi;
	lookup(bold, found);
	if
	:: found != NONE ->
		atomic { touch(found); assert(rc[found] > 0); r = (state[found] == LIVE) }
		put(found)
	:: else
	fi;
	ndone++
}

#ifdef SAME_CEP_RACE
/* Another thread unbinds CEP 0 and binds it again while binder 0 binds. */
proctype rebinder() {
	WORKER_LOCALS;
	lookup(1, found);
	if
	:: found != NONE ->
		unbind(found, r);
		if
		:: r == OK -> bind(found, r)
		:: else
		fi;
		put(found)
	:: else
	fi;
	ndone++
}
#define NWORKERS_R 1
#else
#define NWORKERS_R 0
#endif

#ifdef CONCURRENT_DESTROY
/* Another thread (the CM on a REJ, or the user) destroys CEP 0 while
 * binder 0 binds it. */
proctype killer() {
	WORKER_LOCALS;
	lookup(1, found);
	if
	:: found != NONE -> destroy(found, r); put(found)
	:: else
	fi;
	ndone++
}
#define NWORKERS_K 1
#else
#define NWORKERS_K 0
#endif

#ifdef CID_REUSE
/* A CEP created later draws CEP 0's comm ID once it left the index. */
proctype reuser() {
	WORKER_LOCALS;
	atomic { created[0] && !in_index[0] -> create(2, 1) }
	destroy(2, r);
	put(2);
	ndone++
}
#define NWORKERS_C 1
#else
#define NWORKERS_C 0
#endif

#ifdef NO_READER
#define NWORKERS (3 + NWORKERS_R + NWORKERS_K + NWORKERS_C)
#else
#define NWORKERS (4 + NWORKERS_R + NWORKERS_K + NWORKERS_C)
#endif

/* call_rcu: free once every reader present at the last put has left. */
active proctype reclaimer() {
end_idle:
	do
	:: atomic {
		(pending[0] && gp_wait[0] == 0) -> pending[0] = 0; freed[0] = 1;
		printf("rcu: cep0 freed\n") }
	:: atomic {
		(pending[1] && gp_wait[1] == 0) -> pending[1] = 0; freed[1] = 1;
		printf("rcu: cep1 freed\n") }
#ifdef CID_REUSE
	:: atomic {
		(pending[2] && gp_wait[2] == 0) -> pending[2] = 0; freed[2] = 1;
		printf("rcu: cep2 freed\n") }
#endif
	od
}

/* Invariants in every reachable state: this process may run its one atomic
 * step at any point of any interleaving. (A never claim would halve the
 * states but turns off pan's check for invalid end states.) */
#define BOUND_OK(c) (!believes[c] || binding == cid[c] || binding == RESERVED)
#define NOT_BOUND_DEAD(c) (!created[c] || binding != cid[c] || \
			   (rc[c] > 0 && !freed[c]))
active proctype invariant() {
end_inv:
	atomic {
		assert(!(believes[0] && believes[1]));          /* two CEPs bound */
		assert(BOUND_OK(0) && BOUND_OK(1));             /* bound, word disagrees */
		assert(NOT_BOUND_DEAD(0) && NOT_BOUND_DEAD(1)); /* word names a dead CEP */
		assert(!reserved || binding == RESERVED)        /* RESERVED is terminal */
	}
}

/* Start the workers; when all are done, check the table as cep_table_check
 * does, destroy what is left (cep_table_destroy) and require every CEP
 * freed. */
init {
	WORKER_LOCALS;
	atomic {
		run binder(0, 0);
		run binder(1, 1);
		run qp_destroyer();
#ifndef NO_READER
		run reader();
#endif
#ifdef SAME_CEP_RACE
		run rebinder();
#endif
#ifdef CONCURRENT_DESTROY
		run killer();
#endif
#ifdef CID_REUSE
		run reuser();
#endif
		printf("p3 binder 0, p4 binder 1, p5 qp_destroy_begin, then reader / extras\n")
	}
	(ndone == NWORKERS);
	atomic {
		assert(readers == 0);
		/* the binding word: INVALID, RESERVED, or a live CEP linked here */
		assert(binding == INVALID || binding == RESERVED ||
		       (binding == 1 && created[0] && !freed[0] && state[0] == LIVE &&
			qp_link[0] == LINKED && believes[0]) ||
		       (binding == 2 && created[1] && !freed[1] && state[1] == LIVE &&
			qp_link[1] == LINKED && believes[1]));
		for (c : 0 .. NCEP - 1) {
			if
			:: created[c] && state[c] == LIVE ->
				/* live: findable, only the table's and binding's refs */
				assert(in_index[c] && !pending[c] && !freed[c]);
				assert(qp_link[c] != BINDING);
				assert(qp_link[c] != LINKED || binding == cid[c]);
				assert(rc[c] == 1 + (qp_link[c] == LINKED))
			:: created[c] && state[c] == DESTROYING ->
				/* destroyed and every reference put: nothing leaked */
				assert(!in_index[c] && qp_link[c] == DEAD && rc[c] == 0)
			:: else
			fi
		}
	}
	/* cep_table_destroy */
	for (c : 0 .. NCEP - 1) {
		if
		:: created[c] && state[c] == LIVE -> destroy(c, r)
		:: else
		fi
	}
	(pending[0] == 0 && pending[1] == 0
#ifdef CID_REUSE
	 && pending[2] == 0
#endif
	);
	for (c : 0 .. NCEP - 1) {
		assert(!created[c] || (freed[c] && rc[c] == 0))
	}
	assert(binding == INVALID || binding == RESERVED)
}
