#!/usr/bin/env bash
# Does this CPU compute the same bits as the machine that made replications/portable/?
# Reruns its pinned (SEPS_FLOAT_PATH=portable) records here and compares them bitwise with
# `seps-bench same-bits`. The work happens in a scratch folder (default: a new temp dir),
# so the pinned pretraining build never meets the native one in data/pretrained/.
#   scripts/portable-check.sh            smoke records only: about a minute
#   scripts/portable-check.sh --standard also the synth48-profile seed-0 records: the
#                                        synth-48 pretraining built pinned (about 65 min on
#                                        the AMD EPYC that made them) and three runs
#                                        (about 12 min)
# Exit status: 0 when every compared record has the same bits, 1 when one differs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
ref=$repo/replications/portable
standard=no
[[ "${1:-}" == "--standard" ]] && standard=yes
work=$(mktemp -d)
cd "$work"
export SEPS_FLOAT_PATH=portable
py=$repo/.venv/bin/python
run() { "$py" -m seps run seven-differences --only 'laps,code,paper' --no-report --no-progress "$@"; }
run --profile smoke --results smoke
status=0
"$py" -m seps same-bits "$ref/smoke" smoke || status=1
if [[ $standard == yes ]]; then
  run --profile synth48 --seeds 0 --results standard
  "$py" -m seps same-bits "$ref/results" standard || status=1
fi
echo "scratch folder: $work"
exit $status
