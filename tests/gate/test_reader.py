"""Reading: line splitting, offsets, shards on line boundaries, compression, long lines."""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import hashlib
import io
import lzma
import random
import re
import tracemalloc
import zipfile
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.gate import reader
from pipeline.gate.reader import (
    DecompressionLimitError,
    InputError,
    InputFile,
    Shard,
    detect_compression,
    fetch_lines,
    plan_shards,
    read_batches,
)


def _input(path: Path) -> InputFile:
    return InputFile(0, str(path), str(path), path.stat().st_size, detect_compression(path))


def _lines(
    shards: list[Shard], max_line: int = 1 << 20, batch: int = 3
) -> list[tuple[int, int, bytes | tuple[int, str]]]:
    out = []
    base = 0
    for shard in shards:
        count = 0
        for b in read_batches(shard, max_line, batch):
            for i, line in enumerate(b.lines):
                value = b.oversized.get(i, line)
                out.append((base + b.first_line + i, b.offsets[i], value))
                count += 1
        base += count
    return out


def _expected(data: bytes) -> list[tuple[int, int, bytes]]:
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    out, offset = [], 0
    for n, part in enumerate(parts, 1):
        out.append((n, offset, part))
        offset += len(part) + 1
    return out


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=30).map(
        b"\n".join
    )
    | st.binary(max_size=300),
    trailing=st.booleans(),
    shard_bytes=st.integers(1, 64),
)
def test_shards_cover_every_line_exactly_once(
    tmp_path: Path, data: bytes, trailing: bool, shard_bytes: int
) -> None:
    if trailing:
        data += b"\n"
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    # read as plain whatever the bytes (random bytes may start with a compression magic)
    plain = InputFile(0, str(path), str(path), len(data), "none")
    shards = plan_shards([plain], shard_bytes)
    assert [s.start for s in shards] == sorted({s.start for s in shards})
    assert _lines(shards) == _expected(data)


def test_shards_are_the_fewest_of_at_most_shard_bytes_and_even(tmp_path: Path) -> None:
    line = b'{"n":"' + b"x" * 91 + b'"}\n'  # 100 bytes
    path = tmp_path / "in.jsonl"
    path.write_bytes(line * 745)  # 74,500 bytes: 7 shards of 10,000 would leave 4,500
    shards = plan_shards([_input(path)], 10_000)
    sizes = [s.end - s.start for s in shards if s.end is not None]
    assert len(sizes) == 8
    assert max(sizes) - min(sizes) <= len(line)
    assert sum(sizes) == 74_500


def test_a_long_line_does_not_leave_one_line_shards_behind_it(tmp_path: Path) -> None:
    small = b'{"n":"' + b"x" * 91 + b'"}\n'  # 100 bytes
    path = tmp_path / "in.jsonl"
    path.write_bytes(small * 50 + b'{"n":"' + b"y" * 24_991 + b'"}\n' + small * 200)
    sizes = [s.end - s.start for s in plan_shards([_input(path)], 10_000) if s.end]
    assert sizes == [30_000, 10_000, 10_000]


def test_blank_lines_crlf_and_no_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a":1}\r\n\n\n{"b":2}')
    assert _lines(plan_shards([_input(path)], 4096)) == [
        (1, 0, b'{"a":1}\r'),
        (2, 9, b""),
        (3, 10, b""),
        (4, 11, b'{"b":2}'),
    ]


