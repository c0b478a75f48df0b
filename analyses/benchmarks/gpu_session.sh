#!/usr/bin/env bash
# One prepared GPU check for issue 7, sized for a 15-minute GPU lease (about 8 minutes of work):
#   1. machine.txt    : nvidia-smi and torch's view of the device;
#   2. cuda_tests.log : tests/trainers/test_cuda.py (fused attention, TF32 products, ensemble == solo,
#      bf16 / compile / CUDA-graph / TF32 runs of the LST and masked trainers);
#   3. train_cuda.md/.csv, bench.log : the training benchmark at the study's d_model 160, ensembles up to
#      K = 300 (the paper sweep's size), TF32 and bf16 variants and the single-model trainer compiled and
#      with CUDA graphs, with the projected wall time of the full paper sweep (rewritten after every
#      configuration, so a timeout keeps what was measured);
#   4. profile_cuda.md/.csv, profile.log : where a step's time goes (wall vs GPU-busy time, kernels per step,
#      top kernels) for the single model and an ensemble group of K = 300 in float32, TF32 and bf16, so a
#      missed target says whether launches or arithmetic bound it;
#   5. masked_cuda.md/.csv, bench_masked.log : the masked-prediction trainer (netsim, brain) at the paper
#      size, float32, TF32 and bf16 (no compiled rows: each would compile for tens of seconds).
# Usage, from the repository root on a machine with a CUDA GPU and torch:
#   bash analyses/benchmarks/gpu_session.sh OUT_DIR        (default: $OUT, else out/gpu-session)
# With the device tool: run(command="bash analyses/benchmarks/gpu_session.sh $OUT", timeout_s=590).
# Each step writes as it goes, so a run cut off by its limit returns what it finished.
# DEVICE=cpu runs the same steps at toy size on the CPU (a smoke test of this script; the tests skip).
set -u -o pipefail
OUT_DIR=${1:-${OUT:-out/gpu-session}}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ "$DEVICE" = cpu ]; then
  BENCH=(--device cpu --d-models 16 --ks 2 --steps 2 --warmup 1 --rounds 1 --no-compile --no-bf16)
  MASKED=(--device cpu --tasks netsim --presets quick --steps 2 --warmup 1 --rounds 1 --no-compile --no-bf16)
  PROFILE=(--device cpu --d-model 16 --k 2 --steps 2 --warmup 1 --configs single,ensemble)
else
  BENCH=(--device cuda --d-models 160 --ks 4,8,32,128,300 --steps 50 --rounds 2 --compile-ks "")  # no compiled ensembles: time
  MASKED=(--device cuda --presets paper --steps 30 --rounds 2 --no-compile)
  PROFILE=(--device cuda --d-model 160 --k 300 --steps 5 --warmup 3)
fi
{ date; nvidia-smi 2>&1 || true; "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name() if torch.cuda.is_available() else '')"; } > "$OUT_DIR/machine.txt" 2>&1
# -v: one line per test as it ends, so a run cut off by the timeout still says which passed
timeout 215 "$PY" -m pytest -v --durations=0 -p no:cacheprovider tests/trainers/test_cuda.py 2>&1 | tee "$OUT_DIR/cuda_tests.log"
tests=$?
timeout 270 "$PY" analyses/benchmarks/bench_train.py "${BENCH[@]}" --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/bench.log"
bench=$?
timeout 45 "$PY" analyses/benchmarks/profile_step.py "${PROFILE[@]}" --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/profile.log"
profile=$?
timeout 40 "$PY" analyses/benchmarks/bench_masked.py "${MASKED[@]}" --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/bench_masked.log"
masked=$?
echo "cuda tests exit $tests, benchmark exit $bench, profile exit $profile, masked benchmark exit $masked" \
  | tee -a "$OUT_DIR/machine.txt"
[ "$tests" = 0 ] && [ "$bench" = 0 ] && [ "$profile" = 0 ] && [ "$masked" = 0 ]
