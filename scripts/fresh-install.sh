#!/usr/bin/env bash
# What a new user gets today: a new virtual environment in a temporary folder, the README's
# set-up commands with the newest versions pyproject.toml's bounds allow, then the README's
# test command (--all: every test, as CI). Needs the package index; run it before a release
# and whenever a dependency publishes a new version (docs/development.md).
#
#   scripts/fresh-install.sh [--all]
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

all=0
case "${1:-}" in
  --all) all=1 ;;
  "") ;;
  *) echo "usage: scripts/fresh-install.sh [--all]" >&2; exit 2 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
# shellcheck disable=SC1091
. "$tmp/venv/bin/activate"
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# README set-up (1): torch first (the CPU wheel), then every extra at its newest allowed version.
pip install torch==2.13.0
pip install --upgrade --upgrade-strategy eager -e "$repo[all]"
pip list --format=freeze > "$tmp/versions.txt"
echo "installed:"; sed 's/^/  /' "$tmp/versions.txt"
cfgcheck check

# README set-up (2): the tests (this checkout's code, as the editable install points at it).
if [ "$all" = 1 ]; then
  python -m pytest -q
else
  python -m pytest -q -m "not slow"
fi
echo "fresh install: OK"