def test_empty_file_has_no_lines(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert plan_shards([_input(path)], 4096) == []


@pytest.mark.parametrize("compress", ["gzip", "zstd"])
def test_compressed_inputs_are_one_shard_with_decompressed_offsets(
    tmp_path: Path, compress: str
) -> None:
    data = b"".join(b'{"n":%d}\n' % i for i in range(1000))
    path = tmp_path / ("in.jsonl.gz" if compress == "gzip" else "in.jsonl.zst")
    if compress == "gzip":
        path.write_bytes(gzip.compress(data))
    else:
        # two frames: readers must continue across frame boundaries
        c = zstandard.ZstdCompressor()
        path.write_bytes(c.compress(data[:5000]) + c.compress(data[5000:]))
    source = _input(path)
    assert source.compression == compress
    shards = plan_shards([source], 64)
    assert len(shards) == 1
    assert _lines(shards, batch=100) == _expected(data)
    assert fetch_lines(shards[0], [0, 8], 100) == {0: b'{"n":0}', 8: b'{"n":1}'}


def test_over_long_lines_are_hashed_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", 7)  # lines span many reads
    long_line = b"x" * 50
    data = b"ok\n" + long_line + b"\nend\n" + long_line
    path = tmp_path / "long.jsonl"
    path.write_bytes(data)
    digest = hashlib.sha256(long_line).hexdigest()
    assert _lines(plan_shards([_input(path)], 4096), max_line=10) == [
        (1, 0, b"ok"),
        (2, 3, (50, digest)),
        (3, 54, b"end"),
        (4, 58, (50, digest)),
    ]
    assert fetch_lines(Shard(0, _input(path)), [3, 54], 10) == {3: None, 54: b"end"}


def _compress(data: bytes, path: Path) -> Path:
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    else:  # two frames: the spill continues across frame boundaries
        c = zstandard.ZstdCompressor()
        path.write_bytes(c.compress(data[: len(data) // 2]) + c.compress(data[len(data) // 2 :]))
    return path


def _reference_cuts(data: bytes, shard_bytes: int) -> list[tuple[int, int]]:
    """The pieces the spill rule defines: each ends after the first "\\n" at or after
    its start + shard_bytes - 1, the last at the end of the data."""
    pieces, start = [], 0
    while start < len(data):
        cut = data.find(b"\n", start + shard_bytes - 1)
        end = len(data) if cut < 0 else cut + 1
        pieces.append((start, end))
        start = end
    return pieces


@pytest.mark.slow
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.lists(
        st.binary(max_size=30).filter(lambda b: b"\n" not in b) | st.just(b"y" * 90),
        max_size=30,
    ).map(b"\n".join),
    trailing=st.booleans(),
    shard_bytes=st.integers(1, 80),
    chunk_bytes=st.integers(1, 16),
    suffix=st.sampled_from([".jsonl.gz", ".jsonl.zst"]),
)
def test_spilled_compressed_shards_read_like_the_plain_file(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    data: bytes,
    trailing: bool,
    shard_bytes: int,
    chunk_bytes: int,
    suffix: str,
) -> None:
    """A compressed input cut into spill files (read in tiny pieces, so lines and cuts
    span reads) gives the lines, offsets, line numbers and over-long-line digests of its
    decompressed bytes; each piece is a file of exactly its bytes, cut where the rule
    says; every line can be fetched back."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk_bytes)
    if trailing:
        data += b"\n"
    spill = tmp_path / "spill"
    for old in spill.glob("*"):
        old.unlink()
    source = _input(_compress(data, tmp_path / f"in{suffix}"))
    shards = plan_shards([source], shard_bytes, spill)
    assert [(s.start, s.end) for s in shards] == _reference_cuts(data, shard_bytes)
    assert [s.index for s in shards] == list(range(len(shards)))
    assert sorted(p.name for p in spill.iterdir()) == sorted(
        Path(s.spill or "").name for s in shards
    )
    for shard in shards:
        assert Path(shard.spill or "").read_bytes() == data[shard.start : shard.end]
    expected = [
        (n, offset, line if len(line) <= 50 else (len(line), hashlib.sha256(line).hexdigest()))
        for n, offset, line in _expected(data)
    ]
    assert _lines(shards, max_line=50) == expected
    for shard in shards:
        offsets = [offset for _, offset, _ in _lines([shard], max_line=50)]
        fetched = fetch_lines(shard, offsets, 50)
        assert fetched == {
            o: (v if isinstance(v, bytes) else None) for _, o, v in expected if o in offsets
        }


def test_a_truncated_zstd_stream_is_an_input_error(tmp_path: Path) -> None:
    """zstandard's stream reader returns a truncated stream's start as if it were whole."""
    whole = zstandard.ZstdCompressor().compress(b'{"n":1}\n' * 10_000)
    path = tmp_path / "cut.jsonl.zst"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match="corrupt zstd stream"):
        plan_shards([_input(path)], 4096, tmp_path / "spill")
    with pytest.raises(InputError, match="corrupt zstd stream"):
        _lines(plan_shards([_input(path)], 4096))


def test_fetch_lines_reads_a_spilled_shard(tmp_path: Path) -> None:
    data = b"".join(b'{"n":%d}\n' % i for i in range(1000))
    source = _input(_compress(data, tmp_path / "in.jsonl.zst"))
    shards = plan_shards([source], 1000, tmp_path / "spill")
    assert len(shards) > 5
    shard = shards[3]
    assert shard.spill is not None
    first = _lines([shard])[0][1]
    assert fetch_lines(shard, [first], 100) == {first: data[first : data.index(b"\n", first)]}


def test_expected_bytes_are_the_lines_a_shard_holds(tmp_path: Path) -> None:
    """Exact for plain and spilled shards (progress totals and the largest-first order);
    a whole compressed stream is estimated at 4x its file, since it is not read yet."""
    data = b"".join(b'{"n":%d}\n' % i for i in range(1000))
    plain = tmp_path / "in.jsonl"
    plain.write_bytes(data)
    packed = _compress(data, tmp_path / "in.jsonl.zst")
    for shards in (
        plan_shards([_input(plain)], 1000),
        plan_shards([_input(packed)], 1000, tmp_path / "spill"),
    ):
        assert sum(s.expected_bytes for s in shards) == len(data)
    [whole] = plan_shards([_input(packed)], 1000)
    assert whole.expected_bytes == 4 * packed.stat().st_size


def test_a_corrupt_stream_fails_the_plan(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a":1}\n' * 100)[:-12] + b"garbage-tail")
    with pytest.raises(InputError, match="corrupt gzip"):
        plan_shards([_input(path)], 64, tmp_path / "spill")


def test_batches_have_exactly_batch_lines(tmp_path: Path) -> None:
    path = tmp_path / "n.jsonl"
    path.write_bytes(b"".join(b"%d\n" % i for i in range(10)))
    sizes = [len(b) for b in read_batches(Shard(0, _input(path)), 100, 4)]
    assert sizes == [4, 4, 2]


def test_compression_is_read_from_the_bytes_and_checked(tmp_path: Path) -> None:
    plain = tmp_path / "looks-gzip.jsonl"
    plain.write_bytes(b"\x1f\x8b not really\n")
    assert detect_compression(plain) == "none"
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_bytes(b"{}\n")
    with pytest.raises(InputError, match="not gzip-compressed"):
        detect_compression(fake)
    # the bytes decide, whatever the name
    gzipped = tmp_path / "export.jsonl"
    gzipped.write_bytes(gzip.compress(b'{"a":1}\n'))
    assert detect_compression(gzipped) == "gzip"
    misnamed = tmp_path / "export.jsonl.gz"
    misnamed.write_bytes(zstandard.compress(b'{"a":1}\n'))
    assert detect_compression(misnamed) == "zstd"


def test_a_zstd_stream_opened_by_a_skippable_frame_is_read(tmp_path: Path) -> None:
    """A skippable frame (metadata some zstd writers put first) is valid zstd: such an
    export was refused as "named as zstd but is not zstd-compressed" (exit 3)."""
    rows = b'{"a":1}\n{"b":2}\n'
    skippable = b"\x5a\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"meta"
    path = tmp_path / "export.jsonl.zst"
    path.write_bytes(skippable + zstandard.compress(rows))
    assert detect_compression(path) == "zstd"
    lines = [line for b in read_batches(Shard(0, _input(path)), 100, 10) for line in b.lines]
    assert lines == [b'{"a":1}', b'{"b":2}']


def _zipped(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("export.jsonl", data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("packed", "name"),
    [
        (bz2.compress(b'{"a":1}\n'), "bzip2"),
        (bz2.compress(b""), "bzip2"),
        (lzma.compress(b'{"a":1}\n'), "xz"),
        (_zipped(b'{"a":1}\n'), "zip"),
        (b"\x04\x22\x4d\x18\x64\x40\xa7" + b"\x00" * 8, "lz4"),
        (b"7z\xbc\xaf\x27\x1c\x00\x04" + b"\x00" * 24, "7z"),
    ],
    ids=["bzip2", "bzip2-empty", "xz", "zip", "lz4", "7z"],
)
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.bz2"])
def test_other_compressed_formats_are_refused_by_name(
    tmp_path: Path, packed: bytes, name: str, suffix: str
) -> None:
    """Read as text, every line of a .jsonl.bz2 was json.invalid_utf8 and the run exited 0."""
    path = tmp_path / f"export{suffix}"
    path.write_bytes(packed)
    with pytest.raises(InputError, match=f"{name}-compressed; rowgate reads plain, gzip and zstd"):
        detect_compression(path)


def test_truncated_stream_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a":1}\n' * 1000)[:-20])
    with pytest.raises(InputError, match="corrupt gzip stream"):
        list(read_batches(Shard(0, _input(path)), 100, 10))


@pytest.mark.parametrize("batch_bytes", [1, 25, 60, 10_000])
def test_batches_end_at_batch_lines_or_batch_bytes(tmp_path: Path, batch_bytes: int) -> None:
    """A batch ends at ``batch_lines`` lines or once it holds ``batch_bytes`` bytes of
    lines (an over-long line, not held, counts as a line only); together the batches are
    every line, in order, with its offset and shard line number."""
    rng = random.Random(batch_bytes)
    lines = [b"x" * rng.choice([0, 3, 9, 40, 150]) for _ in range(300)]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    batches = list(read_batches(Shard(0, _input(path)), 100, 7, batch_bytes))
    first, offsets, got = 1, [], []
    for batch in batches:
        assert batch.first_line == first
        first += len(batch)
        held = [len(line) for line in batch.lines]
        assert len(batch) <= 7
        assert sum(held[:-1]) < batch_bytes  # it ended at the first line reaching the bound
        offsets += batch.offsets
        got += [b"x" * batch.oversized[i][0] if i in batch.oversized else line
                for i, line in enumerate(batch.lines)]  # fmt: skip
    assert got == lines
    assert offsets == [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]
    if batch_bytes <= 60:
        assert any(len(b) < 7 for b in batches[:-1])  # the byte bound, not the count, ended some


def _pack(data: bytes, suffix: str) -> bytes:
    return gzip.compress(data) if suffix == ".gz" else zstandard.ZstdCompressor().compress(data)


def _bomb(path: Path, mib: int, **bounds: int) -> InputFile:
    """A decompression bomb: ``mib`` MiB of zeros, one line without a newline, as gzip
    members or zstd frames of 1 MiB each (quick to make; ~1 KB per MiB compressed)."""
    path.write_bytes(_pack(bytes(1 << 20), path.suffix) * mib)
    return dataclasses.replace(_input(path), **bounds)


def _read_everything(source: InputFile, spill: Path | None) -> int:
    """Lines of ``source``, read as a run reads it, with a spill directory or without."""
    shards = plan_shards([source], 1 << 20, spill)
    return len(_lines(shards, max_line=1000, batch=1000))


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
@pytest.mark.parametrize("spilled", [False, True])
def test_decompressed_bytes_are_bounded(tmp_path: Path, suffix: str, spilled: bool) -> None:
    """A compressed input decompressing to more than limits.max_decompressed_bytes is an
    input error naming the file, the limit and how to raise it (the stream was read to
    its end: a 2 GB zstd bomb of 66 KB took 2.25 GB of memory, or of disk when spilled);
    a stream of exactly the limit is read."""
    spill = tmp_path / "spill" if spilled else None
    source = _bomb(tmp_path / f"b.jsonl{suffix}", 3, max_decompressed_bytes=3 << 20)
    assert _read_everything(source, spill) == 1
    bomb = dataclasses.replace(source, max_decompressed_bytes=(3 << 20) - 1)
    message = (
        f"{bomb.path}: the {bomb.compression} stream decompresses to more than 3,145,727 "
        "bytes, limits.max_decompressed_bytes = 3,145,727: refused as a possible "
        "decompression bomb; if the input is trusted, raise limits.max_decompressed_bytes "
        "in the campaign config's [limits]"
    )
    with pytest.raises(DecompressionLimitError, match=re.escape(message)):
        _read_everything(bomb, spill)
    with pytest.raises(DecompressionLimitError):
        fetch_lines(Shard(0, bomb), [0], 100)


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_expansion_ratio_is_bounded_past_the_exempt_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """A stream may hold limits.max_expansion_ratio times its file's bytes, once it is
    past RATIO_EXEMPT_BYTES (a small file of repetitive lines is harmless); 1 MiB of
    zeros compresses ~1000x with gzip, ~20000x with zstd."""
    monkeypatch.setattr(reader, "RATIO_EXEMPT_BYTES", 1 << 20)
    source = _bomb(tmp_path / f"b.jsonl{suffix}", 3)
    assert source.max_expansion_ratio == 100
    with pytest.raises(DecompressionLimitError, match=r"over 100x its [0-9,]+ compressed bytes"):
        _read_everything(source, tmp_path / "spill")
    with pytest.raises(DecompressionLimitError, match=r"raise limits\.max_expansion_ratio"):
        _read_everything(source, None)
    assert _read_everything(dataclasses.replace(source, max_expansion_ratio=100_000), None) == 1
    small = _bomb(tmp_path / f"small.jsonl{suffix}", 1)
    assert _read_everything(small, None) == 1  # 1000x, but not past the exempt size


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_each_read_decompresses_at_most_a_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """Memory holds a read, whatever the ratio and the line length: a 32 MiB line of
    zeros in one zstd frame of ~1 KB was decompressed whole by one call (32 MiB at once);
    the line, over the limit, is hashed as it streams, never held."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", 256 << 10)
    path = tmp_path / f"one.jsonl{suffix}"
    path.write_bytes(_pack(bytes(32 << 20), suffix))
    source = _input(path)
    tracemalloc.start()
    try:
        [batch] = read_batches(Shard(0, source), 1 << 20, 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert batch.oversized == {0: (32 << 20, hashlib.sha256(bytes(32 << 20)).hexdigest())}
    assert peak < 8 << 20


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"], ids=["bom", "le", "be"])
def test_a_utf16_export_is_refused_by_its_encoding(tmp_path: Path, encoding: str) -> None:
    """ASCII text in UTF-16 is valid UTF-8 with a NUL every other byte: every line was
    rejected as ``json.syntax`` and the run succeeded. It is refused, naming the fix."""
    path = tmp_path / "u16.jsonl"
    path.write_bytes('{"task_id": "t1", "x": 1}\n{"task_id": "t2"}\n'.encode(encoding))
    with pytest.raises(InputError, match=r"u16.jsonl: UTF-16 text; .*\(iconv -f UTF-16"):
        detect_compression(path)


@pytest.mark.parametrize("encoding", ["utf-32", "utf-32-le", "utf-32-be"])
def test_a_utf32_export_is_refused_and_named_as_such(tmp_path: Path, encoding: str) -> None:
    """A UTF-32 export was read as UTF-8 (every line json.syntax, its last NULs a row of
    their own, exit 0), or, with its byte-order mark, called UTF-16: that iconv garbled it."""
    path = tmp_path / "u32.jsonl"
    for text in ('{"task_id": "t1", "x": 1}\n{"task_id": "t2"}\n', "{}\n"):
        path.write_bytes(text.encode(encoding))  # "{}\n": 12 bytes, less than the sniff
        with pytest.raises(InputError, match=r"u32.jsonl: UTF-32 text; .*\(iconv -f UTF-32"):
            detect_compression(path)


def test_a_nul_later_in_a_plain_export_is_a_line_s_defect_not_an_encoding(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plain.jsonl"
    path.write_bytes(b'{"a": 1}\n{\x00"\x00a\x00"\x00:\x001\x00}\x00\n')
    assert detect_compression(path) == "none"
    short = tmp_path / "short.jsonl"
    short.write_bytes(b"{\x00")  # too short to tell: its line is rejected as it was
    assert detect_compression(short) == "none"
