"""The tests' layout: a module's tests are found from its name.

The tests of ``state_reader/<layer>/<module>.py`` (or of the package ``<layer>/<module>/``) are in
``tests/<layer>/test_<module>.py``, or ``test_<module>_<topic>.py`` when they are several; those of a
top-level module ``state_reader/<module>.py`` in ``tests/test_<module>.py``. Tests that compare with
Spark itself are in ``tests/oracles/``, promises spanning the package in ``tests/contracts/``; what
tests share lives in ``tests/support/`` and holds no tests.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import DOCS, PACKAGE, TESTS

# folders of tests named freely, by what they compare or promise
FREE = {"oracles", "contracts"}
# folders that hold no tests: shared code, the golden checkpoints, the version matrix
NO_TESTS = {"support", "golden", "compat"}


# modules without a test file of their own, and the test files that exercise them: an index for the
# reader, kept true by the tests below (every entry a module, every file there, no module left out)
TESTED_IN: dict[str, tuple[str, ...]] = {
    "__init__": ("contracts/test_packaging.py",),
    "__main__": ("fronts/test_cli.py",),
    "deprecation": ("contracts/test_vocabulary.py",),
    "_version": ("contracts/test_packaging.py", "fronts/test_cli.py"),
    "progress": ("fronts/test_cli.py",),
    "spark": ("oracles/test_spark_fronts.py",),
    "io/memory": ("oracles/test_rewrite.py",),
    "io/calls": ("io/test_storage.py", "io/test_storage_s3.py"),
    "io/filesystems": ("io/test_storage.py", "io/test_storage_s3.py"),
    "formats/_numba_sst": ("formats/test_sst.py",),
    "formats/_numba_walk": ("formats/test_kernels.py",),
    "formats/rocksdict_db": ("formats/test_sst.py",),
    "formats/rocksdb_ordering": ("formats/test_rocksdb_encode.py", "formats/test_avro_encoding.py"),
    "model/operators": ("oracles/test_hdfs.py", "oracles/test_rocksdb.py"),
    "model/state_variables": ("oracles/test_transform_with_state.py",),
    "providers/rocksdb_families": ("oracles/test_transform_with_state.py", "inspect/test_explain.py"),
    "providers/rocksdb_variables": ("oracles/test_transform_with_state.py",),
    "providers/rocksdb_state": ("formats/test_changelog.py", "providers/test_rocksdb.py"),
    "core/metadata": ("oracles/test_hdfs.py", "oracles/test_spark_fronts.py"),
    "core/size": ("core/test_rewrite.py", "inspect/test_stats.py"),
    "inspect/doctor_findings": ("inspect/test_doctor.py",),
    "inspect/doctor_thresholds": ("inspect/test_doctor.py", "core/test_skew.py"),
    "fronts/frame": ("oracles/test_spark_fronts.py", "oracles/test_connect.py"),
    "fronts/sql": ("oracles/test_spark_fronts.py",),
    "fronts/stream_source": ("core/test_follow.py",),
    "fronts/follow_cli": ("core/test_follow.py",),
    "fronts/why_cli": ("inspect/test_explain.py", "inspect/test_verdict_summary.py"),
    "fronts/plot_cli": ("fronts/test_plotting.py", "fronts/test_cli.py", "inspect/test_verdict_summary.py"),
}


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


def _own_test_file(module: str) -> bool:
    """Whether ``module`` (``<layer>/<name>`` or a top-level ``<name>``) has a test file named for it."""
    layer, _, name = module.rpartition("/")
    return any(_named_for(path.stem, {name}) for path in (TESTS / layer).glob("test_*.py"))


def _package_modules() -> list[str]:
    """Every module of the package as ``<layer>/<name>``, a sub-package counted once, by its name."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if len(parts) == 1:
            out.append(parts[0])
        elif len(parts) == 2 and parts[1] != "__init__":
            out.append("/".join(parts))
        elif len(parts) == 3 and parts[2] == "__init__":
            out.append("/".join(parts[:2]))
    return out


def test_every_module_has_tests_found_from_its_name_or_listed():
    modules = _package_modules()
    unlisted = [m for m in modules if not _own_test_file(m) and m not in TESTED_IN]
    assert not unlisted, "modules with no test file named for them: add one, or list where they are tested\n" + (
        "\n".join(unlisted)
    )
    stale = [m for m in TESTED_IN if m not in modules or _own_test_file(m)]
    assert not stale, f"entries of TESTED_IN that are not modules, or now have a test file of their own: {stale}"
    missing = [f for files in TESTED_IN.values() for f in files if not (TESTS / f).is_file()]
    assert not missing, f"test files named in TESTED_IN that do not exist: {missing}"


def test_every_test_folder_is_a_layer_or_described():
    """A folder of tests is a layer of the package, or one the architecture page says what it holds."""
    described = (DOCS / "architecture.md").read_text()
    for folder in sorted(p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))):
        if not (PACKAGE / folder / "__init__.py").exists():
            assert folder in FREE | NO_TESTS, f"tests/{folder}/ is no layer of the package"
            assert f"tests/{folder}/" in described, f"docs/architecture.md does not say what tests/{folder}/ holds"


def test_no_test_folder_can_hide_a_standard_module():
    """Only ``tests`` itself is a regular package. ``tests/io`` and ``tests/inspect`` with an
    ``__init__.py`` would be imported for the standard library's ``io`` and ``inspect`` wherever
    ``tests/`` is on the path (``python -m pytest`` run inside it), and nothing would start."""
    inits = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("__init__.py") if p.parent != TESTS)
    assert not inits, f"folders of tests made packages: {inits}"


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
