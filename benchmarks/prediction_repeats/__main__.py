"""tfcomp.analysis's predictions against repeated measurements of the same runs.

    python -m benchmarks.prediction_repeats \\
        --runs=benchmarks/results/e2e/validation-vgg16/runs.jsonl,benchmarks/results/plan_regret_vgg16 \\
        --profiles=benchmarks/results/e2e/validation-vgg16/profiles --output=benchmarks/results/prediction_repeats

One harness run's median step on this shared 2-core machine can be 10-30% off
another run's of the same configuration, so an error measured against one run is
the model's error plus the measurement's. This report takes every configuration
(model, engine, workers, link, compressor or plan) measured in two runs or more
(benchmarks.e2e grids and benchmarks.plan_regret repeats with the same profiles),
predicts it once from its cluster's profile with this tfcomp.analysis, and gives:

- the measurement's own repeatability: each run's median step against the median
  over the configuration's runs;
- the prediction's error against each run alone (what benchmarks.e2e reports);
- the prediction's error against the median over the runs.

Writes OUTPUT/NAME.md and OUTPUT/NAME.png (predicted against measured, the runs'
range as error bars). Nothing trains here (TensorFlow is loaded only to read the
compressor specs, through tfcomp.compressors.registry).
"""
import dataclasses
import json
import pathlib
import statistics
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position
from absl import app, flags  # pylint: disable=wrong-import-position

from benchmarks.harness import compression_specs, plots, prediction  # pylint: disable=wrong-import-position
from tfcomp.analysis.model.profile import Profile  # pylint: disable=wrong-import-position

FLAGS = flags.FLAGS


def define_flags():
    """Its flags, defined only when it runs as a command: the tests import it beside
    other benchmarks whose flags share names (--output, --profiles)."""
    flags.DEFINE_list("runs", [], "runs.jsonl files, or directories holding one (a benchmarks.plan_regret output: "
                      "its repeat<k>/ directories are read too).")
    flags.DEFINE_string("profiles", None, "Directory of the profiles the runs' clusters recorded, named "
                        "ENGINE-<workers>w-<link>-<model>.json (benchmarks.e2e --predict).")
    flags.DEFINE_string("output", "benchmarks/results/prediction_repeats", "Directory for NAME.md and NAME.png.")
    flags.DEFINE_string("name", "prediction_repeats", "Base name of the report files.")
    flags.DEFINE_integer("min_runs", 2, "Configurations measured fewer times are left out (1: every "
                         "configuration, for one grid's runs with --model_from_link).", lower_bound=1)
    flags.DEFINE_string("model_from_link", None, "Predict every run from the model profile (forward, backward, apply, "
                        "gradients) recorded on the cluster of this link (e.g. 'unlimited'), with its own cluster's "
                        "link, vector-add and codec measurements: the what-if use, one model profile for every "
                        "link. Default: each cluster's own profile, as benchmarks.e2e predicts.")


KEY = ("model", "size", "engine", "workers", "link", "compression")


def runs_files(paths):
    """Every runs.jsonl named: files as given, directories' own and their repeat<k>/ ones."""
    out = []
    for path in map(pathlib.Path, paths):
        if path.is_dir():
            out += [p for p in [path / "runs.jsonl", *sorted(path.glob("repeat*/runs.jsonl"))] if p.exists()]
        elif path.exists():
            out.append(path)
        else:
            raise FileNotFoundError(f"no runs at {path}")
    return out


def measured_configurations(records, min_runs):
    """{key: [step ms of each run]} of the configurations run at least min_runs times
    (Auto left out: it decides while it runs, so it has no one prediction)."""
    grouped = {}
    for r in records:
        if r.get("status") != "ok" or r["compression"] == compression_specs.AUTO:
            continue
        key = tuple(r[k] for k in KEY[:-1]) + (r.get("runs_with", r["compression"]),)  # a plan's own file
        grouped.setdefault(key, []).append(r["step_ms"])
    return {k: v for k, v in grouped.items() if len(v) >= min_runs}


def profile_path(profiles, key):
    model, _, engine, workers, link, _ = key
    return pathlib.Path(profiles) / f"{engine}-{workers}w-{link}-{model}.json"


def with_model_from(path, model_path, scratch):
    """A profile file in scratch: path's profile with its model replaced by model_path's."""
    combined = dataclasses.replace(Profile.load(path), model=Profile.load(model_path).model)
    out = pathlib.Path(scratch) / pathlib.Path(path).name
    combined.save(out)
    return out


def rows(configurations, predict):
    """One row per configuration with a prediction: runs, their median, spread, errors."""
    out = []
    for key, runs in configurations.items():
        predicted = predict(key)
        if predicted is None:
            continue
        median = statistics.median(runs)
        out.append({**dict(zip(KEY, key)), "runs_ms": runs, "median_ms": median, "predicted_ms": predicted,
                    "run_deviations": [ms / median - 1 for ms in runs],
                    "run_errors": [predicted / ms - 1 for ms in runs],
                    "error": predicted / median - 1})
    return out


def _med_max(values):
    values = [abs(v) for v in values]
    return statistics.median(values), max(values)


