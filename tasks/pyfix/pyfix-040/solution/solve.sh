#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/histogram.py" <<'PYFIX_EOF'
def histogram(xs, width):
    """Count values of xs into bins [0, width), [width, 2*width), ...; return the counts up to the last non-empty bin."""
    counts = []
    for x in xs:
        i = int(x // width)
        counts.extend([0] * (i + 1 - len(counts)))
        counts[i] += 1
    return counts
PYFIX_EOF
