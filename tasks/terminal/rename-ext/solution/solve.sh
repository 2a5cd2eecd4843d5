#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
for f in images/*.jpeg; do mv "$f" "${f%.jpeg}.jpg"; done
