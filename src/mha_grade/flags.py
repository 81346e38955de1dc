"""Flags for code that deserves a human look: it reaches for the machine or the grading
machinery instead of solving the exercise (none of it can change a grade)."""

from __future__ import annotations

import ast
import re
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mha_grade.assignments import Assignment




# Code that reaches for the machine or the grading machinery instead of solving the exercise.
# None of it can change a grade (the verdicts are computed outside the sandbox); a flag tells
# the instructor that someone tried. Only cells that differ from every cell of the instructor's
# notebook are read, so the setup cell and the chapter's own code never raise a flag.
SUSPICIOUS = {
    "reads /proc or secrets": re.compile(r"/proc\b|\benviron\b|\.ssh\b|getenv"),
    "processes": re.compile(r"\bsubprocess\b|\bfork\w*|\bos\.system\b|\bpty\b|start_new_"
                            r"session|\bsetsid\b|\bexec[lv]p?e?\b|\w*spawn\w*|\bpopen\b|"
                            r"\bsystem\s*\(|\bkill(pg)?\b|\bmultiprocessing\b|\bdaemon\b"),
    # work in another thread escapes the run-time watch on the answer (mha.answer_watch)
    "threads": re.compile(r"\bthreading\b|\b_thread\b|\bconcurrent\.futures\b|"
                          r"\bThreadPool\w*|\bjit\.fork\b|\bjit\._fork\b"),
    "shell escapes": re.compile(r"(?m)^[ \t]*!|%%?(bash|sh|script|system|sx)\b|get_ipython\b"),
    "network": re.compile(r"\bsocket\b|\burllib\b|\brequests\.|\bhttp\.client\b"),
    # ops of one's own (torch.library) run unseen inside them; the garbage collector hands out
    # any object, the watch on the answer included (outside attack, round 5)
    "low-level": re.compile(r"\bctypes\b|\bcffi\b|\bptrace\b|\bsys\.settrace\b|"
                            r"\btorch\.library\b|\bcustom_op\b|\bLibrary\(|"
                            r"\bget_objects\b|\bget_referrers\b|\bget_referents\b"),
    "patches the grading": re.compile(r"\bmha\.(exercises|checks)\b|"
                                      r"from\s+mha\s+import[^\n]{0,200}\b(exercises|checks)\b|"
                                      r"__torch_function__|\bsys\.modules\b|"
                                      r"\btorch\.\w+\s*=[^=]|\bsys\.std(out|err)\s*=[^=]|"
                                      # the watch on the answer's calls (mha.answer_watch)
                                      r"\bsetprofile\b|_python_dispatch|dispatch_(stack|mode)|"
                                      r"\banswer_watch\b|\bsys\.monitoring\b"),
    # ways past the answer watch (outside attack, round 7): a module by its dotted name, code run
    # from a string, the frames up to the grader's runner, a function compiled so that torch runs
    # it without entering its code (an alias of torch.compile reads ``torch.compile`` too); the
    # watch's own hook or dispatch mode read (round 41: their record cleared)
    "reaches past the answer watch": re.compile(
        r"\b(getprofile|gettrace)\b|_get_dispatch_stack_at|_get_current_dispatch_mode|"
        r"\bpkgutil\b|\bresolve_name\b|(?<![%\w])timeit\b|\brunpy\b|\bInteractive(Interpreter|"
        r"Console)\b|\bcode\.interact\b|\bfrom\s+code\s+import\b|\bimport\s+code\b|_getframe|"
        r"\bcurrentframe\b|\b_current_frames\b|\bwalk_(stack|tb)\b|"
        r"\b(f_back|f_locals|f_globals|tb_frame|gi_frame|cr_frame|ag_frame)\b|"
        r"\btorch\.(compile|export|jit\.(script|trace))\b|\b_dynamo\b|"
        r"\bfrom\s+torch\s+import\b[^\n]{0,200}\b(compile|export|_dynamo|jit)\b|"
        r"\bfrom\s+torch\.jit\s+import\b[^\n]{0,200}\b(script|trace)\b"),
    "writes startup or package files": re.compile(r"\.ipython|profile_default|__file__|"
                                                  r"site-packages|\.pth\b"),
    "fake verdict": re.compile(r"Exercise \d+\.\d+ \[|✓"),
    "touches the grader's files": re.compile(r"/autograder\b|\bgrades\.csv|\bgrading_log\b|"
                                             r"\bresults\.json|\.csv\.part\b"),
    # getattr or setattr with a name written out, built, or held in a variable
    "obfuscation": re.compile(r"\b[gs]etattr\([^)\n]{0,200}(\+|['\"])|"
                              r"\b[gs]etattr\(\s*[^,()\n]{1,200},\s*\w|"
                              # the builtins, not a method (model.eval(), re.compile():
                              # attack 43 found an honest layer.eval() flagged)
                              # (spaces before the parenthesis too: attack 46, "exec (")
                              # and the builtin itself, called in brackets: "(exec)(" (attack 51)
                              r"(?<!\.)\bexec\s*\)?\s*\(|(?<!\.)\beval\s*\)?\s*\(|__import__|"
                              r"(?<!\.)\bcompile\s*\(|\bimportlib\b|\bvars\s*\(|\bglobals\s*\(|"
                              r"\b__dict__\b|\bimport_module\b|"
                              # a function's insides (a check's wrapper), a module by its name
                              r"__closure__|\bcell_contents\b|__wrapped__|__globals__|"
                              r"__getattribute__|__code__|\bmodules\s*\[\s*['\"]|\.modules\.get\(|"
                              r"\breduce\(\s*getattr\b"),
}


