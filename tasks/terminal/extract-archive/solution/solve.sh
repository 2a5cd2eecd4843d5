#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
mkdir -p out && tar -xf bundle.tar -C out
