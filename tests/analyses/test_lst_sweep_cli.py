"""``python -m analyses.lst.sweep`` with bad values of every option: a one-line error (exit 2), nothing written."""

from __future__ import annotations

import pathlib
import sys
from pathlib import Path

import pytest

from analyses.lst import grid as G
from analyses.lst import ray_runner
from analyses.lst import sweep as S
from pe_probe.errors import InputError

# two tiny runs, for the cases that must be refused before a real (not dry) sweep writes anything; a bad
# value goes after it (the last of a repeated option wins)
SMALL = ["--sigmas", "0.1", "--seeds", "1", "--groups", "sigma", "--epochs", "1",
         "--set", "model.d_model=8", "--set", "data.n_per_level=30"]


def tree(path: Path) -> dict[str, bytes | None]:
    """Every path under ``path`` -> its bytes (None for a folder)."""
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}


def refused(tmp_path: Path, capsys, argv: list[str]) -> str:
    """Run the sweep; assert exit 2, one stderr line without a traceback, ``tmp_path`` unchanged; return the line."""
    before = tree(tmp_path)
    with pytest.raises(SystemExit) as e:
        S.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert tree(tmp_path) == before
    return err


@pytest.mark.parametrize("argv,needle", [
    ([*SMALL, "--workers", "0"], "--workers must be >= 1, got 0"),
    ([*SMALL, "--workers", "-1", "--backend", "ensemble"], "--workers must be >= 1, got -1"),
    (["--workers", "0", "--backend", "ray", "--dry-run"], "--workers must be >= 1, got 0"),
    ([*SMALL, "--workers", "100000"], "--workers 100000 is more than 4x this machine's"),  # was: accepted
    (["--workers", "100000", "--backend", "ensemble", "--dry-run"], "use at most"),
    ([*SMALL, "--seeds", "0"], "--seeds must be >= 1, got 0; to leave groups out use --groups"),  # was: 0 runs
    (["--seeds", "-1", "--dry-run"], "--seeds must be >= 1, got -1"),
    (["--sigma-seeds", "0", "--dry-run"], "--sigma-seeds must be >= 1, got 0"),  # was: the grid without sigma runs
    (["--groups", "pe_type", "--sigma-seeds", "4", "--dry-run"], "--sigma-seeds sets the sigma group's seeds"),
    ([*SMALL, "--epochs", "0"], "--epochs must be >= 1, got 0 (see"),  # not "(from --set ...)"
    (["--epochs", "-3", "--dry-run"], "--epochs must be >= 1, got -3"),
    # --set optim.epochs would keep the cadence of --epochs (400 epochs with a checkpoint every 5)
    (["--set", "optim.epochs=400", "--dry-run"], "--set optim.epochs=400: use --epochs 400"),
    (["--sigmas", "0.1,0.1", "--dry-run"], "--sigmas: sigma 0.1 is given twice"),  # was: an AssertionError
    (["--sigmas", "1,1.0", "--dry-run"], "--sigmas: sigma 1 is given twice"),
    (["--sigmas", "0.1,inf", "--dry-run"], "--sigmas '0.1,inf': every sigma must be > 0 and finite"),
    (["--sigmas", "nan", "--dry-run"], "every sigma must be > 0 and finite"),
    (["--groups", "", "--dry-run"], "--groups '': give a comma list of groups from sigma, pe_type"),
    (["--groups", "sigma,", "--dry-run"], "--groups 'sigma,': give a comma list"),
    (["--groups", "sigma,sigma", "--dry-run"], "--groups sigma,sigma: give each group once"),
    (["--backend", "ensemble", "--ensemble-max", "0", "--dry-run"], "--ensemble-max must be >= 1, got 0"),
    ([*SMALL, "--backend", "ray", "--cpus-per-run", "0"], "--cpus-per-run must be a finite number > 0, got 0.0"),
    (["--backend", "ray", "--cpus-per-run", "nan", "--dry-run"], "--cpus-per-run must be a finite number > 0"),
    ([*SMALL, "--backend", "ray", "--gpus-per-run", "-0.5"], "--gpus-per-run must be a finite number >= 0"),
    ([*SMALL, "--backend", "ray", "--max-retries", "-1"], "--max-retries must be >= 0, got -1"),
    (["--gpus-per-run", "1", "--dry-run"], "--gpus-per-run is an option of --backend ray; add --backend ray, or drop"),
    (["--backend", "ensemble", "--address", "auto", "--dry-run"], "--address is an option of --backend ray"),
    (["--set", "model.d_model", "--dry-run"], "--set 'model.d_model': give KEY=VALUE"),
    ([*SMALL, "--cuda-graphs"], "or drop --cuda-graphs (see"),  # the --set items are not blamed
    (["--backend", "ray", "--root", "foo://bar", "--dry-run"], "--root foo://bar: Protocol not known: foo"),
])
def test_bad_option_values_are_refused_before_anything_is_written(tmp_path, capsys, argv, needle, as_if_ray_installed):
    if any("://" in a for a in argv):
        pytest.importorskip("fsspec", reason="URL roots are resolved by fsspec (the ray extra)")
    err = refused(tmp_path, capsys, ["--root", str(tmp_path / "sweep"), *argv])
    assert needle in err


