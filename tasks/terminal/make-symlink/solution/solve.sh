#!/bin/bash
set -e
cd "${RSI_APP:-/app}"
ln -sfn releases/v3 latest
