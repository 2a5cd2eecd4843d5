#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
mkdir -p a/b/c a/d && : > a/d/keep
