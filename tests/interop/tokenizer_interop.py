"""Interop: trident's tokenizer against Hugging Face `tokenizers`.

1. trident trains a tokenizer.json; Hugging Face loads it and encodes a
   multi-megabyte corpus (the King James Bible when `bible` is installed, plus
   text with every Unicode code point in several contexts) to the same ids as
   trident, and decodes them to the same text.
2. Hugging Face trains tokenizers in several configurations (prefix space,
   Llama-3-style Split + ByteLevel with a BOS template and ignore_merges,
   added tokens with lstrip/rstrip/single_word, legacy "a b" merges, GPT-2
   vocab.json + merges.txt); trident loads each and encodes/decodes identically.

usage: tokenizer_interop.py TRIDENT_BINARY
"""
import json
import os
import shutil
import subprocess
import sys

from common import (first_difference, require, run, trident_decode, trident_encode, tricky_text, work_dir,
                    write_text)

tokenizers = require("tokenizers")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

trident = sys.argv[1]
tmp = work_dir("trident-tokenizer-interop")
failures = []


def kjv_text():
    if shutil.which("bible") is None:
        return ""
    out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], capture_output=True, text=True).stdout
    return "".join(line.split(" ", 1)[1] + "\n" for line in out.splitlines() if " " in line)


def compare(name, tokenizer_path, hf, text_path, text, special=True):
    want = hf.encode(text, add_special_tokens=special).ids
    got = trident_encode(trident, tokenizer_path, text_path, special)
    if want != got:
        i = first_difference(want, got)
        failures.append(f"{name}: encode differs at id {i} of {len(want)}/{len(got)}: "
                        f"hf {want[max(0, i - 3):i + 4]} trident {got[max(0, i - 3):i + 4]}")
        return
    hf_text = hf.decode(want, skip_special_tokens=False)
    tr_text = trident_decode(trident, tokenizer_path, want).decode("utf-8", errors="replace")
    if hf_text != tr_text:
        i = first_difference(hf_text, tr_text)
        failures.append(f"{name}: decode differs at char {i}: hf {hf_text[i - 10:i + 10]!r} trident {tr_text[i - 10:i + 10]!r}")
        return
    print(f"ok   {name}: {len(want)} ids from {os.path.getsize(text_path) / 1e6:.1f} MB identical, decode identical")


# ---- 1. trident trains, Hugging Face loads
kjv = kjv_text()
train_text = kjv if kjv else tricky_text(seed=7, every_code_point=False, repeats=50000)
train_path = os.path.join(tmp, "train.txt")
write_text(train_path, train_text)
trident_json = os.path.join(tmp, "trident-tokenizer.json")
run([trident, "tokenizer", "train", "--input", train_path, "--vocab-size", "2048", "--special-token", "<|endoftext|>",
     "--output", trident_json, "--quiet"])
corpus = (kjv or "") + tricky_text(seed=1)
corpus_path = os.path.join(tmp, "corpus.txt")
write_text(corpus_path, corpus)
hf = Tokenizer.from_file(trident_json)
assert hf.get_vocab_size() == 2048, hf.get_vocab_size()
compare("trident-trained tokenizer.json loaded by HF", trident_json, hf, corpus_path, corpus)
# Training is deterministic.
again = os.path.join(tmp, "trident-tokenizer-again.json")
run([trident, "tokenizer", "train", "--input", train_path, "--vocab-size", "2048", "--special-token", "<|endoftext|>",
     "--output", again, "--quiet"])
if open(trident_json, "rb").read() != open(again, "rb").read():
    failures.append("trident tokenizer train is not deterministic")

# ---- 2. Hugging Face trains, trident loads
small = tricky_text(seed=2, every_code_point=True, repeats=5000, stride=7)
small_path = os.path.join(tmp, "small.txt")
write_text(small_path, small)
hf_train_files = [train_path]


def hf_train(pre, vocab_size=1500, specials=("<|endoftext|>",)):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(hf_train_files, trainer)
    return tok


def check(name, tok, edit=None, special=True):
    path = os.path.join(tmp, "".join(c if c.isalnum() else "_" for c in name) + ".json")
    tok.save(path)
    if edit:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        edit(j)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        tok = Tokenizer.from_file(path)
    compare(name, path, tok, small_path, small, special)


