#!/usr/bin/env python3
"""Golden data for the pretrained models' tokenizers (tests/test_tokenizers.c),
written by Hugging Face `tokenizers` (never by amp):

  tests/data/tokenizer_bert.txt   all-MiniLM-L6-v2's tokenizer.json (BERT
                                  WordPiece, lowercasing, accent stripping)
  tests/data/tokenizer_chat.txt   SmolLM2's chat template (from the GGUF file) rendered by jinja2:
                                  P <hex template>, then K <add_generation_prompt> <n> (<hex role> <hex content>)*n
                                  <hex output>

Line kinds (text as hex of its UTF-8 bytes, so control characters survive):
  C <special 0|1> <hex text> <ids,>      a hard case: encode(text, add_special_tokens) (added tokens such
                                         as [MASK] in the text are parsed, as HF always does)
  D <ids,> <hex text>                    decode(ids, skip_special_tokens=False)
  T <name> <bytes> <fnv64 hex>           a large text: its first <bytes> bytes (at a line end) and their digest
  B <name> <first line> <lines> <fnv64>  digest of the ids of lines [first, first+lines) of that text, each line
                                         encoded on its own without special tokens: FNV-1a 64 over, for each line,
                                         its id count then its ids, all as little-endian int32
The large texts: the Shakespeare corpus (amp_shakespeare_path(), first 300 KB) and "multi", a
multilingual text of 200 KB made by multilingual_text() below, which the test rebuilds with the same
xorshift generator. Usage (the pyenv python3 with `tokenizers`):

    python3 tools/gen_tokenizer_golden.py [MODELS_DIR] [SHAKESPEARE]
"""
import os
import sys

from tokenizers import Tokenizer

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
MODELS = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("AMP_MODELS_DIR", "/usr/local/share/amp/models")
SHAKES = sys.argv[2] if len(sys.argv) > 2 else "/usr/local/share/amp/text/shakespeare.txt"
BLOCK = 32


def fnv(ids_per_line):
    h = 0xCBF29CE484222325
    for ids in ids_per_line:
        for x in [len(ids)] + list(ids):
            for b in (x & 0xFFFFFFFF).to_bytes(4, "little"):
                h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def fnv_bytes(bs):
    h = 0xCBF29CE484222325
    for b in bs:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# code-point pools of the multilingual text: (first, last) ranges
SCRIPTS = [
    [(0x61, 0x7A)], [(0x41, 0x5A)], [(0x30, 0x39)],
    [(0xC0, 0xFF)], [(0x100, 0x17F)],                 # accented Latin
    [(0x391, 0x3A9), (0x3B1, 0x3C9)],                 # Greek
    [(0x410, 0x44F)],                                 # Cyrillic
    [(0x4E00, 0x4FFF)], [(0x3041, 0x3096)], [(0x30A1, 0x30FA)],  # CJK, kana
    [(0xAC00, 0xD7A3)],                               # Hangul
    [(0x627, 0x64A)], [(0x905, 0x939)], [(0xE01, 0xE30)],  # Arabic, Devanagari, Thai
    [(0x1F600, 0x1F64F), (0x1F300, 0x1F3FF)],         # emoji
    [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E), (0xA1, 0xBF), (0x2010, 0x2027), (0x3001, 0x3003)],
    [(0x300, 0x36F)],                                 # combining marks
    [(0x1, 0x8), (0xB, 0xC), (0xE, 0x1F), (0x7F, 0x9F), (0x200B, 0x200F), (0xFFFD, 0xFFFD)],  # control/format
    [(0x9, 0x9), (0xA0, 0xA0), (0x2000, 0x200A), (0x3000, 0x3000)],  # white space
]


def xorshift(state):
    x = state[0]
    x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 7
    x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
    state[0] = x
    return x


def multilingual_text(nbytes):
    """Words of 1-12 code points, each from one pool (pool p with weight: letters more often), spaces
    between, a newline every 12 words; stops at the first line end past nbytes (UTF-8)."""
    st = [0x9E3779B97F4A7C15]
    out, size, words = [], 0, 0
    while True:
        p = xorshift(st) % len(SCRIPTS)
        n = 1 + xorshift(st) % 12
        w = []
        for _ in range(n):
            rs = SCRIPTS[p]
            r = rs[xorshift(st) % len(rs)]
            w.append(chr(r[0] + xorshift(st) % (r[1] - r[0] + 1)))
        words += 1
        s = "".join(w) + ("\n" if words % 12 == 0 else " ")
        out.append(s)
        size += len(s.encode())
        if size >= nbytes and s.endswith("\n"):
            break
    return "".join(out)


