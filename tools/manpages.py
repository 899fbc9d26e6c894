"""Man pages in roff, generated from the click command tree and from the key table (config.KEYS).

pinctl(8) and one page per subcommand (pinctl-ls(8), pinctl-config-show(8), ...) come from
each command's help, options and epilog; pinctl.conf(5) comes from the key table. The .TH
line carries a fixed date and pinctl's version, never the clock, so that regenerating gives
the same bytes and a drift test can compare them.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from typing import Any, Iterable, Mapping, Optional

import click

from pinctl import __version__
from pinctl.examples import EXAMPLES
from pinctl.completion.tree import PROG, command_path, contexts, option_names, summary
from pinctl.config import crio as crio_config
from pinctl.config import loader as config

# The date of the pages for this version; bump it with __version__, never from the clock.
DATE = "2026-11-30"
COMMAND_SECTION = "8"
CONFIG_SECTION = "5"
CONFIG_PAGE = "pinctl.conf"
SOURCE = f"pinctl {__version__}"
_EXIT_CODES = re.compile(r"^\s*Exit codes:\s*(?P<items>.*?)\.?\s*$", re.DOTALL)
_EXIT_ITEM = re.compile(r"(\d+) (.+?)(?=, \d+ |$)")

# Where each option points by default: shown under FILES of the commands that take it.
OPTION_FILES: dict[str, list[tuple[str, str]]] = {
    "--config": [
        (config.DEFAULT_PATH, f"pinctl's configuration, see {CONFIG_PAGE}({CONFIG_SECTION})."),
        (f"/etc/pinctl/{config.DROPIN_DIR}/*.toml", "Drop-ins, applied in lexical order after the main file."),
    ],
    "--address": [(str(config.KEYS["containerd_address"].default), "containerd's socket.")],
    "--containerd-config": [("/etc/containerd/config.toml", "containerd's configuration: the CRI sandbox image.")],
    "--from-crio": [
        (config.CRIO_DEFAULT_PATH, "CRI-O's configuration, read for [crio.image] pinned_images."),
        (f"{config.CRIO_DEFAULT_PATH}.d/", "CRI-O's drop-ins, below it in lexical order."),
    ],
    "--crio-config": [
        (config.CRIO_DEFAULT_PATH, "CRI-O's configuration on a CRI-O node: pinned_images and pause_image."),
        (f"{config.CRIO_DEFAULT_PATH}.d/{crio_config.PINCTL_DROPIN_NAME}",
         "pinctl's own drop-in there, which pin, unpin and sync write (CRI-O is then sent SIGHUP)."),
    ],
    "--docker-host": [("/var/run/docker.sock", "Docker's socket, read when it answers.")],
}
COMPLETION_FILES = [
    ("/usr/share/bash-completion/completions/pinctl", "bash completion (or below /usr/local)."),
    ("/usr/share/zsh/site-functions/_pinctl", "zsh completion (or below /usr/local)."),
    ("/usr/share/fish/vendor_completions.d/pinctl.fish", "fish completion (or below /usr/local)."),
]
# Read by every command, outside the key table.
GLOBAL_ENVIRONMENT = [
    ("NO_COLOR", "When set, tables are never coloured (they are coloured only on a terminal anyway)."),
    ("PINCTL_DEBUG", "When set, an internal error shows Python's traceback instead of one line."),
]
SEE_ALSO_OTHERS = ["containerd-config.toml(5)", "crio.conf(5)"]


# -- roff ----------------------------------------------------------------------------------


def escape(text: str) -> str:
    """Text for roff: backslashes and hyphens escaped, anything beyond ASCII as \\[uXXXX]."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in out)


def text_line(text: str) -> str:
    """Text as escaped input lines (see fill)."""
    return fill(escape(text))


def fill(roff: str, width: int = 78) -> str:
    """Escaped text broken at blanks into input lines of at most width (roff refills them).

    A line starting with . or ' would be read as a request: \\& in front keeps it text.
    """
    lines = textwrap.wrap(roff, width, break_long_words=False, break_on_hyphens=False) or [""]
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in lines)


def _literal_line(text: str) -> str:
    line = escape(text)
    return "\\&" + line if line.startswith((".", "'")) else line


def bold(text: str) -> str:
    return f"\\fB{escape(text)}\\fR"


def italic(text: str) -> str:
    return f"\\fI{escape(text)}\\fR"


def _quoted_arg(text: str) -> str:
    # A macro argument: double quotes delimit it, and "" stands for one quote inside.
    return '"' + escape(text).replace('"', '""') + '"'


