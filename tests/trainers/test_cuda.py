"""CUDA checks of the trainer: skipped without a GPU (CI never has one).

Run on a lent GPU by ``analyses/benchmarks/gpu_session.sh``; they check what the CPU tests cannot:
the fused attention kernel on the GPU, the ensemble (one batch of K on a GPU) against solo training there,
and the GPU speed options (bf16 autocast, torch.compile, CUDA graphs) end to end.
"""

import json
import math

import pytest
import torch
from test_ensemble import MEMBERS, assert_same_run, quiet, tiny

from trainers.ensemble import train_ensemble
from trainers.model import attend, attention_weights
from trainers.train import train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_attention_on_the_gpu_is_the_written_out_maths():
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(64, 2, 16, 32, device="cuda", generator=g) for _ in range(3))
    bias = torch.randn(64, 2, 16, 16, device="cuda", generator=g)
    want = attention_weights(q.double(), k.double(), bias.double()) @ v.double()
    torch.testing.assert_close(attend(q, k, v, attn_mask=bias).double(), want, rtol=1e-3, atol=1e-4)


def test_ensemble_matches_solo_training_on_the_gpu(tmp_path):
    cfgs = [tiny(**m, device="cuda") for m in MEMBERS]
    for i, cfg in enumerate(cfgs):
        train(cfg, tmp_path / "solo" / str(i), log=quiet)
    train_ensemble(cfgs, [tmp_path / "ens" / str(i) for i in range(len(cfgs))], log=quiet)
    for i in range(len(cfgs)):
        assert_same_run(tmp_path / "solo" / str(i), tmp_path / "ens" / str(i))


@pytest.mark.parametrize("compile,bf16,graphs", [(True, False, False), (False, True, False), (True, True, False),
                                                 (False, False, True), (False, True, True)])
def test_gpu_speed_options_train_to_finite_metrics(tmp_path, compile, bf16, graphs):
    cfg = tiny(device="cuda")
    metrics = train(cfg, tmp_path / "run", log=quiet, compile=compile, bf16=bf16, cuda_graphs=graphs)
    assert math.isfinite(metrics["train_loss"]) and 0 <= metrics["ood_acc"] <= 1
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["epoch"] == cfg.optim.epochs
    ens = train_ensemble([tiny(seed=s, device="cuda") for s in (0, 1)], [tmp_path / "e0", tmp_path / "e1"],
                         log=quiet, compile=compile, amp=bf16, cuda_graphs=graphs)
    assert all(math.isfinite(m["train_loss"]) for m in ens)
