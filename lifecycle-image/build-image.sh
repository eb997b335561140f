#!/usr/bin/env bash
# Adds /cnb/lifecycle/preparer to a lifecycle base image as one layer, without a Docker engine (umoci, skopeo).
#
#   lifecycle-image/build-image.sh EXECUTABLE OUT_LAYOUT [BASE]
#
# BASE is any skopeo source (docker://docker.io/buildpacksio/lifecycle:0.21.17, oci:DIR:TAG, ...); "local"
# (the default) builds a minimal stand-in base with the lifecycle's directories, so no network is needed.
# The result is the OCI layout OUT_LAYOUT, tagged "preparer"; `skopeo copy oci:OUT_LAYOUT:preparer docker://...`
# publishes it.
set -euo pipefail
executable=$(realpath "${1:?usage: build-image.sh EXECUTABLE OUT_LAYOUT [BASE]}")
layout=$(realpath -m "${2:?usage: build-image.sh EXECUTABLE OUT_LAYOUT [BASE]}")
base=${3:-local}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rm -rf "$layout"
if [ "$base" = local ]; then
  umoci init --layout "$layout"
  umoci new --image "$layout:base"
  umoci config --image "$layout:base" --os linux --architecture amd64 --config.workingdir /layers \
    --config.env PATH=/cnb/lifecycle --config.user 1000:1000
  umoci unpack --image "$layout:base" "$work/base" >/dev/null
  # What a lifecycle image offers a phase: /cnb/lifecycle, a writable /tmp; nothing else (no shell, no libc).
  install -d -m 0755 "$work/base/rootfs/cnb/lifecycle"
  install -d -m 1777 "$work/base/rootfs/tmp"
  umoci repack --image "$layout:base" "$work/base"
else
  skopeo copy --quiet "$base" "oci:$layout:base"
fi

umoci unpack --image "$layout:base" "$work/bundle" >/dev/null
install -D -m 0755 "$executable" "$work/bundle/rootfs/cnb/lifecycle/preparer"
# The executable unpacks itself into $TMPDIR (default /tmp): a base without /tmp gets one, in the same layer.
[ -e "$work/bundle/rootfs/tmp" ] || install -d -m 1777 "$work/bundle/rootfs/tmp"
umoci repack --image "$layout:preparer" "$work/bundle"
umoci config --image "$layout:preparer" \
  --config.label "io.buildpacks.preparer.version=$("$executable" -version)"
umoci gc --layout "$layout"
echo "built $layout:preparer on $base"
