"""`python -m reference_broker --port 5673 [--config FILE]`: run the reference broker."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from reference_broker import faults
from reference_broker.config import load_config
from reference_broker.server import BrokerServer
from reference_broker.storage import StorageError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reference-broker", description="AMQP 0-9-1 reference broker "
                                "with RabbitMQ 4.3 semantics (legacy mode: 3.x)")
    p.add_argument("--config", help="TOML file with any BrokerConfig key")
    p.add_argument("--host", help="listen address (default 127.0.0.1; 0.0.0.0 only when asked)")
    p.add_argument("--port", type=int, help="AMQP port (default 5673)")
    p.add_argument("--nodes", type=int, help="run as a cluster of N nodes on consecutive ports from --port "
                   "(the management API's PUT /api/nodes/{node} stops and starts them)")
    p.add_argument("--management-port", type=int, help="serve the management API subset on this port")
    p.add_argument("--data-dir", help="keep durable definitions and persistent messages here (SQLite)")
    p.add_argument("--timeout-mode", choices=["4.3", "legacy"], help="consumer-timeout rules")
    p.add_argument("--legacy-ruleset", choices=["3.10", "3.12"])
    p.add_argument("--fault", action="append", dest="faults", metavar="NAME",
                   help=f"switch on a named fault (reference_broker/faults.py; repeatable; also {faults.ENV})")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


async def serve(server: BrokerServer) -> None:
    await server.start()
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config, host=args.host, port=args.port, timeout_mode=args.timeout_mode,
                             legacy_ruleset=args.legacy_ruleset, management_port=args.management_port,
                             data_dir=args.data_dir, nodes=args.nodes)
        config.faults = [*config.faults, *(args.faults or []), *faults.from_environment()]
        faults.check(config.faults)
    except ValueError as exc:  # ConfigError, or an unknown fault
        print(f"reference-broker: {exc}", file=sys.stderr)
        return 4
    server = BrokerServer(config)
    try:
        import uvloop  # type: ignore[import-not-found]

        runner: object = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(serve(server))  # type: ignore[operator]
    except KeyboardInterrupt:
        pass
    except StorageError as exc:
        print(f"reference-broker: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"reference-broker: cannot listen on {config.host}:{config.port}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
