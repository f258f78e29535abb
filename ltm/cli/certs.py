"""``ltm certs``: a private CA and per-actor mTLS certificates (the role's code: ``ltm/transport/certs.py``)."""
from __future__ import annotations

import argparse

from ltm.cli.app import lazy

DESCRIPTION = ("Create a private CA and EC P-256 leaf certificates (CN and SAN URI ltm://actor/<name>) for servers, "
               "parties and the analyst. Without a subcommand: everything on one machine (--out ...). Across "
               "machines: `ltm certs ca` on the CA host, `ltm certs request` on each actor's host, `ltm certs sign` "
               "on the CA host.")
ROLES = ("server", "analyst", "operator", "party")


def _nonneg_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def configure(p: argparse.ArgumentParser) -> None:
    """The one-machine flags of ``ltm certs`` and its subcommands ca, request and sign."""
    p.add_argument("--out", help="(required without a subcommand) directory to write ca.pem and <actor>.pem/.key "
                                 "into (never the CA key)")
    p.add_argument("--servers", type=_nonneg_int, default=0, help="issue server-0 … server-(K-1)")
    p.add_argument("--parties", type=_nonneg_int, default=0, help="issue party-0 … party-(P-1)")
    p.add_argument("--analyst", action="store_true", help="issue the analyst and operator certificates")
    p.add_argument("--actors", type=_csv, default=[],
                   help="explicit comma-separated actor names (in addition to the above)")
    p.add_argument("--hosts", type=_csv, default=None,
                   help="comma-separated DNS names / IPs the servers listen on, for their certificates' SANs "
                        "(default: localhost,127.0.0.1): HOST for every server, server-<n>=HOST for one; a name "
                        "that is a server's identity (server-1) goes into that server's certificate only")
    p.add_argument("--analyst-hosts", type=_csv, default=[],
                   help="DNS names / IPs the analyst's own service listens on (default: none; clients reach it "
                        "by its identity 'analyst'); never the servers' hosts, never another actor's identity")
    p.add_argument("--ca-dir", default=None,
                   help="where the CA private key (and a copy of ca.pem) goes (default: <out>-ca); keep it on "
                        "this machine, the CA host, never on an actor's host; `ltm certs sign --ca-dir` uses it")
    p.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    p.add_argument("--force", action="store_true", help="replace an existing CA in --out")
    p.add_argument("--bundles", help="also write one directory per actor here (<actor>/ca.pem, <actor>.pem, "
                                     "<actor>.key): what that actor's host gets; the CA key is in none of them (see --ca-dir)")
    p.add_argument("--if-missing", action="store_true",
                   help="with --bundles: do nothing when every bundle is already there from one CA "
                        "(an init container run again keeps the certificates running actors use)")
    p.set_defaults(func=lazy("ltm.transport.certs:run_certs"))
    _subcommands(p)


#: ``ltm certs`` across machines: subcommand → (one-line help, description, the role's function).
SUBCOMMANDS = {
    "ca": ("on the CA host: create the CA (ca.key, ca.pem) in --ca-dir",
           "Create a private CA: --ca-dir/ca.key (0600, the directory 0700) and --ca-dir/ca.pem. Keep this "
           "directory on the CA host, offline if you can.", "run_ca"),
    "request": ("on an actor's host: make its key and a signing request (CSR)",
                "Make this host's private key (0600; it never leaves the host) and a certificate signing request "
                "for the CA. Example: ltm certs request --role server --id server-2 --out certs --hosts 10.0.0.12",
                "run_request"),
    "sign": ("on the CA host: check a CSR and sign it with its role's usages",
             "Check a certificate signing request (its subject, role, usages and names must be exactly what its "
             "role may have; anything else is refused) and sign it with the CA in --ca-dir.", "run_sign"),
}


def _subcommands(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="certs_command", metavar="{ca,request,sign}",
                           title="across machines (keys never leave their host)")
    parsers = {}
    for name, (help_text, description, func) in SUBCOMMANDS.items():
        parsers[name] = sub.add_parser(name, help=help_text, description=description)
        parsers[name].set_defaults(func=lazy(f"ltm.transport.certs:{func}"))
    ca, rq, sg = parsers["ca"], parsers["request"], parsers["sign"]
    ca.add_argument("--ca-dir", required=True, help="directory for the CA key and certificate (made 0700)")
    ca.add_argument("--days", type=int, default=365, help="validity in days (default 365); leaves never outlive it")
    ca.add_argument("--force", action="store_true", help="replace an existing CA (every certificate it signed stops working)")

    rq.add_argument("--role", required=True, choices=ROLES, help="the actor's role")
    rq.add_argument("--id", help="the actor's identity: server-<n>, party-<id>, or the role itself for "
                                 "analyst and operator (default: the role)")
    rq.add_argument("--out", required=True,
                    help="the actor's certificate directory (its --certs): <id>.key and <id>.csr are written here")
    rq.add_argument("--hosts", type=_csv, default=None,
                    help="server/analyst only: comma-separated DNS names / IPs this host serves on, for the "
                         "certificate's names (default: localhost,127.0.0.1 for a server, none for the analyst)")
    rq.add_argument("--force", action="store_true", help="replace a key already in --out (a certificate using it stops working)")

    sg.add_argument("csr", help="the request file (<id>.csr from `ltm certs request`)")
    sg.add_argument("--ca-dir", required=True, help="the CA directory (ca.key, ca.pem) made by `ltm certs ca`")
    sg.add_argument("--out", required=True,
                    help="where the certificate goes: a file, or a directory (ending in /) for <id>.pem")
    sg.add_argument("--expect", help="refuse unless the request is for this identity (e.g. server-2): check "
                                     "that a request is from whom it claims to be")
    sg.add_argument("--days", type=int, default=365, help="validity in days (default 365; capped by the CA's)")
    sg.add_argument("--force", action="store_true",
                    help="replace a file already at --out (never the CA's own ca.key or ca.pem)")
