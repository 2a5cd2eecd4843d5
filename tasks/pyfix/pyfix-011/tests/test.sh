#!/usr/bin/env bash
# pyfix verifier entry point: check.py writes 1 or 0 to $RSI_LOGS/verifier/reward.txt.
# -I: nothing of the environment or the user's site (a planted usercustomize) reaches it
TESTS="${RSI_TESTS:-/tests}"
LOGS="${RSI_LOGS:-/logs}"
mkdir -p "$LOGS/verifier"
python3 -I -B "$TESTS/check.py" || echo "check.py exited with status $?"
if [ ! -s "$LOGS/verifier/reward.txt" ]; then
    printf 0 > "$LOGS/verifier/reward.txt"
fi
exit 0
