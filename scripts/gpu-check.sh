#!/usr/bin/env bash
# The one-run GPU check (docs/gpu.md, "The GPU check", says how the files travel and the exact
# command):
#
#   bash gpu-check.sh OUT_DIR [--device cuda|cuda:N|cpu|auto] [--shape qwen2.5-0.5b|tiny]
#                     [--bin PATH] [--budget-s SECONDS] [--parts LIST]
#
# Runs a ragen-gym binary built elsewhere (nothing is compiled here) on a model of Qwen2.5-0.5B's
# shape with seeded random weights: `bench gpu-check` parts (correctness, sampling, train-step,
# iteration-full, iteration-lora), each as its own process under a share of the time budget, and
# the PyTorch anchor (scripts/gpu_check.py torch) and f32 parity (scripts/gpu_check.py parity:
# PyTorch's CPU and CUDA logits on the weights correctness left in OUT_DIR/parity/, 2.5 GB at
# Qwen2.5-0.5B's shape, so leave it out of what travels back) when python3 has torch. It
# writes OUT_DIR/report.json (ratios included), the per-part JSON files and OUT_DIR/logs/.
#
# Defaults: --device cuda, --shape qwen2.5-0.5b, --budget-s 450 (the GPU machine lends 8 minutes).
# --parts runs only the parts named (comma-separated, e.g. torch,iteration-lora, for a rerun of
# what an earlier check missed), the budget split over their shares; workload always runs first.
# CPU fallback, runnable anywhere (and a test, host/cli/tests/gpu_check.rs):
#   bash scripts/gpu-check.sh /tmp/gc --device cpu --shape tiny
# The binary is --bin, else $RAGEN_GYM_BIN, else ./ragen-gym next to this script, else
# target/release/ragen-gym, else target/debug/ragen-gym.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
out="$1"
shift
device=cuda shape=qwen2.5-0.5b bin="" budget=450 parts=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --shape) shape="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --budget-s) budget="$2"; shift 2 ;;
    --parts) parts="$2"; shift 2 ;;
    *) usage ;;
  esac
done
mkdir -p "$out/logs"
out="$(cd "$out" && pwd)"
log() { printf '[gpu-check %4ds] %s\n' "$((SECONDS))" "$*" | tee -a "$out/logs/gpu-check.log" >&2; }

for c in "$bin" "${RAGEN_GYM_BIN:-}" "$here/ragen-gym" "$here/../target/release/ragen-gym" \
         "$here/../target/debug/ragen-gym"; do
  if [ -n "$c" ] && [ -x "$c" ]; then bin="$c"; break; fi
  bin=""
done
if [ -z "$bin" ]; then
  log "no ragen-gym binary found (pass --bin PATH)"; exit 1
fi
script_py="$here/gpu_check.py"

# The CUDA libraries (cuBLAS, cuRAND, ...) are opened at run time: find them in python3's NVIDIA
# wheels (the GPU machine has them beside PyTorch); the driver's libcuda.so.1 is a system library.
if [ "$device" != cpu ]; then
  wheel_libs="$(python3 - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit
dirs = set()
for root in nvidia.__path__:
    for lib in glob.glob(os.path.join(root, "**", "lib*.so*"), recursive=True):
        dirs.add(os.path.dirname(lib))
print(":".join(sorted(dirs)))
PY
)"
  # Driver directories that containers often leave off the loader's path.
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
    if [ -e "$d/libcuda.so.1" ]; then wheel_libs="${wheel_libs:+$wheel_libs:}$d"; fi
  done
  if [ -n "$wheel_libs" ]; then
    export LD_LIBRARY_PATH="$wheel_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  {
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    nvidia-smi 2>&1 | head -15
  } >"$out/logs/environment.log" 2>&1
fi
log "binary $bin ($("$bin" --version 2>&1)), device $device, shape $shape, budget ${budget}s"

