"""The HTTP API and web console: ``create_app(settings)``; see docs/api.md."""

from onebox.api.app import create_app

__all__ = ["create_app"]
