#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hand-written facts in the README, docs/ and the headers against their
sources, so none goes stale (the man pages get them generated:
man/meson.build):
- every list of symbol-version nodes (`CEP_0.1`, ...) names exactly the
  nodes of src/libcep.map;
- every statement of the default index names CEP_TABLE_INDEX_BUILTIN of
  src/core/table_internal.h;
- the README's `apt install` line installs every package of debian/control;
- docs/quickstart.md's sample output is what examples/hello_callback prints
  (this version; comm IDs and the order of the two sides' lines aside).
Usage: check_docs.py SOURCE_ROOT VERSION HELLO_CALLBACK"""
import os
import re
import subprocess
import sys

root, version, hello = sys.argv[1:4]
fail = []


def read(rel):
    with open(os.path.join(root, rel), encoding='utf-8') as f:
        return f.read()


def texts():
    """README, docs/*.md, man/*.md (sources) and the public headers."""
    rels = ['README.md']
    for d, ext in (('docs', '.md'), ('man', '.md'), ('include/cep', '.h')):
        rels += sorted(os.path.join(d, n) for n in os.listdir(os.path.join(root, d))
                       if n.endswith(ext))
    return [(r, read(r)) for r in rels]


# 1. Symbol-version nodes.
nodes = re.findall(r'^(CEP_\d+\.\d+)\s*\{', read('src/libcep.map'), re.M)
if not nodes:
    fail.append('src/libcep.map: no version node found')
want = ', '.join('`%s`' % n for n in nodes)
# A list is two or more backquoted nodes in a row, or one in parentheses
# ("(`CEP_0.1`)"), optionally ending in ", ...". docs/abi.md tells the
# history of each node and is exempt; so is the map's own example.
node_list = re.compile(r'\(?(?:nodes\s+)?`CEP_\d+\.\d+`(?:,\s*`CEP_\d+\.\d+`)*(?:,\s*\.\.\.)?\)?')
for rel, text in texts():
    if rel == 'docs/abi.md':
        continue
    for m in node_list.finditer(text):
        s = m.group(0)
        listed = re.findall(r'`(CEP_\d+\.\d+)`', s)
        is_list = len(listed) > 1 or (s.startswith('(') and s.endswith(')')) or '...' in s
        if is_list and listed != nodes:
            line = text.count('\n', 0, m.start()) + 1
            fail.append(f'{rel}:{line}: lists the version nodes {s!r}; src/libcep.map has '
                        f'{want} (in the man pages write @CEP_VERSION_NODES@)')

# 2. The default index.
builtin = re.search(r'#define CEP_TABLE_INDEX_BUILTIN CEP_TABLE_INDEX_(\w+)',
                    read('src/core/table_internal.h'))
default = {'CK': 'ck', 'RCULFHASH': 'rculfhash'}.get(builtin.group(1) if builtin else '')
if not default:
    fail.append('src/core/table_internal.h: CEP_TABLE_INDEX_BUILTIN not found')
# Each place that states the default, as (file, pattern whose group 1 names it).
DEFAULT_STATED = [
    ('README.md', r'indexes \(ConcurrencyKit `ck_rhs` shards with liburcu reclamation by\s+'
                  r'default|indexes \(liburcu `(rculfhash)`[^)]*by\s+default'),
    ('docs/architecture.md', r'without either, \*\*(\w+)\*\*'),
    ('include/cep/table.h', r"else libcep's default \((\w+)\)"),
]
for rel, pat in DEFAULT_STATED:
    m = re.search(pat, read(rel))
    if not m:
        fail.append(f'{rel}: the statement of the default index ({pat!r}) is gone: '
                    f'update it and this test')
        continue
    said = m.group(1) or ('ck' if 'ck_rhs' in m.group(0) else None)
    if said != default:
        fail.append(f'{rel}: says the default index is {said}; CEP_TABLE_INDEX_BUILTIN '
                    f'is {default}')
for rel, text in texts():
    for m in re.finditer(r'default[^.]{0,40}?\b(rculfhash|ck)\b[^.]{0,20}?\bindex|'
                         r'indexes \(liburcu\s+\*\*rculfhash\*\*\)', text):
        if default not in m.group(0):
            line = text.count('\n', 0, m.start()) + 1
            fail.append(f'{rel}:{line}: {m.group(0)!r} does not name the default index '
                        f'({default})')

# 3. The README installs every package.
packages = re.findall(r'^Package:\s*(\S+)', read('debian/control'), re.M)
apt = [l for l in read('README.md').splitlines() if l.startswith('apt install')]
if len(apt) != 1:
    fail.append(f'README.md: {len(apt)} "apt install" lines, expected 1')
else:
    for p in packages:
        if f'../{p}_*.deb' not in apt[0]:
            fail.append(f'README.md: "apt install" leaves out {p} (debian/control)')

# 4. The quick start's sample output.
qs = read('docs/quickstart.md')
m = re.search(r'The output of `hello_callback`[^\n]*\n\n```\n(.*?)```', qs, re.S)
if not m:
    fail.append('docs/quickstart.md: the sample output of hello_callback is gone')
else:
    sample = m.group(1).splitlines()
    r = subprocess.run([hello], capture_output=True, text=True, timeout=60)
    got = r.stdout.splitlines()
    if r.returncode != 0:
        fail.append(f'{hello} exited {r.returncode}')
    first = f'libcep {version} (built with headers {version})'
    if not sample or sample[0] != first:
        fail.append(f'docs/quickstart.md: sample output begins {sample[:1]}, '
                    f'hello_callback prints {first!r}')

    def norm(lines):
        return sorted(re.sub(r'0x[0-9a-f]{8}', '0x?', l) for l in lines)
    if norm(sample) != norm(got):
        fail.append('docs/quickstart.md: the sample output is not what hello_callback '
                    'prints:\n  sample: %s\n  actual: %s' % (norm(sample), norm(got)))

for f in fail:
    print('FAIL:', f)
print(f'{len(nodes)} version nodes, default index {default}, {len(packages)} packages, '
      f'quick-start output checked against libcep {version}')
sys.exit(1 if fail else 0)
