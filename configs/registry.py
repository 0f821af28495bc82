"""Registries of plug-ins, and plug-ins loaded from outside fleetcast by import path.

One `Registry` per kind of plug-in (peak predictors, placement policies, trace sources,
lifetime models) maps a name (the config's field or enum name) to what builds the object and
validates its config; the built-ins register like anything else (docs/extending.md). A config
can also name a class outside the project (`plugin { class_path params }`), built with its
string parameters converted, per constructor parameter, by this typing rule:

1. its annotation, if it is `int`, `float`, `bool` or `str` (or `Optional` of one);
2. else the type of its default value, if that is one of those;
3. else the value read as a JSON literal (`0.5`, `3`, `true`, `[1, 2]`, `"text"`), or the
   string itself when it is not one.

`bool` accepts true/false, 1/0, yes/no (any case); `int` only whole numbers. An unknown or
missing parameter, a value that does not convert, or a constructor that raises is a config
error naming the parameter; a module or constructor that calls `sys.exit`, one naming
`class_path`. What a plug-in returns while the run runs is checked where it is used
(`CheckedPolicy`, `CheckedPredictor`): a bad value raises `PluginFailed`, the run's failure.
"""

import importlib
import inspect
import json
import typing
from typing import Callable, Dict, Iterator, Mapping, Optional, Sequence

_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


class Registry:
    """Named plug-ins of one kind.

    Args:
      kind: what the entries are, for messages ("peak predictor").
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: Dict[str, object] = {}

    def register(self, name: str, entry=None):
        """Adds `entry` under `name`; without `entry`, a decorator that registers its target.
        A name registers once."""
        if entry is None:
            return lambda target: self.register(name, target)
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        self._entries[name] = entry
        return entry

    def __getitem__(self, name: str):
        if name not in self._entries:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(self)}")
        return self._entries[name]

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def items(self):
        """(name, entry) pairs, in registration order."""
        return self._entries.items()


class PluginFailed(ValueError):
    """A plug-in that returned a bad value, or raised, while the run ran; the message names
    the plug-in, its class path and the value."""


class PluginError(ValueError):
    """A plug-in that cannot be built; `field` is relative to the plug-in's message
    (``class_path`` or ``params["name"]``)."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def load_class(class_path: str):
    """The object named by "package.module:Name" (or "package.module.Name")."""
    if ":" in class_path:
        module_name, _, attribute = class_path.partition(":")
    else:
        module_name, _, attribute = class_path.rpartition(".")
    if not module_name or not attribute:
        raise PluginError("class_path", f"must be 'package.module:Class', got {class_path!r}")
    try:
        target = importlib.import_module(module_name)
    except SystemExit as e:
        raise PluginError("class_path", f"importing {module_name!r} {exit_text(e)}") from None
    except Exception as e:  # pylint: disable=broad-except
        raise PluginError("class_path", f"cannot import {module_name!r}: {e}") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise PluginError("class_path", f"{target.__name__!r} has no attribute {part!r}")
        target = getattr(target, part)
    if not isinstance(target, type):
        raise PluginError("class_path", f"{class_path!r} is not a class")
    return target


def _declared_type(parameter: inspect.Parameter, hints: Mapping[str, object]):
    annotation = hints.get(parameter.name, parameter.annotation)
    if typing.get_origin(annotation) is typing.Union:
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = options[0] if len(options) == 1 else None
    if annotation in (int, float, bool, str):
        return annotation
    default = parameter.default
    if default is not inspect.Parameter.empty and type(default) in (int, float, bool, str):
        return type(default)
    return None


def convert_param(text: str, declared) -> object:
    """`text` as a value of type `declared` (None: a JSON literal, else the string)."""
    if declared is str:
        return text
    if declared is bool:
        if text.strip().lower() not in _BOOLS:
            raise ValueError(f"is not a bool (true/false): {text!r}")
        return _BOOLS[text.strip().lower()]
    if declared is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"is not an integer: {text!r}") from None
    if declared is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"is not a number: {text!r}") from None
    try:
        return json.loads(text)
    except ValueError:
        return text


def plugin_kwargs(cls, params: Mapping[str, str]) -> dict:
    """The constructor arguments of `cls` from string `params` (the module's typing rule)."""
    signature = inspect.signature(cls.__init__)
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # pylint: disable=broad-except
        hints = {}
    parameters = {name: p for name, p in list(signature.parameters.items())[1:]
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    takes_any = any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())
    kwargs = {}
    for name in sorted(params):
        if name not in parameters and not takes_any:
            raise PluginError(f"params[{name!r}]", f"{cls.__name__} takes no parameter "
                              f"{name!r}; it takes: {', '.join(parameters) or 'none'}")
        try:
            kwargs[name] = convert_param(
                params[name], _declared_type(parameters[name], hints) if name in parameters
                else None)
        except ValueError as e:
            raise PluginError(f"params[{name!r}]", str(e)) from None
    for name, parameter in parameters.items():
        if parameter.default is inspect.Parameter.empty and name not in kwargs:
            raise PluginError(f"params[{name!r}]", f"is required by {cls.__name__}")
    return kwargs


def build_plugin(class_path: str, params: Mapping[str, str],
                 required_methods: Sequence[str] = ()) -> object:
    """Imports `class_path`, converts `params` and builds the object; raises PluginError.

    `required_methods` are the methods the object must have (its interface)."""
    cls = load_class(class_path)
    missing = [m for m in required_methods if not callable(getattr(cls, m, None))]
    if missing:
        raise PluginError("class_path", f"{class_path} lacks {', '.join(missing)}()")
    kwargs = plugin_kwargs(cls, params)
    try:
        return cls(**kwargs)
    except SystemExit as e:
        raise PluginError("class_path", f"{cls.__name__}({_call_text(kwargs)}) "
                                        f"{exit_text(e)}") from None
    except Exception as e:  # pylint: disable=broad-except
        named = [n for n in kwargs if n in str(e)]
        field = f"params[{named[0]!r}]" if len(named) == 1 else "params"
        raise PluginError(field, f"{cls.__name__}({_call_text(kwargs)}) {raised_text(e)}"
                          ) from None


def exit_text(error: SystemExit) -> str:
    """How a plug-in's SystemExit reads in a message: "called sys.exit(0)"."""
    return "called sys.exit()" if error.code is None else f"called sys.exit({error.code!r})"


def raised_text(error: BaseException) -> str:
    """How an exception a plug-in raised reads in a message."""
    if isinstance(error, SystemExit):
        return exit_text(error)
    return f"raised {type(error).__name__}: {error}"


def _call_text(kwargs: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def check_plugin(check, message, field: str, required_methods: Sequence[str] = (),
                 build: Optional[Callable] = None):
    """Validates a `Plugin` message by building it, reporting problems under `field`."""
    if not message.class_path:
        check.fail(f"{field}.class_path", "is required")
        return
    try:
        (build or build_plugin)(message.class_path, dict(message.params), required_methods)
    except PluginError as e:
        check.fail(f"{field}.{e.field}", e.reason)
