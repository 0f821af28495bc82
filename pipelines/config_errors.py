"""One-line messages for the syntax errors of a text-format run config.

protobuf reports a typo as ``21:3 : Message type "fleetcast.LifetimeModelConfig" has no
field named "lifetime_cap".``: a position, the message type instead of the field, and no
hint. `parse_problem` turns such a ParseError into a ConfigProblem that reads like the
validators' range errors: the line, the field path from the top-level message and what to
write instead, e.g. ``line 21: lifetime_model.lifetime_cap: no such field (did you mean
lifetime_cap_s?)``.
"""

import dataclasses
import difflib
import re
from typing import Optional

from configs.checks import ConfigProblem

# Former RunConfig fields, now in `overcommit { }`: a config using them gets a message saying so.
OVERCOMMIT_FIELDS = ("filter", "filtered_usage", "metric", "reset_and_shift", "scheduler",
                     "scheduled_usage", "fortune_teller")

# protobuf's reasons (its "LINE:COLUMN : " and quoted-line prefixes removed) that name a field.
_NO_FIELD = re.compile(r'Message type "[\w.]+" has no field named "(\w+)"\.$')
_NO_VALUE = re.compile(r'Enum type "[\w.]+" has no value (?:named|with number) (\S+)\.$')
_TWICE = re.compile(r'Message type "[\w.]+" should not have multiple "(\w+)" fields\.$')
_ONEOF = re.compile(r'Field "(\w+)" is specified along with field "(\w+)", another member '
                    r'of oneof "(\w+)"')
# protobuf's reasons about one value, reworded like the validators' ones.
_REWORDED = [(re.compile(pattern), reason) for pattern, reason in [
    (r"Couldn't parse integer: (.*)$", "must be an integer, got %s"),
    (r"Couldn't parse float: (.*)$", "must be a number, got %s"),
    (r'Expected "true" or "false"\.$', "must be true or false"),
    (r'Expected "\{"\.$', "is a message: expected { after its name"),
    (r"Expected string but found: '(.*)'$", "must be a string in quotes, got %s"),
    (r"Expected identifier or number, got }\.$", "this } closes no message (one } too many)")]]

# One token of a line of text format: blanks, a comment, a string (perhaps unterminated), a
# name or number, or one other character.
_TOKEN = re.compile(r"""\s+|#.*|"(?:\\.|[^"\\])*"?|'(?:\\.|[^'\\])*'?|[\w.+-]+|.""")
_NAME = re.compile(r"[A-Za-z_]\w*$")


@dataclasses.dataclass
class _Message:
    """A message open in the text: its field path, descriptor and the line of its `{`;
    `counts` the repeated message fields opened in it so far, by name; `list_field` the field
    of a `[ ... ]` list being read in it."""

    path: str
    descriptor: object
    line: int
    counts: dict = dataclasses.field(default_factory=dict)
    list_field: Optional[str] = None

    def child(self, name: str, line: int) -> "_Message":
        """The message field `name` of this message, opened on `line`."""
        field = self.descriptor.fields_by_name[name]
        path = f"{self.path}.{name}" if self.path else name
        if field.is_repeated:
            self.counts[name] = self.counts.get(name, 0) + 1
            path += f"[{self.counts[name] - 1}]"
        return _Message(path, field.message_type, line)


