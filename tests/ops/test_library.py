"""Loading the op library: missing or stale libraries are refused with a rebuild hint."""
import shutil

import pytest
import tensorflow as tf

from tfcomp import ops
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


@pytest.fixture
def fresh_loader(monkeypatch):
    ops.library.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    ops.library.cache_clear()


def test_library_is_built_against_installed_tensorflow():
    version, _ = ops.build_info(ops.library_path())
    assert version == tf.__version__
    assert ops.library() is ops.library()


def test_missing_library_says_how_to_rebuild(fresh_loader, tmp_path):
    fresh_loader.setenv("TFCOMP_OPS_LIBRARY", str(tmp_path / "absent.so"))
    with pytest.raises(ops.OpLibraryError, match="missing.*make build"):
        ops.library()


def test_library_built_against_other_tensorflow_is_refused(fresh_loader, tmp_path):
    stale = tmp_path / "_tfcomp_ops.so"
    shutil.copy(ops.library_path(), stale)
    data = stale.read_bytes()
    marker = f"tensorflow={tf.__version__} ".encode()
    assert data.count(marker) == 1
    other = b"tensorflow=9.99.9 "
    assert len(other) == len(marker)
    stale.write_bytes(data.replace(marker, other))
    fresh_loader.setenv("TFCOMP_OPS_LIBRARY", str(stale))
    with pytest.raises(ops.OpLibraryError, match="built against TensorFlow 9.99.9.*make build"):
        ops.library()


def test_file_without_marker_is_refused(fresh_loader, tmp_path):
    bogus = tmp_path / "bogus.so"
    bogus.write_bytes(b"\x7fELF not a library")
    fresh_loader.setenv("TFCOMP_OPS_LIBRARY", str(bogus))
    with pytest.raises(ops.OpLibraryError, match="not a tfcomp op library"):
        ops.library()
