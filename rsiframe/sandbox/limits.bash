# rsiframe: the confinement step of a sandboxed `bash SCRIPT` (read as its BASH_ENV, by the
# script's own bash process before the script: no shell started in front of it). The step
# (join the command's cgroups, set its rlimits) is in RSIFRAME_LIMITS; a failing step ends
# bash before the script runs. Neither variable reaches the script or its children.
unset BASH_ENV
eval "$RSIFRAME_LIMITS" || exit $?
unset RSIFRAME_LIMITS
