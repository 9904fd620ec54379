"""`pte audit ...`: verify (with checkpoints), show, checkpoint, keygen, report, export (a store's run,
its anchor chain).

Exit codes as for every command: 0 ok, 1 the log (or a checkpoint) does not hold, 2 usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from pte._cli._deployment import EXIT_FAILED, EXIT_OK, _add_json, _print_json
from pte._cli._support import UsageError, input_file, output_file

__all__ = ["add_audit_commands"]


def _existing_log(path: str) -> str:
    input_file(path, "audit log")  # a missing, directory or FIFO path is a usage error
    return path


#: `pte audit verify` uses one process per CPU by default, up to this many.
_MAX_JOBS = 8


def _jobs(value: str | None) -> int:
    """``--jobs``: a positive count, or (not given) one per CPU up to `_MAX_JOBS`."""
    if value is None:
        return min(os.cpu_count() or 1, _MAX_JOBS)
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise UsageError(f"--jobs must be a positive whole number, not {value!r}")
    return jobs


def _deployment_anchors() -> Any:
    """The deployment's anchors, for checking (public key), or None when no key is configured."""
    from pte._cli._deployment import _deployment_anchors as anchors

    return anchors()


def print_verdict(verdict: Any, first: str) -> None:
    """`first` (the verdict in one line), then each check: what was checked, what was not, and why."""
    print(first)
    for check in verdict.checks:
        print(f"  {check.name:<10} {check.state}: {check.detail}")


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from pte._audit import load_public_key, verdict
    from pte._core import CheckpointError
    from pte.stores import is_store_url

    if is_store_url(args.log):
        if args.checkpoint is not None:
            raise UsageError("--checkpoint works on an audit log file, not a store URL")
        import pte._cli._store as cli_store

        return cli_store.audit_verify(args)
    log = _existing_log(args.log)
    if (args.checkpoint is None) != (args.public_key is None):
        raise UsageError("--checkpoint and --public-key go together")
    jobs = _jobs(args.jobs)
    input_file(args.checkpoint, "checkpoint file")
    anchors = _deployment_anchors()
    try:
        key = load_public_key(args.public_key) if args.public_key is not None else None
        found = verdict(log, anchors=anchors, checkpoint=args.checkpoint, public_key=key, jobs=jobs)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    report = found.report
    if args.json:
        checkpoint = found.checkpoint
        _print_json(
            {
                **report.to_dict(),
                **found.to_dict(),
                "checkpoint": None if checkpoint is None else checkpoint.to_dict(),
            }
        )
        return EXIT_OK if found.ok else EXIT_FAILED
    fmt = f"format {report.format}" + (" (legacy, read-only)" if report.format == 1 else "")
    if found.ok:
        first = f"ok: {report.records} record(s), {report.runs} run(s), {fmt}"
    elif found.status == "incomplete":
        first = f"incomplete: {found.problem}"
    else:
        first = f"FAILED: {found.problem}"
    print_verdict(found, first)
    return EXIT_OK if found.ok else EXIT_FAILED


