"""What test modules share lives in tests/helpers/: no test module imports another test module or the conftest (each
test module runs alone, and conftest.py holds only hooks and fixtures), and tests/ holds no helper module beside
the tests."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) for every import in the module, those inside functions included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "tests":  # from tests import test_x, conftest
                found += [(node.lineno, f"tests.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):  # relative: from .test_x import ..., from . import conftest
            base = "tests" + (f".{node.module}" if node.module else "")
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def test_no_test_module_imports_another_or_the_conftest_and_helpers_live_in_tests_helpers():
    problems = []
    for path in sorted([*TESTS.glob("test_*.py"), TESTS / "conftest.py"]):
        for line, module in imported_modules(ast.parse(path.read_text(), filename=str(path))):
            parts = module.split(".")
            if parts[0] == "tests" and len(parts) > 1 and (parts[1].startswith("test_") or parts[1] == "conftest"):
                problems.append(f"tests/{path.name}:{line} imports {module} (move what it uses into tests/helpers/)")
    for path in sorted(TESTS.glob("*.py")):
        if not path.name.startswith("test_") and path.name not in ("conftest.py", "__init__.py"):
            problems.append(f"tests/{path.name} is a helper module outside tests/helpers/")
    assert not problems, "\n".join(problems)
