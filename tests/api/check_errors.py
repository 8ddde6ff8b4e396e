#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Error lists: for every public function that returns int, the negative
errno codes its header comment names are exactly the codes its man page's
RETURN VALUE section gives it.

Header: the comment right above the declaration (declarations in a row
share the comment above the first; a comment on the declaration's own
line counts too). Every -EXXX in it is a return value, except one written
as an event's status ("status -ETIMEDOUT").
Man page: the page whose NAME lists the function; in its RETURN VALUE
section, every definition-list entry whose term names **function**()
gives it the -EXXX codes of its definition. Prose outside such entries
counts for nothing, so write each function's list in an entry.
Usage: check_errors.py INCLUDE_DIR GEN_INCLUDE_DIR MAN_DIR"""
import glob
import os
import re
import sys

inc, gen_inc, man = sys.argv[1:4]
CODE = re.compile(r'(?<![\w-])-(E[A-Z0-9]+)\b')
fail = []


def codes(text):
    text = re.sub(r'\bstatus\s+-E[A-Z0-9]+', ' ', text)
    return set(CODE.findall(text))


def header_lists(path):
    """{function: (codes, line)} for the int functions declared in @path."""
    lines = open(path).read().split('\n')
    out = {}
    for i, line in enumerate(lines):
        m = re.match(r'CEP_EXPORT\s+int\s+(cep_\w+)\s*\(', line)
        if not m:
            continue
        # the declaration's own lines, up to its ';'
        j, decl = i, line
        while ';' not in lines[j] and j + 1 < len(lines):
            j += 1
            decl += '\n' + lines[j]
        doc = ' '.join(re.findall(r'/\*(.*?)\*/', decl, re.S))
        # up over the declarations before it, to the comment above them
        k = i - 1
        while k >= 0:
            t = lines[k].strip()
            if t.endswith('*/'):
                start = k
                while start >= 0 and '/*' not in lines[start]:
                    start -= 1
                doc += ' ' + '\n'.join(lines[start:k + 1])
                break
            if not t or t.startswith('#') or '{' in t or '}' in t:
                break
            k -= 1
        out[m.group(1)] = (codes(doc), i + 1)
    return out


def man_lists():
    """{function: (page, codes or None when the page gives it no entry)}."""
    out = {}
    for page in sorted(glob.glob(os.path.join(man, '*.3.md'))):
        text = open(page).read()
        names = text.split('\n# NAME\n')[1].split('\n# ')[0].split(' - ')[0]
        fns = [n.strip() for n in names.replace('\n', ' ').split(',') if n.strip()]
        rv = text.split('\n# RETURN VALUE\n')
        rv = rv[1].split('\n# ')[0] if len(rv) > 1 else ''
        entries = {}
        # definition lists: a term line, then ":   definition" (indented lines follow)
        for m in re.finditer(r'^(\S[^\n]*)\n((?::   [^\n]*\n)(?:(?:    |\n(?=    ))[^\n]*\n?)*)',
                             rv + '\n', re.M):
            term, definition = m.group(1), m.group(2)
            for fn in re.findall(r'\*\*(cep_\w+)\*\*\(\)', term):
                entries.setdefault(fn, set()).update(codes(definition))
        for fn in fns:
            out[fn] = (os.path.basename(page), entries.get(fn))
    return out


headers = {}
for h in sorted(glob.glob(os.path.join(inc, 'cep', '*.h')) +
                glob.glob(os.path.join(gen_inc, 'cep', '*.h'))):
    for fn, (cs, line) in header_lists(h).items():
        headers[fn] = (cs, f'{os.path.relpath(h, os.path.dirname(inc))}:{line}')
pages = man_lists()


def fmt(cs):
    return ', '.join('-' + c for c in sorted(cs)) or 'none'


checked = 0
for fn, (hcodes, where) in sorted(headers.items()):
    if fn not in pages:
        fail.append(f'{fn} ({where}) is on no man page')
        continue
    page, mcodes = pages[fn]
    checked += 1
    if mcodes is None:
        if hcodes:
            fail.append(f'{fn}: the header ({where}) gives {fmt(hcodes)}; {page} has no '
                        f'RETURN VALUE entry for it')
        continue
    if hcodes != mcodes:
        fail.append(f'{fn}: the header ({where}) gives {fmt(hcodes)}; {page} gives '
                    f'{fmt(mcodes)} (only in header: {fmt(hcodes - mcodes)}; only in '
                    f'man page: {fmt(mcodes - hcodes)})')

for f in fail:
    print('FAIL:', f)
print(f'{checked} int functions: header and man page error lists compared, '
      f'{len(fail)} differ')
sys.exit(1 if fail or not checked else 0)