def cmd_audit_show(args: argparse.Namespace) -> int:
    from pte._audit import iter_records, render_record
    from pte._core import AuditFormatError
    from pte._replay import StepsSummary
    from pte.stores import is_store_url

    if is_store_url(args.log):
        import pte._cli._store as cli_store

        return cli_store.audit_show(args)
    log = _existing_log(args.log)
    # Streamed: one record in memory at a time, whatever the size of the log; each run's steps
    # summary (RunView's statuses) follows its records, folded from its step records only.
    shown = 0
    steps = StepsSummary()
    try:
        for _, record in iter_records(log, skip_partial_tail=True):
            for line in steps.add(record):
                print(line)
            print(render_record(record))
            shown += 1
        for line in steps.finish():
            print(line)
    except AuditFormatError as exc:
        print(f"cannot read {log}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not shown:
        print(f"nothing to show: {log} holds no complete record", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def cmd_audit_checkpoint(args: argparse.Namespace) -> int:
    from pte._audit import load_private_key, write_checkpoint
    from pte._core import CheckpointError

    log = _existing_log(args.log)
    out = str(output_file(args.out or f"{log}.checkpoints", "checkpoint file"))
    try:
        key = load_private_key(args.key)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    try:
        checkpoint = write_checkpoint(log, key, out)
    except CheckpointError as exc:
        print(f"FAILED: {exc}")
        return EXIT_FAILED
    except OSError as exc:
        raise UsageError(f"cannot write checkpoint file {out!r}: {exc.strerror or exc}") from None
    if args.json:
        _print_json({**checkpoint.to_dict(), "file": out})
    else:
        print(
            f"checkpoint appended to {out}: {checkpoint.records} record(s), head {checkpoint.head[:16]}…, "
            f"log {checkpoint.log_id[:16]}…, key {checkpoint.key_id[:16]}…"
        )
    return EXIT_OK


def cmd_audit_keygen(args: argparse.Namespace) -> int:
    from pte._audit import generate_key
    from pte._core import CheckpointError

    output_file(args.path, "key file")
    try:
        public = generate_key(args.path)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.path!r}: {exc.strerror or exc}") from None
    print(f"Ed25519 key written to {args.path} (keep it secret) and {public} (give it to verifiers)")
    return EXIT_OK


def cmd_audit_report(args: argparse.Namespace) -> int:
    from pte._core import CheckpointError, ReportError
    from pte._replay import write_report
    from pte.stores import is_store_url

    if is_store_url(args.log):
        return _store_report(args)
    log = _existing_log(args.log)
    if (args.checkpoint is None) != (args.public_key is None):
        raise UsageError("--checkpoint and --public-key go together")
    input_file(args.checkpoint, "checkpoint file")
    output_file(args.out, "report")
    try:
        path = write_report(
            log,
            args.out,
            run_id=args.run,
            checkpoint=args.checkpoint,
            public_key=args.public_key,
            anchors=_deployment_anchors(),
        )
    except (ReportError, CheckpointError) as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.out!r}: {exc.strerror or exc}") from None
    print(f"report written to {path}")
    return EXIT_OK


def _store_report(args: argparse.Namespace) -> int:
    """``pte audit report STORE_URL --run ID -o FILE``: one stored run, verified as stored."""
    from pte._core import ReportError
    from pte._replay import render_store_report
    from pte.stores import StoreError, open_store

    if args.run is None:
        raise UsageError("--run RUN_ID is required with a store URL")
    if args.checkpoint is not None or args.public_key is not None:
        raise UsageError("--checkpoint works on an audit log file, not a store URL")
    output_file(args.out, "report")
    try:
        with open_store(args.log) as store:
            page = render_store_report(store, args.run, anchors=_deployment_anchors())
    except (ReportError, StoreError) as exc:
        raise UsageError(str(exc)) from None
    try:
        Path(args.out).write_text(page, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.out!r}: {exc.strerror or exc}") from None
    print(f"report written to {args.out}")
    return EXIT_OK


def _sql_store(url: str) -> Any:
    """The SQLite or PostgreSQL run store at `url` (opened as evidence: nothing is created)."""
    from pte._cli._store import _store
    from pte.stores import is_store_url

    if not is_store_url(url) or not url.startswith(("sqlite:", "postgresql://", "postgres://")):
        raise UsageError(
            f"{url[:200]!r} is not a sqlite: or postgresql:// run store URL (the store a deployment made "
            "with `pte init --anchors store` keeps its anchor chain in)"
        )
    return _store(url, evidence=True)


def _new_file(path: str, what: str) -> Path:
    """`path` for a new file: refused when something is there (an export never replaces a file)."""
    out = Path(output_file(path, what))
    if out.exists():
        raise UsageError(f"{path!r} exists; an export never replaces a file: give a new name")
    return out


def cmd_audit_anchors_export(args: argparse.Namespace) -> int:
    """The anchor chain a store keeps (``pte_anchors``), as the anchors file verifiers read: the
    lines exactly as signed, so whoever exports them cannot change one without the verifier
    (which checks the deployment key's signatures) refusing it."""
    from pte._core import AnchorError

    out = _new_file(args.file, "anchors file")
    with _sql_store(args.store_url) as store:
        try:
            lines = store.anchor_lines(0)
        except AnchorError as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return EXIT_FAILED
        where = store.describe()
    out.write_bytes(b"".join(line + b"\n" for line in lines))
    if args.json:
        _print_json({"status": "ok", "store": where, "anchors": len(lines), "file": str(out)})
    else:
        print(f"{len(lines)} anchor(s) of the chain in {where} written to {out}")
        print(
            "a run exported with `pte audit export` is checked against them by verifier/verify.mjs "
            "(--deployment-key, the deployment's public key, and --anchors this file)"
        )
    return EXIT_OK


