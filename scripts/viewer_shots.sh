#!/usr/bin/env bash
# Screenshots of the viewer's own features, from the real window under Xvfb (software Vulkan):
# docs/viewer_dicom.png (MR_small at its DICOM window), docs/viewer_4d.png (a 4D NIfTI with the
# volume selector), docs/viewer_order.png (order 0 against 3, zoomed, voxels drawn as they are)
# and docs/viewer_1280.png (the layout at 1280×720). The status bar's readout of the voxel under
# the pointer shows in the first two.
# Needs: xvfb mesa-vulkan-drivers libvulkan1 imagemagick xdotool, and python3 with nibabel (the 4D
# scan is made from the sample). Usage: scripts/viewer_shots.sh [path/to/augscope]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/augscope}
DISP=:96
export DISPLAY=$DISP XDG_RUNTIME_DIR=/tmp/augscope-xdg
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
Xvfb $DISP -screen 0 1600x1000x24 >/dev/null 2>&1 &
XVFB=$!
APP=""
TMP=$(mktemp -d)
trap 'kill $APP $XVFB 2>/dev/null || true; rm -rf "$TMP"' EXIT
sleep 1

start() { # start SPEC [ARGS...]
  export XDG_DATA_HOME=$(mktemp -d -p "$TMP") XDG_CONFIG_HOME=$(mktemp -d -p "$TMP")
  local spec=$1; shift
  AUGSCOPE_SHOT="$spec" "$BIN" view "$@" &
  APP=$!
  WID=""
  for _ in $(seq 1 120); do
    WID=$(xdotool search --onlyvisible --name '^augscope' 2>/dev/null | head -1 || true)
    [ -n "$WID" ] && break
    sleep 0.5
  done
  [ -n "$WID" ] || { echo "no augscope window appeared" >&2; exit 1; }
  xdotool windowmove "$WID" 0 0 || true
  xdotool windowsize "$WID" "${W:-1600}" "${H:-1000}" || true
}
stop() { kill $APP 2>/dev/null || true; wait $APP 2>/dev/null || true; APP=""; }
shot() { import -window root -crop "${W:-1600}x${H:-1000}+0+0" "$1"; }

start "" tests/data/dicom/MR_small.dcm
sleep 6; shot docs/viewer_dicom.png; stop

python3 - "$TMP/four_d.nii.gz" <<'PY'
import sys, nibabel as nib, numpy as np
img = nib.load("assets/mni152_t1.nii.gz")
a = np.asarray(img.dataobj, dtype=np.float32)
vols = np.stack([a, a.max() - a, np.roll(a, 12, axis=0)], axis=-1)
nib.save(nib.Nifti1Image(vols, img.affine), sys.argv[1])
PY
start "" "$TMP/four_d.nii.gz"
sleep 8
# The volume slider sits in the Display section: scroll the controls panel down, then read a voxel.
xdotool mousemove 150 700 click 5 click 5 click 5 click 5 click 5 click 5 click 5 click 5
sleep 1; xdotool mousemove 720 260; sleep 1; shot docs/viewer_4d.png; stop

for o in 0 3; do
  start "rotate=17,0,0;order=$o;nearest;zoom=4" assets/mni152_t1.nii.gz --label assets/mni152_tissue_labels.nii.gz
  sleep 10; shot "$TMP/order$o.png"; stop
  # The augmented axial view, labelled.
  convert "$TMP/order$o.png" -crop 316x438+373+507 +repage -fill '#ffaa3c' -pointsize 20 \
    -annotate +10+30 "order $o" "$TMP/o$o.png"
done
convert "$TMP/o0.png" -size 6x438 xc:black "$TMP/o3.png" +append docs/viewer_order.png


W=1280 H=720 start "rotate=8,0,0" assets/mni152_t1.nii.gz --label assets/mni152_tissue_labels.nii.gz
sleep 10; W=1280 H=720 shot docs/viewer_1280.png; stop
