#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Man pages: every page the build made renders with `man -l` without a
troff warning; every public function (exported by libcep.so or declared
CEP_EXPORT) has a page under its own name that names it; cepdump(1)
documents every option `cepdump --help` lists.
Usage: check_man.py BUILD_ROOT INCLUDE_DIR GEN_INCLUDE_DIR LIBCEP_SO CEPDUMP"""
import concurrent.futures
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

build, inc, gen_inc, lib, cepdump = sys.argv[1:6]
fail = []

# The pages meson installs (not whatever lies in the build directory: a
# page dropped from man/ leaves its old output behind), copied into a
# manpath laid out as installed, so ".so man3/x.3" resolves.
installed = json.load(open(os.path.join(build, 'meson-info', 'intro-installed.json')))
pages = sorted(src for src, dest in installed.items()
               if re.search(r'/man/man[1-9]/[^/]+$', dest))
root = tempfile.mkdtemp(prefix='cep-man-')
for p in pages:
    sec = p.rsplit('.', 1)[1]
    os.makedirs(os.path.join(root, 'man' + sec), exist_ok=True)
    shutil.copy(p, os.path.join(root, 'man' + sec))

env = dict(os.environ, LC_ALL='C.UTF-8', MANWIDTH='80', MAN_DISABLE_SECCOMP='1')
env.pop('MANPAGER', None)
env.pop('PAGER', None)


def render(rel):
    """man -l on a page of the temporary manpath: (text, warnings)."""
    r = subprocess.run(['man', '--warnings', '-l', rel], cwd=root, env=env,
                       capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr.strip()


rendered = {}
rels = [os.path.join('man' + n.rsplit('.', 1)[1], n) for n in map(os.path.basename, pages)]
with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    for rel, (rc, text, warn) in zip(rels, pool.map(render, rels)):
        if rc != 0 or warn or not text.strip():
            fail.append(f'{rel}: man -l exit {rc}, warnings: {warn or "-"}, '
                        f'{len(text)} chars')
        rendered[os.path.basename(rel)] = text.replace('\u2010', '-').replace('\u2212', '-')

# Public functions: the union of what is exported and what is declared.
nm = subprocess.run(['nm', '-D', '--defined-only', lib], check=True,
                    capture_output=True, text=True).stdout
public = {l.split()[2].split('@')[0] for l in nm.splitlines()
          if len(l.split()) >= 3 and l.split()[1] != 'A'}
for h in glob.glob(os.path.join(inc, 'cep', '*.h')) + \
        glob.glob(os.path.join(gen_inc, 'cep', '*.h')):
    text = re.sub(r'/\*.*?\*/', ' ', open(h).read(), flags=re.S)
    public |= set(re.findall(r'\bCEP_EXPORT\b[^;{]*?\b(cep_\w+)\s*\(', text, re.S))
for fn in sorted(public):
    page = fn + '.3'
    if page not in rendered:
        fail.append(f'{fn} has no man page: add it to the NAME section of its '
                    f'group page in man/ and document it there')
    elif not re.search(r'\b%s\b' % fn, rendered[page].split('DESCRIPTION')[0]):
        fail.append(f'man {fn} opens a page whose NAME/SYNOPSIS does not show {fn}')

# cepdump(1) against cepdump --help.
helptext = subprocess.run([cepdump, '--help'], capture_output=True, text=True).stdout
opts = set(re.findall(r'(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b', helptext))
page = rendered.get('cepdump.1', '')
for o in sorted(opts):
    if not re.search(r'(?<![\w-])%s\b' % re.escape(o), page):
        fail.append(f'cepdump --help lists {o} but cepdump(1) does not document it')
if not opts:
    fail.append('cepdump --help lists no options')

shutil.rmtree(root)
for f in fail:
    print('FAIL:', f)
print(f'{len(pages)} pages rendered, {len(public)} public functions, '
      f'{len(opts)} cepdump options checked')
sys.exit(1 if fail or not pages else 0)
