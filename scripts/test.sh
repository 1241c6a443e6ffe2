#!/usr/bin/env bash
# The project's test command: installs what is missing (scripts/setup.sh), then runs every test
# of the workspace in the dev profile (the same profile as the main job).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
cargo test --workspace --no-fail-fast "$@"
