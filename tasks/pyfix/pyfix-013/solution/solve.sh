#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/dedupe.py" <<'PYFIX_EOF'
def dedupe(xs):
    """Remove duplicates from xs, keeping first occurrences in order."""
    seen = set()
    out = []
    for x in xs:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out
PYFIX_EOF
