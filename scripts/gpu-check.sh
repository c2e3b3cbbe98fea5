#!/usr/bin/env bash
# One-shot GPU check (docs/gpu.md): CUDA tests, kernels vs loop, paper-size training steps,
# Flickr30K-size evaluation, the latency report; at most about 8 minutes on one H100/H200.
#   scripts/gpu-check.sh [--out-dir DIR] [--small]
#     --out-dir DIR   output folder (default $SEPS_GPU_OUT, else reports/gpu/<UTC date-time>:
#                     one folder per call, which the latency report's GPU section lists)
#     --small         tiny sizes on the CPU (TRITON_INTERPRET=1), for CI; also SEPS_GPU_CHECK_SMALL=1
#     --skip A,B      leave out steps (tests, kernels, train, eval, bench-report);
#                     also SEPS_GPU_CHECK_SKIP=A,B
#   PYTHON=...        interpreter (default .venv/bin/python if present, else python3)
# Runs from a plain checkout (PYTHONPATH=the repository). Each step is bounded by `timeout`;
# a failing step is recorded (OUT/steps.json, OUT/summary.md) and the next one runs; exit 1
# if any failed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${SEPS_GPU_OUT:-reports/gpu/$(date -u +%Y%m%d-%H%M%S)}
small=${SEPS_GPU_CHECK_SMALL:-0}
skip=,${SEPS_GPU_CHECK_SKIP:-},
while [[ $# -gt 0 ]]; do
  case $1 in
    --out-dir) out=$2; shift 2 ;;
    --out-dir=*) out=${1#*=}; shift ;;
    --small) small=1; shift ;;
    --skip) skip=$skip$2,; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x $repo/.venv/bin/python ]]; then PYTHON=$repo/.venv/bin/python; else PYTHON=python3; fi
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$repo"
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [[ $small == 1 ]]; then
  export TRITON_INTERPRET=1
  flags=(--small --device cpu)
  device=cpu
  # seconds per step: tests kernels train eval; the report gets what is left of budget
  limits=(120 120 120 60)
  budget=600
  report=(--quick --geometries vit224 --threads 1)
else
  flags=(--device cuda)
  device=cuda
  limits=(60 60 150 120)
  budget=470  # seconds for all steps; the summary adds about 10
  report=(--impls loop,batched,compiled,triton --geometries vit224 --eval-shard 50x250
          --micro-shard 16x128 --train-batches 64 --repeats 2)
fi
# Raw files (step status, pytest's junit and output) go to a scratch folder: OUT keeps at
# most 8 files, the most a device run brings back (docs/gpu.md).
work=$(mktemp -d)
: > "$work/steps.tsv"
failed=0
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2 rc=0 t0
  shift 2
  if [[ $skip == *,$name,* ]]; then
    printf '%s\t%s\t%s\n' "$name" skipped 0 >> "$work/steps.tsv"
    echo "=== $name: skipped"
    return 0
  fi
  t0=$(date +%s)
  echo "=== [$(date -u +%H:%M:%S)] $name: start (limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$@" || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$work/steps.tsv"
  echo "=== [$(date -u +%H:%M:%S)] $name: exit $rc after $(( $(date +%s) - t0 )) s"
  [[ $rc == 0 ]] || failed=1
}
gc=("$PYTHON" -m seps.bench.gpu_check --out-dir "$out" "${flags[@]}")

start=$(date +%s)
echo "gpu-check: python $PYTHON, device $device, out $out"
# (1) the CUDA tests (their names say cuda; on a CPU they skip or check the refusal)
step tests "${limits[0]}" "$PYTHON" -m pytest -q -rs -p no:cacheprovider -k cuda \
  --junitxml="$work/tests.xml" -o junit_family=xunit1 \
  tests/test_kernels.py tests/test_precision.py tests/test_bench.py tests/test_train.py \
  tests/test_runner.py tests/test_block_alignment.py > "$work/tests.txt" 2>&1
tail -n 15 "$work/tests.txt"
# (2) each kernel implementation against the loop: time and equality of the similarities
step kernels "${limits[1]}" "${gc[@]}" kernels
# (3) paper-size training steps of code, paper and laps (random init, bf16 autocast)
step train "${limits[2]}" "${gc[@]}" train
# (4) 1,000 images x 5,000 captions through the head's batched evaluation
step eval "${limits[3]}" "${gc[@]}" eval
# (5) the latency report of `seps-bench bench --report`, reduced sizes, in the time left
left=$(( budget - ($(date +%s) - start) ))
step bench-report "$(( left > 60 ? left : 60 ))" "$PYTHON" -m seps bench --report --device "$device" \
  "${report[@]}" --reports "$out/bench-report"
"${gc[@]}" summary --work-dir "$work" > /dev/null || failed=1
echo "=== [$(date -u +%H:%M:%S)] done: $out/summary.md"
cat "$work/steps.tsv"
echo "raw files (steps.tsv, pytest junit and output): $work"
exit $failed
