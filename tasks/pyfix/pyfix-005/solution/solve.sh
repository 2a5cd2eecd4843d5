#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/factorial.py" <<'PYFIX_EOF'
def factorial(n):
    """n! for an integer n >= 0 (0! is 1)."""
    out = 1
    for i in range(2, n + 1):
        out *= i
    return out
PYFIX_EOF
