#!/usr/bin/env python3
"""Generates src/io/unicode_tables.h: the code-point classes and maps the
tokenizers of src/io/ use.

1. The GPT-2 pre-tokenizer regex (src/io/tokenizer.c),

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

   as sorted inclusive ranges: \\p{L} (letters), \\p{N} (numbers), \\s.
   The classes are taken from the `regex` package itself (every code point is
   matched against \\p{L}, \\p{N} and \\s), because that is the engine OpenAI's
   encoder.py and Hugging Face's GPT2Tokenizer run the pattern with: an exact
   match with them needs its Unicode version, which is newer than the
   interpreter's unicodedata (printed below, with the difference).

2. BERT's BasicTokenizer (src/io/tokenizer_wordpiece.c), as Hugging Face
   `tokenizers` runs it (BertNormalizer then BertPreTokenizer): which code
   points clean_text drops (NUL, U+FFFD, control/format/unassigned/private
   use) or turns into a space (white space), the CJK ideographs that get
   spaces around them, the pre-tokenizer's white space and punctuation, and
   two maps: strip (NFD, then the nonspacing marks Mn dropped) and lower
   (lowercasing), each code point that changes -> its output (the Hangul
   syllables' decomposition is arithmetic, left to the C code). All of them
   are read off the `tokenizers` library itself, one code point at a time,
   so they carry its Unicode version; the generator then checks, for every
   code point and all four (lowercase, strip_accents) settings, that
   composing the tables (clean, CJK, strip, lower) gives exactly what its
   BertNormalizer gives.

Usage:

    python3 tools/gen_unicode_tables.py > src/io/unicode_tables.h
"""
import sys
import unicodedata

import regex
import tokenizers
from tokenizers import normalizers, pre_tokenizers


def ranges(pred):
    out, start, prev = [], None, None
    for c in range(0x110000):
        if pred(c):
            if start is None:
                start = c
            prev = c
        elif start is not None:
            out.append((start, prev))
            start = None
    if start is not None:
        out.append((start, prev))
    return out


def rows(items, per):
    """C initializer lines, per items a line."""
    return ["    " + ", ".join(items[i:i + per]) + "," for i in range(0, len(items), per)]


def table(name, rs):
    items = [f"{{0x{lo:x}, 0x{hi:x}}}" for lo, hi in rs]
    return "\n".join([f"static const uint32_t {name}[][2] = {{"] + rows(items, 6) + ["};"])


def cmap(name, m):
    """c -> string map: {cp, offset, length} rows sorted by cp, outputs in one pool."""
    pool, rows_ = [], []
    for c in sorted(m):
        rows_.append((c, len(pool), len(m[c])))
        pool.extend(ord(x) for x in m[c])
    items = [f"{{0x{c:x}, {o}, {n}}}" for c, o, n in rows_]
    return "\n".join([f"static const amp_uni_map {name}[] = {{"] + rows(items, 6) + ["};"] +
                     [f"static const uint32_t {name}_pool[] = {{"] + (rows([f"0x{x:x}" for x in pool], 10) or ["    0,"]) +
                     ["};"])


def chars():
    return (c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


def bert_tables():
    only = lambda **k: normalizers.BertNormalizer(**{**dict(clean_text=False, handle_chinese_chars=False,
                                                            strip_accents=False, lowercase=False), **k})
    clean, cjk = only(clean_text=True), only(handle_chinese_chars=True)
    strip, lower = only(strip_accents=True), only(lowercase=True)
    drop, space, han, smap, lmap = set(), set(), set(), {}, {}
    for c in chars():
        ch = chr(c)
        s = clean.normalize_str(ch)
        if s == "":
            drop.add(c)
        elif s != ch:
            assert s == " ", (hex(c), s)
            space.add(c)
        s = cjk.normalize_str(ch)
        if s != ch:
            assert s == " " + ch + " ", (hex(c), s)
            han.add(c)
        s = strip.normalize_str(ch)
        if s != ch:
            smap[c] = s
        s = lower.normalize_str(ch)
        if s != ch:
            lmap[c] = s
    pre = pre_tokenizers.BertPreTokenizer()
    ws, punct = set(), set()
    for c in chars():
        got = [p for p, _ in pre.pre_tokenize_str("a" + chr(c) + "a")]
        if got == ["a", "a"]:
            ws.add(c)
        elif got == ["a", chr(c), "a"]:
            punct.add(c)
        else:
            assert got == ["a" + chr(c) + "a"], (hex(c), got)

    def compose(c, lc, sa):
        if c in drop:
            return ""
        if c in space:
            return " "
        s = smap.get(c, chr(c)) if sa else chr(c)
        s = "".join(lmap.get(ord(x), x) for x in s) if lc else s
        return " " + s + " " if c in han else s

    for lc in (False, True):
        for sa in (False, True):
            full = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=sa,
                                              lowercase=lc)
            for c in chars():
                want = full.normalize_str(chr(c))
                assert compose(c, lc, sa) == want, (hex(c), lc, sa, compose(c, lc, sa), want)
    return drop, space, han, ws, punct, smap, lmap


