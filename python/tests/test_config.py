"""trident.Config: the command's keys, values and messages."""

from __future__ import annotations

import json

import pytest

import trident
from conftest import run_cli


def cli_error(*flags: str) -> str:
    """The message `trident train` prints for these flags (without "trident: error: ")."""
    out = run_cli("train", *flags, "--run-dir", "/nonexistent/run", check=False)
    assert out.returncode != 0
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("trident: error: "), line
    return line.removeprefix("trident: error: ")


def test_defaults_file_and_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[train]\nsteps = 12\n[model]\narch = "llama"\n')
    c = trident.Config(path, overrides={"train.steps": 5, "optim.lr": 1e-4, "dist.sequence_parallel": False})
    assert c["train.steps"] == 5  # the override is later than the file
    assert c["model.arch"] == "llama"
    assert c["optim.lr"] == pytest.approx(1e-4)
    assert "train.steps=5" in c.overrides
    c["train.micro_batch_size"] = 3
    assert c["train.micro_batch_size"] == 3
    assert "steps = 5" in c.to_toml()
    assert c.to_dict()["train"]["steps"] == 5
    assert trident.Config.keys()["train.steps"] == "integer"


@pytest.mark.parametrize(
    "overrides, flag",
    [
        ({"train.stepz": 3}, "train.stepz=3"),
        ({"train.steps": "ten"}, 'train.steps="ten"'),
        ({"optim.lr": [1, 2]}, "optim.lr=[1, 2]"),
        ({"train.seq_len": True}, "train.seq_len=true"),
    ],
)
def test_bad_keys_and_values_raise_the_command_s_message(overrides, flag):
    with pytest.raises(trident.ConfigError) as e:
        trident.Config(overrides=overrides)
    assert str(e.value) == cli_error("--set", flag)


def test_a_setitem_that_fails_changes_nothing():
    c = trident.Config(overrides={"train.steps": 4})
    with pytest.raises(trident.ConfigError, match="must be an integer"):
        c["train.steps"] = 2.5
    assert c["train.steps"] == 4
    with pytest.raises(trident.ConfigError, match="unknown key 'train.foo'"):
        c["train.foo"]


def test_python_values_the_config_cannot_hold():
    with pytest.raises(trident.ConfigError, match=r"train.steps: a value of type object"):
        trident.Config(overrides={"train.steps": object()})
    with pytest.raises(trident.ConfigError, match="nan is not a number"):
        trident.Config(overrides={"optim.lr": float("nan")})
    with pytest.raises(trident.ConfigError, match="expected a str or a path, got int"):
        trident.Config(3)  # type: ignore[arg-type]


def test_missing_file_is_the_command_s_error(tmp_path):
    missing = str(tmp_path / "missing.toml")
    with pytest.raises(trident.ConfigError) as e:
        trident.Config(missing)
    assert str(e.value) == cli_error(missing)


def test_deepspeed_json(tmp_path):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 3, "gradient_clipping": 0.5,
                              "optimizer": {"type": "AdamW", "params": {"lr": 2e-4}}}))
    c = trident.Config(ds)
    assert c["train.micro_batch_size"] == 3
    assert c["optim.lr"] == pytest.approx(2e-4)
    assert trident.Config(overrides={"train.steps": 2}, deepspeed=ds)["optim.clip_grad"] == pytest.approx(0.5)


def test_validate_applies_the_cross_key_rules(tiny):
    trident.Config(overrides=tiny).validate()
    with pytest.raises(trident.DataError, match="data.paths is empty"):
        trident.Config().validate()
    bad = dict(tiny, **{"data.paths": ["/nonexistent/corpus"]})
    with pytest.raises(trident.DataError, match="'/nonexistent/corpus' has no"):
        trident.Config(overrides=bad).validate()
