#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/count_vowels.py" <<'PYFIX_EOF'
def count_vowels(s):
    """Number of vowels (a, e, i, o, u; any case) in s."""
    return sum(1 for c in s.lower() if c in 'aeiou')
PYFIX_EOF
