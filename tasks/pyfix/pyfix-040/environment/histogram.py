def histogram(xs, width):
    """Count values of xs into bins [0, width), [width, 2*width), ...; return the counts up to the last non-empty bin."""
    raise NotImplementedError
