"""Live job views over WebSockets. The browser is told which jobs changed, never their
content: it re-fetches what it shows through the normal, permission-checked pages. Each user
hears only about jobs of teams they may see."""
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from scheduling.notify import JOBS_GROUP
from teams.selectors import is_site_admin, team_ids_of


@database_sync_to_async
def _visible_teams(user) -> set[int] | None:
    """None: every team (a site admin)."""
    return None if is_site_admin(user) else team_ids_of(user)


class JobsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4001)
            return
        self.teams = await _visible_teams(user)
        self.only_job = self.scope["url_route"]["kwargs"].get("job_id")
        await self.channel_layer.group_add(JOBS_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.channel_layer.group_discard(JOBS_GROUP, self.channel_name)

    async def jobs_changed(self, event):
        visible = [job_id for job_id, team_id in event["jobs"]
                   if (self.teams is None or team_id in self.teams)
                   and (self.only_job is None or job_id == int(self.only_job))]
        if visible:
            await self.send_json({"changed": visible})
