"""A page form's POST address, which a browser may also GET: a reload of the answer to a
refused POST (the browser asks before posting again), the address typed or bookmarked. Django's
`require_POST` answers those with a blank 405; here a GET goes back to the page the form is on."""

from functools import wraps

from django.http import HttpResponseNotAllowed
from django.shortcuts import redirect


def post_only(back: str, *keep: str):
    """`back`: the page's URL name; `keep`: the URL's arguments that name it (`job_id`)."""

    def decorate(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if request.method == "POST":
                return view(request, *args, **kwargs)
            if request.method in ("GET", "HEAD"):
                return redirect(back, **{name: kwargs[name] for name in keep})
            return HttpResponseNotAllowed(["POST"])

        return wrapped

    return decorate
