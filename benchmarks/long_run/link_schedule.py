"""A link that changes during a long run: the emulated cluster's links cycle
through rates on a schedule, so that tfcomp.Auto's re-planning has something
to re-plan for (a soak)."""
import dataclasses
import json
import threading
import time


@dataclasses.dataclass(frozen=True)
class Period:
    rate: object  # tc rate ("100mbit") or None: unshaped
    seconds: float

    @property
    def label(self):
        return self.rate or "unshaped"


def parse(entries):
    """Periods from ["unshaped:10", "100mbit:10"] (a tc rate or 'unshaped', then minutes)."""
    periods = []
    for entry in entries:
        rate, sep, minutes = entry.rpartition(":")
        try:
            seconds = 60.0 * float(minutes)
        except ValueError:
            seconds = -1.0
        if not sep or not rate or seconds <= 0:
            raise ValueError(f"a link period is RATE:MINUTES (RATE a tc rate such as 100mbit, or unshaped), "
                             f"got {entry!r}")
        periods.append(Period(None if rate == "unshaped" else rate, seconds))
    return periods


class LinkCycler(threading.Thread):
    """Applies the periods to a tests.cluster.netns_cluster.Cluster in turn, round and
    round, until stopped; each change is appended to `changes` ({"unix_time", "rate"})
    and, when log_path is given, written there at once as JSON lines."""

    def __init__(self, cluster, periods, log_path=None):
        super().__init__(daemon=True, name="tfcomp-link-cycler")
        self.cluster, self.periods, self.log_path = cluster, list(periods), log_path
        self.changes, self._stop_event = [], threading.Event()

    def run(self):
        index = 0
        while not self._stop_event.is_set():
            period = self.periods[index % len(self.periods)]
            self.cluster.set_rate(period.rate)
            change = {"unix_time": time.time(), "rate": period.label}
            self.changes.append(change)
            if self.log_path is not None:
                with open(self.log_path, "a") as log:
                    log.write(json.dumps(change) + "\n")
            self._stop_event.wait(period.seconds)
            index += 1

    def stop(self):
        self._stop_event.set()
        self.join()
