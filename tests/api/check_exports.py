#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The public API is one list, kept three ways: the CEP_EXPORT declarations
in include/cep/*.h, the global names of src/libcep.map, and the dynamic
symbols libcep.so defines. This fails unless all three are equal, every
exported function carries a CEP_x.y version, and <cep/cep.h> includes
every public header but the verbs glue (which needs libibverbs' header).
Usage: check_exports.py INCLUDE_DIR GENERATED_INCLUDE_DIR MAPFILE LIBCEP_SO"""
import glob
import os
import re
import subprocess
import sys

inc, gen_inc, mapfile, lib = sys.argv[1:5]
fail = []

# CEP_EXPORT <type> name( ... possibly over several lines.
decl_re = re.compile(r'\bCEP_EXPORT\b[^;{]*?\b(cep_\w+)\s*\(', re.S)
declared = {}
headers = sorted(glob.glob(os.path.join(inc, 'cep', '*.h')) +
                 glob.glob(os.path.join(gen_inc, 'cep', '*.h')))
for h in headers:
    text = re.sub(r'/\*.*?\*/', ' ', open(h).read(), flags=re.S)
    for name in decl_re.findall(text):
        declared[name] = os.path.basename(h)

# Version script: names between "global:" and "local:" of every node.
maptext = re.sub(r'/\*.*?\*/', ' ', open(mapfile).read(), flags=re.S)
mapped = {}
for node, body in re.findall(r'(\w[\w.]*)\s*\{(.*?)\}', maptext, flags=re.S):
    body = body.split('local:')[0].replace('global:', '')
    for name in re.findall(r'([\w*?]+)\s*;', body):
        if '*' in name or '?' in name:
            fail.append(f'{mapfile}: node {node} has a wildcard ({name}): list names')
        mapped[name] = node

out = subprocess.run(['nm', '-D', '--defined-only', lib], check=True,
                     capture_output=True, text=True).stdout
exported = {}
for line in out.splitlines():
    parts = line.split()
    if len(parts) < 3 or parts[1] == 'A':   # 'A': the version nodes themselves
        continue
    name, _, version = parts[2].partition('@')
    exported[name] = version.lstrip('@')

for name in sorted(set(declared) - set(mapped)):
    fail.append(f'{name} (cep/{declared[name]}) is declared CEP_EXPORT but not in '
                f'{os.path.basename(mapfile)}: append it in a new stanza (docs/abi.md)')
for name in sorted(set(mapped) - set(declared)):
    fail.append(f'{name} is in {os.path.basename(mapfile)} but no public header declares it '
                f'CEP_EXPORT')
for name in sorted(set(exported) - set(declared)):
    fail.append(f'{name} is exported by libcep.so but is not public API')
for name in sorted(set(declared) & set(mapped) - set(exported)):
    fail.append(f'{name} is public and mapped but libcep.so does not define it')
for name, version in sorted(exported.items()):
    if not re.fullmatch(r'CEP_\d+\.\d+', version):
        fail.append(f'{name} is exported without a CEP_x.y version ({version or "none"})')
    elif name in mapped and mapped[name] != version:
        fail.append(f'{name} has version {version}, the map says {mapped[name]}')

umbrella = open(os.path.join(inc, 'cep', 'cep.h')).read()
included = set(re.findall(r'#include <cep/(\w+\.h)>', umbrella))
for h in headers:
    base = os.path.basename(h)
    if base not in included and base not in ('cep.h', 'verbs.h'):
        fail.append(f'<cep/cep.h> does not include <cep/{base}>')

for f in fail:
    print('FAIL:', f)
print(f'{len(declared)} public functions, {len(mapped)} in the map, '
      f'{len(exported)} exported')
sys.exit(1 if fail or not declared else 0)
