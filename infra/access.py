"""Page access by group, shared by the ops site and the eval center: sign in first, then a group test."""

from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied


def in_group(user, name: str) -> bool:
    return user.groups.filter(name=name).exists()


def requires(test, refusal: str):
    """A view decorator: anonymous visitors go to the sign-in page; users failing `test(user)` get 403."""
    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
            if not (request.user.is_active and test(request.user)):
                raise PermissionDenied(refusal)
            return view(request, *args, **kwargs)
        return wrapped
    return decorator
