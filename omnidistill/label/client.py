"""A small client for OpenAI-compatible chat-completions endpoints (standard library only).

Retries rate limits (429), server errors (5xx), timeouts and connection errors with exponential
backoff, honouring ``Retry-After``; other HTTP errors fail at once. Errors that every request would
get (a refused key, an unknown path or model, an endpoint that cannot be reached) are
:class:`EndpointError`. The API key comes from the
environment variable the config names, never from a file.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


class ClientError(RuntimeError):
    """The endpoint could not give an answer (after retries, or a non-retryable error)."""


class EndpointError(RuntimeError):
    """An error that no item can get past: the endpoint refused the key (401, 403), does not know the
    path or the model (404), or could not be reached at all. Labelling stops at the first one. Not a
    :class:`ClientError`, which fails only its item: the labeler's per-item handlers let it through."""


REFUSING = (401, 403, 404)
"""HTTP statuses that every request to this endpoint would get (key, permission, path or model)."""
REFUSED_SETTINGS = ("unsupported_parameter", "unsupported_value")
"""OpenAI's ``error.code`` of an HTTP 400 for a request field the model does not take (``max_tokens`` on
its reasoning models) or a value it does not (``temperature`` other than 1 there): every request gets it."""


SETTING_ADVICE = {
    "max_tokens": "set max_tokens_field: max_completion_tokens in the label config",
    "temperature": "set temperature: 1 in the label config (such models take only their default)",
    "logprobs": "this model gives no log-probabilities: set logprobs: false in the label config",
    "top_logprobs": "this model gives no log-probabilities: set logprobs: false in the label config",
}
"""What to change in the label config when the model refuses a request field, by field."""


class RefusedSetting(EndpointError):
    """The model refuses a request field or its value: every request would get the same HTTP 400."""


def refused_setting(body: bytes) -> str | None:
    """The server's message and what to change, when an HTTP 400's body says the model refuses a request
    field or its value (:data:`REFUSED_SETTINGS`); else None (the request was refused for itself)."""
    try:
        error = json.loads(body.decode("utf-8")).get("error")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    if not isinstance(error, dict) or error.get("code") not in REFUSED_SETTINGS:
        return None
    param = error.get("param")
    advice = SETTING_ADVICE.get(param, f"change the label config's setting of the request field {param!r}")
    return f"{error.get('message', error['code'])}: {advice}"


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    logprobs: list[dict[str, Any]] | None = None
    """``choices[0].logprobs.content`` when log-probabilities were asked for and returned."""
    finish_reason: str | None = None
    """``choices[0].finish_reason``: ``length`` when the answer was cut at ``max_tokens``."""


class ChatClient:
    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        max_tokens_field: str = "max_tokens",
    ):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_tokens_field = max_tokens_field
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s

    def _request(self, payload: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(payload).encode("utf-8"), headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        model: str,
        temperature: float = 0.0,
        max_tokens: int = 800,
        seed: int | None = None,
        top_logprobs: int | None = None,
    ) -> Completion:
        """One answer; ``top_logprobs``: also ask for each token's log-probability and its ``top_logprobs``
        alternatives (the OpenAI ``logprobs``/``top_logprobs`` request fields)."""
        payload: dict[str, Any] = {"model": model, "messages": messages, "temperature": temperature, self.max_tokens_field: max_tokens}
        if seed is not None:
            payload["seed"] = seed
        if top_logprobs is not None:
            payload["logprobs"] = True
            payload["top_logprobs"] = top_logprobs
        last_error, unreachable = "", False
        for attempt in range(self.max_retries + 1):
            wait = min(self.max_backoff_s, self.backoff_s * 2**attempt)
            unreachable = False  # of this attempt: no connection, as opposed to an answer that failed
            try:
                body = self._request(payload)
                first = body["choices"][0]
                choice = first["message"]["content"]
                usage = body.get("usage") or {}
                logprobs = (first.get("logprobs") or {}).get("content") if top_logprobs is not None else None
                tokens = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
                return Completion(str(choice or ""), *tokens, attempt + 1, logprobs, first.get("finish_reason"))
            except urllib.error.HTTPError as err:
                last_error = f"HTTP {err.code}"
                if err.code in REFUSING:
                    raise EndpointError(f"{self.url}: HTTP {err.code}: {err.read()[:200]!r}") from None
                if err.code != 429 and err.code < 500:
                    body = err.read()
                    refused = refused_setting(body) if err.code == 400 else None
                    if refused:
                        raise RefusedSetting(f"{self.url} ({model}): HTTP 400: the model refuses a setting: {refused}") from None
                    raise ClientError(f"{self.url}: HTTP {err.code}: {body[:200]!r}") from None
                retry_after = err.headers.get("Retry-After") if err.headers else None
                if retry_after is not None:
                    try:
                        wait = min(self.max_backoff_s, float(retry_after))
                    except ValueError:
                        pass
            except (TimeoutError, urllib.error.URLError, ConnectionError) as err:
                reason = getattr(err, "reason", err)
                last_error = f"{type(err).__name__}: {reason}"
                unreachable = not isinstance(err, TimeoutError) and not isinstance(reason, TimeoutError)  # a slow answer is per item
            except (json.JSONDecodeError, KeyError, IndexError, TypeError) as err:
                last_error = f"malformed response ({type(err).__name__})"
            if attempt < self.max_retries:
                time.sleep(wait)
        error = EndpointError if unreachable else ClientError
        raise error(f"{self.url}: no answer after {self.max_retries + 1} attempts ({last_error})")
