"""Size predictions for everything a chat template can call that may amplify its input.

Each ``predict_*`` function returns (or checks against the render's :class:`Budget`) the size
of a result *before* it is built; :func:`bounded_filters` and :func:`check_method_call` apply
them to Jinja's filters and to methods of ``str``/``bytes``/``int``. Filters without an entry
here cannot build more than a small multiple of their input, which the caller's post-check
(:meth:`Budget.admit`) then measures.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jinja2
from jinja2.utils import generate_lorem_ipsum

from app.engine.template_budget import Budget, Exhausted, current

_MAX_JSON_INDENT = 64
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?[a-zA-Z%]")
_DIGITS = re.compile(r"\d+")


def _strlen(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes | bytearray) else 0


def _ints(values: Iterable[Any]) -> list[int]:
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def check_int_args(budget: Budget, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse an integer argument above the output limit (a width, a length, a count)."""
    for value in _ints([*args, *kwargs.values()]):
        budget.need(value, "a size")


def predict_replace(budget: Budget, s: Any, old: Any, new: Any, count: Any = -1) -> None:
    if not isinstance(s, str | bytes) or not isinstance(old, type(s)) or not isinstance(
        new, type(s)
    ):
        return
    hits = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    budget.need(len(s) + hits * max(0, len(new) - len(old)), "a replacement")


def predict_join(budget: Budget, sep: Any, items: Sequence[Any]) -> None:
    total = _strlen(sep) * max(0, len(items) - 1)
    for item in items:
        total += len(item) if isinstance(item, str) else budget.weigh(item)
        budget.need(total, "a joined string")


def predict_percent(budget: Budget, fmt: Any, args: Any) -> None:
    """``fmt % args``: widths, precisions and the number of conversions times the argument."""
    if not isinstance(fmt, str | bytes):
        return
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    specs = list(_PERCENT_SPEC.finditer(text))
    widths = 0
    for spec in specs:
        for part in spec.groups():
            if part and part.isdigit():
                budget.need(int(part), "a width")
                widths += int(part)
    arg_list = args if isinstance(args, tuple) else (args,)
    if any("*" in spec.group() for spec in specs):
        check_int_args(budget, arg_list, {})
        widths += sum(_ints(arg_list))
    budget.need(len(text) + widths + len(specs) * budget.weigh(args), "a formatted string")


