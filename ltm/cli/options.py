"""Option groups that several ``ltm`` commands share, each declared once.

* output: ``--json`` (:func:`output`), ``--quiet`` (:func:`quiet`) and :func:`print_json`;
* seeds: ``--seed``, seeded mode (:func:`seed`);
* certificates and endpoints: ``--certs``/``--insecure`` (:func:`certificates`, :func:`insecure`), the argparse types
  :func:`endpoint`, :func:`endpoints` and :func:`listen_address` (the one endpoint rule,
  :func:`ltm.identifiers.endpoint_problem`: ``host:port``, no gRPC target scheme, port 1–65535; a listen
  address may say 0 for any free port);
* privacy: :func:`privacy_number`, a bound such as ``--max-epsilon`` (NaN would turn a check off);
* actors: :func:`actor_options`, the flags every long-running actor process shares (``--config``
  and the required group it relaxes, certificates, log level, port file, health port).

The job's own parameters (``--epsilon``, ``--m``, …) are declared in :mod:`ltm.jobconfig`, which
these wrap.  This module imports nothing heavy: every command's parser is built from it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any, Callable

from ltm.identifiers import endpoint_problem
from ltm.jobconfig import add_options

#: Title of the argument group of an actor's required settings (``ltm party --help`` lists them apart).
REQUIRED_TITLE = "required (each as a flag or as a key of the --config file)"
#: ``--json`` of a command whose output is JSON anyway.
JSON_ANYWAY = "print JSON (the default output is JSON too)"


# ---------------------------------------------------------------------------- output and seeds
def output(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--json`` (the job model's flag; ``help`` says what this command prints)."""
    add_options(p, "run", only=("json",), helps={"json": help} if help else None)


def seed(p: argparse.ArgumentParser, help: str | None = None, *, default: int | None = None,
         text: bool = False) -> None:
    """``--seed``, seeded mode (reproducible, NOT private).  ``text``: any string seeds the run."""
    add_options(p, "run", only=("seed",), helps={"seed": help} if help else None,
                defaults={"seed": default} if default is not None else None, types={"seed": str} if text else None)


def quiet(p: argparse.ArgumentParser, help: str | None = None, *, unset: bool = False) -> None:
    """``--quiet`` (also ``--no-progress``): no progress bar on stderr (:mod:`ltm.progress`).  ``unset``:
    default None, so a ``--config`` file may set it."""
    add_options(p, "run", only=("quiet",), helps={"quiet": help} if help else None,
                defaults={"quiet": None} if unset else None)


def print_json(obj: Any) -> None:
    """``obj`` as indented strict JSON on stdout (numpy values converted; NaN refused)."""
    from ltm.jsonio import json_default

    print(json.dumps(obj, indent=2, default=json_default, allow_nan=False))


# ---------------------------------------------------------------------------- certificates and endpoints
def certificates(p: argparse.ArgumentParser, help: str = "certificate directory made by `ltm certs`", *,
                 env: str | None = None, unset: bool = False) -> None:
    """``--certs DIR`` and ``--insecure``.  ``env``: the variable ``--certs`` defaults to;
    ``unset``: ``--insecure`` defaults to None, so a ``--config`` file may set it."""
    p.add_argument("--certs", default=os.environ.get(env) if env else None,
                   help=f"{help} (default: ${env})" if env else help)
    insecure(p, unset=unset)


def insecure(p: argparse.ArgumentParser, *, unset: bool = False) -> None:
    """``--insecure``: plaintext transport (``unset``: default None, so a ``--config`` file may set it)."""
    p.add_argument("--insecure", action="store_true", default=None if unset else False,
                   help="plaintext, unauthenticated transport (testing only; never in production)")


def _endpoint(text: str, what: str, any_port: bool) -> str:
    """``text`` stripped, if :func:`ltm.identifiers.endpoint_problem` (the project's one endpoint rule:
    no gRPC target scheme such as ``unix:`` or ``dns:///``) accepts it; else a one-line usage error."""
    problem = endpoint_problem(text.strip(), what, any_port=any_port)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text.strip()


def endpoint(text: str) -> str:
    """An argparse type: ``host:port`` of a peer, the port 1–65535."""
    return _endpoint(text, "endpoint", False)


