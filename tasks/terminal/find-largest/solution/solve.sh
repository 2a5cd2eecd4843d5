#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
ls -S files | head -n1 > largest.txt
