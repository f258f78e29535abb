"""One identifier grammar (ltm/identifiers.py) and the job-file parser's limits (issue #23).

Every id a job names (job, party, server, column) is checked against one grammar when a job file is
parsed and whenever a spec is validated; the job-file parser checks size, nesting and counts before
anything is walked.  The processes' side (``ltm job check``, the servers' and the analyst's RPCs)
is in tests/integration/test_hostile_input.py.
"""
from __future__ import annotations

import csv
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.optional import require

require("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st

from ltm import jobfile
from ltm.identifiers import (
    MAX_COLUMN_CHARS,
    MAX_ID_CHARS,
    IdentifierError,
    check_id,
    check_server_id,
    column_problem,
    id_problem,
    party_id_problem,
    server_id_problem,
)
from ltm.jobfile import JobFileError, load_toml, parse_job_file, read_job_text, render_job_file, toml_nesting
from ltm.jobspec import INTERCEPT_NAME, ColumnSpec, JobSpecError, PartySpec, ServerSpec, validate_job
from ltm.limits import ServerLimits
from ltm.transport.certs import ACTOR_RE
from tests.helpers.jobs import job_doc as doc

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples" / "jobs").glob("*.toml"))

#: ids an attacker (or a typo) put in a job: path traversal, separators, control characters, spaces,
#: look-alike digits, lengths past a DNS label, the empty id
HOSTILE_IDS = ["../party-1", "../../server-2", "..", ".", "a/b", "a\\b", "job\nid", "job\rid", "job\x00id", "a b",
               " lead", "trail ", "-dash", ".hidden", "a..b", "x" * (MAX_ID_CHARS + 1), "", "ünï", "server-٣",
               "$(id)", "a;b", "a'b", 'a"b', "a%2Fb", "\u202eevil"]


def problems(text: str) -> list[str]:
    with pytest.raises(JobFileError) as info:
        parse_job_file(text)
    return info.value.problems


# ---------------------------------------------------------------------------- the grammar
@pytest.mark.parametrize("bad", HOSTILE_IDS)
def test_hostile_ids_are_refused_by_every_check(bad):
    assert id_problem(bad) and server_id_problem(bad)
    with pytest.raises(IdentifierError):
        check_id(bad)
    with pytest.raises(IdentifierError):
        check_server_id(bad)
    if bad not in ("a b", "-dash", "x" * (MAX_ID_CHARS + 1)):  # these three are fine column names
        assert column_problem(bad), bad


@pytest.mark.parametrize("good", ["j1", "power-ridge-1", "party-0", "party-hospital_a.2", "A" * MAX_ID_CHARS,
                                  "demo", "e2e", "7"])
def test_ordinary_ids_pass(good):
    assert id_problem(good) is None and check_id(good) == good


def test_party_ids_are_not_the_identities_of_other_roles():
    for bad in ("server-1", "analyst", "operator"):
        assert id_problem(bad) is None and "not a party" in party_id_problem(bad)
    for good in ("party-0", "left", "p7", "server"):
        assert party_id_problem(good) is None
    d = doc()
    d["parties"][1]["id"] = "server-1"
    assert any("not a party" in p for p in problems(render_job_file(d)))


def test_server_ids_are_server_identities_as_ltm_certs_names_them():
    for good in ("server-0", "server-1", "server-63", "server-123456789"):
        assert server_id_problem(good) is None and ACTOR_RE.fullmatch(good)
    for bad in ("party-3", "analyst", "operator", "server-", "server-01", "server-x", "Server-0", "server-0 ",
                "server-0\n", "server-0\x00", "server-1234567890", "s0"):
        assert server_id_problem(bad), bad


def test_messages_are_one_short_line_even_for_a_huge_id():
    huge = "../" * 100_000
    for message in (id_problem(huge), server_id_problem(huge), column_problem(huge), id_problem("a\nb")):
        assert "\n" not in message and len(message) < 400, message


def test_the_bundled_data_and_example_jobs_use_valid_names():
    headers = set()
    for path in (REPO / "ltm" / "datasets" / "data").glob("household_power_*.csv"):  # the demo's table
        with open(path, newline="") as fh:
            headers |= set(next(csv.reader(line for line in fh if not line.startswith("#"))))
    assert headers and all(column_problem(h) is None for h in headers), headers
    assert column_problem(INTERCEPT_NAME) is None
    assert EXAMPLES
    for path in EXAMPLES:
        parse_job_file(path.read_text(), source=str(path))  # still valid


def test_column_names_allow_what_csv_headers_need_and_nothing_that_walks_paths():
    for good in ("Global_active_power", "age (years)", "x[0]", "rff-1.5", "_private", "(intercept)",
                 "c" * MAX_COLUMN_CHARS):
        assert column_problem(good) is None, good
    for bad in ("../../../etc/passwd", "a/b", "..", ".npy", "a  b", "a ", " a", "c" * (MAX_COLUMN_CHARS + 1),
                "a\tb", "a,b", "a\nb", "é"):
        assert column_problem(bad), bad


# ---------------------------------------------------------------------------- job files (the findings)
@pytest.mark.parametrize("where,bad", [
    ("party", "../party-1"), ("server", "../../server-2"), ("column", "../../../etc/passwd"),
    ("job", "job\nid"), ("server", "party-3"), ("server", "analyst"), ("job", "a/b"), ("party", "a b"),
])
def test_a_job_file_naming_a_hostile_id_is_refused_with_one_line(where, bad):
    d = doc()
    if where == "party":
        d["parties"][1]["id"] = bad
    elif where == "server":
        d["servers"][1]["id"] = bad
    elif where == "column":
        d["columns"][0]["name"] = bad
    else:
        d["job"]["id"] = bad
    for resolve in (True, False):  # refused when parsed, not only when validated
        with pytest.raises(JobFileError) as info:
            parse_job_file(render_job_file(d), resolve=resolve)
        hits = [p for p in info.value.problems if repr(bad)[:20] in p]
        assert hits and all("\n" not in p for p in info.value.problems), info.value.problems


def test_validate_job_refuses_the_same_ids_in_a_spec_built_without_a_job_file():
    spec = parse_job_file(render_job_file(doc())).spec
    validate_job(spec)
    cases = [replace(spec, job_id="../x"),
             replace(spec, parties=(replace(spec.parties[0], party_id="../party-1"), spec.parties[1])),
             replace(spec, servers=(spec.servers[0], ServerSpec("party-3", "h:1"))),
             replace(spec, servers=(spec.servers[0], ServerSpec("analyst", "h:1"))),
             replace(spec, columns=(ColumnSpec("../../etc/passwd", "feature", 0.0, 1.0), *spec.columns[1:]))]
    for bad in cases:
        with pytest.raises(JobSpecError) as info:
            validate_job(bad)
        assert any("id" in p or "column name" in p for p in info.value.problems), info.value.problems


def test_a_columns_job_checks_its_block_names_too():
    spec = parse_job_file(render_job_file(doc())).spec
    bad = replace(spec, parties=(PartySpec("party-0", 0, spec.n, ("a",)), PartySpec("party-1\n", 0, spec.n, ("b",))))
    with pytest.raises(JobSpecError, match="party id"):
        validate_job(bad)


def test_deep_nesting_is_one_line_not_a_recursion_error():
    base = render_job_file(doc())
    for text in (base + "x = " + "[" * 100_000 + "]" * 100_000 + "\n",          # an array 100 000 deep
                 base + "x = " + "{a = " * 5_000 + "1" + "}" * 5_000 + "\n",    # an inline table 5 000 deep
                 base + "x = " + "[" * 100_000 + "\n"):                       # unclosed
        got = problems(text)
        assert len(got) == 1 and "nested" in got[0] and "\n" not in got[0], got
    # tomllib's memory grows with the square of a dotted key's length (10 000 parts: 400 MB; 100 000
    # parts was killed for memory): refused from the raw text, in any of the places keys occur
    for text in (base + "a" + ".a" * 100_000 + " = 1\n", base + '"a"' + '."a"' * 100_000 + " = 1\n",
                 base + "[" + "b." * 100_000 + "b]\nx = 1\n", base + "x = {" + "a . " * 100_000 + "a = 1}\n"):
        got = problems(text)
        assert len(got) == 1 and "dotted key 100001 parts long" in got[0], got
    floats = base.replace("[job]\n", "[job]\nx = [" + ", ".join(["1.5e+3", "-0.25", "07:32:00.999"] * 1000) + "]\n")
    assert not any("dotted" in p for p in problems(floats))  # one dot per value: not a dotted key


def test_sizes_and_counts_are_refused_before_anything_is_walked():
    cases = {
        "clients = 2^62": doc(parties=[{"id": "party-0", "clients": 2**62}, {"id": "party-1", "clients": 4}]),
        "clients = 2^31": doc(parties=[{"id": "party-0", "clients": 2**31}, {"id": "party-1", "clients": 4}]),
        "sum over 2^30": doc(parties=[{"id": "party-0", "clients": 2**29 + 1}, {"id": "party-1", "clients": 2**29}]),
        "m = 10^9": doc(release={"kind": "sparse", "m": 10**9}),
        "s = 10^9": doc(release={"kind": "sparse", "m": 8, "s": 10**9}),
        "rows = 2^62": doc(job={"id": "c", "partition": "columns", "rows": 2**62},
                           parties=[{"id": "party-0", "columns": ["a", "b", "y"]}]),
        "rff 10^9 features": doc(transforms=[{"kind": "rff", "columns": ["a", "b"], "name": "phi",
                                              "n_features": 10**9, "bandwidth": 1.0, "seed": "ab" * 32,
                                              "kernel": "gaussian", "feature_map": "cos"}]),
    }
    for label, d in cases.items():
        got = problems(render_job_file(d))  # returns at once: validation never walks n (see the CLI test)
        assert any("limit" in p or "must be in" in p or "wider" in p for p in got), (label, got)
    many = render_job_file(doc()) + "".join(f'[[servers]]\nid = "server-{i}"\nendpoint = "h:1"\n'
                                            for i in range(2, jobfile.MAX_SERVERS + 2))
    assert any("servers" in p and "limit" in p for p in problems(many))


def test_the_parser_limits_are_the_default_servers_limits():
    lim = ServerLimits()
    assert (jobfile.MAX_CLIENTS, jobfile.MAX_PARTIES, jobfile.MAX_COLUMNS, jobfile.MAX_SERVERS,
            jobfile.MAX_SKETCH_ROWS, jobfile.MAX_PIECES) == (lim.max_n, lim.max_parties, lim.max_width,
                                                             lim.max_servers, lim.max_m, lim.max_pieces)


def test_an_oversized_file_is_refused_unparsed(tmp_path):
    text = "# " + "x" * jobfile.MAX_JOB_FILE_BYTES + "\n"
    assert "larger than" in problems(text)[0]
    path = tmp_path / "big.toml"
    path.write_text(text)
    with pytest.raises(JobFileError, match="larger than"):
        read_job_text(path)
    with pytest.raises(JobFileError, match="larger than"):
        read_job_text("/dev/zero")  # read at most MAX + 1 bytes: ends at once


def test_a_job_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(render_job_file(doc()).replace('"j1"', '"j\xe9"').encode("latin-1"))
    with pytest.raises(JobFileError) as info:
        read_job_text(path)
    assert "not UTF-8" in str(info.value) and "0xe9" in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------------- the nesting scan
@st.composite
def toml_values(draw, depth=0):
    """A TOML value (as text) and its nesting depth of arrays and inline tables."""
    kind = draw(st.sampled_from(["int", "str", "lit", "ml", "array", "table"] if depth < 6 else ["int", "str"]))
    if kind == "int":
        return str(draw(st.integers(-5, 5))), 0
    if kind == "str":
        body = draw(st.text(alphabet='ab[]{}#\'"\\ ', max_size=8))
        return '"' + body.replace("\\", "\\\\").replace('"', '\\"') + '"', 0
    if kind == "lit":
        return "'" + draw(st.text(alphabet='ab[]{}#" ', max_size=8)) + "'", 0
    if kind == "ml":
        body = draw(st.text(alphabet="ab[]{}#'\n ", max_size=8))
        return '"""' + body + '"""', 0
    items = [draw(toml_values(depth + 1)) for _ in range(draw(st.integers(0, 3)))]
    inner = max((d for _, d in items), default=0) + 1
    if kind == "array":
        return "[" + ", ".join(t for t, _ in items) + "]", inner
    return "{" + ", ".join(f"k{i} = {t}" for i, (t, _) in enumerate(items)) + "}", inner


@settings(max_examples=300, deadline=None)
@given(toml_values(), st.booleans())
def test_the_nesting_scan_agrees_with_tomllib(value, comment):
    text, depth = value
    doc_text = f"x = {text}" + (" # ]]]{{{[[[" if comment else "") + "\n"
    assert tomllib.loads(doc_text)["x"] is not None  # the generator writes valid TOML
    assert toml_nesting(doc_text) == depth
    assert load_toml(doc_text)["x"] == tomllib.loads(doc_text)["x"]


def test_a_party_refuses_a_served_spec_whose_ids_break_the_grammar():
    # A party does not validate a fetched spec (that walks all n clients), but its ids name the party's
    # journal and pins: a spec no honest server would store is refused by the party's policy.
    from ltm.party.uploader import PartyPolicy, PolicyViolation

    spec = parse_job_file(render_job_file(doc())).spec
    PartyPolicy().check(spec)
    for bad in (replace(spec, job_id="../../x"),
                replace(spec, servers=(spec.servers[0], ServerSpec("server-1", "unix:/s:1"))),
                replace(spec, columns=(ColumnSpec("../a", "feature", 0.0, 1.0), *spec.columns[1:]))):
        with pytest.raises(PolicyViolation, match="not a valid|must be host:port"):
            PartyPolicy().check(bad)


@pytest.mark.parametrize("endpoint", ["unix:/var/run/docker.sock:1", "dns:///h:1", "h:0", "h:65536", "h", "h:1/x"])
def test_server_endpoints_are_host_and_port_only(endpoint):
    d = doc()
    d["servers"][1]["endpoint"] = endpoint
    assert any("host:port" in p for p in problems(render_job_file(d)))
    spec = parse_job_file(render_job_file(doc())).spec
    with pytest.raises(JobSpecError, match="host:port"):
        validate_job(replace(spec, servers=(spec.servers[0], ServerSpec("server-1", endpoint))))


def test_port_zero_is_an_address_to_bind_never_a_peer():
    from ltm.identifiers import endpoint_problem

    assert endpoint_problem("h:0") is not None and endpoint_problem("h:0", any_port=True) is None
    assert "port 0–65535" in endpoint_problem("unix:/x:0", any_port=True)
    assert endpoint_problem("h:65536", any_port=True) is not None


def test_the_bounds_draft_parser_has_the_same_limits():
    from ltm.analyst.bounds import Draft

    with pytest.raises(JobFileError, match="nested 100000 deep"):
        Draft.parse(render_job_file(doc()) + "x = " + "[" * 100_000 + "]" * 100_000 + "\n")


def test_a_flood_of_problems_gives_a_bounded_message():
    base = render_job_file(doc())
    many = base.replace("[job]\n", "[job]\n" + "".join(f"k{i} = 1\n" for i in range(50_000)), 1)
    with pytest.raises(JobFileError) as info:
        parse_job_file(many)
    message = str(info.value)
    assert len(info.value.problems) == JobFileError.MAX_SHOWN + 1
    assert "49980 more unknown keys" in info.value.problems[-1]
    assert len(message) < 5_000
    huge_key = base.replace("[job]\n", "[job]\n" + "k" * 1_000_000 + " = 1\n", 1)
    with pytest.raises(JobFileError) as info:
        parse_job_file(huge_key)
    assert len(str(info.value)) < 1_000
