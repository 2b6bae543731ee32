"""Bearer-token auth for admin endpoints; disabled (403), not open, when no token is configured."""
from __future__ import annotations

import hmac

from fastapi import HTTPException, Request


def require_admin(request: Request) -> None:
    token = request.app.state.settings.api_token
    if not token:
        raise HTTPException(403, detail="admin endpoints are disabled: set CQA_API_TOKEN on the server to enable them")
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise HTTPException(401, detail="this endpoint needs 'Authorization: Bearer <token>'",
                            headers={"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPException(403, detail="the bearer token is not valid")
