"""The agent's side of the agent API: JSON over HTTP(S) with a bearer token, stdlib only."""

import json
import urllib.error
import urllib.request


class ApiError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status


class AgentClient:
    def __init__(self, server: str, *, timeout: float = 10.0):
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.token = ""

    def post(self, path: str, body: dict, *, token: str | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.server}/api/v1/{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token or self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise ApiError(exc.code, detail) from None

    def websocket_url(self, node: str) -> str:
        base = self.server.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        return f"{base}/ws/agents/{node}/"
