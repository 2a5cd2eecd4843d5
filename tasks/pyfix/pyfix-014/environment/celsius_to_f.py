def celsius_to_f(c):
    """Convert degrees Celsius to Fahrenheit."""
    return c * 5 / 9 + 32
