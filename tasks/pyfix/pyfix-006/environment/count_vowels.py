def count_vowels(s):
    """Number of vowels (a, e, i, o, u; any case) in s."""
    return sum(1 for c in s if c in 'aeiou')
