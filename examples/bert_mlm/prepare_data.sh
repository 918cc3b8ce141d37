#!/usr/bin/env bash
# The example's data: the King James Bible (Debian's bible-kjv, through
# scripts/prepare_corpus.sh, split by chapter), an uncased BERT-style WordPiece
# tokenizer trained by trident on the training chapters, and masked-LM datasets
# in which every chapter is one document framed as [CLS] chapter [SEP]
# (`trident preprocess --encoder`).
#
#   examples/bert_mlm/prepare_data.sh            # writes data/bert_mlm/ (gitignored)
#   TRIDENT=path/to/trident DATA_DIR=... VOCAB_SIZE=8000 examples/bert_mlm/prepare_data.sh
#
# Idempotent: a step whose output exists is skipped (delete it to redo the step).
# Every output is written beside its final name and moved there when complete.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
data_dir=${DATA_DIR:-$repo/data}
vocab_size=${VOCAB_SIZE:-8000}
trident=${TRIDENT:-$repo/build/bin/trident}
[[ -x $trident ]] || { echo "prepare_data: no trident at '$trident' (build it, or set TRIDENT=)" >&2; exit 1; }
out=$data_dir/bert_mlm
mkdir -p "$out"

# 1. The text, split by chapter (train.jsonl, valid.jsonl: {"book", "chapter", "text"}).
TRIDENT=$trident DATA_DIR=$data_dir "$repo/scripts/prepare_corpus.sh" >/dev/null
kjv=$data_dir/kjv

# 2. The WordPiece tokenizer ([PAD] [UNK] [CLS] [SEP] [MASK], lowercase), on the training chapters only.
if [[ ! -s $out/tokenizer.json ]]; then
  echo "prepare_data: training a WordPiece tokenizer (vocabulary $vocab_size)"
  text=$(mktemp "$out/.train-text.XXXXXX")
  sed -E 's/^\{"book": "[^"]*", "chapter": [0-9]+, "text": "//; s/"\}$//; s/\\n/\n/g; s/\\"/"/g; s/\\\\/\\/g' \
    "$kjv/train.jsonl" > "$text"
  "$trident" tokenizer train --model wordpiece --input "$text" --vocab-size "$vocab_size" \
    --output "$out/tokenizer.json.tmp" --quiet
  rm -f "$text"
  mv "$out/tokenizer.json.tmp" "$out/tokenizer.json"
fi

# 3. The masked-LM datasets: one document per chapter, [CLS] chapter [SEP].
for split in train valid; do
  if [[ ! -s $out/$split.idx || ! -s $out/$split.bin ]]; then
    echo "prepare_data: preprocessing $split"
    "$trident" preprocess --input "$kjv/$split.jsonl" --json-key text --tokenizer "$out/tokenizer.json" \
      --output-prefix "$out/.$split.tmp" --encoder --quiet --overwrite
    mv "$out/.$split.tmp.bin" "$out/$split.bin"
    mv "$out/.$split.tmp.idx" "$out/$split.idx"
  fi
done
echo "prepare_data: ready in $out (tokenizer.json, train.{bin,idx}, valid.{bin,idx})"
