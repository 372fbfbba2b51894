#!/usr/bin/env python3
"""Size check (run by tools/test.sh): no source file over 500 lines and no function over 120 (issue 29: a
reader sees a file in a few screens and a function in one). C++ functions are found by matching braces outside
comments, strings and character literals: a body is a brace block whose opening follows a parameter list, not
inside another body (a lambda counts with its function); a namespace, class or enum body is transparent. Python
functions come from the ast (methods and nested functions each on their own).

What may stay larger is listed in tools/ci/size_exceptions.txt, one `PATH` or `PATH:FUNCTION` per line with the
reason after ` -- `; an exception that no longer applies is an error too, so the list only shrinks.
Usage: sizes.py [--list] (--list prints every file and function over the limits, exceptions included)."""
import ast
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FILE_LIMIT, FUNCTION_LIMIT = 500, 120
EXCEPTIONS = os.path.join(ROOT, "tools", "ci", "size_exceptions.txt")
CONTAINER = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace|struct|class|union|enum)\b|extern\s+\"C\"")


def strip(text):
    """The C++ text with comments, strings, character literals and preprocessor lines blanked (newlines kept)."""
    text = re.sub(r"(?m)^[ \t]*#.*$", lambda m: " " * len(m.group(0)), text)
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def cpp_functions(text):
    """(name, first line, lines) of each function body of one C++ file."""
    s = strip(text)
    stack, found, start = [], [], 0  # stack: kind of each open brace ("container", "body", "other")
    for i, c in enumerate(s):
        if c not in "{};":
            continue
        if c == ";":
            start = i + 1
            continue
        if c == "}":
            kind, open_at, name = stack.pop() if stack else ("other", i, "")
            if kind == "body":
                first = s.count("\n", 0, open_at) + 1
                found.append((name, first, s.count("\n", 0, i) + 2 - first))
            start = i + 1
            continue
        head = s[start:i]
        inside_body = any(k == "body" for k, _, _ in stack)
        if inside_body:
            stack.append(("other", i, ""))
        elif CONTAINER.search(head) and ("(" not in head or
                                         re.search(r"\b(struct|class|namespace|enum|union)\b[^()]*$", head)):
            stack.append(("container", i, ""))
        elif ")" in head and "=" not in head.split("(")[0]:
            sig = " ".join(head.split())
            m = re.search(r"([~\w:<>]+|operator\S+)\s*\(", sig)
            # the name sits before the first "(" of the parameter list
            name = m.group(1) if m else sig[:40]
            sig_line_at = start + len(head) - len(head.lstrip())
            stack.append(("body", sig_line_at, name))
        else:
            stack.append(("other", i, ""))
        start = i + 1
    return found


def python_functions(text, path):
    try:
        tree = ast.parse(text, path)
    except SyntaxError:
        return []
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def measure():
    files = subprocess.check_output(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.cpp",
                                     "*.hpp", "*.cu", "*.py"], cwd=ROOT, text=True).split()
    over = {}
    for path in files:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            text = f.read()
        lines = text.count("\n")
        if lines > FILE_LIMIT:
            over[path] = f"{path}: {lines} lines (> {FILE_LIMIT})"
        funcs = python_functions(text, path) if path.endswith(".py") else cpp_functions(text)
        for name, first, n in funcs:
            if n > FUNCTION_LIMIT:
                over[f"{path}:{name}"] = f"{path}:{first}: {name} is {n} lines (> {FUNCTION_LIMIT})"
    return over


def exceptions():
    out = {}
    if os.path.exists(EXCEPTIONS):
        with open(EXCEPTIONS, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if line and not line.startswith("#"):
                    key, _, why = line.partition(" -- ")
                    out[key.strip()] = (n, why.strip())
    return out


def main(argv):
    over, allowed = measure(), exceptions()
    if "--list" in argv:
        for key in sorted(over):
            print(over[key] + ("  [exception]" if key in allowed else ""))
        return 0
    errors = [over[k] for k in sorted(over) if k not in allowed]
    errors += [f"tools/ci/size_exceptions.txt:{n}: {k} is within the limits now: remove the line"
               for k, (n, _) in sorted(allowed.items()) if k not in over]
    errors += [f"tools/ci/size_exceptions.txt:{n}: {k} gives no reason (PATH[:FUNCTION] -- why)"
               for k, (n, why) in sorted(allowed.items()) if not why]
    for e in errors:
        print(e)
    if errors:
        print(f"sizes: {len(errors)} file(s) or function(s) over {FILE_LIMIT} / {FUNCTION_LIMIT} lines")
        return 1
    print(f"sizes: files <= {FILE_LIMIT} lines and functions <= {FUNCTION_LIMIT} but the {len(allowed)} listed "
          f"in tools/ci/size_exceptions.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
