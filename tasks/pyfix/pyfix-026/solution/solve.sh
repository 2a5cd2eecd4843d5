#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/run_length.py" <<'PYFIX_EOF'
def run_length(s):
    """Run-length encode s: 'aaab' -> 'a3b1'."""
    out = []
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        out.append(f'{s[i]}{j - i}')
        i = j
    return ''.join(out)
PYFIX_EOF
