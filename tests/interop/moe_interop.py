"""Mixture-of-experts interop with Hugging Face transformers, Mixtral and Qwen2-MoE
(fp32, max |logit difference| <= 1e-4):

1. trident saves a random Mixtral (4 experts, 2 per token) and Qwen2-MoE (a
   shared expert, weights not renormalised); MixtralForCausalLM and
   Qwen2MoeForCausalLM load them and give trident's logits.
2. transformers creates random models — Mixtral top-1, top-2 with a sliding
   window shorter than the sequence and top-3; Qwen2-MoE top-2 without and
   top-3 with norm_topk_prob — and save_pretrained()s them (per-expert
   tensors); trident loads them and gives their logits.
3. trident trains each family with the load-balancing loss on 2 data-parallel
   ranks and `trident export`s it; transformers loads the export and gives the
   logits trident computes from the checkpoint, greedy generation gives the
   text `trident generate` gives, and `trident eval` gives transformers' loss.
"""
import os
import sys

from common import check_eval, check_generate, logits_checks, model_interop, require, run, tiny_corpus

hf_logits, trident, tmp, np, torch, transformers = model_interop("/tmp/trident-moe-interop")
tokenizers = require("tokenizers")
ids = [3, 17, 42, 5, 96, 0, 11, 64, 27, 8, 90, 33]
csv = ",".join(map(str, ids))
failures = []
read_logits, hf_logits_of, check = logits_checks(np, torch, ids, failures)


# 1. trident -> transformers
for arch, cls in (("mixtral", transformers.MixtralForCausalLM), ("qwen2_moe", transformers.Qwen2MoeForCausalLM)):
    d = os.path.join(tmp, f"trident-{arch}")
    out = os.path.join(tmp, f"trident-{arch}.bin")
    run([hf_logits, "save", arch, d, csv, out])
    model = cls.from_pretrained(d, torch_dtype=torch.float32)
    check(f"trident {arch} saved, loaded by transformers {cls.__name__}", read_logits(out, model.config.vocab_size),
          hf_logits_of(model))

# 2. transformers -> trident
configs = {
    f"mixtral-{name}": transformers.MixtralConfig(vocab_size=97, hidden_size=48, intermediate_size=64,
                                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                  max_position_embeddings=32, num_local_experts=4,
                                                  num_experts_per_tok=k, sliding_window=window,
                                                  initializer_range=0.2, router_aux_loss_coef=0.02)
    for name, k, window in (("top1", 1, None), ("top2-window5", 2, 5), ("top3", 3, None))
}
for k, norm in ((2, False), (3, True)):
    configs[f"qwen2_moe-top{k}{'-norm' if norm else ''}"] = transformers.Qwen2MoeConfig(
        vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, num_experts=4, num_experts_per_tok=k,
        moe_intermediate_size=40, shared_expert_intermediate_size=56, norm_topk_prob=norm, initializer_range=0.2)
for name, config in configs.items():
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    with torch.no_grad():  # norms away from 1, biases and Qwen2-MoE's router away from their zeros
        for pname, p in model.named_parameters():
            if "norm" in pname or pname.endswith("_proj.bias") or pname.endswith("gate.weight"):
                p.add_(0.1 * torch.randn_like(p))
    d = os.path.join(tmp, f"hf-{name}")
    model.save_pretrained(d, safe_serialization=True)
    out = os.path.join(tmp, f"hf-{name}.bin")
    run([hf_logits, "load", d, csv, out])
    check(f"transformers {type(model).__name__} ({name}) saved, loaded by trident", read_logits(out, 97),
          hf_logits_of(model))

# 3. trained by trident (2 data-parallel ranks, aux loss on) -> trident export -> transformers
corpus = tiny_corpus(trident, os.path.join(tmp, "corpus"))
tok_json = os.path.join(corpus, "tok.json")
extra = {"mixtral": {"model.d_ff": 48},
         "qwen2_moe": {"model.d_ff": 64, "model.moe_d_ff": 24, "model.moe_shared_d_ff": 40}}
for arch, cls in (("mixtral", "MixtralForCausalLM"), ("qwen2_moe", "Qwen2MoeForCausalLM")):
    run_dir = os.path.join(tmp, f"trained-{arch}")
    sets = {"model.arch": f'"{arch}"', "model.n_layer": 2, "model.n_head": 4, "model.n_kv_head": 2,
            "model.d_model": 32, "model.n_experts": 4, "model.experts_per_token": 2,
            "model.moe_aux_loss_coef": 0.02, "model.max_seq_len": 32, "train.seq_len": 32,
            "data.tokenizer": tok_json, "data.paths": f'["{os.path.join(corpus, "c")}"]', "data.split": '"90,10,0"',
            "log.progress": "off", "train.micro_batch_size": 2, "train.global_batch_size": 8, "train.steps": 6,
            "train.eval_interval": 0, "train.peak_gflops": 1, "optim.lr": 3e-3, **extra[arch]}
    cmd = [trident, "launch", "-n", "2", "--", trident, "train", "--run-dir", run_dir]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    run(cmd)
    hf_dir = os.path.join(tmp, f"exported-{arch}")
    run([trident, "export", "--checkpoint", run_dir, "--output", hf_dir])
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    experts = getattr(model.config, "num_local_experts", None) or getattr(model.config, "num_experts", None)
    if type(model).__name__ != cls or experts != 4:
        failures.append(f"{arch} export loads as {type(model).__name__} with {experts} experts")
    if abs(model.config.router_aux_loss_coef - 0.02) > 1e-12:
        failures.append(f"{arch} export has router_aux_loss_coef {model.config.router_aux_loss_coef}, expected 0.02")
    with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
        step_dir = os.path.join(run_dir, "checkpoints", f.read().strip())
    out = os.path.join(tmp, f"trained-{arch}.bin")
    run([hf_logits, "checkpoint", step_dir, csv, out])
    check(f"trident {arch} trained on 2 ranks, exported, loaded by transformers", read_logits(out, 300),
          hf_logits_of(model))

    tok = tokenizers.Tokenizer.from_file(tok_json)
    # trident prints <|endoftext|> too.
    check_generate(trident, torch, model, tok, run_dir, arch, failures, skip_special_tokens=False)

    check_eval(trident, torch, model, tok, run_dir, corpus, arch, failures)

if failures:
    sys.exit(f"{len(failures)} interop check(s) failed: {failures}")
