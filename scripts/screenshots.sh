#!/usr/bin/env bash
# Screenshots of the real augscope window under Xvfb (software Vulkan, lavapipe), for the README.
# Needs: apt-get install -y xvfb mesa-vulkan-drivers libvulkan1 imagemagick xdotool
# Usage: scripts/screenshots.sh [path/to/augscope]   (default: target/release/augscope)
# Writes docs/explorer.png (the bundled sample, rotated with elastic on), docs/compare.png,
# docs/export.png (the batch export dialog), docs/filter.png (a LoG after the transform) and
# docs/febds.png (the FEBDS mask over the synthetic mammogram of the FEBDS fixtures), docs/editor.png
# (the preset editor), docs/code.png (Export code, TorchIO tab), docs/grid.png (the grid of draws)
# docs/jacobian.png (the deformation grid and Jacobian overlays) and docs/preview_torchio.png
# (previewing as TorchIO, its control grid drawn over the slices).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/augscope}
[ -x "$BIN" ] || cargo build --release
DISP=:97
export DISPLAY=$DISP XDG_RUNTIME_DIR=/tmp/augscope-xdg
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
Xvfb $DISP -screen 0 1600x1000x24 >/dev/null 2>&1 &
XVFB=$!
APP=""
trap 'kill $APP $XVFB 2>/dev/null || true' EXIT
sleep 1
SHOT="rotate=12,-8,5;elastic=900,11;translate=0,6,-4"

# Starts the app with AUGSCOPE_SHOT=$1 (parameters, read by the app only for screenshots) and
# waits for its window. A fresh profile each time, so the screenshots do not depend on saved state.
start() {
  export XDG_DATA_HOME=$(mktemp -d) XDG_CONFIG_HOME=$(mktemp -d)
  if [ -n "${2:-}" ]; then
    AUGSCOPE_SHOT="$1" "$BIN" view "$2" &
  else
    AUGSCOPE_SHOT="$1" "$BIN" view assets/mni152_t1.nii.gz \
      --label assets/mni152_tissue_labels.nii.gz &
  fi
  APP=$!
  WID=""
  for _ in $(seq 1 120); do
    WID=$(xdotool search --onlyvisible --name '^augscope' 2>/dev/null | head -1 || true)
    [ -n "$WID" ] && break
    sleep 0.5
  done
  [ -n "$WID" ] || { echo "no augscope window appeared" >&2; exit 1; }
  xdotool windowmove "$WID" 0 0 || true
  xdotool windowsize "$WID" 1600 1000 || true
  xdotool windowfocus "$WID" 2>/dev/null || true
}

start "$SHOT"
sleep 12   # load, transform (elastic field on the CPU), and draw
import -window root docs/explorer.png
# The CPU vs GPU comparison: the toggle in the menu bar's right corner.
xdotool mousemove 1520 12 mousedown 1; sleep 0.2; xdotool mouseup 1
sleep 8
import -window root docs/compare.png
kill $APP; wait $APP 2>/dev/null || true

# The batch export dialog, opened on a folder.
start "$SHOT;export=$HOME/augscope-batch"
sleep 12
import -window root docs/export.png
kill $APP; wait $APP 2>/dev/null || true

# The filter panel: a LoG after the transform.
start "$SHOT;filter=log,1.5,after"
sleep 14
import -window root docs/filter.png
kill $APP; wait $APP 2>/dev/null || true

# The FEBDS mask (dog) as an overlay on a 2D mammogram-like image.
start "rotate=0,0,0;filter=febds,0" tests/fixtures/febds/input.npy
sleep 14
import -window root docs/febds.png
kill $APP; wait $APP 2>/dev/null || true

# The preset editor (the bundled nnU-Net v2 preset), and the code window on its TorchIO tab.
start "$SHOT;editor"
sleep 12
import -window root docs/editor.png
kill $APP; wait $APP 2>/dev/null || true
start "$SHOT;code=1"
sleep 12
import -window root docs/code.png
kill $APP; wait $APP 2>/dev/null || true

# What training will see: a 3x3 grid of draws of the batchgenerators preset, with histograms.
start "rotate=0,0,0;preset=batchgenerators;grid"
sleep 45
import -window root docs/grid.png
kill $APP; wait $APP 2>/dev/null || true

# The deformation grid and the Jacobian (folded voxels in yellow) with a strong elastic.
start "rotate=0,0,0;elastic=250,4;overlays"
sleep 40
import -window root docs/jacobian.png
kill $APP; wait $APP 2>/dev/null || true

# Preview as TorchIO: its B-spline deformation and its control grid over the slices.
start "rotate=10,0,0;elastic=1500,14;as=torchio"
sleep 25
import -window root docs/preview_torchio.png
echo "wrote docs/explorer.png docs/compare.png docs/export.png docs/filter.png docs/febds.png" \
     "docs/editor.png docs/code.png docs/grid.png docs/jacobian.png docs/preview_torchio.png"
