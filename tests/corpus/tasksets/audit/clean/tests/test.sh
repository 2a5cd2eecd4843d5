#!/bin/bash
TESTS="${RSI_TESTS:-/tests}"
LOGS="${RSI_LOGS:-/logs}"
APP="${RSI_APP:-/app}"
OUT="$LOGS/verifier"
mkdir -p "$OUT"
python3 "$TESTS/check.py"
[ -s "$OUT/reward.txt" ] || echo 0 > "$OUT/reward.txt"
exit 0