def _reference(page: str) -> str:
    """page(section) as .BR, the form man-db and mandoc turn into links."""
    name, _, section = page.partition("(")
    return f".BR {escape(name)} ({section}"


def _paragraphs(text: str) -> list[str]:
    """click help text as roff paragraphs; a \\b paragraph keeps its lines, as in click."""
    body = inspect.cleandoc(text).partition("\f")[0]
    out: list[str] = []
    for block in re.split(r"\n\s*\n", body.strip()):
        if not block.strip():
            continue
        if out:
            out.append(".PP")
        if block.startswith("\b"):
            out += [".nf", *(_literal_line(line) for line in block[1:].strip("\n").splitlines()), ".fi"]
        else:
            out.append(text_line(" ".join(block.split())))
    return out


def _header(title: str, section: str, manual: str) -> list[str]:
    return [
        f'.\\" {escape(title)}({section}): generated by tools/generate.py from {escape(SOURCE)}; do not edit.',
        f".TH {escape(title.upper())} {section} {DATE} {_quoted_arg(SOURCE)} {_quoted_arg(manual)}",
        # Paths, options and variables are long words: hyphenating or justifying them garbles them.
        ".nh",
        ".ad l",
    ]


def _entries(items: Iterable[tuple[str, str]], tag: Any = bold) -> list[str]:
    out: list[str] = []
    for name, description in items:
        out += [".TP", tag(name), text_line(description)]
    return out


# -- command pages -------------------------------------------------------------------------


def page_name(ctx: click.Context) -> str:
    """pinctl-config-show for pinctl config show."""
    return "-".join(command_path(ctx))


def render_pages(root: click.Command) -> dict[str, str]:
    """Every page, by file name: pinctl.8, pinctl-ls.8, ..., pinctl.conf.5."""
    all_contexts = list(contexts(root))
    pages = {f"{page_name(ctx)}.{COMMAND_SECTION}": render_command(ctx, all_contexts) for ctx in all_contexts}
    pages[f"{CONFIG_PAGE}.{CONFIG_SECTION}"] = render_config(root)
    return pages


def render_command(ctx: click.Context, all_contexts: list[click.Context]) -> str:
    """The page of one command."""
    command = ctx.command
    name = page_name(ctx)
    below = [c for c in all_contexts if c is not ctx and _is_below(c, ctx)]
    lines = _header(name, COMMAND_SECTION, "System Administration")
    lines += [".SH NAME", fill(f"{escape(name)} \\- {escape(summary(command.help or ''))}")]
    lines += [".SH SYNOPSIS", _synopsis(ctx)]
    lines += [".SH DESCRIPTION", *_paragraphs(command.help or "")]
    children = [c for c in below if c.parent is ctx]
    if children:
        lines += [".SH COMMANDS", *_command_entries(children)]
    lines += [".SH OPTIONS", *_option_entries(ctx)]
    lines += [".SH EXIT STATUS", *_exit_status(ctx)]
    examples = EXAMPLES.get(" ".join(command_path(ctx)[1:]), [])
    if examples:
        lines.append(".SH EXAMPLES")
        for number, (what, example) in enumerate(examples):
            # A paragraph break between examples, none right after the heading (mandoc warns).
            lines += [*([".PP"] if number else []), text_line(what + ":"), ".nf", ".RS 4", escape(example), ".RE", ".fi"]
    lines += [".SH ENVIRONMENT", *_environment(ctx, below)]
    lines += [".SH FILES", *_files(ctx, below)]
    lines += [".SH SEE ALSO", *_see_also(ctx, all_contexts)]
    return "\n".join(lines) + "\n"


def _is_below(ctx: click.Context, ancestor: click.Context) -> bool:
    current = ctx.parent
    while current is not None:
        if current is ancestor:
            return True
        current = current.parent
    return False


def _italic(match: re.Match[str]) -> str:
    return f"\\fI{match.group(0)}\\fR"


def _synopsis(ctx: click.Context) -> str:
    pieces = ctx.command.collect_usage_pieces(ctx)
    # Placeholders (OPTIONS, REF, COMMAND) in italics, the brackets and dots as they are.
    words = [re.sub(r"[A-Z][A-Z_]+", _italic, escape(p)) for p in pieces]
    return fill(f"{bold(' '.join(command_path(ctx)))} {' '.join(words)}")


