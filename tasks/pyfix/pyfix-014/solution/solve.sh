#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/celsius_to_f.py" <<'PYFIX_EOF'
def celsius_to_f(c):
    """Convert degrees Celsius to Fahrenheit."""
    return c * 9 / 5 + 32
PYFIX_EOF
