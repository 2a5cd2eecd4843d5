#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/flatten.py" <<'PYFIX_EOF'
def flatten(items):
    """Flatten arbitrarily nested lists into one flat list."""
    out = []
    for x in items:
        if isinstance(x, list):
            out.extend(flatten(x))
        else:
            out.append(x)
    return out
PYFIX_EOF
