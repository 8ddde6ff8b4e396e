/* SPDX-License-Identifier: MIT */
/*
 * libcep umbrella header: every public header of libcep but <cep/verbs.h>,
 * which needs libibverbs' <infiniband/verbs.h> and is included on its own
 * by programs that use the verbs glue. See libcep(7).
 */
#ifndef CEP_CEP_H
#define CEP_CEP_H

#include <cep/export.h>
#include <cep/version.h>
#include <cep/table.h>
#include <cep/wire.h>
#include <cep/transport.h>
#include <cep/clock.h>
#include <cep/cm.h>
#include <cep/qp.h>
#include <cep/fabric.h>
#include <cep/umad.h>
#include <cep/pcap.h>
#include <cep/rdma_cm.h>
#include <cep/sa.h>

#endif /* CEP_CEP_H */
