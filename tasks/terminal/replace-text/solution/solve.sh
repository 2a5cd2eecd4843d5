#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
find docs -name '*.txt' -exec sed -i 's/foo/bar/g' {} +
