#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
awk -F' = ' '/^\[/{s=$0; next} s=="[main]" && NF==2 {print toupper($1)"="$2}' settings.ini > .env
