"""kernel_groups.py: a GPU step profile's top kernels summed by kind of work."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "analyses" / "benchmarks"))

import kernel_groups  # noqa: E402

HEAD = ("                                                        Name    Self CPU %      Self CPU   CPU total %     "
        "CPU total  CPU time avg     Self CUDA   Self CUDA %    CUDA total  CUDA time avg    # of Calls  ")


def row(name: str, cuda: str, calls: int) -> str:
    return f"{name:>60}  0.00%  0.000us  0.00%  0.000us  0.000us  {cuda:>12}  1.00%  {cuda:>12}  1.000us  {calls:>12}  "


def report(rows: list[str], total: str = "20.000ms", steps: int = 2, config: str = "ensemble-bf16-compile") -> str:
    table = "\n".join(["-" * 40, HEAD, "-" * 40, *rows, "-" * 40, "Self CPU time total: 1.000ms",
                       f"Self CUDA time total: {total}", ""])
    return (f"# Where a training step's time goes\n\nWritten by `python analyses/benchmarks/profile_step.py --device cuda "
            f"--steps {steps} --top 60 --out x`.\n\n| config |\n\n## {config}: top 60 operators\n\n```\n{table}```\n")


SMALL = report([
    row("## Call CompiledFxGraph abc...", "15.000ms", 2),  # an annotation spanning kernels: skipped
    row("aten::bmm", "8.000ms", 10),  # an operator: its kernels carry its time
    row("nvjet_sm90_tst_160x256_64x4_1x2_h_bz_coopA_TNN", "5.000ms", 4),
    row("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_sta...", "3.000ms", 2),
    row("triton_poi_fused_add_gelu_view_12", "2.000ms", 2),  # the operator row of a Triton kernel...
    row("triton_poi_fused_add_gelu_view_12", "2.000ms", 2),  # ...and its kernel row: counted once
    row("void at::native::(anonymous namespace)::multi_tensor_appl...", "1.500ms", 18),
    row("triton_per_fused__to_copy_add_mul_native_layer_norm_nativ...", "1.000ms", 2),
    row("triton_per_fused__to_copy_add_mul_native_layer_norm_nativ...", "1.000ms", 2),
    row("triton_per_fused__to_copy_add_mul_native_layer_norm_nativ...", "500.000us", 1),  # another LN kernel
    row("triton_poi_fused__to_copy_cat_transpose_view_26", "800.000us", 2),
    row("triton_red_fused__to_copy_add_sum_view_28", "400.000us", 2),
    row("Command Buffer Full", "9.000ms", 3),
])


def test_groups_sum_the_kernels_once_per_step_and_leave_the_rest_unlisted():
    table = kernel_groups.sections(SMALL)["ensemble-bf16-compile"]
    assert kernel_groups.steps_of(SMALL) == 2
    rows, total = kernel_groups.summarize(table, 2)
    got = {g: (round(ms, 4), n) for g, ms, n in rows}
    assert got == {"matrix products (cuBLAS)": (4.0, 2), "GELU (with the bias add)": (1.0, 1),
                   "optimizer (fused AdamW)": (0.75, 1), "LayerNorm": (0.75, 2),
                   "layout (split / cat / transpose)": (0.4, 1), "other Inductor kernels": (0.2, 1)}
    assert [r[0] for r in rows][0] == "matrix products (cuBLAS)" and total == 10.0
    text = kernel_groups.markdown("c", rows, total)
    assert "| matrix products (cuBLAS) | 4.00 | 40.0% | 2 |" in text
    assert "| not in the listed top kernels | 2.90 | 29.0% | |" in text  # 10 - 7.1 listed
    assert kernel_groups.to_ms("1.5s") == 1500 and kernel_groups.to_ms("250.000us") == 0.25
    with pytest.raises(ValueError, match="not a profiler time"):
        kernel_groups.to_ms("12 ms")


def test_a_committed_gpu_profile_is_read_whole(capsys):
    """The fourth lease's profile: the listed kernels' time is at most the profiler's total, and the fused
    AdamW row is its one kernel (14.965 ms over 5 steps in the table)."""
    path = ROOT / "reports" / "benchmarks" / "h200-s4" / "profile_cuda.md"
    assert kernel_groups.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "### ensemble-bf16-compile" in out and "| optimizer (fused AdamW) | 2.99 |" in out
    table = kernel_groups.sections(path.read_text())["ensemble-bf16-compile"]
    rows, total = kernel_groups.summarize(table, 5)
    assert 0.8 * total < sum(r[1] for r in rows) <= total


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("# something else\n", "no '## CONFIG: top N operators' tables"),
    (SMALL.replace("Self CUDA time total: 20.000ms", "Self CPU time total: 2.000ms"), "not a GPU profile"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "profile_cuda.md"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as e:
        kernel_groups.main([str(path)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "Traceback" not in "\n".join(err)
