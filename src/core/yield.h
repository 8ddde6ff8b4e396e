/* SPDX-License-Identifier: MIT */
/*
 * Random yields on libcep's read and write paths, compiled in only for
 * stress builds (-Dstress_yield=true), to widen race windows the way
 * liburcu's tests/common/debug-yield.h does. No-ops otherwise.
 */
#ifndef CEP_YIELD_H
#define CEP_YIELD_H

#ifdef CEP_STRESS_YIELD
void cep_stress_yield(void);
#define CEP_YIELD() cep_stress_yield()
#else
#define CEP_YIELD() ((void)0)
#endif

#endif /* CEP_YIELD_H */
