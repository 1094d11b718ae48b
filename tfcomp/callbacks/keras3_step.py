"""The Timeline's model.fit train function under Keras 3 (TensorFlow backend).

Keras 3 reads a batch with iterator.get_next() in one tf.function and runs the
step (strategy.run of model.train_step, then the reduction of its logs) in
another, nested one (TensorFlowTrainer._make_function), so no function of
Keras 3 covers both for the Timeline to wrap, as Keras 2's train function does.
This is that step with steps_per_execution=1 in one function: the read, the
step and the reduction as Keras 3 runs them, so that the Timeline's input phase
covers the read.
"""
import tensorflow as tf

from tfcomp.keras import version as keras_in_use


def train_function(model, wrap):
    """model's train function, recorded by wrap (Timeline.wrap), returning (logs, marks)."""
    keras = keras_in_use.in_use()
    trainer = keras.internal("backend.tensorflow.trainer")
    if not hasattr(trainer, "reduce_per_replica"):
        raise keras_in_use.UnsupportedKeras(
            f"tfcomp.callbacks.Timeline runs Keras 3's training step with its reduce_per_replica, which "
            f"{keras.name} does not have: install one of tfcomp's pinned stacks (requirements/).")
    strategy = model.distribute_strategy

    def run_train_step(data):
        # Keras 3 stands a tf.experimental.Optional in the data for an absent part (no sample weights).
        data = tf.nest.map_structure(lambda part: None if isinstance(part, tf.experimental.Optional) else part,
                                     data)
        return model.train_step(data)  # looked up here: the Timeline marks the data in its own train_step

    def step(iterator):
        outputs = strategy.run(run_train_step, args=(iterator.get_next(),))
        return trainer.reduce_per_replica(outputs, strategy, reduction="auto")

    body = wrap(step, optimizer=model.optimizer, model=model, return_marks=True)
    return body if model.run_eagerly else tf.function(body, reduce_retracing=True)
