"""Interop: trident's tokenizer against Hugging Face `tokenizers`.

1. trident trains a tokenizer.json; Hugging Face loads it and encodes a
   multi-megabyte corpus (the King James Bible when `bible` is installed, plus
   text with every Unicode code point in several contexts) to the same ids as
   trident, and decodes them to the same text.
2. Hugging Face trains tokenizers in several configurations (prefix space,
   Llama-3-style Split + ByteLevel with a BOS template and ignore_merges,
   added tokens with lstrip/rstrip/single_word, legacy "a b" merges, GPT-2
   vocab.json + merges.txt); trident loads each and encodes/decodes identically.
   Qwen2's structure (NFC normalizer, Split with Qwen2's pattern + ByteLevel,
   <|endoftext|> <|im_start|> <|im_end|>): Hugging Face trains it on varied
   text, and thousands of short texts plus every code point NFC may change
   encode and decode identically.
3. SentencePiece-style BPE (Llama 2 family): Hugging Face trains a vocabulary
   with <0xNN> byte tokens, and trident loads it in the legacy form
   (Prepend + Replace normalizer; Replace/ByteFallback/Fuse/Strip decoder) and
   the newer one (Metaspace pre-tokenizer with each prepend_scheme, split on and
   off), with and without byte fallback and fuse_unk; ids and decoded text must
   match on the corpus, on many short random Unicode texts encoded one by one,
   and on random id sequences (invalid UTF-8 from byte tokens included).

usage: tokenizer_interop.py TRIDENT_BINARY
"""
import json
import os
import random
import shutil
import subprocess
import sys

from common import (first_difference, require, run, trident_bpe, trident_decode, trident_decode_batch, trident_encode,
                    trident_encode_batch, tricky_text, work_dir, write_text)

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
    """Checks trident's ids and decoded text against Hugging Face's; returns trident's ids."""
    want = hf.encode(text, add_special_tokens=special).ids
    got = trident_encode(trident, tokenizer_path, text_path, special)
    if want != got:
        i = first_difference(want, got)
        failures.append(f"{name}: encode differs at id {i} of {len(want)}/{len(got)}: "
                        f"hf {want[max(0, i - 3):i + 4]} trident {got[max(0, i - 3):i + 4]}")
        return got
    hf_text = hf.decode(want, skip_special_tokens=False)
    tr_text = trident_decode(trident, tokenizer_path, want).decode("utf-8", errors="replace")
    if hf_text != tr_text:
        i = first_difference(hf_text, tr_text)
        failures.append(f"{name}: decode differs at char {i}: hf {hf_text[i - 10:i + 10]!r} trident {tr_text[i - 10:i + 10]!r}")
        return got
    print(f"ok   {name}: {len(want)} ids from {os.path.getsize(text_path) / 1e6:.1f} MB identical, decode identical")
    return got


# ---- 1. trident trains, Hugging Face loads
kjv = kjv_text()
train_text = kjv if kjv else tricky_text(seed=7, every_code_point=False, repeats=50000)
train_path = os.path.join(tmp, "train.txt")
write_text(train_path, train_text)
trident_json = trident_bpe(trident, train_path, 2048, os.path.join(tmp, "trident-tokenizer.json"))
corpus = (kjv or "") + tricky_text(seed=1)
corpus_path = os.path.join(tmp, "corpus.txt")
write_text(corpus_path, corpus)
hf = Tokenizer.from_file(trident_json)
assert hf.get_vocab_size() == 2048, hf.get_vocab_size()
compare("trident-trained tokenizer.json loaded by HF", trident_json, hf, corpus_path, corpus)
# Training is deterministic.
again = trident_bpe(trident, train_path, 2048, os.path.join(tmp, "trident-tokenizer-again.json"))
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


