#!/usr/bin/env bash
# What a machine with an NVIDIA GPU checks, in one call (meant to end within 8 minutes on one H100 or H200):
#   1. the formats and kernels tests on torch:cuda, bit for bit against numpy (tests/test_numerics_*.py), and the six
#      models' FP32 forward on CUDA tensors against numpy (tests/test_models_torch.py);
#   2. the accuracy tests of the six models at the smoke profile with the emulator on torch:cuda, compared with the
#      same job on numpy (`ipu-conformance report compare` and scripts/compare_array_runs.py: every decision and
#      verdict equal, the figures within the FP32 summation order's tolerance). The numpy run is made here unless
#      NUMPY_RESULTS names its results.json, made on another machine from the same commit;
#   3. a slice of the release profile's accuracy work per model timed on torch:cuda (and resnet50's on numpy beside
#      it): each record's run_s over its samples gives the rate a release-profile estimate uses;
#   4. widedeep's and conformer's smoke accuracy tests on two local Dask workers computing on the library (one GPU
#      each where there are two), and the devices each record lists.
# Every step's output goes to OUT (default: out/device-check), steps.txt lists each step's exit status and time; the
# script's exit status is 1 when any step failed. Each step has a time limit (STEP_LIMIT_S, default 240 s); ARRAY names
# the library checked (default torch:cuda), MODELS a comma-separated choice of models (default: all six).
# Needs the project installed with the torch extra (pip install -e ".[test,torch]") and torch built for CUDA; without
# a GPU the CUDA tests skip with their reason and step 2 stops at exit 4 naming what is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-out/device-check}}"
limit="${STEP_LIMIT_S:-240}"
array="${ARRAY:-torch:cuda}"
tag="${array//:/-}"
mkdir -p "$out"
models=()
[ -n "${MODELS:-}" ] && models=(--model "$MODELS")
status=0

step() {  # step NAME COMMAND...: run it, its output to OUT/NAME.txt and the terminal, its time and status to the log
    local name=$1 start rc
    shift
    echo "== $name: $*" | tee -a "$out/steps.txt"
    start=$EPOCHREALTIME
    timeout --kill-after=10 "$limit" "$@" > >(tee "$out/$name.txt") 2>&1
    rc=$?
    awk -v n="$name" -v rc="$rc" -v t0="$start" -v t1="$EPOCHREALTIME" \
        'BEGIN { printf "== %s: exit %d in %.1f s\n", n, rc, t1 - t0 }' | tee -a "$out/steps.txt"
    [ "$rc" -eq 0 ] || status=1
}

step gpu nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
step torch python -c "import torch; print(torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
step formats pytest tests/test_numerics_formats.py tests/test_numerics_kernels.py -q -p no:cacheprovider -k "$array"
[[ "$array" == *cuda* ]] && step models-cuda pytest tests/test_models_torch.py -q -p no:cacheprovider -k cuda
step "smoke-$tag" pytest conformance/ -k test_accuracy --hardware ipu --profile smoke --array "$array" "${models[@]}" \
    --report-dir "$out/smoke-$tag" -q -p no:cacheprovider
numpy_results="${NUMPY_RESULTS:-}"
if [ -z "$numpy_results" ]; then
    step smoke-numpy pytest conformance/ -k test_accuracy --hardware ipu --profile smoke --array numpy "${models[@]}" \
        --report-dir "$out/smoke-numpy" -q -p no:cacheprovider
    numpy_results="$out/smoke-numpy/results.json"
fi
step compare ipu-conformance report compare "$numpy_results" "$out/smoke-$tag/results.json" --out "$out/compare.txt"
step compare-records python scripts/compare_array_runs.py "$numpy_results" "$out/smoke-$tag/results.json"
# the release profile's batches, on a slice of each model's samples (the whole of conformer's and widedeep's)
slice=()
for count in resnet50=256 bert-base=64 albert=64 roformer=32; do
    [[ -z "${MODELS:-}" || ",$MODELS," == *",${count%=*},"* ]] && slice+=(--samples "$count")
done
step "release-slice-$tag" pytest conformance/ -k test_accuracy --hardware ipu --profile release "${slice[@]}" \
    --array "$array" "${models[@]}" --report-dir "$out/release-slice-$tag" -q -p no:cacheprovider
[[ -z "${MODELS:-}" || ",$MODELS," == *",resnet50,"* ]] && step release-slice-resnet50-numpy pytest conformance/ -k test_accuracy --hardware ipu --profile release --model resnet50 \
    --samples resnet50=64 --array numpy --report-dir "$out/release-slice-resnet50-numpy" -q -p no:cacheprovider
step "workers-$tag" pytest conformance/ -k test_accuracy --hardware ipu --profile smoke --model widedeep,conformer \
    --array "$array" --workers 2 --cache-dir "$out/workers-cache" --report-dir "$out/workers-$tag" -q -p no:cacheprovider
step workers-devices python -c "import json, sys
records = json.load(open(sys.argv[1]))['records']
print(sorted({(r['model'], r['precision'], tuple(r['details']['engine']['devices'])) for r in records if r['kind'] == 'accuracy'}))" \
    "$out/workers-$tag/results.json"
exit "$status"
