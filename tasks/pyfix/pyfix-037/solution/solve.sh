#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/nth_word_frequency.py" <<'PYFIX_EOF'
def nth_word_frequency(text, n):
    """The n-th most frequent lower-cased word (1-based; ties broken alphabetically), or None."""
    counts = {}
    for w in text.lower().split():
        counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    return ranked[n - 1] if 0 < n <= len(ranked) else None
PYFIX_EOF
