"""A results lake's run partitions for the trace audit: listed, packed into tasks, or audited here.

Responsibility: list the run partition directories of a results lake (`run_partitions`, and
with their sizes `run_sizes`), pack them into bins of about equal bytes (`pack`: one Spark task
each, the shuffle-free plans of `reports.audit.plan` and of the upgrade pre-flight), and audit a
whole lake in this process, run after run (`audit_lake`: the `driver` audit plan, tests, the
single-process benchmark). No Spark: the driver lists, `reports.audit.partition` audits.

Rules: a root is a local path or a URI (file://, s3://, hdfs://...); directories come back as
URIs, openable wherever the lake is (the executors too).
"""

from __future__ import annotations

import heapq
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from conformance.results.records import PARTITION_KEY
from reports.audit.partition import audit_runs
from reports.schema import VIOLATIONS


def run_partitions(root: str | Path) -> list[tuple[str, str]]:
    """(run id, directory) of every run partition of `root`/frames (local path or URI)."""
    fs, base = pafs.FileSystem.from_uri(_uri(root))
    frames = f"{base.rstrip('/')}/frames"
    if fs.get_file_info(frames).type != pafs.FileType.Directory:
        return []
    found = []
    for info in fs.get_file_info(pafs.FileSelector(frames)):
        if info.type == pafs.FileType.Directory and info.base_name.startswith(f"{PARTITION_KEY}="):
            run = info.base_name.split("=", 1)[1]
            found.append((run, _join_uri(root, f"frames/{info.base_name}")))
    return sorted(found)


def run_sizes(root: str | Path) -> list[tuple[str, str, int]]:
    """(run id, directory, bytes of its part files) of every run partition of `root`/frames."""
    found = []
    for run, directory in run_partitions(root):
        fs, path = pafs.FileSystem.from_uri(directory)
        infos = fs.get_file_info(pafs.FileSelector(path))
        found.append((run, directory, sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)))
    return found


def _uri(root: str | Path) -> str:
    text = str(root)
    return text if "://" in text else Path(text).resolve().as_uri()


def _join_uri(root: str | Path, relative: str) -> str:
    return f"{_uri(root).rstrip('/')}/{relative}"


def pack(runs: list[tuple[str, str, int]], slots: int) -> list[list[str]]:
    """Run directories in at most `slots` bins of about equal total size (largest first)."""
    bins: list[tuple[int, int, list[str]]] = [(0, n, []) for n in range(min(slots, len(runs)))]
    for _, directory, size in sorted(runs, key=lambda r: -r[2]):
        total, n, members = heapq.heappop(bins)
        members.append(directory)
        heapq.heappush(bins, (total + size, n, members))
    return [members for _, _, members in sorted(bins, key=lambda b: b[1]) if members]



def audit_lake(root: str | Path) -> pa.Table:
    """The single-process audit of a whole results directory."""
    tables = list(audit_runs([d for _, d in run_partitions(root)]))
    return pa.concat_tables(tables) if tables else VIOLATIONS.empty_table()
