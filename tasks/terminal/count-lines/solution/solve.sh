#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
wc -l < data.txt | tr -d ' ' > count.txt
