"""Helpers shared by the interop scripts: running trident, generating text."""
import json
import os
import random
import shutil
import subprocess
import sys


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


def require(module):
    try:
        return __import__(module)
    except ImportError as e:  # the venv exists but lacks the package
        skip(f"Python package '{module}' is unavailable: {e}")


def run(cmd, stdin=None):
    """Runs a command, returns stdout bytes; fails the test with its stderr."""
    p = subprocess.run(cmd, input=stdin, capture_output=True)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr.decode(errors='replace')}")
    return p.stdout


def tiny_corpus_lines():
    """The tiny corpus's 400 short lines (tests/cli/tiny_corpus.sh writes the same)."""
    return [f"line {i} of the test corpus, with words that repeat and repeat again." for i in range(1, 401)]


def tiny_corpus(trident, directory):
    """Makes `directory` hold a small training corpus as the training scripts use it: c.txt (400 short
    lines), tok.json (a byte-level BPE of 300 tokens with <|endoftext|>) and the indexed dataset c.bin/c.idx
    (documents end with EOD). Returns the directory."""
    os.makedirs(directory, exist_ok=True)
    text = os.path.join(directory, "c.txt")
    with open(text, "w") as f:
        f.writelines(line + "\n" for line in tiny_corpus_lines())
    tok_json = os.path.join(directory, "tok.json")
    run([trident, "tokenizer", "train", "--input", text, "--vocab-size", "300", "--special-token", "<|endoftext|>",
         "--output", tok_json])
    run([trident, "preprocess", "--input", text, "--tokenizer", tok_json, "--output-prefix",
         os.path.join(directory, "c"), "--append-eod", "--quiet"])
    return directory


def fresh_dir(default):
    """The script's scratch directory, $TRIDENT_TEST_TMP (ctest gives each test its own), else `default`,
    emptied first: a fresh run each time, as trident refuses to start over an earlier run."""
    d = os.environ.get("TRIDENT_TEST_TMP", default)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def model_interop(default_dir):
    """The start of a model interop script, run as SCRIPT HF_LOGITS TRIDENT: requires numpy, torch and
    transformers (skips without them), makes the scratch directory (fresh_dir) and seeds torch with 0.
    Returns (hf_logits, trident, tmp, np, torch, transformers)."""
    hf_logits, trident = sys.argv[1], sys.argv[2]
    np, torch, transformers = require("numpy"), require("torch"), require("transformers")
    tmp = fresh_dir(default_dir)
    torch.manual_seed(0)
    return hf_logits, trident, tmp, np, torch, transformers


def trident_bpe(trident, text_path, vocab_size, output):
    """Trains trident's byte-level BPE of `vocab_size` tokens with <|endoftext|> on `text_path` into
    `output`; returns `output`."""
    run([trident, "tokenizer", "train", "--input", text_path, "--vocab-size", str(vocab_size), "--special-token",
         "<|endoftext|>", "--output", output, "--quiet"])
    return output


def logits_checks(np, torch, ids, failures, bound=1e-4):
    """The logits comparisons of the model interop scripts, for the token ids `ids`:
    read_logits(path, vocab) reads trident's [len(ids), vocab] little-endian f32 file,
    hf_logits_of(model) runs a transformers model on them (eval, no grad), and
    check(name, ours, theirs) prints the max |difference| and records a failure above `bound`."""
    def read_logits(path, vocab):
        return np.fromfile(path, dtype="<f4").reshape(len(ids), vocab)

    def hf_logits_of(model):
        model.eval()
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0].float().numpy()

    def check(name, ours, theirs):
        diff = float(np.max(np.abs(ours - theirs)))
        scale = float(np.max(np.abs(theirs)))
        status = "ok" if diff <= bound else "FAIL"
        print(f"{status}: {name}: max |logit difference| = {diff:.2e} (logits up to {scale:.2f})")
        if diff > bound:
            failures.append(name)

    return read_logits, hf_logits_of, check


def check_generate(trident, torch, model, tok, run_dir, arch, failures, skip_special_tokens=True):
    """Greedy generation with the KV cache, 24 new tokens after the prompt "line 7 of the": `trident generate`
    of the checkpoint in `run_dir` prints the text the transformers `model` generates (decoded by `tok`, a
    tokenizers Tokenizer, its special tokens kept unless `skip_special_tokens`). Prints the comparison;
    records "ARCH generation" in `failures` when they differ."""
    prompt = "line 7 of the"
    with torch.no_grad():
        generated = model.generate(torch.tensor([tok.encode(prompt).ids]), max_new_tokens=24, do_sample=False,
                                   eos_token_id=None, pad_token_id=0)[0].tolist()
    theirs = tok.decode(generated, skip_special_tokens=skip_special_tokens).strip()
    ours = run([trident, "generate", "--checkpoint", run_dir, "--prompt", prompt, "--max-new-tokens", "24",
                "--greedy", "--ignore-eos"]).decode().strip()
    status = "ok" if ours == theirs else "FAIL"
    print(f"{status}: trident generate of the {arch} checkpoint: {ours!r}, transformers {theirs!r}")
    if status != "ok":
        failures.append(f"{arch} generation")


