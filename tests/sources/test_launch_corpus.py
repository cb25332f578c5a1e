"""Every published launch script of the corpus (tests/sources/launch_corpus.py; sources and
commits in tests/sources/native/launch/SOURCES.md) gets a verdict, and its errors are exactly
the ones its case names: the flags the installed transformers refuses (renamed since the
script was written), none when checked against the release the repository pins."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import check_native
from cfgcheck.sources.launcher.entry import release_tables
from cfgcheck.sources.launcher.flags import read_launch
from tests.sources.launch_corpus import CASES, PUBLISHED, Case, make_cache

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_cache(tmp_path_factory.mktemp("hub"))


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c.script}@{c.transformers or 'installed'}" for c in CASES]
)
def test_each_published_script_gets_its_verdict(
    case: Case, hub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    options = {}
    if case.cwd:
        options["cwd"] = str(PUBLISHED / case.cwd)
    if case.transformers:
        options["transformers_version"] = case.transformers
    script = PUBLISHED / case.script
    if case.remote is not None:
        native = read_launch(script.read_text(), case.script, script, list(case.args), options)
        errors = [p for p in native.problems if p.severity == "error"]
        with pytest.raises(ConfigLoadError, match=rf":[0-9]+: model_name_or_path={case.remote}"):
            check_native(script, "launch", list(case.args), options=options)
    else:
        result = check_native(script, "launch", list(case.args), options=options)
        assert result.config is not None
        errors = result.errors
    assert {f.rule for f in errors} == set(case.errors), [f.message for f in errors]
    tables = release_tables()
    for finding in [f for f in errors if f.rule == "launch-unknown-flag"]:
        # Only flags an older transformers release declares (removed or renamed since the
        # script was written): nothing the scripts' own parsers lack.
        for name in finding.paths:
            assert any(name in t["fields"] for t in tables.values()), name


def test_the_corpus_is_large_and_mostly_clean() -> None:
    scripts = {c.script for c in CASES}
    assert len(scripts) >= 25
    pinned = [c for c in CASES if c.transformers]
    assert all(not c.errors for c in pinned)
