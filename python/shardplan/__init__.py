"""shardplan for Python: the CLI's `memory`, `simulate`, `plan` and `validate` as functions returning its JSON.

Each function takes the CLI's flags as keyword arguments (``mbs=2`` for ``--mbs 2``, ``global_batch=64`` for
``--global-batch 64``, ``from_="ds.json"`` for ``--from``), or a dict of them, and returns the document that
``shardplan <command> ... --json -`` prints, as a dict. The command line is parsed by the CLI's own parser, so
the arguments accepted and the error messages are the CLI's; every failure raises :class:`Error`.

    >>> import shardplan
    >>> r = shardplan.memory(model="llama3-8b", cluster="dgx-h100", gpus=8, mbs=2, ac="full")
    >>> r["fits"], r["memory"]["peak_reserved_bytes"]
"""

import difflib as _difflib
import keyword as _keyword
import json as _json
import os as _os

from . import _shardplan

__all__ = ["Error", "memory", "simulate", "plan", "validate", "compare", "command_line"]
__version__ = "0.1.0"


class Error(Exception):
    """A command that failed: bad input or bad arguments (exit_code 2, as the CLI), or an internal error (3).

    ``str(error)`` is the message the CLI prints after ``shardplan: error:`` (or ``shardplan:`` for a flag the
    parser rejects)."""

    def __init__(self, message, exit_code=2):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


_option_tables = {}


def _options(command):
    """{key: (flag, positional, takes_value, repeatable)} of a subcommand; key is the flag without dashes."""
    if command not in _option_tables:
        table = {}
        for name, positional, takes_value, repeatable in _shardplan.options(command):
            table[name.lstrip("-")] = (name, positional, takes_value, repeatable)
        _option_tables[command] = table
    return _option_tables[command]


def _text(key, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)) or isinstance(value, _os.PathLike):
        return _os.fspath(value) if isinstance(value, _os.PathLike) else str(value)
    raise Error("%s: expected a string, number, boolean or path, got %s" % (key, type(value).__name__))


def _arguments(command, args, kwargs):
    """(flags, positional values) of a call; see command_line."""
    merged = {}
    if args is not None:
        if not isinstance(args, dict):
            raise Error("%s: expected a dict of arguments, got %s" % (command, type(args).__name__))
        merged.update(args)
    merged.update(kwargs)
    table = _options(command)
    flags, positionals = [], []
    for raw_key, value in merged.items():
        key = str(raw_key).lstrip("-").rstrip("_").replace("_", "-")
        if key == "json":
            raise Error("--json: the module returns the JSON document; leave --json out")
        if value is None:
            continue
        if key not in table:
            # The CLI would refuse the flag; say so in Python's spelling, with the closest keyword.
            python_names = sorted(k.replace("-", "_") + ("_" if _keyword.iskeyword(k) else "") for k in table)
            spelled = str(raw_key)
            close = _difflib.get_close_matches(spelled.replace("-", "_").strip("_"), python_names, n=1, cutoff=0.6)
            raise Error("%s: unexpected keyword argument %r; %s"
                        % (command, spelled, "did you mean %r?" % close[0] if close
                           else "the keywords are " + ", ".join(python_names)))
        name, positional, takes_value, _ = table[key]
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if positional:
                positionals.append(_text(key, v))
            elif not takes_value:
                if not isinstance(v, bool):
                    raise Error("%s: a switch takes True or False, got %r" % (name, v))
                if v:
                    flags.append(name)
            else:
                flags += [name, _text(name, v)]
    return flags, positionals


def command_line(command, args=None, **kwargs):
    """The argument list (after ``shardplan``) that a call runs, without the ``--json -`` the call adds.

    ``args`` is a dict of the same keyword arguments; keywords given as well override its entries. A key is the
    flag without its leading dashes, with ``_`` for ``-``; a trailing ``_`` is dropped (``from_``). ``None``
    leaves a flag out; ``True``/``False`` give a switch or leave it out (``compile=True``), and ``"true"`` /
    ``"false"`` to a flag that takes a value; a list repeats a flag (``fix=["zero=3", "tp=1,2"]``) or gives
    several positional values (``records=[...]``)."""
    flags, positionals = _arguments(command, args, kwargs)
    return [command] + flags + (["--"] + positionals if positionals else [])


def _run_json(command, args, kwargs):
    flags, positionals = _arguments(command, args, kwargs)
    argv = [command] + flags + ["--json", "-"] + (["--"] + positionals if positionals else [])
    ok, exit_code, text = _shardplan.run(argv)
    if not ok:
        raise Error(text, exit_code)
    try:
        return _json.loads(text)
    except ValueError as e:  # another output also went to stdout: --html -, --trace - or --emit KIND:-
        raise Error("%s: standard output is not one JSON document (%s); write the other outputs to files"
                    % (command, e), 2) from None


def memory(args=None, /, **kwargs):
    """Per-GPU memory of a plan: ``shardplan memory ... --json -`` as a dict (``fits`` says whether it fits)."""
    return _run_json("memory", args, kwargs)


def simulate(args=None, /, **kwargs):
    """One simulated training step: ``shardplan simulate ... --json -`` as a dict."""
    return _run_json("simulate", args, kwargs)


def plan(args=None, /, **kwargs):
    """Search plans and recommend one: ``shardplan plan ... --json -`` as a dict (``recommended`` is None when
    no plan fits; ``closest`` then names the nearest one)."""
    return _run_json("plan", args, kwargs)


def validate(*records, **kwargs):
    """Predicted vs measured for run-record files: ``shardplan validate RECORDS... --json -`` as a dict.

    ``records`` are file paths; a dict as the first argument holds keyword arguments, as for the others."""
    args = None
    if records and isinstance(records[0], dict):
        args, records = records[0], records[1:]
    if records:
        kwargs["records"] = list(records) + list(kwargs.get("records") or [])
    return _run_json("validate", args, kwargs)


def compare(*plans, **kwargs):
    """Several plans side by side: ``shardplan compare ... -- PLAN...`` as a dict (``shardplan.compare/1``).

    ``plans`` are plan knobs (``"tp=2 ac=full compile"``), CLI flags (``"--tp 2 --ac full"``), report JSON files
    or framework configs; a dict as the first argument holds keyword arguments, as for the others."""
    args = None
    if plans and isinstance(plans[0], dict):
        args, plans = plans[0], plans[1:]
    if plans:
        kwargs["plans"] = list(plans) + list(kwargs.get("plans") or [])
    return _run_json("compare", args, kwargs)
