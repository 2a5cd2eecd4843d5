#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/balanced.py" <<'PYFIX_EOF'
def balanced(s):
    """True if every bracket (), [], {} in s is closed in the right order; other characters are ignored."""
    pairs = {')': '(', ']': '[', '}': '{'}
    stack = []
    for c in s:
        if c in '([{':
            stack.append(c)
        elif c in pairs:
            if not stack or stack.pop() != pairs[c]:
                return False
    return not stack
PYFIX_EOF
