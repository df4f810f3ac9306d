"""Inside a worker's child (RUNTIME_CHILD=1) a Client without a URL refuses,
instead of starting an embedded Redis where the job's puts would be stranded."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import Client, WrongState
from runtime.config import CHILD_MARKER


def test_a_client_without_a_url_refuses_inside_a_child(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CHILD_MARKER, "1")
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("RUNTIME_STATE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no runtime.toml
    with pytest.raises(WrongState, match=r"ctx\.put"):
        Client()
    assert not any(tmp_path.iterdir()), "no embedded Redis was started"


def test_a_url_given_on_purpose_is_used_inside_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHILD_MARKER, "1")
    client = Client.from_url("redis://127.0.0.1:1/0")  # connects on first use only
    assert client.url == "redis://127.0.0.1:1/0"
    client.close()
