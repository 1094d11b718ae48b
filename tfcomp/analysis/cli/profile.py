"""`python -m tfcomp.analysis profile`: records a profile's inputs and saves them as
one JSON file for predict and whatif.

- The model: from a Timeline trace of a few training steps
  (tfcomp.callbacks.Timeline's WORKER.trace.json): forward, backward and apply
  times and each gradient's size and ready time (from_timeline).
- The link: the engine's own allreduce and allgather timed among the workers
  (link_probe), when every worker runs this command as it runs training (TF_CONFIG
  for tf.distribute, horovodrun for Horovod); or a saved probe (--link_probe).
- Each compressor named: encode and decode time on the model's gradient shapes,
  and what it sends for each (measure); the vector-add cost (AddEst).

This subcommand needs TensorFlow; predict and whatif do not.
"""
import json
import os

from absl import flags

from tfcomp.analysis.cli import options as opts
from tfcomp.analysis.measure import from_timeline
from tfcomp.costs.network import ALLGATHER, ALLREDUCE

SUMMARY = "record a profile (model from a Timeline trace, link probe, compressor and vector-add costs) as JSON"


def define_flags(fv):
    flags.DEFINE_string("timeline", None, "Required. A Timeline trace of the model's training steps "
                        "(tfcomp.callbacks.Timeline's WORKER.trace.json).", flag_values=fv)
    flags.DEFINE_string("output", None, "Required. Where to save the profile (JSON).", flag_values=fv)
    flags.DEFINE_list("compressors", [], "Compressors to measure, each a tfcomp compressor name with optional "
                      "knobs ('EFSignSGD', 'PowerSGD:rank=4', 'DGC:ratio=0.01'); the profile names them so.",
                      flag_values=fv)
    flags.DEFINE_string("link_probe", None, "A saved link probe (JSON with 'workers', 'allreduce' and 'allgather' "
                        "[(bytes, seconds)] samples, and optionally 'allreduce_float16' ones, as "
                        "benchmarks/e2e/link_probe_worker.py writes); default: probe now with --engine, which every "
                        "worker must run at once.", flag_values=fv)
    flags.DEFINE_enum("engine", "tf.distribute", ["tf.distribute", "horovod"], "Whose collectives the probe "
                      "times (without --link_probe).", flag_values=fv)
    flags.DEFINE_integer("probe_max_bytes", 4 << 20, "Largest probe message per worker, in bytes.", flag_values=fv)
    flags.DEFINE_integer("runs", 7, "Timed calls per measurement (the median is kept).", flag_values=fv)
    flags.DEFINE_bool("overlap_backward", True, "Keep each gradient's measured ready time: tfcomp's exchange "
                      "starts a bucket while the backward pass still computes the rest. --nooverlap_backward saves "
                      "every gradient ready when the backward pass ends, for an exchange that waits for all of "
                      "them (tfcomp before its pipeline).", flag_values=fv)
    flags.DEFINE_string("name", None, "The model's name in the profile (default: the trace's worker).",
                        flag_values=fv)
    flags.DEFINE_float("sgd_momentum", None, "The model trains with Keras SGD and this momentum: the compressors "
                       "whose momentum is 'auto' (EFSignSGD and the sparsifiers) are measured as they run under "
                       "it, keeping the velocity they take over from the optimizer. Default: measured as under "
                       "any other optimizer.", flag_values=fv)


def _launched_rank(engine):
    """This worker's rank as its launcher set it (a saved probe names none): Horovod's
    HOROVOD_RANK, or TF_CONFIG's task index; 0 for a process started alone."""
    if engine == "horovod":
        return int(os.environ.get("HOROVOD_RANK", "0"))
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    return int(task.get("index", 0))


