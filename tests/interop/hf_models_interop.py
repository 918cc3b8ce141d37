"""Model interop with Hugging Face transformers (issue 4).

1. trident saves random GPT-2 and LLaMA models (config.json + model.safetensors);
   transformers loads them (GPT2LMHeadModel, LlamaForCausalLM) and gives the
   logits trident gave (max abs diff <= 1e-4, fp32).
2. transformers creates random models and save_pretrained()s them; trident loads
   them and gives transformers' logits.
"""
import os
import sys

from common import require, run, skip

hf_logits = sys.argv[1]
np = require("numpy")
torch = require("torch")
transformers = require("transformers")
tmp = os.environ.get("TRIDENT_TEST_TMP", "/tmp/trident-hf-interop")
os.makedirs(tmp, exist_ok=True)
torch.manual_seed(0)
ids = [3, 17, 42, 5, 96, 0, 11, 64, 27, 8, 90, 33]
csv = ",".join(map(str, ids))
failures = []


def read_logits(path, vocab):
    return np.fromfile(path, dtype="<f4").reshape(len(ids), vocab)


def hf_logits_of(model):
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def check(name, ours, theirs):
    diff = float(np.max(np.abs(ours - theirs)))
    scale = float(np.max(np.abs(theirs)))
    status = "ok" if diff <= 1e-4 else "FAIL"
    print(f"{status}: {name}: max |logit difference| = {diff:.2e} (logits up to {scale:.2f})")
    if diff > 1e-4:
        failures.append(name)


# 1. trident -> transformers
for arch, cls in (("gpt2", transformers.GPT2LMHeadModel), ("llama", transformers.LlamaForCausalLM)):
    d = os.path.join(tmp, f"trident-{arch}")
    out = os.path.join(tmp, f"trident-{arch}.bin")
    run([hf_logits, "save", arch, d, csv, out])
    model = cls.from_pretrained(d, torch_dtype=torch.float32)
    vocab = model.config.vocab_size
    check(f"trident {arch} saved, loaded by transformers {cls.__name__}", read_logits(out, vocab), hf_logits_of(model))

# 2. transformers -> trident
configs = {
    "gpt2": transformers.GPT2Config(vocab_size=97, n_positions=32, n_embd=48, n_layer=2, n_head=4,
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2),
    "llama": transformers.LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=112, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                      initializer_range=0.2, tie_word_embeddings=False),
}
for arch, config in configs.items():
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    with torch.no_grad():  # norms away from their initial 1/0 so their layout matters
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    d = os.path.join(tmp, f"hf-{arch}")
    model.save_pretrained(d, safe_serialization=True)
    out = os.path.join(tmp, f"hf-{arch}.bin")
    run([hf_logits, "load", d, csv, out])
    check(f"transformers {type(model).__name__} saved, loaded by trident", read_logits(out, config.vocab_size),
          hf_logits_of(model))

if failures:
    sys.exit(f"{len(failures)} interop check(s) failed: {failures}")
