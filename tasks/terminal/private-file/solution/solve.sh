#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
chmod 600 secret.txt
