#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/is_leap_year.py" <<'PYFIX_EOF'
def is_leap_year(y):
    """Gregorian leap year test."""
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
PYFIX_EOF
