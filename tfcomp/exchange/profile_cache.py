"""The on-disk cache of compression profiles (tfcomp.exchange.selection): one JSON file per
profile, {"key": ..., "sizes": [...], "seconds": [...]}.

A file that cannot be read back as the profile it is named for (empty, truncated,
corrupted, or written by something else) is reported and treated as missing, so
that the caller measures again and overwrites it. Files are written to a private
temporary file, flushed to disk and renamed into place, so that processes
measuring at once, or a crash while writing, never leave a partial file under
the profile's name.
"""
import json
import math
import os
import tempfile

from absl import logging

# A profile file is well under 1 KiB; anything much larger is not one.
MAX_FILE_BYTES = 64 * 1024


class ForeignFile(ValueError):
    """The file at a profile's path does not hold that profile."""


def load(path, key, sizes):
    """The seconds stored at path for key and sizes, or None: the file is missing,
    or holds no valid profile for them (logged as a warning naming the file)."""
    try:
        with open(path, "rb") as f:
            content = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as err:
        return _ignored(path, f"cannot be read: {err}")
    try:
        return _parse(content, key, sizes)
    except ForeignFile as err:
        return _ignored(path, str(err))


def store(path, key, sizes, seconds):
    """Writes the profile to path atomically (temporary file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    content = json.dumps({"key": key, "sizes": list(sizes), "seconds": list(seconds)})
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        try:
            os.unlink(partial)
        except FileNotFoundError:
            pass
        raise


def _ignored(path, reason):
    logging.warning("tfcomp: ignoring the cached compression profile %s (%s); measuring it again", path, reason)
    return None


def _parse(content, key, sizes):
    if not content:
        raise ForeignFile("empty file")
    if len(content) > MAX_FILE_BYTES:
        raise ForeignFile(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        data = json.loads(content)
    except (ValueError, RecursionError) as err:  # bad UTF-8 or JSON (truncated, corrupted)
        raise ForeignFile(f"not JSON: {err}") from None
    if not isinstance(data, dict) or set(data) != {"key", "sizes", "seconds"}:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ForeignFile(f"not a profile: expected keys key, sizes, seconds, got {got}")
    if data["key"] != key:
        raise ForeignFile("a profile of another compressor, machine or TensorFlow")
    if data["sizes"] != list(sizes):
        raise ForeignFile(f"sizes {data['sizes']!r}, expected {list(sizes)}")
    seconds = data["seconds"]
    if not isinstance(seconds, list) or len(seconds) != len(sizes):
        raise ForeignFile(f"expected a list of {len(sizes)} times, got {seconds!r}")
    for s in seconds:
        # A measured time is a positive finite number (bool is an int to Python, not to JSON).
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise ForeignFile(f"time {s!r} is not a positive finite number of seconds")
    return [float(s) for s in seconds]
