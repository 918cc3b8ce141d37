"""pytorch_model.bin interop: trident reads the pickled weights transformers writes with torch.save, and
gives the logits it gives from the safetensors copy of the same model (exactly) and transformers' logits.

1. GPT-2 (tied head): torch.save(model.state_dict()) into pytorch_model.bin, the head a view of the
   embedding's storage and the OrderedDict carrying its _metadata.
2. LLaMA through save_pretrained(safe_serialization=False), whole and sharded with max_shard_size
   (pytorch_model-0000k-of-0000n.bin and pytorch_model.bin.index.json); the sharded copy also split
   tp=2 x pp=2 over 4 ranks, each rank reading only its boxes. transformers 5 writes safetensors only
   and ignores the keyword, so there the files are written as transformers 4 wrote them: torch.save of
   the state dict through huggingface_hub's sharding (save_torch_state_dict, safe_serialization=False).
3. Views: q/k/v as slices of one storage, o_proj as a transposed view, in fp32 and bf16.
4. Beside model.safetensors, a .bin of other weights is not read (safetensors wins, as in transformers).
transformers loads each .bin directory back too, so the files are the real format.
"""
import os
import shutil
import sys

from common import logits_checks, model_interop, require, run

hf_logits, trident, tmp, np, torch, transformers = model_interop("/tmp/trident-bin-interop")
ids = [3, 17, 42, 5, 96, 0, 11, 64, 27, 8, 90, 33]
csv = ",".join(map(str, ids))
failures = []
read_logits, hf_logits_of, check = logits_checks(np, torch, ids, failures)
require("safetensors")
import safetensors.torch as safetensors_torch  # noqa: E402 (after the check that it is installed)


def trident_logits(d, vocab, *layout):
    """trident's logits from directory `d` (once per directory and layout)."""
    out = os.path.join(tmp, os.path.basename(d) + ("-tp2pp2" if layout else "") + ".logits")
    if not os.path.exists(out):
        cmd = [hf_logits, "load", d, csv, out, *layout]
        run([trident, "launch", "-n", "4", "--", *cmd] if layout else cmd)
    return read_logits(out, vocab)


def same(name, ours, reference):
    """trident's logits from the .bin against its logits from the safetensors copy: bit for bit."""
    diff = float(np.max(np.abs(ours - reference)))
    print(f"{'ok' if diff == 0 else 'FAIL'}: {name}: max |logit difference| from the safetensors copy = {diff:.2e}")
    if diff != 0:
        failures.append(name)


def save_bin(model, d, **kwargs):
    """save_pretrained(safe_serialization=False); where transformers writes no .bin (version 5), the same
    files through huggingface_hub, as transformers 4 did."""
    model.save_pretrained(d, safe_serialization=False, **kwargs)
    if any(n.endswith(".bin") for n in os.listdir(d)):
        return
    for n in os.listdir(d):
        if n.startswith("model") and (n.endswith(".safetensors") or n.endswith(".safetensors.index.json")):
            os.remove(os.path.join(d, n))
    require("huggingface_hub").save_torch_state_dict(model.state_dict(), d, safe_serialization=False,
                                                     max_shard_size=kwargs.get("max_shard_size", "50GB"))


def bin_only(d):
    names = sorted(os.listdir(d))
    if any(n.endswith(".safetensors") for n in names) or not any(n.endswith(".bin") for n in names):
        failures.append(f"{d} is not a .bin directory: {names}")
    return names


def transformers_reads(model, d, name):
    loaded = type(model).from_pretrained(d, torch_dtype=torch.float32)
    check(f"transformers reads the {name} back", hf_logits_of(loaded), hf_logits_of(model))


def perturbed(model):
    with torch.no_grad():  # norms away from their initial 1/0 so their layout matters
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


# 1. GPT-2: torch.save(model.state_dict()), the tied head sharing the embedding's storage.
gpt2 = perturbed(transformers.GPT2LMHeadModel(transformers.GPT2Config(
    vocab_size=97, n_positions=32, n_embd=48, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    initializer_range=0.2)))
