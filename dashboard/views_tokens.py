"""The API tokens page, /account/tokens/: a person creates, lists and revokes their own tokens for scripts.

The raw token is in the answer to the POST that created it and nowhere else: it is not stored (only its
SHA-256, ``access.services``), not put in the session or a message, and that answer is not cached. Admins
also see everyone else's active tokens and may revoke them; nobody ever sees another person's raw token.
Creating and revoking go through ``access.services``, which audit them.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from access.middleware import request_id_of
from access.models import ApiToken
from access.roles import Role, has_role
from access.selectors import SHOWN, active_token_count, active_tokens_of_others, tokens_of
from access.services import API_TOKENS_MAX_ACTIVE, api_token_create, api_token_revoke
from audit.actor import Actor
from ckptfleet.errors import DomainError

LABEL_MAX = 100


def _page(request, *, new_token=None, raw: str = "", label: str = "", status: int = 200):
    user = request.user
    is_admin = has_role(user, Role.ADMIN)
    others = active_tokens_of_others(user) if is_admin else None
    response = render(
        request,
        "access/tokens.html",
        {
            "tokens": list(tokens_of(user)[:SHOWN]),
            "active_count": active_token_count(user),
            "max_active": API_TOKENS_MAX_ACTIVE,
            "label_max": LABEL_MAX,
            "new_token": new_token,
            "raw": raw,
            "label": label,
            "runs_url": request.build_absolute_uri("/api/v1/runs/"),
            "is_admin": is_admin,
            "others": list(others[:SHOWN]) if others is not None else [],
            "others_count": others.count() if others is not None else 0,
            "shown": SHOWN,
        },
        status=status,
    )
    if raw:
        add_never_cache_headers(response)  # the only place the raw token ever is: keep it out of caches
    return response


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request):
    """GET lists the person's tokens; POST creates one and shows it, this once."""
    if request.method == "GET":
        return _page(request)
    label = " ".join(request.POST.get("label", "").split())
    if not label:
        messages.error(request, "Give the token a label that says what it is for, e.g. “nightly spend export”.")
        return _page(request, status=400)
    if len(label) > LABEL_MAX:
        messages.error(request, f"A token's label is at most {LABEL_MAX} characters, not {len(label)}.")
        return _page(request, label=label[:LABEL_MAX], status=400)
    try:
        token, raw = api_token_create(
            user=request.user, label=label, actor=Actor.for_request(request), request_id=request_id_of(request)
        )
    except DomainError as exc:
        messages.error(request, f"No token created: {exc.message}.")
        return _page(request, label=label, status=exc.http_status)
    return _page(request, new_token=token, raw=raw, status=201)


@login_required
@require_POST
def revoke(request, pk: int):
    """Revoke one token: the person's own, or anyone's for an admin (refused and audited for others)."""
    token = ApiToken.objects.select_related("user").filter(pk=pk).first()
    if token is None or (token.user_id != request.user.pk and not has_role(request.user, Role.ADMIN)):
        raise Http404("no such token")  # another person's token is not found, whether it exists or not
    owner = token.user.get_username()
    try:
        api_token_revoke(
            user=token.user, prefix=token.prefix, actor=Actor.for_request(request), request_id=request_id_of(request)
        )
    except DomainError as exc:
        messages.error(request, f"Not revoked: {exc.message}.")
    else:
        whose = "Your" if token.user_id == request.user.pk else f"{owner}'s"
        messages.success(
            request,
            f"{whose} token “{token.label or token.prefix}” (cfu_{token.prefix}_…) is revoked: "
            "requests with it are refused from now on.",
        )
    return redirect(reverse("access:tokens"))
