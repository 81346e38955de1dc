"""The package's docs: ``help(mha)`` opens with a quick start that runs, then the conventions;
every public callable (derived from ``mha.__all__``, so a new name is covered) says what it
raises and, on tensors, their shapes and dtypes; a sample of the documented raises happens."""

import doctest
import inspect
import pydoc
import re

import pytest
import torch

import mha


def test_quick_start_in_the_package_docstring_runs_as_written():
    torch.manual_seed(0)
    parser = doctest.DocTestParser()
    test = parser.get_doctest(mha.__doc__, {}, "mha", None, 0)
    assert len(test.examples) >= 8
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_help_opens_with_the_quick_start_and_the_conventions():
    text = pydoc.render_doc(mha, renderer=pydoc.plaintext)
    opening = "\n".join(text.splitlines()[:60])
    for words in ["Quick start", "mha.MultiHeadAttention(embed_dim=16, num_heads=4)",
                  "batch first", "True = may attend", "ValueError"]:
        assert words in opening, words


def public_callables():
    """Every public function and class of ``mha`` and of its public submodules (the modules in
    ``mha.__all__``, such as ``mha.cost``), and the public methods and properties of those
    classes, as ``(name, object)``: derived here, so a new public name is covered."""
    for name in mha.__all__:
        obj = getattr(mha, name)
        if inspect.ismodule(obj):
            for inner in getattr(obj, "__all__", None) or vars(obj):
                member = getattr(obj, inner)
                if (not inner.startswith("_") and callable(member)
                        and not inspect.ismodule(member)
                        and getattr(member, "__module__", None) == obj.__name__):
                    yield from callable_and_members(f"{name}.{inner}", member)
        elif callable(obj):
            yield from callable_and_members(name, obj)


def callable_and_members(name, obj):
    yield name, obj
    if inspect.isclass(obj):
        for attr, member in vars(obj).items():
            if not attr.startswith("_") and (callable(member) or isinstance(
                    member, property | classmethod | staticmethod)):
                yield f"{name}.{attr}", getattr(obj, attr)


def test_public_callables_cover_the_submodules_and_methods():
    names = dict(public_callables())
    for expected in ["attention", "MultiHeadAttention.forward", "KVCache.nbytes",
                     "LatentCache.append", "cost.attention_flops", "pretrained.load_minilm",
                     "dataflow.multi_head_figure", "position_task.previous_token_batch"]:
        assert expected in names, expected
    assert len(names) > 140


def test_every_public_callable_has_a_docstring():
    missing = [name for name, obj in public_callables() if not (obj.__doc__ or "").strip()]
    assert not missing, missing


def test_every_public_callable_says_what_it_raises():
    """A "Raises" sentence or section: the exceptions, or "Raises nothing of its own"."""
    silent = [name for name, obj in public_callables() if "Raises" not in (obj.__doc__ or "")]
    assert not silent, (f"{silent}: say in the docstring what it raises, in a sentence or section "
                        f"with the word 'Raises' (or 'Raises nothing of its own')")


def test_every_constant_a_docstring_names_is_given_by_its_path_from_mha():
    """``help(mha.TinyTranslator)`` shows no module: a constant (``:data:``) it names must be
    written as the path a reader types, ``mha.seq2seq.KINDS``, and that path must exist."""
    unclear = []
    for name, obj in public_callables():
        for target in re.findall(r":data:`~?([\w.]+)`", obj.__doc__ or ""):
            first, *path = target.split(".")
            found = first == "mha" and bool(path)
            obj = mha
            for attr in path if found else ():
                found = found and hasattr(obj, attr)
                obj = getattr(obj, attr, None)
            if not found:
                unclear.append((name, target))
    assert not unclear, unclear


SHAPE = re.compile(r"\([^()]*[,.][^()]*\)|\bscalar\b|\bshape\b|0-d|\b[1-4]-D\b")
DTYPE = re.compile(r"float|bool|int64|int32|integer|\blong\b|dtype|complex", re.IGNORECASE)


