"""Interop: Parquet files written by pyarrow preprocess to exactly the bytes the
same texts give as JSONL (several row groups, string and large_string columns,
Unicode, null rows skipped and counted, empty strings), and bad Parquet input
gets one clear error line naming the file: a missing column (the file's columns
listed), a column that is not a string, a truncated file, a corrupt page.

Skipped (exit 77) when this trident was built without Parquet (`trident info`),
unless TRIDENT_REQUIRE_OPTIONAL=1, where that fails: scripts/test.sh installs
pyarrow before configuring, so its build reads Parquet.

usage: parquet_interop.py TRIDENT_BINARY
"""
import json
import os
import subprocess
import sys

from common import require, run, skip, trident_bpe, tricky_text, work_dir, write_text

trident = sys.argv[1]
info = run([trident, "info"]).decode()
parquet_line = next((l for l in info.splitlines() if l.startswith("parquet input:")), "")
if "built (" not in parquet_line or "not built" in parquet_line:
    reason = f"this trident reads no Parquet ('{parquet_line.strip()}')"
    if os.environ.get("TRIDENT_REQUIRE_OPTIONAL") == "1":
        sys.exit(f"FAIL: {reason}, and TRIDENT_REQUIRE_OPTIONAL=1 forbids skipping")
    skip(reason)

pa = require("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

tmp = work_dir("trident-parquet-interop")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def preprocess(inputs, prefix, *extra):
    """Runs trident preprocess; returns (exit status, stderr)."""
    cmd = [trident, "preprocess", "--input", *inputs, "--tokenizer", tok, "--output-prefix", prefix,
           "--append-eod", "--workers", "2", *extra]
    p = subprocess.run(cmd, capture_output=True)
    return p.returncode, p.stderr.decode(errors="replace")


def same_output(a, b):
    return all(open(f"{a}.{ext}", "rb").read() == open(f"{b}.{ext}", "rb").read() for ext in ("bin", "idx"))


# A tokenizer trained by trident on text with many scripts, emoji and odd spaces.
corpus = tricky_text(seed=5, every_code_point=False, repeats=2000)
train = os.path.join(tmp, "train.txt")
write_text(train, corpus)
tok = trident_bpe(trident, train, 500, os.path.join(tmp, "tok.json"))

# Documents: lines of that text (Unicode, newlines inside documents too), empty
# strings and nulls among them; row groups of 97 rows, so batches and row groups
# end at different places.
lines = [l for l in corpus.split("\n") if l.strip()]
docs = []
for i in range(2500):
    if i % 211 == 7:
        docs.append(None)
    elif i % 173 == 11:
        docs.append("")
    else:
        start = (7 * i) % len(lines)
        docs.append("\n".join(lines[start: start + 1 + i % 3]))
docs[0] = "ünïcödé 中文字符 😀👍🏽 🇫🇷\u00a0\u2028 end"
nulls = sum(d is None for d in docs)
ids = list(range(len(docs)))

string_file = os.path.join(tmp, "docs.parquet")
pq.write_table(pa.table({"id": ids, "text": pa.array(docs, pa.string())}), string_file, row_group_size=97)
large_file = os.path.join(tmp, "large.parquet")
pq.write_table(pa.table({"body": pa.array(docs, pa.large_string()), "id": ids}), large_file, row_group_size=500,
               compression="zstd")
meta = pq.ParquetFile(string_file).metadata
check(meta.num_row_groups == 26, f"pyarrow wrote {meta.num_row_groups} row groups (want 26)")

jsonl = os.path.join(tmp, "docs.jsonl")
with open(jsonl, "w", encoding="utf-8") as f:
    for d in docs:
        if d is not None:
            f.write(json.dumps({"text": d}) + "\n")
rc, err = preprocess([jsonl], os.path.join(tmp, "from_jsonl"))
check(rc == 0, f"JSONL preprocesses (exit {rc}) {err.strip()}")

rc, err = preprocess([string_file], os.path.join(tmp, "from_parquet"))
check(rc == 0 and same_output(os.path.join(tmp, "from_parquet"), os.path.join(tmp, "from_jsonl")),
      f"string column, {meta.num_row_groups} row groups: .bin/.idx identical to the JSONL's")
check(f", {nulls} null rows ->" in err, f"the summary counts the {nulls} null rows: {err.strip().splitlines()[-1]}")

rc, err = preprocess([large_file], os.path.join(tmp, "from_large"), "--json-key", "body")
check(rc == 0 and same_output(os.path.join(tmp, "from_large"), os.path.join(tmp, "from_jsonl")),
      "large_string column 'body' (--json-key body), zstd pages: identical to the JSONL's")

# Parquet and JSONL inputs together, in order; --format parquet for another extension.
half = os.path.join(tmp, "first_half.parquet")
pq.write_table(pa.table({"text": pa.array(docs[:1200], pa.string())}), half, row_group_size=300)
rest = os.path.join(tmp, "rest.jsonl")
with open(rest, "w", encoding="utf-8") as f:
    for d in docs[1200:]:
        if d is not None:
            f.write(json.dumps({"text": d}) + "\n")
rc, err = preprocess([half, rest], os.path.join(tmp, "mixed"))
check(rc == 0 and same_output(os.path.join(tmp, "mixed"), os.path.join(tmp, "from_jsonl")),
      "a Parquet file then a JSONL file: identical to one JSONL")
renamed = os.path.join(tmp, "docs.data")
with open(renamed, "wb") as f:
    f.write(open(string_file, "rb").read())
rc, err = preprocess([renamed], os.path.join(tmp, "renamed"), "--format", "parquet")
check(rc == 0 and same_output(os.path.join(tmp, "renamed"), os.path.join(tmp, "from_jsonl")),
      "--format parquet reads a file named docs.data")


# Errors: exit status 1, one line on stderr naming the file and what is wrong.
def expect_error(name, inputs, wants, *extra):
    prefix = os.path.join(tmp, "err_" + name)
    rc, err = preprocess(inputs, prefix, *extra)
    lines = err.strip().splitlines()
    ok = rc == 1 and len(lines) == 1 and all(w in lines[0] for w in wants)
    ok = ok and not os.path.exists(prefix + ".bin") and not os.path.exists(prefix + ".idx")
    check(ok, f"{name}: exit {rc}, {err.strip()!r}" + ("" if ok else f" (want exit 1, one line with {wants})"))


expect_error("missing_column", [string_file], ["docs.parquet", 'no column "body"', "id (int64), text (string)"],
             "--json-key", "body")
expect_error("not_a_string", [string_file], ["docs.parquet", 'column "id" is int64', "expected string"],
             "--json-key", "id")
binary_file = os.path.join(tmp, "binary.parquet")
pq.write_table(pa.table({"text": pa.array([b"abc", b"def"], pa.binary())}), binary_file)
expect_error("binary_column", [binary_file], ["binary.parquet", 'column "text" is binary'])
data = open(string_file, "rb").read()
truncated = os.path.join(tmp, "truncated.parquet")
with open(truncated, "wb") as f:
    f.write(data[: len(data) // 2])
expect_error("truncated", [jsonl, truncated], ["truncated.parquet", "is not a readable Parquet file"])
corrupt = os.path.join(tmp, "corrupt.parquet")
with open(corrupt, "wb") as f:  # pages overwritten, footer intact
    f.write(data[:4] + bytes(b ^ 0x5A for b in data[4: len(data) // 3]) + data[len(data) // 3:])
expect_error("corrupt_pages", [corrupt], ["corrupt.parquet", 'error reading column "text"'])

for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
