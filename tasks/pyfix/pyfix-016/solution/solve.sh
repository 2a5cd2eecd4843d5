#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/capitalize_words.py" <<'PYFIX_EOF'
def capitalize_words(s):
    """Upper-case the first letter of each space-separated word, keeping the spaces as they are."""
    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))
PYFIX_EOF
