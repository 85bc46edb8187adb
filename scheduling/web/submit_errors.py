"""Which input of the submit page (scheduling/web/submit_page.py) shows each of the API's
messages, keyed by their dotted paths, and what a user in no team is told."""

from collections.abc import Sequence

NO_TEAM = "You are in no team, so you cannot submit jobs yet: ask a team lead or a site admin to add you to a team."


def errors_by_input(names: Sequence[str], errors: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each input's messages (inputs in page order): its own path's; then those of paths below
    it ("env.A", "depends_on.0"), prefixed with the part below; then those of a path above the
    inputs ("sweep": the block as a whole, "sweep.metric"), given whole to the block's first
    input, so no message is only in the summary with no input marked."""
    shown = {name: list(errors.get(name, [])) for name in names}
    for path, messages in errors.items():
        if path in shown:
            continue
        holder = next((name for name in names if path.startswith(name + ".")), None)
        if holder is not None:
            shown[holder].extend(f"{path[len(holder) + 1 :]}: {message}" for message in messages)
            continue
        first = next((name for name in names if name.startswith(path + ".")), None)
        if first is not None:
            shown[first].extend(f"{path}: {message}" for message in messages)
    return shown


def team_errors(errors: dict[str, list[str]], teams: Sequence[str]) -> None:
    """With no team to choose, the serializer's "team: This field is required." says it plainly."""
    if not teams and "team" in errors:
        errors["team"] = [NO_TEAM]
