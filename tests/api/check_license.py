#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""License lines: every source, header and script of the tree starts with
an SPDX-License-Identifier line (C and C-comment files: line 1
"/* SPDX-License-Identifier: ID */"; shell, Python, meson and other
"#"-comment files: line 1, or line 2 after a "#!" line,
"# SPDX-License-Identifier: ID"), and debian/copyright agrees: the same
licenses, the LICENSE file's copyright line and text.
Usage: check_license.py SOURCE_ROOT"""
import os
import re
import subprocess
import sys

root = sys.argv[1]
fail = []

C_STYLE = ('.c', '.h', '.h.in', '.pml', '.map')
HASH_STYLE = ('.sh', '.py', '.supp')
HASH_NAMES = ('meson.build', 'meson_options.txt')
# Generated outputs kept in the tree, not sources (bench/plot.py writes them).
SKIP_DIRS = ('docs/benchmarks/',)


def tree_files():
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '-co', '--exclude-standard'],
                             check=True, capture_output=True, text=True).stdout
        return [f for f in out.splitlines() if os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            rel = os.path.relpath(d, root)
            dirs[:] = [x for x in dirs if not (x.startswith(('build', 'obj-', '.'))
                       or (rel == 'debian' and x not in ('source',)))]
            files += [os.path.normpath(os.path.join(rel, n)) for n in names]
        return files


ids = {}
checked = 0
for f in sorted(tree_files()):
    if f.startswith(SKIP_DIRS):
        continue
    path = os.path.join(root, f)
    try:
        with open(path, encoding='utf-8') as fh:
            head = [fh.readline().rstrip('\n') for _ in range(2)]
    except (UnicodeDecodeError, OSError):
        continue
    base = os.path.basename(f)
    if f.endswith(C_STYLE):
        m = re.fullmatch(r'/\* SPDX-License-Identifier: (\S+) \*/', head[0])
        want = 'line 1: /* SPDX-License-Identifier: ID */'
    elif f.endswith(HASH_STYLE) or base in HASH_NAMES or head[0].startswith('#!'):
        line = head[1] if head[0].startswith('#!') else head[0]
        m = re.fullmatch(r'# SPDX-License-Identifier: (\S+)', line)
        want = ('line 2 (after #!)' if head[0].startswith('#!') else 'line 1') + \
            ': # SPDX-License-Identifier: ID'
    else:
        continue
    checked += 1
    if not m:
        fail.append(f'{f}: no SPDX line ({want})')
    else:
        ids.setdefault(m.group(1), []).append(f)

# debian/copyright (machine-readable format): Files paragraphs name their
# license, a stand-alone License paragraph carries the text.
SPDX_TO_DEBIAN = {'MIT': 'Expat'}
cr = open(os.path.join(root, 'debian', 'copyright')).read()
paras = [p for p in re.split(r'\n\s*\n', cr) if p.strip()]
if not paras[0].startswith('Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/'):
    fail.append('debian/copyright: not in the machine-readable format 1.0')
declared = set()
texts = {}
for p in paras:
    fields = dict(re.findall(r'^(\S+):[ \t]*(.*(?:\n[ \t].*)*)', p, re.M))
    lic = fields.get('License', '')
    short, _, body = lic.partition('\n')
    if 'Files' in fields:
        declared.add(short.strip())
        if 'Copyright' not in fields:
            fail.append(f'debian/copyright: Files {fields["Files"]} has no Copyright')
        copyright_line = fields.get('Copyright', '').strip()
    elif body.strip():
        texts[short.strip()] = body
for spdx in ids:
    name = SPDX_TO_DEBIAN.get(spdx, spdx)
    if name not in declared:
        fail.append(f'SPDX {spdx} ({ids[spdx][0]} ...) is not a license of debian/copyright')
    if name not in texts:
        fail.append(f'debian/copyright has no text for {name}')


def words(s):
    return re.sub(r'\s+', ' ', s.replace('\n .\n', '\n\n')).strip()


lic = open(os.path.join(root, 'LICENSE')).read()
m = re.search(r'^Copyright \(c\) (.+)$', lic, re.M)
if not m or m.group(1).strip() not in copyright_line:
    fail.append(f'debian/copyright Copyright "{copyright_line}" is not LICENSE\'s '
                f'"{m.group(1) if m else "?"}"')
grant = lic[lic.index('Permission is hereby granted'):]
if 'Expat' in texts and words(grant) != words(texts['Expat']):
    fail.append('debian/copyright: the Expat text differs from LICENSE')

for f in fail:
    print('FAIL:', f)
print(f'{checked} sources, headers and scripts carry SPDX lines '
      f'({", ".join(f"{k}: {len(v)}" for k, v in sorted(ids.items()))})')
sys.exit(1 if fail or not checked else 0)
