"""netsim --coords-file: its content is part of the run (sha256 in the config), and a file too small names itself."""

import json

import numpy as np
import pytest
import torch

from pe_probe.errors import InputError
from trainers.checkpoint import load_checkpoint, save_checkpoint
from trainers.cli import evaluate_main, train_main
from trainers.evaluate import evaluate_checkpoint
from trainers.train import config_differences

torch.set_num_threads(1)

TINY = ["--epochs", "1", "--n-train", "32", "--d-model", "16", "--layers", "1"]


def write_coords(path, seed: int) -> None:
    np.savetxt(path, np.random.default_rng(seed).uniform(0, 4, size=(16, 2)), delimiter=",")


def train_on(coords, run) -> int:
    return train_main(["netsim", "--layout", "file", "--coords-file", str(coords), "--out", str(run), *TINY])


def one_line_refusal(call, pattern: str) -> str:
    with pytest.raises(InputError, match=pattern) as e:
        call()
    assert "\n" not in str(e.value)
    return str(e.value)


def test_an_edited_coordinate_file_is_refused_by_evaluate_and_by_a_resume(tmp_path, capsys):
    """QA: overwriting the --coords-file of a run made `pe-probe evaluate` report other metrics with exit 0, and a
    resumed run trained its remaining epochs on another network; the config held only the file's path."""
    coords, run = tmp_path / "coords.csv", tmp_path / "run"
    write_coords(coords, 0)
    assert train_on(coords, run) == 0
    assert len(json.loads((run / "config.json").read_text())["data"]["coords_file_sha256"]) == 64
    before = evaluate_checkpoint(run / "last.pt")
    write_coords(coords, 1)  # edited in place: same path, another layout
    message = one_line_refusal(lambda: evaluate_main([str(run / "last.pt")]),
                               r"last.pt: the run's coordinate file .*coords.csv has changed since the run was "
                               r"trained .*; restore it")
    assert str(coords) in message
    one_line_refusal(lambda: train_on(coords, run), r"different config: data.coords_file_sha256 \('[0-9a-f]{12}\.\.\.' "
                     r"-> '[0-9a-f]{12}\.\.\.'\) \(.*coords.csv has changed since the run was trained\); restore it, "
                     r"or use another --out, or --force to restart")
    coords.unlink()
    one_line_refusal(lambda: evaluate_main([str(run / "last.pt")]), r"coordinate file .*coords.csv \(data.coords_file "
                     r"in its config\) is not found; restore it")
    write_coords(coords, 0)  # restored: the same metrics, and the same command is the same run again
    assert evaluate_checkpoint(run / "last.pt") == before
    assert train_on(coords, run) == 0
    assert "already finished" in capsys.readouterr().out


def test_a_run_recorded_before_the_sha256_still_evaluates_and_resumes(tmp_path, capsys):
    """A config without data.coords_file_sha256 (older runs) cannot tell an edited file: it loads as before."""
    coords, run = tmp_path / "coords.csv", tmp_path / "run"
    write_coords(coords, 0)
    assert train_on(coords, run) == 0
    recorded = json.loads((run / "config.json").read_text())
    older = {**recorded, "data": {k: v for k, v in recorded["data"].items() if k != "coords_file_sha256"}}
    (run / "config.json").write_text(json.dumps(older))
    ckpt = load_checkpoint(run / "last.pt")
    ckpt["config"] = older
    save_checkpoint(ckpt, run / "last.pt")
    assert config_differences(older, recorded) == []
    assert config_differences(recorded, older) == [("data.coords_file_sha256", recorded["data"]["coords_file_sha256"],
                                                    None)]
    assert evaluate_main([str(run / "last.pt")]) == 0
    assert train_on(coords, run) == 0  # the same command resumes it (here: reports it finished)
    assert "already finished" in capsys.readouterr().out


def test_a_coordinate_file_with_too_few_rows_is_named_not_n_nodes(tmp_path):
    """QA: a 2-row --coords-file was refused as '--n-nodes must be an integer >= 4, got 2', a flag not given."""
    from trainers.config import make_masked_config
    from trainers.tasks.netsim import load_data

    bad = tmp_path / "coords_bad.txt"
    np.savetxt(bad, [[0.0, 0.0], [1.0, 1.0]])
    run = tmp_path / "r"
    message = one_line_refusal(lambda: train_main(["netsim", "--layout", "file", "--coords-file", str(bad),
                                                   "--out", str(run)]),
                               r"coords_bad.txt has 2 rows \(nodes\); a network needs at least 4")
    assert "--n-nodes" not in message and not run.exists()
    cfg = make_masked_config("netsim", "quick", {"data.layout": "file", "data.coords_file": str(bad)})  # the API
    one_line_refusal(lambda: load_data(cfg.data), r"coords_bad.txt has 2 rows \(nodes\)")


def test_regenerating_the_data_from_a_config_checks_the_file_too(tmp_path):
    """Every reader that rebuilds the network from a config (train_masked, evaluate, the netsim report) goes through
    `make_network`, which refuses a file edited since the config was made."""
    from trainers.config import make_masked_config
    from trainers.tasks.netsim import make_network

    coords = tmp_path / "coords.csv"
    write_coords(coords, 0)
    cfg = make_masked_config("netsim", "quick", {"data.layout": "file", "data.coords_file": str(coords)})
    assert make_network(cfg.data).n == 16
    write_coords(coords, 1)
    one_line_refusal(lambda: make_network(cfg.data), r"coordinate file .*coords.csv has changed since the run was "
                     r"trained")
