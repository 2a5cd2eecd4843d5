"""rsiframe.util.digest: canonical JSON (what signatures and digests cover) and sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rsiframe.util.digest import canonical_json, sha256_bytes, sha256_file, sha256_json


def test_canonical_json_is_the_same_bytes_for_the_same_value() -> None:
    a = {"b": [1, 2.5, None], "a": {"z": "é", "y": True}}
    b = {"a": {"y": True, "z": "é"}, "b": [1, 2.5, None]}
    assert canonical_json(a) == canonical_json(b)
    assert canonical_json(a) == '{"a":{"y":true,"z":"é"},"b":[1,2.5,null]}'.encode()
    assert canonical_json([2, 1]) != canonical_json([1, 2])  # order of a list is kept


def test_the_digests_agree_with_hashlib(tmp_path: Path) -> None:
    data = b"x" * ((1 << 20) + 3)  # more than one read chunk
    path = tmp_path / "blob"
    path.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert sha256_bytes(data) == sha256_file(path) == expected
    assert sha256_json({"k": 1}) == sha256_bytes(b'{"k":1}')
