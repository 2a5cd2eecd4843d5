#!/usr/bin/env bash
# `make setup`: the project's .venv, one line per step with its time, so the first quiet
# minutes of pip show that something is happening. pip's own output is kept for a failure.
#   PYTHON=python3 VENV=.venv scripts/setup-venv.sh
set -euo pipefail
python=${PYTHON:-python3}
venv=${VENV:-.venv}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
t_all=$SECONDS
step() {
    local what=$1 t0=$SECONDS
    shift
    printf 'setup: %s ...' "$what"
    if ! "$@" >"$log" 2>&1; then
        echo " failed after $((SECONDS - t0)) s:"
        cat "$log" >&2
        exit 1
    fi
    echo " $((SECONDS - t0)) s"
}
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)
step "creating $venv" "$python" -m venv "$venv"
# torch first, pinned to the CPU wheel, so the train extra's range never pulls a CUDA build
step "installing torch 2.13.0 (CPU wheel)" "${pip[@]}" 'torch==2.13.0'
step "installing rsiframe and its extras (editable; the longest step)" \
    "${pip[@]}" -e '.[dev,train,llm,agents,cluster,docker,mlflow]'
touch "$venv/.installed"
echo "setup: done in $((SECONDS - t_all)) s; the commands are in $venv/bin (source $venv/bin/activate)"
