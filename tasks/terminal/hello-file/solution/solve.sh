#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
echo 'Hello, world!' > hello.txt
