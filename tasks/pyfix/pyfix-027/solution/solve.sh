#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/anagrams.py" <<'PYFIX_EOF'
def anagrams(a, b):
    """True if a and b are anagrams of each other, ignoring case and spaces."""
    norm = lambda s: sorted(s.replace(' ', '').lower())
    return norm(a) == norm(b)
PYFIX_EOF
