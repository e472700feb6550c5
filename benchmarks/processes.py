"""A process tree measured from /proc while it runs: CPU seconds, resident and proportional set size (peak), for
timing another toolkit the way the package is timed."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

# -- /proc: process trees, CPU time, memory --------------------------------------------------------------------
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float, float] | None:
    """``(ppid, utime + stime, cutime + cstime)`` in seconds, or ``None`` if the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; fields[0] is the state
    ppid = int(fields[1])
    own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    children = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
    return ppid, own, children


def process_tree(root: int) -> list[int]:
    """``root`` and all its live descendants (from every ``/proc/<pid>/stat``)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                parents.setdefault(st[0], []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, ()))
    return out


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root``'s tree so far: own time of every live process + children time of reaped ones."""
    total = 0.0
    for pid in process_tree(root):
        st = _stat(pid)
        if st is not None:
            total += st[1] + st[2]
    return total


def _status_kib(pid: int, keys: tuple[str, ...]) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in keys or key == "Name":
                out[key] = value.strip() if key == "Name" else int(value.split()[0])
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError, IndexError):
        return {}
    return out


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
        pass
    return 0


class TreeMonitor(threading.Thread):
    """Samples the memory of a process tree every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.hwm: dict[int, int] = {}  # pid -> largest VmHWM seen (KiB)
        self.names: dict[int, str] = {}
        self.max_rss_sum = 0
        self.max_pss_sum = 0
        self.samples = 0
        self._halt = threading.Event()

    def sample(self) -> None:
        rss_sum = pss_sum = 0
        pss_now = self.samples % 5 == 0  # smaps_rollup costs more: once a second
        for pid in process_tree(self.root):
            status = _status_kib(pid, ("VmHWM", "VmRSS"))
            if "VmHWM" not in status:
                continue
            self.names[pid] = str(status.get("Name", "?"))
            self.hwm[pid] = max(self.hwm.get(pid, 0), int(status["VmHWM"]))
            rss_sum += int(status.get("VmRSS", 0))
            if pss_now:
                pss_sum += _pss_kib(pid)
        self.max_rss_sum = max(self.max_rss_sum, rss_sum)
        self.max_pss_sum = max(self.max_pss_sum, pss_sum)
        self.samples += 1

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def report(self, root_maxrss_kib: int | None = None) -> dict[str, Any]:
        """Peak memory in MB (10^6 bytes); ``root_maxrss_kib``: ``wait4``'s ``ru_maxrss`` of the root."""
        hwm = dict(self.hwm)
        if root_maxrss_kib is not None and len(hwm) == 1:  # the root alone: wait4 saw its true peak
            hwm[self.root] = max(hwm.get(self.root, 0), root_maxrss_kib)
        procs = [
            {"pid": pid, "name": self.names.get(pid, "?"), "peak_rss_mb": round(kib * 1.024e-3, 1),
             "role": "main" if pid == self.root else "child"}
            for pid, kib in sorted(hwm.items())
        ]
        return {
            "peak_rss_sum_mb": round(sum(hwm.values()) * 1.024e-3, 1),
            "peak_rss_main_mb": round(hwm.get(self.root, 0) * 1.024e-3, 1),
            "max_concurrent_rss_mb": round(self.max_rss_sum * 1.024e-3, 1),
            "max_concurrent_pss_mb": round(self.max_pss_sum * 1.024e-3, 1),
            "wait4_maxrss_mb": None if root_maxrss_kib is None else round(root_maxrss_kib * 1.024e-3, 1),
            "processes": procs,
            "samples": self.samples,
        }


def wait_process(proc: subprocess.Popen) -> tuple[int, Any]:
    """Reap ``proc`` with ``wait4``: its exit status and resource usage (its own and its reaped descendants')."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage
