"""--momentum is an SGD setting: given with AdamW it is refused, and AdamW configs never differ by it."""

import json

import pytest
import torch

from pe_probe.errors import InputError
from trainers.cli import config_from_args, train_main, train_parser
from trainers.config import OptimConfig, make_config
from trainers.train import config_differences

torch.set_num_threads(1)

TINY = ["--n-per-level", "12", "--epochs", "1", "--d-model", "16", "--layers", "1", "--batch-size", "32",
        "--min-jaccard", "0.5"]
REFUSED = r"^--momentum applies to --optimizer sgd only, not to --optimizer adamw .*; drop it or pass --optimizer sgd$"


def cfg_of(argv):
    return config_from_args(train_parser().parse_args(["lst", "--out", "x", *argv]))


def test_momentum_with_adamw_is_refused_before_anything_is_written(tmp_path):
    """QA: --momentum 0.5 with the default AdamW was recorded, and the same command without it was then refused on
    resume as 'different config: optim.momentum (0.5 -> 0.9)' although the models are the same."""
    run = tmp_path / "m"
    with pytest.raises(InputError, match=REFUSED):
        train_main(["lst", *TINY, "--momentum", "0.5", "--out", str(run)])
    with pytest.raises(InputError, match=REFUSED):
        train_main(["lst", *TINY, "--optimizer", "adamw", "--momentum", "0.9", "--out", str(run)])
    with pytest.raises(InputError, match=REFUSED):  # every member of an ensemble is built the same way
        train_main(["lst", *TINY, "--ensemble-seeds", "0,1", "--momentum", "0.5", "--out", str(run)])
    assert not run.exists()
    assert cfg_of(["--optimizer", "sgd", "--momentum", "0.5"]).optim.momentum == 0.5
    assert cfg_of(["--optimizer", "sgd"]).optim.momentum == OptimConfig.momentum


def test_adamw_configs_do_not_differ_by_momentum(tmp_path, capsys):
    """Through the API (or a sweep's --set) AdamW records the default momentum; a run recorded earlier with another
    value resumes with the same command, as its model is the same; SGD runs still differ by it."""
    assert make_config("quick", {"optim.momentum": 0.5}).optim.momentum == OptimConfig.momentum
    assert make_config("quick", {"optim.name": "sgd", "optim.momentum": 0.5}).optim.momentum == 0.5
    adamw = make_config("quick").to_dict()
    older = {**adamw, "optim": {**adamw["optim"], "momentum": 0.5}}
    assert config_differences(older, adamw) == []
    sgd = make_config("quick", {"optim.name": "sgd"}).to_dict()
    assert config_differences({**sgd, "optim": {**sgd["optim"], "momentum": 0.5}}, sgd) == [("optim.momentum", 0.5, 0.9)]
    run = tmp_path / "m"
    assert train_main(["lst", *TINY, "--out", str(run)]) == 0
    recorded = json.loads((run / "config.json").read_text())
    recorded["optim"]["momentum"] = 0.5  # as the trainer wrote it before the refusal
    (run / "config.json").write_text(json.dumps(recorded))
    assert train_main(["lst", *TINY, "--out", str(run)]) == 0
    assert "already finished" in capsys.readouterr().out