@pytest.mark.parametrize("dry", [["--dry-run"], []])
def test_a_root_that_is_a_file_or_below_one_is_refused(tmp_path, capsys, dry):
    (tmp_path / "f").write_text("keep")
    assert "--root {}: is a file, not a folder".format(tmp_path / "f") in refused(
        tmp_path, capsys, ["--root", str(tmp_path / "f"), *SMALL, *dry])
    assert f"is below {tmp_path / 'f'}, which is a file" in refused(
        tmp_path, capsys, ["--root", str(tmp_path / "f" / "sub"), *SMALL, *dry])


def test_an_empty_root_is_refused_not_the_working_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "--root '': give a folder" in refused(tmp_path, capsys, ["--root", "", "--dry-run"])


def test_a_state_dir_that_is_a_file_is_refused(tmp_path, capsys, as_if_ray_installed):
    (tmp_path / "state").write_text("keep")
    argv = ["--backend", "ray", "--root", f"file://{tmp_path}/sweep", "--state-dir", str(tmp_path / "state"), *SMALL]
    assert f"--state-dir {tmp_path / 'state'}: is a file" in refused(tmp_path, capsys, argv)


def test_a_run_folder_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "learned-every-s0.1-seed0").write_text("keep")
    err = refused(tmp_path, capsys, ["--root", str(tmp_path), *SMALL])
    assert "1 run folder(s) under" in err and "are files, e.g. learned-every-s0.1-seed0" in err


def test_the_ray_backend_without_ray_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: import ray fails, find_spec gives None
    err = refused(tmp_path, capsys, ["--root", str(tmp_path / "sweep"), "--backend", "ray", *SMALL])
    assert "--backend ray needs Ray, which is not installed here" in err


def test_a_root_that_cannot_be_made_is_one_line(tmp_path, capsys, monkeypatch):
    def deny(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(pathlib.Path, "mkdir", deny)
    err = refused(tmp_path, capsys, ["--root", str(tmp_path / "sweep"), *SMALL])
    assert f"--root {tmp_path / 'sweep'}: cannot make it (Permission denied)" in err


@pytest.mark.parametrize("kwargs,needle", [
    ({"seeds": 0}, "--seeds must be >= 1"),
    ({"sigma_seeds": 0}, "--sigma-seeds must be >= 1"),
    ({"epochs": 0}, "--epochs must be >= 1"),
    ({"sigmas": (0.1, 0.1)}, "sigma 0.1 is given twice"),
    ({"sigmas": ()}, "give at least one sigma"),
    ({"include": ()}, "--groups: give at least one of"),
])
def test_build_grid_refuses_empty_or_duplicate_grids(kwargs, needle):
    with pytest.raises(InputError, match=needle):
        G.build_grid("quick", **kwargs)


def test_valid_commands_plan_as_before(tmp_path, capsys):
    """Group names may have spaces around them; the committed report's grid (--seeds 3 --sigma-seeds 4) is unchanged."""
    plans = []
    for groups in ("sigma,control", " sigma , control"):
        assert S.main(["--root", str(tmp_path / "s"), "--groups", groups, "--dry-run"]) == 0
        plans.append(capsys.readouterr().out.split("\n", 1)[1])
    assert plans[0] == plans[1] and plans[0].count("todo") == 22 + 4
    assert len(G.build_grid("quick", seeds=3, sigma_seeds=4)) == 83
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("extra,expected", [
    ([], {"max_retries": 2, "cpus_per_run": 1, "gpus_per_run": 0, "address": None}),
    (["--max-retries", "0", "--cpus-per-run", "2", "--gpus-per-run", "0.25", "--address", "auto"],
     {"max_retries": 0, "cpus_per_run": 2.0, "gpus_per_run": 0.25, "address": "auto"}),
])
def test_ray_options_reach_the_ray_runner(tmp_path, monkeypatch, extra, expected, as_if_ray_installed):
    seen = {}

    class FakeRay:
        def __init__(self, address, **kw):
            seen.update(address=address, **{k: kw[k] for k in ("max_retries", "cpus_per_run", "gpus_per_run")})

        def submit(self, spec, out):
            pass

        def wait(self):
            return []

    monkeypatch.setattr(ray_runner, "RayRunner", FakeRay)
    assert S.main(["--root", str(tmp_path / "s"), "--backend", "ray", *extra, *SMALL]) == 0
    assert seen == expected
