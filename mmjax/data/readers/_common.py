"""Shared strict I/O for the readers: UTF-8 text and JSON with file/line errors, image existence, skip reporting."""

from __future__ import annotations

import collections
import csv
import io
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from mmjax.data.records import DataFormatError

log = logging.getLogger("mmjax.data.readers")

MissingImages = Literal["error", "skip", "unchecked"]
_MISSING_POLICIES = ("error", "skip", "unchecked")


def require_file(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what}: file not found: {p}")
    return p


def require_dir(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"{what}: directory not found: {p}")
    return p


def _decode_error(path: Path, raw: bytes, err: UnicodeDecodeError) -> DataFormatError:
    line = raw.count(b"\n", 0, err.start) + 1
    return DataFormatError(f"{path}:{line}: not valid UTF-8 ({err.reason} at byte {err.start})")


def read_text(path: Path) -> str:
    """Whole file as strict UTF-8 (a leading BOM is removed)."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _decode_error(path, raw, err) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_lines(path: Path) -> list[str]:
    """Lines without their terminator ('\\n' or '\\r\\n'); a final newline does not add an empty line."""
    text = read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def load_json(path: Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataFormatError(f"{path}:{err.lineno}: malformed JSON (column {err.colno}: {err.msg})") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, object) for every non-blank line of a JSON-lines file."""
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFormatError(f"{path}:{lineno}: malformed JSON line (column {err.colno}: {err.msg})") from None


def iter_csv_rows(path: Path, delimiter: str = ",") -> Iterator[tuple[int, list[str]]]:
    """(line number of the row's first line, fields) for every non-empty row; quoting as written by pandas."""
    text = read_text(path)
    # newline='' keeps quoted newlines inside fields and splits rows on \n / \r only (not on U+2028 etc.)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    while True:
        lineno = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise DataFormatError(f"{path}:{lineno}: malformed {'TSV' if delimiter == chr(9) else 'CSV'} "
                                  f"row ({err})") from None
        if row:
            yield lineno, row


def field(obj: Any, key: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    """obj[key] with a type check; errors name the location and the field."""
    if not isinstance(obj, dict):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise DataFormatError(f"{where}: missing field {key!r} (has {sorted(obj)[:12]})")
    value = obj[key]
    bad_type = kind is not None and not isinstance(value, kind)
    if bad_type or (kind is not str and isinstance(value, bool)):  # JSON true/false are not numbers here
        raise DataFormatError(f"{where}: field {key!r} has type {type(value).__name__}, expected "
                              f"{getattr(kind, '__name__', kind)}")
    return value


def caption(value: Any, where: str) -> str:
    """A non-empty caption string (surrounding whitespace removed)."""
    if not isinstance(value, str):
        raise DataFormatError(f"{where}: caption is {type(value).__name__}, expected a string")
    text = value.strip()
    if not text:
        raise DataFormatError(f"{where}: empty caption")
    return text


class ImageChecker:
    """Resolves image paths against a root and applies the missing-image policy.

    ``'error'`` (default) raises FileNotFoundError naming the record; ``'skip'`` lets the reader drop the record and
    count it under ``skipped['missing_image']``; ``'unchecked'`` resolves paths without touching the file system
    (for callers that only use cached features).
    """

    def __init__(self, image_root: str | os.PathLike | None, missing_images: MissingImages, what: str):
        if missing_images not in _MISSING_POLICIES:
            raise ValueError(f"missing_images must be one of {_MISSING_POLICIES}, got {missing_images!r}")
        self.policy = missing_images
        self.what = what
        if image_root is None:
            if missing_images != "unchecked":
                raise ValueError(f"{what}: image_root is required unless missing_images='unchecked'")
            self.root = None
        else:
            self.root = Path(image_root)
            if missing_images != "unchecked":
                require_dir(self.root, f"{what} image root")
        self._seen: dict[str, bool] = {}

    def resolve(self, relative: str, where: str) -> str | None:
        """Absolute path string, or None when the image is missing under policy 'skip'."""
        if not isinstance(relative, str) or not relative:
            raise DataFormatError(f"{where}: empty or non-string image path {relative!r}")
        path = str(self.root / relative) if self.root is not None else relative
        if self.policy == "unchecked":
            return path
        ok = self._seen.get(path)
        if ok is None:
            ok = self._seen[path] = os.path.isfile(path)
        if ok:
            return path
        if self.policy == "error":
            raise FileNotFoundError(f"{where}: image not found: {path} "
                                    f"(pass missing_images='skip' to drop and count such records)")
        return None


def report_skipped(name: str, skipped: collections.Counter, total: int) -> dict[str, int]:
    skipped = {k: int(v) for k, v in skipped.items() if v}
    if skipped:
        log.warning("%s: skipped %d of %d records: %s", name, sum(skipped.values()), total, skipped)
    return skipped


# BLIP/ARO `pre_caption`: lower-case, the characters .!"()*#:;~ become spaces, runs of whitespace collapse,
# then at most `max_words` space-separated words are kept.
_PRE_CAPTION_CHARS = re.compile(r'[.!"()*#:;~]')
_SPACES = re.compile(r"\s{2,}")


def pre_caption(text: str, max_words: int = 50) -> str:
    text = _SPACES.sub(" ", _PRE_CAPTION_CHARS.sub(" ", text.lower()))
    text = text.rstrip("\n").strip(" ")
    words = text.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else text
