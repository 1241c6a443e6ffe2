#!/usr/bin/env bash
# Prepare the GPU check for a machine that has a GPU but no Rust (docs/gpu.md): build the release
# binary with CUDA (scripts/build-cuda.sh --release), strip it and compress it with xz into
# target/gpu-check/ragen-gym.xz (what travels to the GPU machine: at most 64 MiB in one call,
# tree included). Prints the sizes and the command to run there; fails when they do not fit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/build-cuda.sh --release --bin ragen-gym
target="${CARGO_TARGET_DIR:-$root/target}"
dest="$root/target/gpu-check"
mkdir -p "$dest"
strip -o "$dest/ragen-gym" "$target/release/ragen-gym"
xz -6 -T0 -f -k "$dest/ragen-gym"
rm -f "$dest/ragen-gym"
size() { stat -c %s "$1"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
tree_bytes="$(git ls-files -z | xargs -0 stat -c %s | awk '{ s += $1 } END { print s }')"
total=$(($(size "$dest/ragen-gym.xz") + tree_bytes))
if ((total > 64 * 1048576)); then
    echo "pack-gpu-check: ragen-gym.xz + tracked tree = $(mib "$total"), over the 64 MiB one call carries" >&2
    exit 1
fi
cat <<EOF
release binary   $(mib "$(size "$target/release/ragen-gym")")
stripped + xz    $(mib "$(size "$dest/ragen-gym.xz")")  target/gpu-check/ragen-gym.xz
tracked tree     $(mib "$tree_bytes")
On the GPU machine, from the repository root (carry target/gpu-check with the tree):
  xz -dkf target/gpu-check/ragen-gym.xz && chmod +x target/gpu-check/ragen-gym && \\
  bash scripts/gpu-check.sh "\$OUT/gpu-check" --bin target/gpu-check/ragen-gym
EOF
