#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/gcd.py" <<'PYFIX_EOF'
def gcd(a, b):
    """Greatest common divisor of two non-negative integers."""
    while b:
        a, b = b, a % b
    return a
PYFIX_EOF
