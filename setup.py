"""Package discovery for the wheel: everything else is in pyproject.toml.

The top-level folders DESIGN.md names ship inside the ``rsiframe`` namespace, so
``import rsiframe`` is the only new top-level name: ``operators/`` installs as
``rsiframe.operators`` and ``viewer/`` as ``rsiframe.viewer``. Every package under
each folder is found (``find_packages``), so a new subpackage ships without a list
to keep by hand; ``tests/project/test_packaging.py`` checks a built wheel.
"""

from setuptools import find_packages, setup

FOLDERS = {"rsiframe": "rsiframe", "rsiframe.operators": "operators", "rsiframe.viewer": "viewer"}

packages = [
    f"{name}.{sub}" if sub else name
    for name, folder in FOLDERS.items()
    for sub in ["", *find_packages(folder)]
]
setup(packages=packages, package_dir=FOLDERS)