def _command_entries(children: list[click.Context]) -> list[str]:
    out: list[str] = []
    for child in children:
        out += [".TP", bold(" ".join(command_path(child))), text_line(summary(child.command.help or "", 200) + ".")]
        out += [f"See {bold(page_name(child))}({COMMAND_SECTION})."]
    return out


def _option_entries(ctx: click.Context) -> list[str]:
    out: list[str] = []
    for param in ctx.command.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden:
            continue
        record = param.get_help_record(ctx)
        help_text = record[1] if record else ""
        out += [".TP", _option_tag(param), text_line(" ".join(help_text.split()))]
    return out


def _option_tag(param: click.Option) -> str:
    names = ", ".join(bold(name) for name in option_names(param))
    if param.is_flag or param.count:
        return names
    if isinstance(param.type, click.Choice):
        value = "|".join(italic(str(choice)) for choice in param.type.choices)
    else:
        value = italic((param.metavar or param.name or "VALUE").strip("[]").upper())
    if getattr(param, "_flag_needs_value", False):
        return f"{names}[={value}]"
    return f"{names} {value}"


def _exit_status(ctx: click.Context) -> list[str]:
    # The epilog states them ("Exit codes: 0 ok, 1 error, ..."); a group without one has its parent's.
    current: Optional[click.Context] = ctx
    while current is not None and not (current.command.epilog or "").strip():
        current = current.parent
    epilog = current.command.epilog if current is not None else ""
    found = _EXIT_CODES.match(epilog or "")
    if not found:
        return [text_line(epilog or "0 on success, non-zero on failure.")]
    items = _EXIT_ITEM.findall(" ".join(found.group("items").split()))
    return _entries(((code, meaning[:1].upper() + meaning[1:] + ".") for code, meaning in items))


def _options_of(ctxs: Iterable[click.Context]) -> list[str]:
    """Every option name the commands take, first seen first."""
    names: dict[str, None] = {}
    for ctx in ctxs:
        for param in ctx.command.get_params(ctx):
            if isinstance(param, click.Option):
                names.update(dict.fromkeys(param.opts))
    return list(names)


def _environment(ctx: click.Context, below: list[click.Context]) -> list[str]:
    options = _options_of([ctx, *below])
    items: list[tuple[str, str]] = []
    if "--config" in options:
        items.append((config.CONFIG_ENV, f"The config file when --config is not given (default {config.DEFAULT_PATH})."))
    for spec in config.KEYS.values():
        if spec.env and spec.flag in options:
            effect = "adds to it too" if spec.name == config.PATTERNS_KEY else "overrides it"
            items.append((spec.env, f"{spec.help} Config key {spec.name}; {spec.flag} {effect}."))
    if ctx.parent is None:
        items += GLOBAL_ENVIRONMENT
    if not items:
        return [text_line("None: what this command does depends on its arguments only.")]
    return _entries(items)


def _files(ctx: click.Context, below: list[click.Context]) -> list[str]:
    options = _options_of([ctx, *below])
    # A path two options name (CRI-O's crio.conf) is listed once, as the last of them says it.
    described = {path: text for option in OPTION_FILES if option in options for path, text in OPTION_FILES[option]}
    items = list(described.items())
    if ctx.command.name == "completion" or (ctx.parent is None and any(c.command.name == "completion" for c in below)):
        items += COMPLETION_FILES
    if not items:
        return [text_line("None.")]
    return _entries(items)


def _see_also(ctx: click.Context, all_contexts: list[click.Context]) -> list[str]:
    pages = [f"{page_name(c)}({COMMAND_SECTION})" for c in all_contexts if c is not ctx and (c.parent is ctx or c is ctx.parent)]
    if ctx.parent is not None and ctx.parent.parent is not None:
        pages.insert(0, f"{PROG}({COMMAND_SECTION})")
    pages.append(f"{CONFIG_PAGE}({CONFIG_SECTION})")
    if ctx.parent is None:
        pages += SEE_ALSO_OTHERS
    return _reference_list(pages)


def _reference_list(pages: list[str]) -> list[str]:
    lines = [_reference(page) for page in pages]
    return [line + ("," if i < len(lines) - 1 else "") for i, line in enumerate(lines)]


# -- pinctl.conf(5) ------------------------------------------------------------------------

