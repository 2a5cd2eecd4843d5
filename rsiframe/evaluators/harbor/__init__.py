"""The ``harbor`` evaluator engine: Harbor runs a split's tasks out of process, from its own
Python 3.12 environment (venv.py), with rsiframe's plug-ins (plugins/, standard library and
Harbor only) staged into it; preflight.py checks it before a run folder exists.
"""
