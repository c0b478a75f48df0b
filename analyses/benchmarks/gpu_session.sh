#!/usr/bin/env bash
# One prepared GPU check for issue 7, sized for a 15-minute GPU lease: every step runs under its own limit
# and under one deadline for the whole script (BUDGET seconds, default 560, so one device call of
# timeout_s=590 always returns with what was measured). Steps, most needed first:
#   1. machine.txt    : nvidia-smi, torch's view of the device, the commit sent and the tree's hash;
#   2. profile_cuda.md/.csv, profile.log : the compiled K = 300 bf16 step (the group the paper sweep would
#      train) as the trainers run it: wall vs GPU-busy time, kernels per step, the top 60 kernels, and the
#      top operators by input shape (the third lease listed 15, which left ~10 ms of its 35.6 ms unnamed);
#   3. sweep_cuda.md/.csv, sweep.log : the paper sweep's 300 learned-PE runs as one batched group through the
#      real trainer (bf16, compiled) for 4 epochs: setup, compilation, training, evaluation and checkpoint
#      times, and the full sweep projected from them (bench_sweep.py);
#   4. cuda_tests.log : tests/trainers/test_cuda.py (fused attention, the compiled step's matmul-softmax
#      attention, its bf16 logits product, TF32 products, ensemble == solo, bf16 / compile / CUDA-graph / TF32
#      runs of the LST and masked trainers), on 4 pytest-xdist workers where the image has xdist;
#   5. fp32logits/profile_cuda.md : the same step with the attention logits as the float32 product of the
#      upcast q and k (--float32-logits, the GPU's form until the fourth lease): what the bf16 product written
#      in float32 (trainers.logits, adopted after the fourth lease measured it, 1.076x) gives, in this lease;
#   6. train_cuda.md/.csv, bench.log : the training benchmark at the study's d_model 160, one round: the naive
#      loop, the single model (eager) and the K = 300 ensemble (bf16 eager and compiled), ratios to the
#      naive loop measured in this run (rewritten after every configuration: a timeout keeps what was
#      measured).
#   The fourth lease ran these steps (with --bf16-logits, which failed, in place of step 5) in 266 s.
#   The third and fourth leases' experiments (--bias-in-product, --bf16-residual, --compile-mode,
#   --packed-attention, --coordinate-descent) are measured (reports/benchmarks/gpu_session.md) and no longer
#   run here but in PLAN=experiments; profile_step.py keeps their flags.
#   The earlier sessions are in reports/benchmarks/gpu_session.md.
# Usage, from the repository root on a machine with a CUDA GPU and torch:
#   bash analyses/benchmarks/gpu_session.sh OUT_DIR        (default: $OUT, else out/gpu-session)
# With the device tool: run(command="SENT_COMMIT=abc1234 bash analyses/benchmarks/gpu_session.sh $OUT", timeout_s=590),
# abc1234 being the sender's `git rev-parse --short HEAD`, written into the command (run on the device,
# `git rev-parse` would read the copy's stale .git): machine.txt records it beside the working tree's git
# tree hash (`tree_hash`), which names the commit independently.
# The device tool returns at most 8 files: everything is written to a scratch folder and packed after every
# step into OUT_DIR/gpu_session.tgz, with summary.txt (machine, exit codes, the tables) beside it.
# PLAN=experiments runs only machine.txt and the profile of the compiled K = 300 bf16 step, plain and with
# experiment flags of step_experiments.py (--float32-logits, --packed-attention 4, with and without
# --coordinate-descent), each in its own process, into experiments/NAME/ (the fourth lease's second run tried
# the bf16 logits product this way, before the trainers adopted it: reports/benchmarks/h200-s4/experiments/).
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
  BENCH=(--device cpu --d-models 16 --ks 2 --steps 2 --warmup 1 --rounds 1 --no-compile --no-bf16 --only single,ensemble-2)
  PROFILE=(--device cpu --d-model 16 --k 2 --steps 2 --warmup 1 --configs single,ensemble --shapes)
  SWEEP=(--device cpu --d-model 8 --sigmas 0.1,2 --seeds 1 --epochs 3)
else
  BENCH=(--device cuda --d-models 160 --ks 300 --compile-ks 300 --steps 30 --rounds 1 --no-tf32
         --only single,ensemble-300-bf16,ensemble-300-bf16-compile)
  PROFILE=(--device cuda --d-model 160 --k 300 --steps 5 --warmup 3 --configs ensemble-bf16-compile --shapes --top 60)
  SWEEP=(--device cuda --bf16 --compile --epochs 4)
