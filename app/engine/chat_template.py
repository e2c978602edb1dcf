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

import re
import sys
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import FrameType
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import Extension
from jinja2.runtime import str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from app.engine import template_budget
from app.engine.template_budget import Budget, CheckedNamespace, Exhausted, Stopped
from app.engine.template_filters import (
    bounded_filters,
    bounded_lipsum,
    call_checked_method,
    predict_format,
    predict_percent,
)
from app.errors import TemplateError

DEFAULT_MAX_CHARS = 4_000_000  # ~1M tokens: far beyond any context window
DEFAULT_TIME_LIMIT_S = 1.0
DEFAULT_MAX_MEMORY_BYTES = 160 * 2**20
_MAX_STRFTIME_FORMAT = 256
_PLACEHOLDER_TOP = 0x10FFFD  # placeholders count down from the end of private-use plane 16


#: the message fields whose text is the user's or the model's, never control tokens
_PROTECTED_KEYS = ("content", "reasoning_content")

class _TemplateRaised(jinja2.TemplateError):
    """The template called ``raise_exception(message)``."""


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


def _strftime_now(fmt: str) -> str:
    if len(str(fmt)) > _MAX_STRFTIME_FORMAT:
        raise Exhausted(f"asked strftime_now for a format of {len(fmt):,} characters")
    return datetime.now().strftime(fmt)