deadline=$((SECONDS + budget))
reserve=8 # for the report
# name fraction-of-budget (percent)
plan=(workload:3 correctness:8 parity:4 sampling:9 train-step:10 torch:15 iteration-full:35 iteration-lora:20)
if [ -n "$parts" ]; then
  for name in ${parts//,/ }; do
    # A here-string, not a pipe: under pipefail, grep -q exiting at its first match could end
    # printf with SIGPIPE and fail the test for a part that exists (seen once in test.sh).
    if ! grep -qx -- "$name" <<<"$(printf '%s\n' "${plan[@]%%:*}")"; then
      log "--parts: no part named '$name' (parts: ${plan[*]%%:*})"; exit 2
    fi
  done
  chosen=()
  for item in "${plan[@]}"; do
    name="${item%%:*}"
    if [ "$name" = workload ] || [[ ",$parts," == *",$name,"* ]]; then chosen+=("$item"); fi
  done
  # Shares rescaled so the parts chosen fill the budget.
  total=0
  for item in "${chosen[@]}"; do total=$((total + ${item#*:})); done
  plan=()
  for item in "${chosen[@]}"; do plan+=("${item%%:*}:$((${item#*:} * 100 / total))"); done
fi
status=0
for item in "${plan[@]}"; do
  part="${item%%:*}"
  share=$((budget * ${item#*:} / 100))
  left=$((deadline - SECONDS - reserve))
  limit=$((share < left ? share : left))
  if [ "$limit" -lt 5 ]; then
    log "$part: skipped, the budget is spent"
    echo "{\"skipped\": \"budget spent\", \"part\": \"$part\"}" >"$out/rust-$part.json"
    continue
  fi
  if [ "$part" = torch ] || [ "$part" = parity ]; then
    if ! python3 -c 'import torch, transformers, safetensors' >/dev/null 2>&1; then
      log "$part: skipped, python3 has no torch/transformers/safetensors"
      echo '{"skipped": "python3 has no torch, transformers and safetensors"}' >"$out/$part.json"
      continue
    fi
    if [ "$part" = parity ] && [ ! -f "$out/parity/batch.json" ]; then
      log "parity: skipped, no OUT/parity/ (the correctness part leaves it off the CPU)"
      echo '{"skipped": "no parity files (correctness on the CPU, or it failed)"}' >"$out/parity.json"
      continue
    fi
    torch_device="$device"; [ "$torch_device" = auto ] && torch_device=cuda
    cmd=(python3 "$script_py" "$part" "$out" --device "$torch_device")
    result="$out/$part.json"
  else
    cmd=("$bin" bench gpu-check --out "$out" --device "$device" --shape "$shape" --part "$part")
    result="$out/rust-$part.json"
    [ "$part" = workload ] && result="$out/workload.json"
  fi
  log "$part: up to ${limit}s"
  start=$SECONDS
  timeout --kill-after=5 "$limit" "${cmd[@]}" >"$out/logs/$part.log" 2>&1
  rc=$?
  log "$part: exit $rc after $((SECONDS - start))s"
  if [ "$rc" -ne 0 ] && [ "$part" = workload ]; then
    tail -20 "$out/logs/$part.log" >&2
    exit 1
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    progress="$out/rust-$part.progress.json"
    python3 - "$result" "$part" "$limit" "$progress" <<'PY'
import json, os, sys
path, part, limit, progress = sys.argv[1:]
v = {"part": part, "timed_out": True, "limit_s": int(limit)}
if os.path.exists(progress):
    v["progress"] = json.load(open(progress))
json.dump(v, open(path, "w"), indent=2)
PY
    status=1
  elif [ "$rc" -ne 0 ]; then
    status=1
    if [ ! -s "$result" ]; then
      python3 - "$result" "$part" "$rc" "$out/logs/$part.log" <<'PY'
import json, sys
path, part, rc, log = sys.argv[1:]
tail = open(log, errors="replace").read()[-2000:]
json.dump({"part": part, "failed": True, "exit_code": int(rc), "log_tail": tail},
          open(path, "w"), indent=2)
PY
    fi
  fi
done
python3 "$script_py" report "$out" | tee "$out/logs/summary.json"
log "done: $out/report.json"
exit "$status"
