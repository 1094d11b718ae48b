"""TensorFlow's coordination service configured as MultiWorkerMirroredStrategy
configures it (tensorflow/python/distribute/collective_all_reduce_strategy.py),
with the heartbeat timeout the user chose: the strategy configures it only where
nothing has, so configuring it first is how a program sets its options."""
from tensorflow.python.distribute import collective_all_reduce_strategy, multi_worker_util
from tensorflow.python.eager import context

# Where this TensorFlow keeps the message (it moved between versions): the strategy's own import.
coordination_config_pb2 = collective_all_reduce_strategy.coordination_config_pb2

COORDINATED_JOBS = ("chief", "worker")


def configure(cluster_resolver, heartbeat_timeout_s):
    """Configures the service for this cluster unless something did already; returns
    whether it did (False also where this task is not a chief or worker)."""
    if not heartbeat_timeout_s > 0:
        raise ValueError(f"heartbeat_timeout_s must be a positive number of seconds, got {heartbeat_timeout_s!r}")
    cluster_spec = multi_worker_util.normalize_cluster_spec(cluster_resolver.cluster_spec())
    if (context.context().coordination_service is not None or not cluster_spec.jobs
            or cluster_resolver.task_type not in COORDINATED_JOBS):
        return False
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=cluster_spec.num_tasks(job))
            for job in COORDINATED_JOBS if job in cluster_spec.jobs]
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=multi_worker_util.coordination_leader(cluster_spec),
        coordinated_jobs=jobs, heartbeat_timeout_in_ms=int(1000 * heartbeat_timeout_s))
    return True
