#!/bin/bash
# reward 1 when the check below passes in the work folder, else 0
APP="${RSI_APP:-/app}"
OUT="${RSI_LOGS:-/logs}/verifier"
mkdir -p "$OUT"
cd "$APP" || { echo 0 > "$OUT/reward.txt"; exit 0; }
check() {
  [ "$(python3 "${RSI_TESTS:-/tests}/confine.py" "${RSI_TESTS:-/tests}" "$OUT" -- bash greet.sh 2>/dev/null)" = "ok" ]
}
if check; then echo 1 > "$OUT/reward.txt"; echo pass; else echo 0 > "$OUT/reward.txt"; echo fail; fi
exit 0
