#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/is_palindrome.py" <<'PYFIX_EOF'
def is_palindrome(s):
    """True if s reads the same backwards, ignoring case and non-alphanumeric characters."""
    t = [c.lower() for c in s if c.isalnum()]
    return t == t[::-1]
PYFIX_EOF
