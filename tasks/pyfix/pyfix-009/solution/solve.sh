#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/word_count.py" <<'PYFIX_EOF'
def word_count(text):
    """Map each lower-cased whitespace-separated word of text to how often it occurs."""
    out = {}
    for w in text.lower().split():
        out[w] = out.get(w, 0) + 1
    return out
PYFIX_EOF
