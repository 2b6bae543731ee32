"""Bearer-token auth for admin endpoints; disabled (403), not open, when no token is configured."""
from __future__ import annotations

import hmac

from fastapi import HTTPException, Request


def require_admin(request: Request) -> None:
    """The bearer token, from a server, a script or the service's own pages (its /docs): a request a browser sends
    from another site's page (its ``Sec-Fetch-Site``) is refused whatever it carries, as the cross-origin headers
    (CQA_CORS_ORIGINS) never let such a page send an Authorization header: the admin token never belongs in a forum's
    pages."""
    token = request.app.state.settings.api_token
    if not token:
        raise HTTPException(403, detail="admin endpoints are disabled: set CQA_API_TOKEN on the server to enable them")
    if request.headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site"):
        raise HTTPException(403, detail="admin endpoints do not answer another site's page: call them from a server "
                                        "or a script; the admin token must never be in a browser page")
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise HTTPException(401, detail="this endpoint needs 'Authorization: Bearer <token>'",
                            headers={"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPException(403, detail="the bearer token is not valid")
