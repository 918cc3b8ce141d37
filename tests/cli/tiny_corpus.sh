# Sourced by the shell tests: fail(), sanitizer_build TRIDENT and make_tiny_corpus
# TRIDENT DIR, which writes DIR/c.txt, a 300-token byte-level BPE DIR/tok.json and
# the Megatron dataset DIR/c.{bin,idx} with the trident command's own tokenizer and
# preprocess.
fail() { echo "FAIL: $*" >&2; exit 1; }

# Whether TRIDENT is a sanitizer build (it links libasan or libubsan). The tests skip
# their mpirun parts there: LeakSanitizer reports Open MPI's own unfreed allocations
# when a rank exits normally, and with abort_on_error=1 (scripts/test.sh) the rank
# aborts, so a clean multi-rank run exits non-zero. The multi-rank parts run in the
# Release pass. ldd's output is read whole: `ldd | grep -q` under `set -o pipefail`
# misses (46 of 200 tries, measured) when grep exits at the libasan line and ldd, still
# writing, dies of SIGPIPE.
sanitizer_build() {
  local libs
  libs=$(ldd "$1" 2>/dev/null) || return 1
  [[ $libs == *libasan* || $libs == *libubsan* ]]
}

make_tiny_corpus() {
  local trident=$1 dir=$2
  for i in $(seq 1 400); do echo "line $i of the test corpus, with words that repeat and repeat again."; done \
    > "$dir/c.txt"
  "$trident" tokenizer train --input "$dir/c.txt" --vocab-size 300 --special-token '<|endoftext|>' \
    --output "$dir/tok.json" >/dev/null 2>&1 || fail "tokenizer train"
  "$trident" preprocess --input "$dir/c.txt" --tokenizer "$dir/tok.json" --output-prefix "$dir/c" --append-eod \
    --quiet || fail "preprocess"
}
