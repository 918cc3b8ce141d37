"""trident.preprocess and trident.write_dataset: datasets from files, Python texts and token arrays."""

from __future__ import annotations

import filecmp

import numpy as np
import pytest

import trident
from conftest import run_cli


def test_preprocess_of_files_is_the_command_s(corpus, tmp_path):
    summary = trident.preprocess(tmp_path / "py", corpus["tokenizer"], inputs=[corpus["text"]], append_eod=True)
    run_cli("preprocess", "--input", corpus["text"], "--tokenizer", corpus["tokenizer"], "--output-prefix",
            str(tmp_path / "cli"), "--append-eod", "--quiet")
    assert summary["documents"] == 400
    for ext in (".bin", ".idx"):
        assert filecmp.cmp(tmp_path / f"py{ext}", tmp_path / f"cli{ext}", shallow=False), ext


def test_an_iterable_of_texts_gives_the_same_dataset_as_its_file(corpus, tmp_path):
    lines = open(corpus["text"]).read().splitlines()
    tokenizer = trident.Tokenizer.from_file(corpus["tokenizer"])
    for workers in (1, 3):
        summary = trident.preprocess(tmp_path / f"gen{workers}", tokenizer, documents=(line for line in lines),
                                     append_eod=True, workers=workers)
        assert summary["documents"] == 400
        for ext in (".bin", ".idx"):
            assert filecmp.cmp(tmp_path / f"gen{workers}{ext}", corpus["prefix"] + ext, shallow=False), ext


def test_a_dataset_from_python_trains(tiny, corpus, tmp_path):
    tokenizer = trident.Tokenizer.from_file(corpus["tokenizer"])
    texts = open(corpus["text"]).read().splitlines()
    ids = [np.asarray(tokenizer.encode(t) + [tokenizer.eod_id], dtype=np.int32) for t in texts]
    written = trident.write_dataset(tmp_path / "arrays", ids, tokenizer=corpus["tokenizer"], append_eod=True)
    assert written["documents"] == 400
    for ext in (".bin", ".idx"):
        assert filecmp.cmp(tmp_path / f"arrays{ext}", corpus["prefix"] + ext, shallow=False), ext
    config = trident.Config(overrides=dict(tiny, **{"data.paths": [str(tmp_path / "arrays")]}))
    assert trident.Trainer(config, run_dir=tmp_path / "run", quiet=True).fit().steps_done == 6
    lists = trident.write_dataset(tmp_path / "lists", [list(map(int, a)) for a in ids], vocab_size=300)
    assert lists == written


def test_bad_documents_and_sequences_raise_data_error(corpus, tmp_path):
    with pytest.raises(trident.DataError, match=r"documents\[1\]: expected a str, got int"):
        trident.preprocess(tmp_path / "x", corpus["tokenizer"], documents=["fine", 3])
    with pytest.raises(trident.DataError, match="give input files"):
        trident.preprocess(tmp_path / "x", corpus["tokenizer"])
    with pytest.raises(trident.DataError, match="no documents to write"):
        trident.preprocess(tmp_path / "x", corpus["tokenizer"], documents=["", ""])
    with pytest.raises(trident.DataError, match=r"sequences\[1\]\[0\]: token id 300 is not below vocab_size 300"):
        trident.write_dataset(tmp_path / "y", [[1, 2], [300]], vocab_size=300)
    with pytest.raises(trident.DataError, match=r"sequences\[0\]: expected a 1-D integer array"):
        trident.write_dataset(tmp_path / "y", [np.zeros(3, dtype=np.float32)], vocab_size=300)
    with pytest.raises(trident.DataError, match=r"sequences\[0\]\[1\]: token id -1 is negative"):
        trident.write_dataset(tmp_path / "y", [[1, -1]], vocab_size=300)

    def broken():
        yield "one"
        raise RuntimeError("the generator failed")

    with pytest.raises(RuntimeError, match="the generator failed"):
        trident.preprocess(tmp_path / "z", corpus["tokenizer"], documents=broken())
    assert not (tmp_path / "z.bin").exists()  # nothing half-written
