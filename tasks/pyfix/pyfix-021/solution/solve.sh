#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/reverse_words.py" <<'PYFIX_EOF'
def reverse_words(s):
    """Reverse the order of the whitespace-separated words of s, joined by single spaces."""
    return ' '.join(reversed(s.split()))
PYFIX_EOF