def takes_or_returns_tensors(obj) -> bool:
    """Whether ``obj``'s annotations (of a property: its getter's) name ``torch.Tensor``."""
    function = obj.fget if isinstance(obj, property) else obj
    if inspect.isclass(function):
        return False  # the constructor; its tensors (if any) are the methods' business
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False
    annotations = [p.annotation for p in signature.parameters.values()]
    annotations.append(signature.return_annotation)
    return any("Tensor" in (a if isinstance(a, str) else repr(a)) for a in annotations
               if a is not inspect.Parameter.empty)


def test_a_callable_on_tensors_gives_their_shapes_and_dtypes():
    vague = [name for name, obj in public_callables() if takes_or_returns_tensors(obj)
             and not (SHAPE.search(obj.__doc__ or "") and DTYPE.search(obj.__doc__ or ""))]
    assert not vague, vague


def test_the_shape_and_dtype_check_can_fail():
    def vague(x: torch.Tensor) -> torch.Tensor:
        """Returns x. Raises nothing of its own."""
    def exact(x: torch.Tensor) -> torch.Tensor:
        """``x``: any floating ``(B, n)``. Raises nothing of its own."""
    assert takes_or_returns_tensors(vague) and not SHAPE.search(vague.__doc__)
    assert SHAPE.search(exact.__doc__) and DTYPE.search(exact.__doc__)


def module_of(obj) -> str:
    function = obj.fget if isinstance(obj, property) else obj
    return inspect.unwrap(function).__module__


def tiny_decoder():
    torch.manual_seed(0)
    return mha.TinyDecoder(16, 8, embed_dim=8, num_heads=2, num_layers=1)


def huge(*shape):
    """A stride-0 view of ``shape``: free to make, far over any budget to compute from."""
    return torch.zeros(1).expand(*shape)


