"""Where host folders appear inside a command or operator sandbox: one home for the paths.

::

    /rsi/
      work/   the work folder: writable for mutate (a `script` command, a `candidate:`
              mutator), read-only otherwise; the command's cwd
      in/     the request's input files, read-only (lessons, analysis, the JSON request)
      lib/    rsiframe's operator runner and public API, staged read-only (`candidate:` only)

Used by :mod:`rsiframe.shell` (researcher commands) and :mod:`rsiframe.slots.untrusted`
(``candidate:`` operators). The evaluator's trial mounts (``/app``, ``/tests``,
``/logs``) follow Harbor's layout and live with the evaluator.
"""

from __future__ import annotations

WORK_INSIDE = "/rsi/work"
INPUTS_INSIDE = "/rsi/in"
LIB_INSIDE = "/rsi/lib"
