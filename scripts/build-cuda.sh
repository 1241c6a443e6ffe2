#!/usr/bin/env bash
# Build ragen-gym with the `cuda` feature on any x86-64 Linux machine (no GPU, driver or toolkit
# needed): installs the pinned CUDA 13.0 compiler from PyPI (scripts/setup-cuda.sh), then runs
# `cargo build --features cuda` with extra arguments passed through, e.g. `--release`.
# The binary loads CUDA at run time, so it also starts (and runs `--device cpu`) where no NVIDIA
# driver is installed; see docs/gpu.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
env_file="$(mktemp)"
trap 'rm -f "$env_file"' EXIT
bash scripts/setup-cuda.sh >"$env_file"
# shellcheck disable=SC1090
source "$env_file"
cargo build --features cuda "$@"
