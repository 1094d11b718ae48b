"""tfcomp.distribute.keras3_backup: Keras 3's BackupAndRestore files moved into a folder
per worker inside the one backup_dir (2-worker resumes: test_distribute's
backup_and_restore tests, which run under Keras 3 in `make test STACK=current`)."""
import os
import types

import pytest

from tfcomp.distribute import keras3_backup
from tests.stacks import EVERY_STACK

pytestmark = EVERY_STACK


def keras3_callback(backup_dir):
    """The attributes Keras 3.x's BackupAndRestore sets in its constructor."""
    weights, metadata = os.path.join(backup_dir, "latest.weights.h5"), os.path.join(backup_dir, "training_metadata.json")
    return types.SimpleNamespace(backup_dir=backup_dir, _weights_path=weights, _training_metadata_path=metadata,
                                 _prev_weights_path=f"{weights}.bkp", _prev_training_metadata_path=f"{metadata}.bkp")


def test_every_file_moves_into_the_workers_folder():
    callback = keras3_callback("/shared/backup")
    keras3_backup.per_worker(callback, "worker1")
    assert callback.backup_dir == "/shared/backup/worker1"
    assert callback._weights_path == "/shared/backup/worker1/latest.weights.h5"
    assert callback._training_metadata_path == "/shared/backup/worker1/training_metadata.json"
    assert callback._prev_weights_path == "/shared/backup/worker1/latest.weights.h5.bkp"
    assert callback._prev_training_metadata_path == "/shared/backup/worker1/training_metadata.json.bkp"


def test_a_callback_whose_files_tfcomp_does_not_know_is_refused_before_training():
    callback = keras3_callback("/shared/backup")
    del callback._prev_weights_path
    with pytest.raises(RuntimeError, match="_prev_weights_path missing.*backup_dir of its own"):
        keras3_backup.per_worker(callback, "worker0")