MAX_READ = 64 * 2**10  # characters of one code cell the flags read
MAX_TOTAL = 256 * 2**10  # characters of all a submission's new cells the flags read

# Ways to reach a module's names without writing them: a star import, inspect, operator, dir
INTROSPECTION = re.compile(r"\binspect\b|\battrgetter\b|\bmethodcaller\b|\bdir\(")


def flags(nb: dict, assignment: Assignment) -> list[str]:
    """The flags of a submission, read in its cells that differ from every cell of the
    instructor's notebook. A reference (a check's ``reference_names``) is flagged however it is
    reached: imported by name in any such cell (``from mha import pool_kv_heads``, ``from
    mha.kv_sharing import pool_kv_heads as p``), used in the answer cells of any exercise even
    where the chapter's own code uses it too (``mha.pool_kv_heads``; but not on a line the
    instructor's notebook has verbatim), used elsewhere when the
    chapter's code does not, or reachable through a star import of an mha module; a star import
    or introspection (inspect, operator.attrgetter, dir) of mha is flagged on its own."""
    answers = answer_cells(nb)
    new = [(c["source"], i in answers) for i, c in enumerate(nb["cells"])
           if c["cell_type"] == "code" and c["source"] not in assignment.cells]
    # a cell no honest answer comes near is not read (the patterns below would take minutes on
    # megabytes of crafted text): it is flagged for what it is
    # Python reads identifiers NFKC-normalised (a fullwidth 'ｇetattr' is getattr), and only
    # identifiers: a fullwidth quote inside a string stays a character of that string (the
    # whole text normalised would read a triple-quoted string where Python reads two strings,
    # and what lies between them would go unread). So the cells are parsed as written (the
    # parser normalises the identifiers), and the patterns also read the normalised text and
    # what the parser read; each cell is measured by the longer of its two texts (one
    # character can normalise to 18)
    new = [(text[:MAX_READ + 1], answer) for text, answer in new]
    normal = {text: unicodedata.normalize("NFKC", text) for text, _ in new}
    size = {text: max(len(text), len(normal[text])) for text in normal}
    huge = [text for text, _ in new if size[text] > MAX_READ]
    read, total = [], 0
    for text, answer in new:
        if size[text] <= MAX_READ and total + size[text] <= MAX_TOTAL:
            read.append((text, answer))
            total += size[text]
    if len(read) < len(new) - len(huge):
        huge.append("x" * (MAX_TOTAL + 1))  # the cells past the total are not read either
    new = read
    sources = [text for text, _ in new]
    # read as written (comments, magics) and as Python reads it: ``getattr (sys, "set"
    # "profile")`` and ``mha . checks`` are ``getattr(sys, 'setprofile')`` and ``mha.checks``
    code = "\n".join([*sources, *(normal[text] for text in sources),
                      *(_unparsed(text) for text in sources)])
    found = [name for name, pattern in SUSPICIOUS.items() if pattern.search(code)]
    if huge:
        found.append("code too large to read (a cell over 64 KB, or over 256 KB in all)")
    starred = star_imports(sources)
    if starred or (INTROSPECTION.search(code) and mha_names(sources)):
        found.append("star import or introspection of mha (a way to reach a reference unnamed)")
    chapter_lines = {line.strip() for cell in assignment.cells for line in cell.splitlines()}
    used = (mha_names(sources) - assignment.given) | imported(sources) \
        | mha_names([own_lines(text, chapter_lines) for text, answer in new if answer]) \
        | {f"{module}.{name}" for module in starred for name in bare_names(sources)} \
        | precomputed([text for text, answer in new if not answer],
                      [text for text, answer in new if answer], sources, assignment.cells)
    for exercise, references in assignment.references.items():
        called = [r for r in references if any(
            u == r or (u.split(".")[-1] == r.split(".")[-1]) for u in used)]
        if called:
            found.append(f"calls the reference of exercise {exercise} ({', '.join(called)})")
    return found


