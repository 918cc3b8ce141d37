"""Interop: trident's WordPiece (BERT) tokenizers against Hugging Face `tokenizers`.

1. Hugging Face trains WordPiece tokenizers (BertNormalizer in several settings,
   BertPreTokenizer, the BERT template, WordPiece decoder) on varied text;
   trident loads each tokenizer.json and must give the same ids, id for id,
   on over a megabyte of varied text (accents, CJK, punctuation, control
   characters, over-long words, mixed case, digits), and decode them to the
   same text.
2. A random vocabulary (characters, pieces, "##" pieces): as tokenizer.json,
   and as a bare vocab.txt read by transformers' BertTokenizerFast (both
   do_lower_case values) against trident's vocab.txt loader; plus every
   code point in several contexts.
3. Pairs through the template (ids and type ids), and truncation.
4. trident trains a WordPiece tokenizer.json; Hugging Face loads it and both
   encode and decode the corpus identically.

usage: wordpiece_interop.py TRIDENT_BINARY
"""
import json
import os
import random
import subprocess
import sys

from common import first_difference, require, run, work_dir, write_text

tokenizers = require("tokenizers")
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

trident = sys.argv[1]
tmp = work_dir("trident-wordpiece-interop")
failures = []
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def varied_text(seed, size):
    """Sentences of mixed scripts, case, accents, digits, punctuation, control characters and long words."""
    rnd = random.Random(seed)
    words = ["the", "The", "THE", "Running", "runner's", "don't", "naïve", "Café", "résumé", "Ångström", "straße",
             "İstanbul", "ΣΊΣΥΦΟΣ", "ὀδυσσεύς", "Москва", "привет", "مرحبا", "שלום", "नमस्ते", "東京都", "中文字符",
             "日本語の文章", "한국어", "ｆｕｌｌｗｉｄｔｈ", "e\u0301t\u0301e\u0301", "x\u0308\u0323", "ﬁnance", "Ⅻ",
             "42", "3.14159", "1,000,000", "٣٤٥", "１２３", "2024-01-01", "a_b", "foo@bar.com", "C++", "#tag",
             "emoji😀", "👍🏽", "🇫🇷", "\u00ad", "zero\u200bwidth", "bom\ufeff", "bad\ufffdchar", "nul\x00byte",
             "bell\x07", "del\x7f", "c1\x85ctl", "priv\ue000ate", "𠀀𠀁", "\U0002b820\U0002b8ff", "\U0002b920",
             "\U00030000", "ǅungla", "ᾼ", "ŉ", "K", "Ω"]
    puncts = [".", ",", "!", "?", ";", ":", "'", "\"", "(", ")", "[", "]", "{", "}", "-", "—", "–", "…", "«", "»",
              "“", "”", "‘", "’", "¿", "¡", "§", "¶", "†", "$", "%", "^", "`", "~", "|", "\\", "/", "+", "=", "<",
              ">", "、", "。", "「", "」", "・", "＠", "※", "°", "©", "€"]
    spaces = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\u000b", "\u000c", "\u0085"]
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéàüñçøß"
    out, n = [], 0
    while n < size:
        r = rnd.random()
        if r < 0.55:
            w = rnd.choice(words)
        elif r < 0.75:
            w = "".join(rnd.choice(letters) for _ in range(rnd.randint(1, 12)))
        elif r < 0.9:
            w = rnd.choice(puncts) * rnd.randint(1, 2)
        elif r < 0.97:
            w = str(rnd.randint(0, 10 ** rnd.randint(1, 12)))
        else:
            w = "".join(rnd.choice(letters) for _ in range(rnd.randint(95, 130)))  # around the 100-character limit
        if rnd.random() < 0.1:
            w = w.upper() if rnd.random() < 0.5 else w.title()
        out.append(w)
        out.append(rnd.choice(spaces) if rnd.random() < 0.8 else "")
        n += len(w) + 1
    return "".join(out)


