"""Model.generate and trident.evaluate: the generate and eval commands' code, from Python."""

from __future__ import annotations

import re

import pytest

import trident
from conftest import run_cli


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus):
    """A tiny GPT-2 trained 6 steps, its run directory, and its Hugging Face export."""
    d = tmp_path_factory.mktemp("trained")
    overrides = {
        "model.n_layer": 2, "model.n_head": 2, "model.d_model": 32, "model.max_seq_len": 32,
        "train.seq_len": 32, "train.micro_batch_size": 2, "train.steps": 6, "train.eval_interval": 0,
        "data.tokenizer": corpus["tokenizer"], "data.paths": [corpus["prefix"]], "data.split": "100,0,0",
        "log.progress": "off", "train.peak_gflops": 1.0,
    }
    trident.Trainer(trident.Config(overrides=overrides), run_dir=d / "run", quiet=True).fit()
    run_cli("export", "--checkpoint", str(d / "run"), "--output", str(d / "hf"))
    return {"run": str(d / "run"), "hf": str(d / "hf")}


def test_evaluate_is_trident_eval(trained, corpus):
    result = trident.evaluate(trained["run"], data=corpus["prefix"], seq_len=16, max_tokens=500)
    cli = run_cli("eval", "--checkpoint", trained["run"], "--data", corpus["prefix"], "--seq-len", "16",
                  "--max-tokens", "500")
    loss = float(re.search(r"loss ([0-9.]+)", cli.stdout).group(1))
    assert f"{result['loss']:.4f}" == f"{loss:.4f}"
    assert result["predicted"] == 499 and result["seq_len"] == 16 and not result["masked_lm"]
    assert result["perplexity"] == pytest.approx(2.718281828 ** result["loss"])
    text = trident.evaluate(trained["run"], text=corpus["text"], max_tokens=200)
    assert text["predicted"] == 199


def test_evaluate_errors_name_the_input(trained, tmp_path):
    with pytest.raises(trident.DataError, match="no dataset there"):
        trident.evaluate(trained["run"], data=tmp_path / "none")
    with pytest.raises(trident.Error, match="not neither"):
        trident.evaluate(trained["run"])
    with pytest.raises(trident.CheckpointError, match="is neither a checkpoint"):
        trident.evaluate(tmp_path / "no-run", data="x")


def test_generate_is_trident_generate(trained, corpus):
    tokenizer = trident.Tokenizer.from_file(corpus["tokenizer"])
    model = trident.models.from_pretrained(trained["hf"])
    text = model.generate_text(tokenizer, "line 12 of", max_new_tokens=12, greedy=True)
    cli = run_cli("generate", "--checkpoint", trained["run"], "--prompt", "line 12 of", "--max-new-tokens", "12",
                  "--greedy")
    assert "line 12 of" + text == cli.stdout.rstrip("\n")
    ids = model.generate(tokenizer.encode("line 12 of", add_special_tokens=False), max_new_tokens=12, greedy=True,
                         stop_ids=[] if tokenizer.eod_id is None else [tokenizer.eod_id], vocab_limit=tokenizer.vocab_size)
    assert tokenizer.decode(ids) == text
    sampled = model.generate([5, 6, 7], max_new_tokens=8, temperature=0.8, top_k=20, seed=3, stop_ids=[])
    assert len(sampled) == 8
    assert model.generate([5, 6, 7], max_new_tokens=8, temperature=0.8, top_k=20, seed=3, stop_ids=[]) == sampled


def test_generate_checks_its_arguments(trained):
    model = trident.models.from_pretrained(trained["hf"])
    with pytest.raises(trident.Error, match="top_p 0: expected a number in"):
        model.generate([1, 2], top_p=0.0)
    with pytest.raises(trident.Error, match="the prompt has no tokens"):
        model.generate([])
    with pytest.raises(trident.Error, match="outside the model's vocabulary"):
        model.generate([10**6])
