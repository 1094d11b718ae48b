"""AutoGraph leaves tfcomp's code as written (tfcomp.autograph), and still converts the
user's code that tfcomp calls."""
import collections

import tensorflow as tf
from tensorflow.python.autograph.impl import api

import tfcomp.callbacks
from tfcomp import ops
from tests.stacks import EVERY_STACK

pytestmark = EVERY_STACK


def converted_modules(monkeypatch, run):
    """The modules of the functions AutoGraph converts while run() traces."""
    modules = collections.Counter()
    convert = api._convert_actual  # pylint: disable=protected-access

    def recording(entity, program_ctx):
        modules[entity.__module__] += 1
        return convert(entity, program_ctx)

    monkeypatch.setattr(api, "_convert_actual", recording)
    run()
    return modules


def halve_where_positive(x):
    """User code: a Python branch on a tensor, which only AutoGraph turns into a graph."""
    if tf.reduce_sum(x) > 0:
        return ops.cast_divide(x, tf.float32, 2)
    return -x


def test_a_users_function_is_converted_and_tfcomps_functions_it_calls_are_not(monkeypatch):
    step = tf.function(lambda x: halve_where_positive(x) + 0)
    modules = converted_modules(monkeypatch, lambda: step(tf.constant([4.0])))
    assert modules[__name__] >= 1, modules
    assert not [m for m in modules if m.split(".")[0] == "tfcomp"], modules
    assert step(tf.constant([4.0])).numpy().tolist() == [2.0]
    assert step(tf.constant([-4.0])).numpy().tolist() == [4.0]


def test_the_timelines_wrapped_body_is_converted_as_the_caller_converts(tmp_path):
    wrapped = tfcomp.callbacks.Timeline(str(tmp_path), start_step=0, num_steps=2).wrap(halve_where_positive)
    outer = tf.function(lambda x: wrapped(x) * 1)  # wrapped called from the user's converted code
    for step in (tf.function(wrapped), outer):
        assert step(tf.constant([4.0])).numpy().tolist() == [2.0]
        assert step(tf.constant([-4.0])).numpy().tolist() == [4.0]
    assert wrapped(tf.constant([4.0])).numpy().tolist() == [2.0]  # eagerly
    # autograph=False: the body runs as written, and its branch on a tensor fails as in any such function.
    try:
        tf.function(wrapped, autograph=False)(tf.constant([4.0]))
    except tf.errors.OperatorNotAllowedInGraphError:  # pylint: disable=no-member
        pass
    else:
        raise AssertionError("the body was converted inside a tf.function with autograph=False")
