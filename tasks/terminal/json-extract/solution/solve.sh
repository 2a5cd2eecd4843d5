#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
python3 -c "import json; print(json.load(open('config.json'))['server']['port'])" > port.txt