def main():
    pl, pn, ps = regex.compile(r"\p{L}"), regex.compile(r"\p{N}"), regex.compile(r"\s")
    L = ranges(lambda c: pl.match(chr(c)) is not None)
    N = ranges(lambda c: pn.match(chr(c)) is not None)
    S = ranges(lambda c: ps.match(chr(c)) is not None)
    nl = sum(h - l + 1 for l, h in L)
    ul = sum(1 for c in range(0x110000) if unicodedata.category(chr(c))[0] == "L")
    print(f"regex {regex.__version__}: {nl} letters; unicodedata {unicodedata.unidata_version}: {ul}",
          file=sys.stderr)
    drop, space, han, ws, punct, smap, lmap = bert_tables()
    print(f"tokenizers {tokenizers.__version__}: drop {len(drop)}, space {len(space)}, cjk {len(han)}, "
          f"ws {len(ws)}, punct {len(punct)}, strip {len(smap)}, lower {len(lmap)}", file=sys.stderr)
    print("/* Generated by tools/gen_unicode_tables.py from the `regex` package "
          f"{regex.__version__} and Hugging Face `tokenizers` {tokenizers.__version__}: do not edit.")
    print(" * Code-point classes of the GPT-2 pre-tokenizer pattern (src/io/tokenizer.c):")
    print(" * \\p{L} letters, \\p{N} numbers, \\s white space, as sorted inclusive ranges;")
    print(" * BERT's BasicTokenizer (src/io/tokenizer_wordpiece.c): amp_bert_drop (clean_text removes),")
    print(" * amp_bert_space (clean_text makes ' '), amp_bert_cjk (split off), amp_bert_ws and amp_bert_punct")
    print(" * (the pre-tokenizer's splits), amp_bert_strip (NFD without Mn) and amp_bert_lower: code point ->")
    print(" * its output, amp_uni_map rows sorted by cp, outputs in the _pool array. */")
    print("#ifndef AMP_IO_UNICODE_TABLES_H\n#define AMP_IO_UNICODE_TABLES_H\n\n#include <stdint.h>\n")
    print(table("amp_uni_letter", L) + "\n")
    print(table("amp_uni_number", N) + "\n")
    print(table("amp_uni_space", S) + "\n")
    print("typedef struct {\n    uint32_t cp;\n    uint16_t off;\n    uint16_t len;\n} amp_uni_map;\n")
    print(table("amp_bert_drop", ranges(lambda c: c in drop)) + "\n")
    print(table("amp_bert_space", ranges(lambda c: c in space)) + "\n")
    print(table("amp_bert_cjk", ranges(lambda c: c in han)) + "\n")
    print(table("amp_bert_ws", ranges(lambda c: c in ws)) + "\n")
    print(table("amp_bert_punct", ranges(lambda c: c in punct)) + "\n")
    # Hangul syllables decompose by arithmetic (Unicode 3.12), done in C: not in the map
    SB, LB, VB, TB, NV, NT = 0xAC00, 0x1100, 0x1161, 0x11A7, 21, 28
    for c in range(SB, SB + 11172):
        i = c - SB
        want = chr(LB + i // (NV * NT)) + chr(VB + i % (NV * NT) // NT) + (chr(TB + i % NT) if i % NT else "")
        assert smap.pop(c) == want, hex(c)
    print(cmap("amp_bert_strip", smap) + "\n")
    print(cmap("amp_bert_lower", lmap) + "\n")
    print("#endif")


if __name__ == "__main__":
    main()
