#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
tail -n +2 sales.csv | cut -d, -f3 | paste -sd+ | bc > total.txt
