"""``rsiframe selftest integrity``: crash and attack scenarios on a tiny built-in experiment.

:mod:`.experiment` builds the experiment and its ground truth, :mod:`.common` holds what
every scenario module shares (a trial, the judging helpers), each scenario module defines
its own scenarios (:mod:`.scenarios`, :mod:`.hostile`, :mod:`.build_scenarios`,
:mod:`.saboteur`), :mod:`.catalog` lists them all, :mod:`.runner` runs trials and reports.
"""
