"""An emulated slow network for localhost workers: a network namespace whose
loopback is shaped by a token-bucket filter (tc tbf). Needs root.

A limit on lo shapes both directions together. Its burst must exceed lo's
64 KiB MTU; netem (delay, loss) is not in every kernel, so only the rate is
shaped.
"""
import contextlib
import os
import subprocess
import uuid


def _run(*command):
    subprocess.run(command, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def emulated_link(rate="1gbit", burst="256kb", latency="10ms"):
    """Yields the command prefix that runs a process inside the shaped namespace;
    the namespace is deleted on exit, whatever happened inside."""
    if os.geteuid() != 0:
        raise PermissionError("emulating a slow link needs root (network namespaces and tc)")
    name = f"tfcomp-{uuid.uuid4().hex[:8]}"
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        _run("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", "tbf",
             "rate", rate, "burst", burst, "latency", latency)
        yield ("ip", "netns", "exec", name)
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)