# ---- 2b. Qwen2's structure (transformers' Qwen2 conversion, as in Qwen/Qwen2-0.5B): NFC normalizer,
# Split(Qwen2's pattern, Isolated) + ByteLevel without its regex, ByteLevel decoder, three special tokens.
# Hugging Face trains it on varied text; many strings joined by <|endoftext|> (a special token, so each
# string is normalized and pre-tokenized on its own, exactly as if encoded alone) go through one encode.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def random_texts(seed, n):
    """Short texts of random Unicode: words, runs of spaces and newlines at
    either end, accents, CJK, emoji, the special tokens glued to words, "▁",
    text that looks like a byte token, and code points from the whole range."""
    rnd = random.Random(seed)
    pieces = ["hello", "the", "LORD", "world", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000",
              "\u00e9", "na\u00efve", "\u4e2d\u6587", "\u6d4b\u8bd5\u3002", "\U0001F600", "\U0001F44D\U0001F3FD",
              "<s>", "</s>", "<unk>", "\u2581", "\u2581\u2581x", "<0x41>", "123", "3.14", "don't", "\u0000"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rnd.randint(0, 10)):
            r = rnd.random()
            if r < 0.2:
                c = rnd.choice([rnd.randint(0x20, 0x7E), rnd.randint(0xA0, 0x2FFF), rnd.randint(0x3000, 0xD7FF),
                                rnd.randint(0xE000, 0x10FFFF)])
                parts.append(chr(c))
            else:
                parts.append(rnd.choice(pieces))
        out.append("".join(parts))
    return out


def qwen2_strings(seed, n):
    """Short texts of what Qwen2's pattern and NFC treat specially: contractions in mixed case (and with
    letters that case-fold to s or k), digit runs, CJK, decomposed accents and Hangul jamo that NFC
    composes, marks NFC reorders, CR LF and LF runs, runs of spaces, punctuation, chat markup."""
    rnd = random.Random(seed)
    pieces = ["DON'T", "don't", "I'M", "we'Ve", "they'RE", "it'S", "you'll", "YOU'LL", "he'd", "'\u017f", "'\u212a",
              "'\u00df", "'\ufb06", "12345", "3.14159", "2024-06-01", "\u0661\u0662\u0663", "\u2167",
              "\u4e2d\u6587\u5206\u8bcd", "\u6d4b\u8bd5\u3002", "\u3053\u3093\u306b\u3061\u306f",
              "\ud55c\uad6d\uc5b4", "cafe\u0301", "e\u0301", "A\u030a", "n\u0303o", "\u1100\u1161\u11a8",
              "a\u0301\u0316", "o\u0308\u0304", "\u0041\u0327\u0306", "\u212b", "\u2126", "\u0958",
              "\r\n", "\r\n\r\n", "\n", "\n\n\n", "\r", " ", "  ", "     ", "\t", "\u00a0", "\u3000",
              "!!", "...", "?!", "(x)", "{\"k\": [1, 2]}", "--", "#", "@user", "$100", "100%", ";\n",
              "<|im_start|>user\n", "<|im_end|>\n", "hello", "World", "naive", "\U0001F600", "\U0001F44D\U0001F3FD"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rnd.randint(1, 12)):
            if rnd.random() < 0.1:
                parts.append(chr(rnd.choice([rnd.randint(0x20, 0x2FF), rnd.randint(0x300, 0x36F),
                                             rnd.randint(0x3000, 0xD7FF), rnd.randint(0xE000, 0x10FFFF)])))
            else:
                parts.append(rnd.choice(pieces))
        out.append("".join(parts))
    return out


def nfc_probe_text():
    """Every code point NFC may touch (combining class, decomposition, or part of one; Hangul; scripts
    newer than Python's tables), each in contexts that compose, reorder and block."""
    import unicodedata
    cps = set()
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        d = unicodedata.decomposition(ch)
        if unicodedata.combining(ch) or (d and not d.startswith("<")):
            cps.add(c)
            cps.update(int(x, 16) for x in d.split() if not x.startswith("<"))
    cps.update(range(0x1100, 0x1200))
    cps.update(range(0xAC00, 0xD7A4, 97))
    for lo, hi in ((0x0CF3, 0x0CF3), (0x10EFD, 0x10EFF), (0x11241, 0x11241), (0x11F00, 0x11F5F),
                   (0x1E030, 0x1E08F), (0x1E4EC, 0x1E4EF), (0x1133B, 0x1133C), (0x11930, 0x11940)):
        cps.update(range(lo, hi + 1))
    cps.update(range(0, 0x110000, 101))
    cps -= set(range(0xD800, 0xE000))
    contexts = ["a{}\u0301", "{}\u0316\u0301", "e\u0301{}", "\u1100{}\u1161", "{}\u0300 ", "o{}\u0308\u0304",
                "\U00011935{}\U00011930"]
    return "".join(ctx.format(chr(c)) + "\n" for c in sorted(cps) for ctx in contexts)


