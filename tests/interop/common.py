"""Helpers shared by the interop scripts: running trident, generating text."""
import os
import random
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


def tiny_corpus(trident, directory):
    """Makes `directory` hold a small training corpus as the training scripts use it: c.txt (400 short
    lines), tok.json (a byte-level BPE of 300 tokens with <|endoftext|>) and the indexed dataset c.bin/c.idx
    (documents end with EOD). Returns the directory."""
    os.makedirs(directory, exist_ok=True)
    text = os.path.join(directory, "c.txt")
    with open(text, "w") as f:
        for i in range(1, 401):
            f.write(f"line {i} of the test corpus, with words that repeat and repeat again.\n")
    tok_json = os.path.join(directory, "tok.json")
    run([trident, "tokenizer", "train", "--input", text, "--vocab-size", "300", "--special-token", "<|endoftext|>",
         "--output", tok_json])
    run([trident, "preprocess", "--input", text, "--tokenizer", tok_json, "--output-prefix",
         os.path.join(directory, "c"), "--append-eod", "--quiet"])
    return directory


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


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def work_dir(name):
    d = os.path.join(os.environ.get("TRIDENT_TEST_TMP", "/tmp"), name)
    os.makedirs(d, exist_ok=True)
    return d
