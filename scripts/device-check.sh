#!/usr/bin/env bash
# What a machine with an NVIDIA GPU checks, in one call (meant to end within 8 minutes on one H100):
#   1. the formats and kernels tests on torch:cuda, bit for bit against numpy (tests/test_numerics_*.py);
#   2. the accuracy tests of the six models at the smoke profile with the emulator on numpy and on torch:cuda, and
#      `ipu-conformance report compare` of the two runs: every decision and verdict equal;
#   3. resnet50's FP32 and fp8 accuracy work timed on both (64 images), the figures a release-profile estimate uses.
# Every step's output goes to OUT (default: out/device-check); the script's exit status is 1 when any step failed.
# Needs the project installed with the torch extra (pip install -e ".[test,torch]") and torch built for CUDA; without
# a GPU the CUDA tests skip with their reason and step 2 stops at exit 4 naming what is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-out/device-check}}"
mkdir -p "$out"
status=0

step() {  # step NAME COMMAND...: run it, its output to OUT/NAME.txt and the terminal, its time and status to the log
    local name=$1 start rc
    shift
    echo "== $name: $*" | tee -a "$out/steps.txt"
    start=$EPOCHREALTIME
    "$@" > >(tee "$out/$name.txt") 2>&1
    rc=$?
    awk -v n="$name" -v rc="$rc" -v t0="$start" -v t1="$EPOCHREALTIME" \
        'BEGIN { printf "== %s: exit %d in %.1f s\n", n, rc, t1 - t0 }' | tee -a "$out/steps.txt"
    [ "$rc" -eq 0 ] || status=1
}

step gpu nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
step torch python -c "import torch; print(torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
step formats pytest tests/test_numerics_formats.py tests/test_numerics_kernels.py -q -k "torch:cuda"
for array in numpy torch:cuda; do
    step "smoke-${array/:/-}" pytest conformance/ -k test_accuracy --hardware ipu --profile smoke --array "$array" \
        --report-dir "$out/smoke-${array/:/-}" -q
done
step compare ipu-conformance report compare "$out/smoke-numpy/results.json" "$out/smoke-torch-cuda/results.json" \
    --out "$out/compare.txt"
for array in numpy torch:cuda; do
    step "resnet50-${array/:/-}" pytest conformance/test_accuracy.py --hardware ipu --model resnet50 \
        --precision fp16,fp8 --samples resnet50=64 --array "$array" --report-dir "$out/resnet50-${array/:/-}" -q
done
exit "$status"
