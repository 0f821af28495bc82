"""MkDocs hooks: the pages generated at build time, so they never go stale.

Two pages hold a marker line that the build replaces (nothing generated is committed), and
the site gets the Web Worker shim its search needs from file:// (`on_post_build`):

- configuration.md, `<!-- fleetcast: configuration reference -->`: every field reachable
  from `RunConfig`, with its type, default and the comment above it in
  configs/fleetcast.proto (compiled with grpcio-tools' protoc, which keeps the comments);
- tables.md, `<!-- fleetcast: table reference -->`: every column of every table a run
  writes, with the description declared in pipelines/schemas.py.

The repository root is put first on sys.path, so the pages describe the checkout being built
(not another installed copy of fleetcast).
"""

import pathlib
import shutil
import sys
import tempfile
from typing import Dict, List, Optional

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
from google.protobuf import descriptor_pb2  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402

from pipelines import schemas  # noqa: E402

PROTO = "configs/fleetcast.proto"
CONFIG_MARKER = "<!-- fleetcast: configuration reference -->"
TABLE_MARKER = "<!-- fleetcast: table reference -->"
_LABELS = {descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED: "repeated"}
_FIELD, _VALUE = 2, 2  # DescriptorProto.field, EnumDescriptorProto.value in source paths
_SCALARS = {value: name[len("TYPE_"):].lower()
            for name, value in descriptor_pb2.FieldDescriptorProto.Type.items()}


