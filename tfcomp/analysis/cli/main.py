"""`python -m tfcomp.analysis SUBCOMMAND --flag=value ...`: record a profile on this
cluster (profile, with TensorFlow), and what a saved profile predicts (predict and
whatif, without TensorFlow). SUBCOMMAND --help lists its flags.

Each subcommand parses its own absl FlagValues, made afresh at every call, so its
--help lists its flags only and one process can run several (the tests do). A
user's mistake (a bad flag, an unreadable profile, an unknown compressor) ends in
one line on stderr and exit status 1, without a traceback.
"""
import importlib
import sys
import textwrap

from absl import flags

from tfcomp.analysis.cli import options as opts

PROGRAM = "python -m tfcomp.analysis"
# Imported when used: predict needs neither numpy (whatif's sweeps) nor the planner.
SUBCOMMANDS = ("profile", "predict", "whatif", "plan")  # each a module of tfcomp.analysis.cli
HELP_FLAGS = ("-h", "--help", "-help", "--helpshort", "--helpfull")
USER_ERROR = 1


def subcommand_module(subcommand):
    return importlib.import_module(f"tfcomp.analysis.cli.{subcommand}")


def flag_values(subcommand):
    """A fresh FlagValues holding the subcommand's flags at their defaults."""
    fv = flags.FlagValues()
    subcommand_module(subcommand).define_flags(fv)
    return fv


def _default(flag):
    value = flag.default
    if value is None or value == []:
        return ""
    if isinstance(value, bool):
        return f" (default: {str(value).lower()})"
    if isinstance(value, list):
        return f" (default: {','.join(value)})"
    return f" (default: {value:g})" if isinstance(value, float) else f" (default: {value})"


def flags_help(fv):
    """Every flag of fv, one paragraph each, in the order defined."""
    out = []
    for name in fv:
        flag = fv[name]
        usage = f"--[no]{name}" if flag.boolean else f"--{name}"
        out.append(textwrap.fill(f"{usage}: {flag.help}{_default(flag)}", width=100, initial_indent="  ",
                                 subsequent_indent="      "))
    return "\n".join(out)


def subcommand_help(subcommand):
    return (f"usage: {PROGRAM} {subcommand} --flag=value ...\n\n"
            f"{subcommand_module(subcommand).SUMMARY.capitalize()}.\n\nflags:\n{flags_help(flag_values(subcommand))}")


def usage():
    lines = [f"usage: {PROGRAM} {{{','.join(SUBCOMMANDS)}}} --flag=value ...", "",
             "Record a tfcomp.analysis profile on this cluster (profile, with TensorFlow), then predict from it "
             "(predict, whatif) or plan per-tensor compression with it (plan): numpy only.", ""]
    for name in SUBCOMMANDS:
        lines += [f"{name}: {subcommand_module(name).SUMMARY}.", flags_help(flag_values(name)), ""]
    return "\n".join(lines)


def main(argv, out=None, err=None):
    """Runs `PROGRAM argv[1:]`; returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    args = argv[1:]
    if not args or args[0] in HELP_FLAGS + ("help",):
        print(usage(), file=out if args else err)
        return 0 if args else USER_ERROR
    command, rest = args[0], args[1:]
    if command not in SUBCOMMANDS:
        print(f"{PROGRAM}: error: unknown subcommand {command!r}; choose from {', '.join(SUBCOMMANDS)} "
              "(--help lists their flags)", file=err)
        return USER_ERROR
    if any(a in HELP_FLAGS for a in rest):
        print(subcommand_help(command), file=out)
        return 0
    fv = flag_values(command)
    try:
        extra = fv([f"{PROGRAM} {command}", *rest])[1:]
        if extra:
            raise opts.UsageError(f"unexpected arguments {' '.join(extra)}: flags take the form --name=value")
        subcommand_module(command).run(fv, out)
    except (opts.UsageError, flags.Error) as e:
        print(f"{PROGRAM} {command}: error: {e}", file=err)
        return USER_ERROR
    return 0
