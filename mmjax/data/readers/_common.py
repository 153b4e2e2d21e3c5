"""Shared strict I/O for the readers: UTF-8 text and JSON with file/line errors, image paths kept inside their root,
duplicate ids and non-finite numbers refused, skip reporting.

Every check raises `DataFormatError` naming the file and the record (line, list index or key) so a bad download
is found before any score is computed; nothing is dropped silently (see `docs/design.md#strict-readers`)."""

from __future__ import annotations

import collections
import csv
import io
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterator
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


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook`: a dict, refusing repeated keys (plain `json.loads` keeps the last value silently,
    e.g. two SugarCrepe entries with the same id would lose one)."""
    out = dict(pairs)
    if len(out) != len(pairs):  # rare path: find the first repeated key for the message
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _duplicate_line(text: str, key: str) -> int | None:
    """Line of the repeated key, when the text pins it down: ``"key":`` written exactly twice means both are keys of
    the one object holding the duplicate (a value is never followed by ':'). Otherwise None (file and key only), as
    a key shared by many objects (e.g. "caption") would give a wrong line."""
    hits = [m.start() for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)]
    return text.count("\n", 0, hits[1]) + 1 if len(hits) == 2 else None


def _loads(text: str, path: Path, lineno: int | None) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_object)
    except _DuplicateKey as dup:
        line = lineno if lineno is not None else _duplicate_line(text, dup.key)
        at = f"{path}:{line}" if line is not None else f"{path}"
        raise DataFormatError(f"{at}: duplicate key {dup.key!r} in a JSON object (a JSON reader would silently "
                              "keep only the last value)") from None


def load_json(path: Path) -> Any:
    """A whole JSON file; malformed JSON and duplicate object keys are errors naming the file (and line)."""
    text = read_text(path)
    try:
        return _loads(text, path, None)
    except json.JSONDecodeError as err:
        raise DataFormatError(f"{path}:{err.lineno}: malformed JSON (column {err.colno}: {err.msg})") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, object) for every non-blank line of a JSON-lines file (duplicate keys refused as in
    `load_json`)."""
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, _loads(line, path, lineno)
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
    if "\x00" in text:  # tokenisers would drop it, map it to [UNK] or end the string there
        raise DataFormatError(f"{where}: caption contains a NUL character ('\\x00'): {text!r}")
    return text


def finite_number(obj: Any, key: str, where: str) -> float:
    """obj[key] as a finite float: JSON ``NaN`` / ``Infinity`` (accepted by Python's json) and overflowing literals
    such as ``1e999`` are refused here, naming the record, instead of failing later without a location."""
    value = float(field(obj, key, where, (int, float)))
    if not math.isfinite(value):
        raise DataFormatError(f"{where}: field {key!r} is {value!r}, expected a finite number")
    return value


class UniqueIds:
    """Remembers where each id was first seen; a repeat is a `DataFormatError` naming both places.

    Records keyed by id (image ids, example ids) would otherwise be counted twice or overwrite each other."""

    def __init__(self, what: str):
        self.what = what
        self._first: dict[Any, str] = {}

    def add(self, key: Any, where: str) -> None:
        if key in self._first:
            raise DataFormatError(f"{where}: duplicate {self.what} {key!r} (first at {self._first[key]})")
        self._first[key] = where

    def __contains__(self, key: Any) -> bool:
        return key in self._first


def record(where: str, make: Callable[..., Any], **kwargs: Any) -> Any:
    """``make(**kwargs)`` (a record constructor) with its ValueError re-raised as a `DataFormatError` at ``where``,
    so a value the record refuses (e.g. a degenerate bbox) still names the file and record."""
    try:
        return make(**kwargs)
    except DataFormatError:
        raise
    except ValueError as err:
        raise DataFormatError(f"{where}: {err}") from None


def safe_join(root: Path | None, relative: str, where: str) -> str:
    """``root / relative`` as a string, refusing paths that leave ``root``.

    An absolute path (``/etc/passwd``), a drive or UNC prefix, a NUL byte, or ``..`` components that climb above
    ``root`` after normalisation are `DataFormatError`s naming the record and the path. The check is lexical (no
    symlink resolution), so a root that is itself a symlink farm keeps working. With ``root=None`` nothing is joined
    and no file is opened: the path is only the record's identifier (e.g. the absolute paths of the official NegCLIP
    TSV, matched to Karpathy images by the feature-cache script), so it is returned as written."""
    if not isinstance(relative, str) or not relative:
        raise DataFormatError(f"{where}: empty or non-string image path {relative!r}")
    if "\0" in relative:
        raise DataFormatError(f"{where}: image path contains a NUL byte: {relative!r}")
    if root is None:
        return relative
    if os.path.isabs(relative) or relative.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[/\\]", relative):
        raise DataFormatError(f"{where}: absolute image path {relative!r} refused; paths must be relative to "
                              f"the image root {root if root is not None else ''}".rstrip())
    norm = os.path.normpath(relative)
    if norm == ".." or norm.startswith(".." + os.sep):
        raise DataFormatError(f"{where}: image path {relative!r} resolves outside the image root "
                              f"{root if root is not None else ''}".rstrip())
    if norm == ".":
        raise DataFormatError(f"{where}: image path {relative!r} names the image root itself, not a file")
    return str(root / relative) if root is not None else relative


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
        """Absolute path string, or None when the image is missing under policy 'skip'. Paths leaving the root are
        refused (`safe_join`) whatever the policy."""
        path = safe_join(self.root, relative, where)
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
