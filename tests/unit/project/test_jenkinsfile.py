"""The Jenkinsfile: Groovy syntax offline, and the structure reference/junit-jenkins.md §6 asks for.

Full declarative validation needs a Jenkins controller; offline we parse the file with Groovy's
own parser (``new GroovyShell().parse``: brace and syntax errors, not a misspelt directive) when
``groovy`` and a JVM are installed (Debian: ``apt-get install -y --no-install-recommends groovy
default-jre-headless``), and skip with the reason otherwise. The structural checks below run
everywhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

JENKINSFILE = Path(__file__).resolve().parents[3] / "Jenkinsfile"

PARSE = """\
def f = new File(args[0])
new GroovyShell().parse(f.text, 'Jenkinsfile')
println 'parsed ' + f.name
"""


def _java_home() -> str | None:
    if os.environ.get("JAVA_HOME") and Path(os.environ["JAVA_HOME"], "bin", "java").exists():
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    return str(Path(java).resolve().parents[1]) if java else None


def groovy_parse(path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    groovy = shutil.which("groovy")
    java_home = _java_home()
    if groovy is None or java_home is None:
        pytest.skip("groovy is not installed (apt-get install -y --no-install-recommends groovy default-jre-headless)"
                    if groovy is None else "no JVM for groovy (install default-jre-headless or set JAVA_HOME)")
    script = tmp_path / "parse.groovy"
    script.write_text(PARSE)
    return subprocess.run([groovy, str(script), str(path)], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "JAVA_HOME": java_home})


def test_groovy_syntax(tmp_path):
    proc = groovy_parse(JENKINSFILE, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "parsed Jenkinsfile" in proc.stdout


def test_groovy_parse_catches_a_broken_file(tmp_path):
    broken = tmp_path / "Jenkinsfile"
    broken.write_text(JENKINSFILE.read_text().rstrip()[:-1])  # the pipeline's closing brace is gone
    proc = groovy_parse(broken, tmp_path)
    assert proc.returncode != 0 and "expecting" in proc.stderr


# --------------------------------------------------------------------------- structure


def _blank_strings_and_comments(text: str) -> str:
    """Same length, with string contents and comments replaced by spaces (so braces inside don't count)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2) + 2
        elif text.startswith(("'''", '"""'), i):
            j = text.find(text[i:i + 3], i + 3) + 3
        elif text[i] in "'\"":
            j = i + 1
            while j < n and text[j] != text[i]:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        comment = text[i] == "/"
        for k in range(i if comment else i + 1, j if comment else j - 1):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


class Block:
    """A ``name(...) { ... }`` block of the Jenkinsfile, found by brace matching."""

    def __init__(self, text: str, clean: str, start: int, end: int) -> None:
        self.text, self.clean, self.start, self.end = text, clean, start, end

    @property
    def body(self) -> str:
        return self.text[self.start:self.end]

    def find(self, head: str) -> Block:
        """The first block whose header matches regex ``head`` (e.g. ``r"post"``) inside this one."""
        for m in re.finditer(head + r"\s*(\(.*?\))?\s*\{", self.text[self.start:self.end], re.DOTALL):
            open_at = self.start + m.end() - 1
            if self.clean[open_at] != "{" or self.clean[self.start + m.start()] == " ":
                continue  # inside a string or a comment
            depth = 0
            for j in range(open_at, self.end):
                depth += {"{": 1, "}": -1}.get(self.clean[j], 0)
                if depth == 0:
                    return Block(self.text, self.clean, open_at + 1, j)
        raise AssertionError(f"no block {head!r} in:\n{self.body[:400]}")

    def pos(self, needle: str) -> int:
        at = self.clean.find(needle, self.start, self.end)
        assert at >= 0, f"{needle!r} not found in block"
        return at


@pytest.fixture(scope="module")
def pipeline() -> Block:
    text = JENKINSFILE.read_text()
    clean = _blank_strings_and_comments(text)
    return Block(text, clean, 0, len(text)).find(r"(?m)^pipeline")


def test_agent_none_and_parameters(pipeline):
    head = pipeline.body[: pipeline.body.index("stages")]
    assert re.search(r"^\s*agent none\s*$", head, re.MULTILINE)
    params = pipeline.find(r"parameters").body
    assert "string(name: 'ENV_FILE'" in params and "string(name: 'CLUSTER'" in params
    assert "timeout(time: 8, unit: 'HOURS')" in pipeline.find(r"options").body


def test_stage_order(pipeline):
    stages = pipeline.find(r"stages")
    names = re.findall(r"stage\('([^']+)'\)", stages.body)
    assert names == ["Unit tests", "Cluster tests"]


def test_hardware_stage_locks_before_its_agent_and_times_out_inside(pipeline):
    stage = pipeline.find(r"stage\('Cluster tests'\)")
    options = stage.find(r"options")
    assert 'lock(resource: "hw-${params.CLUSTER}")' in options.body
    assert "timeout" not in options.body  # a stage-level timeout would count the wait for the lock
    assert options.start < stage.pos("agent {")
    steps = stage.find(r"steps")
    timeout = steps.find(r"timeout")
    assert steps.pos("timeout(") < steps.pos("withCredentials")
    creds = timeout.find(r"withCredentials")
    assert "sshUserPrivateKey(credentialsId: params.SSH_CREDENTIALS" in stage.body
    assert "keyFileVariable: 'CAMIT_SSH_KEY'" in stage.body
    script = creds.find(r"script").body
    assert "sh(returnStatus: true" in script
    assert re.search(r'pytest suites/cam --env "\$ENV_FILE" --report-dir reports', script)
    assert re.search(r"if \(rc == 1\) \{\s*unstable\(", script)
    assert re.search(r"else if \(rc >= 2\) \{\s*error\(", script)


def test_each_exit_status_from_2_up_fails_the_build_naming_what_it_means(pipeline):
    from framework.errors import SESSION_DEPLOY, SESSION_LEASE, SESSION_MEANING, SESSION_UNREACHABLE

    script = pipeline.find(r"stage\('Cluster tests'\)").find(r"script").body
    table = re.search(r"def meaning = \[(.*?)\]\s*\n", script, re.DOTALL)
    assert table, script
    meaning = {int(k): v for k, v in re.findall(r"(\d+): '([^']*)'", table.group(1))}
    assert sorted(meaning) == list(range(2, 9))  # pytest's 2-5 and camit's 6-8, nothing else
    for code in range(2, 9):  # each says what errors.py's table says
        assert SESSION_MEANING[code].split()[0] in meaning[code].lower(), (code, meaning[code])
    assert "unreachable" in meaning[SESSION_UNREACHABLE] and "lease" in meaning[SESSION_LEASE]
    assert "deploy" in meaning[SESSION_DEPLOY]
    assert re.search(r"else if \(rc >= 2\) \{\s*error\(\"[^\"]*\$\{meaning\.get\(rc", script)


def test_results_are_published_in_post_always(pipeline):
    stage = pipeline.find(r"stage\('Cluster tests'\)")
    always = stage.find(r"post").find(r"always").body
    assert "junit testResults: 'reports/latest/junit.xml, reports/latest/cluster.xml'" in always
    assert "allowEmptyResults: false" in always and "keepProperties: true" in always
    assert "stdioRetention: 'FAILED'" in always
    assert "archiveArtifacts artifacts: 'reports/**'" in always
    cleanup = stage.find(r"post").find(r"cleanup").body
    assert "lease release --env" in cleanup


def test_summary_becomes_the_build_description_and_perf_csv_a_plot(pipeline):
    """The two files finalize writes for a CI server (framework/report/ci.py) are the ones the post block reads."""
    from framework.report import ci

    always = pipeline.find(r"stage\('Cluster tests'\)").find(r"post").find(r"always").body
    described = re.search(r"if \(fileExists\('(reports/latest/[^']+)'\)\) \{\s*currentBuild\.description = "
                          r"readFile\('([^']+)'\)", always)
    assert described and described.group(1) == described.group(2) == "reports/latest/summary.txt"
    plotted = re.search(r"if \(fileExists\('(reports/latest/[^']+)'\)\) \{\s*plot csvFileName: .*?"
                        r"csvSeries: \[\[file: '([^']+)'", always, re.S)
    assert plotted and plotted.group(1) == plotted.group(2) == "reports/latest/perf.csv"
    # the names are what finalize writes (the module's own docs and writers agree with the Jenkinsfile)
    assert "summary.txt" in (ci.write_summary_txt.__doc__ or "") + (ci.__doc__ or "")
    assert "perf.csv" in (ci.write_perf_csv.__doc__ or "") + (ci.__doc__ or "")


def test_block_finder_ignores_braces_in_strings_and_comments():
    text = "a { x = '}' // }\n b { y = \"{\" } }\n"
    block = Block(text, _blank_strings_and_comments(text), 0, len(text)).find("a")
    assert block.find("b").body.strip() == 'y = "{"'


# --------------------------------------------------------------------------- shell quoting

_SH_CALL = re.compile(r"\bsh\s*(?:\(\s*(?:[^'\"()]*?\bscript:\s*)?)?(?P<quote>'''|\"\"\"|'|\")")


def sh_scripts(text: str) -> list[tuple[str, str]]:
    """Every ``sh`` step's script as (Groovy quote, body), in file order; comments and strings skipped."""
    clean = _blank_strings_and_comments(text)
    found = []
    for m in _SH_CALL.finditer(text):
        if clean[m.start()] == " ":  # the word sh inside a string or a comment
            continue
        quote, start = m.group("quote"), m.end()
        end = start
        while not text.startswith(quote, end):
            end += 2 if text[end] == "\\" and len(quote) == 1 else 1
        found.append((quote, text[start:end]))
    return found


def unquoted_expansions(script: str) -> list[str]:
    """Every ``$NAME``, ``${...}``, ``$(...)`` the shell would expand outside double quotes (split, globbed)."""
    out, i, state = [], 0, None  # state: None, "'" or '"'
    while i < len(script):
        c = script[i]
        if state == "'":
            state = None if c == "'" else state
        elif c == "\\":
            i += 1  # the next character is literal (a backslash-newline continues the line)
        elif c == '"':
            state = None if state == '"' else '"'
        elif c == "'" and state is None:
            state = "'"
        elif c == "$" and state is None:
            m = re.match(r"\$(\{[^}]*\}|\([^)]*\)|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])", script[i:])
            if m:
                out.append(m.group(0))
                i += len(m.group(0)) - 1
        i += 1
    return out


def test_every_sh_step_is_single_quoted_groovy_and_double_quotes_each_expansion():
    scripts = sh_scripts(JENKINSFILE.read_text())
    assert len(scripts) >= 4, scripts  # unit tests, make install, the suite, the lease release
    problems = []
    for quote, body in scripts:
        if quote.startswith('"'):  # Groovy would interpolate ${params.X} into the shell text itself
            problems.append(f"double-quoted Groovy string as a shell script: {body.strip()[:80]!r}")
        problems += [f"unquoted {exp} in: {body.strip()[:80]!r}" for exp in unquoted_expansions(body)]
    assert not problems, "\n".join(problems)


def test_pytest_args_reach_pytest_quoted_through_pytest_addopts():
    suite = next(body for _, body in sh_scripts(JENKINSFILE.read_text()) if "pytest suites/cam" in body)
    assert 'PYTEST_ADDOPTS="$PYTEST_ARGS"' in suite
    assert "$PYTEST_ARGS" not in suite.replace('"$PYTEST_ARGS"', "")


def test_the_quoting_check_catches_the_unquoted_form():
    old = ("python3 -m pytest suites/cam --env \"$ENV_FILE\" --report-dir reports \\\n"
           "  --cluster-name \"$CLUSTER\" -o junit_family=xunit2 $PYTEST_ARGS")
    assert unquoted_expansions(old) == ["$PYTEST_ARGS"]
    assert unquoted_expansions("echo ${X} $(id) '$Y' \"$Z\" \\$W") == ["${X}", "$(id)"]
    text = "stage { sh \"make ${params.X}\" }\n// sh 'x $Y'\nsh(returnStatus: true, script: '''a $B''')\n"
    assert sh_scripts(text) == [('"', "make ${params.X}"), ("'''", "a $B")]
