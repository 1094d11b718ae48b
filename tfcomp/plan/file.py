"""The plan file `python -m tfcomp.analysis plan --output=PATH` writes and tfcomp.Plan.load
reads: JSON, {"format": FORMAT, "version": VERSION, "choices": {tensor name: compressor
spec or None}, ...what the planner measured and predicted}. A spec is what
tfcomp.compressors.registry.parse_compressor reads ("PowerSGD:rank=4"), with GPU_SUFFIX
where the planner chose the GPU variant of a compressor. The standard library only."""
import json

FORMAT, VERSION = "tfcomp.analysis.plan", 1
GPU_SUFFIX = "@gpu"  # a compressor measured (and chosen) on the GPU: "DGC:ratio=0.01@gpu"


def header():
    """What a plan file begins with."""
    return {"format": FORMAT, "version": VERSION}


def read_choices(path):
    """{tensor name: spec} of the tensors a plan file compresses (dense ones left out).
    ValueError names the file and what is wrong with it."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"Plan.load: cannot read {path}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"Plan.load: {path} is not a plan written by `python -m tfcomp.analysis plan "
                         f"--output` (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise ValueError(f"Plan.load: {path} is plan format version {data.get('version')!r}; this tfcomp "
                         f"reads version {VERSION}")
    return {name: spec for name, spec in data["choices"].items() if spec is not None}
