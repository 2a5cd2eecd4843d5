#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/is_prime.py" <<'PYFIX_EOF'
def is_prime(n):
    """True if the integer n is prime."""
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True
PYFIX_EOF
