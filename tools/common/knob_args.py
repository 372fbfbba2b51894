"""argparse flags from shardplan's knob table (issue 29): the reference lane (tools/reference/lane/args.py) and the
real-run harness (tools/realrun/realrun.py) take their plan flags from tools/common/knobs.json, the committed output
of `shardplan list knobs --json` (simulator/plan/knobs*.cpp, the one knob table; tools/common/knobs_snapshot.py
regenerates it, and tests/planner/test_knob_table.cpp fails when it is stale), instead of restating names, values
and help by hand.

    add_knob_args(parser, ["runtime", "zero", "seq"])   # --runtime {fsdp2,...}, --zero 0..3, --seq 1..4194304

Each flag is spelt as shardplan spells it, with the table's help, values (argparse `choices`) and range, checked with
shardplan's own messages (`unknown value "x"; expected one of: a, b`, `must be in [lo, hi], got N`). A knob left out
is None, "shardplan's default", unless the tool asks for the table's default (`table_defaults`: only knobs whose
default is a value, `default_is_value`) or gives its own (`defaults`). A tool that runs part of a knob's values
narrows them (`choices`: a subset of the table's). Switches (--compile, --foreach-optimizer) are store_true flags
whose destination is the flag's name, as argparse would name a hand-written one. Standard library only."""
import argparse
import json
from pathlib import Path

KNOBS_JSON = Path(__file__).resolve().parent / "knobs.json"
SCHEMA = "shardplan.knobs/1"

_table = None


def knob_table(path=KNOBS_JSON):
    """{key: knob} of the snapshot, in table order (the JSON's "knobs" entries: key, flag, kind, help, default,
    default_is_value, values, range, switch_sets, capabilities)."""
    global _table
    if path != KNOBS_JSON:
        return _load(path)
    if _table is None:
        _table = _load(path)
    return _table


def _load(path):
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema: expected \"{SCHEMA}\", got {doc.get('schema')!r}")
    return {k["key"]: k for k in doc["knobs"]}


def _number_text(v):
    """The number as shardplan prints it (format_double: "1", "0.5")."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _checker(knob, values):
    """argparse `type` of one knob: parses the text as shardplan's setter does (knob_builders.hpp parse_int,
    parse_double, parse_bool, parse_enum_text) and raises ArgumentTypeError with the same reason."""
    kind = knob["kind"]

    def check(text):
        if kind == "int":
            lo, hi = knob["range"]
            try:
                v = int(text, 10)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected an integer, got \"{text}\"") from None
            if not lo <= v <= hi:
                raise argparse.ArgumentTypeError(f"must be in [{lo}, {hi}], got {text}")
            if values is not None and v not in values:
                raise argparse.ArgumentTypeError(
                    f"{text} is not run by this tool; expected one of: {', '.join(map(str, values))}")
            return v
        if kind == "double":
            lo, hi = knob["range"]
            try:
                v = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected a number, got \"{text}\"") from None
            if not lo <= v <= hi:
                raise argparse.ArgumentTypeError(
                    f"must be in [{_number_text(lo)}, {_number_text(hi)}], got {text}")
            return v
        if kind == "bool" and text not in knob["values"]:
            raise argparse.ArgumentTypeError(f"expected true or false, got \"{text}\"")
        if kind == "enum" and text not in knob["values"]:
            raise argparse.ArgumentTypeError(
                f"unknown value \"{text}\"; expected one of: {', '.join(knob['values'])}")
        if kind in ("enum", "bool") and text not in values:
            raise argparse.ArgumentTypeError(
                f"{text} is not run by this tool; expected one of: {', '.join(values)}")
        return text

    check.__name__ = knob["key"]
    return check


def _narrowed(knob, only):
    """The tool's subset of the knob's values (`choices`), checked against the table."""
    if knob["kind"] == "int":
        lo, hi = knob["range"]
        bad = [v for v in only if not (isinstance(v, int) and lo <= v <= hi)]
    elif knob["kind"] in ("enum", "bool"):
        bad = [v for v in only if v not in knob["values"]]
    else:
        raise ValueError(f"{knob['flag']}: a {knob['kind']} knob has no values to narrow")
    if bad:
        raise ValueError(f"{knob['flag']}: {bad} are not values of the knob table's {knob['flag']}")
    return list(only)


def _table_default(knob):
    if not knob["default_is_value"] or knob["kind"] == "switch":
        raise ValueError(f"{knob['flag']}: the knob table's default \"{knob['default']}\" is not a value")
    text = knob["default"]
    return {"int": int, "double": float}.get(knob["kind"], str)(text)


def add_knob_args(parser, names, table_defaults=(), defaults=None, choices=None, help_suffix=None):
    """Adds the flags of the knobs `names` (run-record keys, "shard_group") to `parser`, in the order given.
    `table_defaults`: keys whose default is the table's value (--zero 3); `defaults`: {key: value} the tool's own
    (the lane's 0 = "not given" for --seq); `choices`: {key: values} the tool narrows a knob to; `help_suffix`:
    {key: text} appended to the table's help (what the tool does with it). Every other knob defaults to None.
    Returns {key: argparse.Action}."""
    table = knob_table()
    defaults, choices, help_suffix = dict(defaults or {}), dict(choices or {}), dict(help_suffix or {})
    for key in [*table_defaults, *defaults, *choices, *help_suffix]:
        if key not in names:
            raise ValueError(f"add_knob_args: {key!r} is not among the knobs added ({', '.join(names)})")
    actions = {}
    for key in names:
        if key not in table:
            raise ValueError(f"add_knob_args: {key!r} is not a knob of {KNOBS_JSON.name}; valid keys: "
                             f"{', '.join(table)}")
        k = table[key]
        help_text = k["help"] + (f" (shardplan's default: {k['default']})" if k["default"] else "")
        if key in help_suffix:
            help_text += "; " + help_suffix[key]
        if k["kind"] == "switch":
            if key in defaults or key in table_defaults or key in choices:
                raise ValueError(f"{k['flag']}: a switch has no default or values to set")
            actions[key] = parser.add_argument(k["flag"], action="store_true", help=help_text)
            continue
        values = _narrowed(k, choices[key]) if key in choices else k.get("values")
        if key in table_defaults:
            default = _table_default(k)
        else:
            default = defaults.get(key)
        actions[key] = parser.add_argument(k["flag"], type=_checker(k, values), choices=values, default=default,
                                           help=help_text)
    return actions


def tool_error(parser, exc_type):
    """Makes `parser` raise exc_type("--flag: reason") for a bad plan flag (argparse's "argument --flag: reason"
    without its prefix), the one-line form shardplan's errors have."""
    def error(msg):
        raise exc_type(msg.removeprefix("argument "))

    parser.error = error
