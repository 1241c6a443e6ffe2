#!/usr/bin/env bash
# Side-by-side speed anchors for the candle policy (docs/benchmarks.md, "Anchors for
# `bench policy`"; not part of CI).
#
# Installs PyTorch, transformers, peft and llama-cpp-python into a venv outside the repository
# (default ~/.cache/ragen-gym/anchors/venv), prepares the same weights for every stack (the default
# SmolLM2-135M-Instruct GGUF dequantised to f32: a Hugging Face directory for PyTorch, an f32 GGUF
# for llama.cpp), then runs the shapes of `ragen-gym bench policy` with the same thread count,
# alternating ours and theirs for several rounds, and prints medians, ranges and ratios.
#
# Usage: scripts/bench-anchors.sh [--rounds N] [--threads N] [--only train|sample] [--bin PATH]
#   RAGEN_ANCHORS_DIR   where the venv and converted weights live
#   RAGEN_GYM_BIN       our binary (default: `cargo build --bin ragen-gym`, dev profile like CI)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=3
threads="$(nproc)"
only=""
bin="${RAGEN_GYM_BIN:-}"
batch=4
seq=256
lora_rank=8
sample_batches="1,16,64"
new_tokens=32
prefill_tokens=256
prefill_reps=5
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        --bin) bin="$2"; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
dir="${RAGEN_ANCHORS_DIR:-$HOME/.cache/ragen-gym/anchors}"
venv="$dir/venv"
py="$venv/bin/python"
mkdir -p "$dir"

if [[ ! -f "$venv/.installed-v1" ]]; then
    echo "[anchors] installing PyTorch, transformers, peft, llama-cpp-python into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q torch transformers peft safetensors numpy gguf sentencepiece
    # llama-cpp-python builds llama.cpp from source (a few minutes on 2 cores).
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON}" "$venv/bin/pip" install -q llama-cpp-python
    touch "$venv/.installed-v1"
fi

if [[ -z "$bin" ]]; then
    (cd "$root" && cargo build -q --bin ragen-gym)
    bin="$root/target/debug/ragen-gym"
fi
gguf="$HOME/.cache/ragen-gym/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -f "$gguf" ]] || bash "$root/scripts/setup.sh"
hf_dir="$dir/SmolLM2-135M-Instruct-f32-hf"
f32_gguf="$dir/SmolLM2-135M-Instruct-f32.gguf"
anchors="$root/scripts/bench_anchors.py"
if [[ ! -f "$hf_dir/config.json" ]]; then
    echo "[anchors] dequantising $gguf -> $hf_dir (transformers' GGUF reader)" >&2
    "$py" "$anchors" export-hf --gguf "$gguf" --out "$hf_dir"
fi
if [[ ! -f "$f32_gguf" ]]; then
    echo "[anchors] dequantising $gguf -> $f32_gguf (llama.cpp quantize to ALL_F32)" >&2
    "$py" "$anchors" convert-f32 --gguf "$gguf" --out "$f32_gguf"
fi

results="$dir/results-$(date +%Y%m%d-%H%M%S).jsonl"
export RAYON_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"
record() { # side what json
    python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["side"]=sys.argv[1]; d["what"]=sys.argv[2]; d["round"]=int(sys.argv[3]); print(json.dumps(d))' "$1" "$2" "$3" >>"$results"
}
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "[anchors] $rounds rounds, $threads threads, results in $results; load average at start: $(load)" >&2
prompt_ids=""
for r in $(seq 1 "$rounds"); do
    if [[ "$only" != "train" ]]; then
        echo "[anchors] round $r: sampling + prefill (ours, HF generate, llama.cpp)  load $(load)" >&2
        out="$("$bin" bench policy --json --no-train --sample-batches "$sample_batches" \
            --new-tokens "$new_tokens" --prefill-tokens "$prefill_tokens" --prefill-reps "$prefill_reps")"
        record ours sample "$r" <<<"$out"
        prompt_ids="$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.stdin.read())["prompt_ids"]))' <<<"$out")"
        record pytorch sample "$r" < <("$py" "$anchors" hf-sample --hf-dir "$hf_dir" --threads "$threads" \
            --batches "$sample_batches" --new-tokens "$new_tokens" --prefill-tokens "$prefill_tokens" \
            --prefill-reps "$prefill_reps" --prompt-ids "$prompt_ids")
        record llama_cpp sample "$r" < <("$py" "$anchors" llama-cpp --gguf "$f32_gguf" --threads "$threads" \
            --new-tokens "$new_tokens" --prefill-tokens "$prefill_tokens" --prefill-reps "$prefill_reps" \
            --prompt-ids "$prompt_ids")
    fi
    if [[ "$only" != "sample" ]]; then
        for mode in full lora; do
            echo "[anchors] round $r: training step, $mode (ours, PyTorch)  load $(load)" >&2
            skip=$([[ $mode == full ]] && echo --no-lora || echo --no-full)
            record ours "train-$mode" "$r" < <("$bin" bench policy --json --no-sample "$skip" \
                --train-batch "$batch" --train-seq "$seq" --lora-rank "$lora_rank" \
                --warmup-steps 1 --train-steps 1)
            record pytorch "train-$mode" "$r" < <("$py" "$anchors" train --hf-dir "$hf_dir" \
                --threads "$threads" --mode "$mode" --batch "$batch" --seq "$seq" \
                --lora-rank "$lora_rank" --warmup 1 --steps 1)
        done
    fi
done
echo "[anchors] load average at end: $(load)" >&2
python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def series(side, what, pick):
    out = []
    for r in rows:
        if r["side"] == side and r["what"] == what:
            v = pick(r)
            if v is not None:
                out.append(v)
    return out
def fmt(xs):
    if not xs:
        return "-"
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
def line(name, ours, theirs, anchor, unit, higher_is_better=True):
    if not ours:
        return
    ratio = "-"
    if theirs:
        a, b = statistics.median(ours), statistics.median(theirs)
        ratio = f"{(a / b if higher_is_better else b / a):.2f}x"
    print(f"| {name} | {fmt(ours)} {unit} | {anchor}: {fmt(theirs)} {unit} | {ratio} |")
def samp(b, key="tokens_per_s"):
    return lambda r: next((s[key] for s in r.get("sampling", []) if s["batch"] == b), None)
def pre(r):
    return next((p["tokens_per_s"] for p in r.get("prefill", [])), None)
def tr(key):
    return lambda r: next((t[key] for t in r.get("training", [])), None)
print("| what | ragen-gym median (range) | anchor median (range) | ratio (ours/anchor; memory: anchor/ours) |")
print("|---|---|---|---|")
for mode in ["full", "lora"]:
    w = f"train-{mode}"
    line(f"training step {mode}, 4x256", series("ours", w, tr("tokens_per_s")), series("pytorch", w, tr("tokens_per_s")), "PyTorch", "tok/s")
    line(f"training step {mode}, peak RSS", series("ours", w, tr("peak_rss_mib")), series("pytorch", w, tr("peak_rss_mib")), "PyTorch", "MiB", higher_is_better=False)
for b in [1, 16, 64]:
    line(f"sampling batch {b}", series("ours", "sample", samp(b)), series("pytorch", "sample", samp(b)), "HF generate", "tok/s")
line("sampling batch 1", series("ours", "sample", samp(1)), series("llama_cpp", "sample", samp(1)), "llama.cpp f32", "tok/s")
line("prefill", series("ours", "sample", pre), series("pytorch", "sample", pre), "PyTorch", "tok/s")
line("prefill", series("ours", "sample", pre), series("llama_cpp", "sample", pre), "llama.cpp f32", "tok/s")
EOF