#: one documented raise per module of the public API, as (public name, a bad call, the class
#: the docstring names, words the message must hold): the call must raise exactly that
RAISES = [
    ("set_memory_budget", lambda: mha.set_memory_budget(-1), ValueError, "nbytes"),
    ("spearman_difference_bootstrap",
     lambda: mha.spearman_difference_bootstrap([1.0, 1.0], [1.0, 2.0], [1.0, 1.0], [0, 1]),
     ValueError, "undefined"),
    ("same_token_weight", lambda: mha.same_token_weight(torch.ones(1, 1, 2, 2),
                                                        torch.ones(1, 2)), ValueError, "tokens"),
    ("relative_scores", lambda: mha.relative_scores(
        huge(1, 10**5, 1), huge(1, 10**5, 1), huge(10**5, 10**5, 1), torch.zeros(1, 1, 1),
        torch.zeros(1, 1, 1), torch.zeros(1, 1, 1), torch.zeros(1, 1), torch.zeros(1, 1)),
     mha.MemoryBudgetError, "encoding"),
    ("cost.kv_cache_bytes", lambda: mha.cost.kv_cache_bytes(1, 1, 1, 1, dtype="float"),
     ValueError, "dtype"),
    ("diagonal_violations", lambda: mha.diagonal_violations(torch.full((2, 2), float("nan"))),
     ValueError, "weights"),
    ("HardConcreteGates.forward", lambda: mha.HardConcreteGates((2, 3))(batch=0), ValueError,
     "batch"),
    ("positional_heads", lambda: mha.positional_heads(torch.full((1, 1, 2, 2), 0.5),
                                                      threshold=2.0), ValueError, "threshold"),
    ("measure.loglog_slope", lambda: mha.measure.loglog_slope([1, 2], [1, -1]), ValueError,
     "positive"),
    ("prune_heads", lambda: mha.prune_heads(mha.MultiHeadAttention(8, 2), [0, 1]), ValueError,
     "heads"),
    ("masks_along", lambda: mha.masks_along([(0, 0), (0, 0)], (2, 2)), ValueError, "order"),
    ("Diagram.arrow", lambda: (lambda d: d.arrow(d.box("x", (0, 0)), d.box("y", (0, 1)),
                                                 via=[(1, "up")]))(mha.Diagram()),
     ValueError, "via[0]"),
    ("dataflow.multi_head_figure", lambda: mha.dataflow.multi_head_figure(weights=1),
     ValueError, "weights"),
    ("attention_explorer", lambda: mha.attention_explorer(["a"], torch.zeros(3)), ValueError,
     "weights"),
    ("alibi_bias", lambda: mha.alibi_bias(4, 10**6), mha.MemoryBudgetError, "alibi_bias"),
    ("self_attention", lambda: mha.self_attention(torch.ones(2, 3, dtype=torch.long)),
     ValueError, "x"),
    ("chunked_attention", lambda: mha.chunked_attention(torch.zeros(2, 4), torch.zeros(3, 4),
                                                        torch.zeros(3, 4), chunk_size=0),
     ValueError, "chunk_size"),
    ("KVCache.append", lambda: mha.KVCache().append(torch.zeros(1, 2, 4),
                                                    torch.zeros(1, 2, 4)), ValueError, "keys"),
    ("LatentCache.append", lambda: mha.LatentCache().append(torch.zeros(1, 2, 4),
                                                            torch.zeros(1, 1, 3, 2)),
     ValueError, "rope_keys"),
    ("repeat_kv", lambda: mha.repeat_kv(torch.zeros(1, 2, 3), 2), ValueError, "x"),
    ("MultiHeadLatentAttention", lambda: mha.MultiHeadLatentAttention(
        8, 2, latent_dim=4, rope_dim=3), ValueError, "rope_dim"),
    ("MultiHeadAttention.from_torch", lambda: mha.MultiHeadAttention.from_torch(
        torch.nn.Linear(2, 2)), ValueError, "module"),
    ("relative_rotation", lambda: mha.relative_rotation(1, 7), ValueError, "dim"),
    ("RotaryMultiHeadAttention", lambda: mha.RotaryMultiHeadAttention(6, 2), ValueError,
     "head_dim"),
    ("additive_scores", lambda: mha.additive_scores(
        torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3, 4), torch.zeros(3, 4),
        torch.zeros(4), bias=torch.zeros(5)), ValueError, "bias"),
    ("SelfAttention.forward", lambda: mha.SelfAttention(8)(torch.zeros(2, 3, 8).double()),
     ValueError, "x"),
    ("SplitInputAttention", lambda: mha.SplitInputAttention(8, 3), ValueError, "num_heads"),
    ("bits_per_byte", lambda: mha.bits_per_byte(tiny_decoder(), torch.arange(100) % 16,
                                                length=9), ValueError, "length"),
    ("TinyEncoder.pruned", lambda: mha.TinyEncoder(6, 4, 5, embed_dim=8, num_heads=2).pruned(
        torch.zeros(2, 2, dtype=torch.bool)), ValueError, "keep"),
    ("pretrained.NoHeads.forward", lambda: mha.pretrained.NoHeads(torch.zeros(4))(
        torch.zeros(1, 2, 3)), ValueError, "query"),
    ("translation_dictionary", lambda: mha.translation_dictionary(1), ValueError,
     "vocab_size"),
    ("load_translator", lambda: mha.load_translator(99), ValueError, "init_seed"),
    ("lookup_task", lambda: mha.lookup_task(10**6, 10**4, 2), mha.MemoryBudgetError,
     "batch"),
    ("token_accuracy", lambda: mha.token_accuracy(torch.zeros(2, 3, 4),
                                                  torch.full((2, 3), -100)), ValueError,
     "targets"),
    ("position_task.order_blind_accuracy",
     lambda: mha.position_task.order_blind_accuracy(0, 4), ValueError, "position"),
    ("text_splits", lambda: mha.text_splits(1.0), ValueError, "fraction"),
]


@pytest.mark.parametrize("name, call, error, words", RAISES, ids=[row[0] for row in RAISES])
def test_a_documented_raise_happens(name, call, error, words):
    obj = dict(public_callables())[name]
    assert error.__name__ in obj.__doc__, f"{name}'s docstring does not name {error.__name__}"
    with pytest.raises(error) as raised:
        call()
    assert type(raised.value) is error, f"{name} raised {type(raised.value).__name__}"
    assert words in str(raised.value)


def test_every_module_of_the_public_api_has_a_documented_raise_checked():
    modules = {module_of(obj) for _, obj in public_callables()}
    names = dict(public_callables())
    checked = {module_of(names[name]) for name, *_ in RAISES}
    assert modules - checked == set(), "add a row to RAISES for each of these"
    assert len(modules) >= 35
