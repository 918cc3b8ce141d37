#!/usr/bin/env bash
# trident generate stops at the eos ids of the checkpoint's config.json, which a fine-tuned model keeps
# from its pretrained config (a list, as Llama 3 instruct's): a model whose every id is an eos id
# prints its prompt and nothing more, and --ignore-eos generates anyway. A run of trident's own writes
# its tokenizer's end-of-document id.
#   generate_eos_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus_run "$trident" eos

data=("${tiny_data[@]}" --set train.seq_len=16 --set train.micro_batch_size=2 --set train.steps=2
      --set train.eval_interval=0)
"$trident" train --run-dir "$work/base" --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16 \
  --set model.max_seq_len=16 "${data[@]}" > "$work/base.log" 2>&1 || fail "training: $(tail -5 "$work/base.log")"
eod=$(printf '%s' '<|endoftext|>' | "$trident" tokenizer encode --tokenizer "$work/tok.json" --no-special-tokens)
grep -q "\"eos_token_id\": $eod\b" "$work/base/checkpoints/step_00000002/config.json" \
  || fail "config.json lacks eos_token_id $eod: $(cat "$work/base/checkpoints/step_00000002/config.json")"

# The export with every id an eos id, as the pretrained model of a fine-tuning run.
"$trident" export --checkpoint "$work/base" --output "$work/hf" > /dev/null || fail "export"
vocab=$(sed -n 's/.*"vocab_size": \([0-9]*\).*/\1/p' "$work/hf/config.json")
all=$(seq -s, 0 $((vocab - 1)))
sed -i "s/\"eos_token_id\": [0-9]*/\"eos_token_id\": [$all]/" "$work/hf/config.json"
grep -q "\"eos_token_id\": \[0,1," "$work/hf/config.json" || fail "could not edit $work/hf/config.json"
"$trident" train --run-dir "$work/tuned" --set "model.from_pretrained=\"$work/hf\"" "${data[@]}" \
  > "$work/tuned.log" 2>&1 || fail "fine-tuning: $(tail -5 "$work/tuned.log")"

out=$("$trident" generate --checkpoint "$work/tuned" --prompt "line 7" --max-new-tokens 8 --greedy 2>&1) \
  || fail "generate: $out"
[[ $out == "line 7" ]] || fail "generate did not stop at the first token (every id is an eos id): '$out'"
out=$("$trident" generate --checkpoint "$work/tuned" --prompt "line 7" --max-new-tokens 8 --greedy --ignore-eos 2>&1) \
  || fail "generate --ignore-eos: $out"
[[ ${#out} -gt 6 ]] || fail "generate --ignore-eos printed nothing new: '$out'"
echo "ok: eos_token_id $eod written; a list of eos ids stops generation; --ignore-eos: '$out'"
