"""Keras 3's BackupAndRestore as users write it, one backup_dir for every worker,
under tfcomp's strategy.

Keras 3's callback writes the same files (latest.weights.h5, training_metadata.json)
from every worker: workers sharing a directory (one machine, or a shared file
system) write one HDF5 file at once, and the first to find it locked dies in the
middle of training, the others in their next collective. tf-keras writes from the
chief alone. Here every worker keeps its files in a folder of its own inside
backup_dir (backup_dir/worker0, backup_dir/worker1, ...: the task's type and
index in the cluster spec), and restores from it: a
restart with the same workers resumes each one's compressor state exactly, whether
the directory is shared or each machine has its own.
"""
import os

from tfcomp.keras import version as keras_in_use

#: BackupAndRestore's file paths (Keras 3.x), each a file name inside backup_dir.
_PATHS = {"_weights_path": "latest.weights.h5", "_training_metadata_path": "training_metadata.json"}
_PREVIOUS = {"_prev_weights_path": "_weights_path", "_prev_training_metadata_path": "_training_metadata_path"}
_PREVIOUS_SUFFIX = ".bkp"


def install(folder_of):
    """Patches Keras 3's BackupAndRestore once per process: its files go to
    backup_dir/<folder> where folder_of(the model's strategy) names a folder (None:
    where it is not tfcomp's strategy, or has one worker: as Keras writes them)."""
    cls = keras_in_use.in_use().internal("callbacks.backup_and_restore").BackupAndRestore
    if getattr(cls, "_tfcomp_per_worker", False):
        return
    begin = cls.on_train_begin

    def on_train_begin(self, logs=None):
        folder = folder_of(getattr(self.model, "distribute_strategy", None))
        if folder is not None and not getattr(self, "_tfcomp_worker_dir", None):
            per_worker(self, folder)
        return begin(self, logs)

    cls.on_train_begin = on_train_begin
    cls._tfcomp_per_worker = True  # pylint: disable=protected-access


def per_worker(callback, folder):
    """Moves callback's files into backup_dir/<folder>."""
    unknown = [name for name in list(_PATHS) + list(_PREVIOUS) if not hasattr(callback, name)]
    if unknown or not getattr(callback, "backup_dir", None):
        raise RuntimeError(
            f"tfcomp: {keras_in_use.in_use().name}'s BackupAndRestore keeps its files elsewhere than tfcomp knows "
            f"({', '.join(unknown) or 'backup_dir'} missing), so every worker would write the same files. "
            f"Give each worker a backup_dir of its own, e.g. f'{{backup_dir}}/worker{{task_id}}'")
    directory = os.path.join(callback.backup_dir, folder)
    callback._tfcomp_worker_dir = directory  # pylint: disable=protected-access
    callback.backup_dir = directory
    for attribute, name in _PATHS.items():
        setattr(callback, attribute, os.path.join(directory, name))
    for attribute, of in _PREVIOUS.items():
        setattr(callback, attribute, getattr(callback, of) + _PREVIOUS_SUFFIX)
