def fizzbuzz(n):
    """Return 'FizzBuzz' if n is divisible by 15, 'Fizz' by 3, 'Buzz' by 5, else str(n)."""
    if n % 3 == 0:
        return 'Fizz'
    if n % 5 == 0:
        return 'Buzz'
    if n % 15 == 0:
        return 'FizzBuzz'
    return str(n)
