"""Errors of the service layer, each with the HTTP status the API answers with (the MCP server
returns the same message as a tool error).

    AutotuneError
    └── ServiceError           500
        ├── NotFound           404  no such sweep, or no report file yet
        ├── Forbidden          403  the local configuration does not allow this path/engine/flag
        ├── Conflict           409  the name exists, the sweep already runs, nothing to stop
        ├── Invalid            422  the request is malformed (body, YAML, field values)
        ├── TooLarge           413  the request body is over the limit
        ├── UnsupportedMedia   415  a content type the endpoint does not take
        └── NotAvailable       501  the part behind the endpoint is not installed or built yet

Other AutotuneErrors map by branch (`http_status`): a UserError is 422 (the request names
something invalid), a StorageError or HardwareError 503, the rest 500.
"""

from __future__ import annotations

from autotune.errors import AutotuneError, HardwareError, StorageError, UserError


class ServiceError(AutotuneError):
    status = 500

    def __init__(self, message: str, *, field: str | None = None):
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class NotFound(ServiceError):
    status = 404


class Forbidden(ServiceError):
    status = 403


class Conflict(ServiceError):
    status = 409


class Invalid(ServiceError):
    status = 422


class TooLarge(ServiceError):
    status = 413


class UnsupportedMedia(ServiceError):
    status = 415


class NotAvailable(ServiceError):
    status = 501


def http_status(exc: AutotuneError) -> int:
    """The HTTP status for an error raised by the service layer or the code under it."""
    if isinstance(exc, ServiceError):
        return exc.status
    if isinstance(exc, UserError):
        return 422
    if isinstance(exc, StorageError | HardwareError):
        return 503
    return 500


def error_field(exc: AutotuneError) -> str | None:
    field = getattr(exc, "field", None)
    return str(field) if field else None
