"""AutoGraph leaves tfcomp's code as written, as it leaves TensorFlow's and Keras'.

tfcomp builds its graphs with TensorFlow's own control flow (tf.cond, tf.while_loop,
Python branches on settings known when tracing), as TensorFlow and Keras do, and
AutoGraph skips the packages named in its conversion rules (tensorflow, keras,
tensorflow_probability, ...). Without a rule for tfcomp, a user's tf.function that
calls into tfcomp (a custom loop with tfcomp.horovod.DistributedGradientTape, a step
wrapped by the Timeline) had AutoGraph rewrite every tfcomp function on the way, about
a thousand, on each trace: seconds of a first step spent parsing tfcomp's source
(benchmarks/results/autograph/README.md). Under model.fit tfcomp is reached from
Keras' code, which AutoGraph does not convert, so this is the code fit already runs.

Imported by tfcomp.ops, which every path that builds tfcomp's graphs imports.
"""
from absl import logging
import tensorflow as tf

PACKAGE = "tfcomp"


def _register():
    try:
        from tensorflow.python.autograph.core import config  # pylint: disable=import-outside-toplevel
        config.CONVERSION_RULES = (config.DoNotConvert(PACKAGE), *config.CONVERSION_RULES)
    except (ImportError, AttributeError) as err:  # TensorFlow moved its rules: tests/test_autograph.py fails
        logging.warning("tfcomp: AutoGraph's conversion rules were not found (%s); tf.functions that call "
                        "tfcomp will take longer to trace", err)


def converted_like_the_caller(fn):
    """fn as the code calling tfcomp would call it: converted where AutoGraph is converting
    that code (a tf.function's), as is where it is not (eager, or autograph=False). For a
    user's function that tfcomp calls (Timeline.wrap's body), which AutoGraph would
    otherwise leave alone, called from tfcomp's code."""
    return tf.__internal__.autograph.tf_convert(fn, tf.__internal__.autograph.control_status_ctx(),
                                                convert_by_default=False)


_register()
