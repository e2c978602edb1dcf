"""Errors the server answers with, in OpenAI's error shape."""

from __future__ import annotations

from typing import Any

from app.errors import HearthError


class ServerConfigError(HearthError):
    """The server cannot start with the settings given (unsafe address, bad port, ...)."""


class EngineUnavailableError(HearthError):
    """No model is loaded in the engine, or the engine's thread has shut down."""


class ApiError(Exception):
    """An error response: HTTP ``status`` and ``{"error": {message, type, param, code}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # OpenAI's field name
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def context_exceeded(prompt_tokens: int, reply_tokens: int, context: int,
                     param: str) -> ApiError:
    return ApiError(
        400,
        f"This model's maximum context length is {context} tokens. However, you requested "
        f"{prompt_tokens + reply_tokens} tokens ({prompt_tokens} in the prompt, "
        f"{reply_tokens} for the completion). Please reduce the prompt or the completion "
        "length.",
        param=param, code="context_length_exceeded",
    )


def model_not_found(requested: str) -> ApiError:
    return ApiError(404, f"The model '{requested}' does not exist or is not loaded (see GET "
                    "/v1/models).", param="model", code="model_not_found")
