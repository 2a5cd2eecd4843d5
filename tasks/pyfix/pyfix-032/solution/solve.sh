#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/snake_to_camel.py" <<'PYFIX_EOF'
def snake_to_camel(s):
    """Convert snake_case to camelCase."""
    head, *rest = s.split('_')
    return head + ''.join(w[:1].upper() + w[1:] for w in rest)
PYFIX_EOF