def precomputed(others: list[str], answers: list[str], sources: list[str],
                chapter: set[str]) -> set[str]:
    """The mha names whose results cells other than answers store in a variable that an answer
    cell reads (``ROT[d, p] = mha.apply_rotary(eye, ...)`` in a cell of its own, then
    ``x @ ROT[...]`` in the answer: the reference ran before the check called the answer,
    where the run-time watch does not look). An assignment the instructor's notebook makes
    too counts for nothing."""
    read = {node.id for text in answers for tree in _trees(text) for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    if not read:
        return set()
    aliases = {"mha": "mha"}
    for text in sources:  # the names mha's imports bind, in any cell
        for tree in _trees(text):
            _imported_names(tree, aliases, set())
    found: set[str] = set()
    own = {ast.unparse(node) for text in chapter for tree in _trees(text)
           for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AugAssign)}
    for text in others:
        for tree in _trees(text):
            for node in ast.walk(tree):
                if not isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) \
                        or node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {_base(t) for target in targets for t in ast.walk(target)} - {None}
                if names & read and ast.unparse(node) not in own:
                    uses: set[str] = set()
                    _uses(node.value, aliases, uses)
                    found |= {n for n in uses if "." in n}
    return found


def _base(node: ast.AST) -> str | None:
    """The variable an assignment's target stores into: ``ROT`` of ``ROT[d, p]``, ``a.b``."""
    while isinstance(node, ast.Subscript | ast.Attribute | ast.Starred):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def answer_cells(nb: dict) -> set[int]:
    """The code cells of a submission where answers go: tagged ``solution``, or between a
    ``{solution-start}`` and a ``{solution-end}`` (the student may drop a tag, not both)."""
    from mha_grade.exercise_format import SOLUTION_END, SOLUTION_START

    found, inside = set(), False
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            if SOLUTION_START.search(cell["source"]):
                inside = True
            elif SOLUTION_END.search(cell["source"]):
                inside = False
        elif cell["cell_type"] == "code" and (
                inside or "solution" in (cell.get("metadata") or {}).get("tags", [])):
            found.add(index)
    return found


def own_lines(text: str, chapter_lines: set[str]) -> str:
    """``text`` without the lines the instructor's notebook has too (an answer cell keeps the
    chapter's own lines, such as one that compares the answer with mha's)."""
    return "\n".join(line for line in text.splitlines() if line.strip() not in chapter_lines)


def _trees(text: str) -> list[ast.AST]:
    """A cell's syntax trees: the whole cell, or (IPython magics) each line that parses."""
    try:
        return [ast.parse(text)]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        trees = []
        for line in text.splitlines():
            try:
                trees.append(ast.parse(line.strip()))
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
        return trees


def _unparsed(text: str) -> str:
    """A cell as Python reads it, written back without its spacing, comments and split string
    literals (``mha . checks`` is ``mha.checks``); "" where it does not parse."""
    lines = []
    for tree in _trees(text):
        try:
            lines.append(ast.unparse(tree))
        except (RecursionError, ValueError, MemoryError):
            continue
    return "\n".join(lines)


def _imports_from_mha(sources: list[str]):
    for text in sources:
        for tree in _trees(text):
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] \
                        == "mha":
                    yield node


def imported(sources: list[str]) -> set[str]:
    """The mha names imported by name: ``from mha.kv_sharing import pool_kv_heads`` gives
    ``mha.kv_sharing.pool_kv_heads``."""
    return {f"{node.module}.{name.name}" for node in _imports_from_mha(sources)
            for name in node.names if name.name != "*"}


def star_imports(sources: list[str]) -> set[str]:
    """The mha modules imported with ``*``."""
    return {node.module for node in _imports_from_mha(sources)
            if any(name.name == "*" for name in node.names)}


def bare_names(sources: list[str]) -> set[str]:
    """Every plain name the code reads or binds (what a star import may have brought in)."""
    return {node.id for text in sources for tree in _trees(text) for node in ast.walk(tree)
            if isinstance(node, ast.Name)}


def mha_names(sources: list[str]) -> set[str]:
    """The dotted names of ``mha`` that some code uses: ``mha.attention(...)``, ``from mha import
    attention as a`` then ``a(...)``, ``import mha.layers as L`` then ``L.attention``. A cell that
    is not Python (IPython magics) is read line by line, as far as it parses."""
    used: set[str] = set()
    for text in sources:
        for tree in _trees(text):
            aliases = {"mha": "mha"}
            _imported_names(tree, aliases, used)
            _uses(tree, aliases, used)
    return used


def _imported_names(tree: ast.AST, aliases: dict[str, str], used: set[str]) -> None:
    """Add the mha names ``tree`` imports to ``used``, and the names it binds to ``aliases``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                if name.name.split(".")[0] == "mha":
                    used.add(name.name)
                    if name.asname:
                        aliases[name.asname] = name.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mha":
            for name in node.names:
                used.add(f"{node.module}.{name.name}")
                aliases[name.asname or name.name] = f"{node.module}.{name.name}"


def _uses(tree: ast.AST, aliases: dict[str, str], used: set[str]) -> None:
    """Add the dotted mha names ``tree`` reads through ``aliases`` to ``used``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            dotted = _dotted(node)
            if dotted and dotted.split(".")[0] in aliases:
                head, _, rest = dotted.partition(".")
                used.add(".".join(filter(None, [aliases[head], rest])))


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])

