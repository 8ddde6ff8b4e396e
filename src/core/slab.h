/* SPDX-License-Identifier: MIT */
/*
 * Fixed-size object caches for what the table indexes (CEPs, key entries,
 * QP records): objects carved from chunks that double from 64 KiB up to
 * 2 MiB, the big ones aligned and advised so the kernel may back them with
 * huge pages: a lookup in a million-entry table then costs cache misses,
 * not page walks as well. A freed object is reused by the next allocation
 * of its cache; memory goes back to the system when the table is destroyed.
 * In sanitizer builds every object is its own malloc, so ASan, LSan and
 * TSan see each one's life.
 *
 * Threads: any. alloc and free take the cache's mutex (a free comes from
 * an RCU callback, after a grace period: no reader holds the object).
 */
#ifndef CEP_SLAB_H
#define CEP_SLAB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

/* Bytes libcep holds in mappings of its own (object caches, big index
 * maps), which malloc's statistics do not see. Relaxed: statistics only. */
extern _Atomic size_t cep_mapped_bytes;

struct cep_slab {
	pthread_mutex_t lock;
	size_t size;         /* object size, a multiple of 16 */
	void *free;          /* free objects, linked through their first word */
	char *bump, *end;    /* the rest of the newest chunk */
	struct cep_slab_chunk {
		void *p;
		size_t len;
	} *chunks;           /* every chunk, for fini */
	size_t nchunks, cap;
	size_t bytes;        /* chunk bytes held (statistics) */
};

void cep_slab_init(struct cep_slab *s, size_t size);
/* Unmaps every chunk: every object must have been freed (or abandoned). */
void cep_slab_fini(struct cep_slab *s);
/* A zeroed object, 16-byte aligned, or NULL. */
void *cep_slab_alloc(struct cep_slab *s);
void cep_slab_free(struct cep_slab *s, void *obj);

#endif /* CEP_SLAB_H */
