"""Helpers the tests share that are not fixtures: types, constants and builders used in
type annotations, at import time, in ``parametrize`` lists or from module-level helpers.
Nothing here is collected as a test; fixtures stay in conftest.py files."""
