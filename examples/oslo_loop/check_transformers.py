"""Example 1's two ends in transformers (run in the interop venv, scripts/python_env.sh).

  check_transformers.py make HF_DIR    a random tiny GPT-2 (GPT2Config with small sizes), saved with
                                       save_pretrained: the example's input, no download needed
  check_transformers.py check OUT_DIR  loads OUT_DIR/merged with GPT2LMHeadModel.from_pretrained and
                                       compares its logits on OUT_DIR/logits.safetensors' input_ids with
                                       the logits trident computed from OUT_DIR/sharded (at most 1e-4)

Exits non-zero when a check fails.
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel


def make(hf_dir):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=4, n_head=4, bos_token_id=511,
                        eos_token_id=511)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(hf_dir, safe_serialization=True)
    print(f"wrote a random GPT-2 ({sum(p.numel() for p in model.parameters())} parameters) to {hf_dir}")


def check(out_dir):
    saved = load_file(f"{out_dir}/logits.safetensors")
    model = GPT2LMHeadModel.from_pretrained(f"{out_dir}/merged", torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(saved["input_ids"]).logits
    diff = (logits - saved["logits"]).abs().max().item()
    ok = logits.shape == saved["logits"].shape and diff <= 1e-4
    print(f"transformers loaded {out_dir}/merged: logits {tuple(logits.shape)}, max |transformers - trident| = "
          f"{diff:.2e} ({'OK' if ok else 'FAIL: more than 1e-4'})")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "check"):
        sys.exit(__doc__)
    sys.exit(make(sys.argv[2]) if sys.argv[1] == "make" else check(sys.argv[2]))
