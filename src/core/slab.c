/* SPDX-License-Identifier: MIT */
/*
 * Object caches for indexed objects; see slab.h. Chunks grow from 64 KiB to
 * 2 MiB; a 2 MiB one is aligned to 2 MiB and advised MADV_HUGEPAGE (a hint:
 * with transparent huge pages off it is ordinary memory). Objects never
 * straddle chunks.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "slab.h"
#include "tsan.h"

#define CHUNK (2u << 20)
#define FIRST_CHUNK (64u << 10) /* then 128, 256, 512 KiB, 1 MiB, then 2 MiB each */

_Atomic size_t cep_mapped_bytes;

#if defined(CEP_UNDER_TSAN) || defined(__SANITIZE_ADDRESS__)
#define SLAB_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_MALLOC 1
#endif
#endif

void cep_slab_init(struct cep_slab *s, size_t size)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	s->size = (size + 15) & ~(size_t)15;
}

#ifdef SLAB_MALLOC

void cep_slab_fini(struct cep_slab *s)
{
	pthread_mutex_destroy(&s->lock);
}

void *cep_slab_alloc(struct cep_slab *s)
{
	return calloc(1, s->size);
}

void cep_slab_free(struct cep_slab *s, void *obj)
{
	(void)s;
	free(obj);
}

#else

/* A chunk of @len bytes; a 2 MiB one is 2 MiB-aligned (map 4 MiB, keep
 * the aligned 2 MiB in it) and advised for huge pages. */
static char *chunk_map(size_t len)
{
	char *p, *a;

	if (len < CHUNK) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		a = p == MAP_FAILED ? NULL : p;
	} else {
		p = mmap(NULL, 2 * CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		a = (char *)(((uintptr_t)p + CHUNK - 1) & ~((uintptr_t)CHUNK - 1));
		if (a > p)
			munmap(p, (size_t)(a - p));
		munmap(a + CHUNK, (size_t)(p + 2 * CHUNK - (a + CHUNK)));
		(void)madvise(a, CHUNK, MADV_HUGEPAGE); /* a hint; ignored without THP */
	}
	if (a)
		atomic_fetch_add_explicit(&cep_mapped_bytes, len, memory_order_relaxed);
	return a;
}

void cep_slab_fini(struct cep_slab *s)
{
	for (size_t i = 0; i < s->nchunks; i++) {
		munmap(s->chunks[i].p, s->chunks[i].len);
		atomic_fetch_sub_explicit(&cep_mapped_bytes, s->chunks[i].len,
					  memory_order_relaxed);
	}
	free(s->chunks);
	pthread_mutex_destroy(&s->lock);
}

void *cep_slab_alloc(struct cep_slab *s)
{
	void *obj;

	pthread_mutex_lock(&s->lock);
	obj = s->free;
	if (obj) {
		memcpy(&s->free, obj, sizeof(void *));
	} else {
		if (s->bump + s->size > s->end) {
			/* 64 KiB, doubling: small tables stay small */
			size_t len = s->nchunks < 5 ? (size_t)FIRST_CHUNK << s->nchunks : CHUNK;
			char *c;

			if (s->nchunks == s->cap) {
				size_t cap = s->cap ? 2 * s->cap : 16;
				struct cep_slab_chunk *n = realloc(s->chunks, cap * sizeof(*n));

				if (!n) {
					pthread_mutex_unlock(&s->lock);
					return NULL;
				}
				s->chunks = n;
				s->cap = cap;
			}
			c = chunk_map(len);
			if (!c) {
				pthread_mutex_unlock(&s->lock);
				return NULL;
			}
			s->chunks[s->nchunks].p = c;
			s->chunks[s->nchunks++].len = len;
			s->bytes += len;
			s->bump = c;
			s->end = c + len;
		}
		obj = s->bump;
		s->bump += s->size;
	}
	pthread_mutex_unlock(&s->lock);
	memset(obj, 0, s->size);
	return obj;
}

void cep_slab_free(struct cep_slab *s, void *obj)
{
	if (!obj)
		return;
	pthread_mutex_lock(&s->lock);
	memcpy(obj, &s->free, sizeof(void *));
	s->free = obj;
	pthread_mutex_unlock(&s->lock);
}

#endif
