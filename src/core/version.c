/* SPDX-License-Identifier: MIT */
/*
 * cep_version(): the release this copy of libcep was built as (meson's
 * project version, through the generated <cep/version.h>).
 */
#include <cep/version.h>

unsigned cep_version(void)
{
	return CEP_VERSION_NUMBER;
}
