"""``pte init [DIR]``: make a deployment folder (`pte.Deployment`): its document and its key.

Every option names one thing of the deployment (docs/deployment.md); a file given is checked
and written as an absolute path (or relative, when it is inside the folder); stores default
to files in the folder. Nothing is written when an option names something unusable.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pte._cli._support import UsageError, http_url, input_file
from pte._core import DeploymentError

__all__ = ["add_init_options", "init_command", "placed_tool"]


def add_init_options(p: argparse.ArgumentParser) -> None:
    """The options of ``pte init``."""
    p.add_argument("dir", nargs="?", metavar="DIR", help="the deployment folder (default: .pte here)")
    p.add_argument("--dir", dest="dir_option", metavar="DIR", help=argparse.SUPPRESS)
    p.add_argument("--tools", action="append", metavar="PACK", help="tool packs or importer specs it serves")
    p.add_argument("--allow", action="append", metavar="TOOL", help="narrow its packs to these tools")
    p.add_argument("--manifest", metavar="FILE", help="a tool manifest narrowing its packs")
    p.add_argument("--policy", metavar="FILE", help="its data-flow policy file (compliance-owned)")
    p.add_argument("--procedures", metavar="DIR", help="its folder of procedure files")
    p.add_argument("--specialists", metavar="FILE", help="its specialists file")
    p.add_argument(
        "--approval-keys",
        metavar="FILE",
        help="trusted approvers' public keys (PEM): with them only signed approvals and endorsements count",
    )
    p.add_argument("--approvals", metavar="FILE", help="approval store (default: approvals.jsonl in DIR)")
    p.add_argument(
        "--endorsements", metavar="FILE", help="endorsement store (default: endorsements.jsonl in DIR)"
    )
    p.add_argument(
        "--no-endorsements", action="store_true", help="no endorsement store: such calls are refused"
    )
    p.add_argument("--store", metavar="URL", help="run store URL (default: sqlite:runs.db in DIR)")
    p.add_argument("--no-store", action="store_true", help="no run store: runs go to audit logs only")
    p.add_argument(
        "--anchors",
        metavar="FILE",
        help="'store': the anchor chain in the run store, shared by every machine of the deployment "
        "(the default with a --store sqlite:/postgresql: URL); or a file (without one: anchors.jsonl in DIR)",
    )
    p.add_argument("--redact-key", action="append", metavar="NAME", help="a further secret key name")
    p.add_argument("--secret-rules", action="append", metavar="FILE", help="a further secret rules file")
    p.add_argument("--model", help="the model name of its endpoint")
    p.add_argument("--base-url", type=http_url, help="its OpenAI-compatible endpoint (never a secret)")


def _written(path: str | None, folder: Path, what: str, *, directory: bool = False) -> str | None:
    """A path for the document: checked to exist, relative when inside the folder, else absolute."""
    if path is None:
        return None
    if directory:
        if not Path(path).is_dir():
            raise UsageError(f"{what} {path!r} is not a folder")
    else:
        input_file(path, what)
    return _placed(path, folder)


def _placed(path: str, folder: Path) -> str:
    absolute = Path(os.path.abspath(os.path.expanduser(path)))
    try:
        return str(absolute.relative_to(folder.resolve()))
    except ValueError:
        return str(absolute)


def placed_tool(spec: str, folder: Path) -> str:
    """A ``--tools`` value for the document, its files placed as every file given here is (read
    from the working directory; relative inside the folder, else absolute), since the deployment
    reads a relative one from its folder: an ``openapi:`` spec file (checked to exist), and each
    word of an ``mcp:`` command naming a file here (``python server.py``: the server is started
    in the deployment's folder)."""
    from pte._deploy import spec_file, spec_with_command_words

    if spec.startswith("mcp:"):
        try:
            return spec_with_command_words(spec, lambda w: _placed(w, folder) if Path(w).is_file() else None)
        except DeploymentError as exc:
            raise UsageError(str(exc)) from None
    source = spec_file(spec)
    if source is None:
        return spec
    input_file(source, f"--tools {spec}: the OpenAPI document")
    return f"openapi:{_placed(source, folder)}{spec.removeprefix('openapi:')[len(source) :]}"


def _placed_store(url: str, folder: Path) -> str:
    """A store URL given on the command line: a relative file path is relative to the working
    directory (as every path given here), written relative to the folder when inside it."""
    if url.startswith("sqlite:") and not url.startswith("sqlite://") and url != "sqlite::memory:":
        placed = _placed(url.removeprefix("sqlite:"), folder)
        return f"sqlite:{placed}" if not placed.startswith("/") else f"sqlite://{placed}"
    if url.startswith("jsonl:"):
        return "jsonl:" + _placed(url.removeprefix("jsonl:"), folder)
    return url


#: Store URLs whose database can hold the anchor chain (`pte init --store`): SQLite, PostgreSQL.
_SQL_STORES = ("sqlite:", "postgresql:", "postgres:")


def _anchors(args: argparse.Namespace, folder: Path, default: str) -> str:
    """Where the anchor chain goes: ``--anchors`` when given (``store``, or a file); with a SQL
    run store given (``--store``), that store, so that every machine sharing the store shares
    one chain (a file per machine let a store cut back before a payment be paid again by the
    machine that had not anchored it); else the anchors file in the folder."""
    if args.anchors:
        return "store" if args.anchors == "store" else _placed(args.anchors, folder)
    if args.store and not args.no_store and args.store.startswith(_SQL_STORES):
        return "store"
    return default


def init_command(args: argparse.Namespace) -> int:
    from pte._deploy import DEFAULT_FOLDER, DeploymentDocument, init_deployment

    folder = Path(args.dir or args.dir_option or DEFAULT_FOLDER)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} exists and is not a folder")
    if folder.is_dir() and not (folder / "pte-deployment.json").exists() and any(folder.iterdir()):
        # A deployment's folder holds its key: never spread one into a folder of other files
        # (`pte init --dir /` wrote a key pair into the root).
        raise UsageError(
            f"{folder} holds other files: a deployment gets a folder of its own "
            "(`pte init` with no folder makes .pte here)"
        )
    tools = tuple(
        placed_tool(t, folder)
        for spec in args.tools or ()
        for t in ([spec] if ":" in spec else spec.split(","))
        if t
    )
    allow = tuple(a for spec in args.allow or () for a in spec.split(",") if a) or None
    defaults = DeploymentDocument()
    document = DeploymentDocument(
        tools=tools,
        allow=allow,
        manifest=_written(args.manifest, folder, "--manifest"),
        policy=_written(args.policy, folder, "--policy"),
        procedures=_written(args.procedures, folder, "--procedures", directory=True),
        specialists=_written(args.specialists, folder, "--specialists"),
        approval_keys=_written(args.approval_keys, folder, "--approval-keys"),
        approvals=_placed(args.approvals, folder) if args.approvals else defaults.approvals,
        endorsements=None
        if args.no_endorsements
        else (_placed(args.endorsements, folder) if args.endorsements else defaults.endorsements),
        store=None
        if args.no_store
        else (_placed_store(args.store, folder) if args.store else defaults.store),
        anchors=_anchors(args, folder, defaults.anchors),
        redact_keys=tuple(args.redact_key or ()),
        secret_rules=tuple(_placed(f, folder) for f in args.secret_rules or ()),
        model=args.model,
        base_url=args.base_url,
    )
    if args.store and not args.store.startswith(("sqlite:", "postgresql:", "postgres:", "jsonl:")):
        raise UsageError(f"--store {args.store!r}: a sqlite:, postgresql: or jsonl: URL")
    try:
        deployment, new_key = init_deployment(folder, document)
    except DeploymentError as exc:
        raise UsageError(str(exc)) from None
    problems = deployment.problems()
    try:
        fingerprint = deployment.fingerprint if not problems else None
    except DeploymentError as exc:
        problems.append(str(exc))
        fingerprint = None
    where = deployment.folder
    key = "a new key pair" if new_key else "the key pair already there"
    print(f"deployment made in {where}: pte-deployment.json and {key} (deployment.key, mode 0600)")
    if fingerprint is not None:
        print(f"fingerprint {fingerprint[:16]}…")
    for problem in problems:
        print(f"  to fix before it runs anything: {problem}")
    home = where.parent if where.name == DEFAULT_FOLDER else where
    print(
        f"commands run under it from {home} and the folders below it, or anywhere with:\n"
        f"  export PTE_DEPLOYMENT={where}"
    )
    if document.approval_keys is None:
        # Only a deployment without approver keys needs telling how to get them.
        print(
            "approvers' keys: pte keys generate approver.pem (writes approver.pem and "
            f'approver.pem.pub), then name approver.pem.pub in its "approval_keys" '
            f"({where / 'pte-deployment.json'})"
        )
    return 0
