"""Passwords never appear in error or log text: every form a Redis URL can carry
one, redacted by the one function that does it (no Redis)."""

from __future__ import annotations

import pytest
import redis

from runtime.errors import RedisTransient, RedisUnavailable
from runtime.queue.faults import classify, redact, scrub

FORMS = [
    ("redis://user:s3cret@host:6379/0", "redis://user:***@host:6379/0"),
    ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
    ("rediss://user:s3cret@host:6380/1", "rediss://user:***@host:6380/1"),
    ("unix://user:s3cret@/run/redis.sock?db=2", "unix://user:***@/run/redis.sock?db=2"),
    ("redis://host:6379/0?password=s3cret", "redis://host:6379/0?password=***"),
    ("redis://host/0?db=1&password=s3cret&x=1", "redis://host/0?db=1&password=***&x=1"),
    (
        "unix:///run/redis.sock?username=u&password=s3cret",
        "unix:///run/redis.sock?username=u&password=***",
    ),
    ("redis://host/0?PASSWORD=s3cret", "redis://host/0?PASSWORD=***"),
    ("redis://u:p1@h/0?sentinel_password=s3cret", "redis://u:***@h/0?sentinel_password=***"),
    (
        "redis+sentinel://:p1@h1:26379,:p2@h2:26379/mymaster",
        "redis+sentinel://:***@h1:26379,:***@h2:26379/mymaster",
    ),
    (
        "redis+sentinel://user:s3cret@h1:26379,h2:26379,h3:26379/mymaster",
        "redis+sentinel://user:***@h1:26379,h2:26379,h3:26379/mymaster",
    ),
    (
        "redis+cluster://user:s3cret@n1:7000,n2:7001?password=other",
        "redis+cluster://user:***@n1:7000,n2:7001?password=***",
    ),
    ("redis://:pa@ss/wo:rd@host:6379/0", "redis://:***@host:6379/0"),  # '@' and '/' in it
    ("redis://host/0?password=p@ss", "redis://host/0?password=***"),  # '@' in the query
]


@pytest.mark.parametrize(("url", "shown"), FORMS)
def test_every_password_form_in_a_url_is_hidden(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_urls_without_a_password_are_left_as_they_are() -> None:
    for url in (
        "redis://host:6379/0",
        "unix:///run/redis.sock",
        "redis://user@host/0",
        "rediss://h:1/0?ssl_cert_reqs=none",
    ):
        assert redact(url) == url


def test_urls_inside_a_message_are_redacted_where_they_stand() -> None:
    message = "cannot reach redis://:a1@h1/0 nor 'unix://u:b2@/s?password=c3', giving up"
    assert redact(message) == (
        "cannot reach redis://:***@h1/0 nor 'unix://u:***@/s?password=***', giving up"
    )


def test_a_password_echoed_anywhere_in_an_error_is_scrubbed() -> None:
    url = "redis://app:hunter2!@host:6379/0"
    assert scrub("AUTH failed for hunter2! (retrying)", url) == "AUTH failed for *** (retrying)"
    encoded = "redis://:p%40ss%2Fword@host/0"
    assert "p@ss/word" not in scrub("server said: p@ss/word", encoded)


@pytest.mark.parametrize(
    "url",
    [
        "redis://user:s3cret@127.0.0.1:1/0",
        "redis://127.0.0.1:1/0?password=s3cret",
        "redis+sentinel://:s3cret@h1:1,:s3cret@h2:2/m",
    ],
)
def test_classified_errors_never_carry_the_password(url: str) -> None:
    for err in (
        redis.exceptions.ConnectionError(f"Error 111 connecting to {url}. Connection refused."),
        redis.exceptions.AuthenticationError("invalid username-password pair s3cret"),
        redis.exceptions.NoPermissionError("this user has no permissions", status_code="NOPERM"),
        redis.exceptions.ResponseError(f"ERR something about {url}"),
    ):
        found = classify(err, url)
        assert "s3cret" not in str(found)
        assert isinstance(found, RedisUnavailable) or "***" in str(found)


def test_a_refused_connection_names_the_url_without_its_password() -> None:
    url = "redis://user:s3cret@127.0.0.1:1/0"
    found = classify(ConnectionRefusedError(111, "Connection refused"), url)
    assert isinstance(found, RedisTransient)
    assert str(found).startswith("cannot reach Redis at redis://user:***@127.0.0.1:1/0")
