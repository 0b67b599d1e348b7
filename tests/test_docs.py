"""README.md and docs/: what they name exists (files, links, command-line options, config keys),
the CI runs the README's test command, and measured figures stay out of the README and out of the
package's docstrings and comments."""
import glob
import os
import re
import tokenize

import pytest

from gpgan.cli import ablate, sample, train
from gpgan.cli import eval as eval_cli
from gpgan.train.config import config_reference_markdown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def code_blocks(text):
    """The lines of every fenced code block."""
    return [line for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S) for line in block.splitlines()]


def command_lines(text):
    """(command, text) for every line of a code block that runs a gpgan command (the text from the
    command on, past a launcher such as mpiexec); an indented line that continues a usage line
    belongs to the command before it."""
    found, last = [], None
    for line in code_blocks(text):
        words = line.split("#", 1)[0].split()
        command = next((w for w in words if w.startswith("gpgan-")), None)
        if command is not None:
            following = words[words.index(command) + 1:][:1]
            if command == "gpgan-eval" and following in (["stats"], ["real"]):
                command = f"gpgan-eval {following[0]}"
            last = command
            code = line.split("#", 1)[0]
            found.append((command, code[code.index(command.split()[0]):]))  # a launcher's options are not gpgan's
        elif line.startswith(" ") and line.strip().startswith("[") and last is not None:
            found.append((last, line))
        else:
            last = None
    return found


PARSERS = {"gpgan-train": train.build_parser, "gpgan-sample": sample.build_parser,
           "gpgan-eval": eval_cli.build_parser, "gpgan-eval stats": eval_cli.build_stats_parser,
           "gpgan-eval real": eval_cli.build_real_parser, "gpgan-ablate": ablate.build_parser}


def test_readme_and_docs_exist_and_the_readme_stays_short():
    assert {os.path.basename(p) for p in DOCS} >= {"benchmarks.md", "configuration.md", "design.md", "studies.md"}
    lines = read(README).splitlines()
    assert len(lines) <= 350, f"README.md has {len(lines)} lines; details belong in docs/"


def anchors(path):
    """GitHub's anchors for a Markdown file's headings: lower case, punctuation dropped, spaces
    to hyphens."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", read(path), flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("path", [README] + DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_point_to_files_and_headings_that_exist(path):
    links = [link for link in re.findall(r"\]\(([^)\s]+)\)", read(path)) if not re.match(r"[a-z]+:", link)]
    assert links, f"{path} links nothing"
    for link in links:
        target, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        assert os.path.exists(target), f"{os.path.relpath(path, ROOT)} links a missing file: {link}"
        if anchor:
            assert target.endswith(".md") and anchor in anchors(target), (
                f"{os.path.relpath(path, ROOT)} links a missing heading: {link}")


def test_every_documented_command_line_option_exists():
    commands = command_lines(read(README))
    assert {c for c, _ in commands} == set(PARSERS), "README.md should show every command"
    for command, line in commands:
        options = PARSERS[command]()._option_string_actions
        for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line):
            assert option in options, f"README.md: {command} has no option {option} (line: {line.strip()})"


def test_every_documented_config_key_exists():
    keys = set(re.findall(r"^\| `([a-z_.]+)` \|", config_reference_markdown(), re.M))
    dict_keys = {k for k in keys if k.endswith("options")}
    text = read(README)
    named = set(re.findall(r"`(?:--set )?((?:train|model|optim|penalty|data|eval)\.[a-z_.]+)(?:[=:][^`]*)?`", text))
    assert {"train.steps", "train.cuda_graph", "train.stop_after"} <= named
    for key in named:
        assert key in keys or any(key.startswith(d + ".") for d in dict_keys), f"README.md names no config key {key}"


def test_every_named_config_and_script_exists():
    text = read(README) + "".join(read(p) for p in DOCS)
    paths = set(re.findall(r"\b((?:configs|scripts|tests)/[\w/]+\.(?:yaml|py|sh))\b", text))
    shipped = read(README).split("## Configs", 1)[1].split("\n## ", 1)[0]
    paths |= {"configs/" + name for name in re.findall(r"^\| `(\w+\.yaml)` \|", shipped, re.M)}
    assert {"configs/quickstart.yaml", "configs/wgangp_resnet_cifar.yaml", "scripts/bench_engine.py"} <= paths
    missing = sorted(p for p in paths if not os.path.exists(os.path.join(ROOT, p)))
    assert not missing, f"README.md or docs/ name missing files: {missing}"


def test_the_ci_runs_the_readme_test_command():
    quickstart = read(README).split("## Quickstart", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    first, second = quickstart.strip().splitlines()
    assert first == "pip install -e . && gpgan-train configs/quickstart.yaml"
    assert second == "pip install -e '.[test]' && pytest"
    ci = read(os.path.join(ROOT, ".ci", "run")).splitlines()
    assert ci[-1] == second, ".ci/run must run exactly the README's test command"


def test_the_readme_states_no_measured_timings():
    timing = re.compile(r"\b\d[\d,.]*\s?(?:ms|us|s|MiB|GiB|GFLOP/s|steps/s|images/s)\b")
    found = [line for line in read(README).splitlines() if timing.search(line)]
    assert not found, f"measured figures belong in docs/benchmarks.md, not README.md: {found}"


def test_the_package_states_no_measured_figures():
    # Timings and speed-ups belong in docs/benchmarks.md (machine, date, command), not in gpgan's
    # docstrings and comments, where they go stale unseen. Only comments and plain strings are read
    # (an f-string's "{x:8s}" is a format).
    figure = re.compile(r"\b\d[\d,.]*\s?(?:ms|us|µs|ns|s|GFLOP/s|TFLOP/s|steps/s|images/s)\b"
                        r"|\b\d[\d.]*\s?(?:x|times) (?:faster|slower)\b"
                        r"|\b(?:gain|cost|save)s? (?:about )?\d[\d.]*(?:-\d[\d.]*)?\s?%")
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "gpgan", "**", "*.py"), recursive=True)):
        with open(path, "rb") as f:
            for token in tokenize.tokenize(f.readline):
                plain = token.type == tokenize.STRING and "f" not in token.string.split("'")[0].split('"')[0].lower()
                if (token.type == tokenize.COMMENT or plain) and figure.search(token.string):
                    found.append(f"{os.path.relpath(path, ROOT)}:{token.start[0]}: {figure.search(token.string)[0]}")
    assert not found, f"measured figures belong in docs/benchmarks.md, not in gpgan/: {found}"


@pytest.mark.parametrize("path", [README, os.path.join(ROOT, "docs", "design.md")],
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_the_package_tables_name_every_package(path):
    """The README's "Design in brief" and design.md's "Packages" tables: one row (or a shared row)
    for every package of gpgan/, and no package that does not exist."""
    packages = {name for name in os.listdir(os.path.join(ROOT, "gpgan"))
                if os.path.isfile(os.path.join(ROOT, "gpgan", name, "__init__.py"))}
    table = read(path).split("| package | owns |", 1)[1].split("\n\n", 1)[0]
    named = {name for row in table.splitlines()[2:] for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert named == packages, f"missing: {sorted(packages - named)}; not packages: {sorted(named - packages)}"