def parse_problem(error, text: str, descriptor) -> ConfigProblem:
    """The ConfigProblem of a text-format ParseError, by line and field path.

    Parameters
    ----------
    error : google.protobuf.text_format.ParseError
        What `text_format.Parse(text, message)` raised.
    text : str
        The text parsed.
    descriptor : google.protobuf.descriptor.Descriptor
        The descriptor of the top-level message parsed (``RunConfig.DESCRIPTOR``).

    Returns
    -------
    ConfigProblem
        Its field is ``line N: PATH``, PATH the field at fault from the top-level message
        (``placement.lifetime_source[1].oracle``; absent when the fault is between fields),
        and its reason one clause without protobuf's position or message types: for an
        unknown field the closest valid names (or every valid name), for an unknown enum
        value the closest and every valid value.

    Examples
    --------
    >>> from google.protobuf import text_format
    >>> from configs.fleetcast_pb2 import RunConfig
    >>> text = "lifetime_model {\\n  lifetime_cap: 3\\n}"
    >>> try:
    ...     text_format.Parse(text, RunConfig())
    ... except text_format.ParseError as e:
    ...     print(parse_problem(e, text, RunConfig.DESCRIPTOR))
    line 2: lifetime_model.lifetime_cap: no such field (did you mean lifetime_cap_s?)
    """
    line, lines = error.GetLine(), text.split("\n")  # as text_format.Parse splits it
    reason = re.sub(r"^\d+(:\d+)? : ", "", str(error)).removeprefix(f"'{lines[line - 1]}': ")
    unclosed = reason == 'Expected "}".'  # at the end of the text: a message is still open
    stack, name = _open_messages(lines, descriptor,
                                 (len(lines) + 1, 0) if unclosed else (line, error.GetColumn()))
    message = stack[-1]
    if match := _NO_FIELD.match(reason):
        name, reason = _no_field(stack, match.group(1))
    elif match := _NO_VALUE.match(reason):
        reason = _no_value(message.descriptor.fields_by_name[name].enum_type, match.group(1))
    elif match := _TWICE.match(reason):
        name, reason = match.group(1), "is set twice, but takes one value (not repeated)"
    elif match := _ONEOF.match(reason):
        oneof = message.descriptor.oneofs_by_name[match.group(3)]
        name, reason = match.group(1), (
            f"is set along with {match.group(2)}: set only one of "
            f"{', '.join(field.name for field in oneof.fields)}")
    elif unclosed:
        name, line, reason = None, message.line, "its { is never closed (a } is missing)"
    else:
        reason = _reworded(reason)
    path = ".".join(part for part in (message.path, name) if part)
    return ConfigProblem(f"line {line}: {path}" if path else f"line {line}", reason)


def _open_messages(lines, descriptor, position):
    """(the messages open just before `position` (line, column) of the text of `lines`,
    outermost first; the field named last in the innermost one, None after one closes)."""
    stack = [_Message("", descriptor, 1)]
    name, value_next = None, False
    for number, text_line in enumerate(lines, 1):
        for token in _TOKEN.finditer(text_line):
            word, message = token.group(), stack[-1]
            if (number, token.start() + 1) >= position:
                return stack, name
            if word.isspace() or word.startswith("#"):
                continue
            if word == ":":
                value_next = True
            elif word == "[":
                message.list_field = name
            elif word == "]":
                message.list_field, value_next = None, False
            elif word in ("{", "<"):
                stack.append(message.child(message.list_field or name, number))
                name, value_next = None, False
            elif word in ("}", ">"):
                stack.pop()
                name = None
            elif _NAME.match(word) and not value_next and message.list_field is None:
                name = word
            else:
                value_next = False
    return stack, name


def _reworded(reason: str) -> str:
    """protobuf's `reason` reworded as in _REWORDED, else lower-cased without its period."""
    for pattern, template in _REWORDED:
        match = pattern.match(reason)
        if match:
            return template % match.groups()
    return reason[0].lower() + reason[1:].rstrip(".")


def _no_field(stack, name: str):
    """(field name, reason) for `name`, no field of the innermost message of `stack`."""
    if len(stack) == 1 and name in OVERCOMMIT_FIELDS:
        return None, (f"{name} is no longer a top-level field: the overcommit stages are one "
                      f"message since fleetcast 0.2; put {', '.join(OVERCOMMIT_FIELDS)} "
                      "inside overcommit { ... }")
    outer = [m for m in stack[:-1] if name in m.descriptor.fields_by_name]
    if outer:
        where = outer[-1].path or "the top level"
        return name, f"no such field here; {name} is a field of {where} (is a }} missing above?)"
    names = list(stack[-1].descriptor.fields_by_name)
    return name, "no such field" + (_did_you_mean(name, names) or f"; valid: {', '.join(names)}")


def _no_value(enum, value: str) -> str:
    """Why `value` is not a value of `enum`, with its valid values."""
    names = [v.name for v in enum.values if not v.name.endswith("_UNSPECIFIED")]
    return f"{value} is not a valid value{_did_you_mean(value, names)}; valid: {', '.join(names)}"


def _did_you_mean(word: str, names) -> str:
    """' (did you mean X or Y?)' with the `names` close to `word`, or '' if none is."""
    close = difflib.get_close_matches(word, names)
    return f" (did you mean {' or '.join(close)}?)" if close else ""
