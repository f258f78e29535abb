"""Actor configuration: a TOML file whose keys mirror the command-line flags; flags win."""
from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from ltm.errors import LtmError


class ConfigError(LtmError, ValueError):
    """A configuration file that cannot be used; the message names the file and key."""

    exit_code = 2


#: Title of the argument group of an actor's required settings (``ltm party --help`` lists them apart).
REQUIRED_TITLE = "required (each as a flag or as a key of the --config file)"


class _ConfigFileAction(argparse.Action):
    """``--config FILE``: a required flag whose key the file sets is no longer required on the
    command line (``required=True`` flags stay listed as required in the usage and help).  An
    unreadable file relaxes every required flag: ``merge`` then reports the file's own error."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        try:
            keys = set(load_config(values))
        except ConfigError:
            keys = {a.dest for a in parser._actions}
        relax_required(parser, keys)


def relax_required(parser: argparse.ArgumentParser, dests: set[str]) -> None:
    """Make the flags storing to ``dests`` optional for this parse (called by actions that make them
    unnecessary, e.g. ``--config`` or ``ltm server --check``)."""
    for action in parser._actions:
        if action.dest in dests:
            action.required = False


def add_actor_arguments(p: argparse.ArgumentParser, *, serves: bool) -> None:
    """The flags every actor process shares: config file, certificates, --insecure, log level,
    and for services the port file."""
    p.add_argument("--config", action=_ConfigFileAction,
                   help="TOML file with the settings of this command, keys as the flags with '_' for '-' "
                        "(flags win)")
    p.add_argument("--certs", help="certificate directory made by `ltm certs`")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="plaintext, unauthenticated transport (testing only; never in production)")
    p.add_argument("--log-level", help="debug, info (default), warning")
    if serves:
        p.add_argument("--port-file", help="write the bound port here once serving (for launchers)")
        p.add_argument("--health-listen", help="also serve the gRPC health service alone, in plaintext, at this "
                                               "address (e.g. 127.0.0.1:50061) for probes without a client "
                                               "certificate; it reveals only SERVING/NOT_SERVING")


def load_config(path: str | None) -> dict[str, Any]:
    """Read a TOML config file (None → empty).  Keys use underscores (``data_dir``)."""
    if path is None:
        return {}
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p}: {exc}") from None


def merge(args: argparse.Namespace, config: dict[str, Any], required: tuple[str, ...] = ()) -> argparse.Namespace:
    """Fill flags left unset (None) from the config; refuse unknown keys and missing required ones."""
    known = set(vars(args))
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown}; valid keys: {sorted(known - {'func', 'command'})}")
    for key, value in config.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    missing = [k for k in required if getattr(args, k) in (None, "")]
    if missing:
        raise ConfigError(f"missing settings {missing}: give them as --{missing[0].replace('_', '-')} or in the config file")
    return args
