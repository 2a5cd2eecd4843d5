#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
awk -F, 'NR>1 {s+=$3} END {print s}' sales.csv > total.txt