class _CheckedCodeGenerator(CodeGenerator):
    """Jinja's code generator, with ``~`` and list / tuple / dict literals routed through
    the sandbox (stock Jinja builds them with plain Python, which no hook sees)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.checked_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def _checked(self, visit: Any, node: nodes.Expr, frame: Frame) -> None:
        if getattr(node, "ctx", "load") != "load":
            visit(node, frame)
            return
        self.write("environment.checked_literal(")
        visit(node, frame)
        self.write(")")

    def visit_List(self, node: nodes.List, frame: Frame) -> None:
        self._checked(super().visit_List, node, frame)

    def visit_Tuple(self, node: nodes.Tuple, frame: Frame) -> None:
        self._checked(super().visit_Tuple, node, frame)

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self._checked(super().visit_Dict, node, frame)


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every operation that builds a value size-checked (before
    it runs where the size is predictable) and the deadline checked (see template_budget)."""

    code_generator_class = _CheckedCodeGenerator
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"-", "+"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = template_budget.current()
        if budget is None:
            return super().call_binop(context, operator, left, right)
        budget.check_time()
        known = None  # the result's weight, when it follows from the operands'
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, str | bytes) and isinstance(count, int):
                    budget.need(len(seq) * count, "a repeated string")
                elif isinstance(seq, list | tuple) and isinstance(count, int):
                    known = 2 + (budget.weigh(seq) - 2) * max(count, 0)
                    budget.need(known, "a repeated list")
            if isinstance(left, int) and isinstance(right, int):
                budget.need_int_bits(left.bit_length() + right.bit_length())
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            if abs(left) > 1 and right > 0:
                budget.need_int_bits(left.bit_length() * right)
        elif operator == "+" and isinstance(left, str | list | tuple) and isinstance(
            right, type(left)
        ):
            known = budget.weigh(left) + budget.weigh(right) - 2
            budget.need(known, "a joined value")
        elif operator == "%":
            predict_percent(budget, left, right)
        result = super().call_binop(context, operator, left, right)
        if known is not None and isinstance(result, list | tuple):
            return budget.admit_known(result, known)
        return budget.admit(result)

    def checked_concat(self, parts: tuple[Any, ...]) -> str:
        """``a ~ b ~ c``: the joined size is known from the parts' weights before joining."""
        budget = template_budget.current()
        if budget is None:
            return str_join(parts)
        budget.check_time()
        budget.need(sum(len(p) if isinstance(p, str) else budget.weigh(p) for p in parts),
                    "a joined string")
        return budget.admit(str_join(parts))

    def checked_literal(self, value: Any) -> Any:
        """A list, tuple or dict literal: its expanded size (shared items counted each time)."""
        budget = template_budget.current()
        return value if budget is None else budget.admit(value)

    def checked_join(self, pieces: Sequence[Any]) -> str:
        """Joins a block's buffered output (``{% set %}…{% endset %}``, macros, ``caller``,
        filter blocks): the total is predicted from the pieces first."""
        budget = template_budget.current()
        if budget is not None:
            budget.check_time()
            budget.need(sum(len(p) for p in pieces), "a block of output")
        return "".join(pieces)

    def finalize_output(self, value: Any) -> Any:
        budget = template_budget.current()
        if budget is not None:
            budget.check_time()
            budget.weigh(value)
        return value

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = template_budget.current()
        if budget is None:
            return super().call(context, obj, *args, **kwargs)
        budget.check_time()
        args = call_checked_method(budget, obj, args, kwargs)
        return budget.admit(super().call(context, obj, *args, **kwargs))

    def wrap_str_format(self, value: Any) -> Any:
        """``str.format`` / ``format_map``: the sandbox replaces them with its own safe
        formatter at attribute access; predict the output size before that runs."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt, is_map = value.__self__, value.__name__ == "format_map"

        def checked(*args: Any, **kwargs: Any) -> str:
            budget = template_budget.current()
            if budget is not None:
                mapping = args[0] if is_map and args and isinstance(args[0], Mapping) else {}
                predict_format(budget, fmt, () if is_map else args, {**mapping, **kwargs})
            return wrapped(*args, **kwargs)

        return checked

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        """Fail at once on an unsafe attribute, instead of an undefined that prints as ''."""
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )


def _make_environment() -> _BoundedSandbox:
    env = _BoundedSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        optimized=False,  # no constant folding: it would run template code at compile time
        extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"],
    )
    env.finalize = env.finalize_output
    env.concat = env.checked_join  # type: ignore[method-assign]
    env.filters = bounded_filters(env.filters)
    env.globals["namespace"] = CheckedNamespace
    env.globals["lipsum"] = bounded_lipsum
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
        time_limit_s: float | None = None,
        max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    ) -> None:
        self.source = source
        self.origin = origin
        self.max_chars = max_chars
        # None: the module's default as it is now (a test hook may lengthen it)
        self.time_limit_s = DEFAULT_TIME_LIMIT_S if time_limit_s is None else time_limit_s
        self.max_memory_bytes = max_memory_bytes
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
        stop: threading.Event | None = None,
        **extra: Any,
    ) -> str:
        """The conversation as the model expects it, special tokens written as text.

        ``extra`` becomes template variables (e.g. ``tools``, ``enable_thinking``) and may
        override the special tokens. ``stop``, when set, ends the render at the next template
        line or operation. Raises ``TemplateError`` on any failure, within the time limit.
        """
        context: dict[str, Any] = {"tools": None, "documents": None, **self._tokens, **extra}
        context["messages"] = [m.as_dict() if hasattr(m, "as_dict") else dict(m) for m in messages]
        context["add_generation_prompt"] = add_generation_prompt
        budget = Budget(self.max_chars, self.time_limit_s, self.max_memory_bytes, stop)
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
        except Stopped as exc:
            raise TemplateError(
                f"{self._subject} {exc}: Stop was pressed.",
                hint="Send the message again to render it.",
            ) from exc
        except Exhausted as exc:
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

    def render_protected(
        self,
        messages: Sequence[Mapping[str, Any]],
        protect: Sequence[str],
        **kwargs: Any,
    ) -> tuple[str, dict[str, str]]:
        """Render with every occurrence of a ``protect`` string in message contents replaced
        by a private-use placeholder character (one per string, found in no content and not
        in the template), so the tokenizer can tell the user's ``<|im_end|>`` from the
        template's. Returns the text and ``{placeholder: string}``. Filters such as ``trim`` or
        ``split`` see one ordinary character where the string was. ``kwargs`` as in
        :meth:`render`."""
        dicts = [m.as_dict() if hasattr(m, "as_dict") else dict(m) for m in messages]
        contents = [d[k] for d in dicts for k in _PROTECTED_KEYS if isinstance(d.get(k), str)]
        strings = sorted({t for t in protect if t and any(t in c for c in contents)},
                         key=len, reverse=True)
        if not strings:
            return self.render(dicts, **kwargs), {}
        taken = set(self.source).union(*contents)
        chars = (chr(c) for c in range(_PLACEHOLDER_TOP, _PLACEHOLDER_TOP - 4096, -1))
        free = [c for c in chars if c not in taken][: len(strings)]
        if len(free) < len(strings):
            raise TemplateError(f"{self._subject} cannot protect this conversation's text.")
        mapping = dict(zip(strings, free, strict=True))
        pattern = re.compile("|".join(map(re.escape, strings)))
        for d in dicts:
            for key in _PROTECTED_KEYS:
                if isinstance(d.get(key), str):
                    d[key] = pattern.sub(lambda m: mapping[m.group()], d[key])
        return self.render(dicts, **kwargs), {c: t for t, c in mapping.items()}

    def _render_bounded(self, context: dict[str, Any], budget: Budget) -> str:
        """Render, streaming the output to cap its size, with the budget active on this
        thread and a line-level time guard."""
        token = template_budget.CURRENT.set(budget)
        previous_trace = sys.gettrace()
        sys.settrace(_deadline_tracer(budget))
        try:
            pieces: list[str] = []
            size = 0
            for piece in self._template.generate(context):
                size += len(piece)
                if size > budget.max_chars:
                    raise Exhausted(f"produced more than {budget.max_chars:,} characters")
                pieces.append(piece)
            return "".join(pieces)
        finally:
            sys.settrace(previous_trace)
            template_budget.CURRENT.reset(token)
            budget.close()


def _deadline_tracer(budget: Budget) -> Any:
    """A trace function that checks the deadline on every line of *template* code.

    Jinja compiles templates to Python functions in files named ``<template>``; a loop with an
    empty body calls nothing, so only a line trace can interrupt it. Other code is not traced
    (the global tracer returns None for it), so the cost stays small.
    """

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            budget.line()
        return local

    def global_(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == "<template>":
            budget.check_time()
            return local
        return None

    return global_