def summary(table):
    """{name: (median |x|, max |x|)} of the three comparisons."""
    return {"repeatability": _med_max([d for r in table for d in r["run_deviations"]]),
            "against each run": _med_max([e for r in table for e in r["run_errors"]]),
            "against the median": _med_max([r["error"] for r in table])}


def _label(compression):
    return "plan" if compression_specs.is_plan(compression) else compression


def markdown(table, command):
    stats = summary(table)
    runs = sum(len(r["runs_ms"]) for r in table)
    pct = lambda pair: f"median {100 * pair[0]:.1f}%, max {100 * pair[1]:.1f}%"  # noqa: E731
    lines = ["# Predictions against repeated measurements", "", f"`{command}`", "",
             f"{len(table)} configurations, {runs} runs. Each run's ms/step is its median step; "
             "'plan' is the plan `python -m tfcomp.analysis plan` made from the same profile.", "",
             "| comparison | |error| |", "|---|---|",
             f"| one run against the median of its configuration's runs (the measurement's repeatability) "
             f"| {pct(stats['repeatability'])} |",
             f"| prediction against each run alone | {pct(stats['against each run'])} |",
             f"| prediction against the median of the runs | {pct(stats['against the median'])} |", "",
             "| model | engine | workers | link | compression | runs ms | median ms | spread | predicted ms "
             "| error vs median |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        spread = (max(r["runs_ms"]) - min(r["runs_ms"])) / r["median_ms"]
        lines.append(f"| {r['model']} ({r['size']}) | {r['engine']} | {r['workers']} | {r['link']} | "
                     f"{_label(r['compression'])} | {' / '.join(f'{ms:.1f}' for ms in r['runs_ms'])} | "
                     f"{r['median_ms']:.1f} | {100 * spread:.0f}% | {r['predicted_ms']:.1f} | "
                     f"{100 * r['error']:+.1f}% |")
    return "\n".join(lines) + "\n"


def plot(path, table):
    stats = summary(table)
    fig, ax = plt.subplots(figsize=(5.8, 5.2))
    for label in dict.fromkeys(_label(r["compression"]) for r in table):
        mine = [r for r in table if _label(r["compression"]) == label]
        x = [r["median_ms"] for r in mine]
        low = [r["median_ms"] - min(r["runs_ms"]) for r in mine]
        high = [max(r["runs_ms"]) - r["median_ms"] for r in mine]
        ax.errorbar(x, [r["predicted_ms"] for r in mine], xerr=[low, high], fmt="o", markersize=4,
                    elinewidth=0.8, capsize=2, label=label)
    bottom = min(min(min(r["runs_ms"]), r["predicted_ms"]) for r in table) * 0.8
    top = max(max(max(r["runs_ms"]), r["predicted_ms"]) for r in table) * 1.25
    plots.diagonal_axes(ax, bottom, top, "measured ms/step: median over runs (bars: the runs' range)")
    median, worst = stats["against the median"]
    rep = stats["repeatability"]
    ax.set_title(f"against the median of runs: median |error| {100 * median:.1f}%, max {100 * worst:.1f}%\n"
                 f"one run against that median: median {100 * rep[0]:.1f}%, max {100 * rep[1]:.1f}% "
                 "(dotted: ±15%)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.runs or not FLAGS.profiles:
        raise app.UsageError("--runs and --profiles are required")
    records = [json.loads(line) for path in runs_files(FLAGS.runs)
               for line in path.read_text().splitlines() if line.strip()]
    configurations = measured_configurations(records, FLAGS.min_runs)

    scratch = tempfile.TemporaryDirectory()

    def predict(key):
        path = profile_path(FLAGS.profiles, key)
        if not path.exists():
            return None
        if FLAGS.model_from_link:
            model_path = profile_path(FLAGS.profiles, key[:4] + (FLAGS.model_from_link,) + key[5:])
            if not model_path.exists():
                raise app.UsageError(f"--model_from_link={FLAGS.model_from_link}: no profile {model_path}")
            path = with_model_from(path, model_path, scratch.name)
        return prediction.predicted_step_ms(path, key[2], key[3], key[5], prediction.burst_bytes(key[4]))

    with scratch:
        table = rows(configurations, predict)
    if not table:
        raise app.UsageError(f"no configuration was measured {FLAGS.min_runs} times or more with a profile in "
                             f"{FLAGS.profiles}")
    out = pathlib.Path(FLAGS.output)
    out.mkdir(parents=True, exist_ok=True)
    command = ("python -m benchmarks.prediction_repeats " +
               " ".join(filter(None, (FLAGS[f].serialize() for f in ("runs", "profiles", "output", "name", "min_runs",
                                                                      "model_from_link")))))
    (out / f"{FLAGS.name}.md").write_text(markdown(table, command))
    plot(out / f"{FLAGS.name}.png", table)
    for name, (median, worst) in summary(table).items():
        print(f"{name}: median {100 * median:.1f}%, max {100 * worst:.1f}%")
    print(f"wrote {out / FLAGS.name}.md and .png")


if __name__ == "__main__":
    define_flags()
    app.run(main)