fi
# the per-step limits keep a lease's 10-minute call whole; the CPU smoke test only needs them not to bite
# on a loaded machine (its steps take seconds, but 2 cores shared with other jobs can slow them 10x)
SCALE=1
[ "$DEVICE" = cpu ] && SCALE=5
BUDGET=${BUDGET:-560}  # seconds for the whole script: each step's limit is cut to what is left of it
[ "$DEVICE" = cpu ] && BUDGET=${BUDGET_CPU:-100000}
START=$SECONDS
limit() {  # limit SECONDS: the step's own limit (x SCALE), or what is left of BUDGET if less
  local want=$(($1 * SCALE)) left=$((BUDGET - (SECONDS - START)))
  [ "$left" -lt "$want" ] && want=$left
  echo $((want > 0 ? want : 0))
}
run_step() {  # run_step SECONDS LOG COMMAND...: the command under its limit, output to the screen and LOG;
  # a step with under 15 s left is skipped (exit 125); its exit code is the step's
  local secs; secs=$(limit "$1"); local log=$2; shift 2
  if [ "$secs" -lt 15 ]; then echo "skipped: ${secs} s left of the ${BUDGET} s budget" | tee "$log"; return 125; fi
  timeout "$secs" "$@" 2>&1 | tee "$log"
}
XDIST=()
"$PY" -c "import xdist" 2>/dev/null && [ "$DEVICE" != cpu ] && XDIST=(-n 4)
pack() {  # after every step: one archive (the device tool returns at most 8 files)
  tar czf "$OUT_DIR/gpu_session.tgz" -C "$FILES" . 2>/dev/null
  { cat "$FILES/machine.txt"; echo; grep -h -E "passed|failed|error" "$FILES/cuda_tests.log" 2>/dev/null | tail -3
    for f in "$FILES"/train*.md "$FILES"/profile*.md "$FILES"/*/profile*.md "$FILES"/experiments/*/profile*.md; do [ -f "$f" ] && { echo; sed -n '/^| \(d_model\|config\)/,/^$/p' "$f"; }; done
    for f in "$FILES"/sweep*.md; do [ -f "$f" ] && { echo; sed -n '/^| part/,/^$/p' "$f"; }; done
  } > "$OUT_DIR/summary.txt"
}
tree_hash() {  # git's tree hash of the working tree as sent (every file git does not ignore), from a scratch
  # index: it names the commit sent even where the device's copy of .git is stale (its `git log` was, in the
  # third lease); find it with `git log --format='%h %T' | grep HASH` (no match: the tree sent was not clean)
  local idx; idx=$(mktemp -u)
  GIT_INDEX_FILE=$idx git add -A 2>/dev/null && GIT_INDEX_FILE=$idx git write-tree 2>/dev/null
  rm -f "$idx"
}
{ date; nvidia-smi 2>&1 || true; echo "commit sent: ${SENT_COMMIT:-(not given)}; working tree: $(tree_hash)"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name() if torch.cuda.is_available() else '')"; } > "$FILES/machine.txt" 2>&1
pack
if [ "${PLAN:-session}" = experiments ]; then
  # PLAN=experiments: the compiled K = 300 bf16 step profiled plain and with each experiment flag, one process
  # each (the flags patch the process), into experiments/NAME/profile_cuda.md; ratios in one lease
  declare -A EXP=([plain]="" [fp32logits]="--float32-logits" [packed4]="--packed-attention 4"
                  [packed4_cd]="--packed-attention 4 --coordinate-descent")
  codes=""
  for name in plain fp32logits packed4 packed4_cd; do
    # shellcheck disable=SC2086  # the flags split into words on purpose
    run_step 150 "$FILES/exp_$name.log" "$PY" analyses/benchmarks/profile_step.py "${PROFILE[@]}" ${EXP[$name]} \
      --out "$FILES/experiments/$name"
    codes="$codes $name=$?"
    pack
  done
  echo "experiments exit:$codes (124: cut at its limit, 125: skipped); $((SECONDS - START)) s" | tee -a "$FILES/machine.txt"
  pack
  exit 0
fi
# the compiled K = 300 bf16 step first: the number the sweep projection needs, whatever else is reached
run_step 70 "$FILES/profile.log" "$PY" analyses/benchmarks/profile_step.py "${PROFILE[@]}" --out "$FILES"
profile=$?
pack
run_step 150 "$FILES/sweep.log" "$PY" analyses/benchmarks/bench_sweep.py "${SWEEP[@]}" --out "$FILES"
sweep=$?
pack
# -v: one line per test as it ends, so a run cut off by the timeout still says which passed
run_step 185 "$FILES/cuda_tests.log" "$PY" -m pytest -v "${XDIST[@]}" --durations=0 -p no:cacheprovider tests/trainers/test_cuda.py
tests=$?
pack
run_step 70 "$FILES/profile_fp32logits.log" "$PY" analyses/benchmarks/profile_step.py "${PROFILE[@]}" --float32-logits --out "$FILES/fp32logits"
fp32logits=$?
pack
run_step 100 "$FILES/bench.log" "$PY" analyses/benchmarks/bench_train.py "${BENCH[@]}" --out "$FILES"
bench=$?
pack
echo "profile exit $profile, sweep exit $sweep, cuda tests exit $tests, benchmark exit $bench; experiment: float32 logits exit" \
     "$fp32logits (124: cut at its limit, 125: skipped); $((SECONDS - START)) s" | tee -a "$FILES/machine.txt"
pack
[ "$tests" = 0 ] && [ "$bench" = 0 ] && [ "$profile" = 0 ] && [ "$sweep" = 0 ]
