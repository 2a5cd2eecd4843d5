#!/bin/bash
need=$(cat "${RSI_TESTS:-/tests}/need.txt")
got=$(cat "${RSI_APP:-/app}/answer.txt" 2>/dev/null || echo -1)
if [ "$got" -ge "$need" ] 2>/dev/null; then r=1; else r=0; fi
echo $r > "${RSI_LOGS:-/logs}/verifier/reward.txt"
