"""A webhook URL or receiver that misbehaves is a refusal or a failed attempt, never an exception
or a worker held for minutes (notifications/sending.py, mlqueue/webhook_addresses.py). No
database: the receivers run here, on 127.0.0.1."""

import ipaddress
import socket
import threading
import time

import pytest

from mlqueue.webhook_addresses import BAD_CHARACTER, NOT_ASCII_HOST, WebhookRefused, parse_endpoint
from notifications.deadline import PAST_DEADLINE
from notifications.sending import CRASHED, NO_ANSWER, email_subject, email_text, send_webhook


@pytest.fixture(autouse=True)
def webhooks_to_localhost(settings):
    settings.MLQ_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1", "*.qa.test"]
    settings.MLQ_WEBHOOK_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.1/32")]
    settings.MLQ_WEBHOOK_TIMEOUT_S = 1.0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:81\t10/a\r\nb\x1b[2J", BAD_CHARACTER.format(char="'\\t'", code="U+0009")),
        ("http://127.0.0.1/a\r\nb", BAD_CHARACTER.format(char="'\\r'", code="U+000D")),
        ("http://127.0.0.1/\x07", BAD_CHARACTER.format(char="'\\x07'", code="U+0007")),
        ("http://127.0.0.1/x\x1b[2J", BAD_CHARACTER.format(char="'\\x1b'", code="U+001B")),
        ("http://127.0.0.1/a b", BAD_CHARACTER.format(char="' '", code="U+0020")),
        ("http://127.0.0.1/\u200bx", BAD_CHARACTER.format(char="'\\u200b'", code="U+200B")),
        (
            "http://hööks.qa.test:8110/",
            NOT_ASCII_HOST.format(host="hööks.qa.test", punycode="xn--hks-snaa.qa.test"),
        ),
    ],
)
def test_control_characters_white_space_and_non_ascii_hosts_are_refused(url, message):
    with pytest.raises(WebhookRefused) as refused:
        parse_endpoint(url)
    assert str(refused.value) == message


def test_white_space_around_a_url_is_still_trimmed():
    assert parse_endpoint("  http://127.0.0.1:8110/x \n").target == "/x"


def send(url: str, **kwargs):
    return send_webhook(url=url, payload={"event": "started"}, delivery_id="d-1", event="started", secret="s", **kwargs)


def test_any_exception_while_sending_is_a_failed_attempt():
    def broken_resolver(host, port):
        raise RuntimeError("the resolver broke")

    outcome = send("http://hooks.qa.test:8110/x", resolve=broken_resolver)
    assert (outcome.delivered, outcome.refused) == (False, False)
    assert outcome.error == CRASHED.format(error="the resolver broke")


class Dribbler:
    """A receiver that answers 200, a byte every `pause` seconds: each read is quick, the whole
    answer is not."""

    def __init__(self, pause: float):
        self.pause = pause
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/slow"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        connection, _ = self.listener.accept()
        connection.recv(65536)
        try:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
                connection.sendall(bytes([byte]))
                time.sleep(self.pause)
        except OSError:  # the sender hung up at its deadline
            pass
        finally:
            connection.close()

    def close(self):
        self.listener.close()


def test_a_slow_receiver_is_given_up_at_the_attempts_deadline():
    receiver = Dribbler(pause=0.3)  # 40 bytes: 12 s in all, each byte well within the 1 s timeout
    try:
        started = time.monotonic()
        outcome = send(receiver.url)
        elapsed = time.monotonic() - started
    finally:
        receiver.close()
    assert elapsed < 2.5
    assert not outcome.delivered
    # connected: "could not reach" would send its owner looking for a network fault (QA stop 49)
    assert outcome.error == NO_ANSWER.format(host="127.0.0.1", error=PAST_DEADLINE.format(seconds=1.0))


def test_an_early_stopped_trials_email_names_the_trial(settings):
    settings.MLQ_BASE_URL = "https://mlqueue.example.com"
    payload = {
        "event": "early_stopped",
        "time": "2025-01-01T00:00:00+00:00",
        "job": {"id": 7, "name": "lr-sweep", "team": "vision", "state": "RUNNING", "url": "u7"},
        "trial": {"id": 9, "name": "lr-sweep[1]", "state": "EARLY_STOPPED", "url": "u9"},
        "reason": {"code": "EARLY_STOPPED", "message": "worse than the median"},
    }
    assert email_subject(payload) == "[mlqueue] job 7 lr-sweep trial 9 early stopped"
    assert "Trial: 9 (lr-sweep[1]), EARLY_STOPPED: u9" in email_text(payload).splitlines()
