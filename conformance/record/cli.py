"""`amqp-conformance record`: record real traffic (a relay) or import a capture, into a results lake.

Responsibility: the subcommand's options and its run.
- `--listen HOST:PORT --upstream amqp://HOST:PORT`: run the recording relay until SIGINT or
  SIGTERM (or `--duration` seconds), flushing every `--flush-interval` seconds; prints the run
  id and where the frames go, and at the end how many connections and frames were recorded.
- `--pcap FILE [--broker-port 5672]`: import a pcap/pcapng capture instead.
Either way the frames land in `--out` (a results directory) as one run that
`amqp-conformance report --results DIR` audits.

Rules: exit 0 on success; 4 (usage) for bad addresses, a missing capture or both modes at
once; 2 when the listen address cannot be bound or the capture cannot be read.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

import dpkt

from conformance.interpose.relay import Relay
from conformance.record.lake_sink import LakeSink
from conformance.record.pcap import import_capture
from conformance.results.lake import RecordingLake
from conformance.results.verdicts import EXIT_HARNESS, EXIT_OK, EXIT_USAGE


class UsageError(Exception):
    """A bad command line (exit 4)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", metavar="HOST:PORT", help="accept clients here (port 0: any free port)")
    parser.add_argument("--upstream", metavar="amqp://HOST:PORT", help="the broker the clients are relayed to")
    parser.add_argument("--pcap", type=Path, metavar="FILE", help="import a pcap or pcapng capture instead")
    parser.add_argument("--broker-port", type=int, default=5672, help="the broker's port in the capture (5672)")
    parser.add_argument("--out", type=Path, required=True, metavar="RESULTS_DIR", help="the results lake to add to")
    parser.add_argument("--flush-interval", type=float, default=1.0, metavar="S",
                        help="write buffered frames at least this often (a crash loses at most this much)")
    parser.add_argument("--duration", type=float, default=None, metavar="S", help="stop after S seconds")


def host_port(text: str, what: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"{what} {text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def upstream_address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "") or not parts.hostname:
        raise UsageError(f"--upstream {url!r}: expected amqp://HOST:PORT")
    return parts.hostname, parts.port or 5672


def run(args: argparse.Namespace) -> int:
    if args.pcap is not None:
        if args.listen or args.upstream:
            raise UsageError("--pcap imports a capture: --listen and --upstream belong to the relay")
        if not args.pcap.is_file():
            raise UsageError(f"--pcap {args.pcap}: no such file")
        return _import(args)
    if not args.listen or not args.upstream:
        raise UsageError("record needs --listen HOST:PORT and --upstream amqp://HOST:PORT (or --pcap FILE)")
    listen = host_port(args.listen, "--listen")
    upstream = upstream_address(args.upstream)
    return asyncio.run(_relay(args, listen, upstream))


def _import(args: argparse.Namespace) -> int:
    lake = RecordingLake(args.out, f"pcap:{args.pcap.name}")
    try:
        stats = import_capture(args.pcap, lake, args.broker_port)
    except (OSError, ValueError, dpkt.UnpackError) as exc:
        print(f"amqp-conformance: error: cannot read {args.pcap}: {exc}", file=sys.stderr)
        lake.close(EXIT_HARNESS)
        return EXIT_HARNESS
    lake.close(EXIT_OK)
    print(f"imported {args.pcap}: run {lake.run_id}, {stats.connections} connection(s) "
          f"({stats.mid_stream} mid-stream), {lake.frames_written} frames -> {args.out}")
    return EXIT_OK


async def _relay(args: argparse.Namespace, listen: tuple[str, int], upstream: tuple[str, int]) -> int:
    lake = RecordingLake(args.out, args.upstream)
    relay = Relay(upstream, LakeSink(lake, args.flush_interval))
    try:
        host, port = await relay.start(*listen)
    except OSError as exc:
        print(f"amqp-conformance: error: cannot listen on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        lake.close(EXIT_HARNESS)
        return EXIT_HARNESS
    print(f"recording: amqp://{host}:{port} -> {args.upstream}, run {lake.run_id} -> {args.out}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), args.duration)
    await relay.close()
    lake.close(EXIT_OK)
    s = relay.stats
    print(f"recorded {s.connections} connection(s) ({s.refused} refused upstream, {s.resets} reset), "
          f"{lake.frames_written} frames, {s.bytes_out + s.bytes_in} bytes", flush=True)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """`python -m conformance.record.cli` (the same options as `amqp-conformance record`)."""
    parser = argparse.ArgumentParser(prog="python -m conformance.record.cli", description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except UsageError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
