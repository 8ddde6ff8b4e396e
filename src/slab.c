/* SPDX-License-Identifier: MIT */
/*
 * Object caches for indexed objects; see slab.h. A chunk is 2 MiB, aligned
 * to 2 MiB and advised MADV_HUGEPAGE (a hint: with transparent huge pages
 * off the chunk is ordinary memory). Objects never straddle chunks.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "slab.h"
#include "tsan.h"

#define CHUNK (2u << 20)

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

/* A 2 MiB-aligned chunk: map 4 MiB, keep the aligned 2 MiB in it. */
static char *chunk_map(void)
{
	char *p = mmap(NULL, 2 * CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *a;

	if (p == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)p + CHUNK - 1) & ~((uintptr_t)CHUNK - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	munmap(a + CHUNK, (size_t)(p + 2 * CHUNK - (a + CHUNK)));
	(void)madvise(a, CHUNK, MADV_HUGEPAGE); /* a hint; ignored without THP */
	return a;
}

void cep_slab_fini(struct cep_slab *s)
{
	for (size_t i = 0; i < s->nchunks; i++)
		munmap(s->chunks[i], CHUNK);
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
			char *c;

			if (s->nchunks == s->cap) {
				size_t cap = s->cap ? 2 * s->cap : 16;
				void **n = realloc(s->chunks, cap * sizeof(*n));

				if (!n) {
					pthread_mutex_unlock(&s->lock);
					return NULL;
				}
				s->chunks = n;
				s->cap = cap;
			}
			c = chunk_map();
			if (!c) {
				pthread_mutex_unlock(&s->lock);
				return NULL;
			}
			s->chunks[s->nchunks++] = c;
			s->bytes += CHUNK;
			s->bump = c;
			s->end = c + CHUNK;
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
