"""The tests' layout: a module's tests are found from its name.

The tests of ``state_reader/<layer>/<module>.py`` (or of the package ``<layer>/<module>/``) are in
``tests/<layer>/test_<module>.py``, or ``test_<module>_<topic>.py`` when they are several; those of a
top-level module ``state_reader/<module>.py`` in ``tests/test_<module>.py``. Tests that compare with
Spark itself are in ``tests/oracles/``, promises spanning the package in ``tests/contracts/``; what
tests share lives in ``tests/support/`` and holds no tests.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import PACKAGE, TESTS

# folders of tests named freely, by what they compare or promise
FREE = {"oracles", "contracts"}
# folders that hold no tests: shared code, the golden checkpoints, the version matrix
NO_TESTS = {"support", "golden", "compat"}


def _modules(folder: Path) -> set[str]:
    """The modules and sub-packages directly in ``folder`` of the package."""
    return {p.stem for p in folder.glob("*.py") if not p.name.startswith("__")} | {
        p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }


def _named_for(stem: str, modules: set[str]) -> bool:
    name = stem.removeprefix("test_")
    return any(name == m or name.startswith(m + "_") for m in modules)


def misplaced(tests: Path, package: Path) -> list[str]:
    """Test files whose place or name does not say which module they test."""
    wrong = []
    for path in sorted(tests.rglob("test_*.py")):
        parts = path.relative_to(tests).parts
        if parts[0] in FREE and len(parts) == 2:
            continue
        if len(parts) == 1:
            owner = package
        elif len(parts) == 2 and parts[0] not in NO_TESTS and parts[0] not in FREE:
            owner = package / parts[0]
        else:
            wrong.append(f"{'/'.join(parts)}: not in a folder of tests")
            continue
        if not owner.is_dir() or not _named_for(path.stem, _modules(owner)):
            where = owner.relative_to(package.parent)
            wrong.append(f"{'/'.join(parts)}: names no module of {where}/")
    return wrong


def test_every_test_file_is_named_for_a_module_or_kept_apart():
    wrong = misplaced(TESTS, PACKAGE)
    assert not wrong, "test files a newcomer would not find from a module's name:\n" + "\n".join(wrong)


def test_every_test_folder_says_what_it_holds():
    for folder in sorted(p for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        assert (folder / "__init__.py").read_text().lstrip().startswith('"""'), folder.name


def test_the_rule_sees_a_misnamed_and_a_misplaced_file(tmp_path):
    """The checker itself, on a small tree of its own."""
    package = tmp_path / "pkg"
    (package / "core" / "rewrite").mkdir(parents=True)
    for name in ("core/scan.py", "core/rewrite/__init__.py", "units.py"):
        (package / name).touch()
    tests = tmp_path / "tests"
    for name in (
        "core/test_scan.py",
        "core/test_scan_lookups.py",
        "core/test_rewrite.py",
        "test_units.py",
        "oracles/test_anything.py",
        "core/test_scanner.py",
        "test_lookups.py",
        "support/test_helpers.py",
        "formats/test_sst.py",
    ):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).touch()
    assert [w.split(":")[0] for w in misplaced(tests, package)] == [
        "core/test_scanner.py",
        "formats/test_sst.py",
        "support/test_helpers.py",
        "test_lookups.py",
    ]
