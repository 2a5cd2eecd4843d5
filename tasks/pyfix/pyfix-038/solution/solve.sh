#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/interval_merge.py" <<'PYFIX_EOF'
def interval_merge(intervals):
    """Merge overlapping closed intervals [a, b]; return them sorted as lists."""
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out
PYFIX_EOF
