"""Generated bad input: every public callable of ``mha``, one argument at a time made wrong.

The callables are discovered (``mha.__all__``: functions, classes' constructors, ``forward``
and other public methods); each has a *recipe*, a valid call, in ``RECIPES``, or a reason in
``NOT_GENERATED``; ``test_every_public_callable_has_a_recipe_or_a_reason`` fails the day a
public name is added without either. From a recipe, hypothesis replaces one argument by a
wrong value chosen from the argument's annotation in the signature: wrong Python types,
wrong dtypes, wrong numbers of dimensions, empty and huge sizes, NaN and inf, and for every
tensor a copy on the ``meta`` device and stride-0 ``expand`` views of about ``HUGE`` elements
(free to make, far over budget to compute from: the size of an output follows from them).
Each call must give

- a ``ValueError`` or ``TypeError`` whose message names the argument (a clear error), or
- a result (a documented one: the input was acceptable), without NaN, unless an input held
  NaN or inf and the callable's docstring says they flow through (``NAN_THROUGH``, checked
  by ``test_nan_through_is_documented``),

and never another exception from inside torch, never a call that runs past ``TIME_LIMIT``
seconds or allocates past a 64 MiB budget (``MemoryBudgetError``, raised before allocating, is
a clear error: its message names the tensor, its shape and its size). 57 callables, 2,259
wrong values in all, up to 40 drawn per callable. ``tests/generated_bad_inputs.py`` lists all
2,259 as a table for ``tools/bad_input_tally.py --table generated_bad_inputs``.
"""

from __future__ import annotations

import inspect
import math
import signal
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import sympy.printing  # noqa: F401 (torch imports it lazily: an alarm mid-import would break it)
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mha

TIME_LIMIT = 10  # seconds per call
BUDGET = 64 * 2**20  # bytes: any tensor over this must be refused before it is made
EXAMPLES = 40  # hypothesis examples per callable (of 5 to 107 wrong values each)


