#!/usr/bin/env python3
"""Golden data for the pretrained models' tokenizers (tests/test_tokenizers.c),
written by Hugging Face `tokenizers` (never by amp):

  tests/data/tokenizer_bert.txt   all-MiniLM-L6-v2's tokenizer.json (BERT
                                  WordPiece, lowercasing, accent stripping)
  tests/data/tokenizer_bpe.txt    SmolLM2's byte-level BPE (tokens, merges, token types read from the GGUF
                                  file by gguf-py), built in `tokenizers` with the pre-tokenizer of each
                                  tokenizer.ggml.pre amp knows: smollm (Digits(individual_digits) + ByteLevel),
                                  gpt2 (ByteLevel), llama3 (Split(Llama 3's regex) + ByteLevel, ignore_merges);
                                  and llama.cpp's own llama-tokenize on the real file for the hard cases:
                                  C <pre> <parse_special 0|1> <hex text> <ids,>   (HF)
                                  L <parse_special 0|1> <hex text> <ids,>         (llama-tokenize, smollm)
                                  T/B lines as below, for pre smollm (B <name> ...: HF's ids)
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


def large_texts():
    sh = open(SHAKES, "rb").read()
    cut = sh.index(b"\n", 300000) + 1
    return [("shakespeare", sh[:cut].decode()), ("multi", multilingual_text(200000))]


def text_lines(out, name, text, encode_lines):
    """T and B lines of a large text; encode_lines(lines) -> ids per line."""
    raw = text.encode()
    out.append(f"T {name} {len(raw)} {fnv_bytes(raw):016x}")
    lines = text.split("\n")
    enc = encode_lines(lines)
    for i in range(0, len(lines), BLOCK):
        out.append(f"B {name} {i} {len(lines[i:i + BLOCK])} {fnv(enc[i:i + BLOCK]):016x}")


def write(name, out, note=""):
    path = os.path.join(ROOT, "tests", "data", name)
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(path + ".tmp", path)
    print(f"{path}: {len(out)} lines{note}", file=sys.stderr)


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
    write("tokenizer_chat.txt", out)


LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA_TOKENIZE = os.environ.get("LLAMA_TOKENIZE", "/work/peers/llama-build/bin/llama-tokenize")


def bpe_cases():
    return bert_cases() + [
        "12345 1234567890 3.14159 1,000,000 ٣٤٥ ²³ ½ Ⅻ", "2024-01-01T12:00:00Z", "a1b22c333d4444",
        "I'm you're he's we've they'll she'd it't", "I'M YOU'RE HE'S WE'VE THEY'LL", "'s 's's ''s",
        "  two  spaces   three    four", "trailing   ", "   leading", "\n\n\nnewlines\n\n", "a\r\nb\r\n\r\nc",
        "tabs\t\tand\t spaces \t\n mixed", " \n ", "\n", "x\n  y", "x \n\n  y",
        "def f(x):\n    return x**2  # square\n", "if (a && b) { c[i] = d->e; } // done", "<div class=\"x\">&amp;</div>",
        "SELECT * FROM t WHERE id = 42;", "naïve façade Ærø Øresund ÿ ß İ", "Здравствуй, мир! Ёлка",
        "东京是日本的首都。北京是中国的首都。", "😀😃😄 👨‍👩‍👧‍👦 🇫🇷 ✓✗", "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|>text<|endoftext|>", "<|im_start|><|im_end|><|im_start", "a<|im_end|>b <|im_start|> c",
        "<repo_name>x<file_sep>y", "The capital of France is", " The capital of France is Paris.",
    ]


def bpe_tokenizer(toks, merges, types, pre):
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(toks)}
    m = models.BPE(vocab=vocab, merges=[tuple(x.split(" ")) for x in merges], ignore_merges=(pre == "llama3"))
    tk = Tokenizer(m)
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=(pre != "llama3"))
    if pre == "smollm":
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl])
    elif pre == "gpt2":
        tk.pre_tokenizer = bl
    else:
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated"), bl])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(toks[i], special=True, normalized=False) for i in range(len(toks)) if types[i] == 3])
    return tk


def hf_ids(tk, s, parse):
    tk.encode_special_tokens = not parse
    return tk.encode(s, add_special_tokens=False).ids


def llama_ids(gguf_path, s, parse):
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(s.encode())
    try:
        cmd = [LLAMA_TOKENIZE, "-m", gguf_path, "-f", f.name, "--ids", "--log-disable", "--no-bos", "--no-escape"]
        if not parse:
            cmd.append("--no-parse-special")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "LD_LIBRARY_PATH": os.path.dirname(LLAMA_TOKENIZE)})
        if r.returncode != 0:
            raise RuntimeError(f"llama-tokenize failed: {r.stderr[-500:]}")
        return [int(x) for x in r.stdout.strip().splitlines()[-1].strip("[]").split(",") if x.strip()]
    finally:
        os.unlink(f.name)


def bpe_golden():
    from gguf import GGUFReader
    path = os.path.join(MODELS, "SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
    r = GGUFReader(path)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    h = lambda ids: ",".join(map(str, ids)) or "-"
    out = ["# tests/data/tokenizer_bpe.txt: generated by tools/gen_tokenizer_golden.py with tokenizers "
           + __import__("tokenizers").__version__ + " and llama.cpp's llama-tokenize from SmolLM2-135M-Instruct.Q4_1.gguf"
           ": do not edit"]
    tks = {pre: bpe_tokenizer(toks, merges, types, pre) for pre in ("smollm", "gpt2", "llama3")}
    have_llama = os.access(LLAMA_TOKENIZE, os.X_OK)
    differ = 0
    for s in bpe_cases():
        hx = s.encode().hex() or "-"
        for pre, tk in tks.items():
            for parse in (1, 0):
                out.append(f"C {pre} {parse} {hx} {h(hf_ids(tk, s, parse))}")
        if have_llama and s:
            for parse in (1, 0):
                ids = llama_ids(path, s, parse)
                if ids != hf_ids(tks["smollm"], s, parse):
                    differ += 1
                    print(f"llama.cpp and tokenizers differ on {s!r} (parse {parse})", file=sys.stderr)
                out.append(f"L {parse} {hx} {h(ids)}")
    if not have_llama:
        print(f"warning: {LLAMA_TOKENIZE} not found: no L lines", file=sys.stderr)
    tk = tks["smollm"]
    tk.encode_special_tokens = False
    # Bytes the vocabulary has no token for (SmolLM2 lacks 21): tokenizers drops them before merging, so
    # their neighbours may merge; llama.cpp keeps them as symbols that merge with nothing and drops them
    # after. amp does what llama.cpp does (the GGUF's runtime): lines holding such a byte take
    # llama-tokenize's ids.
    b2u, n = {}, 0
    for b in range(256):
        printable = 33 <= b <= 126 or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
        b2u[b] = chr(b) if printable else chr(256 + n)
        n += not printable
    vocab = set(toks)
    missing = {b for b in range(256) if b2u[b] not in vocab}

    def encode_lines(lines, name):
        enc = [e.ids for e in tk.encode_batch(lines, add_special_tokens=False)]
        nl = ndiff = 0
        for i, line in enumerate(lines):
            if have_llama and line and any(b in missing for b in line.encode()):
                ids = llama_ids(path, line, 1)
                nl += 1
                ndiff += ids != enc[i]
                enc[i] = ids
        print(f"{name}: {nl} lines with a byte the vocabulary lacks, llama.cpp's ids differ from tokenizers' on "
              f"{ndiff}", file=sys.stderr)
        return enc

    for name, text in large_texts():
        text_lines(out, name, text, lambda lines: encode_lines(lines, name))
    write("tokenizer_bpe.txt", out, f"; llama.cpp and tokenizers differ on {differ} cases")


def main():
    chat_golden()
    bpe_golden()
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
    for name, text in large_texts():
        text_lines(out, name, text, lambda lines: [e.ids for e in tk.encode_batch(lines, add_special_tokens=False)])
    write("tokenizer_bert.txt", out)


if __name__ == "__main__":
    main()
