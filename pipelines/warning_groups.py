"""The warnings of `fleetcast validate` on several configs, grouped by what to do about them."""

import dataclasses
import re
from typing import List, Optional, Sequence, TextIO, Tuple

from pipelines.stages.placement import known_bad

# A command in a config's leading comment: `#` then three or more spaces (continued by `\`).
_COMMAND_LINE = re.compile(r"^#\s{3,}(\S.*)$")
_QUOTED = re.compile(r"'([^']+)'")


@dataclasses.dataclass
class ConfigWarnings:
    """A valid config's warnings: `missing` its inputs that are not there (ConfigProblems),
    `lines` each (stage field, warning) of pipelines.config.warnings_by_field."""

    path: str
    config: object
    missing: Sequence
    lines: Sequence[Tuple[str, str]]

    @property
    def count(self) -> int:
        return len(self.missing) + len(self.lines)


def header_commands(text: str) -> List[str]:
    """The shell commands in the leading comment of a config's `text`, in order, each on one
    line (continuation backslashes joined, spaces collapsed)."""
    commands, current = [], None
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        found = _COMMAND_LINE.match(line)
        if found is None:
            current = None
            continue
        part = found.group(1).rstrip()
        current = f"{current} {part}" if current is not None else part
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            commands.append(" ".join(current.split()))
            current = None
    return commands


def making_command(path: str) -> Optional[str]:
    """The command in `path`'s header that makes its inputs: the first that is not a
    `fleetcast run` or `report` of the config itself; None when the header has none."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    return next((command for command in header_commands(text)
                 if not command.startswith(("fleetcast run ", "fleetcast report "))), None)


def _folder(pattern: str) -> str:
    """The folder that a path glob's matches would be in: its path up to the first part with
    a wildcard ("." for none)."""
    parts = pattern.split("/")
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")),
                 len(parts) - 1)
    return "/".join(parts[:fixed]) or "."


def _missing_line(item: ConfigWarnings) -> str:
    folders = sorted({_folder(m.group(1)) for problem in item.missing
                      for m in [_QUOTED.search(problem.reason)] if m})
    where = f" under {', '.join(f + '/' for f in folders)}" if folders else ""
    noun = "input" if len(item.missing) == 1 else "inputs"
    command = making_command(item.path)
    make = (f"made by: {command}" if command else
            "its header names no command that makes them")
    return f"  {item.path}: {len(item.missing)} {noun}{where}; {make}"


def _groups(items: Sequence[ConfigWarnings]):
    """(heading, indented lines) of each non-empty group, in the order to act on them."""
    missing = [_missing_line(item) for item in items if item.missing]
    compared, unbaselined = [], []
    for item in items:
        beside = item.config.HasField("placement") and known_bad.compared(item.config.placement)
        for field, line in item.lines:
            (compared if field == "placement" and beside else unbaselined).append(
                f"  {item.path}: {line}")
    return [(group, lines) for group, lines in [
        ("combinations known to lose or to do nothing, without their baseline in the run "
         "(check these)", unbaselined),
        ("inputs not there yet (`fleetcast run` fails until they are), with the command in "
         "the config's header that makes them", missing),
        ("known-bad combinations beside best_fit in their replay (intended: the run measures "
         "what they lose, as the reproductions' comparisons do)", compared)] if lines]


def print_grouped(items: Sequence[ConfigWarnings], configs: int, out: TextIO):
    """Every warning of `items` once, under the heading of its group, on `out`; nothing
    when there is none (`configs`: how many configs were validated)."""
    warned = [item for item in items if item.count]
    if not warned:
        return
    total = sum(item.count for item in warned)
    print(f"fleetcast: warning: {total} warning{'s' if total != 1 else ''} in {len(warned)} "
          f"of {configs} configs, by what to do:", file=out)
    for heading, lines in _groups(warned):
        print(f"fleetcast: warning: {heading}:", file=out)
        for line in lines:
            print(line, file=out)