_CONF_DESCRIPTION = f"""
pinctl reads its settings from a TOML file, {config.DEFAULT_PATH} unless --config or
${config.CONFIG_ENV} names another, and from the drop-ins beside it. The file is flat: top-level
keys only, no tables. A missing default file is fine; a file that was named and is missing is
an error.

An unknown key, or a value of the wrong type, stops every command with the file, the line and
the key, and exit status 2: nothing is changed on a node whose configuration cannot be read.
pinctl config show prints every setting with where it came from, and pinctl config lint checks
the patterns.
"""

_CONF_PRECEDENCE = f"""
From lowest to highest: built-in defaults, the main file, the drop-ins, the environment,
command-line flags. For every key but {config.PATTERNS_KEY}, the highest source that sets the key
wins with its whole value: a later drop-in replaces a list that an earlier one set.

{config.PATTERNS_KEY} is the exception: it accumulates. Every pattern of the main file, of each
drop-in, of ${config.KEYS[config.PATTERNS_KEY].env} and of {config.KEYS[config.PATTERNS_KEY].flag}
is kept, in that order, each with the place it came from. A pattern decides whether an image
survives garbage collection, so one team's drop-in must never silently erase the patterns of
another.
"""

_CONF_DROPINS = f"""
The files named *.toml in the directory {config.DROPIN_DIR} beside the main file
(/etc/pinctl/{config.DROPIN_DIR} by default) are drop-ins. They are applied after the main file,
in lexical order of file name, so 10-base.toml comes before 50-team.toml. File names starting
with a dot (editors' backups and locks) are skipped. Drop-ins are read even when the default
main file does not exist. An empty string unsets an optional string key (such as docker_host)
that an earlier file set.
"""

_CONF_PERMISSIONS = """
Running as root, pinctl refuses a config file, a drop-in or the drop-in directory that a user
other than root could write: one not owned by root, or writable by its group or by others.
As sshd's StrictModes, it also refuses one reached through such a directory, up to /: whoever
can rename config.d away can unpin what its drop-ins hold. A sticky directory owned by root,
such as /tmp, is accepted for entries root owns, which nobody else can rename there. These
files decide which images survive garbage collection. The error names the file or directory
and the fix, chown root:root PATH and chmod go-w PATH. A drop-in that cannot be read (a
dangling symlink, a FIFO) is an error too, never skipped.
"""

_CONF_PATTERNS = """
Each entry of pinned_images is a pattern in the form CRI-O uses for its own pinned_images: an
exact name (registry.example/platform/pause:3.9), a glob ending in one * (registry.example/base/*)
or a keyword between two * (*keepme*). Patterns are case-insensitive and are matched against
every name of an image: each of its references, tag or digest, and its image ID. containerd
does not read patterns: pinctl sync turns them into the io.cri-containerd.pinned=pinned label.

pattern_dialect chooses how patterns are read. In the pinctl dialect, the default, a glob
matches names that start with it; an exact name is normalised as Docker normalises references
(a name without a registry gets Docker's default registry and library/, a name without a tag
gets :latest); and *, **, an empty or blank pattern, a * in the middle (a/*/b) and a leading *
alone (*foo) are rejected, naming the pattern and where it came from.

In the crio dialect patterns are read exactly as CRI-O reads them: a glob matches names that
contain it anywhere, so registry.example/* also matches myregistry.example/x; an exact name is
compared literally, without normalising; ** matches every image; and the other forms pinctl
rejects are literal exact names. As in CRI-O v1.34, a pattern is matched against an image's
names only, never its image ID: its tags, and its digest names in a repository where it has no
tag. A lone * is rejected in both dialects, since CRI-O panics on it. pinctl --from-crio reads CRI-O's own
pinned_images in this dialect, and on a CRI-O node pinctl reads CRI-O's files in it.
"""


