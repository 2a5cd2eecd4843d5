def running_sum(xs):
    """Prefix sums: out[i] = xs[0] + ... + xs[i]."""
    out, total = [], 0
    for x in xs:
        out.append(total)
        total += x
    return out
