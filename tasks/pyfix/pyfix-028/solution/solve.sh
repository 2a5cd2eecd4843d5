#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/matrix_transpose.py" <<'PYFIX_EOF'
def matrix_transpose(m):
    """Transpose a list of equal-length rows."""
    return [list(r) for r in zip(*m)]
PYFIX_EOF
