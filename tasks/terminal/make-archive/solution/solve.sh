#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
tar -czf backup.tar.gz docs
