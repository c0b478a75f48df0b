"""The analysis benchmarks' reports: bench_analyze's machine line names the CPU's SIMD level and BLAS kernels
(timings from an AVX-512 and an AVX2 machine of one model name are not comparable) and its target lines judge what
it measured; bench_kernels times the compiled kernels against their plain forms and checks they agree."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "analyses" / "benchmarks"))

import bench_analyze  # noqa: E402


def test_vector_extensions_names_the_widest_instruction_set_in_the_flags():
    line = "processor\t: 0\nflags\t\t: fpu sse sse2 avx {} fma\nbugs\t\t: none\n"
    assert bench_analyze.vector_extensions(line.format("avx2 avx512f avx512bw")) == "AVX-512"
    assert bench_analyze.vector_extensions(line.format("avx2")) == "AVX2"
    assert bench_analyze.vector_extensions(line.format("")) == "AVX"
    assert bench_analyze.vector_extensions("flags\t: fpu sse sse2\n") == "SSE only"
    assert bench_analyze.vector_extensions("model name\t: something\n") == "?"
    assert bench_analyze.vector_extensions("flags\t: avx2x\n") == "SSE only"  # whole flags only, not substrings


def test_machine_reports_the_blas_library_and_the_cpu():
    m = bench_analyze.machine()
    assert m["cpu"] and m["cpus"] >= 1
    assert any(lib in m["blas"].lower() for lib in ("openblas", "mkl", "blis", "accelerate")), m["blas"]


def _row(n, seconds, peak_mb):
    return {"n": n, "d": 768, "ours_s": seconds, "ours_peak_mb": peak_mb, "naive_s": seconds * 100,
            "naive_peak_mb": peak_mb, "ratio": 100.0, "naive_projected": "", "naive_parts": {"mantel": seconds * 90},
            "ours_stages": {"Mantel test": seconds / 2, "bootstrap CI": seconds / 4},
            "rsa_spearman": 0.9}


def test_target_lines_judge_time_and_memory_at_each_target_size():
    lines = bench_analyze.target_lines([_row(1024, 4.6, 328), _row(4096, 54.3, 1564)])
    assert lines == ["- N=1024 (d=768) under 15 s: measured 4.6 s: met",
                     "- N=4096 (d=768) under 60 s and 2 GB: measured 54.3 s, 1.56 GB peak: met"]
    slow, big = bench_analyze.target_lines([_row(4096, 61.0, 1564)]), bench_analyze.target_lines([_row(4096, 50.0, 2100)])
    assert slow[0].endswith("**NOT met**") and big[0].endswith("**NOT met**")
    assert bench_analyze.target_lines([_row(64, 0.5, 100)]) == ["- neither target size (1024, 4096) was measured in this run"]


def test_report_quotes_its_command_machine_rows_and_verdicts():
    m = {"cpu": "Some CPU", "simd": "AVX2", "cpus": 2, "memory_gb": 23.5, "python": "3.11.7", "numpy": "2.4.6",
         "blas": "openblas 0.3.31 Haswell", "load_avg_at_start": 1.5}
    text = bench_analyze.report([_row(1024, 4.6, 328)], m, "python analyses/benchmarks/bench_analyze.py --sizes 1024 ")
    assert "Written by `python analyses/benchmarks/bench_analyze.py --sizes 1024`" in text
    assert "Machine: Some CPU (AVX2), 2 CPUs, 23.5 GB; Python 3.11.7, numpy 2.4.6, BLAS openblas 0.3.31 Haswell;" in text
    assert "| 1024 | 768 | 4.6 | 328 | 460 | 328 | 100.0x | none |" in text
    assert "- N=1024: Mantel test 2.3, bootstrap CI 1.1" in text
    assert "- N=1024: mantel 414.0" in text and "- N=1024 (d=768) under 15 s: measured 4.6 s: met" in text


def test_bench_kernels_times_both_kernels_against_their_plain_forms_and_checks_they_agree(tmp_path):
    import csv

    import bench_kernels

    argv = ["--n", "64", "--perms", "4", "--resamples", "8", "--rounds", "2", "--out", str(tmp_path)]
    assert bench_kernels.main(argv) == 0
    rows = list(csv.DictReader(open(tmp_path / "kernels.csv")))
    assert [r["form"] for r in rows][:3] == ["mantel plain", "mantel ours", "bootstrap block=1"]
    assert rows[3]["form"].startswith("bootstrap block=")
    assert all(float(r["best_ms_per_item"]) > 0 for r in rows)
    assert float(rows[0]["x_baseline"]) == 1.0 and float(rows[2]["x_baseline"]) == 1.0
    text = (tmp_path / "kernels.md").read_text()
    assert "The bootstrap forms agree bitwise" in text and "| Mantel | mantel ours |" in text