def cell(text: str) -> str:
    """`text` safe in a markdown table cell (a bare <word> would read as an HTML tag)."""
    return (text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\n", " ").strip())


# The table reference (pipelines/schemas.py).

def type_name(data_type: pa.DataType) -> str:
    """A column type as the reference shows it: int64, float64, string, bool, list<...>."""
    if pa.types.is_list(data_type):
        return f"list<{type_name(data_type.value_type)}>"
    if pa.types.is_float64(data_type):
        return "float64"  # Arrow calls it "double"
    return "bool" if pa.types.is_boolean(data_type) else str(data_type)


def table_reference(tables: Optional[Dict[str, pa.Schema]] = None) -> str:
    """The markdown of every table in `tables` ({name: schema}, default schemas.TABLES): a
    heading per table, its description, and one row per column (name, type, null, what)."""
    lines = []
    for name, schema in (tables or schemas.TABLES).items():
        about = cell(schemas.description(schema))
        lines += [f"## `{name}` {{#{name}}}", "", about[:1].upper() + about[1:] + ".",
                  "", "| column | type | null | description |", "|---|---|---|---|"]
        lines += [f"| `{field.name}` | {cell(type_name(field.type))} | "
                  f"{'yes' if field.nullable else 'no'} | {cell(schemas.description(field))} |"
                  for field in schema]
        lines.append("")
    return "\n".join(lines)


# The configuration reference (configs/fleetcast.proto).

def proto_file() -> descriptor_pb2.FileDescriptorProto:
    """configs/fleetcast.proto compiled with its comments (SourceCodeInfo)."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as scratch:
        out = pathlib.Path(scratch) / "fleetcast.desc"
        status = protoc.main(["protoc", f"-I{REPO}", "--include_source_info",
                              f"--descriptor_set_out={out}", str(REPO / PROTO)])
        if status != 0:
            raise RuntimeError(f"protoc failed on {PROTO} with status {status}")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return files.file[0]


def proto_comments(proto: descriptor_pb2.FileDescriptorProto) -> Dict[tuple, str]:
    """{source path: the leading (else trailing) comment} of every commented element."""
    comments = {}
    for location in proto.source_code_info.location:
        text = (location.leading_comments or location.trailing_comments).strip()
        if text:
            comments[tuple(location.path)] = " ".join(text.split())
    return comments


class ProtoTypes:
    """Every message and enum of the file by full name ("fleetcast.RunConfig"), with the
    source path of its declaration (where its comment is)."""

    # FileDescriptorProto.message_type / enum_type, DescriptorProto.nested_type / enum_type.
    _MESSAGE, _ENUM, _NESTED, _NESTED_ENUM = 4, 5, 3, 4

    def __init__(self, proto: descriptor_pb2.FileDescriptorProto):
        self.messages, self.enums, self.maps = {}, {}, {}
        prefix = f".{proto.package}"
        for i, message in enumerate(proto.message_type):
            self._add(message, f"{prefix}.{message.name}", (self._MESSAGE, i))
        for i, enum in enumerate(proto.enum_type):
            self.enums[f"{prefix}.{enum.name}"] = (enum, (self._ENUM, i))

    def _add(self, message, name: str, path: tuple):
        self.messages[name] = (message, path)
        for i, nested in enumerate(message.nested_type):
            if nested.options.map_entry:
                self.maps[f"{name}.{nested.name}"] = nested
            else:
                self._add(nested, f"{name}.{nested.name}", path + (self._NESTED, i))
        for i, enum in enumerate(message.enum_type):
            self.enums[f"{name}.{enum.name}"] = (enum, path + (self._NESTED_ENUM, i))


def short_name(full_name: str) -> str:
    """"RunConfig" for ".fleetcast.RunConfig", "Scheduler.AtRandom" for a nested one."""
    return full_name.split(".", 2)[2]


def anchor(full_name: str) -> str:
    return short_name(full_name).lower().replace(".", "-")


def field_type(field, types: ProtoTypes) -> str:
    """The field's type as the page shows it, a link for a message or an enum."""
    if field.type_name in types.maps:
        key, value = (field_type(f, types) for f in types.maps[field.type_name].field)
        return f"map&lt;{key}, {value}&gt;"
    if field.type_name in types.messages or field.type_name in types.enums:
        kind = "message" if field.type_name in types.messages else "enum"
        return f"[{short_name(field.type_name)}](#{anchor(field.type_name)}) ({kind})"
    return _SCALARS[field.type]


def field_default(field) -> str:
    if field.HasField("default_value"):
        return f"`{field.default_value}`"
    return ""


def nested_comment(field, message_name: str, types: ProtoTypes,
                   comments: Dict[tuple, str]) -> str:
    """The comment of a field's type when that type is declared inside the field's message
    (`optional WarmStart warm_start` below `enum WarmStart`, whose comment says what the
    field is), else ""."""
    if not field.type_name.startswith(f"{message_name}."):
        return ""
    entry = types.messages.get(field.type_name) or types.enums.get(field.type_name)
    return comments.get(entry[1], "") if entry else ""


def message_section(name: str, used_by: List[str], types: ProtoTypes,
                    comments: Dict[tuple, str]) -> List[str]:
    """The markdown of one message: its comment, the fields of that type, one row per field."""
    message, path = types.messages[name]
    lines = [f"### `{short_name(name)}` {{#{anchor(name)}}}", ""]
    if comments.get(path):
        lines += [comments[path], ""]
    if used_by:
        lines += ["The type of " + ", ".join(used_by) + ".", ""]
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    for i, field in enumerate(message.field):
        label = "" if field.type_name in types.maps else _LABELS.get(field.label, "")
        if field.HasField("oneof_index"):
            label = f"one of `{message.oneof_decl[field.oneof_index].name}`:"
        kind = " ".join(filter(None, [label, field_type(field, types)]))
        what = cell(comments.get(path + (_FIELD, i)) or nested_comment(field, name, types,
                                                                       comments))
        lines.append(f"| `{field.name}` | {kind} | {field_default(field)} | {what} |")
    return lines + [""]


def enum_section(name: str, types: ProtoTypes, comments: Dict[tuple, str]) -> List[str]:
    """The markdown of one enum: its comment and one row per value (deprecated ones left
    out: validation rejects them)."""
    enum, path = types.enums[name]
    lines = [f"### `{short_name(name)}` {{#{anchor(name)}}}", ""]
    if comments.get(path):
        lines += [comments[path], ""]
    lines += ["| value | description |", "|---|---|"]
    lines += [f"| `{value.name}` | {cell(comments.get(path + (_VALUE, i), ''))} |"
              for i, value in enumerate(enum.value) if not value.options.deprecated]
    return lines + [""]


def reachable(root: str, types: ProtoTypes):
    """(messages, enums, used_by): the messages reachable from `root` depth first, the enums
    their fields use, and {message: links to the fields of its type}."""
    messages, enums, used_by = [], [], {}
    pending = [root]
    while pending:
        name = pending.pop(0)
        if name in messages:
            continue
        messages.append(name)
        nested = []
        for field in types.messages[name][0].field:
            if field.type_name in types.enums and field.type_name not in enums:
                enums.append(field.type_name)
            if field.type_name not in types.messages:
                continue
            link = f"[`{short_name(name)}.{field.name}`](#{anchor(name)})"
            used_by.setdefault(field.type_name, []).append(link)
            nested.append(field.type_name)
        pending[:0] = nested
    return messages, enums, used_by


def config_reference(root: str = ".fleetcast.RunConfig") -> str:
    """The markdown of every message and enum reachable from `root` (RunConfig), messages in
    the order a reader meets them, then the enums."""
    proto = proto_file()
    types, comments = ProtoTypes(proto), proto_comments(proto)
    messages, enums, used_by = reachable(root, types)
    lines = ["## Messages", ""]
    for name in messages:
        lines += message_section(name, used_by.get(name, []), types, comments)
    lines += ["## Enums", ""]
    for name in enums:
        lines += enum_section(name, types, comments)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """MkDocs hook: fills the generated references into their pages."""
    if CONFIG_MARKER in markdown:
        markdown = markdown.replace(CONFIG_MARKER, config_reference())
    if TABLE_MARKER in markdown:
        markdown = markdown.replace(TABLE_MARKER, table_reference())
    return markdown


# The Web Worker shim of mkdocs.yml's extra.polyfills, from the npm package in package.json.
WORKER_SHIM = REPO / "node_modules" / "iframe-worker" / "shim" / "index.js"


def on_post_build(config):
    """MkDocs hook: copies the Web Worker shim (search from file://) into the site."""
    if not WORKER_SHIM.is_file():
        raise PluginError(f"{WORKER_SHIM} is missing: `npm ci` in {REPO} installs it "
                          "(scripts/setup_venv.sh test does)")
    for script in config.extra["polyfills"]:
        target = pathlib.Path(config.site_dir) / script
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(WORKER_SHIM, target)
