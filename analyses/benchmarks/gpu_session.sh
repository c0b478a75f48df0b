#!/usr/bin/env bash
# One prepared GPU check for issue 7, sized for a 15-minute GPU lease (at most 9 minutes of work: 270 + 210 + 70 s):
#   1. machine.txt    : nvidia-smi and torch's view of the device;
#   2. cuda_tests.log : tests/trainers/test_cuda.py (fused attention, the compiled step's matmul-softmax
#      attention, TF32 products, ensemble == solo, bf16 / compile / CUDA-graph / TF32 runs of the LST and
#      masked trainers);
#   3. profile_cuda.md/.csv, profile.log : the compiled K = 300 bf16 step (the group the paper sweep would
#      train): wall vs GPU-busy time, kernels per step, top kernels;
#   4. train_cuda.md/.csv, bench.log : the training benchmark at the study's d_model 160, one round: the
#      naive loop, the single-model trainer and the K = 300 ensemble, also compiled and with CUDA graphs,
#      with the projected wall time of the full paper sweep (rewritten after every configuration, so a
#      timeout keeps what was measured). The first session (reports/benchmarks/gpu_session.md) ran
#      K = 4..300 uncompiled, two rounds.
# Usage, from the repository root on a machine with a CUDA GPU and torch:
#   bash analyses/benchmarks/gpu_session.sh OUT_DIR        (default: $OUT, else out/gpu-session)
# With the device tool: run(command="bash analyses/benchmarks/gpu_session.sh $OUT", timeout_s=590).
# The device tool returns at most 8 files: everything is written to a scratch folder and packed after every
# step into OUT_DIR/gpu_session.tgz, with summary.txt (machine, exit codes, the tables) beside it.
# DEVICE=cpu runs the same steps at toy size on the CPU (a smoke test of this script; the tests skip).
set -u -o pipefail
OUT_DIR=${1:-${OUT:-out/gpu-session}}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
FILES=$(mktemp -d)  # outside OUT_DIR: every file there would count towards the device tool's 8
trap 'rm -rf "$FILES"' EXIT
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ "$DEVICE" = cpu ]; then
  BENCH=(--device cpu --d-models 16 --ks 2 --steps 2 --warmup 1 --rounds 1 --no-compile --no-bf16)
  PROFILE=(--device cpu --d-model 16 --k 2 --steps 2 --warmup 1 --configs single,ensemble)
else
  BENCH=(--device cuda --d-models 160 --ks 300 --compile-ks 300 --steps 30 --rounds 1 --no-tf32)
  PROFILE=(--device cuda --d-model 160 --k 300 --steps 5 --warmup 3 --configs ensemble-bf16-compile)
fi
pack() {  # after every step: one archive (the device tool returns at most 8 files)
  tar czf "$OUT_DIR/gpu_session.tgz" -C "$FILES" . 2>/dev/null
  { cat "$FILES/machine.txt"; echo; grep -h -E "passed|failed|error" "$FILES/cuda_tests.log" 2>/dev/null | tail -3
    for f in "$FILES"/train*.md "$FILES"/profile*.md; do [ -f "$f" ] && { echo; sed -n '/^| \(d_model\|config\)/,/^$/p' "$f"; }; done
  } > "$OUT_DIR/summary.txt"
}
{ date; nvidia-smi 2>&1 || true; git log --oneline -1 2>/dev/null; "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name() if torch.cuda.is_available() else '')"; } > "$FILES/machine.txt" 2>&1
pack
# -v: one line per test as it ends, so a run cut off by the timeout still says which passed
timeout 270 "$PY" -m pytest -v --durations=0 -p no:cacheprovider tests/trainers/test_cuda.py 2>&1 | tee "$FILES/cuda_tests.log"
tests=$?
pack
# the compiled K = 300 bf16 step first: the number the sweep projection needs, whatever the benchmark reaches
timeout 70 "$PY" analyses/benchmarks/profile_step.py "${PROFILE[@]}" --out "$FILES" 2>&1 | tee "$FILES/profile.log"
profile=$?
pack
timeout 210 "$PY" analyses/benchmarks/bench_train.py "${BENCH[@]}" --out "$FILES" 2>&1 | tee "$FILES/bench.log"
bench=$?
echo "cuda tests exit $tests, benchmark exit $bench, profile exit $profile" | tee -a "$FILES/machine.txt"
pack
[ "$tests" = 0 ] && [ "$bench" = 0 ] && [ "$profile" = 0 ]
