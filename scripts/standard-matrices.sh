#!/usr/bin/env bash
# Gathers the standard-regime records in order of importance; the store resumes, so this
# can be stopped and started again at any point; records of an older code version are
# recomputed (their old files are kept beside as *.stale.json).
set -u
cd "$(dirname "$0")/.."
run() { .venv/bin/python -m seps run "$@" --profile standard --seeds 0,1,2,3,4 --no-report --no-progress --rerun-stale; }
run seven-differences --only 'laps,code,paper'
run seven-differences-query --only 'code,paper'
run regime
run findings --only 'laps,code*,paper/detach*,paper/dense_source=query,paper/dense_source=none,paper/dense_source=shuffled,paper/dense_source=query/eval_dense_source=candidate'
run seven-differences --only 'code+*'
run seven-differences --only 'paper-*'
run findings
run seven-differences-query --only 'laps'
run paper-modules
run seven-differences-query --only 'code+*'
run seven-differences-query --only 'paper-*'
run seven-differences
run seven-differences-query
