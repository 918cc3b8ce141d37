"""Model interop with Hugging Face transformers, for every family: GPT-2, LLaMA,
Mistral (a sliding window shorter than the sequence) and Qwen2 (q/k/v biases,
tied and untied embeddings).

1. trident saves random models (config.json + model.safetensors); transformers
   loads them (GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
   Qwen2ForCausalLM) and gives the logits trident gave (max abs diff <= 1e-4, fp32).
   The LLaMA is saved once with the plain RoPE and once with Llama 3.1's scaling.
2. transformers creates random models and save_pretrained()s them; trident loads
   them and gives transformers' logits — on one process, and split tp=2 × pp=2
   over 4 ranks, each rank reading only its slices of the safetensors file.
3. trident trains each family under tp=2 × pp=2 (4 ranks; the vocabulary is
   padded for tensor parallelism) and `trident export`s the checkpoint, split
   into several safetensors files with an index; transformers loads the export
   and gives the logits trident computes from the checkpoint, and greedy
   generation gives the text `trident generate` gives.
4. `trident eval` on a text file gives the loss transformers computes on the
   export for the same windows.
"""
import os
import sys

from common import check_eval, check_generate, logits_checks, model_interop, require, run, skip, tiny_corpus

hf_logits, trident, tmp, np, torch, transformers = model_interop("/tmp/trident-hf-interop")
ids = [3, 17, 42, 5, 96, 0, 11, 64, 27, 8, 90, 33]
csv = ",".join(map(str, ids))
failures = []
read_logits, hf_logits_of, check = logits_checks(np, torch, ids, failures)


# 1. trident -> transformers
for arch, cls in (("gpt2", transformers.GPT2LMHeadModel), ("llama", transformers.LlamaForCausalLM),
                  ("llama3", transformers.LlamaForCausalLM), ("mistral", transformers.MistralForCausalLM),
                  ("qwen2", transformers.Qwen2ForCausalLM)):
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
                                      initializer_range=0.2, tie_word_embeddings=False,
                                      rope_theta=500000.0),  # Llama 3's base: transformers 5 writes rope_parameters
    # Llama 3.1's RoPE scaling; head_dim 12 and an original context of 64 give kept, interpolated and divided pairs.
    "llama3": transformers.LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=112, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                       initializer_range=0.2, tie_word_embeddings=False,
                                       rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                        "original_max_position_embeddings": 64}),
    # A window of 5 over 12 tokens: the later queries no longer see the first keys.
    "mistral": transformers.MistralConfig(vocab_size=97, hidden_size=48, intermediate_size=112, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                          initializer_range=0.2, sliding_window=5),
    "qwen2": transformers.Qwen2Config(vocab_size=97, hidden_size=48, intermediate_size=112, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                      initializer_range=0.2, tie_word_embeddings=True, rope_theta=1000000.0),
    "qwen2-untied": transformers.Qwen2Config(vocab_size=97, hidden_size=48, intermediate_size=112,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=32, initializer_range=0.2,
                                             tie_word_embeddings=False),
}
hf_models = {}
for arch, config in configs.items():
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    hf_models[arch] = model
    with torch.no_grad():  # norms away from their initial 1/0 so their layout matters
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name or name.endswith("_proj.bias"):
                p.add_(0.1 * torch.randn_like(p))  # (Qwen2's q/k/v biases start at zero too)
    d = os.path.join(tmp, f"hf-{arch}")
    model.save_pretrained(d, safe_serialization=True)
    out = os.path.join(tmp, f"hf-{arch}.bin")
    run([hf_logits, "load", d, csv, out])
    check(f"transformers {type(model).__name__} ({arch}) saved, loaded by trident", read_logits(out, config.vocab_size),
          hf_logits_of(model))

    # The same directory split tp=2 × pp=2 over 4 ranks.
    out = os.path.join(tmp, f"hf-{arch}-tp2pp2.bin")
    run([trident, "launch", "-n", "4", "--", hf_logits, "load", d, csv, out, "2", "2"])
    check(f"transformers {type(model).__name__} ({arch}) saved, loaded by trident under tp=2 x pp=2",
          read_logits(out, config.vocab_size), hf_logits_of(model))

# 3. trident trained under tp=2 × pp=2 -> trident export -> transformers
corpus = tiny_corpus(trident, os.path.join(tmp, "corpus"))
for arch in ("gpt2", "llama", "mistral", "qwen2"):
    run_dir = os.path.join(tmp, f"trained-{arch}")
    sets = {"model.arch": f'"{arch}"', "model.n_layer": 4, "model.n_head": 4, "model.d_model": 32,
            "model.max_seq_len": 32, "train.seq_len": 32, "data.tokenizer": os.path.join(corpus, "tok.json"),
            "data.paths": f'["{os.path.join(corpus, "c")}"]', "data.split": '"90,10,0"', "log.progress": "off",
            "train.micro_batch_size": 2, "train.global_batch_size": 8, "train.steps": 6, "train.eval_interval": 0,
            "train.peak_gflops": 1, "optim.lr": 3e-3, "dist.tensor_parallel_size": 2,
            "dist.pipeline_parallel_size": 2}
    if arch != "gpt2":
        sets.update({"model.n_kv_head": 2, "model.d_ff": 64})
    if arch == "mistral":
        sets["model.sliding_window"] = 8  # shorter than the 32-token sequences
    cmd = [trident, "launch", "-n", "4", "--", trident, "train", "--run-dir", run_dir]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    run(cmd)
    hf_dir = os.path.join(tmp, f"exported-{arch}")
    run([trident, "export", "--checkpoint", run_dir, "--output", hf_dir, "--max-shard-size", "40KB"])
    shards = [n for n in os.listdir(hf_dir) if n.startswith("model-") and n.endswith(".safetensors")]
    if len(shards) < 2 or not os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json")):
        failures.append(f"{arch} export not sharded: {sorted(os.listdir(hf_dir))}")
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    if model.config.vocab_size != 300:
        failures.append(f"{arch} export has vocab_size {model.config.vocab_size}, expected the unpadded 300")
    eod = require("tokenizers").Tokenizer.from_file(os.path.join(corpus, "tok.json")).token_to_id("<|endoftext|>")
    if model.config.eos_token_id != eod:
        failures.append(f"{arch} export has eos_token_id {model.config.eos_token_id}, expected <|endoftext|> = {eod}")
    with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
        step_dir = os.path.join(run_dir, "checkpoints", f.read().strip())
    out = os.path.join(tmp, f"trained-{arch}.bin")
    run([hf_logits, "checkpoint", step_dir, csv, out])
    check(f"trident {arch} trained under tp=2 x pp=2, exported ({len(shards)} files), loaded by transformers "
          f"{type(model).__name__}", read_logits(out, 300), hf_logits_of(model))

    # Greedy generation with the KV cache: 24 new tokens after the prompt, past Mistral's window of 8.
    tok = require("tokenizers").Tokenizer.from_file(os.path.join(corpus, "tok.json"))
    check_generate(trident, torch, model, tok, run_dir, arch, failures)

    # 4. `trident eval` on a text file gives the loss transformers computes for the same windows: the
    # file's first 300 tokens (tokenizers' own encoding of it), windows of 32 inputs with stride 32.
    check_eval(trident, torch, model, tok, run_dir, corpus, arch, failures)

if failures:
    sys.exit(f"{len(failures)} interop check(s) failed: {failures}")
