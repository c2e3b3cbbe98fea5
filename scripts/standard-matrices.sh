#!/usr/bin/env bash
# Gathers the standard-regime records in order of importance; the store resumes, so this
# can be stopped and started again at any point; records of an older code version are
# recomputed (their old files are kept beside as *.stale.json). Issue 16 asks for 5 seeds
# of seven-differences, findings and paper-modules and 3 of the other matrices; issue 15
# is done when findings and seven-differences are complete under both protocols, so
# those come before paper-modules.
set -u
cd "$(dirname "$0")/.."
run() { .venv/bin/python -m seps run "$@" --profile standard --no-report --no-progress --rerun-stale; }
five() { run "$@" --seeds 0,1,2,3,4; }
three() { run "$@" --seeds 0,1,2; }
five seven-differences --only 'laps,code,paper'
five seven-differences-query --only 'code,paper'
five regime
five findings
five seven-differences
five seven-differences-query --only 'laps'
five seven-differences-query --only 'code+*'
five seven-differences-query --only 'paper-*'
five seven-differences-query
five paper-modules
three selection-ratio
three training-protocol
three coefficients
# the loss-study cells the scorecard's claims name come first, so its loss claims get
# verdicts before the rest of the grid (seed 004's criteria x forms) is filled in
three loss-study --only 'align/triplet,align/triplet_sum,align/triplet_hardest,align/infonce'
three loss-study --only 'ratio/*/off,ratio/gumbel_topk/mse/separate'
three loss-study --only 'ratio/gumbel_per_patch/mse/*,ratio/gumbel_per_patch/ce/*'
three loss-study
