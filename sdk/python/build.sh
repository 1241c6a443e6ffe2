#!/usr/bin/env bash
# Build the Python example environment plugin into a WebAssembly component with the
# ragen-gym manifest attached.
#
# Usage: sdk/python/build.sh [OUT.wasm]   (default: target/python-plugins/guess_number.wasm)
# Needs componentize-py (installed into .venv by scripts/setup.sh); override with
# COMPONENTIZE_PY=/path/to/componentize-py. Works offline.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/sdk/python"
out="${1:-$root/target/python-plugins/guess_number.wasm}"
componentize="${COMPONENTIZE_PY:-$root/.venv/bin/componentize-py}"
python="${PYTHON:-python3}"

if [[ ! -x "$componentize" ]]; then
    echo "error: componentize-py not found at $componentize (run scripts/setup.sh)" >&2
    exit 1
fi

mkdir -p "$(dirname "$out")"
raw="$(mktemp "${TMPDIR:-/tmp}/guess_number.XXXXXX.wasm")"
trap 'rm -f "$raw"' EXIT

# The world is example/wit/guess.wit: ragen:gym's env-plugin world minus the http import (see
# the comment there). `app` is the module holding `Environment`.
(cd "$here/example" && "$componentize" -d "$root/wit" -d "$here/example/wit" \
    -w examples:guess-number/guess-plugin@0.1.0 componentize app -o "$raw")
"$python" "$here/add_manifest.py" "$raw" "$here/example/manifest.json" "$out"
echo "built $out"