check("hf ByteLevel", hf_train(pre_tokenizers.ByteLevel(add_prefix_space=False)))
check("hf ByteLevel add_prefix_space", hf_train(pre_tokenizers.ByteLevel(add_prefix_space=True)))


def legacy_merges(j):
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]


check("hf legacy merges", hf_train(pre_tokenizers.ByteLevel(add_prefix_space=False)), edit=legacy_merges)

llama3_pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
llama = hf_train(pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(llama3_pattern), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), specials=("<|begin_of_text|>", "<|endoftext|>"))
llama.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])


def ignore_merges(j):
    j["model"]["ignore_merges"] = True


check("hf llama3-style split+template+ignore_merges", llama, edit=ignore_merges)
check("hf llama3-style without special tokens", llama, special=False)

added = hf_train(pre_tokenizers.ByteLevel(add_prefix_space=False))
added.add_tokens([AddedToken("<tag>", lstrip=True, rstrip=True), AddedToken("xyz", single_word=True),
                  AddedToken("</tag>", normalized=True)])
added.add_special_tokens([AddedToken("<|special|>", lstrip=True)])
check("hf added tokens lstrip/rstrip/single_word", added)

# GPT-2 files: vocab.json + merges.txt
gpt2 = hf_train(pre_tokenizers.ByteLevel(add_prefix_space=False))
gpt2_dir = os.path.join(tmp, "gpt2")
os.makedirs(gpt2_dir, exist_ok=True)
gpt2.model.save(gpt2_dir)
ref = Tokenizer(models.BPE.from_file(os.path.join(gpt2_dir, "vocab.json"), os.path.join(gpt2_dir, "merges.txt")))
ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
ref.decoder = decoders.ByteLevel()
ref.add_special_tokens(["<|endoftext|>"])
compare("GPT-2 vocab.json + merges.txt", gpt2_dir, ref, small_path, small)

# Pre-tokenizer character classes agree on every code point: with no merges
# and a Split that removes \p{L} (or \p{N}), the ids between newlines show
# whether each code point was matched (PCRE2's Unicode tables are older than
# Oniguruma's; trident widens the classes to match).
base = json.load(open(trident_json, encoding="utf-8"))
base["model"]["merges"] = []
base["model"]["vocab"] = {k: v for k, v in base["model"]["vocab"].items() if v < 257}
cps = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF) and c != 10]
cp_text = "".join(chr(c) + "\n" for c in cps)
cp_path = os.path.join(tmp, "code_points.txt")
write_text(cp_path, cp_text)
for cls in (r"\p{L}", r"\p{N}", r"[^\s\p{L}\p{N}]"):
    j = dict(base)
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": cls}, "behavior": "Removed", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    path = os.path.join(tmp, "classes.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    hf_tok = Tokenizer.from_file(path)
    nl = hf_tok.token_to_id("\u010a")

    def matched(ids):
        out, run_len = [], 0
        for i in ids:
            if i == nl:
                out.append(run_len == 0)
                run_len = 0
            else:
                run_len += 1
        return out

    want, got = matched(hf_tok.encode(cp_text).ids), matched(trident_encode(trident, path, cp_path))
    diff = [f"U+{cps[i]:04X}" for i in range(min(len(want), len(got))) if want[i] != got[i]]
    if len(want) != len(got) or diff:
        failures.append(f"class {cls}: {len(diff)} code points classified differently, e.g. {diff[:8]}")
    else:
        print(f"ok   class {cls}: identical on all {len(cps)} code points")

# Byte-exact round trip of arbitrary bytes (invalid UTF-8 included).
blob = bytes(range(256)) * 4 + b"\xff\xfe abc \xc3\x28 \xe2\x82 \xf0\x9f\x98 ok\xed\xa0\x80" + os.urandom(4096)
blob_path = os.path.join(tmp, "blob.bin")
with open(blob_path, "wb") as f:
    f.write(blob)
ids = trident_encode(trident, trident_json, blob_path)
if trident_decode(trident, trident_json, ids) != blob:
    failures.append("decode(encode(random bytes)) is not byte-exact")
else:
    print(f"ok   byte-exact round trip of {len(blob)} arbitrary bytes")

for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
