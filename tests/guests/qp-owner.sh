#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script for the QP ownership check of cepd (src/service/qp_owner.c):
# each guest brings rxe0 up and runs qp-owner-guest on it, which asks the
# kernel's RDMA resource tracking who owns QPs of two child processes
# (argument: the qp-owner-guest binary, then the number of RESET QPs).
set -eu
. "$GB_LIB"
bin=$1
nreset=${2:-1000}
gb_rxe_up
echo "rxe0 up: gid[1] $(gb_gid 1)"
timeout 500 "$bin" rxe0 "$nreset"
