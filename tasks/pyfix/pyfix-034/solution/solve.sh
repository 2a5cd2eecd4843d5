#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${RSI_APP:-/app}/count_islands.py" <<'PYFIX_EOF'
def count_islands(grid):
    """Number of 4-connected groups of '#' cells in a list of equal-length strings."""
    seen = set()
    count = 0
    for r, row in enumerate(grid):
        for c, ch in enumerate(row):
            if ch == '#' and (r, c) not in seen:
                count += 1
                stack = [(r, c)]
                while stack:
                    y, x = stack.pop()
                    if (y, x) in seen:
                        continue
                    seen.add((y, x))
                    for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                        ny, nx = y + dy, x + dx
                        if 0 <= ny < len(grid) and 0 <= nx < len(grid[ny]) and grid[ny][nx] == '#':
                            stack.append((ny, nx))
    return count
PYFIX_EOF
