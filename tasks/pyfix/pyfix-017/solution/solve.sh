#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/running_sum.py" <<'PYFIX_EOF'
def running_sum(xs):
    """Prefix sums: out[i] = xs[0] + ... + xs[i]."""
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
    return out
PYFIX_EOF
