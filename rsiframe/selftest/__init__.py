"""``rsiframe selftest integrity``: crash and attack scenarios on a tiny built-in experiment.

:mod:`.experiment` builds the experiment and its ground truth, :mod:`.scenarios`
holds one function per scenario, :mod:`.runner` runs trials and reports.
"""