def listen_address(text: str) -> str:
    """An argparse type: ``host:port`` to bind, the port 0–65535 (0: any free port)."""
    return _endpoint(text, "listen address", True)


def server_map(text: str) -> list[tuple[str, str]]:
    """An argparse type: ``server-0=host:port,server-1=host:port,…``, the ids in order and each
    endpoint checked as :func:`endpoint`; returns the (id, endpoint) pairs."""
    pairs = [item.strip().split("=", 1) for item in text.split(",") if item.strip()]
    if not pairs or any(len(pair) != 2 for pair in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: write server-0=host:port,server-1=host:port,…")
    ids = [f"server-{i}" for i in range(len(pairs))]
    if [pair[0] for pair in pairs] != ids:
        raise argparse.ArgumentTypeError(f"{text!r}: list the servers as {', '.join(ids)}, in that order")
    return [(server_id, endpoint(address)) for server_id, address in pairs]


def endpoints(text: str) -> str:
    """An argparse type: comma-separated ``host:port`` endpoints, each checked as :func:`endpoint`
    (the text is kept: the role splits it, and a ``--config`` file gives the same form)."""
    for item in text.split(","):
        if item.strip():
            endpoint(item)
    return text


# ---------------------------------------------------------------------------- privacy
def privacy_number(text: str) -> float:
    """An argparse type for a privacy bound or budget (ε, δ): a number ≥ 0, never NaN (a NaN bound
    compares false with everything, so it would turn the check off)."""
    value = float(text)
    if math.isnan(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number ≥ 0, got {text!r}")
    return value


# ---------------------------------------------------------------------------- actors
class _ConfigFileAction(argparse.Action):
    """``--config FILE``: a required flag whose key the file sets is no longer required on the
    command line (``required=True`` flags stay listed as required in the usage and help).  An
    unreadable file relaxes every required flag: ``ltm.transport.config.merge`` then reports the file's
    own error."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from ltm.transport.config import ConfigError, load_config

        setattr(namespace, self.dest, values)
        try:
            config = load_config(values)
        except ConfigError:
            config = {a.dest: None for a in parser._actions}
        for action in parser._actions:  # the file's values pass the checks the flags do
            if action.type in _CHECKED and config.get(action.dest) is not None:
                try:
                    action.type(str(config[action.dest]))
                except argparse.ArgumentTypeError as exc:
                    parser.error(f"--config {values}: {action.dest}: {exc}")
        relax_required(parser, set(config))


def relax_required(parser: argparse.ArgumentParser, dests: set[str]) -> None:
    """Make the flags storing to ``dests`` optional for this parse (called by actions that make them
    unnecessary, e.g. ``--config`` or ``ltm server --check``)."""
    for action in parser._actions:
        if action.dest in dests:
            action.required = False


#: The argparse types whose checks a ``--config`` file's values pass too (a NaN bound, a port out of range).
_CHECKED = (privacy_number, endpoint, endpoints, listen_address)


def actor_options(p: argparse.ArgumentParser, required: dict[str, tuple[str, Callable[[str], Any] | None]], *,
                  serves: bool) -> argparse._ArgumentGroup:
    """The flags every actor process shares: its ``required`` settings (flag → (help, type)), listed
    apart and each settable in the ``--config`` file instead, the config file, certificates,
    ``--insecure``, the log level, and for services the port file and the health port.  Returns the
    required group, for settings a command adds beside them."""
    req = p.add_argument_group(REQUIRED_TITLE)
    for flag, (help, kind) in required.items():
        req.add_argument(flag, required=True, help=help, **({"type": kind} if kind else {}))
    p.add_argument("--config", action=_ConfigFileAction,
                   help="TOML file with the settings of this command, keys as the flags with '_' for '-' "
                        "(flags win)")
    certificates(p, unset=True)
    p.add_argument("--log-level", help="debug, info (default), warning")
    if serves:
        p.add_argument("--port-file", help="write the bound port here once serving (for launchers)")
        p.add_argument("--health-listen", type=listen_address,
                       help="also serve the gRPC health service alone, in plaintext, at this address (e.g. "
                            "127.0.0.1:50061) for probes without a client certificate; it reveals only "
                            "SERVING/NOT_SERVING")
    return req
