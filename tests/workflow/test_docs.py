"""The README and docs say only what is true of this checkout: every command they show runs or dry-runs, and every
path, module, rule and config key they name exists.

Commands are the lines of their ```bash blocks and the `inline` spans that start with a program (``snakemake``,
``python``, ``bash``, ...). A ``snakemake`` command is dry-run (``-n``) in a scratch copy of the workflow, never run;
``python -m pipeline_lib plan`` runs; other commands are checked without running what they would install or train
(an extra must exist in ``pyproject.toml``, a script's flags must be in its source). Paths under ``results/`` must be
outputs the workflow declares (``snakemake --summary`` of the tiny default, the paper plan and the preflight), or
one of the few files written outside the job graph (:data:`OUTSIDE_GRAPH`); other paths must exist in the checkout.
In ``docs/output.md`` every rule the workflow has must appear, and each row's outputs must be made by a rule the row
names.

A doc can say what is about to land: a name that appears in one of its ``<!-- pending: ... -->`` comments and does not
exist yet is reported as a warning instead of a failure; remove the comment when it lands and the check is strict.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
import tomllib
import yaml

from tests.conftest import NO_CONDA, REPO, WORKFLOW_PARTS, repo_env

#: The pages whose commands and names are checked.
DOCS = ("README.md", "docs/usage.md", "docs/output.md", "docs/design.md", "docs/miniature.md", "docs/tracking.md",
        "docs/measurements.md", "CHANGELOG.md")
#: The pages that record history: a config value they quote may be one no shipped config has any more.
HISTORY = ("CHANGELOG.md", "docs/measurements.md")
README_MAX_LINES = 150
#: The configs whose declared outputs a ``results/`` path may name.
SUMMARY_CONFIGS = {"tiny": (), "paper": ("--configfile", "config/paper.yaml"),
                   "preflight": ("--configfile", "config/preflight.yaml")}
#: Files under results/ that no rule declares: each with the file that makes it and the text there that does.
OUTSIDE_GRAPH = {
    "results/run_info/": ("pipeline_lib/core/run_info.py", '"results/run_info"'),
    "results/tracking/": ("workflow/schemas/config.schema.yaml", "results/tracking"),
    "results/benchmarks/": ("workflow/rules/train.smk", '"results/benchmarks/'),
    "results/report.html": (".ci/run", "snakemake --report results/report.html"),
    "results/data/{task}/rl_val.parquet": ("pipeline_lib/core/data/build.py", '"rl_val"'),
}
#: Top-level names a path in the docs starts with.
REPO_ROOTS = ("pipeline_lib/", "workflow/", "config/", "tests/", "benchmarks/", "envs/", "profiles/", "docs/", ".ci/",
              "Snakefile", "pyproject.toml", "README.md", "CHANGELOG.md")
PROGRAMS = ("snakemake", "python", "bash", "tensorboard", "mkdir", "ln", "printf")
#: Named targets of the Snakefile (besides the rules the summaries list).
TARGETS = ("all", "data", "train", "eval", "judge", "paper", "preflight")
#: Snakemake options whose values are rule names.
RULE_OPTIONS = ("--forcerun", "-R", "--until", "-U", "--omit-from", "-O")

CODE_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PENDING = re.compile(r"<!--\s*pending:(.*?)-->", re.S)


@dataclass
class Page:
    """One doc: its commands, its other code spans and links, and the names its pending comments excuse."""

    path: str
    text: str
    commands: list[str] = field(default_factory=list)
    spans: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    pending: str = ""


def read_page(path: str, text: str | None = None) -> Page:
    text = (REPO / path).read_text() if text is None else text
    page = Page(path, text, pending=" ".join(PENDING.findall(text)))
    prose = text
    for lang, body in CODE_BLOCK.findall(text):
        if lang == "bash":
            lines = body.replace("\\\n", " ").splitlines()
            page.commands += [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    prose = CODE_BLOCK.sub("", text)
    prose = PENDING.sub("", prose)
    for span in SPAN.findall(prose.replace("\n", " ")):
        is_command = span.split()[0] in PROGRAMS or re.match(r"benchmarks/\S+\.py( |$)", span)
        (page.commands if is_command else page.spans).append(span)
    page.links = LINK.findall(prose)
    return page


def split_commands(command: str) -> list[tuple[str, list[str]]]:
    """``a && b`` -> a and b, each as text and as its argument list (redirections kept as arguments)."""
    return [(part, shlex.split(part, comments=True)) for part in re.split(r"\s*&&\s*", command) if part.strip()]


# --- names --------------------------------------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"<[^<>/]+>|\{[^{},/]+\}")
ALTERNATIVES = re.compile(r"\{([^{}]*,[^{}]*)\}")


def expand(path: str) -> list[str]:
    """Brace alternatives ``{a,b}`` expanded (placeholders ``{task}``, ``<task>`` left as they are)."""
    match = ALTERNATIVES.search(path)
    if not match:
        return [path]
    return [p for alt in match.group(1).split(",") for p in expand(path[:match.start()] + alt + path[match.end():])]


def as_regex(path: str) -> re.Pattern:
    parts = PLACEHOLDER.split(path)
    return re.compile("[^/]+".join(re.escape(p).replace(r"\*", "[^/]*") for p in parts))


def is_path(span: str) -> bool:
    return " " not in span and span.startswith((*REPO_ROOTS, "results/", "logs/"))


@cache
def schema() -> dict:
    return yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        node = schema()["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _children(node: dict, name: str) -> list[dict]:
    node = _resolve(node)
    found = []
    for branch in [node, *node.get("anyOf", []), *node.get("oneOf", []), *node.get("allOf", [])]:
        branch = _resolve(branch)
        properties = branch.get("properties", {})
        if PLACEHOLDER.fullmatch(name):
            found += list(properties.values())
            if isinstance(branch.get("additionalProperties"), dict):
                found.append(branch["additionalProperties"])
        elif name in properties:
            found.append(properties[name])
        elif isinstance(branch.get("additionalProperties"), dict):
            found.append(branch["additionalProperties"])
        if branch.get("type") == "array" and isinstance(branch.get("items"), dict):
            found += _children(branch["items"], name)
    return found


def config_key_exists(key: str) -> bool:
    """A key of the schema; ``preflight.*``, which the schema leaves to its checker, a key of config/preflight.yaml."""
    if key.startswith("preflight."):
        return config_value(yaml.safe_load((REPO / "config/preflight.yaml").read_text()), key) is not None
    nodes = [schema()]
    for part in key.split("."):
        nodes = [child for node in nodes for child in _children(node, part)]
        if not nodes:
            return False
    return True


def is_config_key(span: str) -> bool:
    key = span.split(":")[0].strip()
    shaped = re.fullmatch(r"[a-z_]+(\.([a-z_0-9]+|<[a-z_]+>))+", key) and not re.search(r"\.(py|ya?ml|md|json)$", key)
    return bool(shaped) and key.split(".")[0] in schema()["properties"]


@cache
def resolved_configs() -> list[dict]:
    from pipeline_lib.core.config import load_config_file, validate_config

    return [validate_config(load_config_file(REPO / name), REPO / "workflow/schemas/config.schema.yaml")
            for name in ("config/config.yaml", "config/paper.yaml")]


def config_value(config: dict, key: str):
    for part in key.split("."):
        if not isinstance(config, dict) or part not in config:
            return None
        config = config[part]
    return config


def module_exists(name: str) -> bool:
    """``pipeline_lib.a.b`` (or ``pipeline_lib.a.b.attr``) names a module of the package (and a name defined in it)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if source.is_file():
            rest = parts[cut:]
            if not rest:
                return True
            if len(rest) > 1:
                return False
            pattern = rf"^\s*(def |class |async def )?{re.escape(rest[0])}\b"
            return re.search(pattern, source.read_text(), re.M) is not None
    return False


