"""QA's SDK defects: the saved token goes to its own server only; every failure is an MlqError;
wait() and logs(follow=True) wait out a brief outage (a stub transport that fails, then answers)."""

import httpx
import pytest

from mlqueue import client
from mlqueue.client import Client, MlqError
from mlqueue.client import sdk as sdk_module

SERVER = "http://mlq.test"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in ("MLQ_SERVER", "MLQ_TOKEN", "MLQ_USER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(sdk_module.time, "sleep", lambda seconds: None)


def job(state="RUNNING"):
    return {"id": 7, "name": "t", "team": "v", "owner": "ada", "state": state, "priority": "P2", "tasks": []}


def test_the_saved_token_goes_only_to_the_server_it_was_saved_for(monkeypatch):
    client.write_config("http://127.0.0.1:8301/", "alice-token", "alice")
    assert (Client().token, Client("HTTP://127.0.0.1:8301").token) == ("alice-token", "alice-token")
    assert (Client("http://127.0.0.1:8303").token, Client("http://127.0.0.1:8303").user) == ("", "")
    with pytest.raises(MlqError, match="no token"):
        Client("http://127.0.0.1:8303").get(1)
    monkeypatch.setenv("MLQ_SERVER", "http://127.0.0.1:8303")
    assert Client().token == ""
    assert Client(token="given").token == "given"  # an explicit token goes to any server
    monkeypatch.setenv("MLQ_TOKEN", "env-token")
    assert Client().token == "env-token"


def test_a_json_less_answer_a_missing_file_a_bad_id_or_spec_is_an_mlq_error(tmp_path):
    sso = httpx.MockTransport(lambda request: httpx.Response(200, html="<html>Sign in</html>"))
    with pytest.raises(MlqError, match="not the API's JSON") as caught:
        Client(SERVER, token="t", transport=sso).get(7)
    assert caught.value.status == 200
    made = Client(SERVER, token="t", transport=sso)
    for call, message in [
        (lambda: made.submit(str(tmp_path / "nope.yaml")), "nope.yaml: cannot read it"),
        (lambda: made.get("abc"), "'abc' is not a job id"),
        (lambda: made.submit(["a"]), "not list"),
    ]:
        with pytest.raises(MlqError, match=message) as caught:
            call()
        assert caught.value.status == 0


def flaky(answers):
    """A transport that answers each request with the next of `answers` (an exception is raised)."""
    answers = list(answers)

    def answer(request):
        got = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(got, Exception):
            raise got
        return got(request) if callable(got) else got

    return httpx.MockTransport(answer)


def test_wait_waits_out_an_outage_until_its_timeout():
    down = httpx.ConnectError("Connection refused")
    answers = [
        httpx.Response(200, json=job("RUNNING")),
        down,
        down,
        httpx.Response(503, headers={"Retry-After": "1"}),
        httpx.Response(200, json=job("SUCCEEDED")),
    ]
    assert Client(SERVER, token="t", transport=flaky(answers)).wait(7, timeout=60).state == "SUCCEEDED"
    # A server never reached (a wrong name, port or certificate) is no outage: said at once.
    with pytest.raises(MlqError, match="Connection refused"):
        Client(SERVER, token="t", transport=flaky([down])).wait(7)
    with pytest.raises(MlqError) as refused:  # a refusal is no outage: not tried again
        Client(SERVER, token="t", transport=flaky([httpx.Response(404, json={"detail": "no job 7"})])).wait(7)
    assert refused.value.status == 404


def test_following_logs_reconnects_from_the_last_offset_after_an_outage():
    offsets = []

    def stream(request):
        offsets.append(request.url.params["offset"])
        if request.url.params["offset"] == "0":
            body = 'event: log\ndata: {"attempt": 1, "text": "one\\n", "next_offset": 4}\n\n'
        else:
            body = 'event: log\ndata: {"attempt": 1, "text": "two\\n", "next_offset": 8}\n\nevent: end\ndata: {}\n\n'
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    def route(request):
        return stream(request) if request.url.path.endswith("/logs") else httpx.Response(200, json=job("SUCCEEDED"))

    down = httpx.RemoteProtocolError("peer closed connection")
    answers = [route, down, httpx.Response(502, text="Bad Gateway"), down, route]
    lines = list(Client(SERVER, token="t", transport=flaky(answers)).logs(7, follow=True, attempt=1))
    assert lines == ["one", "two"] and offsets == ["0", "4"]
    with pytest.raises(MlqError, match="cannot reach"):  # never reached: no outage to wait out
        list(Client(SERVER, token="t", transport=flaky([down])).logs(7, follow=True, attempt=1))


def test_a_name_is_one_path_segment_and_a_limit_below_one_is_refused():
    """QA: quota("../jobs") asked GET /api/v1/jobs/quotas; jobs(limit=0) returned every job."""
    asked = []

    def answer(request):
        asked.append(request.url.raw_path)
        return httpx.Response(200, json=[])

    made = Client(SERVER, token="t", transport=httpx.MockTransport(answer))
    assert made.quota("../jobs") == []
    assert asked == [b"/api/v1/teams/..%2Fjobs/quotas"]
    with pytest.raises(MlqError, match="limit: must be at least 1"):
        made.jobs(limit=0)
    for name in ("..", "."):
        with pytest.raises(MlqError, match="is not a name or id"):
            made.cordon(name, "r")
    assert len(asked) == 1


def test_a_token_saved_for_localhost_serves_its_loopback_addresses_and_no_other_host():
    """QA: logged in as http://localhost:8000, `mlq --server http://127.0.0.1:8000 queue` said
    only 'no token ... run mlq login'. Loopback names are one machine; another host or port is
    not, and the message says which server the saved token is for."""
    client.write_config("http://localhost:8000", "alice-token", "alice")
    for same in ("http://127.0.0.1:8000", "http://[::1]:8000/", "http://LOCALHOST.:8000", "http://127.0.1.1:8000"):
        assert Client(same).token == "alice-token", same
    for other in ("http://127.0.0.1:8001", "https://localhost:8000", "http://10.0.0.5:8000", "http://mlq.test:8000"):
        assert Client(other).token == "", other
    with pytest.raises(MlqError) as caught:
        Client("http://mlq.test:8000").get(1)
    assert str(caught.value.detail) == (
        "no token for http://mlq.test:8000: the one `mlq login` saved is for http://localhost:8000, and goes to "
        "no other server: run `mlq login --server http://mlq.test:8000`, or set MLQ_TOKEN"
    )


@pytest.mark.parametrize(
    ("status", "body", "headers", "expected"),
    [
        (
            502,
            "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body></html>",
            "text/html",
            "502 Bad Gateway",
        ),
        (
            500,
            '<!doctype html>\n<html lang="en"><body><h1>Server Error (500)</h1></body></html>',
            "text/html",
            "500 Server Error (500)",
        ),
        (503, "<!DOCTYPE html><html><title>Down &amp; out</title></html>", "", "503 Down & out"),
        (
            500,
            "<!DOCTYPE html><html><body><p>nothing named</p></body></html>",
            "text/html",
            "500 Internal Server Error",
        ),
        (500, "boom: the worker died\nTraceback ...", "text/plain", "500 boom: the worker died"),
        (418, "", "text/plain", "418 I'm a teapot"),
    ],
)
def test_a_non_json_error_page_is_named_by_its_title_not_its_first_line(status, body, headers, expected):
    """QA: a proxy's 502 page printed `502 <html>`; Django's 500 page `500 <!doctype html>`."""
    page = httpx.MockTransport(lambda request: httpx.Response(status, text=body, headers={"content-type": headers}))
    with pytest.raises(MlqError) as caught:
        Client(SERVER, token="t", transport=page).request("POST", "/jobs", json={})
    assert (caught.value.status, caught.value.detail) == (status, expected)
