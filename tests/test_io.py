"""lorabench/io.py: a published study's tables read the same whether kept plain or gzipped."""

from __future__ import annotations

import gzip

import pytest

from lorabench.io import has_json, read_json, write_json


def test_read_json_falls_back_on_the_gzipped_copy_only_where_the_file_is_missing(tmp_path):
    plain = tmp_path / "summary.json"
    with gzip.open(tmp_path / "summary.json.gz", "wt") as f:
        f.write('{"rows": [1]}')
    assert read_json(plain) == {"rows": [1]} and has_json(plain)
    write_json(plain, {"rows": [2]})  # both there: the file itself
    assert read_json(plain) == {"rows": [2]}
    with pytest.raises(FileNotFoundError, match="nothing.json"):  # neither: the error names the plain file
        read_json(tmp_path / "nothing.json")
    assert not has_json(tmp_path / "nothing.json")
