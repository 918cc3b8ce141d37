"""trident.models and trident.optim: a program's own loop, parameters as arrays without copies."""

from __future__ import annotations

import numpy as np
import pytest

import trident


def batch(vocab: int, micro_batches: int = 2, micro_batch: int = 2, seq_len: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(micro_batches, micro_batch, seq_len), dtype=np.int64)
    labels = np.roll(ids, -1, axis=-1)
    return ids, labels


@pytest.fixture()
def model(tiny):
    return trident.models.from_config(trident.Config(overrides=tiny))


def test_from_config_builds_the_configured_model(model, tiny):
    assert model.family == "gpt2"
    assert model.layout["world_size"] == 1 and model.layout["tp"] == 1
    params = model.parameters()
    assert "transformer.wte.weight" in params
    assert params["transformer.wte.weight"].shape[1] == tiny["model.d_model"]
    assert all(p.dtype == np.float32 for p in params.values())


def test_parameters_are_the_model_s_memory(model):
    a = model.parameters()["transformer.wte.weight"]
    b = model.parameters()["transformer.wte.weight"]
    assert np.shares_memory(a, b)  # two views of one buffer: no copy
    a[0, 0] = 123.0
    assert model.parameters()["transformer.wte.weight"][0, 0] == 123.0


def test_torch_reads_parameters_without_a_copy(model):
    torch = pytest.importorskip("torch")
    a = model.parameters()["transformer.wte.weight"]
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.__array_interface__["data"][0]
    t[1, 1] = -7.0
    assert a[1, 1] == -7.0


def test_a_loop_of_forward_backward_and_adamw_learns(model):
    opt = trident.optim.AdamW(model, weight_decay=0.0)
    vocab = 300  # the tokenizer's (the table is padded beyond it)
    ids, labels = batch(vocab)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        losses.append(model.forward_backward(ids, labels))
        scale = trident.optim.clip_coefficient(model.grad_norm(), 1.0)
        opt.step(3e-3, scale)
    assert losses[-1] < losses[0] - 0.5, losses
    grads = model.gradients()
    assert grads.keys() <= model.parameters().keys() and len(grads) > 0


def test_int32_ids_and_torch_tensors_are_taken(model):
    torch = pytest.importorskip("torch")
    vocab = 300  # the tokenizer's (the table is padded beyond it)
    ids, labels = batch(vocab, micro_batches=1)
    model.zero_grad()
    want = model.forward_backward(ids[0], labels[0])
    model.zero_grad()
    assert model.forward_backward(ids[0].astype(np.int32), labels[0].astype(np.int32)) == want
    model.zero_grad()
    assert model.forward_backward(torch.from_numpy(ids[0]), torch.from_numpy(labels[0])) == want


@pytest.mark.parametrize(
    "ids, match",
    [
        (np.zeros((2, 16), dtype=np.float32), "ids: expected an int64 or int32 array"),
        (np.zeros((16,), dtype=np.int64), r"ids: expected an integer array of shape \[micro_batch, seq_len\]"),
        (np.zeros((2, 32), dtype=np.int64)[:, ::2], "ids: expected a C-contiguous array"),
    ],
)
def test_bad_arrays_raise_data_error(model, ids, match):
    with pytest.raises(trident.DataError, match=match):
        model.forward_backward(ids, np.zeros((2, 16), dtype=np.int64))


def test_labels_of_another_shape(model):
    with pytest.raises(trident.DataError, match="labels: expected the shape of ids"):
        model.forward_backward(np.zeros((2, 16), dtype=np.int64), np.zeros((2, 8), dtype=np.int64))


def test_save_pretrained_and_from_pretrained_round_trip(model, tmp_path):
    files = model.save_pretrained(str(tmp_path / "hf"), merge=True)
    assert any(f.endswith(".safetensors") for f in files)
    again = trident.models.from_pretrained(tmp_path / "hf", seq_len=16, micro_batch_size=2)
    for name, value in model.parameters().items():
        np.testing.assert_array_equal(again.parameters()[name], value, err_msg=name)
    with pytest.raises(trident.CheckpointError):
        trident.models.from_pretrained(tmp_path / "missing")


def test_data_the_model_cannot_take_is_a_data_error(model):
    ids = np.zeros((2, 16), dtype=np.int64)
    with pytest.raises(trident.DataError, match="ids: an empty array"):
        model.forward_backward(np.zeros((0, 2, 16), dtype=np.int64), np.zeros((0, 2, 16), dtype=np.int64))
    with pytest.raises(trident.DataError, match="outside the vocabulary"):
        model.forward_backward(np.full((2, 16), 10**6, dtype=np.int64), ids)
    with pytest.raises(trident.DataError, match="target 999"):
        model.forward_backward(ids, np.full((2, 16), 999, dtype=np.int64))
    with pytest.raises(trident.DataError, match="the model was built for"):
        model.forward_backward(np.zeros((2, 8), dtype=np.int64), np.zeros((2, 8), dtype=np.int64))


def test_adamw_checks_its_hyperparameters(model):
    with pytest.raises(trident.ConfigError, match=r"optim.betas: AdamW\(beta1=2"):
        trident.optim.AdamW(model, beta1=2.0)
    with pytest.raises(trident.ConfigError, match="optim.eps"):
        trident.optim.AdamW(model, eps=0.0)
