#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/second_largest.py" <<'PYFIX_EOF'
def second_largest(xs):
    """The second largest distinct value in xs, or None if there is none."""
    vals = sorted(set(xs))
    return vals[-2] if len(vals) >= 2 else None
PYFIX_EOF
