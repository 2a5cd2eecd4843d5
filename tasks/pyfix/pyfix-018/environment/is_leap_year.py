def is_leap_year(y):
    """Gregorian leap year test."""
    return y % 4 == 0 and y % 100 != 0
