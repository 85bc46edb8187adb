"""Live job views over WebSockets. The browser is told which jobs changed, never their
content: it re-fetches what it shows through the normal, permission-checked pages. Each user
hears only about jobs of teams they may see.

A socket outlives the checks made when it opened, so it re-checks on the first event after
MLQ_WS_RECHECK_S: that its session still logs in the same active user (logged out, password
changed or deactivated: the socket closes) and which teams that user may now see. Between
re-checks events cost no database read."""

import time
from importlib import import_module
from types import SimpleNamespace

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user

from mlqueue.channel_layer import join_group, leave_group
from scheduling.notify import JOBS_GROUP
from teams.selectors import is_site_admin, team_ids_of

# Close code for a socket whose login ended (4000-4999: application codes); the browser's
# reconnect then gets the login check of a fresh connection.
LOGIN_ENDED = 4003
clock = time.monotonic  # tests replace it


@database_sync_to_async
def _visible_teams(user) -> set[int] | None:
    """None: every team (a site admin)."""
    return None if is_site_admin(user) else team_ids_of(user)


@database_sync_to_async
def _recheck(session_key: str | None, user_id: int) -> tuple[bool, set[int] | None]:
    """(still logged in as user_id, that user's visible teams), from a fresh read of the session
    and the user, as a new request would do them."""
    user = session_user(session_key, user_id)
    if user is None:
        return False, set()
    return True, None if is_site_admin(user) else team_ids_of(user)


def session_user(session_key: str | None, user_id: int):
    """The user the session still logs in, read afresh, if it is still `user_id`; else None (a
    logout, a password change, a deactivation)."""
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(SimpleNamespace(session=session))
    return user if user.is_authenticated and user.pk == user_id else None


class JobsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4001)
            return
        self.user_id, self.session_key = user.pk, self.scope["session"].session_key
        self.teams = await _visible_teams(user)
        self.teams_read_at = clock()
        self.only_job = self.scope["url_route"]["kwargs"].get("job_id")
        self.joined = await join_group(self, JOBS_GROUP)
        if self.joined:
            await self.accept()

    async def disconnect(self, code):
        if getattr(self, "joined", False):
            await leave_group(self, JOBS_GROUP)

    async def jobs_changed(self, event):
        if clock() - self.teams_read_at >= settings.MLQ_WS_RECHECK_S and not await self._still_logged_in():
            await self.close(code=LOGIN_ENDED)
            return
        visible = [
            job_id
            for job_id, team_id in event["jobs"]
            if (self.teams is None or team_id in self.teams) and (self.only_job is None or job_id == int(self.only_job))
        ]
        if visible:
            await self.send_json({"changed": visible})

    async def _still_logged_in(self) -> bool:
        allowed, self.teams = await _recheck(self.session_key, self.user_id)
        self.teams_read_at = clock()
        return allowed
