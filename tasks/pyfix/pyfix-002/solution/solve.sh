#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/clamp.py" <<'PYFIX_EOF'
def clamp(x, lo, hi):
    """Return x limited to the closed interval [lo, hi]."""
    return max(lo, min(x, hi))
PYFIX_EOF
