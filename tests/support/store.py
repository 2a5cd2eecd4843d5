"""An in-memory artifact store (what the run's content-addressed ``put`` returns)."""

from __future__ import annotations


class Store:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        key = f"sha256:{len(self.blobs)}"
        self.blobs[key] = data
        return key
