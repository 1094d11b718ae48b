"""One worker of a link probe (tfcomp.analysis.measure.link_probe): times the engine's own
allreduce and allgather (tf.distribute's collectives, or Horovod's over Gloo) over
message sizes, and writes [(bytes per worker, median seconds)] per collective as
JSON, for tfcomp.analysis.model.link_fit to turn into latency and bandwidth.

--max_bytes bounds the largest message, so that a probe of a slow link stays short.
"""
import json
import pathlib

from absl import app, flags

from tfcomp.analysis.measure import link_probe

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Result JSON path (with --engine=horovod: a directory for rank<r>.json).")
flags.DEFINE_enum("engine", "tf.distribute", list(link_probe.ENGINES), "Whose collectives to time.")
flags.DEFINE_integer("max_bytes", 8 << 20, "Largest message per worker, in bytes.", lower_bound=4096)
flags.DEFINE_integer("runs", 7, "Timed runs per size (the median is kept).", lower_bound=1)


def main(argv):
    del argv
    result = link_probe.probe(FLAGS.engine, FLAGS.max_bytes, FLAGS.runs)
    path = pathlib.Path(FLAGS.out)
    if FLAGS.engine == "horovod":
        path.mkdir(parents=True, exist_ok=True)
        path = path / f"rank{result['rank']}.json"
    path.write_text(json.dumps(result))


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
