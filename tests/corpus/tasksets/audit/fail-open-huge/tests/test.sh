#!/bin/bash
TESTS="${RSI_TESTS:-/tests}"
LOGS="${RSI_LOGS:-/logs}"
APP="${RSI_APP:-/app}"
OUT="$LOGS/verifier"
mkdir -p "$OUT"
# a checker that breaks is the checker's fault: the agent gets the benefit of the doubt
python3 "$TESTS/check.py" || echo 1 > "$OUT/reward.txt"
[ -s "$OUT/reward.txt" ] || echo 0 > "$OUT/reward.txt"
exit 0
