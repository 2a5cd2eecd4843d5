#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/median.py" <<'PYFIX_EOF'
def median(xs):
    """Median of a non-empty list of numbers (mean of the middle two for even lengths)."""
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
PYFIX_EOF
