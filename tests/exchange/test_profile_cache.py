"""The compression-profile cache (tfcomp.exchange.profile_cache through CompressionProfile.cached):
unusable files are reported and measured again, concurrent writers leave a valid file."""
import json
import logging
import math
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import tfcomp
from tfcomp.exchange import profile_cache
from tfcomp.exchange.selection import PROFILE_SIZES, CompressionProfile
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

REPO = pathlib.Path(__file__).resolve().parents[2]


def _flat_profile(seconds):
    return CompressionProfile(PROFILE_SIZES, [seconds] * len(PROFILE_SIZES))


def _edit(**changes):
    """A spoiler that rewrites the good file's JSON with changes (None deletes a key)."""
    def spoil(good):
        data = json.loads(good)
        for name, value in changes.items():
            if value is None:
                del data[name]
            else:
                data[name] = value(data[name]) if callable(value) else value
        return json.dumps(data).encode()
    return spoil


def _with_time(value):
    return _edit(seconds=lambda s: s[:3] + [value] + s[4:])


SPOILED = {
    "empty": lambda good: b"",
    "truncated": lambda good: good[:len(good) // 2],
    "truncated to one byte": lambda good: good[:1],
    "binary garbage": lambda good: bytes(range(256)) * 4,
    "invalid utf-8 inside": lambda good: good[:10] + b"\xff\xfe" + good[12:],
    "one byte changed": lambda good: good.replace(b":", b";", 1),
    "text": lambda good: b"not a profile\n",
    "nested too deep": lambda good: b"[" * 50000,
    "too large": lambda good: good + b" " * profile_cache.MAX_FILE_BYTES,
    "json null": lambda good: b"null",
    "json list": lambda good: json.dumps(list(json.loads(good).values())).encode(),
    "missing key": _edit(key=None),
    "missing seconds": _edit(seconds=None),
    "extra key": _edit(measured_by="someone else"),
    "another key": _edit(key="another compressor"),
    "other sizes": _edit(sizes=lambda s: [2 * n for n in s]),
    "fewer sizes": _edit(sizes=lambda s: s[:-1], seconds=lambda s: s[:-1]),
    "sizes as strings": _edit(sizes=lambda s: [str(n) for n in s]),
    "fewer times": _edit(seconds=lambda s: s[:-1]),
    "more times": _edit(seconds=lambda s: s + s[:1]),
    "times not a list": _edit(seconds=lambda s: {"1024": s[0]}),
    "negative time": _with_time(-1e-3),
    "zero time": _with_time(0.0),
    "nan time": _with_time(math.nan),
    "infinite time": _with_time(math.inf),
    "time as string": _with_time("0.001"),
    "time as bool": _with_time(True),
    "null time": _with_time(None),
}


@pytest.fixture
def fake_measure(monkeypatch):
    """CompressionProfile.measure returning 1 ms, 2 ms, ... flat profiles; the calls are counted."""
    calls = []

    def measure(cls, compressor):
        calls.append(compressor)
        return _flat_profile(1e-3 * len(calls))

    monkeypatch.setattr(CompressionProfile, "measure", classmethod(measure))
    return calls


def _profile_file(cache_dir):
    files = list((cache_dir / "profiles").iterdir())
    assert len(files) == 1, f"expected one profile file and nothing else, got {files}"
    return files[0]


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_valid_file_is_used_without_measuring_or_warning(tmp_path, fake_measure, caplog):
    compressor = tfcomp.DRAGONN(ratio=0.01)
    first = CompressionProfile.cached(compressor, cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING):
        again = CompressionProfile.cached(compressor, cache_dir=tmp_path)
    assert again.seconds == first.seconds == _flat_profile(1e-3).seconds
    assert again.sizes == list(PROFILE_SIZES)
    assert len(fake_measure) == 1 and _warnings(caplog) == []


@pytest.mark.parametrize("spoil", SPOILED.values(), ids=SPOILED.keys())
def test_an_unusable_file_is_reported_measured_again_and_replaced(tmp_path, fake_measure, caplog, spoil):
    compressor = tfcomp.DRAGONN(ratio=0.01)
    CompressionProfile.cached(compressor, cache_dir=tmp_path)
    path = _profile_file(tmp_path)
    good = path.read_bytes()
    path.write_bytes(spoil(good))

    with caplog.at_level(logging.WARNING):
        profile = CompressionProfile.cached(compressor, cache_dir=tmp_path)
    assert len(fake_measure) == 2, "the unusable file was not measured again"
    assert profile.seconds == _flat_profile(2e-3).seconds
    messages = _warnings(caplog)
    assert len(messages) == 1 and str(path) in messages[0] and "measuring it again" in messages[0], messages

    # The new measurement replaced the file, and is what the next call reads.
    assert _profile_file(tmp_path) == path
    assert json.loads(path.read_bytes()) == {"key": json.loads(good)["key"], "sizes": list(PROFILE_SIZES),
                                             "seconds": profile.seconds}
    assert CompressionProfile.cached(compressor, cache_dir=tmp_path).seconds == profile.seconds
    assert len(fake_measure) == 2


def test_a_directory_in_place_of_the_file_is_reported_and_measured(tmp_path, fake_measure, caplog):
    """It can be neither read nor replaced: the profile is measured and used, and both are reported."""
    compressor = tfcomp.DRAGONN(ratio=0.01)
    CompressionProfile.cached(compressor, cache_dir=tmp_path)
    path = _profile_file(tmp_path)
    path.unlink()
    path.mkdir()
    with caplog.at_level(logging.WARNING):
        profile = CompressionProfile.cached(compressor, cache_dir=tmp_path)
    assert len(fake_measure) == 2 and profile.seconds == _flat_profile(2e-3).seconds
    messages = _warnings(caplog)
    assert len(messages) == 2 and all(str(path) in m for m in messages), messages
    assert "cannot be read" in messages[0] and "cannot write" in messages[1], messages
    assert list(path.parent.iterdir()) == [path], "the temporary file was left behind"


# Measures for real, then waits until the other process has measured too, so that
# neither found a profile in the cache and both write it at the same moment.
_MEASURE_AT_ONCE = textwrap.dedent("""
    import json, pathlib, sys, time
    import tfcomp
    from tfcomp.exchange.selection import CompressionProfile

    cache_dir, barrier, name = sys.argv[1:]
    barrier = pathlib.Path(barrier)
    measure = CompressionProfile.measure.__func__

    def measure_then_wait(cls, compressor):
        profile = measure(cls, compressor)
        (barrier / name).touch()
        deadline = time.monotonic() + 600
        while len(list(barrier.iterdir())) < 2:
            if time.monotonic() > deadline:
                sys.exit("the other process did not finish measuring")
            time.sleep(0.001)
        return profile

    CompressionProfile.measure = classmethod(measure_then_wait)
    profile = CompressionProfile.cached(tfcomp.DRAGONN(ratio=0.01), cache_dir=cache_dir)
    print(json.dumps({"sizes": profile.sizes, "seconds": profile.seconds}))
    """)


def test_two_processes_measuring_at_once_leave_a_valid_profile(tmp_path, monkeypatch, caplog):
    cache_dir, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    procs = [subprocess.Popen([sys.executable, "-c", _MEASURE_AT_ONCE, str(cache_dir), str(barrier), name],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for name in ("first", "second")]
    profiles = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err
        profiles.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(p.name for p in barrier.iterdir()) == ["first", "second"]
    for profile in profiles:
        assert profile["sizes"] == list(PROFILE_SIZES)
        assert all(math.isfinite(s) and s > 0 for s in profile["seconds"]), profile

    # The file left is one of the two measurements, read back without measuring or a warning.
    _profile_file(cache_dir)

    def no_measuring(cls, compressor):
        raise AssertionError("the cached profile was not used")

    monkeypatch.setattr(CompressionProfile, "measure", classmethod(no_measuring))
    with caplog.at_level(logging.WARNING):
        cached = CompressionProfile.cached(tfcomp.DRAGONN(ratio=0.01), cache_dir=cache_dir)
    assert _warnings(caplog) == []
    assert cached.seconds in [p["seconds"] for p in profiles]