def check_eval(trident, torch, model, tok, run_dir, corpus, arch, failures):
    """`trident eval` of the checkpoint in `run_dir` on corpus/c.txt gives the loss the transformers `model`
    computes for the same windows: the file's first 300 tokens (`tok`'s encoding of it, a tokenizers
    Tokenizer), windows of 32 inputs with stride 32. Prints the comparison; records "ARCH eval" in
    `failures` when they differ by more than trident's 4 printed decimals allow."""
    with open(os.path.join(corpus, "c.txt")) as f:
        stream = tok.encode(f.read()).ids[:300]
    nll = 0.0
    with torch.no_grad():
        for start in range(0, len(stream) - 1, 32):
            window = torch.tensor([stream[start:start + 33]])
            logits = model(window[:, :-1]).logits[0]
            nll += float(torch.nn.functional.cross_entropy(logits, window[0, 1:], reduction="sum"))
    theirs = nll / (len(stream) - 1)
    line = run([trident, "eval", "--checkpoint", run_dir, "--text", os.path.join(corpus, "c.txt"), "--max-tokens",
                "300", "--seq-len", "32"]).decode()
    ours = float(line.split(": loss ")[1].split()[0])
    status = "ok" if abs(ours - theirs) <= 1.5e-4 else "FAIL"  # trident prints 4 decimals
    print(f"{status}: trident eval of the {arch} checkpoint: loss {ours:.4f}, transformers {theirs:.6f}")
    if status != "ok":
        failures.append(f"{arch} eval")


def tricky_text(seed=1, every_code_point=True, repeats=20000, stride=1):
    """Text that stresses pre-tokenization: every code point (but surrogates) in
    several contexts, runs of spaces/newlines/CR, NBSP and other Unicode spaces,
    contractions in both cases, digits of several scripts, emoji with modifiers,
    and special tokens glued to words."""
    rnd = random.Random(seed)
    parts = []
    if every_code_point:
        contexts = ["a{}", " {}", "{}1", "  {}\n", "{}", "'{}", "{} x", "\u00a0{}", "{}\r\n"]
        for c in range(0, 0x110000, stride):
            if 0xD800 <= c <= 0xDFFF:
                continue
            parts.append(rnd.choice(contexts).format(chr(c)))
    snippets = [
        "  hello  world\n\n\n  ", "don't I'll we've they're it's 'S 'LL DON'T", "\t\t\n \r\n", "x   y\u00a0\u00a0z\u3000\u2028q",
        "😀👍🏽 emoji 🇫🇷", "12345 ١٢٣ ⅷ 3.14", " <|endoftext|> a<|endoftext|>b  <|endoftext|>\n", "ünïcödé naïve café",
        "中文字符测试，标点。", "    indented code:\n\tif (x) { return y; }\n", "   ", "\n", "a" * 300, "1" * 50,
        "<tag> wrapped <tag>in</tag> xyz axyz xyzb", "Mixed   \u2003spaces\u2009and\u200bzero width",
    ]
    for _ in range(repeats):
        parts.append(rnd.choice(snippets))
    return "".join(parts)


def write_text(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def trident_encode(trident, tokenizer, path, special=True):
    cmd = [trident, "tokenizer", "encode", "--tokenizer", tokenizer, "--input", path]
    if not special:
        cmd.append("--no-special-tokens")
    return [int(x) for x in run(cmd).split()]


def trident_decode(trident, tokenizer, ids):
    return run([trident, "tokenizer", "decode", "--tokenizer", tokenizer], stdin=" ".join(map(str, ids)).encode())


def trident_encode_batch(trident, tokenizer, texts, special=True):
    """Each text encoded alone (`tokenizer encode --jsonl`): one list of ids per text."""
    cmd = [trident, "tokenizer", "encode", "--tokenizer", tokenizer, "--jsonl"]
    if not special:
        cmd.append("--no-special-tokens")
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    out = run(cmd, stdin=lines).decode().split("\n")
    assert len(out) == len(texts) + 1 and out[-1] == "", f"{len(texts)} texts gave {len(out) - 1} lines of ids"
    return [[int(x) for x in line.split()] for line in out[:-1]]


def trident_decode_batch(trident, tokenizer, seqs, skip_special=False):
    """Each id sequence decoded alone (`tokenizer decode --jsonl`): one str per sequence."""
    cmd = [trident, "tokenizer", "decode", "--tokenizer", tokenizer, "--jsonl"]
    if skip_special:
        cmd.append("--skip-special-tokens")
    out = run(cmd, stdin="".join(" ".join(map(str, ids)) + "\n" for ids in seqs).encode()).decode().splitlines()
    assert len(out) == len(seqs), f"{len(seqs)} id sequences gave {len(out)} texts"
    return [json.loads(line) for line in out]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def work_dir(name):
    """An empty scratch directory for one test run (what an earlier run left there is removed first: trident
    preprocess refuses to overwrite a dataset)."""
    d = os.path.join(os.environ.get("TRIDENT_TEST_TMP", "/tmp"), name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d
