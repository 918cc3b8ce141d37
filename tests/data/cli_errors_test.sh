#!/usr/bin/env bash
# Bad input to the trident command gets one clear error line and exit status 1
# (never a crash): malformed tokenizer.json, bad JSONL, corrupt .idx/.bin, bad ids.
# usage: cli_errors_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
tmp=$(mktemp -d /tmp/trident-cli-errors.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0

expect_error() {  # expect_error "substring" cmd...
  local want=$1; shift
  local err status
  err=$("$@" 2>&1 >/dev/null); status=$?
  if [[ $status -ne 1 ]]; then
    echo "FAIL (exit $status, expected 1): $*"; echo "  $err"; failures=$((failures + 1))
  elif [[ $err != *"$want"* ]]; then
    echo "FAIL (message): $*"; echo "  got:  $err"; echo "  want: ...$want..."; failures=$((failures + 1))
  else
    echo "ok   $err"
  fi
}

printf 'In the beginning God created the heaven and the earth.\n' > "$tmp/train.txt"
"$trident" tokenizer train --input "$tmp/train.txt" --vocab-size 280 --special-token '<|endoftext|>' \
  --output "$tmp/tok.json" --quiet || { echo "FAIL: train"; exit 1; }

echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}}' > "$tmp/bad_merge.json"
expect_error '$.model.merges[0]: expected a merge' "$trident" tokenizer encode -t "$tmp/bad_merge.json" --input "$tmp/train.txt"
echo '{"model": {"type": "Unigram", "vocab": []}}' > "$tmp/unigram.json"
expect_error '$.model.type: model type "Unigram" (only BPE and WordPiece) is not supported' "$trident" tokenizer encode -t "$tmp/unigram.json" --input "$tmp/train.txt"
printf '{"model": ' > "$tmp/truncated.json"
expect_error 'truncated.json: invalid JSON at byte' "$trident" tokenizer encode -t "$tmp/truncated.json" --input "$tmp/train.txt"
expect_error "does not exist" "$trident" tokenizer encode -t "$tmp/nothing.json" --input "$tmp/train.txt"
expect_error "item 1 is 'x7'" "$trident" tokenizer decode -t "$tmp/tok.json" --ids "5 x7"
expect_error "cannot decode id 99999" "$trident" tokenizer decode -t "$tmp/tok.json" --ids "5 99999"

printf '{"text": "ok"}\n{"text": "broken"\n' > "$tmp/bad.jsonl"
expect_error 'bad.jsonl:2: not a JSON line' "$trident" preprocess -i "$tmp/bad.jsonl" -t "$tmp/tok.json" -o "$tmp/out" -q
printf '{"text": "ok"}\n{"body": "x"}\n' > "$tmp/nokey.jsonl"
expect_error 'nokey.jsonl:2: the JSON object has no key "text"' "$trident" preprocess -i "$tmp/nokey.jsonl" -t "$tmp/tok.json" -o "$tmp/out" -q
"$trident" preprocess -i "$tmp/bad.jsonl" "$tmp/nokey.jsonl" -t "$tmp/tok.json" -o "$tmp/skip" --skip-bad-lines 2>"$tmp/skip.log" \
  && grep -q "2 bad lines" "$tmp/skip.log" && echo "ok   --skip-bad-lines: $(tail -n 1 "$tmp/skip.log")" \
  || { echo "FAIL: --skip-bad-lines"; cat "$tmp/skip.log"; failures=$((failures + 1)); }

# Parquet input: a file that is not Parquet is named; a build without Parquet says how to get it
# (real Parquet files are tested with pyarrow: tests/interop/parquet_interop.py).
printf 'PAR1 not really\n' > "$tmp/fake.parquet"
if "$trident" info | grep -q '^parquet input: *built'; then
  expect_error "input '$tmp/fake.parquet' is not a readable Parquet file" "$trident" preprocess -i "$tmp/fake.parquet" -t "$tmp/tok.json" -o "$tmp/out" -q
else
  expect_error "input '$tmp/fake.parquet' is Parquet, but this trident was built without Parquet support" "$trident" preprocess -i "$tmp/fake.parquet" -t "$tmp/tok.json" -o "$tmp/out" -q
  expect_error "install pyarrow with ./scripts/python_env.sh" "$trident" preprocess -i "$tmp/train.txt" --format parquet -t "$tmp/tok.json" -o "$tmp/out" -q
fi

# --encoder: BERT's [CLS] doc [SEP] template needed, no EOD with it.
expect_error "adds no tokens around a sequence" "$trident" preprocess -i "$tmp/train.txt" -t "$tmp/tok.json" -o "$tmp/enc" --encoder -q
printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##e\n' > "$tmp/vocab.txt"
expect_error "drop --append-eod" "$trident" preprocess -i "$tmp/train.txt" -t "$tmp/vocab.txt" -o "$tmp/enc" --encoder --append-eod -q
"$trident" preprocess -i "$tmp/train.txt" -t "$tmp/vocab.txt" -o "$tmp/enc" --encoder -q \
  && [[ -s "$tmp/enc.idx" ]] && echo "ok   --encoder with a vocab.txt" \
  || { echo "FAIL: --encoder"; failures=$((failures + 1)); }

# Invalid UTF-8 is encoded byte-level, not rejected.
printf '\xff\xfe not utf-8 \xc3\x28\n' > "$tmp/invalid.txt"
"$trident" tokenizer encode -t "$tmp/tok.json" -i "$tmp/invalid.txt" > "$tmp/ids.txt" || { echo "FAIL: invalid UTF-8 rejected"; failures=$((failures + 1)); }
"$trident" tokenizer decode -t "$tmp/tok.json" < "$tmp/ids.txt" > "$tmp/back.txt"
cmp -s "$tmp/invalid.txt" "$tmp/back.txt" && echo "ok   invalid UTF-8 encodes and decodes byte-exactly" \
  || { echo "FAIL: invalid UTF-8 round trip"; failures=$((failures + 1)); }

exit $((failures > 0))
