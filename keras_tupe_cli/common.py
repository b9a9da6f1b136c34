"""What the commands share beyond `keras_tupe_base.command_line` (the quiet TensorFlow
start, one-line errors and clean stops every program here runs in): flags made from a settings
dataclass's fields (`add_settings`, checked by `settings_from` before Keras), `command_parser`
and `entry_point`.

This module never imports keras_tupe itself (`import keras_tupe` imports Keras and registers
the model family: seconds); what a command needs before Keras is in `keras_tupe_base`, the
standard-library base package (the run settings, the output lock, the staged writer).
"""

import argparse
import dataclasses
import functools
import re

from keras_tupe_base import settings
from keras_tupe_base.command_line import add_common_flags, run


def command_parser(prog, doc):
    """A command's parser: `--help` shows `doc` as written; with `add_common_flags`."""
    return add_common_flags(argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter))


# `run`'s `flags` for the commands that take --init: what an encoder without a tokenizer
# needs, named as flags (`bpe_codes=` is keras-tupe-convert's, for a fairseq checkpoint).
INIT_FLAGS = {"vocab": "--vocab", "bpe_codes": "--bpe-codes"}


def add_settings(parser, config_class, skip=(), defaults=None):
    """A flag for each field of `config_class` (a dataclass of `keras_tupe_base.settings`)
    but those of `skip` and those made with `flag=False`: `--seq-len` for `seq_len`, with the
    field's type, default, help and choices; a bool is a switch turning its default around
    (`--no-xla`, `--cased`); a field without a default is a required flag.

    Args:
        parser: an `argparse.ArgumentParser`.
        config_class: the dataclass.
        skip: names of fields this command sets otherwise.
        defaults: {name: value} replacing a field's default for this command (None: fitted
            after parsing, e.g. `--seq-len` to the preset).

    Returns:
        {name: flag} of the flags added (what `settings_from` and `run`'s messages use).
    """
    flags = setting_flags(config_class, skip)
    for field in dataclasses.fields(config_class):
        if field.name not in flags:
            continue
        meta, flag = field.metadata, flags[field.name]
        help = meta["help"] or ""
        if field.type is bool:
            parser.add_argument(flag, dest=field.name, help=help,
                                action="store_false" if field.default else "store_true")
            continue
        default = (defaults or {}).get(field.name, _default(field))
        if default not in (None, []):
            help += f" (default: {' '.join(map(str, default)) if isinstance(default, (list, tuple)) else default})"
        kind = meta["parse"] or (str if field.type is list else field.type)
        parser.add_argument(flag, dest=field.name, type=_flag_type(kind), default=default,
                            required=meta["required"], choices=meta["choices"],
                            nargs=meta["nargs"], help=help or None)
    return flags


def at_least(minimum):
    """argparse's `type` for a flag that is a whole number of at least `minimum` (a flag that
    is no setting's field: `keras-tupe-export --version`)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is not a whole number of at least {minimum}")
        return value
    parse.__name__ = f"int >= {minimum}"
    return parse


def setting_flags(config_class, skip=()):
    """{name: flag} of `config_class`'s fields that are flags (`add_settings`' flags)."""
    return {field.name: field.metadata["switch"] or "--" + field.name.replace("_", "-")
            for field in dataclasses.fields(config_class)
            if field.name not in skip and field.metadata.get("flag")}


def _default(field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _flag_type(kind):
    """argparse's `type` from a field's: its ValueError's own words become the usage error."""
    def parse(text):
        try:
            return kind(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                {int: f"{text!r} is not a whole number", float: f"{text!r} is not a number"}
                .get(kind) or str(error)) from None
    parse.__name__ = kind.__name__
    return parse


def settings_from(args, config_class, flags, **values):
    """The `config_class` of the parsed `args`' fields (of `flags`) and `values`, checked
    (`keras_tupe_base.settings.check`) before Keras. Raises ValueError, a line a problem (all
    of them at once) in the command's words (`--steps-per-execution`, not
    `steps_per_execution`), which `run` prints as `error: ...` lines, status 2."""
    given = {name: getattr(args, name) for name in flags}
    try:
        return settings.check(config_class(**given, **values))
    except ValueError as error:
        raise ValueError(speak_flags(str(error), flags)) from None


def speak_flags(message, flags):
    """`message` with the settings' names (`` `seq_len` ``, `seq_len=7`) said as the flags
    that give them (`--seq-len`, `--seq-len 7`)."""
    for name, flag in flags.items():
        message = message.replace(f"`{name}`", flag)
        message = re.sub(rf"(?<![\w`-]){name}=", f"{flag} ", message)
    return message


def entry_point(flags=None):
    """Makes a command's body its `main(argv=None)`, which `run` runs."""
    def decorate(body):
        return functools.wraps(body)(lambda argv=None: run(body, argv, flags))
    return decorate
