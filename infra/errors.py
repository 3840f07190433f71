"""One error type for every service: a stable code and a message safe to show."""


class ServiceError(Exception):
    status = 400
    request_id = ""  # set by the question service on a failure it recorded, so a face can name that record

    def __init__(self, code: str, message: str, *, status: int | None = None, headers: dict | None = None,
                 details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.headers = dict(headers or {})  # e.g. Retry-After and RateLimit-* on a 429
        self.details = dict(details or {})  # what a program needs to act on it, e.g. the versions that are indexed
        if status is not None:
            self.status = status

    def as_dict(self) -> dict:
        body = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        if self.request_id:
            body["request_id"] = self.request_id
        return body
