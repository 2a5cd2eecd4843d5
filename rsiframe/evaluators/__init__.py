"""Evaluator engines: the protocol and outcome types every engine shares, the registry that
imports an engine by name only when asked, the local engine (tasks in a sandbox on this
host) and the Harbor engine (under harbor/), and the task-set checks that run tasks through
them.
"""
