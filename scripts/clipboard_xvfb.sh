#!/usr/bin/env bash
# The Copy button of Export code puts the text on the system clipboard: starts the real window
# under Xvfb, clicks Copy on the TorchIO tab, and compares `xsel -b -o` with the text of
# `augscope preset export --to torchio --ndim 3 nnunet-v2`.
# Needs: apt-get install -y xvfb xsel xdotool mesa-vulkan-drivers libvulkan1
# Usage: scripts/clipboard_xvfb.sh [path/to/augscope]   (default: target/debug/augscope)
# Exits 0 when the clipboard holds exactly the text, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/debug/augscope}
[ -x "$BIN" ] || { echo "no binary at $BIN (cargo build first)" >&2; exit 1; }
DISP=${CLIPBOARD_DISPLAY:-:96}
export DISPLAY=$DISP
TMP=$(mktemp -d)
export XDG_RUNTIME_DIR=$TMP/xdg XDG_DATA_HOME=$TMP/data XDG_CONFIG_HOME=$TMP/config
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
Xvfb "$DISP" -screen 0 1600x1000x24 >/dev/null 2>&1 &
XVFB=$!
APP=""
trap 'kill $APP $XVFB 2>/dev/null || true; rm -rf "$TMP"' EXIT
# Xvfb may take a while on a loaded machine: wait up to a minute for the display, then say so.
for _ in $(seq 1 300); do xdotool getdisplaygeometry >/dev/null 2>&1 && break; sleep 0.2; done
xdotool getdisplaygeometry >/dev/null 2>&1 || { echo "Xvfb did not open display $DISP" >&2; exit 1; }
"$BIN" preset export --to torchio --ndim 3 nnunet-v2 > "$TMP/want.py"
# The code window open on the TorchIO tab (the window's default place: x 300, y 80 points).
start_app() {
  AUGSCOPE_SHOT="code=1;preset=nnunet-v2" "$BIN" view assets/mni152_t1.nii.gz >"$TMP/app.log" 2>&1 &
  APP=$!
}
start_app
WID=""
STARTS=1
for _ in $(seq 1 240); do
  WID=$(xdotool search --onlyvisible --name '^augscope' 2>/dev/null | head -1 || true)
  [ -n "$WID" ] && break
  # On a loaded machine the first connection to a fresh Xvfb can be refused: start again, twice.
  if ! kill -0 "$APP" 2>/dev/null && [ "$STARTS" -lt 3 ]; then
    echo "the window did not open (start $STARTS): $(tail -1 "$TMP/app.log")" >&2
    STARTS=$((STARTS + 1))
    sleep 1
    start_app
  fi
  sleep 0.5
done
[ -n "$WID" ] || { echo "no augscope window appeared" >&2; cat "$TMP/app.log" >&2; exit 1; }
xdotool windowmove "$WID" 0 0 || true
xdotool windowsize "$WID" 1600 1000 || true
# Click Copy until the clipboard holds the text (the first clicks may come before the window
# has drawn its code window).
for _ in $(seq 1 60); do
  xdotool mousemove 328 204 click 1 || true
  sleep 0.5
  if xsel -b -o > "$TMP/got.py" 2>/dev/null && [ -s "$TMP/got.py" ]; then
    break
  fi
done
if cmp -s "$TMP/want.py" "$TMP/got.py"; then
  echo "the system clipboard holds the exported TorchIO code ($(wc -c < "$TMP/got.py") bytes)"
  exit 0
fi
echo "the system clipboard does not hold the exported code: $(wc -c < "$TMP/got.py") bytes, want $(wc -c < "$TMP/want.py")" >&2
diff "$TMP/want.py" "$TMP/got.py" | head -5 >&2 || true
exit 1
