"""An apt source configuration as a fresh Debian 12 has it (deb822), for scripts/ci-setup.sh."""

from __future__ import annotations

MIRROR = "http://mirror.example/debian"


DEB822 = f"""Types: deb
URIs: {MIRROR}
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
"""