def every_code_point_text():
    # Each code point touches a letter or digit, so that whether it splits as punctuation shows (U+166D,
    # punctuation in the Unicode 8.0 tables tokenizers uses, is a symbol today).
    contexts = ["a{}", " b{} ", "{}1", "{}x ", "\n{}"]
    return "".join(contexts[c % len(contexts)].format(chr(c)) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


def trident_ids(tok_path, text_path, extra=()):
    return [int(x) for x in run([trident, "tokenizer", "encode", "--tokenizer", tok_path, "--input", text_path,
                                 *extra]).split()]


def compare(name, tok_path, hf, text_path, text, extra=(), special=True):
    want = hf.encode(text, add_special_tokens=special).ids
    got = trident_ids(tok_path, text_path, list(extra) + ([] if special else ["--no-special-tokens"]))
    if want != got:
        i = first_difference(want, got)
        toks = [hf.id_to_token(t) for t in want[max(0, i - 3):i + 4]]
        print(f"FAIL {name}: encode differs")
        failures.append(f"{name}: encode differs at id {i} of {len(want)}/{len(got)}: hf {want[max(0, i - 3):i + 4]} "
                        f"{toks} trident {got[max(0, i - 3):i + 4]}")
        return
    hf_text = hf.decode(want, skip_special_tokens=False)
    tr_text = run([trident, "tokenizer", "decode", "--tokenizer", tok_path, *extra],
                  stdin=" ".join(map(str, want)).encode()).decode("utf-8", errors="replace")
    if hf_text != tr_text:
        i = first_difference(hf_text, tr_text)
        print(f"FAIL {name}: decode differs")
        failures.append(f"{name}: decode differs at char {i}: hf {hf_text[i - 15:i + 15]!r} "
                        f"trident {tr_text[i - 15:i + 15]!r}")
        return
    print(f"ok   {name}: {len(want)} ids from {os.path.getsize(text_path) / 1e6:.1f} MB identical, decode identical")


def bert_pipeline(tok, lowercase=True, strip_accents=None, chinese=True, clean=True):
    tok.normalizer = normalizers.BertNormalizer(clean_text=clean, handle_chinese_chars=chinese,
                                                strip_accents=strip_accents, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)


def add_template(tok):
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])


corpus = varied_text(1, 1_200_000)
corpus_path = os.path.join(tmp, "corpus.txt")
write_text(corpus_path, corpus)
train_path = os.path.join(tmp, "train.txt")
write_text(train_path, varied_text(2, 400_000))

# ---- 1. Hugging Face trains
for i, (lower, strip, chinese, clean) in enumerate([(True, None, True, True), (False, None, True, True),
                                                     (True, False, False, True), (False, True, True, False)]):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    bert_pipeline(tok, lower, strip, chinese, clean)
    tok.train([train_path], trainers.WordPieceTrainer(vocab_size=3000, special_tokens=SPECIALS))
    add_template(tok)
    path = os.path.join(tmp, f"hf-trained-{i}.json")
    tok.save(path)
    compare(f"HF-trained (lowercase={lower}, strip_accents={strip}, chinese={chinese}, clean={clean})", path,
            Tokenizer.from_file(path), corpus_path, corpus)

# ---- 2. a random vocabulary: tokenizer.json and vocab.txt
rnd = random.Random(5)
chars = sorted(set(corpus.lower()) | set(corpus))
pieces = set(SPECIALS)
for c in chars:
    if c.isspace() or c in "\x1c\x1d\x1e":  # never a token; would break vocab.txt's lines
        continue
    if rnd.random() < 0.9:
        pieces.add(c)
    if rnd.random() < 0.8:
        pieces.add("##" + c)
for _ in range(6000):
    start = rnd.randrange(len(corpus) - 8)
    p = corpus[start:start + rnd.randint(2, 7)]
    if not any(ch.isspace() for ch in p):
        pieces.add(("##" if rnd.random() < 0.5 else "") + p.lower() if rnd.random() < 0.7 else p)
vocab_list = sorted(pieces)
rnd.shuffle(vocab_list)
vocab_txt = os.path.join(tmp, "vocab.txt")
with open(vocab_txt, "w", encoding="utf-8", newline="") as f:
    f.write("".join(t + "\n" for t in vocab_list))
tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab_list)}, unk_token="[UNK]",
                                 max_input_chars_per_word=20))
