#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
chmod +x run.sh && ./run.sh > out.txt
