#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
tr ' ' '\n' < text.txt | grep -v '^$' | sort | uniq -c | sort -rn | head -n1 | awk '{print $2}' > top.txt
