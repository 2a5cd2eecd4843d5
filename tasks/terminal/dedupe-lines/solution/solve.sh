#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
awk '!seen[$0]++' list.txt > unique.txt
