"""The test suite. Tests of ``state_reader/<layer>/<module>.py`` are in ``tests/<layer>/test_<module>.py``
(or ``test_<module>_<topic>.py``); tests of a top-level module are here. Apart from those:
``oracles/`` compares with Spark itself, ``contracts/`` checks promises that span the package,
``support/`` holds what tests share, ``golden/`` checkpoints of older Spark versions, ``compat/`` the
pyspark version matrix. Only this folder is a package (``docs/architecture.md``, Tests, says why)."""
