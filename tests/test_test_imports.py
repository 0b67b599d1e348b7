"""No test file imports another: what several test files share lives in helpers.py, so that
collecting one test file never runs another's module code and a test file can be renamed or
removed alone."""
import ast
import os

TESTS = os.path.dirname(os.path.abspath(__file__))


def _imported_modules(path):
    """The top-level module name of every import statement in ``path``, with its line."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):  # imports inside functions count too
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def _imports_a_test_file(module):
    parts = module.split(".")
    return parts[0].startswith("test_") or (parts[0] == "tests" and len(parts) > 1 and parts[1].startswith("test_"))


def test_no_test_file_imports_another():
    names = sorted(n for n in os.listdir(TESTS) if n.endswith(".py"))
    assert "helpers.py" in names and "test_cli_train.py" in names  # the scan sees the files
    offending = [f"tests/{name}:{line}: imports {module}"
                 for name in names for line, module in _imported_modules(os.path.join(TESTS, name))
                 if _imports_a_test_file(module)]
    assert offending == [], "\n".join(offending)


def test_the_scan_recognizes_imports_of_test_files(tmp_path):
    path = tmp_path / "example.py"
    path.write_text("import os\nfrom helpers import ROOT\n\ndef f():\n    from test_data import write_cifar\n"
                    "import tests.test_cli_train as t\n")
    found = [module for _, module in _imported_modules(str(path)) if _imports_a_test_file(module)]
    assert sorted(found) == ["test_data", "tests.test_cli_train"]
