# Sourced by the shell tests: fail() and make_tiny_corpus TRIDENT DIR, which
# writes DIR/c.txt, a 300-token byte-level BPE DIR/tok.json and the Megatron
# dataset DIR/c.{bin,idx} with the trident command's own tokenizer and preprocess.
fail() { echo "FAIL: $*" >&2; exit 1; }

make_tiny_corpus() {
  local trident=$1 dir=$2
  for i in $(seq 1 400); do echo "line $i of the test corpus, with words that repeat and repeat again."; done \
    > "$dir/c.txt"
  "$trident" tokenizer train --input "$dir/c.txt" --vocab-size 300 --special-token '<|endoftext|>' \
    --output "$dir/tok.json" >/dev/null 2>&1 || fail "tokenizer train"
  "$trident" preprocess --input "$dir/c.txt" --tokenizer "$dir/tok.json" --output-prefix "$dir/c" --append-eod \
    --quiet || fail "preprocess"
}