def render_config(root: Optional[click.Command] = None, keys: Mapping[str, config.KeySpec] = config.KEYS) -> str:
    """pinctl.conf(5), from the key table; root, when given, adds each flag's other names."""
    flags = _flag_names(root)
    lines = _header(CONFIG_PAGE, CONFIG_SECTION, "File Formats")
    lines += [".SH NAME", f"{escape(CONFIG_PAGE)} \\- pinctl configuration file and drop\\-ins"]
    lines += [".SH SYNOPSIS", bold(config.DEFAULT_PATH), ".br", bold(f"/etc/pinctl/{config.DROPIN_DIR}/*.toml")]
    lines += [".SH DESCRIPTION", *_paragraphs(_CONF_DESCRIPTION)]
    lines += [".SH KEYS", *_key_entries(flags, keys)]
    lines += [".SH PRECEDENCE", *_paragraphs(_CONF_PRECEDENCE)]
    lines += [".SH DROP\\-INS", *_paragraphs(_CONF_DROPINS)]
    lines += [".SH PERMISSIONS", *_paragraphs(_CONF_PERMISSIONS)]
    lines += [".SH PATTERNS", *_paragraphs(_CONF_PATTERNS)]
    lines += [".SH EXAMPLES", *_examples(keys)]
    lines += [".SH ENVIRONMENT", *_config_environment(keys)]
    lines += [".SH FILES", *_entries([(config.DEFAULT_PATH, "The main file."), OPTION_FILES["--config"][1]])]
    see_also = [f"{PROG}({COMMAND_SECTION})", f"{PROG}-config-show({COMMAND_SECTION})",
                f"{PROG}-config-lint({COMMAND_SECTION})", f"{PROG}-sync({COMMAND_SECTION})", "crio.conf(5)"]
    lines += [".SH SEE ALSO", *_reference_list(see_also)]
    return "\n".join(lines) + "\n"


def _flag_names(root: Optional[click.Command]) -> dict[str, click.Option]:
    """Each long option of the root command, to show -n beside --namespace."""
    if root is None:
        return {}
    ctx = click.Context(root, info_name=PROG)
    return {name: p for p in root.get_params(ctx) if isinstance(p, click.Option) for name in p.opts}


def _key_entries(flags: dict[str, click.Option], keys: Mapping[str, config.KeySpec]) -> list[str]:
    out: list[str] = []
    for spec in keys.values():
        out += [".TP", bold(spec.name), text_line(spec.help)]
        for label, value in _key_facts(spec, flags):
            out += [".br", fill(f"{label}: {value}")]
    return out


def _key_facts(spec: config.KeySpec, flags: dict[str, click.Option]) -> list[tuple[str, str]]:
    """(label, roff) lines under one key: type, default, environment, flag, example."""
    facts = [("Type", escape(spec.type_label)), ("Default", _default(spec))]
    if spec.env:
        how = ", comma-separated" if spec.type == "list" and spec.env_split else ""
        how = ", one item" if spec.type == "list" and not spec.env_split else how
        facts.append(("Environment", bold(spec.env) + escape(how)))
    if spec.flag:
        facts.append(("Flag", _flag(spec.flag, flags)))
    facts.append(("Example", bold(f"{spec.name} = {_toml(spec.example)}")))
    return facts


def _default(spec: config.KeySpec) -> str:
    if spec.default is None:
        return escape("unset")
    return bold(_toml(spec.default))


def _flag(flag: str, flags: dict[str, click.Option]) -> str:
    option = flags.get(flag)
    names = [*option.opts] if option is not None else [flag]
    repeat = escape(" (repeatable)") if option is not None and option.multiple else ""
    return ", ".join(bold(n) for n in names) + repeat


def _toml(value: Any) -> str:
    """value as it is written in the file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return str(value)


def _examples(keys: Mapping[str, config.KeySpec]) -> list[str]:
    main = [f"# {config.DEFAULT_PATH}", 'pinned_images = ["registry.example/team/*"]', "timeout = 5"]
    dropin = [
        f"# /etc/pinctl/{config.DROPIN_DIR}/50-team.toml: adds to the patterns above",
        "pinned_images = [",
        '  "registry.example/platform/pause:3.9",   # exact',
        '  "registry.example/base/*",               # glob',
        '  "*keepme*",                              # keyword',
        "]",
    ]
    every_key = ["# every key, with an example value"] + [f"{s.name} = {_toml(s.example)}" for s in keys.values()]
    out: list[str] = []
    for block in (main, dropin, every_key):
        # Lines of an example are kept as written: escaped, never refilled.
        out += [".PP"] if out else []
        out += [".EX", *(_literal_line(line) for line in block), ".EE"]
    return out


def _config_environment(keys: Mapping[str, config.KeySpec]) -> list[str]:
    items = [(config.CONFIG_ENV, f"The main file when --config is not given (default {config.DEFAULT_PATH}).")]
    items += [(spec.env, _env_effect(spec)) for spec in keys.values() if spec.env]
    return _entries(items)


def _env_effect(spec: config.KeySpec) -> str:
    items = " (comma-separated items)" if spec.type == "list" and spec.env_split else ""
    if spec.name == config.PATTERNS_KEY:
        return f"Adds to {spec.name}{items}: after the files' patterns, before the flags'."
    return f"Sets {spec.name}{items}; a flag overrides it." if spec.flag else f"Sets {spec.name}{items}."