st, pt = os.path.join(tmp, "gpt2-st"), os.path.join(tmp, "gpt2-bin")
gpt2.save_pretrained(st)
gpt2.config.save_pretrained(pt)
state = gpt2.state_dict()
assert state["lm_head.weight"].data_ptr() == state["transformer.wte.weight"].data_ptr()
torch.save(state, os.path.join(pt, "pytorch_model.bin"))
bin_only(pt)
reference = trident_logits(st, 97)
same("GPT-2 torch.save(model.state_dict())", trident_logits(pt, 97), reference)
check("GPT-2 pytorch_model.bin loaded by trident", trident_logits(pt, 97), hf_logits_of(gpt2))
transformers_reads(gpt2, pt, "GPT-2 pytorch_model.bin")

# 2. LLaMA: save_pretrained(safe_serialization=False), whole and sharded.
llama = perturbed(transformers.LlamaForCausalLM(transformers.LlamaConfig(
    vocab_size=97, hidden_size=48, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=32, initializer_range=0.2, tie_word_embeddings=False)))
st = os.path.join(tmp, "llama-st")
llama.save_pretrained(st)
reference = trident_logits(st, 97)
whole, sharded = os.path.join(tmp, "llama-bin"), os.path.join(tmp, "llama-bin-sharded")
save_bin(llama, whole)
save_bin(llama, sharded, max_shard_size="40KB")
bin_only(whole)
shards = [n for n in bin_only(sharded) if n.startswith("pytorch_model-")]
if len(shards) < 2 or not os.path.exists(os.path.join(sharded, "pytorch_model.bin.index.json")):
    failures.append(f"the sharded save has no index or one file: {sorted(os.listdir(sharded))}")
same("LLaMA pytorch_model.bin", trident_logits(whole, 97), reference)
same(f"LLaMA sharded into {len(shards)} .bin files", trident_logits(sharded, 97), reference)
same("LLaMA sharded .bin files under tp=2 x pp=2", trident_logits(sharded, 97, "2", "2"),
     trident_logits(st, 97, "2", "2"))  # the same layout from safetensors (its sums differ from one process's)
check("LLaMA pytorch_model.bin loaded by trident", trident_logits(whole, 97), hf_logits_of(llama))
transformers_reads(llama, sharded, "sharded LLaMA .bin files")

# 3. Views of shared storages (q/k/v slices of one tensor, o_proj transposed), fp32 and bf16.
for dtype in (torch.float32, torch.bfloat16):
    tag = str(dtype).split(".")[-1]
    state = {k: v.to(dtype) for k, v in llama.state_dict().items()}
    for layer in range(2):
        p = f"model.layers.{layer}.self_attn."
        fused = torch.cat([state[p + "q_proj.weight"], state[p + "k_proj.weight"], state[p + "v_proj.weight"]])
        q, k = state[p + "q_proj.weight"].shape[0], state[p + "k_proj.weight"].shape[0]
        state[p + "q_proj.weight"], state[p + "k_proj.weight"], state[p + "v_proj.weight"] = (
            fused[:q], fused[q:q + k], fused[q + k:])
        state[p + "o_proj.weight"] = state[p + "o_proj.weight"].t().contiguous().t()
    assert not state["model.layers.0.self_attn.o_proj.weight"].is_contiguous()
    copy, views = os.path.join(tmp, f"llama-st-{tag}"), os.path.join(tmp, f"llama-views-{tag}")
    for d in (copy, views):
        llama.config.save_pretrained(d)
    safetensors_torch.save_file({k: v.to(dtype).contiguous() for k, v in llama.state_dict().items()},
                                os.path.join(copy, "model.safetensors"), metadata={"format": "pt"})
    torch.save(state, os.path.join(views, "pytorch_model.bin"))
    same(f"LLaMA {tag} with views of shared storages", trident_logits(views, 97), trident_logits(copy, 97))

# 4. Safetensors wins over a .bin beside it.
both = os.path.join(tmp, "both")
shutil.copytree(os.path.join(tmp, "gpt2-st"), both)
other = transformers.GPT2LMHeadModel(gpt2.config)
torch.save(other.state_dict(), os.path.join(both, "pytorch_model.bin"))
same("GPT-2 model.safetensors beside another model's pytorch_model.bin", trident_logits(both, 97),
     trident_logits(os.path.join(tmp, "gpt2-st"), 97))

if failures:
    sys.exit(f"{len(failures)} check(s) failed: {failures}")
