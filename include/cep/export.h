/* SPDX-License-Identifier: MIT */
/*
 * libcep export macro: the one way a symbol leaves libcep.so.
 * The library is built with -fvisibility=hidden; only declarations marked
 * CEP_EXPORT (all named cep_*) are visible, and libcep.map lists them again.
 */
#ifndef CEP_EXPORT_H
#define CEP_EXPORT_H

#if defined(CEP_BUILDING_LIBRARY) && defined(__GNUC__)
#define CEP_EXPORT __attribute__((visibility("default")))
#else
#define CEP_EXPORT
#endif

#endif /* CEP_EXPORT_H */