qwen2_corpus = "\n".join(qwen2_strings(3, 3000))
qwen2_train = os.path.join(tmp, "qwen2_train.txt")
write_text(qwen2_train, qwen2_corpus)
qwen2 = Tokenizer(models.BPE())
qwen2.normalizer = tokenizers.normalizers.NFC()
qwen2.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
qwen2.decoder = decoders.ByteLevel()
qwen2.post_processor = processors.ByteLevel(trim_offsets=False)
qwen2.train([qwen2_train], trainers.BpeTrainer(vocab_size=1000, special_tokens=QWEN2_SPECIALS,
                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                               show_progress=False))
qwen2.add_tokens([AddedToken("cafe\u0301 ole\u0301", normalized=True)])  # matched in the NFC text
qwen2_path = os.path.join(tmp, "qwen2.json")
qwen2.save(qwen2_path)
qwen2 = Tokenizer.from_file(qwen2_path)
qwen2_json = json.load(open(qwen2_path, encoding="utf-8"))
assert qwen2_json["normalizer"] == {"type": "NFC"}, qwen2_json["normalizer"]
qwen2_texts = qwen2_strings(4, 2000) + random_texts(5, 500) + ["cafe\u0301 ole\u0301!", "caf\u00e9 ol\u00e9"]
qwen2_text = "<|endoftext|>".join(qwen2_texts) + nfc_probe_text()
qwen2_text_path = os.path.join(tmp, "qwen2_text.txt")
write_text(qwen2_text_path, qwen2_text)
got_all = compare(f"hf Qwen2-structured (NFC, Split, ByteLevel): {len(qwen2_texts)} strings and the NFC probe",
                  qwen2_path, qwen2, qwen2_text_path, qwen2_text)
# The same strings each encoded alone by Hugging Face give the ids between trident's <|endoftext|>s.
eot = qwen2.token_to_id("<|endoftext|>")
got_split, cur = [], []
for i in got_all:
    if i == eot:
        got_split.append(cur)
        cur = []
    else:
        cur.append(i)
want_split = [e.ids for e in qwen2.encode_batch(qwen2_texts[:-1])]
bad = [qwen2_texts[k] for k in range(len(want_split)) if k >= len(got_split) or got_split[k] != want_split[k]]
if bad:
    failures.append(f"Qwen2 strings encoded alone: {len(bad)} of {len(want_split)} differ, e.g. {bad[:3]!r}")
else:
    print(f"ok   Qwen2 strings encoded alone by HF: all {len(want_split)} identical to trident's")

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


# ---- 3. SentencePiece-style BPE (Llama 2, Mistral, TinyLlama, CodeLlama)
SPM_SPECIALS = ["<unk>", "<s>", "</s>"]
spm_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
spm_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
# The byte tokens come right after the specials (ids 3..258), as in Llama 2; limit_alphabet
# leaves rare characters out of the vocabulary so that byte fallback has work to do.
spm_tok.train(hf_train_files, trainers.BpeTrainer(
    vocab_size=1500, special_tokens=SPM_SPECIALS + [f"<0x{b:02X}>" for b in range(256)], limit_alphabet=120,
    show_progress=False))
spm_base = json.loads(spm_tok.to_str())
spm_base["added_tokens"] = [t for t in spm_base["added_tokens"] if t["content"] in SPM_SPECIALS]
assert spm_base["model"]["vocab"]["<0x41>"] == 3 + 0x41


def replace(pattern, content):
    return {"type": "Replace", "pattern": {"String": pattern}, "content": content}


