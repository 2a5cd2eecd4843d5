#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/to_binary.py" <<'PYFIX_EOF'
def to_binary(n):
    """Binary representation of an integer n >= 0 without prefix."""
    return bin(n)[2:]
PYFIX_EOF
