#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
grep -c ERROR app.log > errors.txt