LEGACY_NORMALIZER = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                         replace(" ", "\u2581")]}
LLAMA_DECODER = {"type": "Sequence", "decoders": [replace("\u2581", " "), {"type": "ByteFallback"}, {"type": "Fuse"},
                                                  {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
BOS_TEMPLATE = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}


def metaspace(kind, scheme, split):
    return {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}


spm_texts = random_texts(11, 150)
spm_ids = sorted(set(spm_base["model"]["vocab"].values()))


def spm_check(name, normalizer, pre, decoder, byte_fallback=True, fuse_unk=True, extra_tokens=()):
    j = json.loads(json.dumps(spm_base))
    j["normalizer"], j["pre_tokenizer"], j["decoder"], j["post_processor"] = normalizer, pre, decoder, BOS_TEMPLATE
    j["model"]["byte_fallback"], j["model"]["fuse_unk"] = byte_fallback, fuse_unk
    j["added_tokens"] += list(extra_tokens)
    path = os.path.join(tmp, "spm_" + "".join(c if c.isalnum() else "_" for c in name) + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    hf_tok = Tokenizer.from_file(path)
    compare(f"spm {name}: corpus", path, hf_tok, small_path, small)
    # Each text encoded alone, every fourth without special tokens; one trident call per batch.
    bad = []
    got = {}
    for special in (True, False):
        batch = [i for i in range(len(spm_texts)) if (i % 4 != 3) == special]
        got.update(zip(batch, trident_encode_batch(trident, path, [spm_texts[i] for i in batch], special)))
    want = {i: hf_tok.encode(text, add_special_tokens=i % 4 != 3).ids for i, text in enumerate(spm_texts)}
    bad += [f"encode {spm_texts[i]!r}: hf {want[i]} trident {got[i]}" for i in want if want[i] != got[i]]
    # The ids decoded back, every second one without special tokens.
    for skip in (True, False):
        batch = [i for i in range(len(spm_texts)) if (i % 2 == 0) == skip]
        texts = trident_decode_batch(trident, path, [want[i] for i in batch], skip)
        for i, tr_text in zip(batch, texts):
            hf_text = hf_tok.decode(want[i], skip_special_tokens=skip)
            if hf_text != tr_text:
                bad.append(f"decode {want[i]}: hf {hf_text!r} trident {tr_text!r}")
    # Random id sequences, heavy in byte tokens: runs of invalid UTF-8 included.
    rnd = random.Random(len(name))
    seqs = [[rnd.choice([rnd.randint(3, 258), rnd.randint(0xC0 + 3, 0xF7 + 3), rnd.choice(spm_ids)])
             for _ in range(rnd.randint(0, 16))] for _ in range(60)]
    for ids, tr_text in zip(seqs, trident_decode_batch(trident, path, seqs)):
        hf_text = hf_tok.decode(ids, skip_special_tokens=False)
        if hf_text != tr_text:
            bad.append(f"decode {ids}: hf {hf_text!r} trident {tr_text!r}")
    if bad:
        failures.append(f"spm {name}: {len(bad)} of {len(spm_texts) + 60} differ, e.g. " + "; ".join(bad[:3]))
    else:
        print(f"ok   spm {name}: {len(spm_texts)} random texts encoded and decoded identically, "
              f"60 random id sequences decoded identically")


spm_check("legacy (Llama 2)", LEGACY_NORMALIZER, None, LLAMA_DECODER)
spm_check("legacy, unk without byte fallback", LEGACY_NORMALIZER, None, LLAMA_DECODER, byte_fallback=False)
spm_check("legacy, unk without byte fallback or fuse_unk", LEGACY_NORMALIZER, None, LLAMA_DECODER,
          byte_fallback=False, fuse_unk=False)
spm_check("legacy, normalized added token", LEGACY_NORMALIZER, None, LLAMA_DECODER, extra_tokens=[
    {"id": 5000, "content": "hello world", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True,
     "special": False},
    {"id": 5001, "content": "<tag>", "single_word": False, "lstrip": True, "rstrip": False, "normalized": False,
     "special": True}])
spm_check("Metaspace first, no split (transformers' Llama conversion)", None, metaspace("pre", "first", False),
          LLAMA_DECODER)
spm_check("Metaspace first, split, Metaspace decoder", None, metaspace("pre", "first", True),
          {"type": "Sequence", "decoders": [metaspace("dec", "first", True), {"type": "ByteFallback"},
                                            {"type": "Fuse"}]})
spm_check("Metaspace always, split", None, metaspace("pre", "always", True), metaspace("dec", "always", True))
spm_check("Metaspace never, no split, no fuse_unk", None, metaspace("pre", "never", False),
          metaspace("dec", "never", False), fuse_unk=False)

for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
