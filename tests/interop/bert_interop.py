"""BERT interop with Hugging Face transformers (fp32, max |difference| <= 1e-4):

1. trident saves a random BERT (tied and untied head); BertForMaskedLM loads it
   and gives trident's logits (with token types of both kinds).
2. transformers creates random BertForMaskedLM models (tied and untied) and
   save_pretrained()s them; trident loads them and gives transformers' logits,
   on one process and split tp=2 x pp=2 over 4 ranks, with token types and an
   attention mask that pads the last keys. A BertModel directory (no MLM head)
   loads too and gives BertModel's last hidden states.
3. a BERT trained with masked LM under tp=2 x pp=2 with sequence parallelism
   is exported; BertForMaskedLM.from_pretrained gives the logits trident
   computes from the checkpoint, and fills [MASK] with the same tokens.
   `trident generate` refuses the encoder with a clear message.
"""
import os
import sys

from common import model_interop, require, run

hf_logits, trident, tmp, np, torch, transformers = model_interop("/tmp/trident-bert-interop")
ids = [2, 17, 42, 5, 96, 0, 11, 64, 27, 8, 90, 3]
types = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1]
mask = [1] * 9 + [0] * 3  # the last three tokens are padding
csv = lambda values: ",".join(map(str, values))
failures = []


def env(types=None, mask=None, output=None):
    e = dict(os.environ)
    for key, value in (("TRIDENT_TOKEN_TYPES", types), ("TRIDENT_ATTENTION_MASK", mask), ("TRIDENT_OUTPUT", output)):
        e.pop(key, None)
        if value is not None:
            e[key] = value if isinstance(value, str) else csv(value)
    return e


def run_with(cmd, environment):
    import subprocess
    p = subprocess.run(cmd, capture_output=True, env=environment)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr.decode(errors='replace')}")


def read(path, width):
    return np.fromfile(path, dtype="<f4").reshape(len(ids), width)


def theirs(model, token_types=None, attention_mask=None, hidden=False):
    model.eval()
    kwargs = {}
    if token_types is not None:
        kwargs["token_type_ids"] = torch.tensor([token_types])
    if attention_mask is not None:
        kwargs["attention_mask"] = torch.tensor([attention_mask])
    with torch.no_grad():
        out = model(torch.tensor([ids]), **kwargs)
    return (out.last_hidden_state if hidden else out.logits)[0].float().numpy()


def check(name, ours, reference):
    diff = float(np.max(np.abs(ours - reference)))
    status = "ok" if diff <= 1e-4 else "FAIL"
    print(f"{status}: {name}: max |difference| = {diff:.2e} (values up to {float(np.max(np.abs(reference))):.2f})")
    if diff > 1e-4:
        failures.append(name)


# 1. trident -> transformers
for arch in ("bert", "bert-untied"):
    d = os.path.join(tmp, f"trident-{arch}")
    out = os.path.join(tmp, f"trident-{arch}.bin")
    run_with([hf_logits, "save", arch, d, csv(ids), out], env(types=types))
    model = transformers.BertForMaskedLM.from_pretrained(d, torch_dtype=torch.float32)
    check(f"trident {arch} saved, loaded by transformers BertForMaskedLM", read(out, model.config.vocab_size),
          theirs(model, token_types=types))

# 2. transformers -> trident
for tied in (True, False):
    config = transformers.BertConfig(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=96, max_position_embeddings=32, type_vocab_size=2,
                                     initializer_range=0.2, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, tie_word_embeddings=tied)
    model = transformers.BertForMaskedLM(config).float()
    with torch.no_grad():  # norms and biases away from their initial 1/0 so their layout matters
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    name = "tied" if tied else "untied"
    d = os.path.join(tmp, f"hf-bert-{name}")
    model.save_pretrained(d, safe_serialization=True)
    for label, launch, extra in (("one process", [], []), ("tp=2 x pp=2", [trident, "launch", "-n", "4", "--"],
                                                           ["2", "2"])):
        out = os.path.join(tmp, f"hf-bert-{name}-{len(launch)}.bin")
        run_with(launch + [hf_logits, "load", d, csv(ids), out] + extra, env(types=types, mask=mask))
        check(f"transformers BertForMaskedLM ({name}) with padding, loaded by trident on {label}",
              read(out, config.vocab_size), theirs(model, token_types=types, attention_mask=mask))

    if tied:
        encoder = transformers.BertModel(config, add_pooling_layer=True).float()
        with torch.no_grad():
            for n, p in encoder.named_parameters():
                if "LayerNorm" in n or n.endswith("bias"):
                    p.add_(0.1 * torch.randn_like(p))
        d = os.path.join(tmp, "hf-bertmodel")
        encoder.save_pretrained(d, safe_serialization=True)
        out = os.path.join(tmp, "hf-bertmodel.bin")
        run_with([hf_logits, "load", d, csv(ids), out], env(types=types, mask=mask, output="hidden"))
        check("transformers BertModel (no MLM head) loaded by trident: last hidden states",
              read(out, config.hidden_size), theirs(encoder, token_types=types, attention_mask=mask, hidden=True))
        out = os.path.join(tmp, "hf-bertmodel-pooled.bin")
        run_with([hf_logits, "load", d, csv(ids), out], env(types=types, mask=mask, output="pooled"))
        with torch.no_grad():
            pooled = encoder(torch.tensor([ids]), token_type_ids=torch.tensor([types]),
                             attention_mask=torch.tensor([mask])).pooler_output[0].numpy()
        check("transformers BertModel loaded by trident: pooled output",
              np.fromfile(out, dtype="<f4"), pooled)

