#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/caesar.py" <<'PYFIX_EOF'
def caesar(s, k):
    """Shift each ASCII letter of s by k places in the alphabet (wrapping, case kept); other characters unchanged."""
    out = []
    for c in s:
        if 'a' <= c <= 'z':
            out.append(chr((ord(c) - 97 + k) % 26 + 97))
        elif 'A' <= c <= 'Z':
            out.append(chr((ord(c) - 65 + k) % 26 + 65))
        else:
            out.append(c)
    return ''.join(out)
PYFIX_EOF
