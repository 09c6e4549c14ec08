#!/usr/bin/env python3
"""Include graph of src/: circles (strongly connected components) of files and folders.

Usage: python3 tools/include_graph.py [--root DIR] [--exclude src/kernels/cuda] [--edges] [--verbose]

What it reads: every file under src/ (.c .h .inc .cu .cuh) and include/amp/*.h.
A quoted include ("x/y.h") is resolved against src/ first, then include/
(the compiler's -I order); angle-bracket includes are system headers and are
ignored. Preprocessor conditions are ignored: an include under #ifdef counts.

Graph of FILES. A bare include graph has no circles (headers have include
guards and never include a .c), so a file-level circle has to say which
source file a header stands for. Here a header stands for the files that
define what it declares: there is an edge

  A -> H   when A includes H (a header or an .inc), and
  H -> C   when H is a private header (under src/) and C (a .c or .cu file)
           defines, at file scope and not static, a function or variable
           that H declares (found by name: an identifier followed by '(' or
           ending an `extern` line in H, outside braces and macros, and a definition that starts in
           column 0 in C).

The public headers (include/amp/*.h) get no H -> C edges: they declare the
whole public API, so giving them such edges would make every file that calls
one public function depend on every module of the library, and the report
would be one circle of nearly everything. A call through the public API is
the library using itself the way a user does; the layering is about the
private headers.

So `tensor.c` including `autograd/node.h`, whose amp__node_release is defined
in `autograd/engine.c`, which includes `tensor/tensor_impl.h`, defined in
`tensor/tensor.c`, is the circle tensor.c -> node.h -> engine.c ->
tensor_impl.h -> tensor.c: the same thing as "the tensor layer calls
autograd and autograd calls the tensor layer". A .c file and the header that
declares its functions are therefore one node in effect (they sit in the
same component whenever the .c includes its own header). The report counts
components of more than one SOURCE file (.c/.cu) and lists them, saying
whether their sources sit in one folder (a module split over files: a header
several of them define and include) or cross folders (layers that call each
other: what the layering forbids); headers in a component are listed with it.

Graph of FOLDERS. src/<dir> (one level: src/tensor, src/kernels, src/ops,
...; src/kernels/cpu and src/kernels/cuda count as src/kernels, include/amp
is the public API and is left out) with an edge A -> B when a file in A
includes a file in B. Circles among folders are reported the same way.
--edges also prints every folder edge with the includes that make it.

--exclude PREFIX (repeatable) leaves out the files under PREFIX, e.g. the
CUDA backend, which a CPU-only build does not compile. --verbose prints, for
each file circle, the edges inside it.

Exit status 0 always (this is a measuring tool; tests/test_layering.sh holds
the rules).
"""

import argparse
import os
import re
import sys
from collections import defaultdict

SRC_EXT = ('.c', '.cu')
ALL_EXT = ('.c', '.h', '.inc', '.cu', '.cuh')
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
BLOCK_COMMENT_RE = re.compile(r'/\*.*?\*/', re.S)
LINE_COMMENT_RE = re.compile(r'//[^\n]*')
STRING_RE = re.compile(r'"(?:\\.|[^"\\\n])*"')
# a file-scope definition: starts in column 0 with a type, has a name
# followed by '(' (function) or '=' / ';' (variable), and is not static.
FUNC_DEF_RE = re.compile(r'^(?!static\b|typedef\b|extern\b|#|struct\s+\w+\s*\{|enum\b|union\b)'
                         r'[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;]*$', re.M)
VAR_DEF_RE = re.compile(r'^(?!static\b|typedef\b|extern\b|#|return\b)'
                        r'[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*(?:=[^;]*)?;', re.M)
DECL_FUNC_RE = re.compile(r'\b([A-Za-z_]\w*)\s*\(')
EXTERN_VAR_RE = re.compile(r'^\s*extern\b[^;(]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*;', re.M)
KEYWORDS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'defined', 'else', 'do',
            '_Static_assert', 'static_assert', 'alignof', '_Alignof', 'typeof', '__attribute__',
            'int', 'void', 'char', 'float', 'double', 'unsigned', 'signed', 'long', 'short'}


def top_level(text):
    """Header text without preprocessor lines and without anything inside
    braces (inline function bodies, struct members), so that what is left
    names what the header declares, not what its inline code calls."""
    text = re.sub(r'^\s*#(?:[^\n]*\\\n)*[^\n]*', '', text, flags=re.M)
    out, depth = [], 0
    for ch in text:
        if ch == '{':
            depth += 1
        elif ch == '}':
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return ''.join(out)


def strip_code(text):
    text = BLOCK_COMMENT_RE.sub(lambda m: '\n' * m.group(0).count('\n'), text)
    text = LINE_COMMENT_RE.sub('', text)
    return text


def read(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        return f.read()


def collect(root, exclude=()):
    files = []
    for top in ('src', os.path.join('include', 'amp')):
        base = os.path.join(root, top)
        for d, _, names in os.walk(base):
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(d, n), root)
                if n.endswith(ALL_EXT) and not any(rel == e or rel.startswith(e.rstrip('/') + '/') for e in exclude):
                    files.append(rel)
    return sorted(files)


