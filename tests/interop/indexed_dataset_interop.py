"""Interop: an independent reader of Megatron's .bin/.idx layout (a few lines
of numpy, written from docs/data.md#the-binidx-format) reads what `trident preprocess` wrote
back to the token ids Hugging Face `tokenizers` gives for each document, for
uint16 (small vocabulary) and int32 (vocabulary >= 65500) datasets.

usage: indexed_dataset_interop.py TRIDENT_BINARY
"""
import json
import os
import sys

from common import require, run, trident_bpe, tricky_text, work_dir, write_text

np = require("numpy")
require("tokenizers")
from tokenizers import Tokenizer  # noqa: E402

trident = sys.argv[1]
tmp = work_dir("trident-idx-interop")


def read_megatron(prefix):
    """Megatron's MMapIndexedDataset layout, independently."""
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "bad magic"
    version, = np.frombuffer(idx, "<u8", 1, 9)
    assert version == 1
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
             8: np.uint16}[idx[17]]
    n, = np.frombuffer(idx, "<u8", 1, 18)
    d, = np.frombuffer(idx, "<u8", 1, 26)
    n, d = int(n), int(d)
    lengths = np.frombuffer(idx, "<i4", n, 34)
    pointers = np.frombuffer(idx, "<i8", n, 34 + 4 * n)
    doc_idx = np.frombuffer(idx, "<i8", d, 34 + 12 * n)
    assert len(idx) == 34 + 12 * n + 8 * d
    data = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
    size = np.dtype(dtype).itemsize
    seqs = [data[p // size: p // size + l].tolist() for p, l in zip(pointers, lengths)]
    return np.dtype(dtype), seqs, doc_idx.tolist()


# A tokenizer trained by trident, and a variant with a special token at id 70000
# in the model vocabulary (vocabulary >= 65500: int32 tokens).
corpus = tricky_text(seed=3, every_code_point=False, repeats=3000)
train = os.path.join(tmp, "train.txt")
write_text(train, corpus)
tok16 = trident_bpe(trident, train, 600, os.path.join(tmp, "tok16.json"))
j = json.load(open(tok16, encoding="utf-8"))
j["model"]["vocab"]["<|big|>"] = 70000
j["added_tokens"].append({"id": 70000, "content": "<|big|>", "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True})
tok32 = os.path.join(tmp, "tok32.json")
json.dump(j, open(tok32, "w", encoding="utf-8"), ensure_ascii=False)

docs = [s for s in corpus.split("\n") if s.strip()][:3000] + ["a <|big|> b", "<|big|>"]
jsonl = os.path.join(tmp, "docs.jsonl")
with open(jsonl, "w", encoding="utf-8") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": i, "content": d}) + "\n")

failures = []
for name, tok_path, want_dtype in [("uint16", tok16, np.uint16), ("int32", tok32, np.int32)]:
    prefix = os.path.join(tmp, name)
    run([trident, "preprocess", "--input", jsonl, "--tokenizer", tok_path, "--output-prefix", prefix,
         "--json-key", "content", "--append-eod", "--workers", "2", "--quiet"])
    dtype, seqs, doc_idx = read_megatron(prefix)
    hf = Tokenizer.from_file(tok_path)
    eod = hf.token_to_id("<|endoftext|>")
    want = [e.ids + [eod] for e in hf.encode_batch(docs)]
    want = [w for w in want if len(w) > 1]
    if dtype != np.dtype(want_dtype):
        failures.append(f"{name}: dtype {dtype}, expected {np.dtype(want_dtype)}")
    elif seqs != want:
        bad = next(i for i, (a, b) in enumerate(zip(seqs, want)) if a != b) if len(seqs) == len(want) else -1
        failures.append(f"{name}: {len(seqs)} sequences read, {len(want)} expected; first difference at {bad}")
    elif doc_idx != list(range(len(want) + 1)):
        failures.append(f"{name}: document indices {doc_idx[:5]}... are not 0..N")
    else:
        print(f"ok   {name}: numpy reads {len(seqs)} documents, {sum(map(len, seqs))} tokens, identical to HF ids + EOD")

for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
