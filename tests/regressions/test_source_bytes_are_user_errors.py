"""Regression: an FDSL file that is not UTF-8 (a stray byte, UTF-16, a UTF-16 byte-order mark)
was an internal error (UnicodeDecodeError, exit 2) and a UTF-8 byte-order mark a syntax error;
a path containing `{` was parsed as FDSL source; an empty or comment-only file exited 0 and
printed nothing."""
import os

from fusec.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHAIN = "chain f(x: f32[4]) -> f32[4] {\n    return x * 2.0\n}\n"


def run(tmp_path, capsys, data: bytes, name: str = "p.fdsl", *flags):
    path = tmp_path / name
    path.write_bytes(data)
    rc = main([str(path), "--target", "reference", *flags])
    out, err = capsys.readouterr()
    return rc, out, err, str(path)


def test_a_byte_that_is_not_utf8_is_reported_at_its_line_and_column(tmp_path, capsys):
    rc, _, err, path = run(tmp_path, capsys, b"chain f(x: f32[4]) -> f32[4] {\n    return x \xff* 2.0\n}\n")
    assert rc == 1
    assert err.startswith(f"{path}:2:14: error: byte 0xff is not UTF-8; FDSL files are UTF-8 text")
    assert "Traceback" not in err and "internal error" not in err


def test_utf16_files_are_named_as_such(tmp_path, capsys):
    rc, _, err, path = run(tmp_path, capsys, CHAIN.encode("utf-16"))
    assert rc == 1
    assert err.startswith(f"{path}:1:1: error: this file is UTF-16 text (it starts with a UTF-16 byte-order mark)")
    rc, _, err, path = run(tmp_path, capsys, CHAIN.encode("utf-16-le"))      # no mark: NUL bytes
    assert rc == 1 and f"{path}:1:2: error: a NUL byte: is this file UTF-16 without a byte-order mark?" in err


def test_a_utf8_byte_order_mark_is_accepted(tmp_path, capsys):
    rc, out, err, _ = run(tmp_path, capsys, b"\xef\xbb\xbf" + CHAIN.encode())
    assert rc == 0, err
    assert "chain f: target reference" in out


def test_a_path_with_braces_is_a_file(tmp_path, capsys):
    rc, out, err, _ = run(tmp_path, capsys, CHAIN.encode(), "a{b}.fdsl")
    assert rc == 0, err
    assert "chain f: target reference" in out
    rc = main([str(tmp_path / "missing{.fdsl")])
    assert rc == 1 and "cannot read" in capsys.readouterr().err


def test_empty_and_comment_only_files_say_there_is_nothing_to_run(tmp_path, capsys):
    for text in (b"", b"# only a comment\n", b"const k = 1\n"):
        rc, out, err, path = run(tmp_path, capsys, text)
        assert rc == 1 and out == ""
        assert err == f"fusec: error: {path} defines no chain; there is nothing to run\n"
