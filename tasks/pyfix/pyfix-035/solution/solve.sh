#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/parse_kv.py" <<'PYFIX_EOF'
def parse_kv(s):
    """Parse 'a=1;b=2' into {'a': '1', 'b': '2'}; whitespace around keys and values is stripped, empty parts skipped."""
    out = {}
    for part in s.split(';'):
        if not part.strip():
            continue
        k, _, v = part.partition('=')
        out[k.strip()] = v.strip()
    return out
PYFIX_EOF
