#!/usr/bin/env python3
"""Golden data for the GPT-2 tokenizer (tests/test_text.c): Hugging Face
transformers' GPT2Tokenizer (the slow, reference Python one; `pip install
transformers`, no torch needed) on amp's own copy of encoder.json and
vocab.bpe (share/gpt2/), encoding

  - every 60th line of the Shakespeare corpus (~3100 lines, as lines),
  - 120 strings of 4-12 corpus words run together (pieces longer than 32
    bytes take amp's O(n log n) BPE),
  - 60 chunks of 30 consecutive lines (newlines, blank lines, indentation
    inside one text, as the dataset reader tokenizes it),
  - hand-made hard cases: contractions, white-space runs, tabs, CRLF,
    non-breaking and em spaces, accents, combining marks, CJK, emoji and ZWJ
    sequences, other scripts' digits, <|endoftext|>, and letters that the
    `regex` package knows but Python's unicodedata does not yet.

Each case is written as two lines of tests/data/tokenizer_gpt2.txt:
    T <hex of the UTF-8 text>
    I <ids separated by spaces>
decode(ids) (clean_up_tokenization_spaces=False) equals the text for every
case; the generator checks that too. Usage (corpus from scripts/deps.sh text):

    python3 tools/golden/gen_tokenizer.py [CORPUS] > tests/data/tokenizer_gpt2.txt
"""
import os
import sys
import unicodedata

import regex
from transformers import GPT2Tokenizer

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))

HARD = [
    "", " ", "  ", "   ", "\n", "\n\n\n", " \n ", "a", " a", "  a", "a  ", "a \n b",
    "Hello world", "Hello  world", "Hello   world!", "\tTabbed\tline\t", "x\r\ny\r\n",
    "it's I'm we'll they've you'd she's don't can't won't", "I'D SHE'S 'TIS", "'s't're've'm'll'd", "''''",
    "O, Romeo, Romeo! wherefore art thou Romeo?", "--what's this?--", "...and then...", "a.b,c;d:e!f?g",
    "1234567890 12 345", "3.14159 2,718 1e10", "$100,000.00 (50%)", "#hashtag @user http://example.com/a?b=c",
    "naïve café résumé Zürich São Paulo", "combining e\u0301 a\u0308 n\u0303", "\u00a0non-breaking\u00a0space",
    "em\u2003space and thin\u2009space", "zero\u200bwidth\u200cjoin\u200d", "line\u2028sep\u2029para",
    "日本語のテキストです。", "中文，标点。", "한국어 텍스트", "Ωμέγα ελληνικά", "Русский текст, ёж.",
    "עברית", "العربية ١٢٣", "हिन्दी ०१२", "½ ⅓ ² ³ Ⅻ ⅻ", "emoji 🤖🎉 and family 👨‍👩‍👧 flag 🇫🇷",
    "math ∑∫√∞ ≠ ≤", "<|endoftext|>", "a<|endoftext|>b", "x <|endoftext|> y<|endoftext|>",
    "<|endoftext", "   <|endoftext|>   ", "\u0000nul\u0001ctl\u001f", "\u00ad soft hyphen", "ﬁ ligature ﬂ",
    "A" * 300, " " * 40 + "x", "ab" * 100, "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "supercalifragilisticexpialidocious" * 3, "Donaudampfschifffahrtsgesellschaftskapitänsmütze",
    "!!!???...,,,;;;:::---___***&&&%%%$$$###@@@" * 2, "1234567890" * 6, "日本語のテキスト" * 12,
    "\n" * 50 + "end", "\t \t" * 20, "abcabcabcabcabcabcabcabcabcabcabcabcabcabc",
]


def new_letters(n):
    """Code points that regex calls letters but this unicodedata does not."""
    pl = regex.compile(r"\p{L}")
    out = []
    for c in range(0x80, 0x110000):
        if pl.match(chr(c)) and unicodedata.category(chr(c))[0] != "L":
            out.append(chr(c))
            if len(out) == n:
                break
    return out


def main():
    corpus = sys.argv[1] if len(sys.argv) > 1 else "/usr/local/share/amp/text/shakespeare.txt"
    tok = GPT2Tokenizer(os.path.join(ROOT, "share/gpt2/encoder.json"), os.path.join(ROOT, "share/gpt2/vocab.bpe"))
    lines = open(corpus, encoding="utf-8").read().split("\n")
    cases = list(HARD)
    nl = new_letters(6)
    cases.append("new letters: " + "".join(nl) + " " + " ".join(nl))
    cases += lines[::60]
    # long pieces (> 32 bytes: amp's heap BPE): words of the corpus run together
    import random
    rnd = random.Random(15)
    words = [w for w in " ".join(lines).split() if w.isalpha()]
    cases += ["".join(rnd.choice(words) for _ in range(rnd.randint(4, 12))) for _ in range(120)]
    step = len(lines) // 60
    cases += ["\n".join(lines[i * step:i * step + 30]) + "\n" for i in range(60)]
    out = sys.stdout
    for t in cases:
        ids = tok.encode(t)
        back = tok.decode(ids, clean_up_tokenization_spaces=False)
        if back != t:
            sys.exit(f"gen_tokenizer: decode(encode(x)) != x for {t!r}")
        out.write("T " + t.encode("utf-8").hex() + "\n")
        out.write("I " + " ".join(map(str, ids)) + "\n")
    print(f"gen_tokenizer: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