def predict_format(
    budget: Budget, fmt: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    """``fmt.format(*args, **kwargs)``, nested ``{…}`` widths included."""
    if not isinstance(fmt, str):
        return
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # format() itself will raise
    values = [*args, *kwargs.values()]
    biggest = max((budget.weigh(v) for v in values), default=0)
    total = len(fmt)
    for _literal, name, spec, _conv in fields:
        if name is None:
            continue
        total += biggest
        spec = spec or ""
        for digits in _DIGITS.findall(spec):
            budget.need(int(digits), "a width")
            total += int(digits)
        if "{" in spec:  # a width taken from an argument
            check_int_args(budget, args, kwargs)
            total += max(_ints(values), default=0)
    budget.need(total, "a formatted string")


def predict_width(budget: Budget, s: Any, width: Any) -> None:
    if isinstance(width, int):
        budget.need(max(_strlen(s), width), "a padded string")


def check_method_call(
    budget: Budget, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    """Before calling a method of a ``str``, ``bytes`` or ``int`` object."""
    owner = getattr(func, "__self__", None)
    if not isinstance(owner, str | bytes | bytearray | int) or isinstance(owner, bool):
        return
    name = getattr(func, "__name__", "")
    if name == "replace" and len(args) >= 2:
        predict_replace(budget, owner, args[0], args[1], args[2] if len(args) > 2 else -1)
    elif name == "join" and args:
        raise _Materialise  # the caller materialises the iterable first
    elif name in ("format", "format_map"):
        mapping = args[0] if name == "format_map" and args else {}
        predict_format(budget, owner, args if name == "format" else (), dict(mapping, **kwargs)
                       if isinstance(mapping, Mapping) else kwargs)
    elif name == "expandtabs":
        size = (args[0] if args else kwargs.get("tabsize", 8))
        if isinstance(size, int) and isinstance(owner, str | bytes):
            budget.need(len(owner) + owner.count("\t" if isinstance(owner, str) else b"\t")
                        * max(size, 0), "an expanded string")
    elif name == "translate" and args:
        table = args[0]
        widest = max((budget.weigh(v) for v in table.values()), default=1) if isinstance(
            table, Mapping) else 1
        budget.need(_strlen(owner) * widest, "a translated string")
    check_int_args(budget, args, kwargs)


class _Materialise(Exception):
    """Internal: ``sep.join(iterable)`` needs its items listed before the prediction."""


def call_checked_method(budget: Budget, func: Any, args: tuple, kwargs: dict) -> tuple:
    """Check a method call and return the (possibly materialised) arguments to call with."""
    try:
        check_method_call(budget, func, args, kwargs)
    except _Materialise:
        items = list(args[0])
        predict_join(budget, func.__self__, items)
        args = (items, *args[1:])
    return args


# -- filters --------------------------------------------------------------------------------


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson`` (non-ASCII kept, indent/separators/sort_keys), streamed
    against the budget so that indentation cannot multiply the output past the limit."""
    width = indent if isinstance(indent, int) else len(indent) if isinstance(indent, str) else 0
    if width > _MAX_JSON_INDENT:
        raise Exhausted(f"asked tojson for an indent of {width:,} (at most {_MAX_JSON_INDENT})")
    if separators is not None and sum(_strlen(s) for s in separators) > _MAX_JSON_INDENT:
        raise Exhausted("asked tojson for separators longer than 64 characters")
    encoder = json.JSONEncoder(
        ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )
    budget = current()
    if budget is None:
        return encoder.encode(value)
    budget.weigh(value)
    pieces: list[str] = []
    size = 0
    for n, piece in enumerate(encoder.iterencode(value)):
        size += len(piece)
        budget.need(size, "a JSON text")
        pieces.append(piece)
        if n % 4096 == 0:
            budget.check_time()
    return "".join(pieces)


def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """Jinja's ``lipsum`` global with its sizes checked first."""
    budget = current()
    if budget is not None:
        for value in (n, min, max):
            budget.need(value, "lorem ipsum")
        budget.need(n * (max + 1) * 16, "lorem ipsum")
    return generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def _sum(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """Jinja's ``sum``, but lists and tuples are concatenated in linear time, size-checked."""
    if not isinstance(start, list | tuple):
        return jinja2.filters.do_sum(environment, iterable, attribute, start)
    items: Iterable[Any] = iterable
    if attribute is not None:
        getter = jinja2.filters.make_attrgetter(environment, attribute)
        items = map(getter, iterable)
    items = list(items)
    budget = current()
    if budget is not None:
        budget.need(budget.weigh(start) + sum(budget.weigh(i) for i in items), "a sum")
    result = list(start)
    for item in items:
        if not isinstance(item, type(start)):
            raise TypeError(f"can only concatenate {type(start).__name__} to "
                            f"{type(start).__name__}")
        result.extend(item)
    return tuple(result) if isinstance(start, tuple) else result


_Predict = Callable[[Budget, tuple, dict], None]


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _pre_indent(budget: Budget, args: tuple, kwargs: dict) -> None:
    s = str(args[0]) if args else ""
    width = _arg(args, kwargs, 1, "width", 4)
    w = width if isinstance(width, int) else len(str(width))
    budget.need(len(s) + (s.count("\n") + 1) * max(w, 0), "an indented string")


def _pre_wordwrap(budget: Budget, args: tuple, kwargs: dict) -> None:
    s = args[0] if args else ""
    wrap = _arg(args, kwargs, 4, "wrapstring") or "\n"
    budget.need(_strlen(s) + (_strlen(s) + 1) * _strlen(wrap), "a wrapped string")


def _pre_replace(budget: Budget, args: tuple, kwargs: dict) -> None:
    # do_replace(eval_ctx, s, old, new, count=None): args here exclude eval_ctx
    if len(args) >= 3:
        count = _arg(args, kwargs, 3, "count")
        predict_replace(budget, str(args[0]), str(args[1]), str(args[2]),
                        -1 if count is None else count)


def _pre_center(budget: Budget, args: tuple, kwargs: dict) -> None:
    predict_width(budget, str(args[0]) if args else "", _arg(args, kwargs, 1, "width", 80))


def _pre_format(budget: Budget, args: tuple, kwargs: dict) -> None:
    if args:
        predict_percent(budget, args[0], kwargs if kwargs else tuple(args[1:]))


def _pre_slice(budget: Budget, args: tuple, kwargs: dict) -> None:
    slices = _arg(args, kwargs, 1, "slices", 1)
    fill = _arg(args, kwargs, 2, "fill_with")
    if isinstance(slices, int):
        size = budget.weigh(args[0]) if args else 0
        budget.need(size + slices * (4 + (budget.weigh(fill) if fill is not None else 0)),
                    "slices")


def _pre_batch(budget: Budget, args: tuple, kwargs: dict) -> None:
    count = _arg(args, kwargs, 1, "linecount", 1)
    fill = _arg(args, kwargs, 2, "fill_with")
    if isinstance(count, int):
        size = budget.weigh(args[0]) if args else 0
        extra = count * budget.weigh(fill) if fill is not None else 0
        budget.need(2 * size + extra, "batches")
        budget.need(count, "a batch size")


def _pre_stringify(budget: Budget, args: tuple, kwargs: dict) -> None:
    if args:
        budget.weigh(args[0])


def _pre_urlize(budget: Budget, args: tuple, kwargs: dict) -> None:
    s = args[0] if args else ""
    extra = sum(_strlen(_arg(args, kwargs, i, n, "")) for i, n in ((3, "target"), (4, "rel")))
    budget.need(_strlen(s) * 3 + (_strlen(s) // 4 + 1) * extra, "a linked text")
    check_int_args(budget, args[1:], kwargs)


_PREDICT: dict[str, _Predict] = {
    "indent": _pre_indent,
    "wordwrap": _pre_wordwrap,
    "replace": _pre_replace,
    "center": _pre_center,
    "format": _pre_format,
    "slice": _pre_slice,
    "batch": _pre_batch,
    "string": _pre_stringify,
    "pprint": _pre_stringify,
    "list": _pre_stringify,
    "urlize": _pre_urlize,
    "truncate": lambda b, a, k: check_int_args(b, a[1:], k),
}


def _pre_join(budget: Budget, args: tuple, kwargs: dict) -> tuple:
    items = list(args[0]) if args else []
    attribute = _arg(args, kwargs, 2, "attribute")
    if attribute is None:
        predict_join(budget, str(_arg(args, kwargs, 1, "d", "")), items)
    return (items, *args[1:])


def bounded_filters(filters: Mapping[str, Any]) -> dict:
    """Jinja's filters, each size-predicted before and measured after it runs.

    The wrappers take the context, which also stops Jinja from running a filter at compile
    time on constant arguments (``{{ 'a'|center(10**9) }}``).
    """
    replaced = dict(filters)
    replaced["tojson"] = _tojson
    replaced["sum"] = jinja2.pass_environment(_sum)
    return {name: _wrap(name, func) for name, func in replaced.items()}


def _wrap(name: str, func: Any) -> Any:
    predict = _PREDICT.get(name)
    passes = getattr(getattr(func, "jinja_pass_arg", None), "name", None)

    @jinja2.pass_context
    def wrapper(context: jinja2.runtime.Context, *args: Any, **kwargs: Any) -> Any:
        budget = current()
        if budget is not None:
            budget.check_time()
            if name == "join":
                args = _pre_join(budget, args, kwargs)
            elif predict is not None:
                predict(budget, args, kwargs)
        if passes == "context":
            result = func(context, *args, **kwargs)
        elif passes == "eval_context":
            result = func(context.eval_ctx, *args, **kwargs)
        elif passes == "environment":
            result = func(context.environment, *args, **kwargs)
        else:
            result = func(*args, **kwargs)
        return budget.admit(result) if budget is not None else result

    return wrapper

