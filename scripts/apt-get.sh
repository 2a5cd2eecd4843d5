#!/usr/bin/env bash
# apt-get that waits for apt's locks instead of aborting (bounded; one line while it waits).
# Unattended upgrades hold the locks for minutes on a fresh machine, and `apt-get update`
# ignores DPkg::Lock::Timeout for the lists lock, so a lock error is retried here.
#   scripts/apt-get.sh update -qq
#   scripts/apt-get.sh install -y -qq bubblewrap
# RSIFRAME_APT_LOCK_TIMEOUT (s, default 120) bounds the wait; RSIFRAME_APT_GET names a
# stand-in apt-get (tests).
set -uo pipefail
wait_s=${RSIFRAME_APT_LOCK_TIMEOUT:-120}
apt=${RSIFRAME_APT_GET:-apt-get}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
t0=$SECONDS
said=0
while :; do
    DEBIAN_FRONTEND=noninteractive "$apt" -o DPkg::Lock::Timeout="$wait_s" "$@" 2>"$err"
    rc=$?
    if [ "$rc" -ne 0 ] && grep -qE 'Could not get lock|Unable to (acquire|lock)' "$err" \
        && [ $((SECONDS - t0)) -lt "$wait_s" ]; then
        if [ "$said" = 0 ]; then
            holder=$(grep -oE 'held by process [0-9]+( \([^)]*\))?' "$err" | head -n 1)
            echo "apt: waiting for the apt lock${holder:+ ($holder)}, up to ${wait_s} s" >&2
            said=1
        fi
        sleep 2
        continue
    fi
    cat "$err" >&2
    exit "$rc"
done
