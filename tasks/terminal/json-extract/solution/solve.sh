#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
jq -r .server.port config.json > port.txt