def _read_probe(path):
    try:
        with open(path, encoding="utf-8") as f:
            probe = json.load(f)
    except OSError as e:
        raise opts.UsageError(f"cannot read link probe {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise opts.UsageError(f"{path}: not a JSON link probe ({e})") from None
    missing = [k for k in ("workers", ALLREDUCE, ALLGATHER) if k not in probe]
    if missing:
        raise opts.UsageError(f"{path}: the link probe lacks {', '.join(missing)}")
    return probe


def _gradient_shapes(trace, model):
    """[(name, shape, dtype)] in the profile's backward order, from the trace's tensor list."""
    listed = {t["name"]: t for t in (trace.get("otherData") or {}).get("tensors", [])}
    missing = [g.name for g in model.gradients if g.name not in listed]
    if missing:
        raise opts.UsageError(f"the trace lists no shape for gradients {missing[:3]}: record it with this "
                              "tfcomp's Timeline")
    return [(g.name, tuple(listed[g.name]["shape"]), listed[g.name]["dtype"]) for g in model.gradients]


def run(fv, out):
    if not fv.timeline or not fv.output:
        raise opts.UsageError("--timeline and --output are required")
    if fv.runs < 1 or fv.probe_max_bytes < 4096:
        raise opts.UsageError("--runs must be >= 1 and --probe_max_bytes >= 4096")
    try:
        trace = from_timeline.read_trace(fv.timeline)
        model = from_timeline.model_profile(trace, name=fv.name)
        if not fv.overlap_backward:
            model = model.ready_at_backward_end()
    except OSError as e:
        raise opts.UsageError(f"cannot read timeline {fv.timeline}: {e.strerror or e}") from None
    except ValueError as e:
        raise opts.UsageError(f"{fv.timeline}: {e}") from None
    gradients = _gradient_shapes(trace, model)
    # TensorFlow only from here on.
    from tfcomp.analysis.measure import link_probe
    from tfcomp.analysis.measure import codecs as measure  # pylint: disable=import-outside-toplevel
    from tfcomp.compressors import registry  # pylint: disable=import-outside-toplevel
    try:
        parsed = [registry.parse_compressor(spec) for spec in fv.compressors]
    except ValueError as e:
        raise opts.UsageError(f"--compressors: {e}") from None
    # Each measured under the one name the library gives it (a bare name: its defaults).
    compressors = {registry.spec(c): c for c in parsed}
    if len(compressors) != len(parsed):
        raise opts.UsageError(f"--compressors: a compressor is named twice ({', '.join(fv.compressors)}): "
                              f"{', '.join(registry.spec(c) for c in parsed)}")
    if fv.sgd_momentum is not None and not 0 <= fv.sgd_momentum < 1:
        raise opts.UsageError(f"--sgd_momentum: a momentum in [0, 1), got {fv.sgd_momentum!r}")
    # The probe first: MultiWorkerMirroredStrategy must configure TensorFlow's runtime before
    # anything starts it, and a Keras optimizer (under_sgd's) does.
    probe = _read_probe(fv.link_probe) if fv.link_probe else link_probe.probe(fv.engine, fv.probe_max_bytes, fv.runs)
    if fv.sgd_momentum is not None:
        compressors = measure.under_sgd(compressors, fv.sgd_momentum)
    try:
        links = link_probe.fitted_links(probe, probe["workers"])
    except ValueError as e:
        raise opts.UsageError(f"the link probe cannot be fitted: {e}") from None
    workers = probe["workers"]
    try:
        half = link_probe.half_extra(probe)
    except ValueError as e:
        raise opts.UsageError(f"the link probe: {e}") from None
    # Every worker measures, as every worker compresses during training: on shared
    # machines the codecs are then timed under the contention training has.
    profile = measure.profile(model, gradients, links, compressors, workers, fv.runs,
                              say=lambda text: print(text, file=out, flush=True), half_extra=half)
    if probe.get("rank", _launched_rank(fv.engine)) != 0:
        return  # worker 0 saves
    profile.save(fv.output)
    print(f"saved {fv.output}: {model.name}, {len(model.gradients)} gradients ({model.total_bytes / 2**20:.1f} MiB), "
          f"forward {1e3 * model.forward_s:.1f} ms, backward {1e3 * model.backward_s:.1f} ms, apply "
          f"{1e3 * model.apply_s:.1f} ms; allreduce {8 * links[ALLREDUCE].bandwidth_bytes_per_s / 1e9:.2f} Gbit/s "
          f"among {workers} workers; compressors: {', '.join(profile.compressors) or 'none'}", file=out)