def resolve(root, inc):
    for top in ('src', 'include'):
        p = os.path.join(top, inc)
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None


def folder_of(path):
    parts = path.split(os.sep)
    if parts[0] != 'src' or len(parts) < 3:
        return None
    return 'src/' + parts[1]


def tarjan(nodes, succ):
    """Strongly connected components (iterative Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            pushed = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    pushed = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if pushed:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def build(root, exclude=()):
    files = collect(root, exclude)
    known = set(files)
    includes = defaultdict(set)      # file -> headers it includes
    unresolved = []
    code = {}
    for f in files:
        text = read(os.path.join(root, f))
        for inc in INCLUDE_RE.findall(text):
            p = resolve(root, inc)
            if p is None:
                unresolved.append((f, inc))
            elif p != f and p in known:
                includes[f].add(p)
        code[f] = STRING_RE.sub('""', strip_code(text))
    # who defines what
    definers = defaultdict(set)
    for f in files:
        if not f.endswith(SRC_EXT):
            continue
        for m in FUNC_DEF_RE.finditer(code[f]):
            definers[m.group(1)].add(f)
        for m in VAR_DEF_RE.finditer(code[f]):
            definers[m.group(1)].add(f)
    implements = defaultdict(set)    # header -> source files defining its declarations
    for f in files:
        if f.endswith(SRC_EXT) or not f.startswith('src' + os.sep):
            continue
        decl = top_level(code[f])
        names = set(DECL_FUNC_RE.findall(decl)) | set(EXTERN_VAR_RE.findall(decl))
        for n in names - KEYWORDS:
            for c in definers.get(n, ()):
                if c != f:
                    implements[f].add(c)
    return files, includes, implements, unresolved


def file_sccs(files, includes, implements):
    succ = defaultdict(set)
    for a, hs in includes.items():
        succ[a] |= hs
    for h, cs in implements.items():
        succ[h] |= cs
    comps = tarjan(files, succ)
    return [c for c in comps if sum(1 for f in c if f.endswith(SRC_EXT)) > 1]


def folder_graph(files, includes):
    edges = defaultdict(lambda: defaultdict(list))
    for a in files:
        fa = folder_of(a)
        if fa is None:
            continue
        for h in includes.get(a, ()):
            fb = folder_of(h)
            if fb is not None and fb != fa:
                edges[fa][fb].append((a, h))
    return edges


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    ap.add_argument('--edges', action='store_true', help='print every folder edge and its includes')
    ap.add_argument('--exclude', action='append', default=[], help='leave out files under this path (repeatable)')
    ap.add_argument('--verbose', action='store_true', help='print the edges inside each file circle')
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    files, includes, implements, unresolved = build(root, args.exclude)

    comps = file_sccs(files, includes, implements)
    n_src = sum(1 for f in files if f.endswith(SRC_EXT))
    print(f'files: {len(files)} ({n_src} sources), include edges: {sum(len(v) for v in includes.values())}')
    def dirs(c):
        return sorted({folder_of(f) or 'include/amp' for f in c if f.endswith(SRC_EXT)})
    crossing = [c for c in comps if len(dirs(c)) > 1]
    print(f'file circles (components with more than one source file): {len(comps)}, '
          f'{len(crossing)} of them across folders')
    for c in sorted(comps, key=len, reverse=True):
        srcs = [f for f in c if f.endswith(SRC_EXT)]
        hdrs = [f for f in c if not f.endswith(SRC_EXT)]
        where = 'across ' + ', '.join(dirs(c)) if len(dirs(c)) > 1 else 'inside ' + dirs(c)[0]
        print(f'  {len(srcs)} sources + {len(hdrs)} headers ({where}):')
        print('    ' + ' '.join(srcs))
        print('    headers: ' + ' '.join(hdrs))
        if args.verbose:
            inside = set(c)
            for a in c:
                for h in sorted(includes.get(a, set()) & inside):
                    print(f'      {a} includes {h}')
                for s in sorted(implements.get(a, set()) & inside):
                    print(f'      {a} is defined in {s}')

    edges = folder_graph(files, includes)
    folders = sorted({folder_of(f) for f in files if folder_of(f)})
    fsucc = {a: set(b) for a, b in edges.items()}
    fcomps = [c for c in tarjan(folders, fsucc) if len(c) > 1]
    print(f'folders: {len(folders)}, folder edges: {sum(len(v) for v in edges.values())}')
    print(f'folder circles: {len(fcomps)}')
    for c in fcomps:
        print(f'  {len(c)} folders: ' + ' '.join(c))
        for a in c:
            for b in c:
                if b in edges.get(a, {}):
                    ex = edges[a][b]
                    print(f'    {a} -> {b}: {len(ex)} includes, e.g. {ex[0][0]} -> {ex[0][1]}')
    if args.edges:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f'  {a} -> {b}:')
                for f, h in sorted(edges[a][b]):
                    print(f'    {f} -> {h}')
    for f, inc in unresolved:
        print(f'unresolved: {f}: "{inc}"', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
