#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/mean.py" <<'PYFIX_EOF'
def mean(xs):
    """Arithmetic mean of a non-empty list of numbers."""
    return sum(xs) / len(xs)
PYFIX_EOF
