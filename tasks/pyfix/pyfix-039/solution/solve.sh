#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/title_case_ratio.py" <<'PYFIX_EOF'
def title_case_ratio(words):
    """Fraction of the words that start with an upper-case letter, rounded to 2 decimals (0.0 for no words)."""
    if not words:
        return 0.0
    return round(sum(1 for w in words if w[:1].isupper()) / len(words), 2)
PYFIX_EOF
