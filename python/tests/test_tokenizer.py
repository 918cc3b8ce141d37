"""trident.Tokenizer: the command's tokenizer, one text or a batch on several threads."""

from __future__ import annotations

import pytest

import trident
from conftest import run_cli


def test_encode_decode_and_the_command_agree(corpus, tmp_path):
    tok = trident.Tokenizer.from_file(corpus["tokenizer"])
    text = "line 7 of the test corpus, with words that repeat"
    ids = tok.encode(text)
    (tmp_path / "t.txt").write_text(text)
    cli = run_cli("tokenizer", "encode", "--tokenizer", corpus["tokenizer"], "--input", str(tmp_path / "t.txt"))
    assert ids == [int(i) for i in cli.stdout.split()]
    assert tok.decode(ids) == text
    assert tok.vocab_size == 300 and tok.eod_id == tok.token_to_id("<|endoftext|>")
    assert tok.id_to_token(ids[0]) is not None


def test_encode_batch_is_encode_of_each(corpus):
    tok = trident.Tokenizer.from_file(corpus["tokenizer"])
    texts = [f"line {i} of the test corpus" * (i % 5 + 1) for i in range(200)] + [""]
    for threads in (1, 3, 0):
        assert tok.encode_batch(texts, threads=threads) == [tok.encode(t) for t in texts]
    assert tok.encode_batch([]) == []
    with pytest.raises(trident.DataError, match="threads=-1"):
        tok.encode_batch(texts, threads=-1)


def test_a_missing_or_bad_tokenizer_is_a_data_error(tmp_path):
    with pytest.raises(trident.DataError):
        trident.Tokenizer.from_file(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(trident.DataError, match="bad.json"):
        trident.Tokenizer.from_file(str(tmp_path / "bad.json"))
    with pytest.raises(trident.DataError):
        trident.Tokenizer.from_file(str(tmp_path / "bad.json")).decode([1])
