/* SPDX-License-Identifier: MIT */
/*
 * ThreadSanitizer annotations for the synchronisation TSan cannot see.
 * liburcu 0.13 and ConcurrencyKit use inline assembly and uninstrumented
 * library code, so RCU publication, grace periods and ck_ring hand-offs are
 * invisible to TSan. These macros state the happens-before edges they
 * provide; outside TSan builds they compile to nothing.
 */
#ifndef CEP_TSAN_H
#define CEP_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define CEP_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CEP_UNDER_TSAN 1
#endif
#endif

#ifdef CEP_UNDER_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
/* Edge: everything before cep_tsan_release(x) happens before everything
 * after a later cep_tsan_acquire(x). */
#define cep_tsan_release(addr) __tsan_release((void *)(addr))
#define cep_tsan_acquire(addr) __tsan_acquire((void *)(addr))
#else
#define cep_tsan_release(addr) ((void)(addr))
#define cep_tsan_acquire(addr) ((void)(addr))
#endif

/* The sync object that stands for "a grace period elapsed": every reader
 * releases it before rcu_read_unlock, every RCU callback acquires it first.
 * So a reader's accesses happen before the callback that frees what it read. */
extern char cep_tsan_grace_period;
/* Released at the end of every RCU callback, acquired when rcu_barrier
 * returns: the callbacks' work happens before the barrier's caller goes on. */
extern char cep_tsan_callbacks_done;

#endif /* CEP_TSAN_H */
