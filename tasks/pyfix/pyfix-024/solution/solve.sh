#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/fib.py" <<'PYFIX_EOF'
def fib(n):
    """The n-th Fibonacci number with fib(0) = 0 and fib(1) = 1."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
PYFIX_EOF
