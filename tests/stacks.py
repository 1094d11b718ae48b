"""The stacks the suite runs on, and the marker that says which of them a test applies to.

`make test` runs the whole suite three times: on the pinned stack, then on the current
TensorFlow with tf.keras as tf-keras (TF_USE_LEGACY_KERAS=1) and with Keras 3. Every test
carries `stacks(...)` (a module's `pytestmark` or its own, the closest one counts): where
the running stack is not among them, the test is skipped with the marker's `why`. A test
without the marker is a collection error, so no test is left off a stack by omission.
"""
import pytest

PINNED = "pinned"  # TensorFlow 2.15.1, its tf.keras Keras 2.15, Horovod 0.28.1
TF_KERAS = "tf-keras"  # TensorFlow 2.21 with TF_USE_LEGACY_KERAS=1: tf.keras is tf-keras (Keras 2)
KERAS3 = "keras3"  # TensorFlow 2.21: tf.keras is Keras 3
STACKS = (PINNED, TF_KERAS, KERAS3)

HOROVOD_MISSING = ("Horovod does not build against TensorFlow 2.16 and later (horovod#4290): "
                   "the pinned stack alone has it (README, 'Supported stacks')")


def in_use():
    """The stack of this process, from the Keras tf.keras resolved to (tfcomp.keras.version)."""
    from tfcomp.keras import version  # pylint: disable=import-outside-toplevel
    keras = version.in_use()
    if keras.package == "tf_keras":
        return TF_KERAS
    return KERAS3 if keras.major >= 3 else PINNED


def stacks(*names, why=None):
    """The marker: the stacks a test applies to, and why not the others."""
    unknown = set(names) - set(STACKS)
    if unknown or not names:
        raise ValueError(f"stacks({', '.join(names)}): each must be one of {', '.join(STACKS)}")
    if set(names) != set(STACKS) and not why:
        raise ValueError(f"stacks({', '.join(names)}) needs why= for the stacks it leaves out")
    return pytest.mark.stacks(*names, why=why)


#: A test of Keras-facing code: tf-keras on TensorFlow 2.21 is a Keras of its own.
EVERY_STACK = stacks(*STACKS)
#: A test with no Keras on its path: TF_USE_LEGACY_KERAS changes nothing it runs.
NO_KERAS = stacks(PINNED, KERAS3, why="no Keras on its path: TensorFlow 2.21 runs it with Keras 3 installed, "
                  "and with TF_USE_LEGACY_KERAS=1 it would run the same code again")
#: Keras 2's path on 2 workers: the pinned stack runs it; tf-keras takes the same code on
#: TensorFlow 2.21, where the tests marked for tf-keras run what that TensorFlow could change.
KERAS2_ON_PINNED = stacks(PINNED, KERAS3, why="tf-keras takes Keras 2's path, which the pinned stack runs; "
                          "on TensorFlow 2.21 tf-keras runs the tests of what that TensorFlow could change "
                          "(a bare name, dense against tf.distribute's own, BackupAndRestore, the tutorials)")
HOROVOD = stacks(PINNED, why=HOROVOD_MISSING)
#: Plain Python over the repository's files (docs, layout, imports): the same on every stack.
TREE_ONLY = stacks(PINNED, why="plain Python over the repository's files, the same on every stack")
#: Keras 3's model.fit fails under tf.distribute's own MultiWorkerMirroredStrategy.
KERAS3_FIT_UNDER_TF_DISTRIBUTE = ("Keras 3's model.fit fails under tf.distribute's own strategy on 2 workers "
                                  "(keras-team/keras#20585; tfcomp's strategy works around it)")


def not_here(item, stack):
    """Why item does not run on stack, or None where it does."""
    marker = item.get_closest_marker("stacks")
    if stack in marker.args:
        return None
    return f"not on the {stack} stack: {marker.kwargs['why']}"
