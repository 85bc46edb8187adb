from teams.selectors import roles_of


def navigation(request):
    """The signed-in user's teams and roles, for the navigation bar."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav_roles": sorted(roles_of(user).items())}