def bert_cases():
    long_word = "a" * 101
    return [
        "", " ", "   \t\n  ", "\n",
        "Hello, world!", "HELLO World", "This is an example sentence", "Each sentence is converted",
        "Héllo wörld, café naïve résumé Ångström façade", "ÀÁÂÃÄÅÆÇÈÉÊË ìíîïðñòóôõö", "İstanbul ΣΊΣΥΦΟΣ Straße",
        "中文分词测试", "日本語のテキストです。", "한국어 텍스트", "mixed中文and English文字",
        "control\x00chars\x01here\x7f and\u200bzero\ufffdwidth", "tab\tnew\nline\rcr",
        "emoji 😀🎉👍🏽 and ❤️", "punct...!!??,,;;::--__((()))[[]]{{}}", "a-b_c.d@e#f$g%h^i&j*k",
        "“quotes” ‘single’ «guillemets» — dash … ellipsis", "$100.50 3.14159 1,000,000 2nd 3rd",
        "don't can't won't I'm you're it's", long_word, "a" * 100, "supercalifragilisticexpialidocious",
        "antidisestablishmentarianism", "unaffable", "xyzzyqwxv", "ṁṇṛ ǆ ǈ ﬁ ﬂ Ⅻ ① ²³", "Ω Å K",
        "Привет мир", "Γειά σου Κόσμε", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก",
        "[CLS] tokens [SEP] in [MASK] text [PAD] [UNK]", "[cls] lower [MASK]", "[MASK][MASK]", "x[SEP]y",
        "a\u0301e\u0301 precombined vs combining", "\u00a0nbsp\u3000ideographic\u2003em", "ＦＵＬＬ ｗｉｄｔｈ",
        "The quick brown fox jumps over the lazy dog. " * 3, "ﷺ ﷽", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝", "ᄀᄁ ㄱㄲ",
    ]


def chat_golden():
    import jinja2
    from gguf import GGUFReader
    r = GGUFReader(os.path.join(MODELS, "SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    tpl = r.fields["tokenizer.chat_template"].contents()
    j = jinja2.Environment().from_string(tpl)
    h = lambda s: s.encode().hex() or "-"
    out = ["# tests/data/tokenizer_chat.txt: generated by tools/gen_tokenizer_golden.py with jinja2 "
           + jinja2.__version__ + " from SmolLM2-135M-Instruct.Q4_1.gguf's tokenizer.chat_template: do not edit",
           "P " + h(tpl)]
    convs = [[("user", "What is the capital of France?")],
             [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye")],
             [],
             [("user", "Écris un poème 🎉\nsur deux lignes"), ("assistant", "")],
             [("assistant", "I start"), ("system", "late system")]]
    for msgs in convs:
        for gen in (False, True):
            text = j.render(messages=[{"role": a, "content": b} for a, b in msgs], add_generation_prompt=gen)
            out.append(f"K {int(gen)} {len(msgs)} " + "".join(f"{h(a)} {h(b)} " for a, b in msgs) + h(text))
    path = os.path.join(ROOT, "tests", "data", "tokenizer_chat.txt")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(path + ".tmp", path)
    print(f"{path}: {len(out)} lines", file=sys.stderr)


def main():
    chat_golden()
    tk = Tokenizer.from_file(os.path.join(MODELS, "all-MiniLM-L6-v2", "tokenizer.json"))
    tk.no_truncation()
    tk.no_padding()
    out = ["# tests/data/tokenizer_bert.txt: generated by tools/gen_tokenizer_golden.py with tokenizers "
           + __import__("tokenizers").__version__ + " from all-MiniLM-L6-v2/tokenizer.json: do not edit"]
    for s in bert_cases():
        for sp in (0, 1):
            ids = tk.encode(s, add_special_tokens=bool(sp)).ids
            out.append(f"C {sp} {s.encode().hex() or '-'} {','.join(map(str, ids)) or '-'}")
    for s in ["Hello, world! don't stop.", "unaffable café", "[CLS] a [MASK] b [SEP]", "isn't it 's 're , . ? !",
              "中文 and 日本語", "do not go"]:
        ids = tk.encode(s, add_special_tokens=True).ids
        out.append(f"D {','.join(map(str, ids))} {tk.decode(ids, skip_special_tokens=False).encode().hex() or '-'}")
    sh = open(SHAKES, "rb").read()
    cut = sh.index(b"\n", 300000) + 1
    texts = [("shakespeare", sh[:cut].decode()), ("multi", multilingual_text(200000))]
    for name, text in texts:
        raw = text.encode()
        out.append(f"T {name} {len(raw)} {fnv_bytes(raw):016x}")
        lines = text.split("\n")
        enc = [e.ids for e in tk.encode_batch(lines, add_special_tokens=False)]
        for i in range(0, len(lines), BLOCK):
            out.append(f"B {name} {i} {len(lines[i:i + BLOCK])} {fnv(enc[i:i + BLOCK]):016x}")
    path = os.path.join(ROOT, "tests", "data", "tokenizer_bert.txt")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(path + ".tmp", path)
    print(f"{path}: {len(out)} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