@cache
def extras() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])


@cache
def markers() -> set[str]:
    lines = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    return {line.split(":")[0].strip() for line in lines}


# --- the workflow's outputs -------------------------------------------------------------------------------------------


def scratch_workflow(root: Path) -> Path:
    root.mkdir(parents=True)
    for part in WORKFLOW_PARTS:
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy2)(REPO / part, root / part)
    return root


def run(argv: list[str], cwd: Path, home: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = repo_env() | {"HOME": str(home), "OMP_NUM_THREADS": "1"}
    env.pop("SNAKEMAKE_PROFILE", None)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def snakemake_argv(args: list[str]) -> tuple[list[str], list[str]]:
    """A shown ``snakemake`` command -> the dry-run that checks its config and profile, and the rule names it gives
    (targets, ``--forcerun``/``--until`` values), checked against the workflow's rules rather than dry-run one by one:
    a dry-run per target would cost a workflow parse each (seconds)."""
    rules, kept, values = [], [], iter(args)
    for arg in values:
        if arg in ("-n", "--dry-run", "-p", "--printshellcmds"):
            continue
        if arg in RULE_OPTIONS:
            rules.append(next(values))
        elif arg == "--report":
            next(values)
        elif not arg.startswith("-") and (not kept or kept[-1] not in ("--configfile", "--profile", "--cores", "-c")) \
                and not arg.endswith((".yaml", ".yml")):
            rules.append(arg)
        else:
            kept.append(arg)
    return kept, rules


def dry_run_argv(kept: list[str]) -> list[str]:
    """The dry-run of a config and profile: ``--summary`` (it builds the whole job graph as ``-n`` does, and lists
    the outputs) where the profile is the default, ``-n`` under another profile."""
    if "--profile" in kept:  # profiles/slurm deploys conda envs: the dry-run's stand-in (conftest.NO_CONDA)
        return [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--nolock", *kept, *NO_CONDA]
    return [sys.executable, "-m", "snakemake", "--summary", "--nolock", *kept]


@dataclass
class Checked:
    """The outcome of every command: failures as (page, name, message)."""

    outputs: dict[str, str]  # declared output -> rule, over SUMMARY_CONFIGS
    failures: list[tuple[str, str, str]]


def check_commands(pages: list[Page], tmp: Path) -> Checked:
    """Run or dry-run every command of the pages (dry-runs and ``plan`` in parallel, each in its own scratch copy)."""
    failures: list[tuple[str, str, str]] = []
    base = scratch_workflow(tmp / "base")
    home = tmp / "home"
    home.mkdir()
    jobs: dict[tuple[str, ...], list[tuple[str, str]]] = {}  # argv -> [(page, command)]
    rule_names: list[tuple[Page, str, list[str]]] = []

    def fail(page: Page, name: str, message: str) -> None:
        failures.append((page.path, name, message))

    for page in pages:
        for command in page.commands:
            for part, argv in split_commands(command):
                program, args = argv[0], argv[1:]
                if program == "snakemake":
                    kept, rules = snakemake_argv(args)
                    if "--report" in args and "\nreport:" not in (REPO / "workflow/rules/common.smk").read_text():
                        fail(page, command, "the workflow declares no report")
                    jobs.setdefault(tuple(dry_run_argv(kept)), []).append((page.path, command))
                    rule_names.append((page, command, rules))
                elif program in ("printf", "mkdir", "ln"):
                    result = run(["bash", "-c", part], base, home)  # in the scratch copy, with HOME there
                    if result.returncode:
                        fail(page, command, result.stderr[-500:])
                elif program == "python" and args[:3] == ["-m", "pip", "install"]:
                    spec = args[-1]
                    named = set(re.fullmatch(r"\.\[(.*)\]", spec).group(1).split(",")) if "[" in spec else set()
                    for extra in sorted(named - extras()):
                        fail(page, extra, f"{command}: no extra {extra!r} in pyproject.toml")
                elif program == "python" and args[:2] == ["-m", "pytest"]:
                    rest = args[2:]
                    for i, arg in enumerate(rest):
                        if arg == "-m" and rest[i + 1] not in markers():
                            fail(page, rest[i + 1], f"{command}: marker not registered in pyproject.toml")
                elif program == "python" and args[:2] == ["-m", "pipeline_lib"] and args[2:3] == ["plan"]:
                    jobs.setdefault((sys.executable, *args), []).append((page.path, command))
                elif program == "python" and args[:2] == ["-m", "pipeline_lib"] and args[2:3] == ["audit"]:
                    result = run([sys.executable, "-m", "pipeline_lib", "audit", "--help"], base, home)
                    if result.returncode:
                        fail(page, command, result.stderr[-500:])
                elif program == "python" and args[:1] == ["-m"]:
                    check_script(page, command, args[1], args[2:], fail)
                elif program == "python" or program.startswith("benchmarks/"):
                    script, rest = (args[0], args[1:]) if program == "python" else (program, args)
                    check_script(page, command, script, rest, fail)
                elif program == "bash":
                    script = REPO / args[0]
                    if not script.is_file():
                        fail(page, args[0], f"{command}: no such script")
                    elif run(["bash", "-n", str(script)], base, home).returncode:
                        fail(page, args[0], f"{command}: the script does not parse")
                elif program == "tensorboard":
                    if "dashboard" not in extras():
                        fail(page, command, "no `dashboard` extra installs tensorboard")
                else:
                    fail(page, command, f"no check for a {program!r} command: add one to tests/workflow/test_docs.py")

    for args in SUMMARY_CONFIGS.values():
        jobs.setdefault(tuple(dry_run_argv(list(args))), [])
    todo = {("job", *k): list(k) for k in jobs}
    numbered = {key: (i, argv) for i, (key, argv) in enumerate(todo.items())}

    def one(item: tuple[tuple[str, ...], tuple[int, list[str]]]) -> tuple[tuple[str, ...], subprocess.CompletedProcess]:
        key, (number, argv) = item
        copy = tmp / f"run{number}"
        shutil.copytree(base, copy)
        return key, run(argv, copy, home)

    outputs: dict[str, str] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        for key, result in pool.map(one, numbered.items()):
            if result.returncode:
                for page, command in jobs[key[1:]] or [("(workflow)", shlex.join(key[3:]))]:
                    failures.append((page, command, (result.stdout + result.stderr)[-2000:]))
            elif "--summary" in key:
                for cells in (line.split("\t") for line in result.stdout.splitlines()[1:]):
                    if len(cells) >= 3:
                        outputs[cells[0]] = cells[2]
    known = set(outputs.values()) | set(TARGETS)
    for page, command, rules in rule_names:
        failures += [(page.path, rule, f"{command}: no rule or target {rule!r}") for rule in rules if rule not in known]
    return Checked(outputs, failures)


def check_script(page: Page, command: str, script: str, args: list[str], fail) -> None:
    """A script or module the docs run without running it here: it exists and takes every flag shown."""
    if script.startswith("pipeline_lib"):
        path = REPO.joinpath(*script.split("."))
        source = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__main__.py"
    else:
        source = REPO / script
    if not source.is_file():
        fail(page, script, f"{command}: no such script or module")
        return
    text = source.read_text()
    for flag in (a.split("=")[0] for a in args if a.startswith("--")):
        if f'"{flag}"' not in text and f"'{flag}'" not in text:
            fail(page, flag, f"{command}: {script} takes no {flag}")


def check_names(page: Page, outputs: dict[str, str]) -> list[tuple[str, str, str]]:
    """Every path, module, config key and link of a page exists."""
    failures = []
    names = list(page.spans)
    for command in page.commands:
        names += [a for _, argv in split_commands(command) for a in argv[1:] if is_path(a)]
    for span in names:
        if is_path(span):
            failures += [(page.path, p, message) for p in expand(span) if (message := path_problem(p, outputs))]
        elif re.fullmatch(r"-m \w+", span) and span[3:] not in markers():
            failures.append((page.path, span, "no such pytest marker in pyproject.toml"))
        elif re.fullmatch(r"pipeline_lib(\.\w+)+", span) and not module_exists(span):
            failures.append((page.path, span, "no such module or name in pipeline_lib"))
        elif is_config_key(span):
            key, _, value = span.partition(":")
            if not config_key_exists(key.strip()):
                failures.append((page.path, key, "no such config key in workflow/schemas/config.schema.yaml"))
            elif value.strip() and page.path not in HISTORY and all(  # these quote history
                    config_value(c, key.strip()) != yaml.safe_load(value) for c in resolved_configs()):
                failures.append((page.path, span, "the docs quote a value no shipped config has"))
    for link in page.links:
        if not link.startswith(("http", "#")) and not (REPO / page.path).parent.joinpath(link.split("#")[0]).exists():
            failures.append((page.path, link, "broken link"))
    return failures


def path_problem(path: str, outputs: dict[str, str]) -> str | None:
    if path.startswith("results/"):
        for outside, (writer, needle) in OUTSIDE_GRAPH.items():
            if as_regex(outside).match(path) or as_regex(path).match(outside):
                return None if needle in (REPO / writer).read_text() else f"{writer} no longer writes it"
        pattern = as_regex(path.rstrip("/"))
        if any(pattern.fullmatch(o) or (pattern.match(o) and o[pattern.match(o).end()] == "/") for o in outputs):
            return None
        run_dir, _, name = path.rpartition("/")
        if any(as_regex(run_dir + "/DONE.json").fullmatch(o) for o in outputs) and name in package_text():
            return None  # a file of a run's directory, beside the DONE.json sentinel the rule declares
        return "no rule of the tiny default, the paper plan or the preflight makes it (snakemake --summary)"
    if path.startswith("logs/"):
        stem = PLACEHOLDER.split(path)[0]
        sources = [*(REPO / "workflow").rglob("*.smk"), *(REPO / "profiles").rglob("*.yaml")]
        return None if any(stem in s.read_text() or stem.rstrip("/") in s.read_text() for s in sources) else \
            "no rule or profile writes there"
    if "::" in path:  # a test's node id
        file, _, test = path.partition("::")
        found = (REPO / file).is_file() and f"def {test.split('::')[-1]}(" in (REPO / file).read_text()
        return None if found else "no such test"
    pattern = PLACEHOLDER.sub("*", path)
    return None if any(REPO.glob(pattern.rstrip("/"))) or (REPO / pattern).exists() else "no such file in the checkout"


@cache
def package_text() -> str:
    return "\n".join(path.read_text() for path in (REPO / "pipeline_lib").rglob("*.py"))


def strict(failures: list[tuple[str, str, str]], pages: dict[str, Page]) -> list[str]:
    """Failures that no pending comment of their page excuses (the excused ones become warnings)."""
    hard = []
    for page, name, message in failures:
        pending = pages[page].pending if page in pages else ""
        if name and pending and any(token and token in pending for token in (name, name.strip("`"))):
            warnings.warn(f"{page}: {name}: {message} (pending)", stacklevel=2)
        else:
            hard.append(f"{page}: {name}: {message}")
    return hard


# --- the tests --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pages() -> dict[str, Page]:
    return {path: read_page(path) for path in DOCS}


@pytest.fixture(scope="module")
def checked(pages, tmp_path_factory) -> Checked:
    return check_commands(list(pages.values()), tmp_path_factory.mktemp("docs"))


def test_readme_is_an_entry_page(pages):
    """Under 150 lines, exactly two set-up-and-run commands (the main job and the tests), links to every doc."""
    readme = pages["README.md"]
    assert len(readme.text.splitlines()) < README_MAX_LINES, f"README.md has {len(readme.text.splitlines())} lines"
    blocks = [body.strip() for lang, body in CODE_BLOCK.findall(readme.text) if lang == "bash"]
    assert len(blocks) == 2, f"README.md shows {len(blocks)} command blocks, not the two set-up-and-run commands"
    assert blocks[0].startswith("python -m pip install -e \".[cpu]\"") and blocks[0].endswith("snakemake")
    assert blocks[1].startswith("python -m pip install -e \".[cpu,test]\"") and blocks[1].endswith("python -m pytest")
    assert "-m fast" in readme.text
    for doc in DOCS[1:]:
        assert f"]({doc})" in readme.text, f"README.md does not link {doc}"


def test_every_command_runs_or_dry_runs(checked, pages):
    assert checked.outputs, "no declared outputs: the summaries failed"
    hard = strict([f for f in checked.failures], pages)
    assert not hard, "\n".join(hard)


def test_every_named_path_module_and_key_exists(checked, pages):
    failures = [f for page in pages.values() for f in check_names(page, checked.outputs)]
    hard = strict(failures, pages)
    assert not hard, "\n".join(hard)


def test_output_doc_covers_every_rule_with_its_outputs(checked, pages):
    """docs/output.md names every rule, and each row's outputs are made by a rule that row names."""
    text = pages["docs/output.md"].text
    rules = set(checked.outputs.values())
    named = set(SPAN.findall(text))
    missing = {rule for rule in rules if rule not in named
               and not any(PLACEHOLDER.search(n) and as_regex(n).fullmatch(rule) for n in named)}
    assert not missing, f"docs/output.md does not name these rules: {sorted(missing)}"
    wrong = []
    for row in (line for line in text.splitlines() if line.startswith("| `results/")):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        row_rules = [as_regex(r) for r in SPAN.findall(cells[1])]
        for span in SPAN.findall(cells[0]):
            if not span.startswith("results/"):
                continue
            for path in expand(span):
                pattern = as_regex(path.rstrip("/"))
                makers = {rule for out, rule in checked.outputs.items()
                          if pattern.fullmatch(out) or (pattern.match(out) and out[pattern.match(out).end()] == "/")}
                if makers and not any(r.fullmatch(m) for r in row_rules for m in makers):
                    wrong.append(f"{path}: made by {sorted(makers)}, the row names {cells[1]}")
    assert not wrong, "\n".join(wrong)


def test_the_checks_fail_on_a_renamed_path_key_or_command(checked, tmp_path):
    """The same checks on a doc that names a renamed file, output, module, key, link, flag, extra and rule find each."""
    page = read_page("docs/renamed.md", "`pipeline_lib/advantage.py` `results/paper/tables/table_1.md` `train.rl.step`"
                     " `report.min_seeds: 5` `pipeline_lib.core.provenance.code_digests` [x](nowhere.md) `-m "
                     "fastest`\n")
    failing = check_names(page, checked.outputs)

    def fail(page_: Page, name: str, message: str) -> None:
        failing.append((page_.path, name, message))

    check_script(page, "python benchmarks/default_run.py --runs", "benchmarks/default_run.py", ["--runs"], fail)
    found = {name for _, name, _ in failing}
    assert {"pipeline_lib/advantage.py", "results/paper/tables/table_1.md", "train.rl.step", "report.min_seeds: 5",
            "pipeline_lib.core.provenance.code_digests", "nowhere.md", "--runs", "-m fastest"} <= found, found
    assert "gpus" not in extras() and "cpu" in extras()
    assert snakemake_argv(["-n", "--until", "paper_theory_dat", "--configfile", "a.yaml", "paper"]) == (
        ["--configfile", "a.yaml"], ["paper_theory_dat", "paper"])
    rules = set(checked.outputs.values())
    assert "paper_theory_dat" not in rules and "paper_theory_data" in rules
    broken = scratch_workflow(tmp_path / "wf")
    (broken / "config" / "paper.yaml").write_text("train: {methodz: {}}\n")
    result = run(dry_run_argv(["--configfile", "config/paper.yaml"]), broken, tmp_path)
    assert result.returncode != 0 and "methodz" in result.stderr, "a dry-run of a broken config passed"
