"""The layout of flower.py (issue 38): sections in dependency order, so a reader (and a change) can
go from the top down. Parsed with ``ast``; nothing is run.

- Every top-level definition belongs to the section whose ``# --- `` banner is above it; a body may
  use names of its own section and of the sections above, never a later section's (the exceptions
  are listed below, each with its reason).
- The module docstring lists the sections, in order, exactly as the banners name them.
- The CLI and the runtime talk to ``StateBackend`` only: they never branch on which backend it is.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import unittest

from tests.helpers import FLOWER as SOURCE

# (definition, the later name it uses): why it may
UPWARD_ALLOWED = {
    ("DriverLock", "_peek_json"): "the JSON and time helpers still sit at the end of the Redaction section; "
                                  "moving that block (140 lines) waits until parallel work on it is merged",
    ("DriverLock", "iso_now"): "as above",
}


def _banners(lines: list[str]) -> list[tuple[int, str]]:
    """``(line number, section name)`` of every ``# --- Name: what it owns ---`` banner."""
    out = []
    for number, line in enumerate(lines, 1):
        match = re.match(r"# --- (.+?)(?::.*)? ---\s*$", line)
        if match:
            out.append((number, match.group(1).strip()))
    return out


def _bound_names(node: ast.AST) -> set[str]:
    """Names a function binds itself: parameters, assignments, loop and ``with`` targets, imports,
    nested definitions (a use of one of them is local, whatever the module defines)."""
    bound: set[str] = set()
    args = node.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            bound.add(arg.arg)
    for child in ast.walk(node):
        if child is node:
            continue
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            bound.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(child.name)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in child.names)
        elif isinstance(child, ast.ExceptHandler) and child.name:
            bound.add(child.name)
        elif isinstance(child, ast.arg):
            bound.add(child.arg)
    return bound


def _loads(node: ast.AST, local: frozenset = frozenset()) -> set[str]:
    """Module-level names ``node`` reads (names a function binds itself are not)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        local = local | _bound_names(node) if not isinstance(node, ast.Lambda) else \
            local | {a.arg for a in node.args.args}
    used: set[str] = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id not in local:
            used.add(child.id)
        used |= _loads(child, local)
    return used


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


@functools.lru_cache(maxsize=None)
def _parsed() -> tuple[str, ast.Module]:
    with open(SOURCE, encoding="utf-8") as fh:
        source = fh.read()
    return source, ast.parse(source)


@functools.lru_cache(maxsize=None)
def layout() -> tuple[list[tuple[int, str]], dict[str, int], list[tuple[str, str, str, str]]]:
    """The banners, each top-level name's section index, and every upward reference as
    ``(definition, its section, name used, the name's section)``."""
    source, tree = _parsed()
    banners = _banners(source.splitlines())
    starts = [line for line, _ in banners]

    def section(lineno: int) -> int:
        return max((i for i, start in enumerate(starts) if start <= lineno), default=-1)
    where: dict[str, int] = {}
    for node in tree.body:
        for name in _defined(node):
            where.setdefault(name, section(node.lineno))
    upward = []
    for node in tree.body:
        names = _defined(node)
        if not names:
            continue
        here = section(node.lineno)
        for used in sorted(_loads(node) - set(dir(builtins))):
            if where.get(used, -1) > here:
                upward.append((names[0], banners[here][1], used, banners[where[used]][1]))
    return banners, where, upward


class Layout(unittest.TestCase):
    def test_no_definition_uses_a_later_section(self):
        _, _, upward = layout()
        found = [(d, s, u, t) for d, s, u, t in upward if (d, u) not in UPWARD_ALLOWED]
        self.assertEqual(found, [], "move the small definition into the section that uses it first "
                                    "(or above), or list it in UPWARD_ALLOWED with the reason")

    def test_the_allowed_exceptions_are_still_needed(self):
        _, _, upward = layout()
        self.assertEqual(sorted(set(UPWARD_ALLOWED) - {(d, u) for d, _, u, _ in upward}), [])

    def test_the_checker_sees_an_upward_reference(self):
        # a use of a later section's name is reported; a local variable of the same name is not
        self.assertIn("iso_now", _loads(ast.parse("def f():\n    return iso_now()\n").body[0]))
        self.assertNotIn("main", _loads(ast.parse("def f(m):\n    main = m\n    return main\n").body[0]))

    def test_the_module_docstring_lists_every_section_in_order(self):
        banners, _, _ = layout()
        doc = ast.get_docstring(_parsed()[1]) or ""
        listed = doc.split("Sections, low layers first:", 1)[1]
        named = [re.sub(r"\s*\(.*?\)", "", part).strip().lower() for part in re.sub(r"\s+", " ", listed).split("->")]
        self.assertEqual(named, [re.sub(r"\s*\(.*?\)", "", name).strip().lower() for _, name in banners])


class BackendSeam(unittest.TestCase):
    """The CLI, the workflow and the runtime ask the backend; they never ask which backend it is."""

    def test_no_code_outside_the_backends_branches_on_the_kind_of_backend(self):
        banners, _, _ = layout()
        source, tree = _parsed()
        first = next(line for line, name in banners if name.startswith("Agent runtime"))
        found = []
        for node in ast.walk(tree):
            if getattr(node, "lineno", 0) < first:
                continue
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
                if any(isinstance(p, ast.Attribute) and p.attr == "kind" and
                       ast.unparse(p.value).split(".")[-1] in ("backend", "state") for p in parts):
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance" and \
                    re.search(r"\b(LocalState|PostgresState)\b", ast.unparse(node)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        self.assertEqual(found, [])

    def test_the_cli_calls_no_method_only_one_backend_has(self):
        import flower
        shared = set(dir(flower.StateBackend))
        for backend in (flower.LocalState, flower.PostgresState):
            public = {n for n in vars(backend) if not n.startswith("_") and callable(getattr(backend, n))}
            only_here = public - shared
            source = _parsed()[0]
            first = source.index("\n# --- Agent runtime")
            used = {m for m in only_here if re.search(rf"\b(backend|state|self\.state)\.{m}\(", source[first:])}
            self.assertEqual(used, set(), backend.__name__)


if __name__ == "__main__":
    unittest.main()
