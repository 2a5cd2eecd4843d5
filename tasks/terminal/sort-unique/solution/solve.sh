#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
sort -u words.txt > sorted.txt
