#!/usr/bin/env bash
# Prepares a CUDA 13.0 build of ragen-gym on a machine without a GPU, a driver or a CUDA toolkit
# (docs/gpu.md). Idempotent; everything lives in a cache outside the repository
# ($RAGEN_GYM_CACHE, default ~/.cache/ragen-gym/cuda-13.0), so a second run only checks it.
#
#   bash scripts/setup-cuda.sh          # install (logs on stderr), print the build env on stdout
#   eval "$(bash scripts/setup-cuda.sh)" && cargo build --features cuda
#   bash scripts/build-cuda.sh [--release]   # the same in one step
#
# 1. The compiler and headers come from NVIDIA's PyPI wheels, pinned to 13.0.x to match the GPU
#    machine's driver (580, CUDA 13.0). Their dependencies are pinned too: unpinned, pip pulls
#    nvidia-nvvm / nvidia-cuda-crt 13.5, whose ptxas rejects every candle kernel ("Unsupported
#    .version 9.5; current version is '9.0'").
# 2. CUDA is loaded at run time, not linked. candle-core 0.11.1 turns on cudarc's
#    `dynamic-linking`, which would make the binary NEED libcuda.so.1 and refuse to start on a
#    machine without the NVIDIA driver, even for `--device cpu`. cudarc's own sources only test
#    `feature = "dynamic-loading"` (dlopen of libcuda/libcublas/... on first use), so the rustc
#    wrapper scripts/cuda-rustc-wrapper.sh adds exactly that cfg to the cudarc crate and to nothing
#    else. cudarc's build script still asks the linker for -lcuda -lcublas -lcublasLt -lcurand
#    -lnvrtc; nothing references their symbols any more, so empty stub libraries satisfy those
#    flags and `--as-needed` keeps them out of the binary's NEEDED list.
# 3. candle-kernels links its static GGUF/MoE kernels against `cudart`; the link directory offers
#    only libcudart_static.a (as libcudart.a), so the CUDA runtime is linked in statically and it
#    too opens the driver lazily.
# Result: `ldd ragen-gym` lists no CUDA library; --device cuda finds them at run time through
# LD_LIBRARY_PATH (scripts/gpu-check.sh sets it from the GPU machine's PyTorch wheels).
set -euo pipefail
cache="${RAGEN_GYM_CACHE:-$HOME/.cache/ragen-gym}"
dir="$cache/cuda-13.0"
root="$dir/root"
site="$dir/site"
root_of_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { printf '[setup-cuda] %s\n' "$*" >&2; }

# Exact pins (13.0.x); bump them together, and only to what the GPU machine's driver supports.
wheels=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
)
stamp="$dir/.installed"
want="$(printf '%s\n' "${wheels[@]}")"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -x "$site/nvidia/cu13/bin/nvcc" ]; then
  log "installing ${wheels[*]} into $site"
  rm -rf "$site" "$root"
  mkdir -p "$dir"
  # --no-deps: the pins above are the whole closure (nvcc's own requirements are unpinned).
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
    --cache-dir "$cache/pip" --target "$site" "${wheels[@]}"
  printf '%s\n' "$want" >"$stamp"
fi
cu="$site/nvidia/cu13"

# The synthesized CUDA root: bin/ and include/ from the wheels, lib64/ for the linker only.
if [ ! -f "$root/lib64/.ready" ]; then
  log "preparing $root"
  rm -rf "$root"
  mkdir -p "$root/lib64"
  ln -s "$cu/bin" "$root/bin"
  ln -s "$cu/include" "$root/include"
  ln -s "$cu/nvvm" "$root/nvvm"
  # Empty shared objects named like the real libraries (SONAME included): they only satisfy the
  # -l flags of cudarc's build script; no symbol of theirs is used (see 2. above).
  stub_src="$root/lib64/stub.c"
  echo 'int ragen_gym_cuda_stub;' >"$stub_src"
  for spec in cuda:libcuda.so.1 cublas:libcublas.so.13 cublasLt:libcublasLt.so.13 \
              curand:libcurand.so.10 nvrtc:libnvrtc.so.13; do
    name="${spec%%:*}" soname="${spec#*:}"
    cc -shared -fPIC -o "$root/lib64/lib$name.so" -Wl,-soname,"$soname" "$stub_src"
  done
  rm -f "$stub_src"
  # Static CUDA runtime for candle-kernels' `-lcudart` (no libcudart.so on the search path).
  ln -s "$cu/lib/libcudart_static.a" "$root/lib64/libcudart.a"
  touch "$root/lib64/.ready"
fi

nvcc_version="$("$root/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')"
if [ "$nvcc_version" != "13.0" ]; then
  log "nvcc reports release '$nvcc_version', expected 13.0 ($cu)"; exit 1
fi
log "nvcc $nvcc_version ready in $root"

# The build environment, one `export` per line (stdout only).
cat <<EOF
export PATH="$root/bin:\$PATH"
export CUDA_ROOT="$root"
export CUDA_HOME="$root"
export CUDA_PATH="$root"
export CUDARC_CUDA_VERSION=13000
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export RAGEN_GYM_INNER_RUSTC_WRAPPER="${RUSTC_WRAPPER:-}"
export RUSTC_WRAPPER="$root_of_repo/scripts/cuda-rustc-wrapper.sh"
EOF
