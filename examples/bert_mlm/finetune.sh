#!/usr/bin/env bash
# The seed's other half: fine-tune a BERT that starts from a Hugging Face
# directory (BertForMaskedLM.from_pretrained's layout; a BertModel directory
# works too, its MLM head then starting from the initialiser). Here the
# directory is trident's own export of the model sbatch.sh trained; on a
# cluster it would be bert-large-uncased copied in from the Hub. Runs on 4
# ranks with the seed's ds_config.json unchanged (ZeRO-3, Adam at 1e-4).
#
#   examples/bert_mlm/finetune.sh            # after sbatch.sh (or RUN_DIR=... of any BERT run)
#
# Environment: TRIDENT, DATA_DIR, RUN_DIR (the run to start from; default
# runs/bert_mlm), HF_DIR (default runs/bert_mlm-hf), OUT_DIR (default
# runs/bert_mlm-finetune), STEPS (default 200).
set -euo pipefail
cd "$(dirname "$0")/../.."
trident=${TRIDENT:-build/bin/trident}
data=${DATA_DIR:-data}/bert_mlm
hf_dir=${HF_DIR:-runs/bert_mlm-hf}
out=${OUT_DIR:-runs/bert_mlm-finetune}

# 1. A Hugging Face directory (config.json, model.safetensors, tokenizer.json).
"$trident" export --checkpoint "${RUN_DIR:-runs/bert_mlm}" --output "$hf_dir"
echo "finetune: before: $("$trident" eval --checkpoint "${RUN_DIR:-runs/bert_mlm}" --data "$data/valid" --seq-len 128)"

# 2. Fine-tune from it: the sizes come from its config.json, the weights from its safetensors.
"$trident" launch -n 4 -- "$trident" train --deepspeed examples/bert_mlm/ds_config.json --run-dir "$out" \
  --set "model.from_pretrained=\"$hf_dir\"" \
  --set "data.tokenizer=\"$hf_dir/tokenizer.json\"" \
  --set "data.paths=[\"$data/train\"]" --set "data.valid_paths=[\"$data/valid\"]" --set 'data.split="100,0,0"' \
  --set train.seq_len=128 --set "train.steps=${STEPS:-200}" --set train.eval_interval=100 --set train.eval_steps=8 \
  --set train.log_interval=50 --set log.progress=off
echo "finetune: after:  $("$trident" eval --checkpoint "$out" --data "$data/valid" --seq-len 128)"
