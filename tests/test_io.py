"""lorabench/io.py: a published study's files read the same whether kept plain or gzipped."""

from __future__ import annotations

import gzip

import pytest

from lorabench.io import has_json, open_stored, read_json, read_jsonl, stored, write_json


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


def test_every_reader_takes_the_plain_name_or_the_gzipped_file_itself(tmp_path):
    rows = b'{"a": 1}\n\n{"a": 2}\r\n'
    with gzip.GzipFile(tmp_path / "m.jsonl.gz", "wb", mtime=0) as f:
        f.write(rows)
    plain, packed = tmp_path / "m.jsonl", tmp_path / "m.jsonl.gz"
    assert stored(plain) == packed and stored(packed) == packed and stored(str(plain)) == packed
    for name in (plain, packed, str(plain)):
        assert list(read_jsonl(name)) == [{"a": 1}, {"a": 2}]
        with open_stored(name, "rb") as f:  # the bytes as they were, line ends included
            assert f.read() == rows
    plain.write_bytes(b'{"a": 3}\n')  # both there: the plain file, as read_json
    assert stored(plain) == plain and list(read_jsonl(plain)) == [{"a": 3}]
    assert stored(tmp_path / "none.jsonl") == tmp_path / "none.jsonl"
    with pytest.raises(FileNotFoundError, match="none.jsonl"):
        list(read_jsonl(tmp_path / "none.jsonl"))
