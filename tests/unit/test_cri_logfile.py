"""CRI log file format: parsing records and reading a container's output back."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from pykubelet.cri.logfile import (
    MAX_TERMINATION_MESSAGE_LOG_BYTES,
    parse_log_line,
    read_log_lines,
    read_log_tail,
)


def test_full_line_keeps_nanosecond_timestamp_and_content() -> None:
    line = parse_log_line(b"2016-10-06T00:17:09.669794202Z stdout F log content 1\n")

    assert line.timestamp == "2016-10-06T00:17:09.669794202Z"
    assert line.stream == "stdout"
    assert not line.partial
    assert line.content == b"log content 1"
    assert line.output == b"log content 1\n"
    assert line.time == datetime(2016, 10, 6, 0, 17, 9, 669794, tzinfo=UTC)
    whole_seconds = int(datetime(2016, 10, 6, 0, 17, 9, tzinfo=UTC).timestamp())
    assert line.unix_nanos == whole_seconds * 1_000_000_000 + 669794202


def test_partial_line_is_output_without_newline() -> None:
    line = parse_log_line(b"2016-10-06T00:17:09.669794203Z stderr P first half\n")

    assert line.stream == "stderr"
    assert line.partial
    assert line.output == b"first half"


def test_content_spaces_and_empty_lines_survive() -> None:
    assert parse_log_line(b"2024-01-01T00:00:00Z stdout F  two  spaces ").content == (
        b" two  spaces ")
    assert parse_log_line(b"2024-01-01T00:00:00Z stdout F \n").output == b"\n"


def test_extra_tags_after_the_first_are_ignored() -> None:
    assert parse_log_line(b"2024-01-01T00:00:00.5+02:00 stdout P:x:y text").partial


@pytest.mark.parametrize("raw, complaint", [
    (b"", "timestamp is not found"),
    (b"2024-01-01T00:00:00Z", "timestamp is not found"),
    (b"yesterday stdout F text", "timestamp"),
    (b"2024-13-01T00:00:00Z stdout F text", "timestamp"),
    (b"2024-01-01T00:00:00Z stdin F text", "unexpected stream type"),
    (b"2024-01-01T00:00:00Z stdout", "stream type is not found"),
    (b"2024-01-01T00:00:00Z stdout F", "log tag is not found"),
    (b'{"log":"docker json","stream":"stdout"}', "timestamp"),
])
def test_malformed_lines_are_rejected_with_the_reason(raw: bytes, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_log_line(raw)


def _write_log(path: Path, *records: str) -> Path:
    path.write_bytes("".join(records).encode())
    return path


def test_tail_reassembles_partial_records_across_streams(tmp_path: Path) -> None:
    log = _write_log(
        tmp_path / "0.log",
        "2024-01-01T00:00:00.000000001Z stdout P hel\n",
        "2024-01-01T00:00:00.000000002Z stdout F lo\n",
        "2024-01-01T00:00:00.000000003Z stderr F boom\n",
    )

    assert read_log_tail(log) == b"hello\nboom\n"
    assert read_log_tail(log, streams=("stderr",)) == b"boom\n"


def test_tail_counts_records_from_the_end(tmp_path: Path) -> None:
    log = _write_log(tmp_path / "0.log", *(
        f"2024-01-01T00:00:0{i}Z stdout F line {i}\n" for i in range(5)))

    assert read_log_tail(log, max_lines=2) == b"line 3\nline 4\n"
    assert read_log_tail(log, max_lines=0) == b""
    assert read_log_tail(log, max_lines=50) == b"".join(
        f"line {i}\n".encode() for i in range(5))
    assert [r.content for r in read_log_lines(log, tail_lines=1)] == [b"line 4"]


def test_tail_keeps_the_last_bytes(tmp_path: Path) -> None:
    record = "2024-01-01T00:00:00Z stdout F " + "x" * 99 + "\n"
    log = _write_log(tmp_path / "0.log", *([record] * 30), "2024-01-01T00:00:01Z stdout F end\n")

    tail = read_log_tail(log)

    assert len(tail) == MAX_TERMINATION_MESSAGE_LOG_BYTES
    assert tail.endswith(b"x\nend\n")


def test_tail_of_a_long_file_reads_across_blocks(tmp_path: Path) -> None:
    log = _write_log(tmp_path / "0.log", *(
        f"2024-01-01T00:00:00Z stdout F {i:05d} {'y' * 60}\n" for i in range(2000)))

    lines = read_log_lines(log, tail_lines=80)

    assert len(lines) == 80
    assert lines[0].content.startswith(b"01920 ")
    assert lines[-1].content.startswith(b"01999 ")


def test_tail_includes_an_unterminated_last_record(tmp_path: Path) -> None:
    log = _write_log(tmp_path / "0.log",
                     "2024-01-01T00:00:00Z stdout F one\n",
                     "2024-01-01T00:00:01Z stdout F two\n",
                     "2024-01-01T00:00:02Z stdout P thr")

    assert read_log_tail(log, max_lines=1) == b"two\nthr"


def test_malformed_records_are_skipped_not_fatal(tmp_path: Path) -> None:
    log = _write_log(tmp_path / "0.log",
                     "2024-01-01T00:00:00Z stdout F before\n",
                     "garbage without structure\n",
                     "2024-01-01T00:00:01Z stdout F after\n")

    assert read_log_tail(log) == b"before\nafter\n"


def test_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_log_tail(tmp_path / "absent.log")