def cmd_audit_export(args: argparse.Namespace) -> int:
    """One run of a store as an audit log file: its records' exact lines, in ``seq`` order (a
    run in a store is a chain of its own, so the file verifies as a log of one run)."""
    from pte.stores import StoreError, check_run_id

    try:
        run_id = check_run_id(args.run)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    out = _new_file(args.file, "audit log")
    with _sql_store(args.store_url) as store:
        data = b"".join(store.lines(run_id))
        where = store.describe()
    if not data:
        print(f"no run {run_id} in {where}", file=sys.stderr)
        return EXIT_FAILED
    out.write_bytes(data)
    if args.json:
        _print_json({"status": "ok", "store": where, "run_id": run_id, "file": str(out)})
    else:
        count = data.count(b"\n")
        print(f"run {run_id} of {where} written to {out} ({count} record(s))")
    return EXIT_OK


def add_audit_commands(sub: Any) -> None:
    """Register the ``pte audit`` sub-commands on `sub` (an argparse sub-parsers action)."""
    p = sub.add_parser("verify", help="check the hash chain, the schema and that every run is sealed")
    p.add_argument("log", metavar="LOG|STORE_URL")
    p.add_argument("--run", metavar="RUN_ID", help="with a store URL: one run (default: every run)")
    p.add_argument("--checkpoint", metavar="FILE", help="also check the log against these signed checkpoints")
    p.add_argument(
        "--jobs",
        metavar="N",
        help="processes to verify a large log file with, each taking a part (default: one per CPU, up to 8)",
    )
    p.add_argument(
        "--public-key", metavar="KEY", help="Ed25519 public key of the checkpoints (PEM file or env:NAME)"
    )
    _add_json(p)
    p.set_defaults(func=cmd_audit_verify)

    p = sub.add_parser("show", help="a readable timeline of the runs in a log")
    p.add_argument("log", metavar="LOG|STORE_URL")
    p.add_argument("--run", metavar="RUN_ID", help="with a store URL: the run to show")
    p.set_defaults(func=cmd_audit_show)

    p = sub.add_parser("checkpoint", help="append a signed checkpoint (log id, records, head hash, time)")
    p.add_argument("log")
    p.add_argument("--key", required=True, metavar="KEY", help="Ed25519 signing key (PEM file or env:NAME)")
    p.add_argument("-o", "--out", metavar="FILE", help="checkpoint file (default: LOG.checkpoints)")
    _add_json(p)
    p.set_defaults(func=cmd_audit_checkpoint)

    p = sub.add_parser("report", help="one self-contained HTML page per log (or run) for auditors")
    p.add_argument("log", metavar="LOG|STORE_URL")
    p.add_argument("-o", "--out", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument(
        "--run", metavar="RUN_ID", help="only this run (default: every run in the log; required with a store)"
    )
    p.add_argument("--checkpoint", metavar="FILE", help="also check the log against these signed checkpoints")
    p.add_argument("--public-key", metavar="KEY", help="Ed25519 public key of the checkpoints")
    p.set_defaults(func=cmd_audit_report)

    p = sub.add_parser("export", help="one run of a run store as an audit log file (for other verifiers)")
    p.add_argument("store_url", metavar="STORE_URL")
    p.add_argument("file", metavar="FILE", help="the log file to write (a new file)")
    p.add_argument("--run", required=True, metavar="RUN_ID", help="the run to export")
    _add_json(p)
    p.set_defaults(func=cmd_audit_export)

    p = sub.add_parser("anchors", help="the deployment's anchor chain kept in a run store")
    anchors = p.add_subparsers(dest="anchors_command", metavar="COMMAND", required=True)
    p = anchors.add_parser("export", help="write the chain as an anchors file (verify.mjs --anchors)")
    p.add_argument("store_url", metavar="STORE_URL")
    p.add_argument("file", metavar="FILE", help="the anchors file to write (a new file)")
    _add_json(p)
    p.set_defaults(func=cmd_audit_anchors_export)

    p = sub.add_parser("keygen", help="write a new Ed25519 key pair (PATH and PATH.pub)")
    p.add_argument("path")
    p.set_defaults(func=cmd_audit_keygen)
