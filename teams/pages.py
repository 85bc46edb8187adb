"""Placeholder while this page is being built (replaced in the same change)."""
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse


@login_required
def page(request, *args, **kwargs):
    return HttpResponse("under construction")
