# ruff: noqa: E501  (one spec per entry reads better than wrapped source strings)
"""The pyfix task specifications: one small Python function per task.

Each spec names the module file the agent edits, the function, what it must do, a
correct implementation (the reference solution), the starting code (a bug to fix, or a
stub to fill in) and hidden test cases ``(args, expected)`` compared with ``==``.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Spec(NamedTuple):
    name: str  # function name; the module is ``<name>.py``
    kind: str  # "fix" (a bug to find) or "write" (a stub to fill in)
    doc: str
    solution: str  # the whole module, correct
    start: str  # the whole module the agent starts from
    cases: list[tuple[list[Any], Any]]


def _stub(signature: str, doc: str) -> str:
    return f'{signature}\n    """{doc}"""\n    raise NotImplementedError\n'


def _fn(signature: str, doc: str, body: str) -> str:
    return f'{signature}\n    """{doc}"""\n{body}'


def fix(name: str, signature: str, doc: str, good: str, bad: str, cases: list) -> Spec:
    return Spec(name, "fix", doc, _fn(signature, doc, good), _fn(signature, doc, bad), cases)


def write(name: str, signature: str, doc: str, good: str, cases: list) -> Spec:
    return Spec(name, "write", doc, _fn(signature, doc, good), _stub(signature, doc), cases)


SPECS: list[Spec] = [
    fix(
        "mean",
        "def mean(xs):",
        "Arithmetic mean of a non-empty list of numbers.",
        "    return sum(xs) / len(xs)\n",
        "    return sum(xs) / (len(xs) - 1)\n",
        [([[1, 2, 3]], 2.0), ([[5]], 5.0), ([[1, 2]], 1.5)],
    ),
    fix(
        "clamp",
        "def clamp(x, lo, hi):",
        "Return x limited to the closed interval [lo, hi].",
        "    return max(lo, min(x, hi))\n",
        "    return min(lo, max(x, hi))\n",
        [([5, 0, 10], 5), ([-3, 0, 10], 0), ([12, 0, 10], 10), ([0, 0, 0], 0)],
    ),
    fix(
        "is_palindrome",
        "def is_palindrome(s):",
        "True if s reads the same backwards, ignoring case and non-alphanumeric characters.",
        "    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n",
        "    t = [c for c in s if c.isalnum()]\n    return t == t[::-1]\n",
        [
            (["Racecar"], True),
            (["A man, a plan, a canal: Panama"], True),
            (["abc"], False),
            ([""], True),
        ],
    ),
    fix(
        "fizzbuzz",
        "def fizzbuzz(n):",
        "Return 'FizzBuzz' if n is divisible by 15, 'Fizz' by 3, 'Buzz' by 5, else str(n).",
        "    if n % 15 == 0:\n        return 'FizzBuzz'\n    if n % 3 == 0:\n        return 'Fizz'\n"
        "    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)\n",
        "    if n % 3 == 0:\n        return 'Fizz'\n    if n % 5 == 0:\n        return 'Buzz'\n"
        "    if n % 15 == 0:\n        return 'FizzBuzz'\n    return str(n)\n",
        [([3], "Fizz"), ([10], "Buzz"), ([30], "FizzBuzz"), ([7], "7")],
    ),
    fix(
        "factorial",
        "def factorial(n):",
        "n! for an integer n >= 0 (0! is 1).",
        "    out = 1\n    for i in range(2, n + 1):\n        out *= i\n    return out\n",
        "    out = 1\n    for i in range(2, n):\n        out *= i\n    return out\n",
        [([0], 1), ([1], 1), ([5], 120), ([10], 3628800)],
    ),
    fix(
        "count_vowels",
        "def count_vowels(s):",
        "Number of vowels (a, e, i, o, u; any case) in s.",
        "    return sum(1 for c in s.lower() if c in 'aeiou')\n",
        "    return sum(1 for c in s if c in 'aeiou')\n",
        [(["Hello"], 2), (["AEIOU"], 5), (["xyz"], 0)],
    ),
    fix(
        "second_largest",
        "def second_largest(xs):",
        "The second largest distinct value in xs, or None if there is none.",
        "    vals = sorted(set(xs))\n    return vals[-2] if len(vals) >= 2 else None\n",
        "    vals = sorted(xs)\n    return vals[-2] if len(vals) >= 2 else None\n",
        [([[1, 3, 2]], 2), ([[5, 5, 4]], 4), ([[7, 7]], None), ([[]], None)],
    ),
    fix(
        "binary_search",
        "def binary_search(xs, target):",
        "Index of target in the sorted list xs, or -1 if absent.",
        "    lo, hi = 0, len(xs) - 1\n    while lo <= hi:\n        mid = (lo + hi) // 2\n"
        "        if xs[mid] == target:\n            return mid\n        if xs[mid] < target:\n"
        "            lo = mid + 1\n        else:\n            hi = mid - 1\n    return -1\n",
        "    lo, hi = 0, len(xs) - 1\n    while lo < hi:\n        mid = (lo + hi) // 2\n"
        "        if xs[mid] == target:\n            return mid\n        if xs[mid] < target:\n"
        "            lo = mid + 1\n        else:\n            hi = mid - 1\n    return -1\n",
        [([[1, 3, 5, 7], 7], 3), ([[1, 3, 5, 7], 1], 0), ([[1, 3, 5], 4], -1), ([[2], 2], 0)],
    ),
    fix(
        "word_count",
        "def word_count(text):",
        "Map each lower-cased whitespace-separated word of text to how often it occurs.",
        "    out = {}\n    for w in text.lower().split():\n        out[w] = out.get(w, 0) + 1\n"
        "    return out\n",
        "    out = {}\n    for w in text.lower().split(' '):\n        out[w] = out.get(w, 0) + 1\n"
        "    return out\n",
        [(["a b a"], {"a": 2, "b": 1}), (["The  the"], {"the": 2}), ([""], {})],
    ),
    fix(
        "flatten",
        "def flatten(items):",
        "Flatten arbitrarily nested lists into one flat list.",
        "    out = []\n    for x in items:\n        if isinstance(x, list):\n"
        "            out.extend(flatten(x))\n        else:\n            out.append(x)\n    return out\n",
        "    out = []\n    for x in items:\n        if isinstance(x, list):\n"
        "            out.extend(x)\n        else:\n            out.append(x)\n    return out\n",
        [([[1, [2, [3, 4]], 5]], [1, 2, 3, 4, 5]), ([[]], []), ([[[[]]]], [])],
    ),
    fix(
        "gcd",
        "def gcd(a, b):",
        "Greatest common divisor of two non-negative integers.",
        "    while b:\n        a, b = b, a % b\n    return a\n",
        "    while b:\n        a, b = a % b, b\n    return a\n",
        [([12, 18], 6), ([7, 3], 1), ([0, 5], 5), ([9, 0], 9)],
    ),
    fix(
        "rotate",
        "def rotate(xs, k):",
        "Rotate list xs right by k positions (k may exceed len(xs)); return a new list.",
        "    if not xs:\n        return []\n    k %= len(xs)\n    return xs[-k:] + xs[:-k] if k else list(xs)\n",
        "    if not xs:\n        return []\n    return xs[-k:] + xs[:-k]\n",
        [
            ([[1, 2, 3, 4], 1], [4, 1, 2, 3]),
            ([[1, 2, 3], 4], [3, 1, 2]),
            ([[1, 2], 0], [1, 2]),
            ([[], 3], []),
        ],
    ),
    fix(
        "dedupe",
        "def dedupe(xs):",
        "Remove duplicates from xs, keeping first occurrences in order.",
        "    seen = set()\n    out = []\n    for x in xs:\n        if x not in seen:\n"
        "            seen.add(x)\n            out.append(x)\n    return out\n",
        "    return list(set(xs))\n",
        [([[3, 1, 3, 2, 1]], [3, 1, 2]), ([[]], []), ([["b", "a", "b"]], ["b", "a"])],
    ),
    fix(
        "celsius_to_f",
        "def celsius_to_f(c):",
        "Convert degrees Celsius to Fahrenheit.",
        "    return c * 9 / 5 + 32\n",
        "    return c * 5 / 9 + 32\n",
        [([0], 32.0), ([100], 212.0), ([-40], -40.0)],
    ),
    fix(
        "chunk",
        "def chunk(xs, n):",
        "Split xs into consecutive lists of length n (the last may be shorter).",
        "    return [xs[i:i + n] for i in range(0, len(xs), n)]\n",
        "    return [xs[i:i + n] for i in range(0, len(xs) - n, n)]\n",
        [([[1, 2, 3, 4, 5], 2], [[1, 2], [3, 4], [5]]), ([[1, 2], 2], [[1, 2]]), ([[], 3], [])],
    ),
    fix(
        "capitalize_words",
        "def capitalize_words(s):",
        "Upper-case the first letter of each space-separated word, keeping the spaces as they are.",
        "    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))\n",
        "    return ' '.join(w[:1].upper() + w[1:] for w in s.split())\n",
        [(["hello world"], "Hello World"), (["a  b"], "A  B"), ([""], "")],
    ),
    fix(
        "running_sum",
        "def running_sum(xs):",
        "Prefix sums: out[i] = xs[0] + ... + xs[i].",
        "    out, total = [], 0\n    for x in xs:\n        total += x\n        out.append(total)\n"
        "    return out\n",
        "    out, total = [], 0\n    for x in xs:\n        out.append(total)\n        total += x\n"
        "    return out\n",
        [([[1, 2, 3]], [1, 3, 6]), ([[]], []), ([[-1, 1]], [-1, 0])],
    ),
    fix(
        "is_leap_year",
        "def is_leap_year(y):",
        "Gregorian leap year test.",
        "    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)\n",
        "    return y % 4 == 0 and y % 100 != 0\n",
        [([2024], True), ([1900], False), ([2000], True), ([2023], False)],
    ),
    fix(
        "merge_sorted",
        "def merge_sorted(a, b):",
        "Merge two sorted lists into one sorted list.",
        "    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
        "            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n",
        "    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
        "            out.append(b[j])\n            j += 1\n    return out + a[i:]\n",
        [([[1, 4], [2, 3, 5]], [1, 2, 3, 4, 5]), ([[], [1]], [1]), ([[1], []], [1])],
    ),
    fix(
        "roman_to_int",
        "def roman_to_int(s):",
        "Value of a Roman numeral (I V X L C D M, subtractive form).",
        "    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n    total = 0\n"
        "    for i, c in enumerate(s):\n        if i + 1 < len(s) and v[c] < v[s[i + 1]]:\n"
        "            total -= v[c]\n        else:\n            total += v[c]\n    return total\n",
        "    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "    return sum(v[c] for c in s)\n",
        [(["III"], 3), (["IV"], 4), (["MCMXCIV"], 1994), (["LVIII"], 58)],
    ),
    write(
        "reverse_words",
        "def reverse_words(s):",
        "Reverse the order of the whitespace-separated words of s, joined by single spaces.",
        "    return ' '.join(reversed(s.split()))\n",
        [(["a b c"], "c b a"), (["  hi  there "], "there hi"), ([""], "")],
    ),
    write(
        "digit_sum",
        "def digit_sum(n):",
        "Sum of the decimal digits of the integer n (sign ignored).",
        "    return sum(int(c) for c in str(abs(n)))\n",
        [([123], 6), ([-45], 9), ([0], 0)],
    ),
    write(
        "is_prime",
        "def is_prime(n):",
        "True if the integer n is prime.",
        "    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n"
        "        if n % i == 0:\n            return False\n        i += 1\n    return True\n",
        [([2], True), ([1], False), ([97], True), ([91], False), ([-7], False)],
    ),
    write(
        "fib",
        "def fib(n):",
        "The n-th Fibonacci number with fib(0) = 0 and fib(1) = 1.",
        "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        [([0], 0), ([1], 1), ([10], 55), ([30], 832040)],
    ),
    write(
        "caesar",
        "def caesar(s, k):",
        "Shift each ASCII letter of s by k places in the alphabet (wrapping, case kept); other characters unchanged.",
        "    out = []\n    for c in s:\n        if 'a' <= c <= 'z':\n"
        "            out.append(chr((ord(c) - 97 + k) % 26 + 97))\n        elif 'A' <= c <= 'Z':\n"
        "            out.append(chr((ord(c) - 65 + k) % 26 + 65))\n        else:\n"
        "            out.append(c)\n    return ''.join(out)\n",
        [(["abc", 1], "bcd"), (["xyz", 3], "abc"), (["Hi!", -1], "Gh!")],
    ),
    write(
        "run_length",
        "def run_length(s):",
        "Run-length encode s: 'aaab' -> 'a3b1'.",
        "    out = []\n    i = 0\n    while i < len(s):\n        j = i\n"
        "        while j < len(s) and s[j] == s[i]:\n            j += 1\n"
        "        out.append(f'{s[i]}{j - i}')\n        i = j\n    return ''.join(out)\n",
        [(["aaab"], "a3b1"), ([""], ""), (["abc"], "a1b1c1")],
    ),
    write(
        "anagrams",
        "def anagrams(a, b):",
        "True if a and b are anagrams of each other, ignoring case and spaces.",
        "    norm = lambda s: sorted(s.replace(' ', '').lower())\n    return norm(a) == norm(b)\n",
        [
            (["Listen", "Silent"], True),
            (["a gentleman", "elegant man"], True),
            (["ab", "abc"], False),
        ],
    ),
    write(
        "matrix_transpose",
        "def matrix_transpose(m):",
        "Transpose a list of equal-length rows.",
        "    return [list(r) for r in zip(*m)]\n",
        [([[[1, 2], [3, 4]]], [[1, 3], [2, 4]]), ([[[1, 2, 3]]], [[1], [2], [3]]), ([[]], [])],
    ),
    write(
        "balanced",
        "def balanced(s):",
        "True if every bracket (), [], {} in s is closed in the right order; other characters are ignored.",
        "    pairs = {')': '(', ']': '[', '}': '{'}\n    stack = []\n    for c in s:\n"
        "        if c in '([{':\n            stack.append(c)\n        elif c in pairs:\n"
        "            if not stack or stack.pop() != pairs[c]:\n                return False\n"
        "    return not stack\n",
        [(["([]{})"], True), (["(]"], False), (["(("], False), (["a(b)c"], True)],
    ),
    write(
        "to_binary",
        "def to_binary(n):",
        "Binary representation of an integer n >= 0 without prefix.",
        "    return bin(n)[2:]\n",
        [([0], "0"), ([5], "101"), ([255], "11111111")],
    ),
    write(
        "pairs_summing_to",
        "def pairs_summing_to(xs, target):",
        "Sorted list of distinct pairs (a, b), a <= b, of values from xs with a + b == target (each element used once per pair).",
        "    out = set()\n    for i in range(len(xs)):\n        for j in range(i + 1, len(xs)):\n"
        "            if xs[i] + xs[j] == target:\n"
        "                out.add((min(xs[i], xs[j]), max(xs[i], xs[j])))\n    return sorted(out)\n",
        [([[1, 2, 3, 4], 5], [(1, 4), (2, 3)]), ([[2, 2], 4], [(2, 2)]), ([[2], 4], [])],
    ),
    write(
        "snake_to_camel",
        "def snake_to_camel(s):",
        "Convert snake_case to camelCase.",
        "    head, *rest = s.split('_')\n    return head + ''.join(w[:1].upper() + w[1:] for w in rest)\n",
        [(["hello_world"], "helloWorld"), (["a_b_c"], "aBC"), (["plain"], "plain")],
    ),
    write(
        "median",
        "def median(xs):",
        "Median of a non-empty list of numbers (mean of the middle two for even lengths).",
        "    s = sorted(xs)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n",
        [([[3, 1, 2]], 2), ([[4, 1, 3, 2]], 2.5), ([[7]], 7)],
    ),
    write(
        "count_islands",
        "def count_islands(grid):",
        "Number of 4-connected groups of '#' cells in a list of equal-length strings.",
        "    seen = set()\n    count = 0\n    for r, row in enumerate(grid):\n"
        "        for c, ch in enumerate(row):\n            if ch == '#' and (r, c) not in seen:\n"
        "                count += 1\n                stack = [(r, c)]\n                while stack:\n"
        "                    y, x = stack.pop()\n                    if (y, x) in seen:\n"
        "                        continue\n                    seen.add((y, x))\n"
        "                    for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):\n"
        "                        ny, nx = y + dy, x + dx\n"
        "                        if 0 <= ny < len(grid) and 0 <= nx < len(grid[ny]) and grid[ny][nx] == '#':\n"
        "                            stack.append((ny, nx))\n    return count\n",
        [([["#.#", "#..", "..#"]], 3), ([["..."]], 0), ([["##", "##"]], 1)],
    ),
    write(
        "parse_kv",
        "def parse_kv(s):",
        "Parse 'a=1;b=2' into {'a': '1', 'b': '2'}; whitespace around keys and values is stripped, empty parts skipped.",
        "    out = {}\n    for part in s.split(';'):\n        if not part.strip():\n            continue\n"
        "        k, _, v = part.partition('=')\n        out[k.strip()] = v.strip()\n    return out\n",
        [(["a=1;b=2"], {"a": "1", "b": "2"}), ([" x = y ;; "], {"x": "y"}), ([""], {})],
    ),
    write(
        "longest_common_prefix",
        "def longest_common_prefix(words):",
        "Longest string that is a prefix of every word in the list ('' for an empty list).",
        "    if not words:\n        return ''\n    p = words[0]\n    for w in words[1:]:\n"
        "        while not w.startswith(p):\n            p = p[:-1]\n    return p\n",
        [([["flower", "flow", "flight"]], "fl"), ([["a"]], "a"), ([[]], ""), ([["ab", "cd"]], "")],
    ),
    write(
        "nth_word_frequency",
        "def nth_word_frequency(text, n):",
        "The n-th most frequent lower-cased word (1-based; ties broken alphabetically), or None.",
        "    counts = {}\n    for w in text.lower().split():\n        counts[w] = counts.get(w, 0) + 1\n"
        "    ranked = sorted(counts, key=lambda w: (-counts[w], w))\n"
        "    return ranked[n - 1] if 0 < n <= len(ranked) else None\n",
        [(["b a b c a b", 1], "b"), (["b a b c a b", 2], "a"), (["x", 2], None)],
    ),
    write(
        "interval_merge",
        "def interval_merge(intervals):",
        "Merge overlapping closed intervals [a, b]; return them sorted as lists.",
        "    out = []\n    for a, b in sorted(intervals):\n        if out and a <= out[-1][1]:\n"
        "            out[-1][1] = max(out[-1][1], b)\n        else:\n            out.append([a, b])\n"
        "    return out\n",
        [
            ([[[1, 3], [2, 6], [8, 10]]], [[1, 6], [8, 10]]),
            ([[[1, 4], [4, 5]]], [[1, 5]]),
            ([[]], []),
        ],
    ),
    write(
        "title_case_ratio",
        "def title_case_ratio(words):",
        "Fraction of the words that start with an upper-case letter, rounded to 2 decimals (0.0 for no words).",
        "    if not words:\n        return 0.0\n"
        "    return round(sum(1 for w in words if w[:1].isupper()) / len(words), 2)\n",
        [([["A", "b", "C"]], 0.67), ([[]], 0.0), ([["x"]], 0.0)],
    ),
    write(
        "histogram",
        "def histogram(xs, width):",
        "Count values of xs into bins [0, width), [width, 2*width), ...; return the counts up to the last non-empty bin.",
        "    counts = []\n    for x in xs:\n        i = int(x // width)\n"
        "        counts.extend([0] * (i + 1 - len(counts)))\n        counts[i] += 1\n    return counts\n",
        [([[1, 2, 11, 35], 10], [2, 1, 0, 1]), ([[], 5], []), ([[0, 4.9, 5], 5], [2, 1])],
    ),
]