def r(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def softmaxed(*shape):
    return torch.softmax(r(*shape), dim=-1)


def seeded():
    return torch.Generator().manual_seed(0)


def small_layer(**kw):
    torch.manual_seed(0)
    return mha.MultiHeadAttention(8, 2, **kw)


def small_decoder():
    torch.manual_seed(0)
    return mha.TinyDecoder(16, 12, embed_dim=8, num_heads=2, num_layers=1)


def small_translator():
    torch.manual_seed(0)
    return mha.TinyTranslator(6, 13, 12, 6, embed_dim=8, num_heads=2, num_layers=1)


def small_mla():
    torch.manual_seed(0)
    return mha.MultiHeadLatentAttention(8, 2, latent_dim=4, rope_dim=2)


def gated_loss(batch, gates):
    return (gates * torch.arange(1.0, 1.0 + gates.numel()).view_as(gates)).sum()


def ids(*shape, high=16):
    return torch.randint(high, shape, generator=seeded())


@dataclass(frozen=True)
class Recipe:
    """A valid call: ``make()`` returns ``(callable, keyword arguments)``, fresh each time."""
    make: Callable[[], tuple[Callable, dict]]


def call(fn, **kwargs) -> Recipe:
    return Recipe(lambda: (fn, {k: v() if callable(v) and not isinstance(v, torch.nn.Module)
                                and k not in CALLABLE_ARGS else v
                                for k, v in kwargs.items()}))


def method(make_object, name, **kwargs) -> Recipe:
    def make():
        obj = make_object()
        return getattr(obj, name), {k: v() if callable(v) and k not in CALLABLE_ARGS else v
                                    for k, v in kwargs.items()}
    return Recipe(make)


CALLABLE_ARGS = {"loss_fn", "evaluate", "importance", "make_attention"}  # values that are functions

RECIPES: dict[str, Recipe] = {
    "set_memory_budget": call(mha.set_memory_budget, nbytes=2**30),
    "set_debug": call(mha.set_debug, flag=True),
    "attention": call(mha.attention, query=lambda: r(2, 3, 4), key=lambda: r(2, 5, 4, seed=1),
                      value=lambda: r(2, 5, 6, seed=2),
                      mask=lambda: torch.ones(3, 5, dtype=torch.bool), scale=0.5,
                      is_causal=False, dropout=0.0),
    "self_attention": call(mha.self_attention, x=lambda: r(2, 3, 4),
                           mask=lambda: torch.ones(3, 3, dtype=torch.bool)),
    "diagonal_violations": call(mha.diagonal_violations, weights=lambda: softmaxed(2, 3, 3)),
    "chunked_attention": call(mha.chunked_attention, query=lambda: r(2, 5, 4),
                              key=lambda: r(2, 7, 4, seed=1), value=lambda: r(2, 7, 3, seed=2),
                              chunk_size=3, scale=0.5, causal=True),
    "encoding_frequencies": call(mha.encoding_frequencies, dim=8, base=100.0),
    "sinusoidal_encoding": call(mha.sinusoidal_encoding, num_positions=5, dim=8, base=100.0,
                                dtype=torch.float64),
    "relative_rotation": call(mha.relative_rotation, offset=2, dim=8, base=100.0,
                              dtype=torch.float64),
    "apply_rotary": call(mha.apply_rotary, x=lambda: r(2, 2, 5, 4),
                         positions=lambda: torch.arange(5), base=100.0),
    "alibi_slopes": call(mha.alibi_slopes, num_heads=4),
    "alibi_bias": call(mha.alibi_bias, num_heads=4, num_positions=5, causal=True,
                       dtype=torch.float32),
    "repeat_kv": call(mha.repeat_kv, x=lambda: r(2, 2, 3, 4), groups=2),
    "pool_kv_heads": call(mha.pool_kv_heads, module=lambda: small_layer(), num_kv_heads=1),
    "prune_heads": call(mha.prune_heads, module=lambda: small_layer(), heads=[0]),
    "head_importance": call(mha.head_importance, loss_fn=gated_loss, batches=lambda: [0, 1],
                            num_layers=2, num_heads=3, normalize_layers=True),
    "head_confidence": call(mha.head_confidence, weights=lambda: softmaxed(2, 3, 4, 4),
                            token_mask=lambda: torch.ones(2, 4, dtype=torch.bool),
                            key_mask=lambda: torch.ones(2, 4, dtype=torch.bool)),
    "relative_offsets": call(mha.relative_offsets, weights=lambda: softmaxed(2, 3, 4, 4),
                             token_mask=lambda: torch.ones(2, 4, dtype=torch.bool)),
    "positional_heads": call(mha.positional_heads, weights=lambda: softmaxed(2, 3, 4, 4),
                             token_mask=lambda: torch.ones(2, 4, dtype=torch.bool),
                             threshold=0.5),
    "lookup_batch": call(mha.lookup_batch, batch_size=2, seq_len=4, vocab_size=6,
                         generator=seeded),
    "lookup_targets": call(mha.lookup_targets, tokens=lambda: ids(2, 5, high=6)),
    "token_accuracy": call(mha.token_accuracy, logits=lambda: r(2, 3, 4),
                           targets=lambda: ids(2, 3, high=4)),
    "pruning_order": call(mha.pruning_order, scores=lambda: r(2, 3)),
    "masks_along": call(mha.masks_along, order=[(0, 1), (1, 0)], shape=(2, 2)),
    "pruning_curve": call(mha.pruning_curve, evaluate=lambda gates: float(gates.sum()),
                          order=[(0, 1)], shape=(2, 2)),
    "iterative_pruning_order": call(mha.iterative_pruning_order,
                                    importance=lambda gates: gates.clone(), shape=(2, 2)),
    "hard_concrete_sample": call(mha.hard_concrete_sample, log_alpha=lambda: r(2, 3),
                                 u=lambda: torch.rand(2, 3, generator=seeded()),
                                 temperature=0.5, stretch=(-0.1, 1.1)),
    "prob_nonzero": call(mha.prob_nonzero, log_alpha=lambda: r(2, 3), temperature=0.5,
                         stretch=(-0.1, 1.1)),
    "HardConcreteGates": call(mha.HardConcreteGates, shape=(2, 3), temperature=0.5,
                              stretch=(-0.1, 1.1), init_log_alpha=1.0),
    "HardConcreteGates.forward": method(lambda: mha.HardConcreteGates((2, 3)), "forward",
                                        batch=4, generator=seeded),
    "same_token_weight": call(mha.same_token_weight, weights=lambda: softmaxed(2, 3, 4, 4),
                              tokens=lambda: ids(2, 4, high=3)),
    "SelfAttention": call(mha.SelfAttention, embed_dim=8, key_dim=4, value_dim=6, bias=True),
    "SelfAttention.forward": method(lambda: mha.SelfAttention(8, 4), "forward",
                                    x=lambda: r(2, 3, 8)),
    "MultiHeadAttention": call(mha.MultiHeadAttention, embed_dim=8, num_heads=2, kdim=6,
                               vdim=5, bias=True, head_dim=4, num_kv_heads=1, dropout=0.1),
    # cross-attention (a key of its own) takes no cache: DecoderBlock.forward's recipe has one
    "MultiHeadAttention.forward": method(
        lambda: small_layer(num_kv_heads=1), "forward", query=lambda: r(2, 3, 8),
        key=lambda: r(2, 4, 8, seed=1), value=lambda: r(2, 4, 8, seed=2),
        mask=lambda: torch.ones(3, 4, dtype=torch.bool), is_causal=True,
        head_mask=lambda: torch.ones(2), need_weights=True,
        key_padding_mask=lambda: torch.zeros(2, 4, dtype=torch.bool)),
    "MultiHeadAttention.from_torch": call(
        mha.MultiHeadAttention.from_torch, module=lambda: torch.nn.MultiheadAttention(8, 2)),
    "SplitInputAttention": call(mha.SplitInputAttention, embed_dim=8, num_heads=2, bias=True),
    "RotaryMultiHeadAttention": call(mha.RotaryMultiHeadAttention, embed_dim=8, num_heads=2,
                                     bias=True, head_dim=4, base=100.0, num_kv_heads=1,
                                     dropout=0.1),
    "RotaryMultiHeadAttention.forward": method(
        lambda: mha.RotaryMultiHeadAttention(8, 2), "forward", x=lambda: r(2, 3, 8),
        positions=lambda: torch.arange(3), mask=lambda: torch.ones(3, 3, dtype=torch.bool)),
    "KVCache.append": method(mha.KVCache, "append", keys=lambda: r(2, 1, 3, 4),
                             values=lambda: r(2, 1, 3, 5, seed=1)),
    "MultiHeadLatentAttention": call(mha.MultiHeadLatentAttention, embed_dim=8, num_heads=2,
                                     latent_dim=4, rope_dim=2, head_dim=4, base=100.0),
    "MultiHeadLatentAttention.forward": method(
        small_mla, "forward", x=lambda: r(2, 3, 8), cache=mha.LatentCache, absorb=True,
        head_mask=lambda: torch.ones(2), is_causal=True, need_weights=False),
    "LatentCache.append": method(mha.LatentCache, "append", latents=lambda: r(2, 3, 4),
                                 rope_keys=lambda: r(2, 1, 3, 2, seed=1)),
    "EncoderBlock": call(mha.EncoderBlock, embed_dim=8, num_heads=2, mlp_dim=16),
    "EncoderBlock.forward": method(lambda: mha.EncoderBlock(8, 2, 16), "forward",
                                   x=lambda: r(2, 3, 8), head_mask=lambda: torch.ones(2),
                                   need_weights=True),
    "DecoderBlock": call(mha.DecoderBlock, attn=lambda: small_layer(), embed_dim=8, mlp_dim=16),
    "DecoderBlock.forward": method(lambda: mha.DecoderBlock(small_layer(), 8, 16), "forward",
                                   x=lambda: r(2, 3, 8), cache=mha.KVCache,
                                   head_mask=lambda: torch.ones(2)),
    "TinyDecoder": call(mha.TinyDecoder, vocab_size=16, max_len=12, embed_dim=8, num_heads=2,
                        num_kv_heads=2, num_layers=1, mlp_dim=16,
                        make_attention=lambda: mha.MultiHeadAttention(8, 2)),
    "TinyDecoder.forward": method(small_decoder, "forward", tokens=lambda: ids(2, 3),
                                  caches=lambda: [mha.KVCache()],
                                  head_mask=lambda: torch.ones(1, 2)),
    "generate": call(mha.generate, model=small_decoder, prompt=lambda: ids(1, 2), steps=2,
                     use_cache=True, temperature=1.0, generator=seeded),
    "bits_per_byte": call(mha.bits_per_byte, model=small_decoder,
                          data=lambda: torch.arange(100) % 16, length=4, num_windows=3,
                          head_mask=lambda: torch.ones(1, 2)),
    "TinyTranslator": call(mha.TinyTranslator, source_vocab=6, target_vocab=13, num_classes=12,
                           max_len=6, embed_dim=8, num_heads=2, num_layers=1, mlp_dim=16),
    "TinyTranslator.forward": method(small_translator, "forward",
                                     source=lambda: ids(2, 3, high=6),
                                     target_in=lambda: ids(2, 3, high=13),
                                     head_mask=lambda: torch.ones(3, 1, 2)),
    "translation_dictionary": call(mha.translation_dictionary, vocab_size=6, seed=0),
    "translation_batch": call(mha.translation_batch, batch_size=2, seq_len=3,
                              dictionary=lambda: mha.translation_dictionary(6),
                              generator=seeded),
    "agreement_translation_batch": call(mha.agreement_translation_batch, batch_size=2,
                                        seq_len=3,
                                        dictionary=lambda: mha.translation_dictionary(6),
                                        generator=seeded),
    "text_splits": call(mha.text_splits, fraction=0.5),
    "train_decoder": call(mha.train_decoder, model=small_decoder,
                          data=lambda: torch.arange(60) % 16, steps=2, batch_size=2, length=4,
                          lr=1e-2, seed=0, stop_after=1),
}

#: public callables without a generated recipe, and why (the hand tables cover most of them)
NOT_GENERATED = {
    "MemoryBudgetError": "an exception class",
    "memory_budget": "a context manager around set_memory_budget (which is generated)",
    "get_memory_budget": "no arguments", "get_debug": "no arguments",
    "KVCache": "no arguments (its append is generated)",
    "LatentCache": "no arguments (its append is generated)",
    "train_lookup": "trains a model (seconds per call); tests/bad_inputs.py",
    "relative_error": "evaluates a trained model; tests/bad_inputs.py",
    "train_lookup_encoder": "trains for minutes", "build_decoder": "a name from a fixed list",
    "load_decoder": "loads shipped weights", "build_lookup_encoder": "no arguments",
    "load_lookup_encoder": "no arguments", "build_translator": "no arguments",
    "load_translator": "loads shipped weights",
    "build_agreement_translator": "no arguments",
    "load_agreement_translator": "loads shipped weights",
    "pretrained": "loads a pretrained model (seconds); tests/test_pretrained.py",
    "spearman_difference_bootstrap": "statistics on arrays; tests/test_bootstrap.py",
    "measure": "timings and memory of the machine", "cost": "formulas of Python ints",
    "dataflow": "figures", "Diagram": "figures", "Notation": "figures",
    "attention_explorer": "an interactive figure",
    "position_task": "chapter 6's toy task: not yet given recipes",
    "lookup_task": "chapter 3's task: not yet given a recipe",
    "LookupModel": "chapter 3: not yet given a recipe",
    "additive_scores": "chapter 1: not yet given a recipe",
    "AdditiveScore": "chapter 1: not yet given a recipe",
    "GridSelfAttention": "chapter 5: not yet given a recipe",
    "conv_to_attention": "chapter 5: not yet given a recipe",
    "quadratic_encoding": "chapter 5: not yet given a recipe",
    "relative_scores": "chapter 5: not yet given a recipe",
    "TinyEncoder": "chapter 7: not yet given a recipe",
}


def public_callables() -> list[str]:
    """Every public function, class, and public method (with parameters) of a class."""
    names = []
    for name in mha.__all__:
        obj = getattr(mha, name)
        if isinstance(obj, types.ModuleType) or not callable(obj):
            names.append(name)
            continue
        names.append(name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, value in vars(obj).items():
                if attr.startswith("_") or not callable(value) and not isinstance(
                        value, classmethod | staticmethod):
                    continue
                function = value.__func__ if isinstance(value, classmethod | staticmethod) \
                    else value
                params = [p for p in inspect.signature(function).parameters
                          if p not in ("self", "cls")]
                if params:
                    names.append(f"{name}.{attr}")
    return names


def test_every_public_callable_has_a_recipe_or_a_reason():
    missing = [name for name in public_callables()
               if name not in RECIPES and name not in NOT_GENERATED
               and name.split(".")[0] not in NOT_GENERATED]
    assert not missing, f"give these a recipe in RECIPES (or a reason in NOT_GENERATED): " \
                        f"{missing}"
    for recipe in RECIPES.values():  # every recipe is a valid call
        fn, kwargs = recipe.make()
        with mha.memory_budget(BUDGET):
            fn(**kwargs)


def test_nan_through_is_documented():
    """A callable may let NaN through only if its docstring says so."""
    for name in NAN_THROUGH:
        fn, _ = RECIPES[name].make()
        assert "NaN" in (inspect.getdoc(fn) or ""), f"{name}'s docstring does not mention NaN"


# --- wrong values, from the annotation ----------------------------------------------------



HUGE = 2**36  # elements of an expanded view: 256 GiB as float32, an hour to reduce on one core


def huge_view(valid: torch.Tensor, dim: int) -> torch.Tensor:
    """``valid`` with dimension ``dim`` grown (a stride-0 ``expand``) to about HUGE elements."""
    rest = max(1, valid.numel() // max(1, valid.shape[dim]))
    shape = list(valid.shape)
    shape[dim] = max(2, HUGE // rest)
    return valid.narrow(dim, 0, 1).expand(shape)


def tensor_mutations(valid: torch.Tensor) -> list[tuple[str, Callable[[], object]]]:
    shape = tuple(valid.shape)
    out = [
        ("list", lambda: valid.tolist()),
        ("numpy", lambda: valid.numpy()),
        ("str", lambda: "tensor"),
        ("float", lambda: 1.5),
        ("0-d", lambda: torch.tensor(1.0)),
        ("one more dim", lambda: valid[None].repeat(3, *[1] * valid.dim())),
        ("flattened", lambda: valid.flatten()),
        ("complex", lambda: torch.zeros(shape, dtype=torch.complex64)),
        ("float64", lambda: valid.double() if valid.is_floating_point() else valid.double()),
        ("int64", lambda: valid.long() if valid.is_floating_point() else valid.long() + 1000),
        ("bool", lambda: valid != 0),
        ("empty last", lambda: valid[..., :0]),
        ("empty first", lambda: valid[:0]),
        ("wider last", lambda: torch.cat([valid, valid], -1)),
    ]
    if valid.dim():
        # stride-0 views of HUGE elements: free to make, far over any budget to compute from
        out.append(("meta", lambda: valid.to("meta")))
        out.append(("expanded huge", lambda: huge_view(valid, 0)))
        if valid.dim() >= 2:
            out.append(("expanded huge tokens", lambda: huge_view(valid, valid.dim() - 2)))
    if valid.is_floating_point():
        out += [("nan", lambda: valid.flatten().index_fill(0, torch.tensor([0]), math.nan)
                 .view_as(valid)),
                ("inf", lambda: torch.full_like(valid, math.inf))]
    elif valid.dtype != torch.bool:
        out += [("negative", lambda: valid - 1000)]
    return out


INTS = [("bool", True), ("float", 2.5), ("str", "3"), ("negative", -1), ("zero", 0),
        ("huge", 2**40), ("tensor", torch.tensor(2)), ("numpy", np.int64(2)), ("nan", math.nan)]
FLOATS = [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), ("str", "1"),
          ("bool", True), ("tensor", torch.tensor(0.5)), ("huge int", 10**400), ("zero", 0.0),
          ("negative", -2.0)]
FLAGS = [("int", 1), ("str", "yes"), ("float", 0.0), ("tensor", torch.tensor(True))]
OTHERS = [("object", object()), ("str", "x"), ("int", 7), ("list", [1])]


def mutations(annotation: str, valid: object) -> list[tuple[str, Callable[[], object]]]:
    annotation = annotation if isinstance(annotation, str) else getattr(
        annotation, "__name__", str(annotation))
    if isinstance(valid, torch.Tensor):
        found = tensor_mutations(valid)
    elif "bool" in annotation and "Tensor" not in annotation:
        found = [(k, lambda v=v: v) for k, v in FLAGS]
    elif "float" in annotation and "Tensor" not in annotation and not isinstance(valid, tuple):
        found = [(k, lambda v=v: v) for k, v in FLOATS]
    elif "int" in annotation and "Tensor" not in annotation and not isinstance(valid, tuple):
        found = [(k, lambda v=v: v) for k, v in INTS]
    elif isinstance(valid, tuple):
        found = [(k, lambda v=v: v) for k, v in [
            ("str", "ab"), ("one entry", valid[:1]), ("floats", tuple(float(x) + 0.5
                                                                       for x in valid)),
            ("negative", tuple(-abs(x) - 1 for x in valid)), ("nan", (math.nan,) * len(valid)),
            ("huge", tuple(2**40 for _ in valid))]]
    else:
        found = [(k, lambda v=v: v) for k, v in OTHERS]
    if "None" not in annotation:
        found.append(("None", lambda: None))
    return found


NEEDS_GRAD = {"head_importance", "train_decoder"}  # they differentiate: not under no_grad
NONFINITE_KINDS = ("nan", "inf", "-inf")

#: callables whose docstrings say NaN or inf inputs reach the outputs (the rule of
#: mha.attention: nothing non-finite is hidden); a NaN out of any other, even from a NaN
#: input, fails
NAN_THROUGH = {
    "attention", "self_attention", "chunked_attention", "apply_rotary", "repeat_kv",
    "SelfAttention.forward", "MultiHeadAttention.forward", "RotaryMultiHeadAttention.forward",
    "MultiHeadLatentAttention.forward", "EncoderBlock.forward", "DecoderBlock.forward",
    "KVCache.append", "LatentCache.append",
}


class Timeout(Exception):
    pass


def _alarm(*_):
    raise Timeout()


def has_nan(result) -> bool:
    if isinstance(result, torch.Tensor):
        return result.is_floating_point() and result.device.type != "meta" \
            and bool(result.isnan().any())
    if isinstance(result, tuple | list):
        return any(has_nan(item) for item in result)
    if isinstance(result, float):
        return math.isnan(result)
    return False


def call_mutated(name: str, parameter: str, kind: str) -> object:
    """The recipe of ``name`` with ``parameter`` replaced by the wrong value ``kind``, called
    under the test's memory budget."""
    fn, kwargs = RECIPES[name].make()
    annotation = inspect.signature(fn).parameters[parameter].annotation
    options = dict(mutations(annotation, kwargs.get(parameter)))
    kwargs[parameter] = options[kind]()
    with mha.memory_budget(BUDGET), torch.no_grad() if name not in NEEDS_GRAD \
            else torch.enable_grad():
        return fn(**kwargs)


def is_clear(parameter: str, error: BaseException) -> bool:
    """A clear refusal: the budget's (raised before allocating; its message names the tensor,
    its shape and size), or a ValueError/TypeError whose message names the argument."""
    if isinstance(error, mha.MemoryBudgetError):
        return True
    message = str(error).lower()
    return isinstance(error, ValueError | TypeError) and (
        parameter.lower().replace("_", "") in message.replace("_", "")
        or parameter.lower() in message)


def is_acceptable(name: str, kind: str, result: object) -> bool:
    """A result is acceptable without NaN; with NaN only when the input held NaN or inf and
    the callable documents that they flow through (``NAN_THROUGH``)."""
    return not has_nan(result) or (kind in NONFINITE_KINDS and name in NAN_THROUGH)


def run_mutated(name: str, parameter: str, kind: str) -> None:
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT)
    try:
        result = call_mutated(name, parameter, kind)
    except Timeout:
        pytest.fail(f"{name}({parameter}={kind}) ran past {TIME_LIMIT} s")
    except Exception as error:  # noqa: BLE001 (any other class is the failure we look for)
        assert is_clear(parameter, error), \
            f"{name}({parameter}={kind}): cryptic {type(error).__name__}: {error}"
        return
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert is_acceptable(name, kind, result), \
        f"{name}({parameter}={kind}): NaN out, and {name} does not document it" \
        + ("" if kind in NONFINITE_KINDS else " (the inputs were finite)")


def cases_of(name: str) -> list[tuple[str, str]]:
    fn, kwargs = RECIPES[name].make()
    signature = inspect.signature(fn)
    return [(parameter, kind) for parameter, value in kwargs.items()
            for kind, _ in mutations(signature.parameters[parameter].annotation, value)]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_generated_bad_inputs(name):
    cases = cases_of(name)

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(cases))
    def check(case):
        run_mutated(name, *case)

    check()
