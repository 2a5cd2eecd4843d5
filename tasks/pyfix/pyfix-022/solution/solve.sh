#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/digit_sum.py" <<'PYFIX_EOF'
def digit_sum(n):
    """Sum of the decimal digits of the integer n (sign ignored)."""
    return sum(int(c) for c in str(abs(n)))
PYFIX_EOF
