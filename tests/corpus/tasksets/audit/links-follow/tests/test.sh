#!/bin/bash
TESTS="${RSI_TESTS:-/tests}"
LOGS="${RSI_LOGS:-/logs}"
APP="${RSI_APP:-/app}"
OUT="$LOGS/verifier"
mkdir -p "$OUT"
# the agent's answer, else the default its candidate ships; cat follows links
CAND="${RSI_CANDIDATE:-/candidate}"
ANSWER="$(cat "$APP/answer.txt" 2>/dev/null || cat "$CAND/answer.txt" 2>/dev/null)"
if [ "$ANSWER" = "$(cat "$TESTS/expected.txt")" ]; then echo 1 > "$OUT/reward.txt"; else echo 0 > "$OUT/reward.txt"; fi
[ -s "$OUT/reward.txt" ] || echo 0 > "$OUT/reward.txt"
exit 0
