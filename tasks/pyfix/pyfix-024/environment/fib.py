def fib(n):
    """The n-th Fibonacci number with fib(0) = 0 and fib(1) = 1."""
    raise NotImplementedError
