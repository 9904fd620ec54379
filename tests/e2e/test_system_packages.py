"""A missing system service says what is missing: a skip with the reason, a failure under CI."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests._services as _services


def test_a_missing_service_skips_with_its_package_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y redis-server"):
        _services.require_system("redis-server", None)


def test_a_missing_service_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y postgresql"):
        _services.require_system("postgresql", None)


def test_a_present_service_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert _services.require_system("node", "/usr/bin/node") == "/usr/bin/node"


def test_the_readme_and_ci_name_every_system_package() -> None:
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text(encoding="utf-8")
    ci = (repo / ".ci" / "run").read_text(encoding="utf-8")
    for package in _services.SYSTEM_PACKAGES.values():
        assert package in readme, f"the README does not name the system package {package}"
        assert package in ci, f".ci/run does not install {package}"
