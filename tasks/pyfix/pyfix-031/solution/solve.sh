#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/pairs_summing_to.py" <<'PYFIX_EOF'
def pairs_summing_to(xs, target):
    """Sorted list of distinct pairs (a, b), a <= b, of values from xs with a + b == target (each element used once per pair)."""
    out = set()
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            if xs[i] + xs[j] == target:
                out.add((min(xs[i], xs[j]), max(xs[i], xs[j])))
    return sorted(out)
PYFIX_EOF
