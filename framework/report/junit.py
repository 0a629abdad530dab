"""``cluster.xml``: every rank's JUnit merged into one file Jenkins' xunit plugin accepts.

:func:`write_cluster_junit` builds it from :func:`framework.report.model.read_run`;
:func:`validate_junit` checks a file against junit-10.xsd; :func:`fold_case_properties` and
:func:`fold_pytest_reruns` keep pytest's own ``junit.xml`` valid. Layout, synthetic cases and
reruns: docs/internals/report.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from framework.records.folder import write_atomic
from framework.records.scrub import scrub_tree
from framework.report.fmt import iso, number, signame, slug, strip_ansi
from framework.report.model import (
    CoreView,
    LaunchView,
    RankView,
    RunView,
    case_counts,
    case_outcome,
    describe_rank,
    inside_run,
    log_tail,
    read_json,
    read_run,
)

if TYPE_CHECKING:
    from framework.records.scrub import Scrub

log = logging.getLogger("camit.report")

__all__ = ["CoreRecord", "RerunRecord", "attachment_path", "fold_case_properties", "fold_pytest_reruns",
           "run_properties", "validate_junit", "write_cluster_junit", "write_fallback_cluster", "xml_text"]

SCHEMA_FILE = "xunit-plugin-junit-10.xsd"
#: statuses of a run that did not finish normally: cluster.xml gets an error entry for them
_FINISHED = ("ok", "passed", "failed", "running", None)

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_CASE_CHILDREN = {"skipped", "error", "failure", "rerunFailure", "rerunError", "flakyFailure", "flakyError",
                  "system-out", "system-err"}
_RERUN_TAGS = ("rerunFailure", "rerunError", "flakyFailure", "flakyError")


class CoreRecord(Protocol):
    """What the report reads of a core dump handed over: :class:`framework.cores.inspection.Core` is one.

    Also read when present: ``pid``, ``executable`` (or ``exe``, ``comm``), ``signal``, ``rank``,
    ``backtrace``, ``local_path``, ``backtrace_path`` and ``to_json()``.
    """

    host: str

    def describe(self) -> str: ...


@dataclass(frozen=True)
class RerunRecord:
    """One failed attempt pytest-rerunfailures reran (its report had outcome ``rerun``), as pytest's
    ``junit.xml`` names the test: ``classname`` and ``name``; ``attempt`` counts from 1."""

    classname: str
    name: str
    attempt: int
    when: str
    message: str
    text: str


def run_properties(run: RunView, *, env: Any = None, seed: int | None = None) -> list[tuple[str, str]]:
    """The run as testsuite properties: ``run_id``, ``seed``, ``env`` (file name), ``env_file``, ``hosts``
    (comma-separated) and ``artifact.<file name>`` = sha256 of each deployed artifact. ``env`` (an
    ``EnvConfig``) and ``seed`` default to what ``manifest.json`` recorded; what is unknown is left out."""
    facts = run.facts
    env_file = _env_source(env) or facts.env_file
    named = [("run_id", run.run_id), ("seed", facts.seed if seed is None else str(seed)),
             *_env_file_props(env_file), ("hosts", ",".join(_env_hosts(env) or run.hosts))]
    return [(key, value) for key, value in named if value] + _artifact_props(run)


def _env_source(env: Any) -> str | None:
    """The file an ``EnvConfig`` was read from (None without one)."""
    source = getattr(env, "source", None)
    return str(source) if source else None


def _env_file_props(env_file: str | None) -> list[tuple[str, str]]:
    """``env`` (the file's name) and ``env_file`` (its path), when the run had one."""
    return [("env", Path(env_file).name), ("env_file", env_file)] if env_file else []


def _env_hosts(env: Any) -> list[str]:
    """The host names of an ``EnvConfig`` (none without one)."""
    return list(getattr(env, "hosts", None) or [])


def _artifact_props(run: RunView) -> list[tuple[str, str]]:
    """``artifact.<name>`` = sha256 of each deployed artifact (the first host's record of it)."""
    seen: dict[str, str] = {}
    for d in run.deploy_hosts:
        for a in d.artifacts:
            if a.get("name") and a.get("sha256"):
                seen.setdefault(f"artifact.{a['name']}", str(a["sha256"]))
    return sorted(seen.items())


# -- cluster.xml -----------------------------------------------------------------
def write_cluster_junit(rundir_path: str | os.PathLike[str], cores: Sequence[CoreRecord] = (), *,
                        scrub: Scrub | None = None, status: str | None = None, error: str | None = None,
                        env: Any = None, seed: int | None = None) -> Path:
    """Merge every rank's JUnit into ``cluster.xml`` and return its path.

    Reads ``launch-*.json`` and ``<host>/rank*.xml``; every rank a launch expected
    gets a suite (a synthetic error when it never reported). ``cores`` (:class:`CoreRecord`,
    e.g. ``framework.cores.inspection.Core``) are added to ``cores.json`` and become failures.
    ``scrub`` removes known secrets from every value (text and attribute values, before the tree is
    serialised; none by default); ``status`` and ``error``
    say how the run ended (default: what ``manifest.json`` says), an unfinished run being an error;
    ``env`` and ``seed`` go into the run properties (default: what ``manifest.json`` says).
    """
    root = Path(rundir_path)
    scrub = scrub or _unchanged
    if cores:
        _record_cores(root, cores, scrub)
    run = read_run(root)
    if status is None:
        status, error = run.manifest.get("status"), run.manifest.get("error")
    top = ET.Element("testsuites", name=run.run_id)
    top.extend(_rank_suites(run, scrub))
    cluster = _cluster_suite(run, status, error, scrub)
    if len(cluster):  # the run's properties go with it; a run with nothing of its own has no cluster suite
        cluster.insert(0, _props_element(run_properties(run, env=env, seed=seed), scrub))
        top.append(cluster)
    _set_totals(top)
    ET.indent(top)
    scrub_tree(top, scrub)  # values only (the rank cases copied in too): never a tag or an attribute name
    path = write_atomic(root / "cluster.xml", ET.tostring(top, encoding="unicode", xml_declaration=True))
    for problem in validate_junit(path):  # our own output must never be dropped by the xunit plugin
        log.error("cluster.xml does not validate: %s", problem)
    return path


def _props_element(props: list[tuple[str, str]], scrub: Scrub) -> ET.Element:
    """A suite's ``<properties>``, values scrubbed."""
    out = ET.Element("properties")
    for key, value in props:
        ET.SubElement(out, "property", name=key, value=scrub(xml_text(value)))
    return out


def _set_totals(top: ET.Element) -> None:
    """The ``<testsuites>`` counts and time: the sums of its suites'."""
    for k in ("tests", "failures", "errors"):
        top.set(k, str(sum(int(s.get(k, "0")) for s in top)))
    top.set("time", _t(sum(float(s.get("time", "0")) for s in top)))


def _rank_suites(run: RunView, scrub: Scrub) -> list[ET.Element]:
    """A suite per rank: each launch's (and the ranks only its earlier attempts had), then the orphans."""
    suites = []
    for lv in run.launches:
        # ranks an earlier attempt had and the final one did not come after the final attempt's
        suites += [_rank_suite(rv, run, scrub, lv) for rv in [*lv.ranks, *_stale_ranks(lv)]]
    return suites + [_rank_suite(rv, run, scrub, None) for rv in run.orphans]


def _stale_ranks(lv: LaunchView) -> list[RankView]:
    """The ranks only the earlier attempts had (the latest attempt's of each), by rank number."""
    out = {r.rank: r for earlier in lv.reruns for r in earlier.ranks}
    for r in lv.ranks:
        out.pop(r.rank, None)
    return [out[k] for k in sorted(out)]


def _case_prefix(rv: RankView) -> str:
    """The classname prefix of a rank's cases: ``<host>.rank<r>[.<launch>]``."""
    return f"{slug(rv.host)}.rank{rv.rank}" + (f".{rv.launch}" if rv.launch else "")


def _own_launch(rv: RankView, lv: LaunchView | None) -> LaunchView | None:
    """The attempt ``rv`` belongs to: the final launch ``lv`` or one of its reruns (None: no launch claims it)."""
    attempts = [lv, *lv.reruns] if lv is not None else []
    return next((x for x in attempts if x.launch_id == rv.launch_id), None)


def _earlier_ranks(rv: RankView, lv: LaunchView | None) -> list[tuple[LaunchView, RankView]]:
    """The same rank in the earlier attempts of ``lv``'s test, oldest first."""
    reruns = lv.reruns if lv is not None else []
    return [(e, r) for e in reruns if e.launch_id != rv.launch_id for r in e.ranks if r.rank == rv.rank]


def _launch_props(own: LaunchView | None) -> list[tuple[str, str]]:
    if own is None:
        return []
    props = [("world_size", str(own.world_size)), ("launch_id", own.launch_id)]
    if own.test is not None:
        props += [("test", own.test), ("attempt", str(own.attempt))]
    return props


def _rank_props(rv: RankView, own: LaunchView | None, earlier: list[tuple[LaunchView, RankView]],
                stale: bool) -> list[tuple[str, str]]:
    """The rank suite's properties: who it is, its launch, its earlier attempts, how it ended, its own."""
    props = [("rank", str(rv.rank)), ("host", rv.host), ("outcome", rv.outcome), *_launch_props(own)]
    if earlier or stale:
        props.append(("earlier_attempts", _earlier_attempts(earlier)))
    props += _end_props(rv)
    taken = {k for k, _ in props}
    return props + [p for p in rv.props if p[0] not in taken]


def _earlier_attempts(earlier: list[tuple[LaunchView, RankView]]) -> str:
    """The ``earlier_attempts`` property: how the rank ended in each earlier attempt."""
    if not earlier:
        return "this launch's test was rerun and its final attempt did not launch it again"
    return "; ".join(f"attempt {e.attempt} ({e.launch_id}): {r.reason or r.outcome}"
                     for e, r in earlier)


def _end_props(rv: RankView) -> list[tuple[str, str]]:
    """How the rank ended and where its files are: the facts it has."""
    facts = (("exit_code", rv.exit_code), ("signal", rv.signal), ("log", rv.log),
             ("junit", rv.junit), ("start", rv.start), ("end", rv.end),
             ("overwritten_by", rv.overwritten_by))
    return [(k, str(v)) for k, v in facts if v is not None]


def _attach_log(cases: list[ET.Element], log_line: str) -> None:
    """The rank log's attachment line on every case that did not simply pass."""
    if not log_line:
        return
    for c in cases:
        if not _simply_passed(c):
            _prepend_out(c, log_line)


def _simply_passed(case: ET.Element) -> bool:
    """Passed, and not after an earlier attempt failed (no rerun or flaky element)."""
    return case_outcome(case) == "passed" and all(case.find(t) is None for t in _RERUN_TAGS)


def _close_suite(suite: ET.Element, cases: list[ET.Element], rv: RankView) -> None:
    """The suite's cases, counts, time, timestamp and host."""
    suite.extend(cases)
    for name, count in case_counts(cases).items():
        suite.set(name, str(count))
    duration = rv.duration if rv.duration is not None else sum(number(c.get("time")) for c in cases)
    suite.set("time", _t(duration))
    stamp = iso(rv.start) if rv.start is not None else rv.junit_timestamp
    if stamp:
        suite.set("timestamp", stamp)
    suite.set("hostname", rv.host)


def _in_final_attempt(rv: RankView, lv: LaunchView | None) -> bool:
    """The rank ran in its test's final attempt (or is a rank no launch claims: ``lv`` None)."""
    return lv is None or (lv.launch_id == rv.launch_id and not lv.stale)


def _rank_suite(rv: RankView, run: RunView, scrub: Scrub, lv: LaunchView | None) -> ET.Element:
    """The suite of one rank; with ``lv`` (the final attempt's launch) the earlier attempts' failures of the
    same rank are folded into its cases (a rank only an earlier attempt had: every failure becomes flaky)."""
    own = _own_launch(rv, lv)
    prefix = _case_prefix(rv)
    suite = ET.Element("testsuite", name=f"{rv.launch}.rank{rv.rank}@{rv.host}".removeprefix("."))
    earlier = _earlier_ranks(rv, lv)
    suite.append(_props_element(_rank_props(rv, own, earlier, bool(lv and lv.stale)), scrub))
    cases = _rank_cases(rv, own, run, prefix, scrub)
    _fold_earlier(cases, prefix, earlier, run, scrub)
    if not _in_final_attempt(rv, lv):  # nothing of it ran in the final attempt: its failures flaked
        cases = [_flaky_only(c, own.attempt if own is not None else 1) for c in cases]
    _attach_log(cases, _attachment_line(run, rv.log))
    _close_suite(suite, cases, rv)
    return suite


def _fold_earlier(cases: list[ET.Element], prefix: str, earlier: list[tuple[LaunchView, RankView]],
                  run: RunView, scrub: Scrub) -> None:
    """Fold each earlier attempt's cases of the same rank into the final ``cases``."""
    for e, r in earlier:
        eprefix = _case_prefix(r)
        _fold_attempt(cases, prefix, _rank_cases(r, e, run, eprefix, scrub), eprefix, e.attempt)


def _rank_cases(rv: RankView, lv: LaunchView | None, run: RunView, prefix: str, scrub: Scrub) -> list[ET.Element]:
    cases = [_clean_case(c, prefix) for c in rv.cases]
    synthetic = _synthetic_case(rv, lv, run, prefix, scrub)
    if synthetic is not None:
        cases.append(synthetic)
    return cases


def _rerun_element(tag: str, outcome_el: ET.Element, attempt: int) -> ET.Element:
    """``tag`` (rerunFailure … flakyError) for an earlier attempt's ``<failure>``/``<error>``: junit-10's
    rerunType (``type`` required, ``message``, ``stackTrace``)."""
    msg = outcome_el.get("message", "")
    el = ET.Element(tag, type=outcome_el.get("type") or outcome_el.tag,
                    message=f"attempt {attempt}: {msg}" if msg else f"attempt {attempt} failed")
    if outcome_el.text:
        ET.SubElement(el, "stackTrace").text = outcome_el.text
    return el


def _attempt_key(case: ET.Element, prefix: str) -> tuple[str, str]:
    """A case's classname without the rank ``prefix``, and its name: the same in every attempt."""
    return (case.get("classname", "").removeprefix(prefix), case.get("name", ""))


def _fold_attempt(cases: list[ET.Element], prefix: str, earlier: list[ET.Element], eprefix: str,
                  attempt: int) -> None:
    """Fold an earlier attempt's failing ``earlier`` cases into the final ``cases`` (matched by the classname
    without the rank prefix, and the name): ``rerun*`` on a case that failed again, ``flaky*`` on one that
    passed; a case the final attempt does not have is added holding only its flaky element (a pass)."""
    index = {_attempt_key(c, prefix): c for c in cases}
    for old in earlier:
        el = old.find(case_outcome(old))  # None: the earlier attempt passed or was skipped
        if el is None or el.tag == "skipped":
            continue
        target = _final_case(cases, index, _attempt_key(old, eprefix), prefix)
        failed_again = case_outcome(target) in ("failure", "error")
        tag = ("rerun" if failed_again else "flaky") + el.tag.capitalize()
        target.append(_rerun_element(tag, el, attempt))


def _final_case(cases: list[ET.Element], index: dict[tuple[str, str], ET.Element],
                key: tuple[str, str], prefix: str) -> ET.Element:
    """The final attempt's case of ``key``, added (a pass, with no children) when it has none."""
    if key not in index:
        index[key] = ET.Element("testcase", classname=prefix + key[0], name=key[1], time="0.000")
        cases.append(index[key])
    return index[key]


def _flaky_only(case: ET.Element, attempt: int) -> ET.Element:
    """``case`` of an attempt that was rerun: its failure or error becomes ``flakyFailure``/``flakyError``."""
    for kind, tag in (("failure", "flakyFailure"), ("error", "flakyError")):
        for el in case.findall(kind):
            case.remove(el)
            case.append(_rerun_element(tag, el, attempt))
    return case


def _prepend_out(case: ET.Element, line: str) -> None:
    out = case.find("system-out")
    if out is None:
        ET.SubElement(case, "system-out").text = line
    elif line not in (out.text or ""):
        out.text = f"{line}\n{out.text or ''}"


def attachment_path(run_root: Path, rel: str) -> str:
    """The path of the run-folder file ``rel`` for Jenkins' junit-attachments plugin: absolute (the
    plugin's ``[[ATTACHMENT|/absolute/path/to/file]]`` form), read on the agent when the ``junit`` step runs,
    so it does not depend on the step's directory or ``$WORKSPACE``."""
    return (run_root / rel).resolve().as_posix()


def _attachment_line(run: RunView, rel: str | None) -> str:
    return f"[[ATTACHMENT|{attachment_path(run.path, rel)}]]" if rel and (run.path / rel).is_file() else ""


#: the synthetic error's type by rank outcome (any other: RankFailed)
_RANK_ERROR = {"lost": "RankLost", "crash": "RankCrashed", "killed": "RankKilled"}


def _overwritten_case(case: ET.Element, rv: RankView, lv: LaunchView | None, scrub: Scrub) -> ET.Element:
    """A rank whose files a later launch overwrote: only its exit status is known."""
    note = (f"rank {rv.rank} on {rv.host}: per-rank files were overwritten by launch {rv.overwritten_by} "
            f"(same {rv.host}/rank{rv.rank}.* paths); only the exit status is known")
    if rv.exit_code == 0 and not rv.signal:
        ET.SubElement(case, "system-out").text = note
    else:
        ET.SubElement(case, "error", type="RankFailed", message=scrub(describe_rank(rv, lv))).text = note
    return case


def _ended_badly(rv: RankView) -> bool:
    """The rank's tests reported, then its process ended in a way they do not explain."""
    c = rv.counts()
    if rv.signal or rv.exit_code not in (0, 1, None):
        return True
    return rv.exit_code == 1 and not (c["failures"] or c["errors"])


def _failure_body(rv: RankView, run: RunView, message: str) -> str:
    if not rv.log:
        return f"{message}\n(no log was fetched for this rank)"
    return "\n".join([message, f"--- tail of {rv.log} ---", log_tail(run.path, rv.log)])


def _synthetic_case(rv: RankView, lv: LaunchView | None, run: RunView, prefix: str,
                    scrub: Scrub) -> ET.Element | None:
    """The testcase standing for how a rank ended when its own JUnit does not say it."""
    case = ET.Element("testcase", classname=prefix, name="rank_report", time=_t(rv.duration or 0.0))
    if rv.overwritten_by:
        return _overwritten_case(case, rv, lv, scrub)
    if _tests_reported(rv):
        if not _ended_badly(rv):
            return None
        case.set("name", "rank_exit")  # the tests reported, then the process ended badly
    elif rv.outcome == "pass":
        text = f"{describe_rank(rv, lv)}\n{log_tail(run.path, rv.log)}"
        ET.SubElement(case, "system-out").text = scrub(xml_text(text))
        return case
    return _bad_ending(case, rv, lv, run, scrub)


def _tests_reported(rv: RankView) -> bool:
    """The rank's JUnit was read and holds its tests."""
    return bool(rv.cases) and not rv.junit_problem


def _bad_ending(case: ET.Element, rv: RankView, lv: LaunchView | None, run: RunView,
                scrub: Scrub) -> ET.Element:
    """``case`` as the rank's error, or skipped when it was only torn down after another failure."""
    message = rv.reason or describe_rank(rv, lv)
    kind = _RANK_ERROR.get(rv.outcome, "RankFailed")
    body = scrub(xml_text(_failure_body(rv, run, message)))
    if rv.torn_down:  # not this rank's failure: the rank that failed first is the error
        ET.SubElement(case, "skipped", type="RankTornDown", message=scrub(xml_text(rv.torn_down))).text = body
        return case
    ET.SubElement(case, "error", type=kind, message=scrub(xml_text(message))).text = body
    return case


def _core_cases(suite: ET.Element, run: RunView, scrub: Scrub) -> None:
    """A failing case per core dump."""
    for core in run.cores:
        where = f"{slug(core.host)}.rank{core.rank}" if core.rank is not None else slug(core.host)
        case = ET.SubElement(suite, "testcase", classname=f"{where}.cores",
                             name=f"core_dump[{Path(core.exe or 'unknown').name}:{core.pid}]", time="0")
        ET.SubElement(case, "failure", type="CoreDump",
                      message=scrub(xml_text(core.description or f"core dump of {core.exe}"))
                      ).text = scrub(xml_text(_core_text(core)))


def _core_text(core: CoreView) -> str:
    """A core's failure text: its description, its file in the run folder and its backtrace."""
    parts = [core.description, f"file: {core.local_path}" if core.local_path else None,
             f"\n{core.backtrace}" if core.backtrace else None]
    return "\n".join(p for p in parts if p is not None)


def _deploy_cases(suite: ET.Element, run: RunView, scrub: Scrub) -> None:
    """A case per deployed host, an error where its deploy failed."""
    for d in run.deploy_hosts:
        case = ET.SubElement(suite, "testcase", classname=f"{slug(d.host)}.deploy", name="deploy",
                             time=_t(d.seconds))
        if d.failed:
            msg = f"deploy on {d.host} failed at {d.step}: {d.error}"
            ET.SubElement(case, "error", type="DeployFailed", message=scrub(xml_text(msg))).text = scrub(xml_text(msg))


def _run_case(suite: ET.Element, status: str | None, error: str | None, scrub: Scrub) -> None:
    """An error case for a run that did not finish."""
    if status in _FINISHED:
        return
    what = f"run {status or 'failed'}" + (f": {error}" if error else "")
    case = ET.SubElement(suite, "testcase", classname="camit.run", name="run", time="0")
    ET.SubElement(case, "error", type=f"Run{(status or 'error').capitalize()}",
                  message=scrub(xml_text(what))).text = scrub(xml_text(
                      what + "\nWhat finished is reported above; anything after this point did not run."))


def _cluster_suite(run: RunView, status: str | None, error: str | None, scrub: Scrub) -> ET.Element:
    suite = ET.Element("testsuite", name="cluster")
    _core_cases(suite, run, scrub)
    _deploy_cases(suite, run, scrub)
    for problem in run.problems:
        case = ET.SubElement(suite, "testcase", classname="camit.report", name="read_run_folder", time="0")
        ET.SubElement(case, "error", type="ReportProblem", message=scrub(xml_text(problem)))
    _run_case(suite, status, error, scrub)
    for k, v in case_counts(suite).items():
        suite.set(k, str(v))
    suite.set("time", _t(sum(number(c.get("time")) for c in suite)))
    return suite


def _first_line(child: ET.Element) -> str:
    """The first line of an element's text (its tag when it has none), at most 200 characters."""
    lines = (child.text or "").strip().splitlines()
    return (lines[0] if lines else child.tag)[:200]


def _copy_child(out: ET.Element, child: ET.Element) -> None:
    """``child`` (a junit-10 testcase element) into ``out``, with the attributes the schema requires."""
    el = ET.SubElement(out, child.tag, {k: v for k, v in child.attrib.items() if k in ("type", "message")})
    el.text = child.text
    el.extend(list(child))
    if child.tag in ("failure", "error") and not el.get("message"):  # a failure must say something
        el.set("message", _first_line(child))
    if child.tag.startswith(("rerun", "flaky")) and not el.get("type"):
        el.set("type", "rerun")


def _bare_case(case: ET.Element, prefix: str) -> ET.Element:
    """A new ``<testcase>``: ``case``'s prefixed classname, name, time and group, no children."""
    original = case.get("classname", "")
    out = ET.Element("testcase", classname=f"{prefix}.{original}" if original else prefix,
                     name=case.get("name") or "unnamed")
    for attr in ("time", "group"):
        value = case.get(attr)
        if value is not None:
            out.set(attr, value)
    return out


def _property_lines(props: ET.Element) -> list[str]:
    """A ``<properties>`` element as ``property <name> = <value>`` lines."""
    return [f"property {p.get('name')} = {p.get('value')}" for p in props.iter("property")]


def _clean_case(case: ET.Element, prefix: str) -> ET.Element:
    """A copy of ``case`` with the classname prefixed and only what junit-10.xsd allows."""
    out = _bare_case(case, prefix)
    extra_out = []
    for child in case:
        if child.tag == "properties":  # record_property: testcase properties are invalid in junit-10
            extra_out += _property_lines(child)
        elif child.tag in _CASE_CHILDREN:
            _copy_child(out, child)
    if extra_out:
        ET.SubElement(out, "system-out").text = "\n".join(extra_out)
    return out


def _fold_props(case: ET.Element) -> bool:
    """Move ``case``'s ``<properties>`` to the start of its ``<system-out>``; whether it had any."""
    lines = []
    for props in case.findall("properties"):
        lines += _property_lines(props)
        case.remove(props)
    if not lines:
        return False
    out = case.find("system-out")
    if out is None:
        ET.SubElement(case, "system-out").text = "\n".join(lines)
    else:
        out.text = "\n".join([*lines, out.text or ""])
    return True


def fold_case_properties(path: str | os.PathLike[str], scrub: Scrub | None = None) -> bool:
    """Move each testcase's ``<properties>`` of pytest's ``junit.xml`` into its ``<system-out>``.

    pytest writes ``record_property`` and ``item.user_properties`` (camit's ``placement``) as testcase
    properties, which junit-10.xsd does not allow (only suites have them): Jenkins' xunit plugin would
    drop the file. Each becomes a ``property <name> = <value>`` line, as :func:`_clean_case` does for
    cluster.xml. ``scrub`` (none by default) is applied to the values of the whole tree (never to a tag or
    an attribute name). Returns whether the file changed; a missing file is no change.
    """
    file = Path(path)
    if not file.exists():
        return False
    top = ET.parse(file).getroot()
    folded = [_fold_props(case) for case in top.iter("testcase")]
    scrubbed = scrub_tree(top, scrub or _unchanged)
    changed = any(folded) or scrubbed
    if changed:
        write_atomic(file, ET.tostring(top, encoding="unicode", xml_declaration=True) + "\n")
    return changed


def _rerun_record_element(r: RerunRecord, failed_again: bool) -> ET.Element:
    """``rerunFailure``/``flakyError``/... for one recorded attempt (an error outside the call phase)."""
    kind = "Error" if r.when != "call" else "Failure"
    exc_type = r.message.split(":", 1)[0] if ":" in r.message else ""
    el = ET.Element(("rerun" if failed_again else "flaky") + kind, type=exc_type or kind.lower(),
                    message=xml_text(f"attempt {r.attempt} ({r.when}): {r.message}"))
    if r.text:
        ET.SubElement(el, "stackTrace").text = xml_text(r.text)
    return el


def _fold_reruns(suite: ET.Element, classname: str, name: str, records: list[RerunRecord]) -> bool:
    """Drop a test's earlier (empty) attempts from ``suite`` and put their failures on its final case."""
    found = _cases_of(suite, classname, name)
    if not found:
        return False
    attempts = sorted({r.attempt for r in records})
    earlier, final = found[:-1][:len(attempts)], found[-1]
    for c in earlier:
        suite.remove(c)
    failed_again = case_outcome(final) in ("failure", "error")
    for r in sorted(records, key=lambda r: r.attempt):
        final.append(_rerun_record_element(r, failed_again))
    return True


def _cases_of(suite: ET.Element, classname: str, name: str) -> list[ET.Element]:
    """The suite's testcases of one test (its attempts, in the file's order)."""
    return [c for c in suite.findall("testcase")
            if (c.get("classname", ""), c.get("name", "")) == (classname, name)]


def _add_properties(suite: ET.Element, properties: Sequence[tuple[str, str]]) -> bool:
    """Add the ``properties`` ``suite`` does not have yet (first in it); whether any was added."""
    have = {p.get("name") for p in suite.iterfind("properties/property")}
    added = [(k, v) for k, v in properties if k not in have]
    if not added:
        return False
    props = suite.find("properties")
    if props is None:
        props = ET.Element("properties")
        suite.insert(0, props)
    for k, v in added:
        ET.SubElement(props, "property", name=k, value=xml_text(v))
    return True


def _fold_suite_reruns(suite: ET.Element, by_test: dict[tuple[str, str], list[RerunRecord]],
                       properties: Sequence[tuple[str, str]]) -> bool:
    """Fold one suite's reruns, recount its tests and add the run properties; whether it changed."""
    changed = False
    for (classname, name), records in by_test.items():
        changed = _fold_reruns(suite, classname, name, records) or changed
    if suite.get("tests") is not None:
        suite.set("tests", str(len(suite.findall("testcase"))))
    return _add_properties(suite, properties) or changed


def fold_pytest_reruns(path: str | os.PathLike[str], reruns: Sequence[RerunRecord],
                       properties: Sequence[tuple[str, str]] = ()) -> bool:
    """Fold pytest-rerunfailures' attempts in pytest's ``junit.xml`` and add the run ``properties``.

    rerunfailures leaves every failed attempt as an empty, passing ``<testcase>`` before the final one:
    a test failing then passing shows two passes, and its failure is lost. For each test of ``reruns``
    the first (number of reruns) testcases of its classname and name are removed, and each recorded
    failure is put on the remaining (final) one: ``flakyFailure``/``flakyError`` when it passed (no failure
    left: Jenkins counts a pass), ``rerunFailure``/``rerunError`` when it failed again. The ``properties``
    are added to each ``<testsuite>``'s ``<properties>`` (``record_testsuite_property`` and
    ``LogXML.add_global_property`` write there too; names already present are kept). Returns whether the
    file changed; a missing file is no change.
    """
    file = Path(path)
    if not file.exists() or not (reruns or properties):
        return False
    top = ET.parse(file).getroot()
    by_test = _reruns_by_test(reruns)
    suites = [top] if top.tag == "testsuite" else top.findall("testsuite")
    changed = [_fold_suite_reruns(suite, by_test, properties) for suite in suites]
    if any(changed):
        write_atomic(file, ET.tostring(top, encoding="unicode", xml_declaration=True) + "\n")
    return any(changed)


def _reruns_by_test(reruns: Sequence[RerunRecord]) -> dict[tuple[str, str], list[RerunRecord]]:
    """The recorded attempts by test (classname, name)."""
    by_test: dict[tuple[str, str], list[RerunRecord]] = {}
    for r in reruns:
        by_test.setdefault((r.classname, r.name), []).append(r)
    return by_test


def _core_description(core: CoreRecord) -> str:
    try:
        return str(core.describe())
    except Exception as exc:  # a describe() that fails must not lose the core
        return f"core dump on {getattr(core, 'host', '?')} (describe() failed: {exc})"


def _core_entry(root: Path, core: CoreRecord, scrub: Scrub) -> dict[str, Any]:
    """``core`` as a ``cores.json`` entry (its own ``to_json()`` where it has one, the common keys over it)."""
    entry: dict[str, Any] = {}
    to_json = getattr(core, "to_json", None)
    if callable(to_json):
        with contextlib.suppress(Exception):
            entry = dict(to_json())
    rank = getattr(core, "rank", None)
    exe = _core_exe(core)
    entry.update({"host": str(getattr(core, "host", "unknown")), "pid": getattr(core, "pid", None),
                  "executable": str(exe) if exe else None, "signal": signame(getattr(core, "signal", None)),
                  "rank": rank if isinstance(rank, int) else None, "describe": scrub(_core_description(core)),
                  "backtrace": scrub(str(getattr(core, "backtrace", "") or ""))})
    for attr in ("local_path", "backtrace_path"):
        entry[attr] = _run_path(root, getattr(core, attr, None))
    return entry


def _core_exe(core: CoreRecord) -> object:
    """The core's executable, by whichever attribute its record type names it."""
    names = (getattr(core, attr, None) for attr in ("executable", "exe", "comm"))
    return next((name for name in names if name), None)


def _run_path(root: Path, value: object) -> str | None:
    """A path as ``cores.json`` keeps it: relative to the run folder when inside it."""
    if not value:
        return None
    return inside_run(root, value) or str(value)


def _core_key(root: Path, entry: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two ``cores.json`` entries the same core: host, pid, executable, core file."""
    return (entry.get("host"), entry.get("pid"), entry.get("executable") or entry.get("exe"),
            inside_run(root, entry.get("local_path")) or entry.get("local_path"))


def _core_order(entry: Mapping[str, Any]) -> tuple[str, int, int]:
    """``cores.json`` order: by host, rank (none first), pid."""
    rank = entry.get("rank")
    return (str(entry.get("host")), rank if isinstance(rank, int) else -1, entry.get("pid") or 0)


def _record_cores(root: Path, cores: Sequence[CoreRecord], scrub: Scrub) -> None:
    """Merge ``cores`` into ``cores.json``, the file ``framework.cores.watch`` also writes (same entry shape)."""
    known = [c for c in _list(read_json(root / "cores.json", [], [])) if isinstance(c, dict)]
    for core in cores:
        entry = _core_entry(root, core, scrub)
        same = _core_key(root, entry)
        known = [k for k in known if _core_key(root, k) != same]
        known.append(json.loads(json.dumps(entry, default=str)))
    known.sort(key=_core_order)
    write_atomic(root / "cores.json", json.dumps(known, indent=2) + "\n")


def write_fallback_cluster(root: Path, status: str, error: str, problem: str) -> Path:
    """The ``cluster.xml`` left when the merge failed: one error saying so (``problem``) and how the run ended."""
    top = ET.Element("testsuites", name=root.resolve().name, tests="1", failures="0", errors="1", time="0")
    suite = ET.SubElement(top, "testsuite", name="cluster", tests="1", failures="0", errors="1", time="0")
    case = ET.SubElement(suite, "testcase", classname="camit.report", name="cluster_report", time="0")
    ET.SubElement(case, "error", type="ReportFailed", message=xml_text(f"could not merge rank results: {problem}")
                  ).text = xml_text(f"run status: {status}\n{error}")
    return write_atomic(root / "cluster.xml", ET.tostring(top, encoding="unicode", xml_declaration=True))


# -- validation --------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _schema() -> Any:
    from lxml import etree

    with resources.as_file(resources.files("framework") / "data" / SCHEMA_FILE) as xsd:
        return etree.XMLSchema(etree.parse(str(xsd)))


def validate_junit(path: str | os.PathLike[str]) -> list[str]:
    """Problems of a JUnit file against junit-10.xsd (jenkinsci/xunit-plugin); ``[]`` when valid.

    Each problem is ``<file>:<line>: <message>``. The xunit plugin silently skips files
    that fail this schema, so every file we hand to Jenkins must return ``[]``.
    """
    try:
        from lxml import etree
    except ImportError:  # never report "valid" without having checked
        return ["lxml is not installed: cannot validate (pip install 'lxml>=5.2')"]
    p = Path(path)
    if not p.is_file():
        return [f"{p}: no such file"]
    try:
        doc = etree.parse(str(p), etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError as exc:
        return [f"{p}:{exc.lineno}: not well-formed XML: {exc.msg}"]
    schema = _schema()
    if schema.validate(doc):
        return []
    return [f"{p}:{e.line}: {e.message}" for e in schema.error_log]


# -- small helpers ------------------------------------------------------------------------
def _unchanged(text: str) -> str:
    return text


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def xml_text(text: object) -> str:
    """``str(text)`` without terminal sequences and the characters XML 1.0 cannot hold."""
    return _NOT_XML.sub("", strip_ansi(str(text)))


def _t(seconds: float) -> str:
    """SUREFIRE_TIME: no sign, at most three decimals."""
    return f"{max(0.0, float(seconds)):.3f}"
