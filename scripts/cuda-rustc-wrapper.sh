#!/usr/bin/env bash
# RUSTC_WRAPPER for CUDA builds (set by scripts/setup-cuda.sh; docs/gpu.md). Cargo runs
# `wrapper <rustc> <args...>` for every crate. For the library of the `cudarc` crate only, it adds
# `--cfg feature="dynamic-loading"`: cudarc's sources then dlopen libcuda, libcublas, ... on first
# use instead of calling linked symbols (candle-core 0.11.1 selects `dynamic-linking`, and cudarc's
# build script panics when both features are requested through Cargo). Everything else is passed
# through unchanged, to $RAGEN_GYM_INNER_RUSTC_WRAPPER when one was set before (e.g. sccache).
set -euo pipefail
rustc="$1"
shift
crate=""
prev=""
for arg in "$@"; do
  if [ "$prev" = "--crate-name" ]; then
    crate="$arg"
  fi
  prev="$arg"
done
extra=()
if [ "$crate" = "cudarc" ]; then
  extra=(--cfg 'feature="dynamic-loading"')
fi
if [ -n "${RAGEN_GYM_INNER_RUSTC_WRAPPER:-}" ]; then
  exec "$RAGEN_GYM_INNER_RUSTC_WRAPPER" "$rustc" "$@" "${extra[@]}"
fi
exec "$rustc" "$@" "${extra[@]}"
