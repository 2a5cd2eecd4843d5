#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/chunk.py" <<'PYFIX_EOF'
def chunk(xs, n):
    """Split xs into consecutive lists of length n (the last may be shorter)."""
    return [xs[i:i + n] for i in range(0, len(xs), n)]
PYFIX_EOF
