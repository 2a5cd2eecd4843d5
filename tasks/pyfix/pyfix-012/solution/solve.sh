#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/rotate.py" <<'PYFIX_EOF'
def rotate(xs, k):
    """Rotate list xs right by k positions (k may exceed len(xs)); return a new list."""
    if not xs:
        return []
    k %= len(xs)
    return xs[-k:] + xs[:-k] if k else list(xs)
PYFIX_EOF
