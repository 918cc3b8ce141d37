#!/usr/bin/env bash
# Prepares trident's built-in corpus: the King James Bible (public domain, from
# Debian's bible-kjv package), a byte-level BPE tokenizer trained on it by
# trident, and Megatron .bin/.idx datasets for train/valid/test.
#
#   scripts/prepare_corpus.sh            # writes data/kjv/ (gitignored)
#   TRIDENT=path/to/trident DATA_DIR=... VOCAB_SIZE=4096 scripts/prepare_corpus.sh
#
# Idempotent: every step is skipped when its output exists (delete a file to
# redo that step and the ones after it). Outputs appear whole or not at all.
#
# Layout of $DATA_DIR/kjv:
#   kjv.txt                   one verse per line, references stripped
#   chapters.jsonl            one document per chapter: {"book", "chapter", "text"}
#                             (text = the chapter's verses joined by "\n")
#   {train,valid,test}.jsonl  the split, by chapter: chapter i (0-based, Bible
#                             order) is valid when i % 50 == 24, test when
#                             i % 50 == 49, train otherwise (~96/2/2)
#   tokenizer.json            byte-level BPE, trained on train.jsonl's text,
#                             vocabulary $VOCAB_SIZE incl. <|endoftext|> (id 0)
#   kjv_{train,valid,test}.{bin,idx}   Megatron datasets, <|endoftext|> after
#                             every chapter (prefix for training: data/kjv/kjv_train)
set -euo pipefail
cd "$(dirname "$0")/.."

data_dir=${DATA_DIR:-data}
out=$data_dir/kjv
vocab_size=${VOCAB_SIZE:-4096}
trident=${TRIDENT:-}
if [[ -z $trident ]]; then
  for candidate in build/bin/trident build-data/bin/trident; do
    [[ -x $candidate ]] && { trident=$candidate; break; }
  done
fi
[[ -n $trident && -x $trident ]] || {
  echo "prepare_corpus: trident is not built (cmake -S . -B build -G Ninja && ninja -C build), or set TRIDENT=" >&2
  exit 1
}
command -v bible >/dev/null 2>&1 || {
  echo "prepare_corpus: the 'bible' command is missing: install Debian's bible-kjv (scripts/install_deps.sh)" >&2
  exit 1
}
mkdir -p "$out"

step() { echo "prepare_corpus: $*"; }

# 1. The text. `bible -f` turns pretty-printing off: one verse per line as
#    "Ge1:1 In the beginning ...". The reference is the first word.
if [[ ! -s $out/kjv.txt || ! -s $out/chapters.jsonl ]]; then
  step "extracting the King James Bible (bible -f gen1:1-rev22:21)"
  raw=$(mktemp "$out/.raw.XXXXXX")
  bible -f gen1:1-rev22:21 > "$raw"
  [[ $(wc -l < "$raw") -eq 31102 ]] || { echo "prepare_corpus: expected 31102 verses from bible-kjv" >&2; rm -f "$raw"; exit 1; }
  sed -E 's/^[^ ]+ //' "$raw" > "$out/kjv.txt.tmp" && mv "$out/kjv.txt.tmp" "$out/kjv.txt"
  # A chapter is a run of verses with the same "Book<chapter>" reference prefix.
  awk '
    function esc(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); gsub(/\t/, "\\t", s); return s }
    function flush() { if (key != "") printf "{\"book\": \"%s\", \"chapter\": %d, \"text\": \"%s\"}\n", book, chapter, esc(text) }
    {
      ref = $1; verse_text = substr($0, length(ref) + 2)
      k = ref; sub(/:[0-9]+$/, "", k)
      if (k != key) {
        flush(); key = k; text = verse_text
        match(k, /[0-9]+$/); book = substr(k, 1, RSTART - 1); chapter = substr(k, RSTART) + 0
      } else {
        text = text "\\n" verse_text
      }
    }
    END { flush() }' "$raw" > "$out/chapters.jsonl.tmp"
  rm -f "$raw"
  mv "$out/chapters.jsonl.tmp" "$out/chapters.jsonl"
fi

# 2. The splits, by chapter.
if [[ ! -s $out/train.jsonl || ! -s $out/valid.jsonl || ! -s $out/test.jsonl ]]; then
  step "splitting $(wc -l < "$out/chapters.jsonl") chapters into train/valid/test"
  awk -v dir="$out" '{
      i = NR - 1
      f = (i % 50 == 24) ? "valid" : (i % 50 == 49) ? "test" : "train"
      print > (dir "/" f ".jsonl.tmp")
    }' "$out/chapters.jsonl"
  for s in train valid test; do mv "$out/$s.jsonl.tmp" "$out/$s.jsonl"; done
fi

# 3. The tokenizer, trained by trident on the training text only.
if [[ ! -s $out/tokenizer.json ]]; then
  step "training a byte-level BPE tokenizer (vocabulary $vocab_size)"
  text=$(mktemp "$out/.train-text.XXXXXX")
  # The verses of the training chapters, one per line (JSON escapes undone).
  sed -E 's/^\{"book": "[^"]*", "chapter": [0-9]+, "text": "//; s/"\}$//; s/\\n/\n/g; s/\\"/"/g; s/\\\\/\\/g' \
    "$out/train.jsonl" > "$text"
  "$trident" tokenizer train --input "$text" --vocab-size "$vocab_size" --special-token '<|endoftext|>' \
    --output "$out/tokenizer.json" --quiet
  rm -f "$text"
fi

# 4. The datasets.
for s in train valid test; do
  if [[ ! -s $out/kjv_$s.idx || ! -s $out/kjv_$s.bin ]]; then
    step "preprocessing $s"
    "$trident" preprocess --input "$out/$s.jsonl" --tokenizer "$out/tokenizer.json" \
      --output-prefix "$out/kjv_$s" --json-key text --append-eod --overwrite 2>&1 | tail -n 1
  fi
done
step "ready: $out/kjv_{train,valid,test}.{bin,idx} with $out/tokenizer.json"
