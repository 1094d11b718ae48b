"""Time to accuracy from a worker's accuracy curve (train_worker.Evaluator's
(training seconds, steps done, accuracy) points); no TensorFlow."""


def time_to(curve, target):
    """Training seconds at the first evaluation reaching target, or None."""
    return next((seconds for seconds, _, acc in curve if acc >= target), None)
