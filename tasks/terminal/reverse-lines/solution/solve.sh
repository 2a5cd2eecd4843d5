#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
tac lines.txt > reversed.txt
