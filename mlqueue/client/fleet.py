"""The Client's calls for the fleet: nodes (their actions, one node's detail and history) and
maintenance windows (site admins; docs/maintenance.md). Part of `Client` (sdk.py), kept apart
by subject; `request` and `_pages` are the Client's."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

from mlqueue.client.answers import segment
from mlqueue.client.results import MaintenanceWindow, Node


class FleetCalls:
    def nodes(self, **filters) -> list[Node]:
        return [Node.from_json(row) for row in self._pages("/nodes", filters)]

    def _node_action(self, action: str, node: str, reason: str, **extra) -> Node:
        body = {"reason": reason, **{key: value for key, value in extra.items() if value is not None}}
        return Node.from_json(self.request("POST", f"/nodes/{segment(node)}/{action}", json=body))

    def cordon(self, node: str, reason: str) -> Node:
        return self._node_action("cordon", node, reason)

    def drain(self, node: str, reason: str, wait: bool | None = None) -> Node:
        return self._node_action("drain", node, reason, wait=wait)

    def uncordon(self, node: str, reason: str) -> Node:
        return self._node_action("uncordon", node, reason)

    def include_gpus(self, node: str, reason: str, gpus: list[int] | None = None) -> Node:
        """Put GPUs excluded for a fault back into placement (all of them when `gpus` is None)."""
        return self._node_action("include-gpus", node, reason, gpus=gpus)

    def node(self, name: str) -> dict:
        """GET /nodes/{name} (site admins): the list's fields, its address, its latest telemetry
        (a row per GPU), the tasks on it and its open maintenance windows, as the server sent them."""
        return self.request("GET", f"/nodes/{segment(name)}")

    def node_events(self, name: str, *, limit: int | None = None) -> list[dict]:
        """GET /nodes/{name}/events, newest first (site admins): cordons, drains, faults, maintenance."""
        rows = self._pages(f"/nodes/{segment(name)}/events", {"limit": min(limit, 500)} if limit else {})
        return list(islice(rows, limit))

    # maintenance windows (docs/maintenance.md), admins only

    def maintenance_windows(self, state: str | None = None) -> list[MaintenanceWindow]:
        """The scheduled and active windows soonest first, or those in `state`."""
        rows = self.request("GET", "/maintenance", params={"state": state} if state else None)
        return [MaintenanceWindow.from_json(row) for row in rows]

    def schedule_maintenance(
        self,
        *,
        starts_at: str,
        reason: str,
        rack: str | None = None,
        zone: str | None = None,
        names: Iterable[str] | None = None,
        ends_at: str | None = None,
        duration_hours: float | None = None,
    ) -> MaintenanceWindow:
        """Drain a rack, a zone or the named nodes from `starts_at` (ISO 8601) until `ends_at`
        or for `duration_hours`."""
        body = {"starts_at": starts_at, "reason": reason, "rack": rack, "zone": zone, "ends_at": ends_at}
        body = {key: value for key, value in body.items() if value}
        body.update({"names": list(names)} if names else {})
        body.update({"duration_hours": duration_hours} if duration_hours is not None else {})
        return MaintenanceWindow.from_json(self.request("POST", "/maintenance", json=body))

    def maintenance_window(self, window_id: int) -> MaintenanceWindow:
        return MaintenanceWindow.from_json(self.request("GET", f"/maintenance/{segment(window_id)}"))

    def change_maintenance(self, window_id: int, **changes) -> MaintenanceWindow:
        """Move a scheduled window or change its reason: any of starts_at, ends_at (ISO 8601),
        duration_hours (from the new start) and reason."""
        body = {key: value for key, value in changes.items() if value is not None}
        return MaintenanceWindow.from_json(self.request("PATCH", f"/maintenance/{segment(window_id)}", json=body))

    def maintenance_events(self, window_id: int) -> list[dict]:
        """The window's history, newest first: scheduled, changed, started, ended, cancelled."""
        return list(self._pages(f"/maintenance/{segment(window_id)}/events", {}))

    def cancel_maintenance(self, window_id: int) -> MaintenanceWindow:
        """A scheduled window never starts; an active one ends now."""
        return MaintenanceWindow.from_json(self.request("DELETE", f"/maintenance/{segment(window_id)}"))
