"""Render a conversation with the model's own Jinja chat template, safely.

The environment matches what Hugging Face's ``apply_chat_template`` gives templates
(transformers ``utils/chat_template_utils.py``): an ``ImmutableSandboxedEnvironment`` with
``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``{% generation %}``
block (rendered as its body), a ``tojson`` filter that keeps non-ASCII and takes ``indent``,
``separators`` and ``sort_keys``, and the globals ``raise_exception`` and ``strftime_now``.
Variables: ``messages``, ``add_generation_prompt``, ``tools=None``, ``documents=None``, the
special tokens (``bos_token``, ``eos_token``, …; a token that is None stays undefined, as in
transformers), and any extra keyword arguments.

Templates come from downloaded models, so they are untrusted: every failure (syntax error,
``raise_exception``, undefined attribute, sandbox escape, runaway output or loops) becomes a
``TemplateError`` naming the template's origin and the cause. There is no fallback format.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import FrameType
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from app.errors import TemplateError

DEFAULT_MAX_CHARS = 4_000_000  # ~1M tokens: far beyond any context window
DEFAULT_TIME_LIMIT_S = 10.0
_MAX_POW_EXPONENT = 4096
# Filters whose integer arguments are output sizes (widths, lengths).
_SIZED_FILTERS = frozenset({"center", "indent", "wordwrap", "truncate"})
_PERCENT_SPEC = re.compile(r"%[^a-zA-Z%]*")
_BRACE_SPEC = re.compile(r"\{[^{}]*\}")
_DIGITS = re.compile(r"\d+")


class _TemplateRaised(jinja2.TemplateError):
    """The template called ``raise_exception(message)``."""


class _Exhausted(Exception):
    """Rendering went over the output or time budget."""


class _GenerationBlock(Extension):
    """``{% generation %}…{% endgeneration %}``: transformers marks assistant text with it
    for training masks; for inference it is just its body."""

    tags = frozenset({"generation"})

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: Any) -> None:
    raise _TemplateRaised(str(message))


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _Budget:
    """Output size and wall-time limits of one render."""

    def __init__(self, max_chars: int, time_limit_s: float) -> None:
        self.max_chars = max_chars
        self.time_limit_s = time_limit_s
        self.deadline = time.monotonic() + time_limit_s

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise _Exhausted(f"ran for more than {self.time_limit_s:g} s")

    def check_size(self, value: Any) -> Any:
        if isinstance(value, str | list | tuple | bytes) and len(value) > self.max_chars:
            raise _Exhausted(f"built a value of more than {self.max_chars:,} characters")
        return value

    def check_sizes(self, values: Sequence[Any]) -> None:
        """Refuse integer arguments that would ask for a gigantic output (a width, a count)."""
        for value in values:
            if isinstance(value, int) and not isinstance(value, bool) and value > self.max_chars:
                raise _Exhausted(f"asked for a size of {value:,}")

    def check_format(self, fmt: Any, args: Sequence[Any] = ()) -> None:
        """Refuse %-style or {}-style format strings with gigantic widths or precisions."""
        if not isinstance(fmt, str):
            return
        specs = [m.group() for m in _PERCENT_SPEC.finditer(fmt)]
        specs += [m.group().partition(":")[2] for m in _BRACE_SPEC.finditer(fmt)]
        self.check_sizes([int(d) for spec in specs for d in _DIGITS.findall(spec)])
        if any("*" in spec for spec in specs):
            self.check_sizes(args)


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, plus size checks on ``*``, ``+`` and ``**`` so that a template
    cannot build a gigantic string or number in one operation."""

    intercepted_binops = frozenset({"*", "+", "**", "%"})
    budget: _Budget | None = None  # set for the duration of one render

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = self.budget
        if budget is not None:
            budget.check_time()
            if operator == "*":
                for seq, count in ((left, right), (right, left)):
                    if (
                        isinstance(seq, str | list | tuple)
                        and isinstance(count, int)
                        and len(seq) * count > budget.max_chars
                    ):
                        raise _Exhausted(
                            f"built a value of more than {budget.max_chars:,} characters"
                        )
            elif (
                operator == "**"
                and isinstance(right, int)
                and isinstance(left, int)
                and abs(left) > 1
                and right > _MAX_POW_EXPONENT
            ):
                raise _Exhausted(f"raised a number to the power {right}")
            elif operator == "%":
                budget.check_format(left, right if isinstance(right, tuple) else (right,))
        result = super().call_binop(context, operator, left, right)
        return budget.check_size(result) if budget is not None else result

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = self.budget
        if budget is None:
            return super().call(context, obj, *args, **kwargs)
        budget.check_time()
        if isinstance(getattr(obj, "__self__", None), str):  # a str method (ljust, zfill…)
            budget.check_sizes(args)
            budget.check_sizes(list(kwargs.values()))
        return budget.check_size(super().call(context, obj, *args, **kwargs))

    def wrap_str_format(self, value: Any) -> Any:
        """``str.format`` / ``format_map``: also refuse gigantic widths before formatting."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            if self.budget is not None:
                self.budget.check_format(fmt, args)
            return wrapped(*args, **kwargs)

        return checked

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        """Fail at once on an unsafe attribute, instead of an undefined that prints as ''."""
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )


def _bounded_filter(env: _BoundedSandbox, name: str, func: Any) -> Any:
    """Wrap a filter so its arguments and result are size-checked (filters bypass the
    sandbox's call hook).

    The wrapper takes the context, which also stops Jinja from evaluating the filter at
    compile time on constant arguments (``{{ 'a'|center(10**9) }}``).
    """
    sized = name in _SIZED_FILTERS
    passes = getattr(getattr(func, "jinja_pass_arg", None), "name", None)

    @jinja2.pass_context
    def wrapper(context: jinja2.runtime.Context, *args: Any, **kwargs: Any) -> Any:
        budget = env.budget
        if budget is not None:
            budget.check_time()
            if sized:
                budget.check_sizes(args[1:])
                budget.check_sizes(list(kwargs.values()))
            elif name == "format" and args:
                budget.check_format(args[0], args[1:])
        if passes == "context":
            result = func(context, *args, **kwargs)
        elif passes == "eval_context":
            result = func(context.eval_ctx, *args, **kwargs)
        elif passes == "environment":
            result = func(context.environment, *args, **kwargs)
        else:
            result = func(*args, **kwargs)
        return budget.check_size(result) if budget is not None else result

    return wrapper


def _make_environment() -> _BoundedSandbox:
    env = _BoundedSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        optimized=False,  # no constant folding: it would run template code at compile time
        extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"],
    )
    env.filters["tojson"] = _tojson
    env.filters = {name: _bounded_filter(env, name, f) for name, f in env.filters.items()}
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A model's chat template, compiled once, rendered once per turn.

    ``origin`` names where the template came from (a model folder or file) for error
    messages. ``max_chars`` caps the rendered text and ``time_limit_s`` the time one render may
    take; both exist to stop a broken or hostile template, not to limit real conversations.
    """

    def __init__(
        self,
        source: str,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        special_tokens: Mapping[str, Any] | None = None,
        origin: str = "",
        max_chars: int = DEFAULT_MAX_CHARS,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    ) -> None:
        self.source = source
        self.origin = origin
        self.max_chars = max_chars
        self.time_limit_s = time_limit_s
        tokens = {k: v for k, v in (special_tokens or {}).items() if v is not None}
        if bos_token is not None:
            tokens["bos_token"] = bos_token
        if eos_token is not None:
            tokens["eos_token"] = eos_token
        self._tokens = tokens
        self._env = _make_environment()
        try:
            self._template = self._env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(
                f"{self._subject} has a syntax error on line {exc.lineno}: {exc.message}.",
                hint="Choose another model or fix its chat_template.",
            ) from exc
        except Exception as exc:  # anything else the compiler can raise on odd input
            raise TemplateError(
                f"{self._subject} cannot be compiled: {exc}.",
                hint="Choose another model or fix its chat_template.",
            ) from exc

    @property
    def _subject(self) -> str:
        return f"The chat template of {self.origin}" if self.origin else "The chat template"

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str:
        """The conversation as the model expects it, special tokens written as text.

        ``extra`` becomes template variables (e.g. ``tools``, ``enable_thinking``) and may
        override the special tokens. Raises ``TemplateError`` on any failure.
        """
        context: dict[str, Any] = {"tools": None, "documents": None, **self._tokens, **extra}
        context["messages"] = [m.as_dict() if hasattr(m, "as_dict") else dict(m) for m in messages]
        context["add_generation_prompt"] = add_generation_prompt
        budget = _Budget(self.max_chars, self.time_limit_s)
        try:
            return self._render_bounded(context, budget)
        except _TemplateRaised as exc:
            raise TemplateError(
                f"{self._subject} rejected this conversation: {exc.message}",
                hint="The model may not support this message order or role "
                "(for example a system prompt).",
            ) from exc
        except SecurityError as exc:
            raise TemplateError(
                f"{self._subject} tried something its sandbox forbids ({exc}); it was not run.",
                hint="Do not use this model's template; choose another model.",
            ) from exc
        except _Exhausted as exc:
            raise TemplateError(
                f"{self._subject} {exc}; rendering was stopped.",
                hint="The template is broken; choose another model.",
            ) from exc
        except jinja2.UndefinedError as exc:
            raise TemplateError(
                f"{self._subject} failed: {exc.message}.",
                hint="The template expects data Hearth does not provide.",
            ) from exc
        except RecursionError as exc:
            raise TemplateError(
                f"{self._subject} recursed too deeply; rendering was stopped.",
                hint="The template is broken; choose another model.",
            ) from exc
        except MemoryError as exc:
            raise TemplateError(
                f"{self._subject} ran out of memory; rendering was stopped.",
                hint="The template is broken; choose another model.",
            ) from exc
        except Exception as exc:
            raise TemplateError(
                f"{self._subject} failed: {type(exc).__name__}: {exc}.",
                hint="The template is broken; choose another model.",
            ) from exc

    def _render_bounded(self, context: dict[str, Any], budget: _Budget) -> str:
        """Render, streaming the output to cap its size, with a line-level time guard."""
        previous_budget = self._env.budget
        self._env.budget = budget
        previous_trace = sys.gettrace()
        sys.settrace(_deadline_tracer(budget))
        try:
            pieces: list[str] = []
            size = 0
            for piece in self._template.generate(context):
                size += len(piece)
                if size > budget.max_chars:
                    raise _Exhausted(f"produced more than {budget.max_chars:,} characters")
                pieces.append(piece)
            return "".join(pieces)
        finally:
            sys.settrace(previous_trace)
            self._env.budget = previous_budget


def _deadline_tracer(budget: _Budget) -> Any:
    """A trace function that checks the deadline on every line of *template* code.

    Jinja compiles templates to Python functions in files named ``<template>``; a loop with an
    empty body calls nothing, so only a line trace can interrupt it. Other code is not traced
    (the global tracer returns None for it), so the cost stays small.
    """

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            budget.check_time()
        return local

    def global_(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == "<template>":
            budget.check_time()
            return local
        return None

    return global_