# 3. trident trains a BERT (masked LM) under tp=2 x pp=2 with sequence parallelism and exports it;
# BertForMaskedLM gives the checkpoint's logits and fills the masks with the same tokens.
corpus = os.path.join(tmp, "corpus")
os.makedirs(corpus, exist_ok=True)
text = os.path.join(corpus, "c.txt")
with open(text, "w") as f:
    for i in range(1, 401):
        f.write(f"Line {i} of the test corpus, with words that repeat and repeat again.\n")
tok = os.path.join(corpus, "tok.json")
run([trident, "tokenizer", "train", "--model", "wordpiece", "--input", text, "--vocab-size", "120", "--output", tok])
run([trident, "preprocess", "--input", text, "--tokenizer", tok, "--output-prefix", os.path.join(corpus, "c"),
     "--encoder", "--quiet"])
run_dir = os.path.join(tmp, "trained-bert")
sets = {"model.arch": '"bert"', "model.n_layer": 4, "model.n_head": 4, "model.d_model": 32, "model.max_seq_len": 32,
        "train.seq_len": 32, "data.tokenizer": tok, "data.paths": f'["{os.path.join(corpus, "c")}"]',
        "data.split": '"90,10,0"', "log.progress": "off", "train.micro_batch_size": 2, "train.global_batch_size": 8,
        "train.steps": 6, "train.eval_interval": 0, "train.peak_gflops": 1, "optim.lr": 3e-3,
        "dist.tensor_parallel_size": 2, "dist.pipeline_parallel_size": 2, "dist.sequence_parallel": "true"}
cmd = [trident, "launch", "-n", "4", "--", trident, "train", "--run-dir", run_dir]
for k, v in sets.items():
    cmd += ["--set", f"{k}={v}"]
run(cmd)
hf_dir = os.path.join(tmp, "exported-bert")
run([trident, "export", "--checkpoint", run_dir, "--output", hf_dir])
model = transformers.BertForMaskedLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
tokenizer = require("tokenizers").Tokenizer.from_file(tok)
masked_ids = tokenizer.encode("line 7 of the [MASK] corpus, with [MASK] that repeat").ids
with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
    step_dir = os.path.join(run_dir, "checkpoints", f.read().strip())
ids = masked_ids  # read() and theirs() use the module's ids
out = os.path.join(tmp, "trained-bert.bin")
run_with([hf_logits, "checkpoint", step_dir, csv(ids), out], env())
ours = read(out, model.config.vocab_size)
check("trident BERT trained under tp=2 x pp=2 with sequence parallelism, exported, loaded by BertForMaskedLM",
      ours, theirs(model))
mask_id = tokenizer.token_to_id("[MASK]")
at = [i for i, t in enumerate(ids) if t == mask_id]
ours_fill = [int(np.argmax(ours[i])) for i in at]
theirs_fill = [int(np.argmax(theirs(model)[i])) for i in at]
status = "ok" if ours_fill == theirs_fill else "FAIL"
print(f"{status}: the masks filled with {[tokenizer.id_to_token(t) for t in ours_fill]} by trident, "
      f"{[tokenizer.id_to_token(t) for t in theirs_fill]} by transformers")
if status != "ok":
    failures.append("masked predictions")

# `trident generate` refuses an encoder with a clear message.
import subprocess
p = subprocess.run([trident, "generate", "--checkpoint", run_dir, "--prompt", "line 7"], capture_output=True)
message = p.stderr.decode()
status = "ok" if p.returncode != 0 and "cannot generate text" in message else "FAIL"
print(f"{status}: trident generate on a BERT checkpoint: exit {p.returncode}: {message.strip()}")
if status != "ok":
    failures.append("generate refusal")

if failures:
    sys.exit(f"{len(failures)} BERT interop check(s) failed: {failures}")