bert_pipeline(tok, lowercase=True)
add_template(tok)
random_json = os.path.join(tmp, "random.json")
tok.save(random_json)
compare("random vocabulary, max 20 characters per word", random_json, tok, corpus_path, corpus)
cp_text = every_code_point_text()
cp_path = os.path.join(tmp, "code_points.txt")
write_text(cp_path, cp_text)
compare("random vocabulary, every code point in 5 contexts", random_json, tok, cp_path, cp_text, special=False)

transformers = require("transformers")
for lower in (True, False):
    fast = transformers.BertTokenizer(vocab=vocab_txt, do_lower_case=lower)._tokenizer
    compare(f"vocab.txt, do_lower_case={lower}", vocab_txt, fast, corpus_path, corpus,
            extra=["--do-lower-case", "true" if lower else "false"])

# ---- 3. pairs and truncation
pair_texts = [("Hello, World!", "How ARE you?"), (corpus[:3000], corpus[3000:5000]), ("", "only b"),
              ("東京 naïve", "")]
for trunc in (None, ("longest_first", 64), ("only_first", 8), ("only_second", 8)):
    hf = Tokenizer.from_file(random_json)
    path = random_json
    if trunc:
        hf.enable_truncation(max_length=trunc[1], strategy=trunc[0])
        path = os.path.join(tmp, f"random-{trunc[0]}.json")
        hf.save(path)
    ok = True
    for k, (a, b) in enumerate(pair_texts):
        a_path, b_path = os.path.join(tmp, "a.txt"), os.path.join(tmp, "b.txt")
        write_text(a_path, a)
        write_text(b_path, b)
        try:
            enc = hf.encode(a, b)
        except Exception:  # only_first/only_second with a sequence too short: trident must refuse too
            p = subprocess.run([trident, "tokenizer", "encode", "--tokenizer", path, "--input", a_path, "--pair",
                                b_path], capture_output=True)
            if p.returncode == 0:
                failures.append(f"pair {k} truncation {trunc}: HF refuses, trident encodes")
                ok = False
            continue
        lines = run([trident, "tokenizer", "encode", "--tokenizer", path, "--input", a_path, "--pair", b_path,
                     "--type-ids"]).decode().split("\n")
        got_ids, got_types = [int(x) for x in lines[0].split()], [int(x) for x in lines[1].split()]
        if (got_ids, got_types) != (enc.ids, enc.type_ids):
            failures.append(f"pair {k} truncation {trunc}: hf {enc.ids[:20]} {enc.type_ids[:20]} "
                            f"trident {got_ids[:20]} {got_types[:20]}")
            ok = False
        if trunc and trunc[0] == "longest_first":
            want = hf.encode(a).ids
            got = trident_ids(path, a_path, ["--truncate"])
            if want != got:
                failures.append(f"single with truncation {trunc}, text {k}: hf {want[:20]} trident {got[:20]}")
                ok = False
    if ok:
        print(f"ok   pairs (ids and type ids), truncation {trunc}")

# ---- 4. trident trains, Hugging Face loads
trident_json = os.path.join(tmp, "trident-wordpiece.json")
run([trident, "tokenizer", "train", "--model", "wordpiece", "--input", train_path, "--vocab-size", "3000",
     "--output", trident_json, "--quiet"])
hf = Tokenizer.from_file(trident_json)
compare("trident-trained WordPiece loaded by HF", trident_json, hf, corpus_path, corpus)
with open(trident_json, encoding="utf-8") as f:
    j = json.load(f)
if [t["content"] for t in j["added_tokens"]][:5] != ["[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"] or \
        [hf.token_to_id(t) for t in SPECIALS] != [0, 1, 2, 3, 4]:
    failures.append(f"trident-trained special tokens: {[hf.token_to_id(t) for t in SPECIALS]}")
again = os.path.join(tmp, "trident-wordpiece-again.json")
run([trident, "tokenizer", "train", "--model", "wordpiece", "--input", train_path, "--vocab-size", "3000",
     "--output", again, "--quiet"])
if open(again, "rb").read() != open(trident_json, "rb").read():
    failures.append("trident tokenizer train --model wordpiece is not deterministic")

if failures:
    print("\n".join("FAIL " + f for f in failures))
    sys.exit(1)
print("all WordPiece interop checks passed")
