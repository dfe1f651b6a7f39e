#!/usr/bin/env bash
# ServeLearnBench with MWM, as the seeds launch it: train in the background; the
# waiter tests each window on the checkpoint from its boundary.
#
#   examples/servelearnbench/mwm/launch.sh SCENARIO          # train in background, tests follow
#   examples/servelearnbench/mwm/launch.sh SCENARIO test     # manual test mode
#
# Environment (see DESIGN.md): MW_FRAMEWORK_PYTHON, MW_RUNS, MW_TAG, WM_PORT,
# MW_MODEL, MW_HOST_MODEL, MW_EVOLVER_MODEL, VLLM_BASE_URL, MW_TRAIN_SPLIT,
# FIREWORKS_API_KEY (and the other keys, each named in the config), and
# MW_DATASET (a ServeLearnBench dataset/ folder; synthetic_* needs none).
#
# The config is SCENARIO.yaml beside this script, else default.yaml (the seeds'
# Fireworks model, its backend and price), or MW_CONFIG. The environment
# overrides it; the model is never switched silently: without its key, stop.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
scenario=${1:?usage: launch.sh SCENARIO [test]}
mode=${2:-train}
python=${MW_FRAMEWORK_PYTHON:-$repo/.venv/bin/python}
runs=${MW_RUNS:-$HOME/code/metaworld-runs}
config=${MW_CONFIG:-$here/$scenario.yaml}
[ -n "${MW_CONFIG:-}" ] || [ -f "$config" ] || config=$here/default.yaml
tag=${MW_TAG:-$scenario-mwm}

die() { echo "launch.sh: $*" >&2; exit 2; }

[ -x "$python" ] || die "no Python at $python; run \`make demo\` once, or set MW_FRAMEWORK_PYTHON"
[ -f "$config" ] || die "no launch config at $config"
[ "$mode" = train ] || [ "$mode" = test ] || die "mode $mode: use nothing (train) or test"

dataset=()
[ -n "${MW_DATASET:-}" ] && dataset=(--dataset "$MW_DATASET")
split=()
[ -n "${MW_TRAIN_SPLIT:-}" ] && split=(--train-split "$MW_TRAIN_SPLIT")
cd "$repo"
if [ "$mode" = test ]; then
  # Manual test mode, in the foreground, beside training that may still run: the windows
  # whose checkpoint exists are tested on it; the others are skipped and named.
  exec "$python" -m bin.mw serve-learn test "$scenario" --config "$config" "${dataset[@]}" \
    "${split[@]}" --runs "$runs" --tag "$tag"
fi
# Check everything in the foreground (scenario, dataset, models, keys, prices, ports),
# then train in the background.
"$python" -m bin.mw serve-learn run "$scenario" --config "$config" "${dataset[@]}" \
  "${split[@]}" --runs "$runs" --tag "$tag" --check >/dev/null
mkdir -p "$runs"
if "$python" -m bin.mw daemon status --runs "$runs" >/dev/null 2>&1; then
  # A daemon serves this runs directory: hand the campaign to it.
  "$python" -m bin.mw serve-learn submit "$scenario" --config "$config" "${dataset[@]}" \
    "${split[@]}" --runs "$runs" --tag "$tag"
  exit 0
fi
log="$runs/$tag.launch.log"
nohup "$python" -m bin.mw serve-learn run "$scenario" --config "$config" "${dataset[@]}" \
  "${split[@]}" --runs "$runs" --tag "$tag" >"$log" 2>&1 &
echo "launch.sh: $tag started in the background (pid $!)"
echo "  run directory: $runs/$tag (test.log grows as windows are tested)"
echo "  output: $log"
