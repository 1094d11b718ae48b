"""Which processes are still running, from /proc: the launchers' tests check
that a failed job leaves none behind."""
import os
import pathlib


def running(marker):
    """[(pid, command line)] of this machine's processes whose command line contains marker."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = next((line.split()[1] for line in (entry / "status").read_text().splitlines()
                          if line.startswith("State:")), "")
        except OSError:
            continue  # ended while being read
        if marker in cmdline and state != "Z":
            found.append((int(entry.name), cmdline))
    return found
