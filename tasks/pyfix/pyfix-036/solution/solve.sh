#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/longest_common_prefix.py" <<'PYFIX_EOF'
def longest_common_prefix(words):
    """Longest string that is a prefix of every word in the list ('' for an empty list)."""
    if not words:
        return ''
    p = words[0]
    for w in words[1:]:
        while not w.startswith(p):
            p = p[:-1]
    return p
PYFIX_EOF
